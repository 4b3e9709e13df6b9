"""Snapshots of O+ instances for checkpoints (issue #17): σ per key group, the instance's own
progress, nothing of the operator.

A snapshot holds what the instances of one O+ need to go on exactly where they were: σ (the
key groups of their :class:`~.oplus.SharedState`), and per instance everything else it keeps
(watermark W, held f_U outputs, sequence counters, the latest window boundary seen, and a
subclass's own: the columnar instance's Arrow partials, its key types). It leaves out the
operator object (its functions may be lambdas: the resumed run builds the same operator
again) and what is derived from σ and the assignment (the expiry heap, which
``set_assignment`` rebuilds). Pickled (protocol 5: Arrow tables pickle too).

σ is keyed by ``hash(key) % G``, and Python's string hash is salted per process, so a key's
group in the checkpointing process means nothing in the resuming one: :func:`restore` puts
every key into its group under this process's hash and this run's G, which is also what
restoring at another parallelism or another number of key groups needs (the key groups move
to the instances of the new f_μ; the σ of a group is a dict per window or slice). Held f_U
outputs (a join's) are outputs, not keyed state: at the same parallelism each instance gets
its own back; at another one instance 0 takes them all (their timestamps order them).
"""

from __future__ import annotations

import copy
import heapq
import pickle
from collections.abc import Callable
from typing import Any

from ..errors import StretchflowError
from .oplus import OPlusInstance
from .slicing import NEXT

#: attributes that are the operator, σ or derived from them: never in a snapshot
_SKIP = frozenset({"op", "state", "groups", "assign", "_owns_all", "_lheap", "group_hits",
                   "j"})


def snapshot(name: str, insts: list[OPlusInstance]) -> bytes:
    """The state of O+ ``name``'s instances (all over one σ), serialized."""
    own = [{k: v for k, v in vars(inst).items() if k not in _SKIP} for inst in insts]
    for o in own:
        if o.get("out") or o.get("_tables"):
            raise StretchflowError(f"{name}: snapshot with outputs not yet taken (an executor "
                                   f"must forward them before the barrier)")
    data = {"kind": type(insts[0]).__name__, "G": insts[0].state.G,
            "groups": insts[0].state.groups, "instances": own}
    try:
        return pickle.dumps(data, protocol=5)
    except Exception as e:  # noqa: BLE001 - a user's state that cannot be pickled
        raise StretchflowError(f"checkpoint: the state of operator {name!r} cannot be saved "
                               f"({type(e).__name__}: {e}); its accumulators, window states "
                               f"and outputs must be picklable") from e


def restore(name: str, insts: list[OPlusInstance], blob: bytes) -> None:
    """Puts a :func:`snapshot` into fresh instances ``insts`` of the same operator (over one
    σ; any number of instances and key groups)."""
    data = pickle.loads(blob)  # noqa: S301 - the checkpoint's own file, checksummed
    kind = type(insts[0]).__name__
    if data["kind"] != kind:
        raise StretchflowError(
            f"checkpoint: operator {name!r} was checkpointed as {data['kind']}, this run "
            f"makes it a {kind} (another --columnar or parallelism path); resume with the "
            f"options of the checkpointed run")
    state = insts[0].state
    if data["G"] == state.G == 1:
        regrouped = data["groups"]
    else:
        regrouped = regroup(data["groups"], state.G)
    for g, sg in enumerate(regrouped):
        state.groups[g].clear()
        state.groups[g].update(sg)
    own = data["instances"]
    same = len(own) == len(insts)
    pending: list[Any] = []
    if not same:
        for o in own:
            pending.extend(o.get("_pending", ()))
        heapq.heapify(pending)
    for j, inst in enumerate(insts):
        # another parallelism: every instance starts from instance 0's progress, each with
        # containers of its own (a list shared by two instances would hold both's outputs)
        o = own[j] if same or j == 0 else copy.deepcopy(own[0])
        if not same:
            o["_pending"] = pending if j == 0 else []
            o["_seq"] = max(x.get("_seq", 0) for x in own)
        for k, v in o.items():
            setattr(inst, k, v)
        inst.set_assignment(inst.assign)  # the expiry heap, from the restored σ


def regroup(groups: list[dict], G: int,
            group_of: Callable[[Any], int] | None = None) -> list[dict]:
    """σ's entries moved to the ``G`` groups ``group_of`` gives each key (default: this
    process's ``hash`` mod G; SN process channels place keys by a stable hash)."""
    out: list[dict] = [{} for _ in range(G)]
    for sg in groups:
        nxt = sg.get(NEXT)
        for l, d in sg.items():
            if l == NEXT:
                continue
            for k, v in d.items():
                og = out[hash(k) % G if group_of is None else group_of(k)]
                e = og.get(l)
                if e is None:
                    e = og[l] = {}
                e[k] = v
                if nxt is not None and (og.get(NEXT) is None or nxt < og[NEXT]):
                    # a sliced σ_g: its next window to emit is the earliest of the groups it
                    # takes keys from (a window before a key's first slice holds no slice of
                    # it, so emitting it earlier than its own group would adds nothing)
                    og[NEXT] = nxt
    return out


def snapshot_stateful(inst: Any) -> bytes:
    """The state of a Pipeline's stateful operator instance (its ``states`` dict)."""
    try:
        return pickle.dumps(inst.states, protocol=5)
    except Exception as e:  # noqa: BLE001
        raise StretchflowError(f"checkpoint: the state of operator {inst.op.name!r} cannot "
                               f"be saved ({type(e).__name__}: {e})") from e


def restore_stateful(inst: Any, blob: bytes) -> None:
    inst.states.clear()
    inst.states.update(pickle.loads(blob))  # noqa: S301 - the checkpoint's own file
