"""How streams travel between the parts of an SN run: region inputs, subscribers, taps.

A region's splitter reads each O+ input either *inline* (a source read by nothing else,
through its stateless chain, in the splitter's own thread: the single-O+ fast path, no queue)
or from a *link queue* filled by another thread. What produces a stream (a region's merger, or
a tap thread reading a source that is not read inline) hands each batch to its subscribers:

* :class:`SinkLink` applies a stateless chain and writes a sink (through its drain);
* :class:`QueueLink` puts the batch on a downstream region's input queue;
* :class:`ChainLink` applies one stateless operator and passes the result on (a stream read
  by several consumers after a stateless operator: the operator runs once, in the producer).

Link queues are bounded only when the producer's stream reaches exactly one consumer. A stream
read by several consumers that meet again at a multi-input O+ (a diamond) would otherwise
deadlock: the O+'s splitter waits, in its timestamp merge, on the input whose path is slower,
while the faster path's queue is full and blocks the shared producer that feeds the slower
one. Such queues are unbounded; the memory they take is the skew between the two paths.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

from ..eventtime import WATERMARK
from ..operators.stateless import Filter, FlatMap, Map, apply_batch
from ..runtime import RunControl, SourcePump, is_live
from ..runtime.control import CheckpointBarrier
from ..runtime.drain import SinkDrain

Stateless = Map | FlatMap | Filter
Item = tuple[int, Any]
DROPPED = object()  # marks a source tuple its stateless chain dropped
_END = None  # the end of a link queue

__all__ = ["DROPPED", "ChainLink", "QueueLink", "SinkLink", "Tap", "inline_input",
           "queued_input"]


def inline_input(items: Iterator[Item], chain: list[Stateless], i: int,
                 counter: list[int]) -> Iterator[tuple[int, int, Any, int]]:
    """One O+ input read inline: a source's items through its stateless chain, as ``(ts, i,
    payload, new)``; ``new`` is 1 on the first item of each source tuple (a source tuple the
    chain drops still yields one ``DROPPED`` item), so the splitter counts source tuples in
    merged order, as ``reconfigure``'s COUNT means."""
    n = 0
    for ts, p in items:
        if p is WATERMARK or type(p) is CheckpointBarrier:  # not data: past the chain
            yield ts, i, p, 0
            continue
        n += 1
        counter[0] = n
        out = [(ts, p)]
        for op in chain:
            out = apply_batch(op, out)
            if not out:
                yield ts, i, DROPPED, 1
                break
        else:
            new = 1
            for ts2, q in out:
                yield ts2, i, q, new
                new = 0


def queued_input(run: RunControl, q: Any, chain: list[Stateless],
                 i: int) -> Iterator[tuple[int, int, Any, int]]:
    """One O+ input fed by a link queue (another region's merger, a tap), through its
    stateless chain; watermarks pass through, the end of the queue ends the input."""
    get = run.get
    while True:
        batch = get(q)
        if batch is _END:
            return
        if len(batch) == 1 and type(batch[0][1]) is CheckpointBarrier:  # (alone: barrier())
            yield batch[0][0], i, batch[0][1], 0
            continue
        for op in chain:
            batch = apply_batch(op, batch)
        for ts, v in batch:
            yield ts, i, v, 0


class SinkLink:
    """A stateless chain into a sink's drain (:class:`~stretchflow.runtime.drain.SinkDrain`:
    into the sink, or its part of a checkpointed run), written from the producer's thread;
    each delivery is written whole."""

    def __init__(self, drain: SinkDrain, chain: list[Stateless]):
        self.drain = drain
        self.chain = chain

    def deliver(self, items: list[Item]) -> None:
        for op in self.chain:
            items = apply_batch(op, items)
            if not items:
                return
        self.drain.take(items)
        self.drain.flush()

    def barrier(self, item: Item) -> None:
        self.drain.take([item])  # the first copy of its epoch commits the sink's part

    def end(self) -> None:
        """The sink is ended by the executor, after every thread ended; in a checkpointed
        run the output after the last barrier is the last part."""
        self.drain.end()


class QueueLink:
    """A downstream region's input queue."""

    def __init__(self, run: RunControl, bounded: int | None):
        self.run = run
        self.q: queue.Queue = queue.Queue(maxsize=bounded or 0)

    def deliver(self, items: list[Item]) -> None:
        self.run.put(self.q, items)  # readers never mutate a batch: one list for all

    def barrier(self, item: Item) -> None:
        self.run.put(self.q, [item])  # alone in its batch: queued_input passes it on

    def end(self) -> None:
        self.run.put(self.q, _END)


class ChainLink:
    """A stateless operator whose output several consumers read: applied once, here."""

    def __init__(self, op: Stateless, subscribers: list[Any]):
        self.op = op
        self.subscribers = subscribers

    def deliver(self, items: list[Item]) -> None:
        out = apply_batch(self.op, items)
        if out:
            for sub in self.subscribers:
                sub.deliver(out)

    def barrier(self, item: Item) -> None:
        for sub in self.subscribers:
            sub.barrier(item)

    def end(self) -> None:
        for sub in self.subscribers:
            sub.end()


class _Counted:
    """A source seen through a counter of its tuples (for ``reconfigure``'s COUNT, read by
    the splitters; one writer, so no lock: readers see a count that only grows)."""

    def __init__(self, source: Any, counter: list[int]):
        self.source = source
        self.counter = counter
        self.live = is_live(source)

    def items(self) -> Iterator[Item]:
        counter, n = self.counter, 0
        for item in self.source.items():
            if item[1] is not WATERMARK and type(item[1]) is not CheckpointBarrier:
                n += 1
                counter[0] = n
            yield item


class Tap:
    """A thread reading a source that no splitter reads inline (read by several consumers,
    or by sinks only), handing its batches to its subscribers (the runtime's source pump)."""

    def __init__(self, run: RunControl, source: Any, counter: list[int], subscribers: list[Any],
                 batch: int, delay: float, checkpoints: bool = False):
        self.subscribers = subscribers
        self.checkpoints = checkpoints  # barriers among the items: split batches there
        self.pump = SourcePump(_Counted(source, counter), self._deliver, run, batch=batch,
                               delay=delay)
        self.thread = run.thread(self._run, name=f"sn-tap-{source.name}")

    def _deliver(self, items: list[Item]) -> None:
        if self.checkpoints:
            start = 0
            for n, item in enumerate(items):
                if type(item[1]) is CheckpointBarrier:
                    if n > start:
                        for sub in self.subscribers:
                            sub.deliver(items[start:n])
                    for sub in self.subscribers:
                        sub.barrier(item)
                    start = n + 1
            items = items[start:]
            if not items:
                return
        for sub in self.subscribers:
            sub.deliver(items)

    def _run(self) -> None:
        self.pump.run()
        for sub in self.subscribers:
            sub.end()
