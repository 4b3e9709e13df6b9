"""The physical plan shared by the threaded executors: inlets and fused stateless chains.

Every consumer of a stream — an O+ or a sink — reads one *inlet*: an Elastic ScaleGate whose
sources are the threads that produce the consumer's inputs (source threads, upstream operator
instances) and whose readers are the consumer's threads. Items in an inlet are the producers'
``(ts, payload)`` tuples, passed on without copying; for a consumer with several inputs the
payload is wrapped in :class:`Tagged` with its input index. Control tuples carry a
:class:`~stretchflow.executors.vsn.Control` payload, watermarks the ``WATERMARK`` marker.

Stateless operators never get threads of their own: they run on the thread that produced
their input (STRETCH §7, "stateless operators in a chain run on the upstream threads"). A
:class:`Pusher` applies them to a producer's batches and adds the results to the inlets
downstream, each producer adding under its own source id.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ..buffers.esg import ElasticScaleGate
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.stateless import apply_batch

Item = tuple[int, Any]


class Tagged:
    """A payload bound for input ``i`` of a consumer that has several inputs."""

    __slots__ = ("i", "p")

    def __init__(self, i: int, p: Any):
        self.i = i
        self.p = p


class Inlet:
    """The ESG a consumer reads; the executors' producers add to it under their own ids."""

    def __init__(self, name: str, producers: list[Hashable], readers: list[Hashable],
                 capacity: int, n_inputs: int = 1):
        self.name = name
        self.tagged = n_inputs > 1
        self.esg = ElasticScaleGate(producers, readers, capacity=capacity)

    def push(self, pid: Hashable, items: list[tuple[int, Any]]) -> None:
        """Adds a producer's timestamp-sorted items."""
        self.esg.add_batch(items, pid)

    def send_control(self, control: Any) -> bool:
        """Adds a control tuple for the readers (addSTRETCH, journal Alg. 5 and §7); False,
        adding nothing, if no reader can get it any more (the input has ended).

        Alg. 5 queues a copy per producer, added before the producer's next tuple and
        stamped with its latest timestamp, so the control tuple queues behind every tuple
        already added, and before it behind the producer's next one. What Theorems 3 and 4
        need is only that every instance gets it at the same position of the same sequence.
        The ESG puts it at once right after the furthest instance's position
        (:meth:`ElasticScaleGate.add_next`): a reconfiguration neither waits for a
        producer's next tuple (forever, for an idle one) nor behind a backlog no instance
        has reached — which, when the reconfiguration provisions instances for a load
        peak, the new instances then help to process."""
        return self.esg.add_next(control) is not None

    # -- membership ----------------------------------------------------------------------------
    def add_producers(self, pids: list[Hashable], j: Hashable) -> bool:
        return self.esg.add_sources(pids, j)

    def remove_producers(self, pids: list[Hashable]) -> bool:
        return self.esg.remove_sources(pids)

    def close(self, pid: Hashable) -> None:
        """A producer's end of input."""
        self.esg.close_source(pid)


class Pusher:
    """One producer's view of the plan below a node: fused stateless operators, then inlets."""

    def __init__(self, pid: Hashable, targets: list[tuple[str, Any, Any]]):
        self.pid = pid
        # ("inlet", Inlet, input index) | ("chain", stateless spec, Pusher)
        self.targets = targets

    def push(self, batch: list[Item]) -> None:
        """Sends a batch of ``(ts, payload)`` items (watermarks included) downstream."""
        if not batch:
            return
        for kind, target, arg in self.targets:
            if kind == "inlet":
                if target.tagged:
                    batch_i = [(ts, p if p is WATERMARK else Tagged(arg, p)) for ts, p in batch]
                    target.push(self.pid, batch_i)
                else:
                    target.push(self.pid, batch)
            else:
                out = apply_batch(target, batch)
                if out:
                    arg.push(out)

    def close(self) -> None:
        for kind, target, arg in self.targets:
            if kind == "inlet":
                target.close(self.pid)
            else:
                arg.close()

    def inlets(self) -> list[Inlet]:
        found = []
        for kind, target, arg in self.targets:
            if kind == "inlet":
                found.append(target)
            else:
                found.extend(arg.inlets())
        return found


class PhysicalPlan:
    """Which threads produce into which inlets, for a Flow whose stateful nodes are O+."""

    def __init__(self, flow: Flow, producer_ids: Callable[[Node], list[Hashable]],
                 reader_ids: Callable[[Node], list[Hashable]], capacity: int):
        flow.validate()
        self.flow = flow
        self.children: dict[Node, list[tuple[str, Any, int]]] = {n: [] for n in flow.nodes}
        for node in flow.nodes:
            for i, up in enumerate(node.inputs):
                self.children[up].append(("node", node, i))
        for k, (node, sink) in enumerate(flow.sinks):
            self.children[node].append(("sink", sink, k))
        self.producer_ids = producer_ids
        # the producing nodes (sources, O+) whose outputs reach each consumer
        self.inlets: dict[Any, Inlet] = {}
        for node in flow.nodes:
            if node.kind == "oplus":
                self.inlets[node] = Inlet(node.name, self._producers_of(node), reader_ids(node),
                                          capacity, len(node.inputs))
        for k, (node, sink) in enumerate(flow.sinks):
            self.inlets[("sink", k)] = Inlet(f"sink {sink.name}", self._producers_into(node),
                                             [("sink", k)], capacity)

    def _producers_into(self, node: Node) -> list[Hashable]:
        """Producer ids whose output stream is ``node``'s (through stateless nodes)."""
        if node.kind == "stateless":
            return self._producers_into(node.inputs[0])
        return list(self.producer_ids(node))

    def _producers_of(self, node: Node) -> list[Hashable]:
        out: list[Hashable] = []
        for up in node.inputs:
            for pid in self._producers_into(up):
                if pid not in out:
                    out.append(pid)
        return out

    def pusher(self, node: Node, pid: Hashable) -> Pusher:
        """The pusher a producer of ``node``'s stream uses."""
        targets: list[tuple[str, Any, Any]] = []
        for kind, child, i in self.children[node]:
            if kind == "sink":
                targets.append(("inlet", self.inlets[("sink", i)], 0))
            elif child.kind == "stateless":
                targets.append(("chain", child.spec, self.pusher(child, pid)))
            else:
                targets.append(("inlet", self.inlets[child], i))
        return Pusher(pid, targets)
