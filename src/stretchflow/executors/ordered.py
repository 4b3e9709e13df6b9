"""The ordered multicore executor (``--engine ordered``), after Prasaad, Ramalingam and Rajan,
*Scaling ordered stream processing on shared-memory multicores* (ordered-multicore.txt).

The paper runs a **linear pipeline** (§2, Def. 5.1) of operators marked *stateless* (data
parallel), *stateful* (one state, inputs one at a time in arrival order) or *partitioned
stateful* (per-key state, buckets in parallel; :mod:`stretchflow.operators.stateful`), and
guarantees *ordered execution*: the output stream equals the one of a sequential run. Any
:class:`~stretchflow.flow.Flow` runs on it: :mod:`.ordered_stages` lays the flow out as one line
of stages (several sources merged by timestamp, tuples tagged with their stream, multi-input
O+ reading their inputs through a readiness merge, several sinks); a chain runs untagged.
Each O+ is a partitioned-stateful stage (see "O+ as a PS operator" below); the paper's own
kinds come as flow nodes of kind ``stateful`` (:class:`~stretchflow.pipeline.Pipeline`).

The data path (every tuple goes through these objects, §3–§6):

* **serial numbers and reorder buffers** (§3, :mod:`stretchflow.buffers.reorder`): every stage
  but the source owns a reorder buffer, lock-based (Fig. 2) or non-blocking (Fig. 4), chosen
  with ``reorder="lock"|"nonblocking"``. A stateless stage numbers each *slice* it hands out
  (a run of consecutive inputs, numbered in the same critical section that dequeues it, so
  serial order is input order); the worker sends one unit with all the slice's outputs --
  possibly empty (a filtered-out run still advances ``next``). A stateful or PS stage numbers
  every input in its queue (the queue draws the serial under its lock at enqueue, §5) and sends
  one unit per input (an O+ stage: one unit per batch and instance, below). The buffer's
  ``emit`` delivers the units downstream strictly in serial order, which is what makes the
  stage's output sequence the sequential one;
* **work queues of keyed stages** (§4, :mod:`stretchflow.buffers.hybrid_queue`):
  ``queue="hybrid"`` (Fig. 7: bucket FIFOs + master queue of bucket ids + delegation counters;
  any worker serves any bucket, at most one at a time) or ``queue="partitioned"`` (Fig. 6: each
  bucket statically owned by worker ``b mod n``);
* **the adaptive runtime** (§6, :mod:`.scheduler`): ``parallelism`` worker threads (default one
  per core) ask a central scheduler for work; it applies the schedulability test (fewer workers
  than the operator's maximum degree -- 1 stateful, p PS, n stateless -- a non-empty worklist,
  room in its output queue) and a heuristic ``qst``/``lp``/``et``/``ct``; the worker runs that
  operator for one time slice outside the scheduler's lock and reports cost and selectivity.

O+ as a PS operator. f_MK returns a *set* of keys and window expiry is driven by a watermark
that is global to the operator, so an O+ input cannot be routed to a single bucket. The stage
keeps p = ``parallelism`` instances over one ``SharedState`` of ``key_groups`` groups (default
16 p); instance j owns the groups ``g % p == j`` (as in VSN). Every batch handed over by the
upstream stage enters the queue p times, one entry per instance's bucket, numbered
consecutively (p queue operations per batch, not per tuple). Each instance sees every tuple in
order (keeps the watermark, updates only its keys, expires only its window sets) and sends one
unit per batch; the reorder buffer releases the p units of a batch together and they are
merged by timestamp. That merge is the sequential output order: every output an instance
produces for input s has ``ts <= W_s``, every later one ``ts > W_s``. A file source -> A+ with
columnar forms -> sinks carries whole Arrow batches through the same machinery, the instances
sharing a columnar σ (:mod:`.ordered_columnar`; ``extra["paths"]`` says which path each O+ took).
A chain of Python functions fed by a file source carries batches of rows through the same
machinery (:mod:`.ordered_rows`; ``extra["row_batches"]``): a unit holds Batch items, an O+'s
p entries share each batch, so an A+ computes f_MK once per tuple for its p instances.

Latency markers (§7, "markers at equal tuple intervals"): with ``marker_every=m`` the source
adds a watermark at the timestamp of the latest tuple after every m tuples (a no-op for every
operator: it equals the implicit watermark) and records when; a sink measures each watermark
timestamp's first arrival. ``extra["marker_latencies_ms"]`` lists them and
``extra["marker_latency_ms"]`` summarizes them; ``extra["latency_ms"]`` is the outputs' latency,
measured by the sinks' drains as on every engine (runtime/result.py).

The runtime's skeleton (:mod:`stretchflow.runtime.skeleton`) starts, joins and stops the
workers, holds the sinks (the line's end hands its outputs to the sinks' drains, under the
scheduler's lock, in order) and samples the stages' metrics. The source stage is not the
runtime's source pump: the paper's source is an operator like the others, read by whichever
worker the scheduler gives it, one slice of ``n`` tuples at a time (its degree is 1; it is
scheduled only while its output queue has room), so a pump thread reading ahead of the
scheduler would bypass flow control and the heuristics.

Locks, and why there is no deadlock: the scheduler lock (``cond``) is taken by workers to get
and return work; reorder buffers call ``emit`` outside it and ``emit`` may take it, queues are
leaf locks; nobody takes a reorder buffer's lock while holding ``cond``. Idle workers block on
``cond`` (no busy waiting); the first error (a user error as :class:`OperatorError`, a source's
as :class:`SourceError`) stops the run through :class:`~stretchflow.runtime.RunControl`, whose
abort hooks wake the idle workers and abort the buffers and queues.

Checkpoints (issue #17, ``checkpoint=DIR``): a barrier travels the line as its own control
item; the source stage pauses behind it until it reaches the sinks, where the stages are
snapshotted with nothing in flight (:mod:`.ordered_checkpoint`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..batch import Batch
from ..buffers.hybrid_queue import HybridQueue, Lease, PartitionedQueue
from ..buffers.reorder import LockReorderBuffer, NonBlockingReorderBuffer
from ..elastic.controller import Metrics
from ..engines import Settings, given
from ..engines import run as run_engine
from ..eventtime import WATERMARK
from ..flow import Flow
from ..operators.stateless import apply_batch
from ..runtime.control import CheckpointBarrier
from ..runtime.drain import SinkDrain
from ..runtime.gil_core import gil_bound_source
from ..runtime.latency import percentiles
from ..runtime.result import RunResult
from ..runtime.skeleton import Run
from .ordered_checkpoint import OrderedCheckpoints, apply_chain, deferred
from .ordered_columnar import decide, paths_extra, use_batches
from .ordered_rows import decide_rows, use_rows
from .ordered_stages import (
    END,
    END_TAG,
    Failure,
    Item,
    KeyedStage,
    OPlusStage,
    Plan,
    PSStage,
    SourceStage,
    Stage,
    StatelessStage,
    apply_tagged,
    deposit_many,
    oplus_emitter,
    oplus_unit,
    oplus_unit_tagged,
    ps_units,
    retry_stash,
)
from .scheduler import Candidate, OpStats, Scheduler

__all__ = ["QUEUES", "REORDERS", "run"]

METRICS_PERIOD = 0.5  # seconds between two rows of each stage's rate and backlog (#18)
REORDERS = ("nonblocking", "lock")
QUEUES = ("hybrid", "partitioned")


def run(flow: Flow, parallelism: int | None = None, key_groups: int | None = None,
        capacity: int | None = None, scheduler: str | None = None,
        reorder: str | None = None, queue: str | None = None,
        time_slice: float | None = None, max_batch: int | None = None,
        ct_window: float | None = None, marker_every: int | None = None,
        checkpoint: str | None = None, checkpoint_every: Any = None,
        columnar: str | None = None, gil_core: bool | None = None) -> RunResult:
    """Runs ``flow`` on a pool of ``parallelism`` worker threads (default: the CPU count).

    ``parallelism`` is also the number of instances of each O+; ``key_groups`` the key groups
    of their shared state (default 16 per instance); ``capacity`` bounds every stage's input
    queue (and is C of QST); ``time_slice`` (seconds) and ``max_batch`` (tuples) bound one
    task; ``ct_window`` is CT's window (seconds); ``reorder`` and ``queue`` choose the reorder
    buffer and the keyed stages' queue; ``marker_every`` adds a latency marker every N tuples.

    ``checkpoint`` DIR takes a checkpoint there every ``checkpoint_every`` (N input tuples,
    ``"Ns"`` seconds; default 10 s), holds the output there until the end of input and resumes
    from the checkpoint DIR holds (docs/checkpoints.md).

    ``columnar`` ``"on"``: a file source -> A+ with columnar forms -> sinks runs on Arrow
    batches (:mod:`.ordered_columnar`; else ``extra["columnar_fallback"]`` says why), "off":
    tuples. ``gil_core`` (default True): the workers share one CPU while they are measured
    taking turns at the GIL (:mod:`~stretchflow.runtime.gil_core`).
    """
    return run_engine(flow, "ordered", given(locals()))


def execute(flow: Flow, s: Settings) -> RunResult:
    """Runs ``flow`` with checked settings ``s`` (:func:`stretchflow.engines.run`'s call)."""
    ck = (flow, s.checkpoint, s.checkpoint_every) if s.checkpoint is not None else None
    return _Executor(flow, Plan(flow), s.parallelism, s.scheduler, capacity=s.capacity,
                     time_slice=s.time_slice, max_batch=s.max_batch, key_groups=s.key_groups,
                     ct_window=s.ct_window, reorder=s.reorder, queue=s.queue,
                     marker_every=s.marker_every, checkpoint=ck, columnar=s.columnar,
                     gil_core=s.gil_core).run()


class _Executor:
    def __init__(self, flow: Flow, plan: Plan, n_workers: int, policy: str, capacity: int,
                 time_slice: float, max_batch: int, key_groups: int | None, ct_window: float,
                 reorder: str, queue: str, marker_every: int,
                 checkpoint: tuple[Flow, Any, Any] | None = None, columnar: str = "on",
                 gil_core: bool = False):
        self.n_workers = n_workers
        self.reorder = reorder
        self.queue_kind = queue
        self.tagged = tagged = not plan.chain
        p = n_workers
        self.ck: OrderedCheckpoints | None = None
        reads: list[Any] = []  # the checkpoint's source wrapper, set below
        src = SourceStage(plan, OpStats(plan.sources[0].name if plan.chain else "sources",
                                        0, 1), marker_every,
                          deferred(reads) if checkpoint is not None else None)
        stages: list[Stage] = [src]
        for i, node in enumerate(plan.ops, start=1):
            kw = {"tag": plan.tag[node], "keep": plan.alive[i], "tagged": tagged}
            stage: Stage
            if node.kind == "stateless":
                stage = StatelessStage(node.name, i, OpStats(node.name, i, n_workers),
                                       node.spec, **kw)
            elif node.kind == "stateful":
                stage = PSStage(node.name, i, OpStats(node.name, i, node.spec.buckets),
                                node.spec, queue, max_batch, **kw)
            else:
                stage = OPlusStage(node.name, i, OpStats(node.name, i, p), node.spec, p,
                                   key_groups, queue, **kw)
                for k, u in enumerate(node.inputs):
                    stage.inputs_of.setdefault(plan.tag[u], []).append(k)
            if node.kind != "oplus":
                stage.in_tag = plan.tag[node.inputs[0]]  # type: ignore[attr-defined]
            stages.append(stage)
        self.stages = stages
        # Flow control bounds what a stage holds to capacity + one slice per worker, so this
        # many slots keep every serial in flight inside the ring: send never parks (§3.2,
        # "size the buffer above the spread of serials in flight").
        ring = capacity + max_batch * (n_workers + 2) + 16
        rb_cls = NonBlockingReorderBuffer if reorder == "nonblocking" else LockReorderBuffer
        for st in stages[1:]:
            per = st.units_per_input if isinstance(st, KeyedStage) else 1
            st.rb = rb_cls(self._emitter(st), capacity=ring * per, emit_empty=True)
        self.sched = Scheduler([st.stats for st in stages], policy=policy, capacity=capacity,
                               time_slice=time_slice, max_batch=max_batch,
                               ct_window=ct_window)
        self.capacity = capacity
        self.cond = threading.Condition()
        # the runtime's skeleton: threads, sinks, metrics, latency, checkpoints, the result
        self.rt = Run("ordered", flow, gil_core=gil_core)
        self.ctl = self.rt.control
        self.ctl.on_abort(self._abort)
        self._m_t0 = 0.0
        self._m_last: dict[str, tuple[float, float]] = {}
        self.finished = False
        if checkpoint is not None:  # last: it holds the directory's lock (released in run)
            self.ck = OrderedCheckpoints(checkpoint[0], plan, checkpoint[1], checkpoint[2],
                                         stages)
            reads.append(self.ck.items)
        self.clock = self.rt.clock  # when the source stage read which timestamps
        if self.ck is not None:
            self.rt.checkpoints = self.ck.run
        self.drains = [self.rt.drain(k) for k in range(len(plan.sinks))]
        # per sink tag: the drains of the sinks reading it and the outputs gathered for them
        # in one hand-over (a chain: one tag, -2)
        self.drains_of: dict[int, list[SinkDrain]] = {}
        for t, d in zip(plan.sink_tags, self.drains, strict=True):
            self.drains_of.setdefault(t if tagged else -2, []).append(d)
        self.sink_buf: dict[int, list[Any]] = {t: [] for t in self.drains_of}
        self.marker_ms: list[float] = []
        # a stateless slice: barriers pass in place on a checkpointed run (batches of
        # tables: ordered_columnar's; of rows: ordered_rows')
        self._apply = apply_chain if checkpoint is not None else apply_batch
        self.plan = plan
        self.rows = False  # the line carries batches of rows (ordered_rows)
        got = decide(plan, columnar, checkpoint is not None)
        self.columnar_why = got if isinstance(got, str) else None
        # the workers may hold the GIL for most of their work, so they are measured and
        # pinned while taking turns at it (runtime/gil_core.py), unless the line runs Arrow's
        # kernels (a columnar O+, or a Map or Filter with a columnar form: pinned, currency
        # with column expressions ran 1.44x slower) or reads a source Arrow decodes
        self.gil_bound = all(gil_bound_source(n.spec)
                             for n in flow.nodes if n.kind == "source") and not any(
            getattr(n.spec, "batch_fn", None) is not None
            for n in flow.nodes if n.kind == "stateless")
        if got is not None and not isinstance(got, str):
            self.gil_bound = False
            use_batches(self, got, key_groups)
        elif (rows := decide_rows(plan, columnar)) is not None:
            use_rows(self, rows)

    def _abort(self, e: BaseException) -> None:
        """RunControl's abort hook: wake every idle worker, abort buffers and queues (taken
        outside ``cond``: a lock-based buffer's emit takes it, lock order)."""
        with self.cond:
            self.cond.notify_all()
        for st in self.stages[1:]:
            assert st.rb is not None
            st.rb.abort(e)
            if isinstance(st, KeyedStage):
                st.queue.abort()

    # -- delivery (called in order by the source or a reorder buffer's single drainer) -------
    def _emitter(self, st: Stage) -> Callable[[Any], None]:
        """The reorder buffer's ``emit`` for stage ``st``: called in serial order, one thread
        at a time; it appends the unit to the stage's outbox (see :meth:`_flush`)."""
        lock = st.outbox_lock
        if isinstance(st, OPlusStage):
            return oplus_emitter(st)
        released_k = st.released if isinstance(st, KeyedStage) else None

        def emit(items: list[Item]) -> None:
            if released_k is not None:
                released_k.fetch_add(1)
            if items:
                with lock:
                    st.outbox.extend(items)

        return emit

    def _flush(self, st: Stage) -> None:
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
        thread draining stage i's reorder buffer), so arrival order is the sequential order;
        that is also what makes a multi-input O+'s merge (done here) sequential.
        """
        if i + 1 >= len(self.stages):
            with self.cond:
                self._to_sinks(items)
                self.cond.notify_all()
            return
        nxt = self.stages[i + 1]
        if isinstance(nxt, StatelessStage):
            with self.cond:
                nxt.queue.extend(items)
                self.cond.notify_all()
            return
        if isinstance(nxt, OPlusStage):
            batch = nxt.entries(items) if nxt.tagged else items
            if not batch:
                return
            # one entry per instance holding the whole batch (read-only, shared): p queue
            # operations and p units per hand-over instead of p per tuple
            nxt.pushed.fetch_add(len(batch))
            pairs: list[tuple[Any, int]] = [(batch, j) for j in range(nxt.p)]
        else:
            assert isinstance(nxt, PSStage)
            pairs = nxt.entries(items)
        nxt.queue.put_many(pairs)  # the queue numbers the inputs in this order (§5)
        with self.cond:
            self.cond.notify_all()

    def _to_sinks(self, items: list[Item]) -> None:
        """The line's outputs to the sinks' drains (called under the lock, in order: the
        sinks see the sequential output stream); a hand-over per call, what a watermark
        closed written at once."""
        bufs, tagged = self.sink_buf, self.tagged
        for item in items:
            p = item[1]
            if p is END:
                self._hand_over()
                for d in self.drains:  # (a checkpointed run: the last part)
                    d.end()
                self.finished = True
            elif type(p) is Failure:  # a user's error on a line of rows (ordered_rows)
                self._hand_over()
                raise p.error
            elif type(p) is CheckpointBarrier:
                self._hand_over()
                assert self.ck is not None
                self.ck.at_barrier(p)  # nothing is in flight: the source waits for this
                for d in self.drains:  # each commits its part
                    d.take([(item[0], p)])
                self.stages[0].paused = False  # type: ignore[attr-defined]
            elif p is WATERMARK:
                sent = self._marker_sent(item[0])
                if sent is not None:
                    self.marker_ms.append((time.perf_counter() - sent) * 1000.0)
                self._hand_over()
                for d in self.drains:  # what a watermark closed reaches the sinks now
                    d.flush()
            elif tagged:
                bufs[item[2]].append((item[0], p))
            else:  # a chain: the item itself, as the operators made it
                bufs[-2].append(item)
        self._hand_over()

    def _hand_over(self) -> None:
        """What the line gathered for each sink tag, to its drains (which write it once
        they hold :data:`~stretchflow.runtime.drain.SINK_BATCH` tuples or are flushed)."""
        for t, buf in self.sink_buf.items():
            if buf:
                for d in self.drains_of[t]:
                    d.take(buf)
                    if self.rows:  # batches of rows: written per hand-over, not held
                        d.flush()
                self.sink_buf[t] = []

    def _marker_sent(self, ts: Any) -> float | None:
        """When the watermark ``ts`` entered, if it is a marker not measured yet."""
        src = self.stages[0]
        assert isinstance(src, SourceStage)
        if not src.marker_every:
            return None
        with src.wm_lock:
            return src.wm_sent.pop(ts, None)

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
            if isinstance(st, SourceStage):
                if not st.busy and not st.exhausted and not st.paused:
                    out.append((Candidate(i, st.stats, self.capacity, outq, cs[i]), None))
            elif isinstance(st, StatelessStage):
                if st.queue:
                    out.append((Candidate(i, st.stats, len(st.queue), outq, cs[i]), None))
            else:
                assert isinstance(st, KeyedStage)
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
        if isinstance(st, SourceStage):
            st.busy = True
            return ("source", st, n)
        if isinstance(st, StatelessStage):
            k = min(n, len(st.queue))
            batch = [st.queue.popleft() for _ in range(k)]
            serial = st.next_slice  # numbered with the dequeue: serial order is input order
            st.next_slice += 1
            return ("stateless", st, serial, batch)
        return ("keyed", st, extra, n)

    # -- workers ----------------------------------------------------------------------------
    def _worker(self, wid: int) -> None:
        cond, stop = self.cond, self.ctl.stop
        while True:
            with cond:
                while True:
                    if stop.is_set() or self.finished:
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

    def _finish_slice(self, st: Stage, n_in: float, n_out: int, dt: float) -> None:
        with self.cond:
            st.stats.workers -= 1
            self.sched.finished_slice(st.stats, n_in, n_out, dt)
            self.cond.notify_all()

    def _run_source(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, n = task
        items: list[Item] = []
        end = paused = False
        it = st.it
        every = st.marker_every
        sent = st.wm_sent
        tagged = st.tagged
        for _ in range(n):
            try:
                item = next(it)
            except StopIteration:
                end = True
                break
            if type(item[1]) is CheckpointBarrier:
                if item[1].epoch <= st.epoch:
                    continue  # the same cut from another source
                st.epoch = item[1].epoch
                items.append((item[0], item[1], END_TAG) if tagged else item)
                paused = True  # until it reaches the sinks (ordered_checkpoint)
                break
            items.append(item)
            if item[1] is WATERMARK:
                if every:
                    with st.wm_lock:
                        sent.setdefault(item[0], time.perf_counter())
                continue
            st.count += 1
            if tagged:
                st.counter_of[item[2]][0] += 1
            if every:
                st.since_marker += 1
                if st.since_marker >= every:  # §7: a marker at equal tuple intervals
                    st.since_marker = 0
                    # the latest tuple's ts, on its own stream: equal to the implicit watermark
                    items.append((item[0], WATERMARK, *item[2:]))
                    with st.wm_lock:
                        sent.setdefault(item[0], time.perf_counter())
        self._clocked(items)
        if end:
            items.append((math.inf, END, END_TAG) if st.tagged else (math.inf, END))
        self._source_done(st, items, end, paused, len(items), len(items), t0)

    def _source_done(self, st: SourceStage, items: list[Item], end: bool, paused: bool,
                     n_in: float, n_out: int, t0: float) -> None:
        """The end of a source slice (tuples or batches of rows): the stage's flags, the
        hand-over of ``items``, then the stage free for its next slice, and the slice's
        statistics (``n_in`` inputs, ``n_out`` outputs since ``t0``)."""
        dt = time.perf_counter() - t0
        with self.cond:
            if end:
                st.exhausted = True
            if paused:  # before the push: the sinks may see the barrier at once
                st.paused = True
        self._push(0, items)
        with self.cond:
            st.busy = False  # only now: the next slice's items must follow these
        self._finish_slice(st, n_in, n_out, dt)

    def _run_stateless(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, serial, batch = task
        if st.tagged:
            out = apply_tagged(st, batch)
            n_data = sum(1 for it in batch if it[2] == st.in_tag and it[1] is not WATERMARK)
        else:
            out = self._apply(st.op, batch, (WATERMARK, END))
            n_data = sum(len(p) if type(p) is Batch else 1 for _, p in batch
                         if p is not WATERMARK and p is not END)
        dt = time.perf_counter() - t0
        deposit_many(st, [(serial, out)])  # one unit per slice, even empty (§3)
        retry_stash(st)
        self._flush(st)
        n_out = (len(out) - len(batch) + n_data if st.tagged else  # tuples (batches': theirs)
                 sum(len(p) if type(p) is Batch else 1 for _, p in out
                     if p is not WATERMARK and p is not END))
        self._finish_slice(st, max(n_data, 1), n_out, dt)

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
        work = self._oplus_items if isinstance(st, OPlusStage) else self._ps_items
        while lease is not None:
            n_in_l, n_out_l = work(st, lease)
            n_in += n_in_l
            n_out += n_out_l
            if isinstance(q, HybridQueue):
                # Fig. 7 L14: while items were delegated to us we stay the active worker
                lease = q.release(lease, limit=n)
            else:
                q.release(lease)
                lease = None
        retry_stash(st)
        self._flush(st)
        dt = time.perf_counter() - t0
        self._finish_slice(st, n_in, n_out, dt)

    def _ps_items(self, st: PSStage, lease: Lease[Any]) -> tuple[int, int]:
        units, n_in, n_out = ps_units(st, lease)
        deposit_many(st, units)
        return n_in, n_out

    def _oplus_items(self, st: OPlusStage, lease: Lease[Any]) -> tuple[float, int]:
        j = lease.bucket
        n_in = n_out = 0
        units: list[tuple[int, Any]] = []
        unit = oplus_unit_tagged if st.tagged else oplus_unit
        for serial, batch in lease.items:
            # one unit per batch and instance
            out, got = unit(st, j, batch)
            n_out += got
            units.append((serial, out))
            n_in += len(batch)
        deposit_many(st, units)
        if j == 0:
            st.done.fetch_add(n_in)
        # statistics per operator input: the p instances share the work (and outputs) of one
        # input, so each reports 1/p of the inputs it went through
        return n_in / st.p, n_out

    def _clocked(self, items: list[Item]) -> None:
        """Records a source slice's latest data timestamp in the ingest clock (latency)."""
        for item in reversed(items):
            p = item[1]
            if p is not WATERMARK and type(p) is not CheckpointBarrier:
                self.clock.record(item[0])
                return

    # -- the run ------------------------------------------------------------------------------
    def _measure(self) -> list[tuple[str, Any]]:
        """Each stage's period: tuples in per second and its backlog (inputs not yet released
        downstream, :meth:`Stage.backlog`), for the run's MetricsLog and the live view."""
        now, out = time.perf_counter(), []
        for st in self.stages[1:]:
            s = st.stats
            t, n = self._m_last.get(st.name, (self._m_t0, 0.0))
            self._m_last[st.name], dt = (now, s.tuples_in), max(now - t, 1e-9)
            rate = max(0.0, s.tuples_in - n) / dt
            out.append((st.name, Metrics(
                time=now - self._m_t0, period=dt, parallelism=s.max_degree, throughput=rate,
                input_rate=rate, max_parallelism=s.max_degree, extras={"backlog": st.backlog()})))
        return out

    def run(self) -> RunResult:
        rt = self.rt
        for k in range(self.n_workers):
            rt.thread(self._worker, k, name=f"stretchflow-ordered-{k}", python=self.gil_bound)
        rt.sample(METRICS_PERIOD, self._measure)
        # the workers return at the line's end (END reached the sinks) or when the run stops
        rt.execute(begin=self._begin, finished=lambda: self.finished)
        src = self.stages[0]
        assert isinstance(src, SourceStage)
        extra: dict[str, Any] = {
            "parallelism": {st.name: st.stats.max_degree for st in self.stages[1:]},
            "workers": self.n_workers,
            "scheduler": self.sched.policy,
            "reorder": self.reorder,
            "queue": self.queue_kind,
            "row_batches": self.rows,  # the line carried batches of rows (ordered_rows)
            **paths_extra(self.stages, self.columnar_why),
            "operators": [
                {"name": st.name, "cost_us": st.cost * 1e6, "selectivity": st.selectivity,
                 "tuples_in": st.tuples_in, "tuples_out": st.tuples_out, "busy": st.busy}
                for st in self.sched.stats
            ],
        }
        if src.marker_every:  # §7's markers: each from its source to the sinks
            extra["marker_latencies_ms"] = self.marker_ms
            extra["marker_latency_ms"] = percentiles(self.marker_ms)
        return rt.result({name: c[0] for name, c in src.counts.items()} if self.tagged
                         else {src.stats.name: src.count}, extra)

    def _begin(self, t0: float) -> None:
        self._m_t0 = t0
        for st in self.stages[1:]:
            self.rt.metrics.parallelism_changed(st.name, st.stats.max_degree, t0)
