"""Whole batches through the VSN executor (issues #16, #31, #32): which sources read batches,
which operators take them, and the inlets that carry them.

A source reads :class:`~stretchflow.batch.Batch` es (``Source.batches``: sorted, unpaced files)
when each of its readers takes them: a stateless operator, or a single-input O+ (a join merges
its inputs tuple by tuple). It builds Arrow tables only when a reader reads them (a Map or
Filter with a columnar form, ``batch_fn``; an O+ with columnar forms, ``Aggregate.columnar``);
otherwise its batches hold rows only (``tables=False``: JSON Lines parsed per line, issue #32).
Batches then flow on (:class:`~.plan.Batches`):

* a fused Map, Filter or FlatMap, run on its producer's thread, applies itself to each whole
  batch (:func:`~.plan.apply_batches`): its columnar form where it has one (a batch the form
  refuses goes through ``fn`` tuple by tuple, which names the failing tuple), else its Python
  function over the batch's rows in one loop (``apply_rows``);
* a columnar O+ — one with columnar forms whose input stream holds batches of tables — takes
  them whole: its instances share a columnar σ
  (:class:`~stretchflow.operators.columnar_shared.ColumnarShared`) and its windows leave as
  batches, one per window and instance (where only columnar O+ read them,
  ``VSNOperator.merge_outputs``: runs of whole windows from an instance that owns every key
  group, or with several instances and an order-free reader one entry per updateW each,
  ``VSNOperator.interleave``). Its output
  stream holds batches in turn, so an O+ with columnar forms fed by it (hot items' arg_max
  per window over the counts) is columnar too: chains stay columnar;
* any other single-input O+ whose input holds batches takes them as rows
  (:attr:`BatchPlan.rows`; ``VSNInstance._rows``: an A+'s f_MK once per batch for all its
  instances, :mod:`~stretchflow.operators.row_keys`) and its outputs leave as one batch per
  timestamp;
* a consumer that takes tuples (a join) gets each batch's tuples, in order, from the producer
  (:data:`~.plan.EXPLODE`).

A batch is one ESG entry ``(last ts, batch)``: a run of tuples in timestamp order, never a
reordering (an interleaved entry of a columnar O+'s instances is keyed by its first row's ts:
``ColumnarVSNInstance._emit_windows``). Control tuples and watermarks stay entries of their
own, so a reconfiguration switches between two batches; a ``--reconfigure`` step due inside a
source's batch cuts it there (:meth:`~stretchflow.runtime.SourcePump.run_batches`). Flow
control and the spread bound count tuples: an inlet of batches holds ``capacity`` tuples'
worth of batches (at least four), and ``max_spread`` tuples are ``max_spread // rows`` entries
(at least one). A source's batch holds :data:`~stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH`
tuples where none of its readers can multiply rows (a flow of column expressions), else
:data:`~stretchflow.runtime.pump.COLUMNAR_BATCH` (:func:`~.plan.columnar_batch`).

Where an O+ with columnar forms takes tuples or rows, the run summary's ``columnar_fallback``
says why (:attr:`BatchPlan.fallback`): ``columnar='off'``, several inputs, an input stream
without batches of tables (a source that gives none, a reader of it that takes tuples, a
lambda operator in between), or a checkpointed run whose O+ is fed by another O+ (the
checkpoint fences of the shared σ assume one producer of batches).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ..batch import Batch, prefer_system_allocator
from ..flow import Flow, Node
from ..io.sources import read_batches
from ..runtime import pump
from .plan import Batches, Inlet, columnar_batch, columnar_form, readers_of

if TYPE_CHECKING:
    from .vsn_operator import VSNOperator


class BatchPlan(Batches):
    """The plan's :class:`~.plan.Batches`, with the sources' batch iterators (``sources``)
    and why each O+ with columnar forms that takes tuples does (``fallback``)."""

    def __init__(self) -> None:
        super().__init__(set(), set())
        self.sources: dict[Node, Any] = {}
        self.fallback: dict[str, str] = {}
        #: the takers that take batches as rows (the others, as tables: a columnar σ)
        self.rows: set[Node] = set()
        #: the takers whose input is an O+'s outputs (batches of a window's outputs each, or
        #: of runs of whole windows; not a source's batches)
        self.outputs_in: set[Node] = set()
        #: tuples a batch holds in the streams of sources' batches (a source's, then those
        #: of the stateless operators applied to them: plan.columnar_batch), and at most in
        #: the output of a columnar O+ whose instances merge windows (merge_outputs)
        self.batch_rows: dict[Node, int] = {}
        #: the sources whose batches carry Arrow tables (parsed by Arrow, the GIL released)
        self.table_sources: set[Node] = set()

    def rows_in(self, node: Node) -> int:
        """Tuples a source batch holds in ``node``'s (first) input stream."""
        return self.batch_rows.get(node.inputs[0], pump.COLUMNAR_BATCH) if node.inputs \
            else pump.COLUMNAR_BATCH

    def get(self, node: Node) -> Any:
        """Source ``node``'s batches, or None (it is read tuple by tuple)."""
        return self.sources.get(node)


