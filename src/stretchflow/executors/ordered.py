"""The ordered multicore executor (``--engine ordered``), after Prasaad, Ramalingam and Rajan,
*Scaling ordered stream processing on shared-memory multicores* (ordered-multicore.txt).

It runs a **linear pipeline** (§2, Def. 5.1): one source, then operators each marked

* *stateless* (data parallel: map / flat_map / filter),
* *stateful* (:class:`Stateful`: one state, inputs processed one at a time in arrival order),
* *partitioned stateful* (:class:`PartitionedStateful`: a key selector, hash or range
  partitioning into p buckets, per-key state; inputs of one bucket one at a time in arrival
  order, different buckets in parallel),

and guarantees *ordered execution*: the output stream equals the one of a sequential run
(:func:`run_sequential`). A :class:`~stretchflow.flow.Flow` whose operators form a chain runs on
it too (:func:`run`): its stateless operators are stateless stages and each single-input O+ is
a partitioned-stateful stage (see "O+ as a PS operator" below). Pipelines with stateful and
partitioned-stateful operators are built with :class:`Pipeline`.

The data path (every tuple goes through these objects, §3–§6):

* **serial numbers and reorder buffers** (§3, :mod:`stretchflow.buffers.reorder`): every stage
  but the source owns a reorder buffer, lock-based (Fig. 2) or non-blocking (Fig. 4), chosen
  with ``reorder="lock"|"nonblocking"``. A stateless stage numbers each *slice* it hands out
  (a run of consecutive inputs, numbered in the same critical section that dequeues it, so
  serial order is input order); the worker sends one unit with all the slice's outputs --
  possibly empty (a filtered-out run still advances ``next``). A stateful or PS stage numbers
  every input in its queue (the queue draws the serial under its lock at enqueue, §5) and sends
  one unit per input, empty when the input produced nothing (an O+ stage: one unit per batch
  and instance, below). The buffer's ``emit`` delivers the
  units downstream strictly in serial order, which is what makes the stage's output sequence
  the sequential one;
* **work queues of keyed stages** (§4, :mod:`stretchflow.buffers.hybrid_queue`):
  ``queue="hybrid"`` (Fig. 7: bucket FIFOs + master queue of bucket ids + delegation counters;
  any worker serves any bucket, at most one at a time) or ``queue="partitioned"`` (Fig. 6: each
  bucket statically owned by worker ``b mod n``);
* **the adaptive runtime** (§6, :mod:`.scheduler`): ``workers`` threads (default one per core)
  ask a central scheduler for work; it applies the schedulability test (fewer workers than the
  operator's maximum degree -- 1 stateful, p PS, n stateless -- a non-empty worklist, room in
  its output queue) and a heuristic ``qst``/``lp``/``et``/``ct``; the worker runs that operator
  for one time slice (``slice_tuples`` inputs at the measured per-tuple cost) outside the
  scheduler's lock and reports cost and selectivity back.

O+ as a PS operator. f_MK returns a *set* of keys and window expiry is driven by a watermark
that is global to the operator, so an O+ input cannot be routed to a single bucket. The stage
keeps p instances over one ``SharedState``; instance j owns the key groups ``g % p == j``
(as in VSN). Every batch handed over by the upstream stage enters the queue p times, one entry
per instance's bucket, numbered consecutively (batching: p queue operations per batch, not per
tuple). Each instance sees every tuple in order (keeps the watermark, updates only its keys,
expires only its window sets) and sends one unit per batch; the reorder buffer releases the p
units of a batch together and they are merged by timestamp. That merge is the sequential
output order: every output an instance produces for input s has ``ts <= W_s``, every later one
``ts > W_s``.

Latency markers (§7, "markers at equal tuple intervals"): with ``marker_every=m`` the source
adds a watermark at the timestamp of the latest tuple after every m tuples (a no-op for every
operator: it equals the implicit watermark) and records when; the sink records when each
watermark arrives. ``RunResult.extra["latencies"]`` lists the differences in seconds.

Locks, and why there is no deadlock: the scheduler lock (``cond``) is taken by workers to get
and return work; reorder buffers call ``emit`` outside it and ``emit`` may take it, queues are
leaf locks; nobody takes a reorder buffer's lock while holding ``cond``. Idle workers block on
``cond`` (no busy waiting); a user error stops every worker and is raised in the caller as
:class:`OperatorError` (a source's as :class:`SourceError`).
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..buffers.hybrid_queue import (
    HashPartitioner,
    HybridQueue,
    Lease,
    PartitionedQueue,
    RangePartitioner,
)
from ..buffers.reorder import (
    AtomicInt,
    LockReorderBuffer,
    NonBlockingReorderBuffer,
    ReorderBuffer,
    SerialCounter,
)
from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..io.sinks import Collector, Sink
from ..io.sources import Source
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import Filter, FlatMap, Map, apply_batch
from ..runtime.result import RunResult
from .scheduler import Candidate, OpStats, Scheduler

__all__ = [
    "Pipeline",
    "PartitionedStateful",
    "Stateful",
    "chain_of",
    "range_partitioned",
    "run",
    "run_pipeline",
    "run_sequential",
]


class _End:
    """End of input, travelling through the chain as the last item (ts = +inf)."""

    def __repr__(self) -> str:
        return "END"


END = _End()
Item = tuple[Any, Any]  # (ts, payload); payload may be WATERMARK or END
_SINK_BATCH = 4096
REORDERS = ("nonblocking", "lock")
QUEUES = ("hybrid", "partitioned")


def _order_key(item: Item) -> tuple[Any, int]:
    # outputs before a watermark of the same ts, END last (its ts is +inf anyway)
    p = item[1]
    return item[0], (2 if p is END else 1 if p is WATERMARK else 0)


# -- the paper's operator kinds (§2) ---------------------------------------------------------


@dataclass(frozen=True)
class Stateful:
    """A stateful operator (degree 1): ``fn(state, payload)`` returns the output payloads
    (an iterable, or None for none) and may mutate ``state``, created once by ``init()``."""

    fn: Callable[[Any, Any], Iterable[Any] | None]
    init: Callable[[], Any]
    name: str = "stateful"


@dataclass(frozen=True)
class PartitionedStateful:
    """A partitioned-stateful operator: ``key(payload)`` selects the key, ``partitioner`` maps
    a key to one of ``buckets`` buckets (default: CRC-32 hash partitioning; give a
    :class:`~stretchflow.buffers.hybrid_queue.RangePartitioner` for range partitioning), and
    ``fn(state, payload)`` runs on the key's own state, created by ``init(key)``."""

    fn: Callable[[Any, Any], Iterable[Any] | None]
    key: Callable[[Any], Hashable]
    init: Callable[[Hashable], Any]
    buckets: int = 100
    partitioner: Callable[[Any], int] | None = None
    name: str = "partitioned"

    def __post_init__(self) -> None:
        if self.partitioner is None:
            object.__setattr__(self, "partitioner", HashPartitioner(self.buckets))
        n = getattr(self.partitioner, "num_buckets", self.buckets)
        if n != self.buckets:
            raise ValueError(f"operator {self.name!r}: the partitioner has {n} buckets, "
                             f"buckets={self.buckets}")


