"""Checkpoints and resume on the VSN engine (issue #17): what a VSN operator does at a
checkpoint barrier (docs/checkpoints.md, "The VSN engine"). The sources' side (the cut chosen
across source threads, the barriers into the stream, past the stateless operators), the
sinks' side (each sink's part, committed at its epoch's first barrier) and the end are the
runtime's (:mod:`stretchflow.runtime.threaded_checkpoint`).

The ESG orders entries by timestamp, so every connected instance of an O+ reads the first
barrier of epoch e at the same position of ESG_in, after every tuple <= T of every source.
There (:meth:`VSNCheckpoints.at_barrier`) the instance advances W to T and emits what that
closes, waits with the other connected instances (a barrier of the operator, like a
reconfiguration's: exactly one acts), the acting one snapshots σ and every connected
instance's progress, then each forwards the barrier into ESG_out, where readiness puts it
after every output <= T of every producer.

Reconfigurations: a control tuple and a checkpoint barrier are both positions of ESG_in, read
by every connected instance in the same order; whichever comes first is done first. A
checkpoint barrier's parties are the instances connected at its position; an instance joining
at a control tuple starts with the acting instance's last checkpoint epoch, so the later
copies of a barrier it already passed (one per source) are ignored by it too. Checkpoint
epochs and reconfiguration epochs are separate counters; the latest-control-tuple rule of
reconfigurations does not see checkpoint barriers. On resume the operators start at the run's
``parallelism`` (σ by key group under the new f_μ); ``--reconfigure`` counts the input tuples
of the resumed run only (a step is a parallelism, not part of the output).

A columnar O+ (whole batches through the shared columnar σ): instances waiting for a batch
another one sums help by summing later batches; a fence (:meth:`ColumnarShared.fence_at`)
keeps them from summing a batch past a cut not yet snapshotted, so the snapshot of its
partials holds exactly the batches <= T.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

from ..errors import StretchflowError
from ..operators import snapshot
from ..runtime import raise_user_error
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.threaded_checkpoint import RunCheckpoints, forward_barrier

if TYPE_CHECKING:
    from .vsn import VSNExecutor, VSNInstance
    from .vsn_operator import VSNOperator


class VSNCheckpoints:
    """One VSN run's operators at checkpoint barriers; ``run`` is the run's
    :class:`~stretchflow.runtime.threaded_checkpoint.RunCheckpoints`."""

    def __init__(self, ex: VSNExecutor, run: RunCheckpoints):
        self.ex = ex
        self.run = run
        self.ckpt = run.ckpt
        try:
            for vop in ex.ops.values():
                vop.checkpoints = self
                if vop.columnar_state is not None:
                    sh = vop.columnar_state
                    vop.inlet.fence = sh.fence_at  # type: ignore[attr-defined]
                blob = self.ckpt.restored(vop.name)
                if blob is not None:
                    self._restore(vop, blob)
        except BaseException:
            run.close()
            raise

    # -- operators -----------------------------------------------------------------------------
    def at_barrier(self, vi: VSNInstance, ts: float, b: CheckpointBarrier) -> None:
        """Instance ``vi`` read checkpoint barrier ``(ts, b)`` (see the module doc)."""
        if b.epoch <= vi.ckpt_epoch:
            return  # another source's copy of a barrier already passed
        vi.ckpt_epoch = b.epoch
        vop = vi.vop
        try:
            vi.inst.advance(b.cut)
        except Exception as e:
            raise_user_error(vop.name, b.cut, None, e)
        vi._emit()
        with vop.lock:
            key = ("checkpoint", b.epoch)
            bar = vop._barriers.get(key)
            if bar is None:  # the parties: the instances connected at this position
                bar = vop._barriers[key] = vop.new_barrier(
                    len(vop.O), lambda: self._act(vop, b.epoch))
        vop.control.wait_at(bar, f"{vop.name}: checkpoint barrier {b.epoch}")
        forward_barrier((vop.name, vi.j), vi.pusher.inlets(), (ts, b))

    def _act(self, vop: VSNOperator, epoch: int) -> None:
        try:
            insts = [vop.instances[j] for j in sorted(vop.O)]
            if vop.columnar_state is not None:
                blob = _columnar_snapshot(vop, insts)
                vop.columnar_state.unfence()
            else:
                blob = snapshot.snapshot(vop.name, [vi.inst for vi in insts])
            self.ckpt.snapshot(vop.name, epoch, blob)
            with vop.lock:
                vop._barriers.pop(("checkpoint", epoch), None)
        except BaseException as e:  # as VSNOperator._apply: recorded before the barrier breaks
            vop.control.record(e)
            raise

    def _restore(self, vop: VSNOperator, blob: bytes) -> None:
        insts = [vop.instances[j] for j in sorted(vop.O)]
        if vop.columnar_state is not None:
            _columnar_restore(vop, insts, blob)
        else:
            snapshot.restore(vop.name, [vi.inst for vi in insts], blob)


# -- the columnar σ ------------------------------------------------------------------------------
def _columnar_snapshot(vop: VSNOperator, insts: list[VSNInstance]) -> bytes:
    sh = vop.columnar_state
    with sh.lock:
        data = {"kind": "ColumnarVSNInstance", "G": sh.G,
                "parts": {s: list(ps) for s, ps in sh.parts.items()},
                "key_types": sh._key_types,
                "instances": [{"W": vi.inst.W, "next_l": vi.inst.next_l} for vi in insts]}
    try:
        return pickle.dumps(data, protocol=5)
    except Exception as e:  # noqa: BLE001
        raise StretchflowError(f"checkpoint: the state of operator {vop.name!r} cannot be "
                               f"saved ({type(e).__name__}: {e})") from e


def _columnar_restore(vop: VSNOperator, insts: list[VSNInstance], blob: bytes) -> None:
    from ..operators.columnar_kernels import key_groups

    data = pickle.loads(blob)  # noqa: S301 - the checkpoint's own file, checksummed
    if data.get("kind") != "ColumnarVSNInstance":
        raise StretchflowError(
            f"checkpoint: operator {vop.name!r} was checkpointed as {data.get('kind')}, this "
            f"run makes it a ColumnarVSNInstance (another --columnar); resume with the "
            f"options of the checkpointed run")
    sh = vop.columnar_state
    with sh.lock:  # first: a tuple partial's groups come from these key types
        sh._key_types = data["key_types"]
    parts: dict[int, list[Any]] = {}
    for s, ps in data["parts"].items():
        out = []
        for p in ps:
            if type(p) is tuple:  # (table of key columns and v, key group per row)
                table, g = p
                if sh.G > 1 and (g is None or data["G"] != sh.G):
                    cols = [table.column(c).combine_chunks() for c in table.column_names
                            if c != "v"]
                    g = key_groups(cols, sh.G)
                elif sh.G == 1:
                    g = None
                out.append((table, g))
            else:  # a tuple-at-a-time partial: its keys' groups under this process's hash
                p.groups = sh._groups_of(list(p.accs))
                out.append(p)
        parts[s] = out
    own = data["instances"]
    with sh.lock:
        sh.parts = parts
    for j, vi in enumerate(insts):
        o = own[j] if len(own) == len(insts) else own[0]
        vi.inst.W = o["W"]
        vi.inst.next_l = o["next_l"]
        sh.moved(vi.j, o["next_l"])
