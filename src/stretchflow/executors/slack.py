"""The slack executor: O+ operators read their inputs through Slack ScaleGates under a query
deadline (determinism-latency §3–§5).

Threads (the SSGOperator of §4.2, Fig. 7):

* one *writer* thread per source; stateless operators downstream of a source run on it;
* per O+, ``parallelism`` processing threads (PThreads) that share the operator's state σ as in
  VSN (:class:`~stretchflow.operators.oplus.SharedState`, key groups owned via f_μ): each
  reads every tuple of the operator's SSG and handles the keys of its groups; its outputs go,
  through stateless operators, to the SSGs of the downstream operators (it is one of their
  writers) or to a sink;
* one thread per sink, reading an SSG with SLT = ∞ (ready tuples only) fed by the producers
  of the sink's stream;
* a monitor (the MThread; the thread that called :func:`run`) that every
  ``metrics_interval`` seconds measures each operator and the end-to-end latency, records
  the time series and lets a tuner (the SLTuner or a baseline,
  :mod:`stretchflow.elastic.sltuner`) set new SLTs (the SLT Setter).

Measurements
    * per operator (Eq. 1): for each thread, the 95th percentile over the interval of queue
      delay (from the insertion of a tuple in the SSG to its read; transfer from the upstream
      operator included, so ``comm`` of Eq. 2 is part of it) plus processing time, and at
      least the age of the oldest tuple the thread has not read yet (a thread stalled on an
      unready tuple reads nothing, and its latency must still show); the operator's latency
      is the slowest thread's;
    * end to end (Eq. 2): the maximum over source-to-sink paths of the sum of the latencies
      of the O+ on the path;
    * slack-ready tuples read (Eq. 4–5), per operator and in total.

Slack-ready tuples processed out of order (the paper's deliberate approximation, §3 Fig. 6)
    An O+ thread's watermark W is the largest timestamp it has read. A tuple with ts < W
    ("late" for the operator) is processed into the window instances that are still open,
    those with right boundary > W: for WT ``multi`` the instances ``[max(l1, lo), l2]`` (lo =
    the first open left boundary), for WT ``single`` the key's current window set at lo if the
    tuple falls in it. Instances that already expired cannot take it back: a tuple with no open
    instance is *lost* and one with only some open is *partially lost*. Both are counted per
    operator and reported (``lost_tuples`` / ``partially_lost_tuples``), never silently
    dropped. A tuple is counted by the instance(s) owning its keys (once for a one-key tuple).
    Outputs stay timestamp-sorted per thread (f_U outputs carry right boundaries > W).

Plan and runtime
    The inlets of the O+ and the sinks are those of the shared physical plan
    (:class:`~stretchflow.executors.plan.PhysicalPlan` with :class:`SSGInlet` as the
    inlet factory), stateless operators run fused on their producer's thread as in VSN; the
    threads, the first-error-wins stop, the source batching and the output latency are the
    shared runtime's (:mod:`stretchflow.runtime`).

Flow control
    Every SSG (the O+ inputs and the sinks') has a capacity (``capacity``, default 65 536 tuples
    held; None, only by calling :func:`run` directly, for unbounded): a source or upstream O+
    thread writing into a full SSG blocks until its readers free room, so a fast source in front
    of a slow operator does not grow memory (the bound and its deadlock-freedom argument are in
    :mod:`stretchflow.buffers.ssg`). A failing thread aborts every SSG so no thread stays
    blocked on a full or empty buffer (the SSGs' aborts are the run's abort hooks).

With SLT ≥ max_ts − merge_ts throughout (in particular SLT = ∞, the default) no tuple is
slack-ready and the output equals the reference executor's, per timestamp.

Checkpoints (issue #17, ``checkpoint=DIR``, SLT = inf only): VSN's barriers through the SSGs
(:mod:`.slack_checkpoint`).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Hashable, Mapping
from operator import itemgetter
from typing import Any

from ..buffers.esg import Aborted
from ..buffers.ssg import DEFAULT_CAPACITY, END, SlackScaleGate
from ..elastic.controller import Controller, Metrics
from ..errors import FlowDefinitionError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..runtime import (
    RunResult,
    SourcePump,
    Stopped,
    user_error,
)
from ..runtime.control import CheckpointBarrier
from ..runtime.drain import SINK_BATCH, SinkDrain, drain_buffer
from ..runtime.skeleton import Run, controller_name
from ..runtime.threaded_checkpoint import RunCheckpoints
from .plan import Item, PhysicalPlan
from .slack_checkpoint import SlackCheckpoints, check

__all__ = ["SlackInstance", "run"]

BATCH = 64  # tuples a thread takes from its SSG at once
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
        self.ssg.insert_batch(list(heapq.merge(*runs, key=itemgetter(0))), pid)

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


class SlackInstance(OPlusInstance):
    """An O+ instance that takes tuples older than its watermark into still-open windows."""

    def __init__(self, op: OPlus, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None):
        super().__init__(op, sigma, j, assign)
        self.late = 0  # tuples with ts < W
        self.lost = 0  # ... of which no window instance was open any more
        self.partial = 0  # ... of which some window instances had expired (WT multi)

    def _handle(self, ts: int, value: Any, i: int) -> None:
        if ts >= self.W:
            super()._handle(ts, value, i)
            return
        op = self.op
        ks = op.keys(value, i)
        if not ks:
            return
        routed = self._route(ks, value)
        if not routed:
            return  # another instance owns its keys and counts it
        wa, ws_ = op.WA, op.WS
        self.late += 1
        l1 = ((ts - ws_) // wa + 1) * wa  # earliestWinL(ts)
        l2 = ts - ts % wa  # latestWinL(ts)
        lo = ((self.W - ws_) // wa + 1) * wa  # the first left boundary still open at W
        first = max(l1, lo)
        if first > l2:
            self.lost += 1
            return
        if first > l1 and op.WT == "multi":
            self.partial += 1
        last = first if op.WT == "single" else l2
        update, check_create = op.update, self._check_create
        for l in range(first, last + 1, wa):
            for k, v, g, sg in routed:
                out = update(check_create(k, g, sg, l), ts, v, i)
                if out:
                    self._emit_later(l + ws_, out)


def _p95(values: list[float]) -> float:
    """Eq. 1's per-thread statistic: the 95th percentile (nearest rank) of one interval's
    samples, 0 for none. Not :func:`stretchflow.runtime.percentiles`: that reports p50/p99/max
    of a whole run; the paper's operator latency is the p95 of the interval."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(0.95 * len(v)))]


