"""Checkpoints and resume on the slack engine (issue #17): the threaded engines' protocol
(:mod:`stretchflow.runtime.threaded_checkpoint`) on Slack ScaleGates (docs/checkpoints.md,
"Ordered and slack engines").

The slack engine is VSN's plan with SSGs for inlets, so the checkpoint is VSN's: each source
thread puts ``(T + 0.5, CheckpointBarrier(e, T))`` after its last tuple <= T (the cut T at or
after every timestamp any source has published), straight into the inlets it reaches (past
the stateless operators fused on its thread: the runtime's ``forward_barrier``). An SSG
with SLT = inf hands out ready tuples only, in timestamp order, so every processing thread of
an O+ reads the first barrier of epoch e after every tuple <= T of every source. There
(:meth:`SlackCheckpoints.at_barrier`) it advances W to T and pushes what that closes (its later
outputs are > T), waits for the operator's other threads (a ``threading.Barrier``: they share
σ), the last to arrive snapshots σ and every thread's instance, and each forwards the barrier
to the inlets it writes. A sink commits its part e on the first barrier of epoch e it reads
(readiness puts it after every output <= T of every producer); the checkpoint is written once
every sink has.

A finite SLT lets slack-ready tuples through out of timestamp order (a barrier before a slow
source's tuples <= T), so no cut is consistent: a checkpointed run needs SLT = inf and no SLT
tuner (checked with the engine's options, :mod:`stretchflow.engines`), which is also what
makes the engine deterministic (its output equals the reference engine's per timestamp) and a
resumed run equal an uninterrupted one.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..operators import snapshot
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.threaded_checkpoint import RunCheckpoints, forward_barrier

if TYPE_CHECKING:
    from .slack import _Operator, _Reader, _Run

class SlackCheckpoints:
    """One slack run's operators at checkpoint barriers; the sources' and the sinks' side,
    the end and the result keys are the runtime's (``run``)."""

    def __init__(self, R: _Run, run: RunCheckpoints):  # noqa: N803 - the engine's name
        self.R = R
        self.run = run
        self.ckpt = run.ckpt
        self.passed: dict[str, int] = {}  # per processing thread: its latest barrier epoch
        self.rendezvous: dict[str, threading.Barrier] = {}
        self.epoch: dict[str, int] = {}  # per operator: the epoch being snapshotted
        try:
            for o in R.ops.values():
                self.rendezvous[o.name] = threading.Barrier(o.k, self._act(o))
                blob = self.ckpt.restored(o.name)
                if blob is not None:
                    snapshot.restore(o.name, [r.inst for r in o.readers], blob)
            R.control.on_abort(self._abort)
        except BaseException:
            run.close()
            raise

    def _abort(self, e: BaseException) -> None:
        for bar in self.rendezvous.values():
            bar.abort()

    def _act(self, o: _Operator) -> Any:
        def act() -> None:  # run by the last thread to arrive, the others waiting
            try:
                blob = snapshot.snapshot(o.name, [r.inst for r in o.readers])
                self.ckpt.snapshot(o.name, self.epoch[o.name], blob)
            except BaseException as e:  # recorded before the barrier breaks
                self.R.control.record(e)
                raise
        return act

    def at_barrier(self, o: _Operator, r: _Reader, pusher: Any, ts: float,
                   b: CheckpointBarrier) -> bool:
        """Thread ``r`` of ``o`` read barrier ``(ts, b)``: False for another source's copy
        of a barrier it passed, else True once it forwarded it (see the module doc)."""
        if b.epoch <= self.passed.get(r.name, self.ckpt.plan.base):
            return False
        self.passed[r.name] = b.epoch
        inst = r.inst
        assert inst is not None
        inst.advance(b.cut)  # (a user error here is the reader's, as any of its calls)
        if inst.out:
            pusher.push(inst.take())
        self.epoch[o.name] = b.epoch
        self.R.control.wait_at(self.rendezvous[o.name], f"{o.name}: checkpoint barrier {b.epoch}")
        forward_barrier(pusher.pid, pusher.inlets(), (ts, b))
        return True
