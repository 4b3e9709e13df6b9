"""Whole batches through the VSN executor (issue #16): which sources read batches, which O+
take them, and the inlets that carry them.

A single-input O+ with columnar forms (``Aggregate.columnar``) reading a source directly takes
whole :class:`~stretchflow.batch.Batch` es when every reader of that source — such O+, or
sinks — takes batches and the source can give them (``Source.batches``: sorted, unpaced
files). Its instances then share a columnar σ
(:class:`~stretchflow.operators.columnar_shared.ColumnarShared`) and its windows leave as
batches, unless a consumer other than a sink reads them (then as tuples).

A batch is one ESG entry ``(last ts, batch)``: a run of tuples in timestamp order, never a
reordering. Control tuples and watermarks stay entries of their own, so a reconfiguration
switches between two batches; a ``--reconfigure`` step due inside a batch cuts it there
(:meth:`~stretchflow.runtime.SourcePump.run_batches`). Flow control and the spread bound count
tuples: an inlet of batches holds ``capacity`` tuples' worth of batches, and ``max_spread``
tuples are ``max_spread // COLUMNAR_BATCH`` entries (at least one;
:data:`~stretchflow.runtime.pump.COLUMNAR_BATCH` tuples a batch).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ..batch import Batch, prefer_system_allocator
from ..flow import Flow, Node
from ..runtime import pump
from .plan import Inlet

if TYPE_CHECKING:
    from .vsn_operator import VSNOperator

def plan_batches(flow: Flow, ops: dict[Node, VSNOperator], n_groups: int,
                 on: bool) -> dict[Node, Any]:
    """The sources that deliver batches, with their batch iterators; sets up the columnar
    σ of each O+ that takes them (see the module doc). Nothing when ``on`` is False."""
    if not on:
        return {}
    cand = {node for node in ops if len(node.inputs) == 1
            and node.inputs[0].kind == "source" and getattr(node.spec, "columnar", False)}
    out: dict[Node, Any] = {}
    for src in flow.nodes:
        if src.kind != "source":
            continue
        readers = [node for node in flow.nodes if src in node.inputs]
        if not readers or any(r not in cand for r in readers):
            continue
        batches = getattr(src.spec, "batches", None)
        it = batches(pump.COLUMNAR_BATCH) if batches is not None else None
        if it is not None:
            if len(readers) == 1:
                # f_MK's explode of each batch on the source's thread, ahead of the instances
                # (operators/columnar.explode_ahead; the instances then only sum and combine)
                from ..operators.columnar import explode_ahead

                it = explode_ahead(readers[0].spec, it)
            out[src] = it
    if not out:
        return out
    prefer_system_allocator()
    from ..operators.columnar_shared import ColumnarShared

    for node, vop in ops.items():
        if node in cand and node.inputs[0] in out:
            vop.columnar_state = ColumnarShared(node.spec, n_groups)
            vop.explode_outputs = any(node in other.inputs for other in flow.nodes)
    return out


class BatchAwareInlets:
    """The plan's inlet factory (:data:`~stretchflow.executors.plan.InletFactory`): ESGs, where
    that of a columnar O+ counts its capacity in batches and tells the O+'s σ of each batch,
    and that of a sink fed batches holds fewer entries (an entry may be a whole window)."""

    def __init__(self, flow: Flow, ops: dict[Node, VSNOperator], batch_sources: dict[Node, Any]):
        self.ops = ops
        fed = set(batch_sources) | {node for node, vop in ops.items()
                                    if vop.columnar_state is not None
                                    and not vop.explode_outputs}
        self.batch_sinks = {("sink", k) for k, (node, _) in enumerate(flow.sinks)
                            if node in fed}

    def __call__(self, consumer: Any, name: str, producers: list[Hashable],
                 readers: list[Hashable], capacity: int, n_inputs: int) -> Inlet:
        vop = self.ops.get(consumer) if isinstance(consumer, Node) else None
        if vop is not None and vop.columnar_state is not None:
            return BatchInlet(name, producers, readers,
                              max(4, capacity // pump.COLUMNAR_BATCH),
                              n_inputs, vop.columnar_state.offer)
        if consumer in self.batch_sinks:
            capacity = max(16, capacity // 64)
        return Inlet(name, producers, readers, capacity, n_inputs)


class BatchInlet(Inlet):
    """The ESG_in of a columnar O+: tells its shared σ of each batch added, so an instance
    waiting for a batch another is summing can sum a later one meanwhile."""

    def __init__(self, name: str, producers: list[Hashable], readers: list[Hashable],
                 capacity: int, n_inputs: int, offer: Callable[[list[Batch]], None]):
        super().__init__(name, producers, readers, capacity, n_inputs)
        self._offer = offer

    def push(self, pid: Hashable, items: list[tuple[int, Any]]) -> None:
        bs = [p for _, p in items if type(p) is Batch]
        super().push(pid, items)  # in ESG_in first: what a helper sums, a reader will get
        if bs:
            self._offer(bs)


def spread_in_entries(spread: int | None) -> int | None:
    """``max_spread`` (tuples) as ESG positions of batches."""
    return None if spread is None else max(1, spread // pump.COLUMNAR_BATCH)