class _Reader:
    """One processing thread of an O+ and its measurements for the current interval."""

    def __init__(self, name: str, j: int):
        self.name = name
        self.j = j
        self.lock = threading.Lock()
        self.samples: list[float] = []  # seconds: queue delay + processing (Eq. 1)
        self.last_ts: float = -math.inf  # event time of the last processed tuple (Eq. 6)
        self.inst: SlackInstance | None = None


class _Operator:
    def __init__(self, node: Node, k: int, key_groups: int):
        self.node = node
        self.name = node.name
        self.op: OPlus = node.spec
        self.k = k
        self.sigma = SharedState(key_groups)
        self.assign = [g % k for g in range(key_groups)]
        self.readers = [_Reader(f"{node.name}#{j}", j) for j in range(k)]
        for r in self.readers:  # made here: a checkpoint restores them all before the run
            r.inst = SlackInstance(self.op, self.sigma, r.j, self.assign)
        self.ssg: SlackScaleGate = None  # type: ignore[assignment]  # set from the plan
        self.prev_slack = 0
        self.prev_late = 0
        self.prev_lost = 0


class _Run:
    """The operators on the shared physical plan, and their threads."""

    def __init__(self, flow: Flow, slt: Any, parallelism: Any, key_groups: int,
                 capacity: int | None):
        flow.validate()
        self.flow = flow
        self.ops: dict[Node, _Operator] = {}
        for node in flow.nodes:
            if node.kind == "oplus":
                k = (parallelism.get(node.name, 1) if isinstance(parallelism, Mapping)
                     else parallelism)
                if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                    raise FlowDefinitionError(f"{node.name}: parallelism must be a positive "
                                              f"integer, got {k!r}")
                self.ops[node] = _Operator(node, k, max(key_groups, k))

        def inlet(consumer: Any, name: str, producers: list[Hashable],
                  readers: list[Hashable], cap: int | None, n_inputs: int) -> SSGInlet:
            # a sink reads ready tuples only (SLT = inf): its order is the output's
            s = (slt.get(name, math.inf) if isinstance(slt, Mapping) else slt
                 ) if isinstance(consumer, Node) else math.inf
            return SSGInlet(name, producers, readers, cap, s)

        self.plan = PhysicalPlan(flow, self._producer_ids, self._reader_ids, capacity, inlet)
        for node, o in self.ops.items():
            o.ssg = self.plan.inlets[node].ssg
        # the runtime's skeleton: threads, sinks, metrics, latency, checkpoints, the result
        self.rt = Run("slack", flow)
        self.control, self.clock, self.latency = self.rt.control, self.rt.clock, self.rt.latency
        for i in self.plan.inlets.values():
            self.control.on_abort(i.abort)
        self.source_counts: dict[str, int] = {}
        self.drains: list[SinkDrain | None] = [None] * len(flow.sinks)
        self.ck: Any = None  # slack_checkpoint.SlackCheckpoints of a checkpointed run

    def _producer_ids(self, node: Node) -> list[Hashable]:
        if node.kind == "source":
            return [node.name]
        return [r.name for r in self.ops[node].readers]

    def _reader_ids(self, node: Node) -> list[Hashable]:
        return [r.name for r in self.ops[node].readers]

    # -- threads --------------------------------------------------------------------------------
    def source_thread(self, node: Node) -> None:
        pusher = self.plan.pusher(node, node.name)
        spec, push = node.spec, pusher.push
        if self.ck is not None:  # barriers in the stream, skipping on resume
            spec, push, _ = self.ck.run.pump_args(node, pusher, None)
        # a live source (paced, replayed) sends each tuple at once; a file or iterable in
        # batches of SOURCE_BATCH, the delay only bounding how long a slow one's tuples wait
        pump = SourcePump(spec, push, self.control, clock=self.clock,
                          batch=SOURCE_BATCH, delay=SOURCE_DELAY)
        try:
            pump.run()
            pusher.close()
        except Aborted:
            raise Stopped from None
        finally:
            self.source_counts[node.name] = pump.count

    def reader_thread(self, o: _Operator, r: _Reader) -> None:
        inst = r.inst
        assert inst is not None
        ssg, name = o.ssg, r.name
        pusher = self.plan.pusher(o.node, name)
        clock = time.perf_counter
        process, advance = inst.process, inst.advance
        ts = p = None
        last_wm = -math.inf
        try:
            while True:
                # no timeout: a failing run aborts the SSG, which wakes this call
                got = ssg.get_batch(name, BATCH)
                if got is END:
                    break
                lat = []
                for (ts, p, i, t_in), _slack in got:
                    if p is WATERMARK:
                        advance(ts)
                    elif type(p) is CheckpointBarrier:
                        if self.ck.at_barrier(o, r, pusher, ts, p):
                            last_wm = ts  # no punctuation below the barrier after it
                    else:
                        process(ts, p, i)
                    t1 = clock()
                    lat.append(t1 - t_in)  # queue delay (t0 - t_in) + processing (t1 - t0)
                with r.lock:
                    r.samples.extend(lat)
                    if inst.W > r.last_ts:
                        r.last_ts = inst.W
                out = inst.take() if inst.out else []
                w = inst.W
                # a punctuation at W lets the downstream SSG's merge_ts pass this thread
                # even when it outputs nothing (as VSN's ESG_out, Lemma 2): without it a
                # sibling thread's outputs wait for this one's next output, and with a
                # capacity the sibling blocks, stops reading the shared input and the
                # writers of this SSG block too (a deadlock)
                if w > last_wm and (not out or out[-1][0] <= w):
                    out.append((w, WATERMARK))
                    last_wm = w
                if out:
                    pusher.push(out)
            ts = p = None
            inst.finish()
            pusher.push(inst.take())
            pusher.close()
        except Aborted:
            raise Stopped from None
        except Exception as e:
            raise user_error(o.name, ts, p, e) from e

    def sink_thread(self, k: int) -> None:
        """Sink ``k``'s thread: its SSG's hand-overs (SLT = inf: ready tuples only, in order)
        through the runtime's drain (into the sink, or its part of a checkpointed run)."""
        ssg = self.plan.inlets[("sink", k)].ssg
        reader = ("sink", k)
        drain = self.drains[k] = self.rt.drain(k)

        def get() -> Any:
            got = ssg.get_batch(reader, SINK_BATCH)
            # the SSG's (ts, payload, i, t_in) back to (ts, payload), watermarks left out
            return got if got is END else [(t[0], t[1]) for t, _ in got
                                           if t[1] is not WATERMARK]

        try:
            drain_buffer(drain, get, END, self.control)
        except Aborted:
            raise Stopped from None

    def events(self) -> int:
        """Output tuples the sinks have written so far."""
        return sum(d.count for d in self.drains if d is not None)

    # -- Eq. 1, Eq. 2 -------------------------------------------------------------------------
    def measure(self, now: float) -> dict[str, dict[str, Any]]:
        out = {}
        for o in self.ops.values():
            per_thread = []
            last_ts = -math.inf
            for r in o.readers:
                with r.lock:
                    samples, r.samples = r.samples, []
                    last_ts = max(last_ts, r.last_ts)
                head = o.ssg.get_head(r.name)
                age = now - head[3] if head is not None else 0.0
                per_thread.append(max(_p95(samples), age) * 1000.0)
            st = o.ssg.stats()
            slack = sum(st["slack_ready"].values())
            # tuples handed to the readers so far (every reader gets every tuple once)
            read = slack + sum(st["ready"].values()) + sum(st["late"].values())
            late = sum(r.inst.late for r in o.readers if r.inst is not None)
            lost = sum(r.inst.lost for r in o.readers if r.inst is not None)
            out[o.name] = {
                "latency_ms": max(per_thread),
                "slack_ready": slack - o.prev_slack,
                "late": late - o.prev_late,
                "lost": lost - o.prev_lost,
                "slt": o.ssg.slt,
                "last_ts": last_ts,
                "max_ts": o.ssg.max_ts(),
                "threads": o.k,
                "window_ms": o.op.WS,
                "skew_ms": o.ssg.max_ts() - o.ssg.merge_ts()
                if math.isfinite(o.ssg.merge_ts()) else 0.0,
                "max_skew_ms": o.ssg.max_skew,
                "held": st["held"],
                "read_total": read,
            }
            o.prev_slack, o.prev_late, o.prev_lost = slack, late, lost
        return out

    def paths(self) -> list[list[str]]:
        """The O+ names on every source-to-sink path (Eq. 2's max over paths)."""
        found: list[list[str]] = []
        children = self.plan.children

        def walk(node: Node, acc: list[str]) -> None:
            if node.kind == "oplus":
                acc = [*acc, node.name]
            for kind, child, _ in children[node]:
                if kind == "sink":
                    found.append(acc)
                else:
                    walk(child, acc)

        for node in self.flow.nodes:
            if node.kind == "source":
                walk(node, [])
        return found