def range_partitioned(fn: Callable[[Any, Any], Iterable[Any] | None],
                      key: Callable[[Any], Hashable], init: Callable[[Hashable], Any],
                      low: float, high: float, buckets: int = 100,
                      name: str = "partitioned") -> PartitionedStateful:
    """A :class:`PartitionedStateful` with ``buckets`` equal-width key ranges over
    ``[low, high)`` (outliers go to the end buckets) -- the paper's skew set-up (§7.2.1)."""
    return PartitionedStateful(fn, key, init, buckets,
                               RangePartitioner.uniform(low, high, buckets), name)


@dataclass
class _Spec:
    """One stage of a pipeline before it runs: kind ``source|stateless|ps|oplus``."""

    kind: str
    name: str
    spec: Any


class Pipeline:
    """A linear pipeline of the paper's operator kinds, built fluently from one source.

    >>> import stretchflow as sf
    >>> pl = Pipeline(sf.io.iterable([{"ts": i, "k": i % 2, "v": i} for i in range(6)]))
    >>> _ = pl.map(lambda t: t["v"] * 10 + t["k"]).partitioned(
    ...     lambda s, v: (s.append(v), [sum(s)])[1], key=lambda v: v % 10,
    ...     init=lambda k: [], buckets=4)
    >>> [p for _, p in pl.run(workers=2).items] == [p for _, p in run_sequential(pl).items]
    True
    """

    def __init__(self, source: Source, name: str = "pipeline"):
        if not isinstance(source, Source):
            raise FlowDefinitionError(f"not a source: {source!r}")
        self.name = name
        self.specs: list[_Spec] = [_Spec("source", source.name, source)]

    def _add(self, kind: str, spec: Any) -> Pipeline:
        names = {s.name for s in self.specs}
        name, i = spec.name, 2
        while name in names:
            name, i = f"{spec.name}-{i}", i + 1
        self.specs.append(_Spec(kind, name, spec))
        return self

    def map(self, fn: Callable[[Any], Any], name: str = "map") -> Pipeline:
        """Stateless: one output per input."""
        return self._add("stateless", Map(fn, name))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str = "flat_map") -> Pipeline:
        """Stateless: zero or more outputs per input."""
        return self._add("stateless", FlatMap(fn, name))

    def filter(self, fn: Callable[[Any], bool], name: str = "filter") -> Pipeline:
        """Stateless: keeps the inputs for which ``fn`` is true."""
        return self._add("stateless", Filter(fn, name))

    def stateful(self, fn: Callable[[Any, Any], Iterable[Any] | None],
                 init: Callable[[], Any], name: str = "stateful") -> Pipeline:
        """A :class:`Stateful` operator."""
        return self._add("ps", Stateful(fn, init, name))

    def partitioned(self, fn: Callable[[Any, Any], Iterable[Any] | None], *,
                    key: Callable[[Any], Hashable], init: Callable[[Hashable], Any],
                    buckets: int = 100, partitioner: Callable[[Any], int] | None = None,
                    name: str = "partitioned") -> Pipeline:
        """A :class:`PartitionedStateful` operator."""
        return self._add("ps", PartitionedStateful(fn, key, init, buckets, partitioner, name))

    def add(self, op: Map | FlatMap | Filter | Stateful | PartitionedStateful) -> Pipeline:
        """Appends an operator object (e.g. one of :mod:`stretchflow.workloads.micro`)."""
        if isinstance(op, Map | FlatMap | Filter):
            return self._add("stateless", op)
        if isinstance(op, Stateful | PartitionedStateful):
            return self._add("ps", op)
        raise FlowDefinitionError(f"not an operator of the ordered engine: {op!r}")

    def run(self, engine: str = "ordered", **options: Any) -> PipelineRun:
        """Runs the pipeline: ``engine="ordered"`` (options as :func:`run`) or ``"sequential"``."""
        if engine == "sequential":
            if options:
                raise TypeError(f"the sequential run takes no options, got {sorted(options)}")
            return run_sequential(self)
        if engine != "ordered":
            raise ValueError(f"unknown engine {engine!r} for a pipeline: ordered or sequential")
        return run_pipeline(self, **options)


