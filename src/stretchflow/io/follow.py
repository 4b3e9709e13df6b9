"""Following live JSON Lines input: a file that grows (``tail -f``) or a directory of files
(issue #19, unbounded local sources).

:func:`follow` returns a :class:`Followed` source. It reads complete lines as they are
appended: a last line without its newline waits for it (the writer may be half-way through).
When no new data has come, it sleeps ``poll`` seconds and looks again (bounded CPU: one
``read`` or ``listdir`` per poll). The input ends by ``until``:

* ``"marker"`` (the default): a line ``{"ts": LAST, "__end__": true}`` — the Spark engine's
  end-of-input line (:func:`stretchflow.spark.streaming.end_marker`), so one directory feeds
  both. The marker is no record; anything after it is not read.
* ``"idle:SECONDS"``: no new data (no new line, no new file) for that long, or the marker.
* ``None`` (or ``"never"``): never (a marker line is skipped); the run stops on SIGINT/SIGTERM
  like any run (:mod:`stretchflow.runtime.signals`: the sinks abort, the previous output
  stays).

At the end condition a last line without newline is taken as it is (the writer is done: the
marker came, or it has been idle for ``SECONDS``), as a finished file's last line is.

**Directory rule.** A directory is read file after file in *name* order (never modification
time, unlike Spark's file stream: files copied together get arbitrary mtimes). Only names
ending in ``.jsonl``, ``.json`` or ``.ndjson`` count, and names starting with ``.`` or ``_``
are ignored, so a writer may write ``.part-7.jsonl.tmp`` and rename it to ``part-7.jsonl``
(atomic). The newest file is followed like a growing file (complete lines only); a file is
finished once a file with a later name exists (its last line then needs no newline) or at the
end condition. Writers must therefore write the files one after the other, in name order; a
file that appears with a name before the one being read is an error naming it (its lines
would otherwise be lost or out of order).

**Watermarks.** A sorted source's tuples are its watermarks (DESIGN, journal §2.3); when the
followed input goes quiet, the source also yields an explicit watermark at the latest
timestamp read (nothing later can be earlier), once per quiet spell. An engine then closes the
windows that timestamp passes and emits their outputs now, not when the next line comes.

**Checkpoints.** Offsets are counted in records the way every file source's are
(:mod:`stretchflow.runtime.checkpoint`): a resumed run re-reads the input from its first line
and skips up to the checkpoint's cut, checking it skips as many records as were read. The
source keeps no ``path`` attribute, so the checkpoint's "input changed (size or modification
time)" check, right for a finished file, does not refuse a file that has grown since.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import SourceError
from ..eventtime import WATERMARK
from .sources import JsonLines, Source

#: the field of the end-of-input line (spark/streaming.py: END_FIELD; a literal here so that
#: the local sources do not import the Spark engine)
END_FIELD = "__end__"
_END = END_FIELD.encode()
#: file names a directory source reads
SUFFIXES = (".jsonl", ".json", ".ndjson")
#: bytes read from a file at a time
CHUNK = 1 << 20


def parse_until(until: Any, counts: bool = False) -> tuple[str, float]:
    """``until`` as ``(kind, amount)``: ``("marker", 0)``, ``("idle", S)``, ``("never", 0)``
    and, with ``counts`` (a message bus), ``("count", N)`` for ``"count:N"``; anything else is
    a ValueError saying what is accepted. The one reading of every live source's end."""
    if until is None or until == "never":
        return "never", 0.0
    if until == "marker":
        return "marker", 0.0
    if isinstance(until, str) and until.startswith("idle:"):
        try:
            s = float(until[5:].rstrip("s"))
        except ValueError:
            s = math.nan
        if s > 0 and math.isfinite(s):
            return "idle", s
    if counts and isinstance(until, str) and until.startswith("count:"):
        n = until[6:]
        if n.isdigit() and int(n) > 0:
            return "count", float(n)
    count = ", 'count:N'" if counts else ""
    raise ValueError(f"until must be 'marker', 'idle:SECONDS' (SECONDS > 0){count} or None "
                     f"(never), got {until!r}")


