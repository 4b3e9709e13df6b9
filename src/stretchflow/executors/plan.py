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

import threading
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
    """The ESG a consumer reads, with Alg. 5's per-source queues of control tuples."""

    def __init__(self, name: str, producers: list[Hashable], readers: list[Hashable],
                 capacity: int, n_inputs: int = 1):
        self.name = name
        self.tagged = n_inputs > 1
        self.esg = ElasticScaleGate(producers, readers, capacity=capacity)
        self._lock = threading.Lock()
        self._controls: dict[Hashable, list[Any]] = {}
        self._has_controls = False
        self._latest: dict[Hashable, int] = {}  # T[i] of Alg. 5: each producer's latest ts
        self._producers = set(producers)
        self._closed: set[Hashable] = set()

    # -- addSTRETCH (Alg. 5) -------------------------------------------------------------------
    def push(self, pid: Hashable, items: list[tuple[int, Any]]) -> None:
        """Adds a producer's sorted items; pending control tuples go first.

        Alg. 5 stamps a control tuple with the timestamp of the tuple t it precedes, so the
        switch (Alg. 4 L10: a watermark beyond γ) waits for a tuple after t. Stamped with the
        producer's previous timestamp instead — still no later than anything it adds next,
        and no earlier than any watermark it has caused — the switch happens at t itself."""
        if self._has_controls:
            with self._lock:
                ctrls = self._controls.pop(pid, None)
                self._has_controls = bool(self._controls)
            if ctrls:
                stamp = self._latest.get(pid, items[0][0])
                self.esg.add_batch([(stamp, c) for c in ctrls], pid)
        self.esg.add_batch(items, pid)
        self._latest[pid] = items[-1][0]

    def send_control(self, control: Any) -> bool:
        """Queues a control tuple for every producer still adding; False if none is left."""
        with self._lock:
            live = self._producers - self._closed
            for pid in live:
                self._controls.setdefault(pid, []).append(control)
            self._has_controls = bool(self._controls)
            return bool(live)

    # -- membership ----------------------------------------------------------------------------
    def add_producers(self, pids: list[Hashable], j: Hashable) -> bool:
        with self._lock:
            self._producers.update(pids)
        return self.esg.add_sources(pids, j)

    def remove_producers(self, pids: list[Hashable]) -> bool:
        with self._lock:
            self._producers.difference_update(pids)
            for pid in pids:
                self._controls.pop(pid, None)
            self._has_controls = bool(self._controls)
        return self.esg.remove_sources(pids)

    def close(self, pid: Hashable) -> None:
        """A producer's end of input: its queued control tuples can never be added."""
        with self._lock:
            self._closed.add(pid)
            self._controls.pop(pid, None)
            self._has_controls = bool(self._controls)
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