@dataclass
class PipelineRun:
    """The output items of a pipeline run and its :class:`RunResult`."""

    items: list[Item]
    result: RunResult


# -- sequential execution (the oracle of Def. 5.1) -------------------------------------------


def _call_ps(op: Stateful | PartitionedStateful, state: Any, ts: Any, p: Any) -> list[Item]:
    try:
        out = op.fn(state, p)
        return [] if out is None else [(ts, o) for o in out]
    except StretchflowError:
        raise
    except Exception as e:
        raise OperatorError(op.name, ts, p, e) from e


def _key_of(op: PartitionedStateful, ts: Any, p: Any) -> Hashable:
    try:
        return op.key(p)
    except Exception as e:
        raise OperatorError(op.name, ts, p, e) from e


def _init_state(op: Stateful | PartitionedStateful, key: Hashable, ts: Any, p: Any) -> Any:
    try:
        return op.init() if isinstance(op, Stateful) else op.init(key)
    except Exception as e:
        raise OperatorError(op.name, ts, p, e) from e


def run_sequential(pipeline: Pipeline) -> PipelineRun:
    """Runs ``pipeline`` on one thread, operator after operator, input after input: the
    output sequence every parallel run must reproduce exactly (ordered execution, Def. 5.1)."""
    t0 = time.perf_counter()
    specs = pipeline.specs
    src: Source = specs[0].spec
    items: list[Item] = list(src.items())
    n_in = sum(1 for _, p in items if p is not WATERMARK)
    for sp in specs[1:]:
        if sp.kind == "stateless":
            items = apply_batch(sp.spec, items)
            continue
        op = sp.spec
        states: dict[Hashable, Any] = {}
        out: list[Item] = []
        for ts, p in items:
            if p is WATERMARK:
                out.append((ts, p))
                continue
            k = None if isinstance(op, Stateful) else _key_of(op, ts, p)
            state = states.get(k, states)  # `states` itself as the "missing" sentinel
            if state is states:
                state = states[k] = _init_state(op, k, ts, p)
            out.extend(_call_ps(op, state, ts, p))
        items = out
    data = [it for it in items if it[1] is not WATERMARK]
    res = RunResult(engine="sequential", elapsed=time.perf_counter() - t0,
                    tuples_in={src.name: n_in}, tuples_out={"collect": len(data)})
    return PipelineRun(data, res)


# -- chains of a Flow ------------------------------------------------------------------------


def chain_of(flow: Flow) -> list[Node]:
    """The nodes of ``flow`` as a chain, source first; FlowDefinitionError if not a chain."""
    flow.validate()
    sources = [n for n in flow.nodes if n.kind == "source"]
    if len(sources) != 1:
        raise FlowDefinitionError(
            f"the ordered engine runs a chain with exactly one source; flow {flow.name!r} "
            f"has {len(sources)} sources (use engine 'reference' or 'vsn')"
        )
    consumers: dict[Node, list[Node]] = {n: [] for n in flow.nodes}
    for n in flow.nodes:
        if n.kind == "oplus" and len(n.inputs) != 1:
            raise FlowDefinitionError(
                f"the ordered engine runs single-input operators only; {n.name!r} has "
                f"{len(n.inputs)} inputs"
            )
        for up in n.inputs:
            consumers[up].append(n)
    chain = [sources[0]]
    while consumers[chain[-1]]:
        nxt = consumers[chain[-1]]
        if len(nxt) != 1:
            raise FlowDefinitionError(
                f"the ordered engine runs a chain; stream {chain[-1].name!r} feeds "
                f"{len(nxt)} operators"
            )
        chain.append(nxt[0])
    if len(chain) != len(flow.nodes):
        raise FlowDefinitionError("the ordered engine runs a chain; some operators are unreachable")
    last = chain[-1]
    for node, sink in flow.sinks:
        if node is not last:
            raise FlowDefinitionError(
                f"the ordered engine writes sinks on the last stream only; sink {sink.name!r} "
                f"reads {node.name!r}"
            )
    return chain


