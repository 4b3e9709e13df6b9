"""Checkpoints where sources, operators and sinks run on threads (the vsn, slack, sn and ordered
engines): the threaded side of :mod:`stretchflow.runtime.checkpoint` (docs/checkpoints.md).

The cut is every engine's, "every input tuple with ts <= T", carried by the control tuple
``(T + 0.5, CheckpointBarrier(e, T))`` that each source puts after its last tuple <= T. Here
the sources run on threads of their own, so the cut T must be chosen at or after every
position any source has reached: :class:`ThreadedCheckpointer` has each source publish its
timestamp under a lock before it yields a tuple, and :class:`ThreadedCuts` picks T as the
largest published one under that lock (a source that yields a tuple at ts has published ts, so
either the cut sees it, T >= ts, or the source sees the cut before yielding it).

What the runtime does for every threaded engine (:class:`RunCheckpoints`):

* **sources**: a source's items with the barriers, skipping what a restored checkpoint
  covers (:meth:`RunCheckpoints.items`, :meth:`RunCheckpoints.pump_args` for a
  :class:`~stretchflow.runtime.SourcePump`); a barrier bypasses the stateless operators fused
  onto the producer's thread (they would apply their function to it) and goes straight into
  every inlet the producer reaches (:func:`forward_barrier`);
* **sinks**: each sink's output goes into its open part in the checkpoint directory as the
  sink's drain hands it over (:mod:`stretchflow.runtime.drain`), and the part is committed as
  part e on the first barrier of epoch e the sink reads; the checkpoint is written once every
  sink has (:meth:`ThreadedCheckpointer.sink_barrier`); the output after the last barrier is
  the last part (:meth:`ThreadedCheckpointer.sink_end`);
* **operators**: the rendezvous of an operator's threads at a barrier
  (:meth:`~stretchflow.runtime.RunControl.wait_at`);
* **the end**: on success the parts are published to the sinks' own files, then the
  checkpoint is cleared; the directory's lock is released either way
  (:meth:`RunCheckpoints.end`); the run's ``checkpoints`` and ``checkpoint_log`` keys
  (:meth:`RunCheckpoints.extra`).

What an operator does at a barrier (advance W to the cut, emit what that closes, snapshot its
state, forward the barrier) is its executor's: an executor plugs in only that.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from ..batch import Batch
from .checkpoint import CheckpointBarrier, Checkpointer, Cuts
from .drain import SinkDrain

__all__ = ["RunCheckpoints", "SourceProxy", "ThreadedCheckpointer", "ThreadedCuts",
           "forward_barrier"]


class ThreadedCuts(Cuts):
    """:class:`Cuts` for sources on threads: T is the largest timestamp any source has
    published (under ``lock``), above the restored cut."""

    def __init__(self, every: tuple[str, float], base: int, lock: threading.Lock,
                 pos: dict[str, float], floor: float):
        super().__init__(every, base)
        self.lock = lock
        self.pos = pos
        self.floor = floor

    def progress(self, n: int, ts: int) -> None:
        with self.lock:
            before = len(self.cuts)
            self.latest = max(self.pos.values(), default=-math.inf)
            super().progress(n, self.latest)  # type: ignore[arg-type]
            if len(self.cuts) > before and self.cuts[-1] <= self.floor:
                self.cuts.pop()  # nothing read past the restored cut yet


class ThreadedCheckpointer(Checkpointer):
    """A :class:`Checkpointer` whose sources, operators and sinks run on threads."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.lock = threading.Lock()
        self.pos: dict[str, float] = {}
        self.fresh: dict[str, bool] = {}  # a source yielded a barrier since its last push
        super().__init__(*args, **kwargs)
        floor = self.restored_cut if self.restored_cut is not None else -math.inf
        self.plan = ThreadedCuts(self.every, self.plan.base, self.lock, self.pos, floor)

    def _published(self, name: str, items: Iterator[Any], ts_of: Callable[[Any], Any]
                   ) -> Iterator[Any]:
        """``items``, each after its timestamp is published (see the module doc)."""
        lock, pos = self.lock, self.pos
        last = None
        for item in items:
            ts = ts_of(item)
            if ts != last:
                with lock:
                    pos[name] = ts
                last = ts
            yield item

    def source(self, name: str, items: Iterator[Any], counter: list[int]) -> Iterator[Any]:
        return super().source(name, self._published(name, items, _first), counter)

    def batches(self, name: str, batches: Iterator[Batch], counter: list[int]
                ) -> Iterator[Any]:
        return super().batches(name, self._published(name, batches, _last), counter)

    def _barrier(self, name: str, k: int, n: int) -> tuple[float, CheckpointBarrier]:
        with self.lock:
            self.fresh[name] = True
            return super()._barrier(name, k, n)

    def snapshot(self, node: str, epoch: int, data: bytes) -> None:
        with self.lock:
            super().snapshot(node, epoch, data)

    def sink_barrier(self, j: int, b: CheckpointBarrier, chunks: Sequence[Any] = ()) -> None:
        """Sink ``j`` read the first barrier of epoch ``b.epoch``: its part (what was
        written into the open part, then ``chunks``: lists of ``(ts, payload)`` and
        :class:`Batch` es), and the checkpoint if every sink has committed its part of it."""
        self.writers[j].commit_chunks(b.epoch, chunks)
        with self.lock:
            done = self.done.setdefault(b.epoch, set())
            done.add(j)
            complete = len(done) == len(self.sinks)
        if complete:  # exactly one sink thread gets here per epoch
            with self.lock:
                self._checkpoint(b.epoch, b.cut)

    def sink_end(self, j: int, chunks: Sequence[Any] = ()) -> None:
        """Sink ``j``'s input ended: the output after its last barrier is the last part
        (every source has ended, so no cut comes any more)."""
        self.writers[j].commit_chunks(self.plan.base + len(self.plan.cuts) + 1, chunks)


