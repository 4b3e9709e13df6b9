"""SN channels: processSN on a channel's own key groups, and its side of the migration.

:class:`ChannelCore` is what a channel does whatever runs it (STRETCH Alg. 2 processSN on a
private σ, elastic-scaling Alg. 4 donate/collect); :class:`ThreadChannel` drives one from a
bounded ``queue.Queue`` in a thread of this process, :mod:`.sn_process` drives one in a child
process. Sharing the core keeps the two transports from drifting apart in semantics.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..elastic.consistent_hash import ConsistentHashRing
from ..elastic.migration import StateStore
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..runtime import RunControl, raise_user_error
from .sn_checkpoint import channel_restore, channel_snapshot

__all__ = ["ChannelCore", "Migration", "ThreadChannel", "group_assignment", "migrate_threads"]


def group_assignment(n_channels: int, n_groups: int) -> list[int]:
    """The channel owning each key group: the consistent-hashing owner of ``g`` on a ring of
    channels ``0..n_channels-1`` (elastic-scaling §6.2). Growing or shrinking the ring moves
    groups only to new channels or away from removed ones."""
    ring = ConsistentHashRing(range(n_channels))
    return [int(ring.owner(g)) for g in range(n_groups)]


class ChannelCore:
    """Alg. 2 processSN on one channel's own key groups, and its side of Alg. 4.

    Messages it answers (tuples, first item the kind): ``("batch", seq, items, wm, last_ts)``
    → ``("out", j, outputs, wm, seq, busy_s)``; ``("end", last_ts)`` →
    ``("final", j, outputs, busy_s)``.
    """

    def __init__(self, j: int, op: OPlus, inst: OPlusInstance):
        self.j = j
        self.op = op
        self.inst = inst
        self.wm = -math.inf
        self.seq = 0  # sequence number of the last splitter batch processed

    def _note_last(self, last_ts: int | None) -> None:
        # The reference's single instance sees every tuple; it slides `single` window sets at
        # the end of input up to the latest window any tuple fell in. A channel sees only its
        # own tuples, so the splitter tells it the latest timestamp overall.
        if last_ts is not None:
            self.inst.saw_time(last_ts)

    def batch(self, msg: tuple) -> tuple:
        _, seq, items, wm, last_ts = msg
        # every channel gets every flush (the pulse), in the splitter's order: a gap would
        # mean a lost batch, and a wrong watermark
        if seq <= self.seq:
            raise RuntimeError(f"sn channel {self.j}: batch {seq} after batch {self.seq}")
        self.seq = seq
        t0 = time.perf_counter()
        inst = self.inst
        ts = v = None
        try:
            if inst.takes_runs:
                # a splitter batch is a run: data tuples in order, its watermark after them;
                # process_run names a failing tuple itself (RunTupleError)
                inst.process_run([(t, p, i) for t, i, p in items])
            else:
                for ts, i, v in items:
                    inst.process(ts, v, i)
            ts, v = wm, "<watermark>"
            self._note_last(last_ts)
            inst.advance(wm)
        except Exception as e:
            raise_user_error(self.op.name, ts, v, e)
        if wm > self.wm:
            self.wm = wm
        return ("out", self.j, inst.take(), self.wm, seq, time.perf_counter() - t0)

    def end(self, last_ts: int | None) -> tuple:
        t0 = time.perf_counter()
        self._note_last(last_ts)
        try:
            self.inst.finish()
        except Exception as e:
            raise_user_error(self.op.name, None, None, e)
        return ("final", self.j, self.inst.take(), time.perf_counter() - t0)

    def snap(self, epoch: int) -> tuple:
        """A checkpoint barrier (after the flush that advanced W to its cut): σ of this
        channel's groups and its progress (sn_checkpoint)."""
        return ("snap", self.j, epoch, channel_snapshot(self.op.name, self.inst))

    def restore(self, blob: bytes) -> None:
        channel_restore(self.op.name, self.inst, blob)

    def release(self) -> tuple | None:
        """Alg. 4, first step: f_U outputs held for later windows live in the instance, not in
        σ; release them now (the merger holds them until every channel's watermark passes)."""
        self.inst.flush_pending()
        out = self.inst.take()
        return ("out", self.j, out, self.wm, self.seq, 0.0) if out else None

    def donate(self, store: StateStore, epoch: int, old: list[int],
               new: list[int]) -> tuple[int, int]:
        """Alg. 4 donate: the groups this channel loses go to the store. (bytes, groups)."""
        groups, j = self.inst.state.groups, self.j
        nbytes = moved = 0
        for g, (a, b) in enumerate(zip(old, new, strict=True)):
            if a == j and b != j:
                if groups[g]:
                    nbytes += store.put(epoch, g, groups[g])
                    moved += 1
                groups[g] = {}
        return nbytes, moved

    def collect(self, store: StateStore, epoch: int, old: list[int], new: list[int]) -> None:
        """Alg. 4 collect (after the vertical barrier): the groups this channel gains."""
        groups, j = self.inst.state.groups, self.j
        for g, (a, b) in enumerate(zip(old, new, strict=True)):
            if b == j and a != j:
                st = store.take(epoch, g)
                if st:
                    groups[g] = st
        self.inst.set_assignment(new)


