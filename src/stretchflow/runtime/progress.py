"""How far a run is: tuples read, the smoothed rate, the fraction of the input read and an
ETA, and the current parallelism of its elastic operators (issue #18).

:class:`RunProgress` is the model; the CLI renders a :class:`Snapshot` with rich on a terminal
and as one log line (:func:`format_line`) off one. It reads only what a run already exposes,
so no executor or source does extra work for it:

- tuples read: each source's ``read`` counter (updated every few thousand records);
- fraction of input: per file source, the read position of the file it has open, taken from
  ``/proc/self/fdinfo`` (Linux; the position of whatever reads the file — Python's reader,
  Arrow's JSON or CSV reader), over the file's size (of a compressed file: compressed bytes
  over its size). The readers read ahead (up to 1 MiB): the percent runs ahead of the tuples
  by that much, which only a small file shows; a Parquet file by rows read over the rows
  in its footer; a generator by rows read over its ``rows``. A source of unknown size (an
  iterable, a generator function, a part directory, stdin, a URL) makes the whole run's
  fraction unknown: then there is a rate but no percent or ETA;
- parallelism: the run's :class:`~stretchflow.runtime.metrics.MetricsLog`, reached through
  :func:`~stretchflow.runtime.metrics.watching` as the live web view does.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metrics import watching

#: seconds over which the rate is smoothed (an exponential moving average): long enough that
#: a source's counter, which moves in steps of a few thousand, does not make it jump
RATE_TAU = 3.0


def fd_position(path: Path) -> int | None:
    """The read position in ``path`` of a file descriptor of this process that has it open
    (the furthest, if several), or None when none has or ``/proc`` is not there."""
    try:
        target = str(path.resolve())
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    best = None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != target:
                continue
            with open(f"/proc/self/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("pos:"):
                        pos = int(line.split()[1])
                        best = pos if best is None else max(best, pos)
                        break
        except (OSError, ValueError):  # closed between listdir and here
            continue
    return best


class _Input:
    """One source's share of the input: ``done()`` and ``total`` in one unit (bytes, or rows
    where the size in rows is known exactly), or ``total`` None when unknown."""

    def __init__(self, source: Any, position: Callable[[Path], int | None]):
        from ..io.sources import Csv, Generated, JsonLines, Parquet

        self.source = source
        self.total: int | None = None
        self.by_rows = False
        self._position = position
        self._path: Path | None = None
        path = getattr(source, "path", None)
        local = isinstance(path, Path) and path.is_file()  # not a URL, stdin, a directory
        if isinstance(source, Parquet) and local:
            try:
                import pyarrow.parquet as pq

                self.total = pq.ParquetFile(str(source.path)).metadata.num_rows
                self.by_rows = True
            except Exception:  # noqa: BLE001 - unreadable: the run itself will say why
                self.total = None
        elif isinstance(source, JsonLines | Csv) and local:
            try:
                self.total = path.stat().st_size  # type: ignore[union-attr]
                self._path = path
            except OSError:
                self.total = None
        elif isinstance(source, Generated) and isinstance(source.rows, int):
            self.total = source.rows
            self.by_rows = True

    def done(self) -> int:
        read = int(getattr(self.source, "read", 0) or 0)
        assert self.total is not None
        if self.by_rows:
            return min(read, self.total)
        assert self._path is not None
        pos = self._position(self._path)
        if pos is None:  # not open: not started yet, or read to the end and closed
            return self.total if read > 0 else 0
        return min(pos, self.total)


@dataclass
class Snapshot:
    """One look at a run: what the terminal bar and the off-terminal line show."""

    flow: str
    elapsed: float
    tuples: int
    rate: float | None  # tuples/s, smoothed; None before two samples
    fraction: float | None  # of the input read, 0..1; None when the input's size is unknown
    eta: float | None  # seconds; None when unknown
    parallelism: dict[str, int] = field(default_factory=dict)


class RunProgress:
    """The progress of one run of ``flow``: call :meth:`sample` every so often (its clock is
    ``clock``, monotonic seconds; ``position`` finds a file's read position)."""

    def __init__(self, flow: Any, clock: Callable[[], float] = time.monotonic,
                 position: Callable[[Path], int | None] = fd_position):
        self.name = flow.name
        self.sources = [n.spec for n in flow.nodes if n.kind == "source"]
        self.inputs = [_Input(s, position) for s in self.sources]
        self.known = bool(self.inputs) and all(i.total is not None for i in self.inputs)
        self.clock = clock
        self.t0 = clock()
        self._last: tuple[float, int, float] | None = None  # time, tuples, fraction
        self._rate: float | None = None
        self._frate: float | None = None  # fraction per second, smoothed
        self._logs: list[Any] = []

    def attach(self, obj: Any) -> None:
        """A run object announced by the run (:func:`~stretchflow.runtime.metrics.announce`);
        a MetricsLog is kept for its parallelism."""
        if hasattr(obj, "parallelism") and hasattr(obj, "rows"):
            self._logs.append(obj)

    @contextmanager
    def watching(self) -> Iterator[RunProgress]:
        """Around the run: the run's MetricsLog reaches :meth:`attach`."""
        with watching(self.attach):
            yield self

    def fraction(self) -> float | None:
        """The fraction of the input read (bytes, or rows, each source weighted by its
        size), or None when a source's size is unknown."""
        if not self.known:
            return None
        parts = [(i.done(), i.total or 0) for i in self.inputs]
        if any(i.by_rows for i in self.inputs):
            # rows and bytes do not add up: each source weighs the same then, so a run
            # mixing a Parquet file and a JSON Lines file still goes from 0 to 1
            return sum(d / t if t else 1.0 for d, t in parts) / len(parts)
        total = sum(t for _, t in parts)
        return sum(d for d, _ in parts) / total if total else 1.0

    def parallelism(self) -> dict[str, int]:
        """Each elastic operator's current number of instances."""
        out: dict[str, int] = {}
        for log in self._logs:
            for op, series in list(log.parallelism.items()):
                if series:
                    out[op] = series[-1][1]
            if not out:  # an engine that logs rows but no parallelism series: the latest
                for row in list(log.rows[-64:]):
                    out[row["operator"]] = row["parallelism"]
        return out

    def sample(self) -> Snapshot:
        now = self.clock()
        tuples = sum(int(getattr(s, "read", 0) or 0) for s in self.sources)
        fraction = self.fraction()
        if self._last is not None:
            t, n, f = self._last
            dt = now - t
            if dt > 0:
                alpha = 1.0 - math.exp(-dt / RATE_TAU)
                rate = (tuples - n) / dt
                self._rate = rate if self._rate is None else self._rate + alpha * (
                    rate - self._rate)
                if fraction is not None:
                    frate = (fraction - f) / dt
                    self._frate = frate if self._frate is None else self._frate + alpha * (
                        frate - self._frate)
        self._last = (now, tuples, fraction if fraction is not None else 0.0)
        eta = None
        if fraction is not None and self._frate is not None and self._frate > 0:
            eta = max(1.0 - fraction, 0.0) / self._frate
        return Snapshot(self.name, now - self.t0, tuples, self._rate, fraction, eta,
                        self.parallelism())


def format_eta(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``1 h 2 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def format_parallelism(p: dict[str, int]) -> str:
    return ", ".join(f"{op}={n}" for op, n in p.items())


def format_line(s: Snapshot) -> str:
    """``progress: wordcount 123,456 tuples (45.6%), 78,900 t/s, ETA 3 s, parallelism
    O1=2``: the off-terminal progress line (what is unknown is left out)."""
    line = f"progress: {s.flow} {s.tuples:,} tuples"
    if s.fraction is not None:
        line += f" ({100 * s.fraction:.1f}%)"
    if s.rate is not None:
        line += f", {s.rate:,.0f} t/s"
    if s.eta is not None:
        line += f", ETA {format_eta(s.eta)}"
    if s.parallelism:
        line += f", parallelism {format_parallelism(s.parallelism)}"
    return line
