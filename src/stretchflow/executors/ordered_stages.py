"""The stages of the ordered executor and the plan that lays a flow out as a line of them.

ordered-multicore §2 (Def. 5.1) defines ordered execution over a *linear* pipeline: stage
``k`` sees the output sequence of stage ``k - 1``. A flow with several sources, branches,
multi-input O+ or several sinks keeps that model (:func:`plan`):

* **one line, tagged tuples.** The stages are the flow's nodes in topological order. The
  source stage merges every source by timestamp (ties to the lower source index, as the
  reference executor's merges) and tags each tuple with the node whose stream it belongs to:
  an item is ``(ts, payload, tag)``. A stage processes the tuples of its input tags, emits its
  outputs under its own tag and passes every other tuple on unchanged, in place (dropped once
  no later stage and no sink reads its tag). Serial numbers and reorder buffers (§3) keep the
  whole line's sequence, so each tag's subsequence is the sequence the sequential run gives
  that stream.
* **multi-input O+.** An O+ with inputs ``0..I-1`` reads them through a timestamp merge that
  releases a tuple only when every input has shown a later or equal one, ties to the lower
  input index (Definition 3's readiness, exactly the reference executor's ``heapq.merge``).
  The merge runs in the stage's single hand-over point (:meth:`_OPlusStage.merge`), so it is
  sequential like the paper's stateful operators; its output carries the input index ``i``
  the O+ receives.
* **a chain** (one source, each node reading the one before, sinks on the last) skips the
  tags: items stay ``(ts, payload)``, as fast as the paper's pipelines.

END (end of input) travels as the last item of the line, with tag ``-1``; so does a checkpoint
barrier (:mod:`.ordered_checkpoint`), passed on in place like a watermark by every stage.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from ..batch import Batch
from ..buffers.hybrid_queue import HybridQueue, PartitionedQueue
from ..buffers.reorder import AtomicInt, ReorderBuffer, SerialCounter
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..io.sources import marked_items
from ..operators.oplus import OPlus, SharedState
from ..operators.stateful import PartitionedStateful, Stateful
from ..operators.stateless import Filter, FlatMap, Map
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.control import raise_user_error, user_error
from ..sorted_runs import merge_runs
from .plan import columnar_batch, line_readers
from .scheduler import OpStats


class _End:
    """End of input, travelling through the line as the last item (ts = +inf)."""

    def __repr__(self) -> str:
        return "END"


END = _End()
END_TAG = -1
Item = tuple[Any, ...]  # (ts, payload) in a chain, (ts, payload, tag) otherwise


class Failure:
    """A user function's error on a line of row batches (:mod:`.ordered_rows`), travelling
    in place as a control item ``(ts of the failing tuple, Failure)``: what came before it
    goes on first, so an error of a later stage on an earlier tuple is raised first, as
    tuple at a time; the sinks raise it when it reaches them. (Only on that line: the
    tuple path raises where the error happens.)"""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"Failure({self.error!r})"


def joined_windows(items: list[Item]) -> list[Item]:
    """An O+ stage's merged output with each run of consecutive window batches as one batch
    ``(its last ts, Batch.concat)``: the runs are in timestamp order (the merge's), so the A+
    stage behind (hot items' arg_max) sums many windows per call, in the same row order;
    watermarks and END stay as they are."""
    out: list[Item] = []
    run: list[Batch] = []
    for item in items:
        if type(item[1]) is Batch:
            run.append(item[1])
            continue
        if run:
            b = Batch.concat(run)
            out.append((b.last, b))
            run = []
        out.append(item)
    if run:
        b = Batch.concat(run)
        out.append((b.last, b))
    return out


def order_key(item: Item) -> tuple[Any, int]:
    # outputs before a watermark of the same ts, END last (its ts is +inf anyway)
    p = item[1]
    return item[0], (2 if p is END else 1 if p is WATERMARK else 0)


# -- the plan -----------------------------------------------------------------------------------


class Plan:
    """The flow as a line: its sources, its operator nodes in order, tags and liveness."""

    def __init__(self, flow: Flow):
        needed: set[Node] = set()
        todo = [node for node, _ in flow.sinks]
        while todo:  # only what reaches a sink runs (as in the reference executor)
            n = todo.pop()
            if n not in needed:
                needed.add(n)
                todo.extend(n.inputs)
        nodes = [n for n in flow.nodes if n in needed]
        self.tag = {n: k for k, n in enumerate(nodes)}
        self.sources = [n for n in nodes if n.kind == "source"]
        self.ops = [n for n in nodes if n.kind != "source"]
        self.sinks = [s for _, s in flow.sinks]
        self.sink_tags = [self.tag[n] for n, _ in flow.sinks]
        self.chain = self._is_chain(flow)
        # alive[k]: tags some stage after stage k (stage 0 = the sources) or a sink reads
        readers: dict[int, int] = {}  # tag -> index of the last stage reading it
        for k, n in enumerate(self.ops, start=1):
            for u in n.inputs:
                readers[self.tag[u]] = k
        for t in self.sink_tags:
            readers[t] = len(self.ops) + 1
        self.alive = [frozenset([END_TAG, *(t for t, last in readers.items() if last > k)])
                      for k in range(len(self.ops) + 1)]

    def source_batch(self) -> int:
        """Tuples a batch of a chain's source holds (:func:`~.plan.columnar_batch`)."""
        return columnar_batch(self.sources[0], line_readers([self.sources[0], *self.ops]))

    def _is_chain(self, flow: Flow) -> bool:
        if len(self.sources) != 1:
            return False
        prev = self.sources[0]
        for n in self.ops:
            if n.inputs != [prev]:
                return False
            prev = n
        users = flow.consumers()
        line = [self.sources[0], *self.ops]
        return all(users[n] == 1 for n in line[:-1]) and all(n is prev for n, _ in flow.sinks)


# -- stages -------------------------------------------------------------------------------------


class Stage:
    """One node of the line: statistics, and (but the source) a reorder buffer."""

    def __init__(self, name: str, index: int, stats: OpStats, tag: int = 0,
                 keep: frozenset[int] = frozenset(), tagged: bool = False):
        self.name = name
        self.index = index
        self.stats = stats
        self.tag = tag  # the tag of this stage's outputs
        self.keep = keep  # tags still read after this stage (pass them on)
        self.tagged = tagged
        self.rb: ReorderBuffer[Any] | None = None
        # units the ring had no slot for yet (serial >= next + capacity), see _deposit
        self.stash: dict[int, Any] = {}
        self.stash_lock = threading.Lock()
        # released outputs not yet pushed downstream: the buffer's emit appends here and the
        # depositing worker pushes them once per slice (one hand-over per batch, not per unit)
        self.outbox: list[Item] = []
        self.outbox_lock = threading.Lock()

    def backlog(self) -> int:
        """Inputs given to this stage and not yet released downstream (its input queue)."""
        return 0


class SourceStage(Stage):
    """Stage 0: the sources, merged by timestamp when there are several (tagged)."""

    def __init__(self, plan: Plan, stats: OpStats, marker_every: int,
                 items: Callable[[Node, list[int]], Iterator[Any]] | None = None):
        super().__init__("+".join(n.name for n in plan.sources), 0, stats,
                         keep=plan.alive[0], tagged=not plan.chain)
        self.counts = {n.name: [0] for n in plan.sources}  # tagged: data tuples per source
        self.counter_of = {plan.tag[n]: self.counts[n.name] for n in plan.sources}

        def read(n: Node) -> Iterator[Any]:  # ``items``: a checkpoint's barriers and skips
            if items is not None:
                return items(n, [0])
            # a paced source with a watermark before each wait: the sinks' drains write what
            # they hold at a watermark, and without one a window's output waited for
            # SINK_BATCH more tuples or the end of input
            return marked_items(n.spec)

        self.it: Iterator[Item]
        if plan.chain:
            self.it = iter(read(plan.sources[0]))
        else:
            import heapq
            from operator import itemgetter

            self.it = heapq.merge(*(_tag_source(read(n), plan.tag[n])
                                    for n in plan.sources), key=itemgetter(0))
        # checkpoints: the last barrier's epoch, and no reading until it reached the sinks
        self.epoch = -1
        self.paused = False
        self.busy = False
        self.exhausted = False
        self.count = 0  # data tuples read, all sources
        self.marker_every = marker_every
        self.since_marker = 0
        self.wm_sent: dict[Any, float] = {}  # marker ts -> when it first entered
        self.wm_lock = threading.Lock()  # the source's worker adds, the sinks' drainer pops


def _tag_source(items: Iterator[tuple[Any, Any]], tag: int) -> Iterator[Item]:
    for ts, p in items:
        yield ts, p, tag


class StatelessStage(Stage):
    def __init__(self, name: str, index: int, stats: OpStats, op: Map | FlatMap | Filter,
                 **kw: Any):
        super().__init__(name, index, stats, **kw)
        self.op = op
        self.in_tag = 0
        self.queue: deque[Item] = deque()  # under the executor's lock
        self.next_slice = 1  # serial of the next slice (§3), drawn under the executor's lock
        # what one queued item counts for in the backlog (flow control): 1 for a tuple, more
        # for a batch of rows (ordered_rows), so the capacity holds a few batches
        self.weight = 1

    def backlog(self) -> int:
        return len(self.queue) * self.weight


def apply_tagged(st: StatelessStage, batch: list[Item]) -> list[Item]:
    """The stateless operator over a slice of tagged items: its input tag's tuples become
    outputs under its tag; every live tuple passes on in place."""
    op, u, n, keep = st.op, st.in_tag, st.tag, st.keep
    fn, kind, out = op.fn, type(op), []
    append = out.append
    pass_u = u in keep
    ts = p = None
    try:
        for ts, p, tag in batch:
            if tag != u:
                if tag in keep:
                    append((ts, p, tag))
                continue
            if p is WATERMARK:
                append((ts, p, n))
            elif kind is Map:
                append((ts, fn(p), n))
            elif kind is Filter:
                if fn(p):
                    append((ts, p, n))
            else:
                for q in fn(p):
                    append((ts, q, n))
            if pass_u:
                append((ts, p, u))
    except Exception as e:
        raise user_error(op.name, ts, p, e) from e
    return out


class Identity:
    """Partitioner of the executor's queues: the key *is* the bucket (computed beforehand)."""

    __slots__ = ("num_buckets",)

    def __init__(self, n: int):
        self.num_buckets = n

    def __call__(self, b: int) -> int:
        return b


class KeyedStage(Stage):
    """A stateful, partitioned-stateful or O+ stage behind a hybrid or partitioned queue."""

    def __init__(self, name: str, index: int, stats: OpStats, num_buckets: int,
                 queue_kind: str, units_per_input: int, max_batch: int, **kw: Any):
        super().__init__(name, index, stats, **kw)
        self.num_buckets = num_buckets
        self.serials = SerialCounter()
        cls = HybridQueue if queue_kind == "hybrid" else PartitionedQueue
        self.queue: HybridQueue[Any] | PartitionedQueue[Any] = cls(
            partitioner=Identity(num_buckets), max_batch=max_batch, serials=self.serials)
        self.units_per_input = units_per_input
        self.released = AtomicInt(0)  # units emitted by the reorder buffer

    def backlog(self) -> int:
        # serials handed out minus units released: queued, leased and waiting in the buffer
        return (self.serials.peek() - 1 - self.released.load()) // self.units_per_input


class PSStage(KeyedStage):
    """A :class:`Stateful` (one bucket) or :class:`PartitionedStateful` stage; queue entries
    are ``(ts, payload, key, pass_tag)``: ``pass_tag`` None for a tuple the operator
    processes, else the tag it passes on under (markers, other streams' tuples)."""

    def __init__(self, name: str, index: int, stats: OpStats,
                 op: Stateful | PartitionedStateful, queue_kind: str, max_batch: int,
                 **kw: Any):
        super().__init__(name, index, stats, op.buckets, queue_kind, 1, max_batch, **kw)
        self.op = op
        self.in_tag = 0
        # one instance per bucket; a bucket is processed by one worker at a time (queue)
        self.instances = [op.instance() for _ in range(op.buckets)]

    def entries(self, items: list[Item]) -> list[tuple[Any, int]]:
        """Queue entries with their buckets for items handed over in order (§5: the queue
        numbers them in this order)."""
        op = self.op
        keyed = isinstance(op, PartitionedStateful)
        pairs: list[tuple[Any, int]] = []
        append = pairs.append
        if not self.tagged:
            for ts, p in items:
                if p is WATERMARK or p is END or type(p) is CheckpointBarrier:
                    append(((ts, p, None, None), 0))  # markers keep their place (bucket 0)
                elif keyed:
                    k, b = op.bucket_of(ts, p)  # type: ignore[union-attr]
                    append(((ts, p, k, None), b))
                else:
                    append(((ts, p, None, None), 0))
            return pairs
        u, keep = self.in_tag, self.keep
        for ts, p, tag in items:
            if tag == u:
                if p is WATERMARK:
                    append(((ts, p, None, self.tag), 0))
                elif keyed:
                    k, b = op.bucket_of(ts, p)  # type: ignore[union-attr]
                    append(((ts, p, k, None), b))
                else:
                    append(((ts, p, None, None), 0))
                if u in keep:
                    append(((ts, p, None, u), 0))
            elif tag in keep:
                append(((ts, p, None, tag), 0))
        return pairs


class OPlusStage(KeyedStage):
    """An O+ as p instances over one σ, each seeing every tuple (ordered.py's docstring)."""

    def __init__(self, name: str, index: int, stats: OpStats, op: OPlus, p: int,
                 key_groups: int | None, queue_kind: str, **kw: Any):
        # a queue entry is a batch of inputs; a lease takes at most 4 of them per instance
        super().__init__(name, index, stats, p, queue_kind, p, 4, **kw)
        self.op = op
        self.p = p
        if p == 1 and key_groups is None:
            self.instances = [op.instance()]
        else:
            groups = key_groups if key_groups is not None else 16 * p  # as VSN's buckets
            sigma = SharedState(groups)
            assign = [g % p for g in range(groups)]
            self.instances = [op.instance(sigma, j, assign) for j in range(p)]
        self.group: list[Any] = []  # units of the batch being released (emit only)
        self.pushed = AtomicInt(0)  # entries put into the queue (once, not p times)
        self.done = AtomicInt(0)  # entries instance 0 has processed
        # what one entry counts for in the backlog (flow control): 1 for a tuple; more for a
        # whole batch (ordered_columnar), so the capacity holds a few batches, not 1024
        self.weight = 1
        # a line of row batches (ordered_rows): the merged outputs of an input leave as
        # batches of rows (the next stage takes them whole); the lock under which the
        # instances share a batch's keys (f_MK once per tuple); instances that met a failure
        self.batch_outputs = False
        #: its merged windows leave as one batch per run between watermarks
        #: (:func:`joined_windows`): set on the columnar path where an A+ stage reads them
        self.join_windows = False
        self.rows_lock = threading.Lock()
        self.halted = [False] * p
        # on batches: entries each instance has processed (instance j's only by the worker
        # holding bucket j); the backlog then follows the slowest instance, which bounds the
        # batches a lagging instance keeps alive, not just the queue ahead of instance 0
        self.done_of: list[int] | None = None
        # tagged: input indices of each input tag, and the readiness merge of I > 1 inputs
        self.inputs_of: dict[int, list[int]] = {}
        self.heads: list[deque[tuple[Any, Any]]] = [deque() for _ in range(op.I)]

    def backlog(self) -> int:
        # the queue holds batches, so count tuples; instance 0 stands for the stage's progress
        # (on batches the slowest instance does)
        done = self.done.load() if self.done_of is None else min(self.done_of)
        return (self.pushed.load() - done) * self.weight

    def entries(self, items: list[Item]) -> list[Item]:
        """Tagged items as the batch every instance reads: ``(ts, payload, i, pass_tag)``
        with ``i >= 0`` for input i of the O+ (released by the merge) and ``i = -1`` for a
        tuple passed on under ``pass_tag``. Called by one thread at a time, in order."""
        out: list[Item] = []
        append = out.append
        inputs_of, keep, heads = self.inputs_of, self.keep, self.heads
        single = len(heads) == 1
        for ts, p, tag in items:
            if p is END:
                self._release(out, final=True)
                append((ts, p, -1, END_TAG))
                continue
            idx = inputs_of.get(tag)
            if idx is not None:
                if single:
                    append((ts, p, 0, None))
                else:
                    for i in idx:
                        heads[i].append((ts, p))
                    self._release(out, final=False)
            if tag in keep:
                append((ts, p, -1, tag))
        return out

    def _release(self, out: list[Item], final: bool) -> None:
        """Appends what the merge of the inputs may release: the lowest (ts, input index)
        while every input has a tuple waiting (all that waits at the end)."""
        heads = self.heads
        while True:
            best = -1
            for i, h in enumerate(heads):
                if not h:
                    if final:
                        continue
                    return
                if best < 0 or h[0][0] < heads[best][0][0]:
                    best = i  # strict: ties go to the lower input index
            if best < 0:
                return
            ts, p = heads[best].popleft()
            out.append((ts, p, best, None))


def oplus_emitter(st: OPlusStage) -> Callable[[Any], None]:
    """The reorder buffer's ``emit`` for an O+ stage: the p units of one input arrive
    consecutively (serial order); once all are there they are merged by timestamp -- the
    sequential output order (ordered.py's docstring) -- and appended to the stage's outbox."""
    p, released, tagged, lock = st.p, st.released, st.tagged, st.outbox_lock

    def emit_oplus(unit: Any) -> None:
        released.fetch_add(1)
        group = st.group
        group.append(unit)
        if len(group) < p:
            return
        st.group = []
        if st.batch_outputs:  # a line of rows: (outputs, control items) per instance
            merged = merge_rows(group)
            if merged:
                with lock:
                    st.outbox.extend(merged)
            return
        runs = [g[0] for g in group if g[0]] if tagged else [g for g in group if g]
        merged = (runs[0] if len(runs) == 1 else
                  merge_runs(runs, order_key) if runs else [])
        if tagged and group[0][1]:  # what instance 0 passed on, END last
            merged = merged + group[0][1] if merged else group[0][1]
        if st.join_windows:
            merged = joined_windows(merged)
        if merged:
            with lock:
                st.outbox.extend(merged)

    return emit_oplus


def merge_rows(group: list[tuple[list[Item], list[Item]]]) -> list[Item]:
    """The p units of one input on a line of rows (:mod:`.ordered_rows`), merged in the
    sequential order: each unit is an instance's outputs (ts-sorted) and its control items
    (instance 0's forwarded watermarks, barriers and END, any instance's failure), each
    placed after the outputs of its timestamp (as :func:`order_key` puts a watermark), the
    control items of several instances by timestamp. The outputs leave as
    :class:`~stretchflow.batch.Batch` items of rows between the control items, as the
    reference hands an O+'s outputs of one batch on. The outputs are merged by timestamp,
    ties in instance order (:func:`~stretchflow.sorted_runs.merge_runs`)."""
    outs = [u[0] for u in group if u[0]]
    marks = [m for u in group for m in u[1]]
    if len(marks) > 1:
        marks.sort(key=_TS)  # stable: an instance's own order kept
    data = merge_runs(outs, _TS) if len(outs) > 1 else outs[0] if outs else []
    if not marks:
        return [(data[-1][0], Batch.of_items(data))] if data else []
    out: list[Item] = []
    lo = 0
    for m in marks:
        hi = bisect_right(data, m[0], lo, key=_TS)  # the outputs of ts <= the mark's
        if hi > lo:
            out.append((data[hi - 1][0], Batch.of_items(data[lo:hi])))
            lo = hi
        out.append(m)
    if lo < len(data):
        out.append((data[-1][0], Batch.of_items(data[lo:] if lo else data)))
    return out


_TS = itemgetter(0)


def oplus_unit(st: OPlusStage, j: int, batch: list[Item]) -> tuple[list[Item], int]:
    """Instance j over one batch of a chain's O+ stage: its unit (ts-sorted, since what the
    instance emits for input s has ts <= W_s and what it emits later ts > W_s; instance 0
    forwards watermarks and END after what they released, Alg. 2) and its number of outputs."""
    inst = st.instances[j]
    if inst.takes_runs:
        return _oplus_unit_runs(st, j, [(ts, p, 0, None) for ts, p in batch], False)
    o: list[Item] = []
    n_out = 0
    ts = p = None
    try:
        for ts, p in batch:
            if p is WATERMARK:
                inst.advance(ts)
            elif p is END:
                inst.finish()
            elif type(p) is CheckpointBarrier:
                if j == 0:  # after every output of the tuples before it
                    o.append((ts, p))
                continue
            else:
                inst.process(ts, p, 0)
            if inst.out:
                got = inst.take()
                n_out += len(got)
                o.extend(got)
            if j == 0 and (p is WATERMARK or p is END):
                o.append((ts, p))
    except Exception as e:
        shown = "<end of input>" if p is END else p
        raise user_error(st.op.name, None if p is END else ts, shown, e) from e
    return o, n_out


def oplus_unit_tagged(st: OPlusStage, j: int, batch: list[Item]
                      ) -> tuple[tuple[list[Item], list[Item]], int]:
    """Instance j over one batch of a tagged O+ stage: its unit -- its outputs (ts-sorted,
    its own forwarded watermarks included on instance 0) and the tuples instance 0 passes on
    -- and its number of outputs."""
    inst = st.instances[j]
    if inst.takes_runs:
        return _oplus_unit_runs(st, j, batch, True)  # type: ignore[return-value]
    n, outs, passed = st.tag, [], []
    n_out = 0
    ts = p = None
    try:
        for ts, p, i, tag in batch:
            if i >= 0:
                if p is WATERMARK:
                    inst.advance(ts)
                else:
                    inst.process(ts, p, i)
            elif p is END:
                inst.finish()
            elif j == 0:
                passed.append((ts, p, tag))
            if inst.out:
                got = inst.take()
                n_out += len(got)
                outs.extend([(t, o, n) for t, o in got])
            if j == 0 and i >= 0 and p is WATERMARK:
                outs.append((ts, p, n))  # forwarded once, after what it released (Alg. 2)
    except Exception as e:
        shown = "<end of input>" if p is END else p
        raise user_error(st.op.name, None if p is END else ts, shown, e) from e
    if j == 0 and batch and batch[-1][1] is END:
        passed.append((batch[-1][0], END, END_TAG))
    return (outs, passed), n_out


def _oplus_unit_runs(st: OPlusStage, j: int, batch: list[Item], tagged: bool
                     ) -> tuple[Any, int]:
    """oplus_unit / oplus_unit_tagged for an instance whose kernels take runs
    (``OPlusInstance.process_run``): the data tuples between two markers (watermark, END) go
    to the instance as one run. Tuples passed on under another tag touch no state and do not
    cut a run (the unit keeps its outputs and its passed tuples in separate lists anyway).
    ``batch`` holds ``(ts, payload, i, pass_tag)``; a chain's items come with ``i = 0``."""
    inst = st.instances[j]
    n = st.tag
    o: list[Item] = []
    passed: list[Item] = []
    run: list[tuple[Any, Any, int]] = []
    n_out = 0
    ts = p = None

    def take() -> None:
        nonlocal n_out
        if inst.out:
            got = inst.take()
            n_out += len(got)
            o.extend([(t, x, n) for t, x in got] if tagged else got)

    try:
        for ts, p, i, tag in batch:
            if p is END or (p is WATERMARK and i >= 0):
                if run:
                    inst.process_run(run)
                    run = []
                if p is END:
                    inst.finish()
                else:
                    inst.advance(ts)
                take()
                if j == 0 and (not tagged or p is WATERMARK):
                    # forwarded once, after what it released (Alg. 2); a tagged line's END
                    # travels with the passed tuples
                    o.append((ts, p, n) if tagged else (ts, p))
            elif type(p) is CheckpointBarrier and not tagged:
                if run:  # the outputs of the tuples before it go before it
                    inst.process_run(run)
                    run = []
                take()
                if j == 0:
                    o.append((ts, p))
            elif i >= 0:
                run.append((ts, p, i))
            elif j == 0:
                passed.append((ts, p, tag))
        ts = p = None
        if run:
            inst.process_run(run)
            take()
    except Exception as e:
        shown = "<end of input>" if p is END else p
        raise_user_error(st.op.name, None if p is END else ts, shown, e)
    if not tagged:
        return o, n_out
    if j == 0 and batch and batch[-1][1] is END:
        passed.append((batch[-1][0], END, END_TAG))
    return (o, passed), n_out


def ps_units(st: PSStage, lease: Any) -> tuple[list[tuple[int, list[Item]]], int, int]:
    """A stateful or PS stage over one lease of its bucket: one unit per input, empty when
    it gave nothing (§3); the inputs processed (at least 1) and the outputs."""
    inst = st.instances[lease.bucket]
    process_key = inst.process_key
    tagged, tag = st.tagged, st.tag
    n_in = n_out = 0
    units: list[tuple[int, list[Item]]] = []
    for serial, (ts, p, k, pass_tag) in lease.items:
        out: list[Item]
        if pass_tag is not None:
            out = [(ts, p, pass_tag)]
        elif p is WATERMARK or p is END or type(p) is CheckpointBarrier:
            out = [(ts, p)]
        else:
            n_in += 1
            out = process_key(ts, p, k)
            n_out += len(out)
            if tagged and out:
                out = [(t, o, tag) for t, o in out]
        units.append((serial, out))
    return units, max(n_in, 1), n_out


def deposit_many(st: Stage, units: list[tuple[int, Any]]) -> None:
    """Sends units to the stage's reorder buffer without ever parking.

    Fig. 4's caller retries a failed ``try_add`` in a loop; blocking there instead could
    deadlock when the worker holding unit ``next`` is itself parked (possible with the
    partitioned queue, whose workers own several buckets). A unit that does not fit yet is
    stashed; the stash is retried by its depositor under the stash lock (so a drain that
    missed it is not lost) and by every worker after each slice of the stage.
    """
    rb = st.rb
    assert rb is not None
    rejected = rb.try_send_many(units)
    if not rejected:
        return
    with st.stash_lock:
        for serial, out in rejected:
            st.stash[serial] = out
        _retry_locked(st)


def _retry_locked(st: Stage) -> None:
    rb, stash = st.rb, st.stash
    assert rb is not None
    while stash:
        s = min(stash)
        if not rb.try_send(s, stash[s]):
            return
        del stash[s]


def retry_stash(st: Stage) -> None:
    """Retries the stage's stashed units (every worker, after each slice of the stage)."""
    with st.stash_lock:
        _retry_locked(st)


__all__ = ["END", "END_TAG", "Failure", "Item", "KeyedStage", "OPlusStage", "PSStage", "Plan",
           "SourceStage", "Stage", "StatelessStage", "apply_tagged", "deposit_many",
           "merge_rows", "oplus_emitter", "oplus_unit", "oplus_unit_tagged", "order_key",
           "ps_units", "retry_stash"]
