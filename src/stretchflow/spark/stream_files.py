"""Directory streams on Spark read in *name* order, and the end of a streaming run (issue #19).

**Name order.** Spark's file source orders new files by modification time, and files copied
together get arbitrary mtimes: read out of order, a later file advances the watermark and the
earlier one's rows are late. So the engine never points Spark at the input directory. A
:class:`Stager` per input lists the directory, sorts the names and copies each new file into a
staging directory inside the query's checkpoint (``<checkpoint>/staged/in<i>``), named
``<seq>-<name>.jsonl`` and given a modification time one second after the previous one's
before it is renamed into place (atomic: Spark ignores ``.``-names and the ``*.jsonl`` glob
skips the temporary). Spark's mtime order is then the name order. A copy, not a hard link:
setting a link's mtime would change the user's file. The staged files are the record of what
was handed to Spark, so a resumed query (same checkpoint) continues after the last one; a file
that appears with a name before one already staged is a :class:`SourceError` naming it (its
records would come out of order), as :mod:`stretchflow.io.follow` does. Files must appear
complete (write them under a ``.`` name and rename them), as Spark's own source requires.

**End of input** (``until``, the syntax of :func:`stretchflow.io.follow.parse_until`):
``None``: the files present at the start (Spark's ``availableNow``), the state kept in the
checkpoint for a later run; ``"marker"``: the query runs, new files staged as they come, until
every input's ``__end__`` line has been processed; ``"idle:S"``: the same, or S seconds with no
new file and no new rows in a micro-batch — the engine then stages an end marker at each
input's latest ts itself, which closes every window as a marker does; ``"never"``: until
SIGINT/SIGTERM (the query is stopped at a batch boundary, its checkpoint valid); end
markers are dropped from the staged copies (as ``--follow --until never`` skips them).

**Open windows.** The processor reports, with every group call, the (key, window) states and
the keys the group still holds (:func:`open_counts`); :class:`OpenWindows` keeps the latest
per group (in the checkpoint, so a resumed run knows groups it does not call) and a bounded
run that ends with some left says so in one WARNING line (:func:`warn_open`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import FlowDefinitionError, SourceError
from ..io.follow import END_FIELD, SUFFIXES, parse_until
from ..io.sources import RateSource

log = logging.getLogger(__name__)

#: the staging directories' parent and the open-window record, inside the checkpoint
STAGED = "staged"
OPEN_FILE = "open-windows.json"
#: the original name of the end marker the engine stages itself (``until="idle:S"``): a
#: ``.``-name, which no input file has (the directory listing skips them)
IDLE_END = ".idle-end"
_SEQ = 8  # digits of a staged file's sequence number

#: reads a micro-batch of a source: ``(ts, record, seq)``, record None at the end of input
Reader = Callable[[Any], Iterator[tuple[int, Any, int]]]


def parse_spark_until(until: Any) -> tuple[str, float]:
    """``until`` of a spark streaming run as ``(kind, seconds)``: ``("present", 0)`` for None
    (the files present at the start), else :func:`parse_until`'s reading."""
    if until is None:
        return "present", 0.0
    return parse_until(until)


def local_dir(checkpoint: str) -> Path:
    """The checkpoint as a local directory (a path or a ``file:`` URI): the staging
    directories live there."""
    if checkpoint.startswith("file:"):
        from urllib.parse import urlparse

        return Path(urlparse(checkpoint).path)
    if "://" in checkpoint:
        raise FlowDefinitionError(
            f"spark streaming stages directory inputs in the checkpoint, which must be a local "
            f"directory; got {checkpoint!r}")
    return Path(checkpoint)


def staged_name(seq: int, name: str) -> str:
    return f"{seq:0{_SEQ}d}-{name}.jsonl"