# -- stages ----------------------------------------------------------------------------------


class _Stage:
    """One operator of the chain: statistics, and (but the source) a reorder buffer."""

    def __init__(self, name: str, index: int, stats: OpStats):
        self.name = name
        self.index = index
        self.stats = stats
        self.rb: ReorderBuffer[Any] | None = None
        # units the ring had no slot for yet (serial >= next + capacity), see _deposit
        self.stash: dict[int, list[Item]] = {}
        self.stash_lock = threading.Lock()
        # released outputs not yet pushed downstream: the buffer's emit appends here and the
        # depositing worker pushes them once per slice (one hand-over per batch, not per unit)
        self.outbox: list[Item] = []
        self.outbox_lock = threading.Lock()

    def backlog(self) -> int:
        """Inputs given to this stage and not yet released downstream (its input queue)."""
        return 0


class _SourceStage(_Stage):
    def __init__(self, name: str, source: Source, stats: OpStats, marker_every: int):
        super().__init__(name, 0, stats)
        self.it: Iterator[Item] = iter(source.items())
        self.busy = False
        self.exhausted = False
        self.count = 0
        self.marker_every = marker_every
        self.since_marker = 0
        self.last_ts: Any = None
        self.wm_sent: list[float] = []  # perf_counter of every watermark, source order


class _StatelessStage(_Stage):
    def __init__(self, name: str, index: int, stats: OpStats, op: Map | FlatMap | Filter):
        super().__init__(name, index, stats)
        self.op = op
        self.queue: deque[Item] = deque()  # under the executor's lock
        self.next_slice = 1  # serial of the next slice (§3), drawn under the executor's lock

    def backlog(self) -> int:
        return len(self.queue)


class _KeyedStage(_Stage):
    """A stateful, partitioned-stateful or O+ stage behind a hybrid or partitioned queue."""

    def __init__(self, name: str, index: int, stats: OpStats, num_buckets: int,
                 queue_kind: str, units_per_input: int, max_batch: int):
        super().__init__(name, index, stats)
        self.num_buckets = num_buckets
        self.serials = SerialCounter()
        ident = _Identity(num_buckets)  # items are put with their bucket id as the key
        cls = HybridQueue if queue_kind == "hybrid" else PartitionedQueue
        self.queue: HybridQueue[Any] | PartitionedQueue[Any] = cls(
            partitioner=ident, max_batch=max_batch, serials=self.serials)
        self.hybrid = queue_kind == "hybrid"
        self.units_per_input = units_per_input
        self.released = AtomicInt(0)  # units emitted by the reorder buffer

    def backlog(self) -> int:
        # serials handed out minus units released: queued, leased and waiting in the buffer
        return (self.serials.peek() - 1 - self.released.load()) // self.units_per_input


class _Identity:
    """Partitioner of the executor's queues: the key *is* the bucket (computed beforehand)."""

    __slots__ = ("num_buckets",)

    def __init__(self, n: int):
        self.num_buckets = n

    def __call__(self, b: int) -> int:
        return b


class _PSStage(_KeyedStage):
    def __init__(self, name: str, index: int, stats: OpStats, op: Stateful | PartitionedStateful,
                 queue_kind: str, max_batch: int):
        n = 1 if isinstance(op, Stateful) else op.buckets
        super().__init__(name, index, stats, n, queue_kind, 1, max_batch)
        self.op = op
        # per-bucket key -> state; a bucket is processed by one worker at a time (queue)
        self.states: list[dict[Hashable, Any]] = [{} for _ in range(n)]


class _OPlusStage(_KeyedStage):
    def __init__(self, name: str, index: int, stats: OpStats, op: OPlus, p: int,
                 queue_kind: str, max_batch: int):
        # a queue entry is a batch of inputs; a lease takes at most 4 of them per instance
        super().__init__(name, index, stats, p, queue_kind, p, 4)
        self.op = op
        self.p = p
        if p == 1:
            self.instances = [op.instance()]
        else:
            groups = 16 * p  # several groups per instance, as VSN's buckets
            sigma = SharedState(groups)
            assign = [g % p for g in range(groups)]
            self.instances = [op.instance(sigma, j, assign) for j in range(p)]
        self.group: list[list[Item]] = []  # units of the batch being released (emit only)
        self.pushed = AtomicInt(0)  # tuples put into the queue (once, not p times)
        self.done = AtomicInt(0)  # tuples instance 0 has processed

    def backlog(self) -> int:
        # the queue holds batches, so count tuples; instance 0 stands for the stage's progress
        return self.pushed.load() - self.done.load()


# -- the public entry points -----------------------------------------------------------------

_OPTIONS = {"capacity", "time_slice", "max_batch", "partitions", "ct_window", "reorder",
            "queue", "marker_every"}


