"""The sink drain: what every engine does with the items that reach a sink, written once.

Items are ``(ts, payload)``: data tuples, whole :class:`~stretchflow.batch.Batch` es (a
columnar O+'s windows, a source's batch read straight into a sink), watermarks
``(w, WATERMARK)`` and checkpoint barriers. A :class:`SinkDrain` writes

* data tuples with its output's ``write``, in runs of at most :data:`SINK_BATCH`;
* each batch whole with ``write_batch`` (the consecutive batches of one hand-over joined in one
  write: a columnar O+ emits a window each, and a write per window would cost more than the
  window); a user's sink without ``write_batch`` gets the batch's tuples;
* never a watermark: the engine's, not output;
* at the first barrier of each checkpoint epoch, what it holds, then calls ``on_barrier``
  (a checkpointed run commits the sink's part there); later copies of a barrier (one per
  source) are passed over.

Its output is the sink, a :class:`~stretchflow.executors.reference_overlap.WriteBehind` in
front of one, or, in a checkpointed run, the sink's open part in the checkpoint directory
(:class:`~stretchflow.runtime.epoch_parts.EpochParts`).

Where the items come from is the engine's, and the drain is built around that source:

* :meth:`SinkDrain.pull` reads an iterator of items to its end (the reference's generator
  pipeline): what it holds is written at every watermark, batch and barrier, so what a
  watermark closed reaches the sink now; :func:`pull_merged` pulls several sinks' streams
  through one timestamp merge (they share upstream operators through tees);
* :meth:`SinkDrain.take` takes one hand-over, a list of items a sink thread took from its
  buffer (an ESG, an SSG: :func:`drain_buffer`) or a producer handed it (SN's merger,
  ordered's reorder buffers); :meth:`SinkDrain.flush` writes what it holds. A sink thread
  writes each hand-over whole (``flush`` after ``take``); ordered's line gathers hand-overs
  up to :data:`SINK_BATCH` and flushes at its watermarks.

Each hand-over to :meth:`~SinkDrain.take` is also where output latency is measured, one way
for every engine (:meth:`~stretchflow.runtime.latency.LatencyRecorder.measure_outputs`, the
definition in :mod:`stretchflow.runtime.result`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

from ..batch import Batch
from ..eventtime import WATERMARK
from .control import CheckpointBarrier, RunControl, Stopped
from .latency import IngestClock, LatencyRecorder

#: data tuples a drain writes at once (and a sink thread takes from its buffer at once)
SINK_BATCH = 4096

Item = tuple[Any, Any]
_MARK = type(WATERMARK)
#: payload types that are not data tuples: one set lookup per item on the drain's hot path
_CONTROL = frozenset({Batch, _MARK, CheckpointBarrier})

__all__ = ["SINK_BATCH", "SinkDrain", "drain_buffer", "pull_merged"]


class SinkDrain:
    """One sink's drain (see the module doc).

    Args:
        out: what it writes to: ``write(items)`` and, if it has one, ``write_batch(batch)``.
        batch: data tuples written at once.
        eager: :meth:`take` writes what it holds at a watermark (for an engine that gathers
            hand-overs; a sink thread writes each hand-over whole anyway).
        clock, latency: measure each hand-over's latency against ``clock`` into ``latency``
            (None: not measured).
        on_barrier: called with the first barrier of each epoch after an ``epoch`` (the
            restored checkpoint's), once what came before it is written.
        on_end: called by :meth:`end`, once everything is written.
    """

    def __init__(self, out: Any, *, batch: int = SINK_BATCH, eager: bool = True,
                 clock: IngestClock | None = None, latency: LatencyRecorder | None = None,
                 on_barrier: Callable[[CheckpointBarrier], None] | None = None,
                 on_end: Callable[[], None] | None = None, epoch: int = 0):
        self.out = out
        self._write = out.write
        wb = getattr(out, "write_batch", None)
        self._write_batch = wb if wb is not None else (lambda b: out.write(b.items()))
        self.size = batch
        self.eager = eager
        self.clock, self.latency = clock, latency
        if latency is not None and clock is None:
            raise ValueError("SinkDrain: measuring latency needs the run's ingest clock")
        self.on_barrier, self.on_end = on_barrier, on_end
        self.epoch = epoch
        self.count = 0  # data tuples written (batches by their rows)
        self._buf: list[Item] = []  # data tuples not yet written (a fresh list per write)
        self._batches: list[Batch] = []  # consecutive batches of a hand-over, not yet written

    # -- hand-overs -----------------------------------------------------------------------------
    def take(self, items: list[Item]) -> None:
        """One hand-over: its data tuples and batches, written when :data:`SINK_BATCH` tuples
        are held, at a barrier, at a watermark (``eager``) or at :meth:`flush`."""
        buf, batches, size = self._buf, self._batches, self.size
        for item in items:
            p = item[1]
            t = type(p)
            if t not in _CONTROL:
                if batches:
                    self._write_batches()
                buf.append(item)
                if len(buf) >= size:
                    self._write_run()
                    buf = self._buf
            elif t is Batch:
                if buf:
                    self._write_run()
                    buf = self._buf
                batches.append(p)
            elif t is _MARK:
                if self.eager:
                    self.flush()
                    buf = self._buf
            else:
                self._barrier(p)
                buf = self._buf
        if self.latency is not None:
            self.latency.measure_outputs(self.clock, items)  # type: ignore[arg-type]

    def put(self, item: Item) -> None:
        """One item of a pulled stream (:func:`pull_merged`): as :meth:`pull`."""
        p = item[1]
        if type(p) not in _CONTROL:
            self._buf.append(item)
            if len(self._buf) >= self.size:
                self._write_run()
            return
        self.flush()
        if type(p) is Batch:
            self._write_batch(p)
            self.count += len(p)
        elif p is not WATERMARK:
            self._barrier(p)

    def flush(self) -> None:
        """Writes what the drain holds."""
        if self._buf:
            self._write_run()
        if self._batches:
            self._write_batches()

    def end(self) -> None:
        """The sink's input ended: writes what the drain holds, then calls ``on_end``."""
        self.flush()
        if self.on_end is not None:
            self.on_end()

    # -- a pulled stream ------------------------------------------------------------------------
    def pull(self, items: Iterable[Item]) -> None:
        """Reads ``items`` to their end (then :meth:`end`): data tuples written in runs,
        everything held written at each watermark, batch and barrier. The loop of
        :meth:`put`, inlined: it runs once per output tuple of a sequential run."""
        write, size, control = self._write, self.size, _CONTROL
        buf = self._buf
        append = buf.append
        for item in items:
            p = item[1]
            if type(p) not in control:
                append(item)
                if len(buf) < size:
                    continue
                write(buf)
                self.count += len(buf)
                buf = self._buf = []
                append = buf.append
                continue
            if buf:  # a watermark, batch or barrier: what came before reaches the sink now
                write(buf)
                self.count += len(buf)
                buf = self._buf = []
                append = buf.append
            if type(p) is Batch:
                self._write_batch(p)
                self.count += len(p)
            elif p is not WATERMARK:
                self._barrier(p)
        self.end()

    # -- internals ------------------------------------------------------------------------------
    def _write_run(self) -> None:
        # a new list each time: the output may keep the one it was handed (a write-behind)
        run, self._buf = self._buf, []
        self._write(run)
        self.count += len(run)

    def _write_batches(self) -> None:
        bs = self._batches
        b = bs[0] if len(bs) == 1 else Batch.concat(bs)
        bs.clear()  # (the output gets the batch, never this list)
        self._write_batch(b)
        self.count += len(b)

    def _barrier(self, b: CheckpointBarrier) -> None:
        self.flush()
        if b.epoch > self.epoch:  # the first copy of its epoch (one per source)
            self.epoch = b.epoch
            if self.on_barrier is not None:
                self.on_barrier(b)


def pull_merged(streams: list[Iterator[Item]], drains: list[SinkDrain]) -> None:
    """Several sinks' streams pulled through one timestamp merge (they share upstream operators
    through tees, read in step: no branch runs far ahead of another), each into its drain."""
    tagged = [_tag(s, j) for j, s in enumerate(streams)]
    puts = [d.put for d in drains]
    for ts, j, v in heapq.merge(*tagged, key=itemgetter(0)):
        puts[j]((ts, v))
    for d in drains:
        d.end()


def _tag(items: Iterator[Item], j: int) -> Iterator[tuple[Any, int, Any]]:
    for ts, v in items:
        yield ts, j, v


def drain_buffer(drain: SinkDrain, get: Callable[[], Any], end: Any,
                 control: RunControl) -> None:
    """A sink thread's loop: hand-overs ``get()`` (a sink's buffer read, at most
    :data:`SINK_BATCH` items) written whole until ``get()`` returns ``end``, then
    :meth:`SinkDrain.end`. Raises :class:`Stopped` once the run has failed."""
    take, flush = drain.take, drain.flush
    while True:
        items = get()
        if control.error is not None:
            raise Stopped
        if items is end:
            break
        take(items)
        flush()
    drain.end()