def _first(item: Any) -> Any:
    return item[0]


def _last(b: Batch) -> Any:
    return b.last


def forward_barrier(pid: Hashable, inlets: list[Any],
                    item: tuple[float, CheckpointBarrier]) -> None:
    """A barrier into every inlet a producer reaches, past any stateless operator."""
    seen: set[int] = set()
    for inlet in inlets:
        if id(inlet) not in seen:
            seen.add(id(inlet))
            fence = getattr(inlet, "fence", None)
            if fence is not None:
                fence(item[1].cut)
            inlet.push(pid, [item])


class SourceProxy:
    """A source whose ``items()`` are the checkpointer's; every other attribute is the
    source's own (the pump, or an SN tap, reads them)."""

    def __init__(self, spec: Any, items: Callable[[], Iterator[Any]]):
        self._spec = spec
        self.items = items

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)


class RunCheckpoints:
    """One threaded run's checkpoints in directory ``path`` (see the module doc): the
    sources' and the sinks' side, the end and the result keys. ``options`` are the options
    whose change would make a snapshot mean something else (the checkpoint's fingerprint),
    ``stateful`` the operators that snapshot."""

    def __init__(self, path: Any, every: Any, flow: Any, options: dict[str, Any],
                 stateful: list[str]):
        self.ckpt = ThreadedCheckpointer(path, every, flow, options, stateful)

    @property
    def taken(self) -> int:
        return self.ckpt.taken

    @property
    def base(self) -> int:
        """The epoch of the restored checkpoint (0: a fresh start)."""
        return self.ckpt.plan.base

    def close(self) -> None:
        self.ckpt.close()

    # -- operators ------------------------------------------------------------------------------
    def restored(self, name: str) -> bytes | None:
        """Operator ``name``'s state in the restored checkpoint (None: a fresh start)."""
        return self.ckpt.restored(name)

    def snapshot(self, name: str, epoch: int, blob: bytes) -> None:
        """Operator ``name``'s state at barrier ``epoch``, serialized."""
        self.ckpt.snapshot(name, epoch, blob)

    # -- sources --------------------------------------------------------------------------------
    def items(self, node: Any, counter: list[int] | None = None) -> Iterator[Any]:
        """Source ``node``'s items with the barriers, past the restored cut (``counter[0]``:
        data tuples read so far)."""
        return self.ckpt.source(node.name, node.spec.items(),
                                counter if counter is not None else [0])

    def proxy(self, node: Any) -> SourceProxy:
        """Source ``node`` as a reader that calls ``items()`` sees it: with the barriers."""
        return SourceProxy(node.spec, lambda: self.items(node))

    def pump_args(self, node: Any, pusher: Any, batches: Any
                  ) -> tuple[Any, Callable[[list[Any]], None], Any]:
        """(the source for a :class:`~stretchflow.runtime.SourcePump`, its push, its batches
        or None) for source ``node`` whose producer is ``pusher`` (a
        :class:`~stretchflow.executors.plan.Pusher`): a barrier cuts the batch it falls in
        and goes to every inlet the producer reaches, past the stateless operators."""
        ckpt, name = self.ckpt, node.name
        pid, inlets = pusher.pid, pusher.inlets()
        counter = [0]
        if batches is not None:
            def gen() -> Iterator[Batch]:
                for item in ckpt.batches(name, batches, counter):
                    if type(item[1]) is CheckpointBarrier:
                        forward_barrier(pid, inlets, item)  # the batches before it are pushed
                    else:
                        yield item[1]
            return node.spec, pusher.push, gen()

        def push(batch: list[Any]) -> None:
            if not ckpt.fresh.get(name):
                pusher.push(batch)
                return
            ckpt.fresh[name] = False
            seg: list[Any] = []
            for item in batch:
                if type(item[1]) is CheckpointBarrier:
                    pusher.push(seg)
                    seg = []
                    forward_barrier(pid, inlets, item)
                else:
                    seg.append(item)
            pusher.push(seg)

        return self.proxy(node), push, None

    # -- sinks ----------------------------------------------------------------------------------
    def drain(self, k: int, **kw: Any) -> SinkDrain:
        """Sink ``k``'s drain (``kw``: :class:`SinkDrain`'s latency arguments): into its open
        part, the part committed at the first barrier of each epoch, the last part at the
        end."""
        return SinkDrain(self.output(k), eager=False, epoch=self.base,
                         on_barrier=lambda b: self.sink_barrier(k, b),
                         on_end=lambda: self.sink_end(k), **kw)

    def output(self, k: int) -> Any:
        """What sink ``k``'s drain writes to: its open part in the checkpoint directory."""
        return self.ckpt.writers[k]

    def sink_barrier(self, k: int, b: CheckpointBarrier) -> None:
        """Sink ``k`` read the first barrier of epoch ``b.epoch`` (its drain's hook)."""
        self.ckpt.sink_barrier(k, b, ())

    def sink_end(self, k: int) -> None:
        """Sink ``k``'s input ended (its drain's end hook)."""
        self.ckpt.sink_end(k, ())

    # -- the end --------------------------------------------------------------------------------
    def end(self, ok: bool) -> None:
        """The run ended: on success the held output goes to the sinks (then the checkpoint
        is cleared); the directory's lock is released either way."""
        self.ckpt.end(ok)

    def extra(self) -> dict[str, Any]:
        """The run's ``checkpoints`` and ``checkpoint_log`` (runtime/result.py)."""
        return self.ckpt.extra()
