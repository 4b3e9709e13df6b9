"""Checkpoints and resume on the ordered engine (issue #17): the line's side of
:mod:`stretchflow.runtime.checkpoint` (docs/checkpoints.md, "Ordered and slack engines").

The cut is the one of every engine, "every input tuple with ts <= T", carried by the control
tuple ``(T + 0.5, CheckpointBarrier(e, T))`` each source puts after its last tuple <= T. The
ordered engine has one line of stages fed by one source stage that merges every source by
timestamp, so the first barrier of epoch e out of that merge is the cut: every source's tuples
<= T are before it, none later (the later copies, one per source, are dropped there). The
sources are wrapped by the runtime's
:class:`~stretchflow.runtime.threaded_checkpoint.ThreadedCheckpointer`, whose cut T is at or
after every timestamp any source has read (the merge reads one tuple ahead of each source).

The barrier travels the line as the line's own control items do (watermarks, END): in place,
passed on by every stage (tagged: under the tag of END, which every stage keeps), released by
every reorder buffer in serial order. The source stage stops reading after a barrier until that
barrier reaches the sinks, so when it does nothing is in flight: every stage has processed
exactly the items before it (a unit leaves a reorder buffer only after its input was
processed, and every earlier unit left first) and no worker holds an item after it. There,
under the scheduler's lock, :meth:`OrderedCheckpoints.at_barrier` snapshots each stateful
stage (an O+'s σ by key group and its instances' progress, :mod:`~..operators.snapshot`, plus
the tuples its readiness merge holds; a stateful stage's states per bucket), then each sink's
drain commits its part e (the runtime's, as on every threaded engine) and the last one writes
the checkpoint; then the source goes on. The pause costs one drain of
the line per checkpoint, no change to the data path between checkpoints.

Resume: each stage is restored before the workers start, the sources skip what the checkpoint
covers; the engine is deterministic (the sequential order), so the output equals an
uninterrupted run's, byte for byte.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import StretchflowError
from ..operators import snapshot
from ..operators.stateless import apply_batch
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.threaded_checkpoint import RunCheckpoints
from .ordered_stages import OPlusStage

if TYPE_CHECKING:
    from ..flow import Flow, Node
    from .ordered_stages import Plan, Stage

__all__ = ["OrderedCheckpoints", "apply_chain", "deferred"]


class OrderedCheckpoints:
    """One checkpointed run of the ordered engine's stateful stages (see the module doc);
    the sources' and sinks' side, the end and the result keys are the runtime's (``run``)."""

    def __init__(self, flow: Flow, plan: Plan, path: Any, every: Any,
                 stages: list[Stage]):
        stateful = [n.name for n in plan.ops if n.kind in ("oplus", "stateful")]
        # the engine in the fingerprint: another engine's snapshots have another layout
        self.run = RunCheckpoints(path, every, flow, {"engine": "ordered"}, stateful)
        self.stages = [st for st in stages if st.name in set(stateful)]
        try:
            for st in self.stages:
                blob = self.run.restored(st.name)
                if blob is not None:
                    _restore(st, blob)
        except BaseException:
            self.run.close()
            raise

    def items(self, node: Node, counter: list[int]) -> Iterator[Any]:
        """Source ``node``'s items with the barriers, past the restored cut."""
        return self.run.items(node, counter)

    def batches(self, node: Node, batches: Iterator[Any]) -> Iterator[Any]:
        """Source ``node``'s :class:`~stretchflow.batch.Batch` items with the barriers, past
        the restored cut (a batch straddling a cut is split there)."""
        return self.run.ckpt.batches(node.name, batches, [0])

    def at_barrier(self, b: CheckpointBarrier) -> None:
        """The barrier reached the sinks with nothing in flight (the executor's lock is
        held): snapshot every stateful stage (then each sink's drain commits its part)."""
        for st in self.stages:
            self.run.snapshot(st.name, b.epoch, _snapshot(st))


def _snapshot(st: Any) -> bytes:
    if isinstance(st, OPlusStage):
        # the readiness merge's held tuples are the stage's input not yet processed: with σ
        heads = [list(h) for h in st.heads]
        try:
            held = pickle.dumps(heads, protocol=5)
        except Exception as e:  # noqa: BLE001 - a payload that cannot be pickled
            raise StretchflowError(f"checkpoint: the tuples operator {st.name!r} holds cannot "
                                   f"be saved ({type(e).__name__}: {e})") from e
        return pickle.dumps({"kind": "oplus", "state": snapshot.snapshot(st.name,
                                                                           st.instances),
                             "heads": held}, protocol=5)
    return pickle.dumps({"kind": "stateful",
                         "states": [snapshot.snapshot_stateful(i) for i in st.instances]},
                        protocol=5)


def _restore(st: Any, blob: bytes) -> None:
    data = pickle.loads(blob)  # noqa: S301 - the checkpoint's own file, checksummed
    want = "oplus" if isinstance(st, OPlusStage) else "stateful"
    if not isinstance(data, dict) or data.get("kind") != want:
        raise StretchflowError(f"checkpoint: the state of operator {st.name!r} is not an "
                               f"ordered engine's {want} stage snapshot")
    if want == "oplus":
        snapshot.restore(st.name, st.instances, data["state"])
        heads = pickle.loads(data["heads"])  # noqa: S301 - as above
        if len(heads) != len(st.heads):
            raise StretchflowError(f"checkpoint: operator {st.name!r} had {len(heads)} "
                                   f"inputs, it has {len(st.heads)} now")
        st.heads[:] = [deque(h) for h in heads]
        return
    states = data["states"]
    if len(states) != len(st.instances):
        raise StretchflowError(f"checkpoint: operator {st.name!r} had {len(states)} buckets, "
                               f"it has {len(st.instances)} now")
    for inst, s in zip(st.instances, states, strict=True):
        snapshot.restore_stateful(inst, s)


def deferred(box: list[Any]) -> Callable[[Node, list[int]], Iterator[Any]]:
    """A source reader calling ``box[0]`` once read: the source stage is built before the
    checkpoint is opened (the checkpoint restores the stages), and read only later."""
    def items(node: Node, counter: list[int]) -> Iterator[Any]:
        yield from box[0](node, counter)

    return items


def apply_chain(op: Any, batch: list[Any], markers: tuple[Any, Any]) -> list[Any]:
    """:func:`apply_batch` over a chain's slice that may hold checkpoint barriers: they pass
    in place (``apply_batch`` passes its markers by identity, a barrier is one per epoch)."""
    out: list[Any] = []
    start = 0
    for k, item in enumerate(batch):
        if type(item[1]) is CheckpointBarrier:
            if k > start:
                out.extend(apply_batch(op, batch[start:k], markers))
            out.append(item)
            start = k + 1
    if start < len(batch):
        out.extend(apply_batch(op, batch[start:] if start else batch, markers))
    return out