def end_to_end(per_op: Mapping[str, Mapping[str, Any]], paths: list[list[str]]) -> float:
    """Eq. 2: the maximum over paths of the sum of the operators' latencies (ms)."""
    return max((sum(per_op[n]["latency_ms"] for n in p) for p in paths), default=0.0)


def run(flow: Flow, parallelism: int | Mapping[str, int] = 1, key_groups: int = 64,
        capacity: int | None = DEFAULT_CAPACITY, metrics_interval: float = 0.5,
        controller: Controller | None = None, deadline: float | None = None,
        slt: float | Mapping[str, float] = math.inf, checkpoint: str | None = None,
        checkpoint_every: Any = None) -> RunResult:
    """Runs ``flow`` with every O+ reading its inputs through an SSG.

    Args:
        parallelism: processing threads per O+ (an int, or a dict by operator name; an
            operator not in it gets 1).
        key_groups: key groups of each O+'s shared state (at least ``parallelism``).
        capacity: the flow-control bound of every SSG (tuples held, see
            :mod:`stretchflow.buffers.ssg`): a writer (source or upstream O+ thread) blocks
            while the SSG it writes to is full; None (only when calling this function
            directly: ``Flow.run`` reads None as "the default") disables it, and memory then
            grows with the skew.
        metrics_interval: seconds between measurements (time series points, tuner calls).
        controller: the SLT tuner, a :class:`~stretchflow.elastic.controller.Controller`
            that answers :class:`~stretchflow.elastic.sltuner.SLTDecision` with new SLTs.
        deadline: the query deadline (Eq. 3) in wall-clock ms; intervals whose end-to-end
            latency reaches it count as violations (of the intervals in which the operators
            read tuples: one that read none measured no latency). Passed to the tuner as
            ``Metrics.extras["deadline_ms"]``.
        slt: the initial SLT (event-time ms) of every O+, or a dict by operator name
            (``math.inf``: ready tuples only, deterministic).
        checkpoint: a directory: checkpoints are written there, and a run given one that
            holds a checkpoint resumes from it (docs/checkpoints.md; SLT = inf only).
        checkpoint_every: how often: N input tuples, ``"Ns"`` or ``"Nms"`` (default 10 s).

    Returns a :class:`RunResult` whose ``extra`` follows :mod:`stretchflow.runtime.result`
    (``parallelism``, ``latency_ms`` and ``latency_series`` of the outputs at the sinks,
    ``controller``) and adds the engine's own keys: ``series`` (one point per interval:
    ``t``, ``latency_ms`` (Eq. 2), per-operator latency / SLT / slack-ready / late / lost /
    skew, ``events`` written to sinks in the interval, ``read``: tuples the operators read in
    it), ``e2e_latency_ms`` (max and mean of the Eq. 2 latencies of the intervals that read
    tuples), ``violations`` and ``intervals`` (of those), ``operators`` (totals per O+),
    ``slack_ready``, ``lost_tuples``, ``events``, ``decisions`` and
    ``deadline_ms``.
    """
    if not metrics_interval > 0:
        raise ValueError(f"metrics_interval must be > 0, got {metrics_interval!r}")
    if deadline is not None and not deadline > 0:
        raise ValueError(f"deadline must be > 0 (ms), got {deadline!r}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity < 1):
        raise ValueError(f"capacity must be a positive integer or None, got {capacity!r}")
    if controller is not None and not isinstance(controller, Controller):
        raise FlowDefinitionError(
            "the slack engine's controller is an SLT tuner object "
            f"(stretchflow.elastic.sltuner), got {controller!r}")
    if checkpoint is None and checkpoint_every is not None:
        raise ValueError("checkpoint_every needs checkpoint (the directory)")
    if checkpoint is not None:
        check(slt, controller)
    if controller is not None:
        controller.reset()
    R = _Run(flow, slt, parallelism, key_groups, capacity)
    rt = R.rt
    if checkpoint is not None:
        R.ck = SlackCheckpoints(R, RunCheckpoints(checkpoint, checkpoint_every, flow,
                                                  {"engine": "slack"},
                                                  [o.name for o in R.ops.values()]))
        rt.checkpoints = R.ck.run
    for k in range(len(flow.sinks)):
        rt.thread(R.sink_thread, k, name=f"sink-{k}")
    for o in R.ops.values():
        for r in o.readers:
            rt.thread(R.reader_thread, o, r, name=r.name)
    for n in flow.nodes:
        if n.kind == "source":
            rt.thread(R.source_thread, n, name=f"source-{n.name}")
    mon = _Monitor(R, controller, deadline)
    # every interval, and the last one cut short by the end of the run
    rt.sample(metrics_interval, mon.measure, final=True)
    rt.execute(begin=lambda t0: [rt.metrics.parallelism_changed(o.name, o.k, t0)
                                 for o in R.ops.values()])
    return rt.result(R.source_counts, _summary(R, mon.series, mon.decisions, deadline,
                                               controller))


class _Monitor:
    """The MThread and the SLT Setter (§4.2), as the run's metrics sampler: every interval
    it measures every operator (Eq. 1) and the end-to-end latency (Eq. 2), records a point of
    the series and each operator's row of the run's metrics (the runtime's schema: the live
    view and /metrics read it), and applies the tuner's new SLTs."""

    def __init__(self, R: _Run, controller: Controller | None,  # noqa: N803 - the engine's name
                 deadline: float | None):
        self.R = R
        self.controller = controller
        self.deadline = deadline
        self.paths = R.paths()
        self.series: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.k_total = sum(o.k for o in R.ops.values())
        self.prev_out = 0
        self.prev_t: float | None = None
        self.prev_read = {o.name: 0 for o in R.ops.values()}

    def measure(self) -> list[tuple[str, Metrics]]:
        R, controller = self.R, self.controller
        now = time.perf_counter()
        t0 = R.rt.t0
        prev_t = self.prev_t if self.prev_t is not None else t0
        period = max(now - prev_t, 1e-6)
        per_op = R.measure(now)
        out_now = R.events()
        # tuples the operators read in this interval: one that read none (the tail after
        # the input ended, a stalled source) measured no latency, whatever Eq. 2 gives
        read = sum(max(0, per_op[o.name]["read_total"] - self.prev_read[o.name])
                   for o in R.ops.values())
        point = {"t": now - t0, "latency_ms": end_to_end(per_op, self.paths),
                 "events": out_now - self.prev_out, "operators": per_op, "read": read,
                 "slack_ready": sum(v["slack_ready"] for v in per_op.values())}
        self.prev_out = out_now
        self.series.append(point)
        rows = []
        for o in R.ops.values():
            v = per_op[o.name]
            # tuples of the operator's input per second: each reader read each tuple once
            rate = max(0, v["read_total"] - self.prev_read[o.name]) / o.k / period
            self.prev_read[o.name] = v["read_total"]
            rows.append((o.name, Metrics(time=now - t0, period=period, parallelism=o.k,
                                         throughput=rate, input_rate=rate, max_parallelism=o.k,
                                         extras={"backlog": v["held"]})))
        if controller is not None and per_op:
            m = Metrics(time=now - t0, period=period, parallelism=self.k_total,
                        throughput=point["events"] / period, input_rate=0.0,
                        max_parallelism=self.k_total,
                        extras={"operators": per_op, "latency_ms": point["latency_ms"],
                                "deadline_ms": self.deadline, "paths": self.paths})
            d = controller.observe(m)
            new = getattr(d, "slt", None)
            if new:
                for o in R.ops.values():
                    if o.name in new:
                        o.ssg.set_slt(new[o.name])
                self.decisions.append({"t": now - t0, "slt": dict(new),
                                       "reason": getattr(d, "reason", None)})
        self.prev_t = now
        return rows


def _summary(R: _Run, series: list[dict[str, Any]], decisions: list[dict[str, Any]],
             deadline: float | None, controller: Controller | None) -> dict[str, Any]:
    ops = {}
    for o in R.ops.values():
        st = o.ssg.stats()
        insts = [r.inst for r in o.readers if r.inst is not None]
        ops[o.name] = {
            "threads": o.k, "slt_final": o.ssg.slt,
            "ready": sum(st["ready"].values()),
            "slack_ready": sum(st["slack_ready"].values()),
            "late_queue_reads": sum(st["late"].values()),
            "late_tuples": sum(i.late for i in insts),
            "lost_tuples": sum(i.lost for i in insts),
            "partially_lost_tuples": sum(i.partial for i in insts),
            "max_skew_ms": o.ssg.max_skew,
            "capacity": st["capacity"],
            "max_held": st["max_held"],
            "writer_waits": st["writer_waits"],
            "writer_wait_s": st["writer_wait_s"],
        }
    # the deadline is checked on the intervals that measured a latency (read tuples)
    lat = [p["latency_ms"] for p in series if p.get("read", 1)]
    return {
        # the runtime's schema (stretchflow.runtime.result)
        "parallelism": {o.name: o.k for o in R.ops.values()},
        "controller": controller_name(controller),
        # the slack engine's own
        "deadline_ms": deadline,
        "operators": ops,
        "slack_ready": sum(v["slack_ready"] for v in ops.values()),
        "lost_tuples": sum(v["lost_tuples"] for v in ops.values()),
        "events": R.events(),
        "e2e_latency_ms": {"max": max(lat, default=0.0),
                           "mean": sum(lat) / len(lat) if lat else 0.0},
        "violations": sum(1 for x in lat if deadline is not None and x >= deadline),
        "intervals": len(lat),
        "series": series,
        "decisions": decisions,
    }
