"""Checkpoints and resume on the SN engine (issue #17): the shared-nothing side of
:mod:`stretchflow.runtime.checkpoint` (docs/checkpoints.md, "The SN engine").

The cut is the reference's, "every input tuple with ts <= T", carried by the control tuple
``(T + 0.5, CheckpointBarrier(e, T))`` each source puts after its last tuple <= T. Sources
run on several threads (inline in a splitter, or in a tap), so T is chosen as on vsn
(:class:`~stretchflow.runtime.threaded_checkpoint.ThreadedCheckpointer`: each source
publishes its timestamp before it yields a tuple; T is the largest published one).

Barriers flow source → splitter → channels → merger → next region or sink:

* A **splitter** acts on the first barrier of epoch e it takes from its timestamp merge (all
  tuples <= T of every input are then routed): it flushes with watermark T to every channel
  (each advances W to T and emits what that closes), tells its merger which channels take
  part, and sends ``("barrier", e)`` to each. Later copies (one per source) are dropped.
* A **channel** (thread or process) answers ``("snap", j, e, bytes)``: σ of its key groups
  and its instance's own progress (:func:`channel_snapshot`), behind its outputs <= T on the
  same queue.
* The **merger**, once every channel of the barrier has snapped, releases every output <= T
  (every channel's watermark is T then), hands the region's snapshot to the checkpointer
  (:meth:`SNCheckpoints.region_snapshot`: the channels' groups in one list of G) and passes
  the barrier on to its subscribers: a downstream splitter (through its link queue), or a
  sink, which commits its part e (:class:`~.sn_links.SinkLink`). The checkpoint is written by
  the sink that completes the epoch.

A migration and a barrier are both points of one splitter's thread, so one is done before
the other starts: a barrier's parties are the channels at its position, a migration starts
after the channels got the barrier message (their snapshots precede their migration replies
on the same queues). Checkpoint epochs and migration epochs are separate counters.

Resume: the region starts at the run's parallelism; :func:`split_restore` puts every key of
the checkpoint's σ into the group this run gives it (``hash`` for thread channels, the
stable hash for process channels, this run's G) and each group to its owner under this run's
consistent-hashing f_μ; each initial channel gets ``("restore", blob)`` before any batch.
"""

from __future__ import annotations

import copy
import heapq
import pickle
from collections.abc import Callable
from typing import Any

from ..errors import StretchflowError
from ..operators import snapshot
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.threaded_checkpoint import RunCheckpoints

__all__ = ["CheckpointBarrier", "SNCheckpoints", "channel_restore", "channel_snapshot",
           "split_restore"]


def _kind(inst: Any) -> str:
    # process channels swap the class for a StableGroup* subclass: same σ, same progress
    return type(inst).__name__.removeprefix("StableGroup")


def channel_snapshot(name: str, inst: Any) -> bytes:
    """One channel's instance: σ (its own groups) and its own progress, serialized."""
    group_of = inst.__dict__.pop("_group_of", None)  # a process channel's hash: not state
    try:
        return snapshot.snapshot(name, [inst])
    finally:
        if group_of is not None:
            inst._group_of = group_of


def channel_restore(name: str, inst: Any, blob: bytes) -> None:
    """Puts a :func:`split_restore` part into a fresh channel instance."""
    data = pickle.loads(blob)  # noqa: S301 - the checkpoint's own file, checksummed
    if data["kind"] != _kind(inst):
        raise StretchflowError(
            f"checkpoint: operator {name!r} was checkpointed as {data['kind']}, this run "
            f"makes it a {_kind(inst)}; resume with the options of the checkpointed run")
    groups = inst.state.groups
    for sg in groups:
        sg.clear()
    for g, sg in data["groups"].items():
        groups[g].update(sg)
    for k, v in data["own"].items():
        setattr(inst, k, v)
    inst.set_assignment(inst.assign)  # the expiry heap, from the restored σ


def split_restore(name: str, blob: bytes, assign: list[int], n_groups: int,
                  group_of: Callable[[Any], int]) -> list[bytes]:
    """A region snapshot (:meth:`SNCheckpoints.region_snapshot`) as one restore blob per
    channel of ``assign`` (this run's f_μ over ``n_groups`` groups, keys placed by
    ``group_of``). At the same parallelism each channel gets its own progress back; at
    another one every channel starts from channel 0's, and channel 0 takes every held f_U
    output (their timestamps order them at the merger)."""
    data = pickle.loads(blob)  # noqa: S301 - the checkpoint's own file, checksummed
    regrouped = snapshot.regroup(data["groups"], n_groups, group_of)
    p = max(assign) + 1
    own = data["instances"]
    same = len(own) == p
    pending: list[Any] = []
    if not same:
        for o in own:
            pending.extend(o.get("_pending", ()))
        heapq.heapify(pending)
    out = []
    for j in range(p):
        o = own[j] if same or j == 0 else copy.deepcopy(own[0])
        if not same:
            o["_pending"] = pending if j == 0 else []
            o["_seq"] = max(x.get("_seq", 0) for x in own)
        mine = {g: sg for g, sg in enumerate(regrouped) if assign[g] == j and sg}
        out.append(pickle.dumps({"kind": data["kind"], "groups": mine, "own": o},
                                protocol=5))
    return out


class SNCheckpoints:
    """One SN run's regions at checkpoint barriers: their snapshots and restore; the sources'
    and the sinks' side, the end and the result keys are the runtime's (``run``)."""

    def __init__(self, run: RunCheckpoints):
        self.run = run

    def restore(self, name: str, assign: list[int], n_groups: int,
                group_of: Callable[[Any], int]) -> list[bytes] | None:
        blob = self.run.restored(name)
        if blob is None:
            return None
        return split_restore(name, blob, assign, n_groups, group_of)

    def region_snapshot(self, name: str, epoch: int, parts: dict[int, bytes]) -> None:
        """The snapshots of every channel of region ``name`` at barrier ``epoch`` as one
        snapshot: each group from the channel that holds it, the channels' progress in
        channel order."""
        kind, G, groups, own = None, 0, None, []
        for j in sorted(parts):
            d = pickle.loads(parts[j])  # noqa: S301 - our own channels' bytes
            kind = d["kind"].removeprefix("StableGroup")
            if groups is None:
                G, groups = d["G"], [{} for _ in range(d["G"])]
            for g, sg in enumerate(d["groups"]):
                if sg:
                    groups[g] = sg
            own.extend(d["instances"])
        data = {"kind": kind, "G": G, "groups": groups, "instances": own}
        self.run.snapshot(name, epoch, pickle.dumps(data, protocol=5))