def plan_batches(flow: Flow, ops: dict[Node, VSNOperator], n_groups: int, on: bool,
                 checkpoints: bool = False) -> BatchPlan:
    """Which streams hold batches (see the module doc); sets up the columnar σ of each O+
    that takes them as tables and marks each that takes them as rows. Nothing when ``on`` is
    False. ``checkpoints``: the run checkpoints."""
    plan = BatchPlan()
    able = [node for node in ops if getattr(node.spec, "columnar", False)]
    if not on:
        plan.fallback = dict.fromkeys((n.name for n in able), "columnar='off'")
        return plan
    cand = {node for node in able if len(node.inputs) == 1}
    readers = readers_of(flow, sinks=False)
    streams, takers = plan.streams, plan.takers
    tables: set[Node] = set()  # streams whose batches are tables (columnar forms read them)
    fed_by_oplus: set[Node] = set()  # streams an O+'s instances produce (through stateless)
    for node in flow.nodes:  # in topological order
        if node.kind == "source":
            rs = readers[node]
            # every reader takes batches: a stateless operator or a one-input O+ (a join
            # merges its inputs tuple by tuple); tables only where a columnar form reads them
            if not rs or not all(r.kind == "stateless" or (r.kind == "oplus" and
                                                           len(r.inputs) == 1) for r in rs):
                continue
            table = any(r in cand or columnar_form(r) for r in rs)
            batches = getattr(node.spec, "batches", None)
            rows = columnar_batch(node, readers)
            it = read_batches(node.spec, rows, table) if batches is not None else None
            if it is not None:
                plan.sources[node] = it
                plan.batch_rows[node] = rows
                streams.add(node)
                if table:
                    tables.add(node)
                    plan.table_sources.add(node)
        elif node.kind == "stateless":
            up = node.inputs[0]
            if up in fed_by_oplus:
                fed_by_oplus.add(node)
            if up in streams:
                streams.add(node)
                if up in plan.batch_rows:
                    plan.batch_rows[node] = plan.batch_rows[up]
                if up in tables and columnar_form(node):
                    tables.add(node)
        elif node.kind == "oplus":
            fed_by_oplus.add(node)
            if len(node.inputs) != 1 or node.inputs[0] not in streams:
                continue
            up = node.inputs[0]
            streams.add(node)
            takers.add(node)
            if node not in cand or up not in tables:
                plan.rows.add(node)  # a batch's rows through the instances' loops
            elif checkpoints and up in fed_by_oplus:
                plan.rows.add(node)
                plan.fallback[node.name] = ("a checkpointed run: an O+ fed by another O+ "
                                            "takes rows, not columns")
            else:
                tables.add(node)
            if up in fed_by_oplus:
                plan.outputs_in.add(node)
    for node in able:
        if (node not in takers or node in plan.rows) and node.name not in plan.fallback:
            plan.fallback[node.name] = (
                "several inputs" if len(node.inputs) > 1 else
                "its input holds no batches of columns (a source that gives none: not a "
                "sorted, unpaced file; a reader of that source that takes tuples; or an "
                "operator without a columnar form in between)")
    columnar = takers - plan.rows
    for src, it in list(plan.sources.items()):
        rs = readers[src]
        if len(rs) == 1 and rs[0] in columnar:
            # f_MK's explode of each batch on the source's thread, ahead of the instances
            # (operators/columnar.explode_ahead; the instances then only sum and combine)
            from ..operators.columnar import explode_ahead

            plan.sources[src] = explode_ahead(rs[0].spec, it)
    if not columnar and not tables:
        return plan
    prefer_system_allocator()
    from ..operators.column_forms import order_free
    from ..operators.columnar_shared import ColumnarShared

    all_readers = readers_of(flow, sinks=True)
    for node in columnar:
        ops[node].columnar_state = ColumnarShared(node.spec, n_groups)
        # its instances may put several windows in an entry where only columnar O+ read
        # them (their ESG_in holds capacity tuples' worth of entries of that many rows; a
        # sink's holds output_batches, counted as windows)
        rs = all_readers[node]
        if rs and all(r in columnar for r in rs):
            ops[node].merge_outputs = True
            plan.batch_rows[node] = pump.WIDE_COLUMNAR_BATCH
            # several instances' entries interleave: only where the readers' outputs do not
            # depend on the order of rows within a timestamp (ColumnarVSNInstance.interleave)
            ops[node].interleave = all(order_free(r.spec) for r in rs)  # type: ignore[union-attr]
    return plan


