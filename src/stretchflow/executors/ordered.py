"""The ordered multicore executor (``--engine ordered``), after Prasaad, Ramalingam and Rajan,
*Scaling ordered stream processing on shared-memory multicores* (ordered-multicore.txt).

Scope: a **chain** — one source, any sequence of map / flat_map / filter and single-input O+
operators, then one or more sinks on the last stream. Anything else is refused with
:class:`FlowDefinitionError`.

Design (§3–§6 of the paper):

* every operator of the chain is a *stage* with an input queue; a pool of worker threads asks
  a central scheduler (:mod:`.scheduler`, policies ``qst``/``lp``/``et``/``ct``) for work and
  runs one operator for one time slice (up to ``slice_tuples`` tuples), outside the lock;
* the source is a stateful operator (degree 1): one worker at a time reads it;
* a stateless operator runs on any number of workers at once. A slice takes a run of
  consecutive inputs, i.e. a run of serial numbers (§3), and deposits one unit with all their
  outputs (possibly empty: a filtered-out tuple still advances ``next``). Units are released
  downstream strictly in serial order, so the stage's output equals a sequential run;
* a single-input O+ is partitioned stateful with p instances over one ``SharedState(G)``;
  instance j owns the key groups ``g % p == j``. Every instance sees every tuple in order (as
  in VSN: each keeps the watermark and expires only its own window sets), so the O+ input
  queue is one bucket per instance and each bucket is run by at most one worker at a time.
  Each instance records its outputs per input serial; serials up to m = min over instances of
  the last serial processed are released as a k-way merge by timestamp. That merge is the
  sequential output order: every output an instance produces while processing serial s has
  ``ts <= W_s`` (expired windows end at or before W_s, held f_U outputs are released up to
  W_s) and every later output has ``ts > W_s``; all instances share the same W progression;
* flow control: a stage is scheduled only while its output queue holds fewer than
  ``capacity`` tuples; the last stage writes to the sinks, so the chain always drains;
* idle workers block on a condition (no busy waiting); a user error stops every worker and is
  raised in the caller as :class:`OperatorError` (a source's as :class:`SourceError`).

The reorder step is the lock-based scheme of Fig. 2 kept inside the scheduler's lock (units
are deposited there anyway), rather than ``buffers.reorder``: one lock already serializes the
scheduling decisions, so a second synchronization layer would only add cost.
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import apply_batch
from .reference import RunResult
from .scheduler import Candidate, OpStats, Scheduler


class _End:
    """End of input, travelling through the chain as the last item (ts = +inf)."""

    def __repr__(self) -> str:
        return "END"


END = _End()
Item = tuple[Any, Any]  # (ts, payload); payload may be WATERMARK or END
_SINK_BATCH = 4096


def _order_key(item: Item) -> tuple[Any, int]:
    # outputs before a watermark of the same ts, END last (its ts is +inf anyway)
    p = item[1]
    return item[0], (2 if p is END else 1 if p is WATERMARK else 0)


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


class _Stage:
    """One operator of the chain with its input queue and reorder state."""

    def __init__(self, node: Node, index: int, stats: OpStats):
        self.node = node
        self.index = index
        self.stats = stats
        self.kind = node.kind

    def size(self) -> int:
        """Tuples waiting in the stage's input queue (a source has none)."""
        return 0


class _SourceStage(_Stage):
    def __init__(self, node: Node, stats: OpStats):
        super().__init__(node, 0, stats)
        self.it: Iterator[Item] = iter(node.spec.items())
        self.busy = False
        self.exhausted = False
        self.count = 0


class _StatelessStage(_Stage):
    def __init__(self, node: Node, index: int, stats: OpStats):
        super().__init__(node, index, stats)
        self.queue: deque[Item] = deque()
        self.next_in = 1  # serial of the head of the queue
        self.next_out = 1  # the reorder buffer's `next`
        self.units: dict[int, tuple[int, list[Item]]] = {}  # first serial -> (n, outputs)

    def size(self) -> int:
        return len(self.queue)


class _OPlusStage(_Stage):
    def __init__(self, node: Node, index: int, stats: OpStats, p: int):
        super().__init__(node, index, stats)
        op: OPlus = node.spec
        self.p = p
        if p == 1:
            self.instances = [op.instance()]
        else:
            groups = 16 * p  # several groups per instance, as VSN's buckets
            sigma = SharedState(groups)
            assign = [g % p for g in range(groups)]
            self.instances = [op.instance(sigma, j, assign) for j in range(p)]
        self.buckets: list[deque[tuple[int, Item]]] = [deque() for _ in range(p)]
        self.busy = [False] * p
        self.done = [0] * p  # last serial each instance processed
        self.outs: list[deque[tuple[int, list[Item]]]] = [deque() for _ in range(p)]
        self.next_in = 1
        self.released = 0  # serials <= released have gone downstream

    def size(self) -> int:
        return max(len(b) for b in self.buckets)