@dataclass
class Migration:
    """A migration pulse (Alg. 4) for thread channels: old and new f_μ, the barriers."""

    epoch: int
    old: list[int]
    new: list[int]
    n_new: int
    vertical: threading.Barrier  # every donation is in the store
    done: threading.Barrier  # every channel collected (the splitter waits here too)
    bytes_moved: list[int] = field(default_factory=list)
    groups_moved: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ThreadChannel:
    """A thread channel: a :class:`ChannelCore` fed by a bounded ``queue.Queue``."""

    def __init__(self, j: int, op: OPlus, n_groups: int, assign: list[int], run: RunControl,
                 outq: queue.Queue, store: StateStore, queue_size: int, region: str = ""):
        self.j = j
        self.core = ChannelCore(j, op, op.instance(SharedState(n_groups), j, assign))
        self.run = run
        self.outq = outq
        self.store = store
        self.q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.thread = run.thread(self._loop, name=f"sn-channel-{region}{j}")
        self.threads = [self.thread]

    def start(self) -> None:
        self.thread.start()

    def close(self, failed: bool) -> None:
        """Nothing to release: the thread ends by itself once the run ends or stops."""

    def _loop(self) -> None:
        core, run = self.core, self.run
        while True:
            msg = run.get(self.q)
            kind = msg[0]
            if kind == "batch":
                run.put(self.outq, core.batch(msg))
            elif kind == "migrate":
                if not self._migrate(msg[1]):
                    return
            elif kind == "barrier":
                run.put(self.outq, core.snap(msg[1]))
            elif kind == "restore":
                core.restore(msg[1])
            else:  # "end"
                run.put(self.outq, core.end(msg[1]))
                return

    def _migrate(self, m: Migration) -> bool:
        """Alg. 4 on a channel: flush, donate, vertical barrier, collect. False if leaving."""
        core, run = self.core, self.run
        out = core.release()
        if out is not None:
            run.put(self.outq, out)
        nbytes, moved = core.donate(self.store, m.epoch, m.old, m.new)
        with m.lock:
            m.bytes_moved.append(nbytes)
            m.groups_moved.append(moved)
        run.wait(m.vertical)
        if self.j >= m.n_new:  # decommissioned: its outputs are all out, the merger forgets it
            run.put(self.outq, ("leave", self.j))
            run.wait(m.done)
            return False
        core.collect(self.store, m.epoch, m.old, m.new)
        run.wait(m.done)
        return True


def migrate_threads(run: RunControl, channels: dict[int, Any], epoch: int, old: list[int],
                    new: list[int], old_p: int, p: int) -> tuple[int, int]:
    """Alg. 4 from the splitter with thread channels: the migration pulse to every old and new
    channel, then the splitter waits with them at the last barrier. (bytes, groups) moved."""
    participants = max(old_p, p)
    m = Migration(epoch, old, new, p, run.track(threading.Barrier(participants)),
                  run.track(threading.Barrier(participants + 1)))
    for j in range(participants):
        run.put(channels[j].q, ("migrate", m))
    run.wait(m.done)
    return sum(m.bytes_moved), sum(m.groups_moved)