def original_name(staged: str) -> str:
    """``<seq>-<name>.jsonl`` -> ``<name>`` (a name not staged is returned as it is)."""
    head, sep, rest = staged.partition("-")
    if not (sep and head.isdigit() and len(head) == _SEQ and rest.endswith(".jsonl")):
        return staged
    return rest[:-len(".jsonl")]


def _tail(data: bytes) -> tuple[int | None, bool]:
    """The ts of a file's last record line (None if it has none that parses) and whether the
    file holds an end-of-input line; malformed lines are left for the reader to report."""
    import orjson

    ended = False
    if END_FIELD.encode() in data:
        for line in data.splitlines():
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if type(rec) is dict and rec.get(END_FIELD) is True:
                ended = True
                break
    for line in reversed(data.rstrip().splitlines()[-4:]):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if type(rec) is dict and type(rec.get("ts")) is int:
            return rec["ts"], ended
    return None, ended


def _without_end(data: bytes) -> bytes:
    """A file's bytes without its end-of-input lines."""
    import orjson

    if END_FIELD.encode() not in data:
        return data
    keep = []
    for line in data.splitlines(keepends=True):
        try:
            rec = orjson.loads(line) if END_FIELD.encode() in line else None
        except orjson.JSONDecodeError:
            rec = None
        if not (type(rec) is dict and rec.get(END_FIELD) is True):
            keep.append(line)
    return b"".join(keep)


class Stager:
    """Hands the files of one input directory to Spark in name order (module docstring)."""

    def __init__(self, src: str | os.PathLike, stage: Path, name: str, ts_field: str = "ts",
                 skip_end: bool = False):
        self.src, self.stage, self.name, self.ts_field = Path(src), stage, name, ts_field
        self.skip_end = skip_end  # until="never": end markers are dropped, as io.follow does
        stage.mkdir(parents=True, exist_ok=True)
        for tmp in stage.glob(".*.tmp"):  # a staging a killed run left half-way
            tmp.unlink(missing_ok=True)
        staged = sorted(p.name for p in stage.iterdir() if not p.name.startswith("."))
        self.n = len(staged)
        self.done = {original_name(s) for s in staged}
        inputs = [original_name(s) for s in staged if original_name(s) != IDLE_END]
        self.last: str | None = max(inputs) if inputs else None
        self.mtime = 0
        self.last_ts: int | None = None
        self.ended = False
        for s in staged:  # a resumed run: where the previous one stopped
            p = stage / s
            self.mtime = max(self.mtime, int(p.stat().st_mtime))
            ts, ended = _tail(p.read_bytes())
            self.last_ts = ts if ts is not None else self.last_ts
            self.ended = self.ended or ended

    def listing(self) -> list[str]:
        """The input's file names in name order (``.``/``_`` names and other suffixes
        skipped, as io.follow does)."""
        try:
            names = os.listdir(self.src)
        except OSError as e:
            raise SourceError(self.name, str(self.src), f"cannot list the directory ({e})") \
                from None
        return sorted(n for n in names if n.endswith(SUFFIXES) and n[0] not in "._"
                      and (self.src / n).is_file())

    def stage_new(self) -> int:
        """Stages the files that appeared since the last call, in name order; returns how
        many. Nothing after an end-of-input line is staged (the input has ended)."""
        k = 0
        for n in self.listing():
            if n in self.done:
                continue
            if self.last is not None and n < self.last:  # also after the end: a lost file
                raise SourceError(
                    self.name, str(self.src / n),
                    f"appeared after {self.last!r} was read: a directory stream is read in "
                    f"name order, so a new file must sort after every file already read (its "
                    f"records would be out of order); give it a later name")
            if self.ended:
                break
            data = (self.src / n).read_bytes()
            self._put(n, _without_end(data) if self.skip_end else data)
            self.last = n
            k += 1
        return k

    def end(self) -> None:
        """Stages an end-of-input line at the input's latest ts (``until="idle:S"``)."""
        if not self.ended:
            ts = self.last_ts if self.last_ts is not None else 0
            self._put(IDLE_END, f'{{"{self.ts_field}": {ts}, "{END_FIELD}": true}}\n'.encode())

    def _put(self, name: str, data: bytes) -> None:
        final = self.stage / staged_name(self.n, name)
        tmp = self.stage / f".{final.name}.tmp"
        tmp.write_bytes(data)
        # strictly increasing whole seconds: Spark compares mtimes in ms, and files staged
        # within one clock tick would tie
        self.mtime = max(int(time.time()), self.mtime + 1)
        os.utime(tmp, (self.mtime, self.mtime))
        os.replace(tmp, final)
        self.n += 1
        self.done.add(name)
        ts, ended = _tail(data)
        self.last_ts = ts if ts is not None else self.last_ts
        self.ended = self.ended or ended


