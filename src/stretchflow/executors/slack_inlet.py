"""The slack executor's inlets: Slack ScaleGates and the writers that feed them
(determinism-latency §4.2, Fig. 7).

Every consumer of a stream (an O+ or a sink) reads one SSG of the shared physical plan
(:class:`~stretchflow.executors.plan.PhysicalPlan` with :func:`ssg_inlets` as its inlet
factory): an O+'s with the operator's SLT, a sink's with SLT = inf (ready tuples only: its
order is the output's). Its writers are the threads that produce the consumer's inputs: source
threads (:func:`write_source`, the runtime's source pump into the SSGs) and the processing
threads of the upstream O+, each through its :class:`~stretchflow.executors.plan.Pusher`
(stateless operators fused on the writer's thread). Items are ``(ts, payload, input index,
t_in)``: the SSGOperator measures each tuple's queue delay from ``t_in``, the wall-clock time
it was added (Eq. 1), so the index travels as a field and no ``Tagged`` is needed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Mapping
from operator import itemgetter
from typing import Any

from ..buffers.esg import Aborted
from ..buffers.ssg import SlackScaleGate
from ..flow import Node
from ..runtime import RunControl, SourcePump, Stopped
from ..runtime.latency import IngestClock
from ..sorted_runs import merge_runs
from .plan import InletFactory, Item, Pusher

__all__ = ["SOURCE_BATCH", "SOURCE_DELAY", "SSGInlet", "ssg_inlets", "write_source"]

SOURCE_BATCH = 256  # tuples a non-live source inserts at once
# seconds a partial batch of a slow non-live source may wait: well above the GIL's switch
# interval (5 ms), so that a source thread waiting once for the GIL does not cut its batch
SOURCE_DELAY = 0.05


class SSGInlet:
    """The Slack ScaleGate a consumer reads (the slack executor): the same producer-side
    interface as :class:`Inlet` (push, close, abort; the slack executor changes no membership
    at run time), items ``(ts, payload, input index, t_in)``."""

    def __init__(self, name: str, producers: list[Hashable], readers: list[Hashable],
                 capacity: int | None, slt: float = math.inf):
        self.name = name
        self.ssg = SlackScaleGate(producers, readers, slt, capacity=capacity)

    def push_input(self, pid: Hashable, batch: list[Item], i: int) -> None:
        """Adds a producer's ``(ts, payload)`` batch bound for input ``i``, stamped with the
        time it is added (the start of the queue delay of Eq. 1)."""
        now = time.perf_counter()
        self.ssg.insert_batch([(ts, p, i, now) for ts, p in batch], pid)

    def push_inputs(self, pid: Hashable, parts: list[tuple[int, list[Item]]]) -> None:
        """One producer's batches for several inputs as one sorted run (as
        :meth:`Inlet.push_inputs`)."""
        now = time.perf_counter()
        runs = [[(ts, p, i, now) for ts, p in b] for i, b in parts]
        self.ssg.insert_batch(merge_runs(runs, itemgetter(0)), pid)

    def push(self, pid: Hashable, items: list[Item]) -> None:
        """Adds a producer's control items (a checkpoint barrier, past the stateless
        operators: :func:`~stretchflow.runtime.threaded_checkpoint.forward_barrier`); the input
        index is not read."""
        self.push_input(pid, items, 0)

    def close(self, pid: Hashable) -> None:
        """A producer's end of input."""
        self.ssg.close_writer(pid)

    def abort(self, cause: BaseException) -> None:
        """Wakes every thread blocked on the buffer (a run's abort hook)."""
        self.ssg.abort(cause)


def ssg_inlets(slt: float | Mapping[str, float]) -> InletFactory:
    """The plan's inlet factory: an SSG per consumer, an O+'s with its SLT (``slt``: one for
    every O+, or by operator name, inf for those not named), a sink's with SLT = inf."""
    def inlet(consumer: Any, name: str, producers: list[Hashable], readers: list[Hashable],
              cap: int | None, n_inputs: int) -> SSGInlet:
        # a sink reads ready tuples only (SLT = inf): its order is the output's
        s = (slt.get(name, math.inf) if isinstance(slt, Mapping) else slt
             ) if isinstance(consumer, Node) else math.inf
        return SSGInlet(name, producers, readers, cap, s)
    return inlet


def write_source(node: Node, pusher: Pusher, control: RunControl, clock: IngestClock,
                 counts: dict[str, int], checkpoints: Any = None) -> None:
    """A source thread: source ``node`` into the SSGs its ``pusher`` reaches, in batches of
    :data:`SOURCE_BATCH` (a paced or replayed source: what the pump holds before each
    wait for the next tuple; the delay only bounds how long a slow one's tuples wait), its
    count into ``counts``. With ``checkpoints`` (the run's
    :class:`~stretchflow.runtime.threaded_checkpoint.RunCheckpoints`) the barriers go into
    the stream and a resumed run skips what the checkpoint covers."""
    spec, push = node.spec, pusher.push
    if checkpoints is not None:
        spec, push, _ = checkpoints.pump_args(node, pusher, None)
    pump = SourcePump(spec, push, control, clock=clock, batch=SOURCE_BATCH,
                      delay=SOURCE_DELAY)
    try:
        pump.run()
        pusher.close()
    except Aborted:
        raise Stopped from None
    finally:
        counts[node.name] = pump.count