def follow(path: str | os.PathLike, *, until: str | None = "marker", poll: float = 0.05,
           ts: str | Callable[[Any], Any] = "ts", sorted: bool = True,  # noqa: A002
           watermark: str | None = None, name: str | None = None,
           **event_time: Any) -> Followed:
    """A JSON Lines file or a directory of them, followed as it grows (module docstring).
    ``ts``, ``sorted``, ``watermark`` and ``event_time`` (``max_delay``, ``idle_timeout``,
    ``late``) mean what they mean for :class:`~stretchflow.io.sources.JsonLines`."""
    return Followed(path, until=until, poll=poll, ts=ts, sorted=sorted, watermark=watermark,
                    name=name, **event_time)


class Followed(Source):
    """A growing JSON Lines file, or a directory of them in name order; see the module
    docstring for ``until``, the directory rule, watermarks and checkpoints."""

    def __init__(self, path: str | os.PathLike, *, until: str | None = "marker",
                 poll: float = 0.05, ts: str | Callable[[Any], Any] = "ts",
                 sorted: bool = True, watermark: str | None = None,  # noqa: A002
                 name: str | None = None, **event_time: Any):
        p = Path(path)
        self.until_kind, self.idle_s = parse_until(until)
        if not (isinstance(poll, int | float) and 0 < poll <= 60):
            raise ValueError(f"follow {p}: poll must be in (0, 60] seconds, got {poll!r}")
        self.poll = float(poll)
        # not ``path``: the checkpoint fingerprint would then refuse a grown file on resume
        self.followed = p
        self.directory = p.is_dir()
        self._current = p  # the file being read, for error messages
        self._ts = ts  # for the per-file parser (a field name or a function)
        super().__init__(name or p.name, ts, sorted, watermark, **event_time)

    @property
    def rereadable(self) -> bool:  # type: ignore[override]
        """Whether a second pass (``late="side"``) reads the same records: only when the
        input ends by its marker, not by wall-clock idleness or never."""
        return self.until_kind == "marker"

    def describe_where(self, where: Any) -> str:
        # a line number of the file being read (an order error is found as its line is
        # read); a quiet-spell watermark's own description
        return where if isinstance(where, str) else f"{self._current}:{where}"

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        p = self.followed
        if not p.exists():
            raise SourceError(self.name, str(p), "cannot follow: no such file or directory")
        self._last_ts: float = -math.inf  # the latest data timestamp read
        self._marked: float = -math.inf  # the latest quiet-spell watermark yielded
        self._quiet_since = time.monotonic()
        self._ended = False
        self._n = 0
        self._current = p
        if self.directory:
            yield from self._follow_dir(p)
        else:
            yield from self._follow_file(p, finished=None)

    # -- one file ---------------------------------------------------------------------------
    def _follow_file(self, path: Path, finished: Any) -> Iterator[tuple[Any, Any, Any]]:
        """The records of ``path`` as they come. ``finished()`` says whether a later file has
        appeared (directory mode; then the file is read to its end and left); None for a
        single followed file, which ends only by the end condition."""
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed in finally, across yields
        except OSError as e:
            raise SourceError(self.name, str(path), f"cannot open: {e.strerror}") from e
        self._current = path
        parser = JsonLines(path, ts=self._ts, sorted=self.sorted,
                           watermark=self.watermark_field, name=self.name)
        pending = b""
        line = 0
        try:
            while not self._ended:
                data = f.read(CHUNK)
                if data:
                    self._quiet_since = time.monotonic()
                    buf = pending + data if pending else data
                    cut = buf.rfind(b"\n") + 1
                    pending = buf[cut:]
                    if cut:
                        lines = buf[:cut].split(b"\n")
                        lines.pop()  # after the last newline: empty
                        yield from self._records(parser, lines, line + 1, _END in buf)
                        line += len(lines)
                    continue
                if f.tell() > os.fstat(f.fileno()).st_size:
                    raise SourceError(self.name, str(path),
                                      "the file shrank while followed (truncated or "
                                      "replaced); a followed file may only grow")
                if finished is not None and finished():
                    # a later file exists, so this one's writer is done: the rest of it
                    # (also what came since the read above), its last line with or without
                    # a newline
                    rest = pending + f.read()
                    yield from self._records(parser, rest.split(b"\n"), line + 1, _END in rest)
                    return
                if self._end_due():
                    if pending.strip():
                        yield from self._records(parser, [pending], line + 1, _END in pending)
                    return
                yield from self._quiet()
        finally:
            f.close()

    def _records(self, parser: JsonLines, lines: list[bytes], first: int, scan: bool
                 ) -> Iterator[tuple[Any, Any, Any]]:
        """The lines' records (the file source's own parsing and errors). An end marker is
        no record: it ends the input, except with ``until=None``, which skips it. ``scan``:
        whether the lines may hold one (the caller's one search of its bytes: no per-line
        test on the common path)."""
        start = 0
        if scan:
            for k, text in enumerate(lines):
                if _END in text and _is_marker(text):
                    yield from self._parsed(parser, lines[start:k], first + start)
                    if self.until_kind != "never":
                        self._ended = True
                        return
                    start = k + 1
        yield from self._parsed(parser, lines[start:] if start else lines, first + start)

    def _parsed(self, parser: JsonLines, lines: list[bytes], first: int
                ) -> Iterator[tuple[Any, Any, Any]]:
        n = self._n
        last = self._last_ts
        for ts, rec, where in parser._lines(lines, first):
            if rec is not WATERMARK:
                n += 1
                last = ts
            yield ts, rec, where
        self._n = self.read = n
        self._last_ts = last

    def _end_due(self) -> bool:
        return self.until_kind == "idle" and \
            time.monotonic() - self._quiet_since >= self.idle_s

    def _quiet(self) -> Iterator[tuple[Any, Any, Any]]:
        """Nothing new: a watermark at the latest timestamp once per quiet spell (a sorted
        source only: an unsorted one's watermarks are its own), then a poll's sleep."""
        if self.sorted and self._last_ts > self._marked:
            self._marked = self._last_ts
            yield self._last_ts, WATERMARK, f"{self.followed} (idle)"
        time.sleep(self.poll)

    # -- a directory ------------------------------------------------------------------------
    def _follow_dir(self, d: Path) -> Iterator[tuple[Any, Any, Any]]:
        taken: set[str] = set()  # the files started
        top: str | None = None  # the latest of them
        while not self._ended:
            names = self._listing(d, taken, top)
            after = [n for n in names if top is None or n > top]
            if not after:
                if self._end_due():
                    return
                yield from self._quiet()
                continue
            top = after[0]
            taken.add(top)
            self._quiet_since = time.monotonic()  # a new file is new data

            def later(cur: str = top) -> bool:
                return any(n > cur for n in self._listing(d, taken, cur))

            yield from self._follow_file(d / top, finished=later)

    def _listing(self, d: Path, taken: set[str], top: str | None) -> list[str]:
        """The directory's input files in name order; one named before ``top`` (the latest
        file started) that was not read is an error: it appeared out of name order."""
        try:
            names = sorted(n for n in os.listdir(d)
                           if n.endswith(SUFFIXES) and not n.startswith((".", "_")))
        except OSError as e:
            raise SourceError(self.name, str(d), f"cannot list: {e.strerror}") from e
        if top is not None:
            for n in names:
                if n >= top:
                    break
                if n not in taken:
                    raise SourceError(
                        self.name, str(d / n),
                        f"appeared after {top} was started: the files of a followed "
                        f"directory must appear in name order (write them one after the "
                        f"other, or under a hidden name renamed into place)")
        return names


def _is_marker(text: bytes) -> bool:
    try:
        rec = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return type(rec) is dict and rec.get(END_FIELD) is True