class LiveInputs:
    """The stagers of a query's directory inputs and the ``until`` rule's idle clock."""

    def __init__(self, stagers: list[Stager], until: Any):
        self.stagers = stagers
        self.kind, self.idle_s = parse_spark_until(until)
        self.last_activity = time.monotonic()
        self.last_batch: int | None = None
        self.idle_ended = False

    def poll(self) -> int:
        """Stages new files (not for ``present``: that run reads what was there at start)."""
        if self.kind == "present":
            return 0
        k = sum(s.stage_new() for s in self.stagers)
        if k:
            self.last_activity = time.monotonic()
        return k

    def watch(self, progress: Any, status: Any) -> None:
        """``idle:S``: resets the idle clock on a micro-batch that read rows; after S quiet
        seconds, with Spark caught up, stages an end marker on every input."""
        if self.kind != "idle" or self.idle_ended:
            return
        if progress is not None:
            batch, rows = _field(progress, "batchId"), _field(progress, "numInputRows")
            if batch != self.last_batch:
                self.last_batch = batch
                if rows:
                    self.last_activity = time.monotonic()
        busy = bool(status and (status.get("isDataAvailable") or status.get("isTriggerActive")))
        if not busy and time.monotonic() - self.last_activity >= self.idle_s:
            for s in self.stagers:
                s.end()
            self.idle_ended = True


def stage_all(sources: list[tuple[int, Any]], checkpoint: str, until: Any) -> tuple[
        LiveInputs, dict[int, str]]:
    """Stagers for the directory inputs ``(i, JsonLines)`` of a query, each staged once now;
    returns them and the staging directory Spark reads per input index."""
    never = parse_spark_until(until)[0] == "never"
    stagers, paths = [], {}
    for i, src in sources:  # a query of rate sources only needs no local checkpoint
        root = local_dir(checkpoint) / STAGED
        st = Stager(src.path, root / f"in{i}", src.name, src.ts_field, skip_end=never)
        st.stage_new()
        stagers.append(st)
        paths[i] = str(st.stage.resolve())
    return LiveInputs(stagers, until), paths


def open_counts(inst: Any) -> tuple[int, int]:
    """The (key, window) states and the keys an O+ instance holds: σ_g is ``{l: {key: ..}}``,
    or for a sliced A+ ``{slice: {key: acc}, NEXT: l}`` (then a state is a key's slice)."""
    states, keys = 0, set()
    for sg in inst.groups:
        for by_key in sg.values():
            if isinstance(by_key, dict):  # not the sliced layout's NEXT boundary
                states += len(by_key)
                keys.update(by_key)
    return states, len(keys)