class BatchAwareInlets:
    """The plan's inlet factory (:data:`~stretchflow.executors.plan.InletFactory`): ESGs, where
    that of a columnar O+ counts its capacity in batches and tells the O+'s σ of each batch,
    and that of a sink fed batches holds fewer entries: a source's batches (through stateless
    operators) as many as hold ``capacity`` tuples, an O+'s outputs a 64th of it (an entry
    may be a whole window)."""

    def __init__(self, flow: Flow, ops: dict[Node, VSNOperator], plan: BatchPlan):
        self.ops = ops
        self.plan = plan
        self.batch_sinks = {("sink", k): node for k, (node, _) in enumerate(flow.sinks)
                            if node in plan.streams}

    def __call__(self, consumer: Any, name: str, producers: list[Hashable],
                 readers: list[Hashable], capacity: int, n_inputs: int) -> Inlet:
        vop = self.ops.get(consumer) if isinstance(consumer, Node) else None
        if vop is not None and vop.columnar_state is not None:
            return BatchInlet(name, producers, readers,
                              source_batches(capacity, self.plan.rows_in(consumer)),
                              n_inputs, vop.columnar_state.offer)
        if consumer in self.plan.rows:  # an O+ taking rows: capacity in batches too
            capacity = output_batches(capacity) if consumer in self.plan.outputs_in else \
                source_batches(capacity, self.plan.rows_in(consumer))
        elif consumer in self.batch_sinks:
            # counted as 64-tuple entries, a source's batches of 65 536 tuples held a whole
            # 1 M-event file in flight (vsn's currency flow peaked at 380 MB against 186)
            rows = self.plan.batch_rows.get(self.batch_sinks[consumer])
            capacity = output_batches(capacity) if rows is None else \
                source_batches(capacity, rows)
        return Inlet(name, producers, readers, capacity, n_inputs)


def source_batches(capacity: int, rows: int) -> int:
    """ESG entries of a source's batches (``rows`` tuples each) that hold about ``capacity``
    tuples (at least four batches)."""
    return max(4, capacity // rows)


def output_batches(capacity: int) -> int:
    """ESG entries of an O+'s outputs as batches (a window's outputs each, or a source's
    batch) for ``capacity`` tuples: fewer entries than tuples, more than of whole batches."""
    return max(16, capacity // 64)


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


def spread_in_entries(spread: int | None, rows: int) -> int | None:
    """``max_spread`` (tuples) as ESG positions of batches of ``rows`` tuples."""
    return None if spread is None else max(1, spread // rows)
