"""The source pump: how batches enter every threaded engine (the sink drain, how they leave
it, is :mod:`stretchflow.runtime.drain`).

A :class:`SourcePump` reads a source's ``(ts, payload)`` items and hands them on in batches:
a batch goes out when it is full, when it is ``delay`` seconds old, or, for a live source,
whenever holding it would add latency. A paced or replayed source is paced here
(:func:`~stretchflow.io.sources.live_items`): the batch goes out before each wait for the
next tuple's due time, so a tuple never waits for the next one, and a pump behind the
schedule (its tuples already due) hands on full batches; without that it handed a paced
source on one tuple at a time, and vsn sustained a small part of its unpaced rate when paced
(issue #33's latency benchmark). Any other live source (``live = True``: a followed file, a
Redis stream, whose waits happen inside its reader) goes on a tuple at a time. It counts
input tuples for the ``--reconfigure`` schedule (:class:`ReconfigureSchedule`, shared by all
sources of a run: COUNT counts tuples of all sources) and cuts the batch at the tuple a step
is due, so the engine's control tuple follows exactly that tuple.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..batch import WIDE
from ..eventtime import WATERMARK
from ..io.sources import live_items
from .control import RunControl, Stopped
from .latency import IngestClock

Item = tuple[int, Any]

#: tuples per batch a source reads for a columnar O+ (``Source.batches``) on the threaded
#: engines (vsn, ordered, sn's process channels): the unit an instance takes at once, so also
#: what a reconfiguration may wait for. Read at run time (tests make batches small through it).
COLUMNAR_BATCH = 4096
#: tuples per such batch where no reader can multiply a batch's rows (a flow of column
#: expressions: executors/plan.one_row_each), as the reference's WIDE_BATCH. Mean price per
#: category as expressions, 10 M bids in Parquet: vsn at parallelism 1 took 3.1 s at 4 096
#: and 1.0 s at 65 536, ordered with 1 worker 2.4 s and 1.3 s. A reconfiguration may wait
#: for one such batch (a few ms of Arrow kernels); wordcount's and lambda flows keep 4 096
WIDE_COLUMNAR_BATCH = WIDE

log = logging.getLogger(__name__)


def is_live(source: Any) -> bool:
    """True for a source whose tuples arrive over time: paced (``rate``), replayed in event
    time (``speed``), or one that says so (``live = True``)."""
    return bool(getattr(source, "live", False) or getattr(source, "rate", None)
                or getattr(source, "speed", None))


class ReconfigureSchedule:
    """``[(COUNT, P), ...]``: after the COUNT-th input tuple of all sources, request
    parallelism P. Thread-safe; steps left when the last source ends are due then."""

    def __init__(self, steps: Iterable[tuple[int, int]] | None, sources: int):
        self.steps = sorted(steps or [])
        self.read = 0
        self._sources_left = sources
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.steps)

    def until_due(self) -> int | None:
        """Input tuples until the next step is due (at least 1), None if no step is left."""
        with self._lock:
            return max(1, self.steps[0][0] - self.read) if self.steps else None

    def count(self, n: int = 1) -> list[int]:
        """Counts ``n`` input tuples; the parallelisms now due, in order."""
        with self._lock:
            self.read += n
            due = []
            while self.steps and self.read >= self.steps[0][0]:
                due.append(self.steps.pop(0)[1])
            return due

    def source_ended(self) -> list[int]:
        """A source ended; when it was the last, every step left is due now."""
        with self._lock:
            self._sources_left -= 1
            if self._sources_left > 0:
                return []
            rest = [p for _, p in self.steps]
            self.steps = []
            return rest


class SourcePump:
    """Reads one source into batches for ``push``; see the module docstring.

    Args:
        source: a :class:`~stretchflow.io.sources.Source`.
        push: called with each batch (a fresh list the callee may keep).
        control: the run's control; the pump stops when the run does.
        schedule: the run's ``--reconfigure`` schedule, or None.
        on_due: called with the parallelisms due, right after the batch that ends with the
            tuple they are due at was pushed.
        clock: records when the batch's last timestamp entered (for latency), or None.
        batch: tuples per batch; delay: seconds a partial batch may wait.
    """

    def __init__(self, source: Any, push: Callable[[list[Item]], None], control: RunControl,
                 *, schedule: ReconfigureSchedule | None = None,
                 on_due: Callable[[list[int]], None] | None = None,
                 clock: IngestClock | None = None, batch: int = 256, delay: float = 0.001):
        self.source = source
        self.push = push
        self.control = control
        self.schedule = schedule if schedule else None
        self.on_due = on_due
        self.clock = clock
        self.batch = batch
        self.delay = delay
        self.count = 0

    def run(self) -> None:
        """Pumps the source to its end (raises :class:`Stopped` if the run stops first)."""
        stop = self.control.stop
        schedule = self.schedule
        size, delay = self.batch, self.delay
        now_fn = time.perf_counter
        batch: list[Item] = []

        def flush() -> None:
            nonlocal batch
            if batch:
                self._out(batch)
                batch = []

        items = live_items(self.source, flush)
        # a live source this pump cannot see wait: each tuple at once
        each = items is None and is_live(self.source)
        if items is None:
            items = self.source.items()
        started = now_fn()
        count = 0
        for item in items:
            if stop.is_set():
                raise Stopped
            now = now_fn()
            if not batch:
                started = now
            batch.append(item)
            if item[1] is not WATERMARK:
                count += 1
                if schedule is not None:
                    due = schedule.count()
                    if due:  # the control tuple must follow exactly this tuple
                        flush()
                        if self.on_due is not None:
                            self.on_due(due)
                        continue
            if each or len(batch) >= size or now - started >= delay:
                flush()
        flush()
        self.count = count
        log.debug("source %s ended: %s tuples", getattr(self.source, "name", "?"), f"{count:,}")
        if schedule is not None:
            rest = schedule.source_ended()
            if rest and self.on_due is not None:
                self.on_due(rest)  # due after the last tuple: applied at the end of input

    def run_batches(self, batches: Iterable[Any]) -> None:
        """Pumps a source's :class:`~stretchflow.batch.Batch` es (``Source.batches``) to
        their end, each pushed as one item ``(last ts, batch)``; a batch is cut at the tuple
        a ``--reconfigure`` step is due at, so the control tuple follows exactly that tuple
        as it does tuple by tuple. Raises :class:`Stopped` if the run stops first."""
        stop, schedule = self.control.stop, self.schedule
        count = 0
        for b in batches:
            if stop.is_set():
                raise Stopped
            while schedule is not None and len(b):
                at = schedule.until_due()
                if at is None or at > len(b):
                    break
                first, b = b.split(at)
                due = schedule.count(at)
                self._out([(first.last, first)])
                count += at
                if due and self.on_due is not None:
                    self.on_due(due)
            n = len(b)
            if n:
                if schedule is not None:
                    schedule.count(n)  # nothing due: the next step is beyond this batch
                self._out([(b.last, b)])
                count += n
        self.count = count
        log.debug("source %s ended: %s tuples (in batches)", getattr(self.source, "name", "?"),
                  f"{count:,}")
        if schedule is not None:
            rest = schedule.source_ended()
            if rest and self.on_due is not None:
                self.on_due(rest)

    def _out(self, batch: list[Item]) -> None:
        # recorded before the push: once pushed, a batch's outputs may reach a sink (and be
        # measured against this clock) before push returns to this thread
        if self.clock is not None:
            self.clock.record(batch[-1][0])
        self.push(batch)