class OpenWindows:
    """The latest ((key, window) states, keys) each key group reported, kept in the
    checkpoint."""

    def __init__(self, checkpoint: str):
        try:
            self.path: Path | None = local_dir(checkpoint) / OPEN_FILE
        except FlowDefinitionError:
            self.path = None
        self.groups: dict[int, tuple[int, int]] = {}
        if self.path is not None and self.path.exists():
            saved = json.loads(self.path.read_text())
            self.groups = {int(g): (w, k) for g, (w, k) in saved.items()}

    def update(self, rows: Iterator[tuple[int, int, int]]) -> None:
        """``(group, windows, keys)`` rows of a committed micro-batch."""
        changed = False
        for g, w, k in rows:
            if self.groups.get(g) != (w, k):
                self.groups[g], changed = (w, k), True
        if changed and self.path is not None:  # a replayed batch rewrites the same values
            tmp = self.path.with_name(f".{OPEN_FILE}.tmp")
            tmp.write_text(json.dumps({str(g): v for g, v in self.groups.items()}))
            os.replace(tmp, self.path)

    def total(self) -> tuple[int, int]:
        return (sum(w for w, _ in self.groups.values()),
                sum(k for _, k in self.groups.values()))


def warn_open(windows: int, keys: int, say: Callable[[str], None] | None = None) -> str | None:
    """The one WARNING line of a bounded run that ended with windows open (None if none)."""
    if not windows:
        return None
    line = (f"spark streaming: the run ended with windows still open, {keys} key(s) in "
            f"{windows} (key, window) state(s) (no end of input: their outputs are not "
            f"written); end each input directory "
            f"with an __end__ line ({{\"ts\": LAST, \"__end__\": true}}) or run with "
            f"--until idle:SECONDS, or resume with the same --checkpoint once more files came")
    (say or log.warning)(line)
    return line


def _field(progress: Any, name: str) -> Any:
    """A field of a StreamingQueryProgress (an object in pyspark 4, a dict before)."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)


def json_reader(name: str, ts_field: str, src_dir: str | None = None) -> Reader:
    """Reads a text batch of the file source: ``(ts, record, 0)`` per JSON line (Spark keeps
    a file's lines in order), ``(ts, None, 0)`` for an end-of-input line. ``src_dir``: the
    input directory the staged files came from, which errors name instead of the copy."""

    def read(batch: Any) -> Iterator[tuple[int, Any, int]]:
        for ts, rec in _records(batch, name, ts_field, src_dir):
            yield ts, rec, 0

    return read


def _records(batch: Any, name: str, ts_field: str,
             src_dir: str | None) -> Iterator[tuple[int, Any]]:
    """``(ts, record)`` of each JSON line of a text batch, ``(ts, None)`` for an end-of-input
    line; a malformed line is a :class:`SourceError` naming the file and the line."""
    import orjson

    d = batch.to_pydict()
    for line, file in zip(d["value"], d["file"], strict=True):
        if not line or not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise SourceError(name, _where(file, src_dir), f"malformed JSON ({e})",
                              line[:200]) from None
        if type(rec) is not dict:
            raise SourceError(name, _where(file, src_dir), "record is not an object", rec)
        ts = rec.get(ts_field)
        if type(ts) is not int:
            reason = (f"missing timestamp field {ts_field!r}" if ts is None else
                      f"timestamp {ts_field!r} must be an integer (ms), got {ts!r}")
            raise SourceError(name, _where(file, src_dir), reason, rec)
        yield ts, (None if rec.get(END_FIELD) is True else rec)


def _where(file: str, src_dir: str | None) -> str:
    """The input file a staged copy (Spark's ``input_file_name``, a URI) came from."""
    if src_dir is None:
        return file
    return str(Path(src_dir) / original_name(file.rsplit("/", 1)[-1]))


def rate_reader(src: RateSource) -> Reader:
    """Reads a batch of Spark's rate source: ``(ts, payload(v), v)`` per row v (the value is
    the arrival number: ties in ts keep the local engines' order), rows from ``src.rows`` on
    dropped, ``(ts, None, 0)`` after the last row (end of input)."""

    def read(batch: Any) -> Iterator[tuple[int, Any, int]]:
        last = src.rows
        for v in batch.column("value").to_pylist():
            if last is not None and v >= last:
                continue
            ts, rec = src.record(v)
            yield ts, rec, v
            if last is not None and v == last - 1:
                yield ts, None, 0

    return read