def run(flow: Flow, workers: int | None = None, scheduler: str = "qst",
        **options: Any) -> RunResult:
    """Runs a chain ``flow`` on a pool of ``workers`` threads (default: the CPU count).

    Options: ``capacity`` (queue bound and C of QST, default 1024), ``time_slice`` (seconds,
    default 0.002), ``max_batch`` (tuples per slice, default 256), ``partitions`` (instances
    per O+, default ``workers``), ``ct_window`` (seconds, default 0.05).
    """
    known = {"capacity", "time_slice", "max_batch", "partitions", "ct_window"}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"the ordered engine does not take {sorted(unknown)}; "
                        f"options: {sorted(known)}")
    n_workers = workers if workers is not None else (os.cpu_count() or 1)
    if n_workers < 1:
        raise ValueError("the ordered engine needs at least one worker")
    chain = chain_of(flow)
    ex = _Executor(flow, chain, n_workers, scheduler, **options)
    return ex.run()


class _Executor:
    def __init__(self, flow: Flow, chain: list[Node], n_workers: int, policy: str,
                 capacity: int = 1024, time_slice: float = 0.002, max_batch: int = 256,
                 partitions: int | None = None, ct_window: float = 0.05):
        if capacity < 1 or max_batch < 1:
            raise ValueError("capacity and max_batch must be at least 1")
        self.flow = flow
        self.n_workers = n_workers
        p = partitions if partitions is not None else n_workers
        if p < 1:
            raise ValueError("partitions must be at least 1")
        stats: list[OpStats] = []
        stages: list[_Stage] = []
        for i, node in enumerate(chain):
            if node.kind == "source":
                st = OpStats(node.name, i, 1)
                stages.append(_SourceStage(node, st))
            elif node.kind == "stateless":
                st = OpStats(node.name, i, n_workers)
                stages.append(_StatelessStage(node, i, st))
            else:
                st = OpStats(node.name, i, p)
                stages.append(_OPlusStage(node, i, st, p))
            stats.append(st)
        self.stages = stages
        self.sched = Scheduler(stats, policy=policy, capacity=capacity, time_slice=time_slice,
                               max_batch=max_batch, ct_window=ct_window)
        self.capacity = capacity
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.finished = False
        self.sinks = [s for _, s in flow.sinks]
        self.sink_buf: list[Item] = []
        self.slices = 0

    # -- queues ---------------------------------------------------------------------------
    def _out_size(self, i: int) -> int:
        """Size of stage i's output queue (the next stage's input; 0 for the sinks)."""
        if i + 1 >= len(self.stages):
            return 0
        return self.stages[i + 1].size()

    def _push(self, i: int, items: list[Item]) -> None:
        """Appends stage i's in-order outputs to stage i+1's input (or the sinks)."""
        if not items:
            return
        if i + 1 >= len(self.stages):
            self._to_sinks(items)
            return
        nxt = self.stages[i + 1]
        if isinstance(nxt, _StatelessStage):
            nxt.queue.extend(items)
        else:
            assert isinstance(nxt, _OPlusStage)
            s = nxt.next_in
            tagged = list(zip(range(s, s + len(items)), items, strict=True))
            nxt.next_in = s + len(items)
            for b in nxt.buckets:
                b.extend(tagged)

    def _to_sinks(self, items: list[Item]) -> None:
        # called under the lock, in order: the sinks see the sequential output stream
        for item in items:
            p = item[1]
            if p is END:
                self._flush_sinks()
                self.finished = True
            elif p is WATERMARK:
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
    def _candidates(self) -> list[tuple[Candidate, Any]]:
        """Schedulable operators: below max degree, non-empty worklist, output queue has room."""
        out: list[tuple[Candidate, Any]] = []
        cs = self.sched.cum_selectivities
        for st in self.stages:
            i = st.index
            room = self._out_size(i) < self.capacity
            if not room:
                continue
            if isinstance(st, _SourceStage):
                if not st.busy and not st.exhausted:
                    out.append((Candidate(i, st.stats, self.capacity, self._out_size(i), cs[i]),
                                None))
            elif isinstance(st, _StatelessStage):
                if st.queue:
                    out.append((Candidate(i, st.stats, len(st.queue), self._out_size(i),
                                          cs[i]), None))
            else:
                assert isinstance(st, _OPlusStage)
                best, best_len = None, 0
                for j in range(st.p):  # the idle instance with the longest bucket
                    if not st.busy[j] and len(st.buckets[j]) > best_len:
                        best, best_len = j, len(st.buckets[j])
                if best is not None:
                    pending = sum(len(b) for b in st.buckets) // st.p
                    out.append((Candidate(i, st.stats, pending, self._out_size(i), cs[i]),
                                best))
        return out

    def _take_task(self) -> tuple[Any, ...] | None:
        cands = self._candidates()
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
            first = st.next_in
            st.next_in += k
            return ("stateless", st, first, batch)
        assert isinstance(st, _OPlusStage)
        j = extra
        st.busy[j] = True
        b = st.buckets[j]
        batch2 = [b.popleft() for _ in range(min(n, len(b)))]
        return ("oplus", st, j, batch2)

    # -- workers ----------------------------------------------------------------------------
    def _worker(self) -> None:
        cond = self.cond
        try:
            while True:
                with cond:
                    while True:
                        if self.error is not None or self.finished:
                            return
                        task = self._take_task()
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
                    self._run_oplus(task, t0)
        except BaseException as e:  # noqa: BLE001 - any failure stops the whole run
            with cond:
                if self.error is None:
                    self.error = e
                cond.notify_all()

    def _run_source(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, n = task
        items: list[Item] = []
        end = False
        it = st.it
        for _ in range(n):
            try:
                item = next(it)
            except StopIteration:
                end = True
                break
            items.append(item)
        dt = time.perf_counter() - t0
        with self.cond:
            st.count += sum(1 for _, p in items if p is not WATERMARK)
            if end:
                st.exhausted = True
                items.append((math.inf, END))
            self._push(0, items)
            st.busy = False
            st.stats.workers -= 1
            self.sched.finished_slice(st.stats, len(items), len(items), dt)
            self.cond.notify_all()

    def _run_stateless(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, first, batch = task
        op = st.node.spec
        out = apply_batch(op, batch, (WATERMARK, END))
        n_data = sum(1 for _, p in batch if p is not WATERMARK and p is not END)
        dt = time.perf_counter() - t0
        with self.cond:
            # deposit the unit of serials [first, first+len(batch)), release in serial order
            st.units[first] = (len(batch), out)
            released: list[Item] = []
            while st.next_out in st.units:
                k, o = st.units.pop(st.next_out)
                st.next_out += k
                released.extend(o)
            self._push(st.index, released)
            st.stats.workers -= 1
            self.sched.finished_slice(st.stats, max(n_data, 1), len(out) - len(batch) + n_data,
                                      dt)
            self.cond.notify_all()

    def _run_oplus(self, task: tuple[Any, ...], t0: float) -> None:
        _, st, j, batch = task
        inst: OPlusInstance = st.instances[j]
        op = st.node.spec
        outs: list[tuple[int, list[Item]]] = []
        n_out = 0
        last = st.done[j]
        for serial, (ts, p) in batch:
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
            o = inst.take() if inst.out else []
            n_out += len(o)
            if j == 0 and (p is WATERMARK or p is END):
                o.append((ts, p))  # forwarded once, after what it released (Alg. 2)
            if o:
                outs.append((serial, o))
            last = serial
        dt = time.perf_counter() - t0
        with self.cond:
            st.outs[j].extend(outs)
            st.done[j] = last
            st.busy[j] = False
            m = min(st.done)
            if m > st.released:
                runs: list[list[Item]] = []
                for q in st.outs:
                    r: list[Item] = []
                    while q and q[0][0] <= m:
                        r.extend(q.popleft()[1])
                    if r:
                        runs.append(r)
                st.released = m
                if len(runs) == 1:
                    merged = runs[0]
                else:
                    merged = list(heapq.merge(*runs, key=_order_key))
                self._push(st.index, merged)
            st.stats.workers -= 1
            self.sched.finished_slice(st.stats, len(batch), n_out, dt)
            self.cond.notify_all()

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        for s in self.sinks:
            s.open()
        threads = [threading.Thread(target=self._worker, name=f"stretchflow-ordered-{k}",
                                    daemon=True) for k in range(self.n_workers)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            with self.cond:
                if not self.finished and self.error is None:
                    self.error = RuntimeError("interrupted")
                self.cond.notify_all()
            for t in threads:
                t.join(timeout=5)
            for s in self.sinks:
                s.close()
        if self.error is not None:
            raise self.error
        elapsed = time.perf_counter() - t0
        src = self.stages[0]
        assert isinstance(src, _SourceStage)
        return RunResult(
            engine="ordered",
            elapsed=elapsed,
            tuples_in={src.node.name: src.count},
            tuples_out={s.name: s.count for s in self.sinks},
            extra={
                "workers": self.n_workers,
                "scheduler": self.sched.policy,
                "operators": [
                    {"name": st.name, "cost_us": st.cost * 1e6, "selectivity": st.selectivity,
                     "tuples_in": st.tuples_in, "tuples_out": st.tuples_out, "busy": st.busy}
                    for st in self.sched.stats
                ],
            },
        )