def _check_options(workers: int | None, options: dict[str, Any]) -> int:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"the ordered engine does not take {sorted(unknown)}; "
                        f"options: {sorted(_OPTIONS)}")
    n_workers = workers if workers is not None else (os.cpu_count() or 1)
    if n_workers < 1:
        raise ValueError("the ordered engine needs at least one worker")
    return n_workers


def run(flow: Flow, workers: int | None = None, scheduler: str = "qst",
        **options: Any) -> RunResult:
    """Runs a chain ``flow`` on a pool of ``workers`` threads (default: the CPU count).

    Options: ``capacity`` (queue bound and C of QST, default 1024), ``time_slice`` (seconds,
    default 0.002), ``max_batch`` (tuples per slice, default 256), ``partitions`` (instances
    per O+, default ``workers``), ``ct_window`` (seconds, default 0.05), ``reorder``
    (``nonblocking``, default, or ``lock``), ``queue`` (``hybrid``, default, or
    ``partitioned``), ``marker_every`` (latency markers every N tuples, default 0 = none).
    """
    n_workers = _check_options(workers, options)
    chain = chain_of(flow)
    specs = [_Spec(n.kind, n.name, n.spec) for n in chain]
    sinks = [s for _, s in flow.sinks]
    return _Executor(specs, sinks, n_workers, scheduler, **options).run()


def run_pipeline(pipeline: Pipeline, workers: int | None = None, scheduler: str = "qst",
                 **options: Any) -> PipelineRun:
    """Runs a :class:`Pipeline` on the worker pool; options as :func:`run`."""
    n_workers = _check_options(workers, options)
    col = Collector()
    res = _Executor(list(pipeline.specs), [col], n_workers, scheduler, **options).run()
    return PipelineRun(col.items, res)


# -- the executor ----------------------------------------------------------------------------


class _Executor:
    def __init__(self, specs: list[_Spec], sinks: list[Sink], n_workers: int, policy: str,
                 capacity: int = 1024, time_slice: float = 0.002, max_batch: int = 256,
                 partitions: int | None = None, ct_window: float = 0.05,
                 reorder: str = "nonblocking", queue: str = "hybrid", marker_every: int = 0):
        if capacity < 1 or max_batch < 1:
            raise ValueError("capacity and max_batch must be at least 1")
        if reorder not in REORDERS:
            raise ValueError(f"unknown reorder buffer {reorder!r}; choose one of {REORDERS}")
        if queue not in QUEUES:
            raise ValueError(f"unknown queue {queue!r}; choose one of {QUEUES}")
        if marker_every < 0:
            raise ValueError("marker_every must be >= 0")
        self.n_workers = n_workers
        self.reorder = reorder
        self.queue_kind = queue
        p = partitions if partitions is not None else n_workers
        if p < 1:
            raise ValueError("partitions must be at least 1")
        stats: list[OpStats] = []
        stages: list[_Stage] = []
        for i, sp in enumerate(specs):
            stage: _Stage
            if sp.kind == "source":
                stage = _SourceStage(sp.name, sp.spec, OpStats(sp.name, i, 1), marker_every)
            elif sp.kind == "stateless":
                stage = _StatelessStage(sp.name, i, OpStats(sp.name, i, n_workers), sp.spec)
            elif sp.kind == "ps":
                op = sp.spec
                degree = 1 if isinstance(op, Stateful) else op.buckets
                stage = _PSStage(sp.name, i, OpStats(sp.name, i, degree), op, queue, max_batch)
            elif sp.kind == "oplus":
                stage = _OPlusStage(sp.name, i, OpStats(sp.name, i, p), sp.spec, p, queue,
                                    max_batch)
            else:  # pragma: no cover - chain_of and Pipeline only make the kinds above
                raise FlowDefinitionError(f"the ordered engine cannot run {sp.kind!r} nodes")
            stats.append(stage.stats)
            stages.append(stage)
        self.stages = stages
        # Flow control bounds what a stage holds to capacity + one slice per worker, so this
        # many slots keep every serial in flight inside the ring: send never parks (§3.2,
        # "size the buffer above the spread of serials in flight").
        ring = capacity + max_batch * (n_workers + 2) + 16
        rb_cls = NonBlockingReorderBuffer if reorder == "nonblocking" else LockReorderBuffer
        for st in stages[1:]:
            st.rb = rb_cls(self._emitter(st), capacity=ring * (st.units_per_input
                                                               if isinstance(st, _KeyedStage)
                                                               else 1), emit_empty=True)
        self.sched = Scheduler(stats, policy=policy, capacity=capacity, time_slice=time_slice,
                               max_batch=max_batch, ct_window=ct_window)
        self.capacity = capacity
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.finished = False
        self.sinks = sinks
        self.sink_buf: list[Item] = []
        self.wm_arrived: list[float] = []  # perf_counter of every watermark at the sinks

    # -- delivery (called in order by the source or a reorder buffer's single drainer) -------
    def _emitter(self, st: _Stage) -> Callable[[list[Item]], None]:
        """The reorder buffer's ``emit`` for stage ``st``: called in serial order, one thread
        at a time; it appends the unit to the stage's outbox (see :meth:`_flush`)."""
        lock = st.outbox_lock
        if isinstance(st, _OPlusStage):
            p = st.p
            released = st.released

            def emit_oplus(items: list[Item]) -> None:
                # the p units of one input arrive consecutively: merge them by ts
                released.fetch_add(1)
                group = st.group
                group.append(items)
                if len(group) < p:
                    return
                st.group = []
                runs = [g for g in group if g]
                if not runs:
                    return
                merged = runs[0] if len(runs) == 1 else list(heapq.merge(*runs, key=_order_key))
                with lock:
                    st.outbox.extend(merged)

            return emit_oplus
        released_k = st.released if isinstance(st, _KeyedStage) else None

        def emit(items: list[Item]) -> None:
            if released_k is not None:
                released_k.fetch_add(1)
            if items:
                with lock:
                    st.outbox.extend(items)

        return emit

    def _flush(self, st: _Stage) -> None:
        """Pushes the stage's released outputs downstream, in order.

        Every unit is released inside some worker's ``try_send`` and that worker calls this
        afterwards, so nothing stays in an outbox. The lock is held across the push so that
        two flushing workers cannot swap two batches.
        """
        with st.outbox_lock:
            if not st.outbox:
                return
            items, st.outbox = st.outbox, []
            self._push(st.index, items)

    def _push(self, i: int, items: list[Item]) -> None:
        """Appends stage i's in-order outputs to stage i+1's input (or the sinks).

        Only one thread at a time pushes out of stage i (the source's single reader, or the
        thread draining stage i's reorder buffer), so arrival order is the sequential order.
        """
        if i + 1 >= len(self.stages):
            with self.cond:
                self._to_sinks(items)
                self.cond.notify_all()
            return
        nxt = self.stages[i + 1]
        if isinstance(nxt, _StatelessStage):
            with self.cond:
                nxt.queue.extend(items)
                self.cond.notify_all()
            return
        if isinstance(nxt, _OPlusStage):
            # one entry per instance holding the whole batch (read-only, shared): p queue
            # operations and p units per hand-over instead of p per tuple
            nxt.pushed.fetch_add(len(items))
            pairs: list[tuple[Any, int]] = [(items, j) for j in range(nxt.p)]
        else:
            assert isinstance(nxt, _PSStage)
            op = nxt.op
            if isinstance(op, Stateful):
                pairs = [((ts, p, None), 0) for ts, p in items]
            else:
                key, part = op.key, op.partitioner
                assert part is not None
                pairs = []
                for ts, p in items:
                    if p is WATERMARK or p is END:
                        pairs.append(((ts, p, None), 0))  # markers keep their place (bucket 0)
                        continue
                    try:
                        k = key(p)
                        b = part(k)
                    except Exception as e:
                        raise OperatorError(op.name, ts, p, e) from e
                    if not 0 <= b < nxt.num_buckets:
                        raise OperatorError(op.name, ts, p, ValueError(
                            f"partitioner mapped key {k!r} to bucket {b}, not in "
                            f"[0, {nxt.num_buckets})"))
                    pairs.append(((ts, p, k), b))
        nxt.queue.put_many(pairs)  # the queue numbers the inputs in this order (§5)
        with self.cond:
            self.cond.notify_all()

    def _to_sinks(self, items: list[Item]) -> None:
        # called under the lock, in order: the sinks see the sequential output stream
        for item in items:
            p = item[1]
            if p is END:
                self._flush_sinks()
                self.finished = True
            elif p is WATERMARK:
                self.wm_arrived.append(time.perf_counter())
                self._flush_sinks()  # what a watermark closed reaches the sinks now
            else:
                self.sink_buf.append(item)  # not a local alias: a flush replaces the list
                if len(self.sink_buf) >= _SINK_BATCH:
                    self._flush_sinks()

    def _flush_sinks(self) -> None:
        if self.sink_buf:
            for s in self.sinks:
                s.write(self.sink_buf)
            self.sink_buf = []

    # -- scheduling (under the lock) ----------------------------------------------------------
    def _out_size(self, i: int) -> int:
        """Size of stage i's output queue (the next stage's backlog; 0 for the sinks)."""
        if i + 1 >= len(self.stages):
            return 0
        return self.stages[i + 1].backlog()

    def _candidates(self, wid: int) -> list[tuple[Candidate, Any]]:
        """Schedulable operators for worker ``wid`` (§6): below max degree, non-empty worklist
        (that this worker may serve), and room in the output queue (flow control)."""
        out: list[tuple[Candidate, Any]] = []
        cs = self.sched.cum_selectivities
        for st in self.stages:
            i = st.index
            outq = self._out_size(i)
            if outq >= self.capacity or st.stats.workers >= st.stats.max_degree:
                continue
            if isinstance(st, _SourceStage):
                if not st.busy and not st.exhausted:
                    out.append((Candidate(i, st.stats, self.capacity, outq, cs[i]), None))
            elif isinstance(st, _StatelessStage):
                if st.queue:
                    out.append((Candidate(i, st.stats, len(st.queue), outq, cs[i]), None))
            else:
                assert isinstance(st, _KeyedStage)
                q = st.queue
                if isinstance(q, HybridQueue):
                    if q.unclaimed():
                        out.append((Candidate(i, st.stats, len(q), outq, cs[i]), None))
                else:
                    mine = PartitionedQueue.buckets_of_worker(wid, self.n_workers,
                                                              st.num_buckets)
                    b = q.ready(mine)
                    if b is not None:
                        out.append((Candidate(i, st.stats, len(q), outq, cs[i]), b))
        return out

    def _take_task(self, wid: int) -> tuple[Any, ...] | None:
        cands = self._candidates(wid)
        if not cands:
            return None
        chosen = self.sched.choose([c for c, _ in cands])
        assert chosen is not None
        extra = next(e for c, e in cands if c is chosen)
        st = self.stages[chosen.index]
        n = self.sched.slice_tuples(st.stats)
        st.stats.workers += 1
        if isinstance(st, _SourceStage):
            st.busy = True
            return ("source", st, n)
        if isinstance(st, _StatelessStage):
            k = min(n, len(st.queue))
            batch = [st.queue.popleft() for _ in range(k)]
            serial = st.next_slice  # numbered with the dequeue: serial order is input order
            st.next_slice += 1
            return ("stateless", st, serial, batch)
        return ("keyed", st, extra, n)

    # -- workers ----------------------------------------------------------------------------
    def _worker(self, wid: int) -> None:
        cond = self.cond
        try:
            while True:
                with cond:
                    while True:
                        if self.error is not None or self.finished:
                            return
                        task = self._take_task(wid)
                        if task is not None:
                            break
                        cond.wait()
                kind = task[0]
                t0 = time.perf_counter()
                if kind == "source":
                    self._run_source(task, t0)
                elif kind == "stateless":
                    self._run_stateless(task, t0)
                else:
                    self._run_keyed(task, t0)
        except BaseException as e:  # noqa: BLE001 - any failure stops the whole run
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        with self.cond:
            first = self.error is None
            if first:
                self.error = e
            self.cond.notify_all()
        if first:  # outside the lock: a lock-based buffer's emit takes it (lock order)
            for st in self.stages[1:]:
                assert st.rb is not None
                st.rb.abort(e)
                if isinstance(st, _KeyedStage):
                    st.queue.abort()

    def _finish_slice(self, st: _Stage, n_in: float, n_out: int, dt: float) -> None:
        with self.cond:
            st.stats.workers -= 1
            self.sched.finished_slice(st.stats, n_in, n_out, dt)
            self.cond.notify_all()

    def _run_source(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, n = task
        items: list[Item] = []
        end = False
        it = st.it
        every = st.marker_every
        for _ in range(n):
            try:
                item = next(it)
            except StopIteration:
                end = True
                break
            items.append(item)
            if item[1] is WATERMARK:
                st.wm_sent.append(time.perf_counter())
                continue
            st.count += 1
            st.last_ts = item[0]
            if every:
                st.since_marker += 1
                if st.since_marker >= every:  # §7: a marker at equal tuple intervals
                    st.since_marker = 0
                    items.append((st.last_ts, WATERMARK))
                    st.wm_sent.append(time.perf_counter())
        if end:
            items.append((math.inf, END))
        dt = time.perf_counter() - t0
        with self.cond:
            if end:
                st.exhausted = True
        self._push(0, items)
        with self.cond:
            st.busy = False  # only now: the next slice's items must follow these
        self._finish_slice(st, len(items), len(items), dt)

    def _run_stateless(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, serial, batch = task
        out = apply_batch(st.op, batch, (WATERMARK, END))
        n_data = sum(1 for _, p in batch if p is not WATERMARK and p is not END)
        dt = time.perf_counter() - t0
        self._deposit(st, serial, out)  # one unit per slice, empty if nothing passed (§3)
        self._retry_stash(st)
        self._flush(st)
        self._finish_slice(st, max(n_data, 1), len(out) - len(batch) + n_data, dt)

    def _run_keyed(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, bucket, n = task
        q = st.queue
        lease: Lease[Any] | None
        if isinstance(q, HybridQueue):
            lease = q.take(timeout=0, limit=n)
        else:
            lease = q.take(bucket, timeout=0, limit=n)
        n_in: float = 0
        n_out = 0
        work = self._oplus_items if isinstance(st, _OPlusStage) else self._ps_items
        while lease is not None:
            n_in_l, n_out_l = work(self, st, lease)
            n_in += n_in_l
            n_out += n_out_l
            if isinstance(q, HybridQueue):
                # Fig. 7 L14: while items were delegated to us we stay the active worker
                lease = q.release(lease, limit=n)
            else:
                q.release(lease)
                lease = None
        self._retry_stash(st)
        self._flush(st)
        dt = time.perf_counter() - t0
        self._finish_slice(st, n_in, n_out, dt)

    @staticmethod
    def _deposit(st: _Stage, serial: int, out: list[Item]) -> None:
        """Sends unit ``serial`` to the stage's reorder buffer without ever parking.

        Fig. 4's caller retries a failed ``try_add`` in a loop; blocking there instead could
        deadlock when the worker holding unit ``next`` is itself parked (possible with the
        partitioned queue, whose workers own several buckets). A unit that does not fit yet is
        stashed; the stash is retried by its depositor under the stash lock (so a drain that
        missed it is not lost) and by every worker after each slice of the stage.
        """
        _Executor._deposit_many(st, [(serial, out)])

    @staticmethod
    def _deposit_many(st: _Stage, units: list[tuple[int, list[Item]]]) -> None:
        """:meth:`_deposit` for the units of a run of inputs (one release step for all)."""
        rb = st.rb
        assert rb is not None
        rejected = rb.try_send_many(units)
        if not rejected:
            return
        with st.stash_lock:
            for serial, out in rejected:
                st.stash[serial] = out
            _Executor._retry_locked(st)

    @staticmethod
    def _retry_locked(st: _Stage) -> None:
        rb, stash = st.rb, st.stash
        assert rb is not None
        while stash:
            s = min(stash)
            if not rb.try_send(s, stash[s]):
                return
            del stash[s]

    @staticmethod
    def _retry_stash(st: _Stage) -> None:
        with st.stash_lock:
            _Executor._retry_locked(st)

    @staticmethod
    def _ps_items(ex: _Executor, st: _PSStage, lease: Lease[Any]) -> tuple[int, int]:
        op = st.op
        states = st.states[lease.bucket]
        stateful = isinstance(op, Stateful)
        n_in = n_out = 0
        units: list[tuple[int, list[Item]]] = []
        for serial, (ts, p, k) in lease.items:
            if p is WATERMARK or p is END:
                out: list[Item] = [(ts, p)]
            else:
                n_in += 1
                state = states.get(k, states)  # `states` itself as the "missing" sentinel
                if state is states:
                    state = states[k] = (_init_state(op, k, ts, p) if not stateful
                                         else _init_state(op, None, ts, p))
                out = _call_ps(op, state, ts, p)
                n_out += len(out)
            units.append((serial, out))  # one unit per input, empty when it gave nothing (§3)
        ex._deposit_many(st, units)
        return max(n_in, 1), n_out

    @staticmethod
    def _oplus_items(ex: _Executor, st: _OPlusStage, lease: Lease[Any]
                     ) -> tuple[float, int]:
        j = lease.bucket
        inst: OPlusInstance = st.instances[j]
        op = st.op
        n_in = n_out = 0
        units: list[tuple[int, list[Item]]] = []
        for serial, batch in lease.items:
            o: list[Item] = []
            for ts, p in batch:
                try:
                    if p is WATERMARK:
                        inst.advance(ts)
                    elif p is END:
                        inst.finish()
                    else:
                        inst.process(ts, p, 0)
                except StretchflowError:
                    raise
                except Exception as e:
                    shown = "<end of input>" if p is END else p
                    raise OperatorError(op.name, None if p is END else ts, shown, e) from e
                if inst.out:
                    got = inst.take()
                    n_out += len(got)
                    o.extend(got)
                if j == 0 and (p is WATERMARK or p is END):
                    o.append((ts, p))  # forwarded once, after what it released (Alg. 2)
            # one unit per batch and instance: ts-sorted, since what the instance emits for
            # input s has ts <= W_s and what it emits later ts > W_s
            units.append((serial, o))
            n_in += len(batch)
        ex._deposit_many(st, units)
        if j == 0:
            st.done.fetch_add(n_in)
        # statistics per operator input: the p instances share the work (and outputs) of one
        # input, so each reports 1/p of the inputs it went through
        return n_in / st.p, n_out

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        for s in self.sinks:
            s.open()
        threads = [threading.Thread(target=self._worker, args=(k,),
                                    name=f"stretchflow-ordered-{k}", daemon=True)
                   for k in range(self.n_workers)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            if not self.finished and self.error is None:
                self._fail(RuntimeError("interrupted"))
            for t in threads:
                t.join(timeout=5)
            for s in self.sinks:
                s.close()
        if self.error is not None:
            raise self.error
        elapsed = time.perf_counter() - t0
        src = self.stages[0]
        assert isinstance(src, _SourceStage)
        extra: dict[str, Any] = {
            "workers": self.n_workers,
            "scheduler": self.sched.policy,
            "reorder": self.reorder,
            "queue": self.queue_kind,
            "operators": [
                {"name": st.name, "cost_us": st.cost * 1e6, "selectivity": st.selectivity,
                 "tuples_in": st.tuples_in, "tuples_out": st.tuples_out, "busy": st.busy}
                for st in self.sched.stats
            ],
        }
        if src.marker_every:
            sent, got = src.wm_sent, self.wm_arrived
            extra["latencies"] = [b - a for a, b in zip(sent, got, strict=False)]
        return RunResult(
            engine="ordered",
            elapsed=elapsed,
            tuples_in={src.name: src.count},
            tuples_out={s.name: s.count for s in self.sinks},
            extra=extra,
        )

