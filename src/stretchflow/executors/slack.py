"""The slack executor: O+ operators read their inputs through Slack ScaleGates under a query
deadline (determinism-latency §3–§5).

Threads (the SSGOperator of §4.2, Fig. 7), on the runtime's skeleton
(:mod:`stretchflow.runtime.skeleton`: the threads, the first-error-wins stop, the sinks'
drains and session, the output latency):

* one *writer* thread per source; stateless operators downstream of a source run on it
  (:func:`~stretchflow.executors.slack_inlet.write_source`);
* per O+, ``parallelism`` processing threads (PThreads) that share the operator's state σ as in
  VSN (:class:`~stretchflow.operators.oplus.SharedState`, key groups owned via f_μ): each
  reads every tuple of the operator's SSG and handles the keys of its groups; its outputs go,
  through stateless operators, to the SSGs of the downstream operators (it is one of their
  writers) or to a sink;
* one thread per sink, reading an SSG with SLT = ∞ (ready tuples only) fed by the producers
  of the sink's stream;
* the MThread, the run's metrics sampler (:mod:`.slack_monitor`): every ``metrics_interval``
  seconds it measures each operator (Eq. 1) and the end-to-end latency (Eq. 2), records the
  time series and lets a tuner (the SLTuner or a baseline, :mod:`stretchflow.elastic.sltuner`)
  set new SLTs (the SLT Setter).

The SSGs and their writers are :mod:`.slack_inlet`; this module holds the processing threads'
instance and loop, the run and its result.

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

Flow control
    Every SSG (the O+ inputs and the sinks') has a capacity (``capacity``, default 65 536 tuples
    held): a source or upstream O+ thread writing into a full SSG blocks until its readers
    free room, so a fast source in front of a slow operator does not grow memory (the bound
    and its deadlock-freedom argument are in :mod:`stretchflow.buffers.ssg`). A failing thread
    aborts every SSG so no thread stays blocked on a full or empty buffer (the SSGs' aborts
    are the run's abort hooks).

With SLT ≥ max_ts − merge_ts throughout (in particular SLT = ∞, the default) no tuple is
slack-ready and the output equals the reference executor's, per timestamp.

Checkpoints (issue #17, ``checkpoint=DIR``, SLT = inf only): the threaded engines' barriers
through the SSGs (:mod:`.slack_checkpoint`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Mapping
from typing import Any

from ..buffers.esg import Aborted
from ..buffers.ssg import END, SlackScaleGate
from ..elastic.controller import Controller
from ..engines import Settings, given
from ..engines import run as run_engine
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..runtime import (
    RunResult,
    Stopped,
    user_error,
)
from ..runtime.control import CheckpointBarrier
from ..runtime.drain import SINK_BATCH, SinkDrain, drain_buffer
from ..runtime.gil_core import gil_bound_source
from ..runtime.skeleton import Run, controller_name
from ..runtime.threaded_checkpoint import RunCheckpoints
from .plan import PhysicalPlan
from .slack_checkpoint import SlackCheckpoints
from .slack_inlet import ssg_inlets, write_source
from .slack_monitor import Monitor, end_to_end

__all__ = ["SlackInstance", "end_to_end", "run"]

BATCH = 64  # tuples a thread takes from its SSG at once


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
                 capacity: int | None, gil_core: bool = False):
        self.flow = flow
        self.ops: dict[Node, _Operator] = {}
        for node in flow.nodes:
            if node.kind == "oplus":
                # (checked with the engine's options: a positive integer per operator)
                k = (parallelism.get(node.name, 1) if isinstance(parallelism, Mapping)
                     else parallelism)
                self.ops[node] = _Operator(node, k, max(key_groups, k))

        self.plan = PhysicalPlan(flow, self._producer_ids, self._reader_ids, capacity,
                                 ssg_inlets(slt))
        for node, o in self.ops.items():
            o.ssg = self.plan.inlets[node].ssg
        # the runtime's skeleton: threads, sinks, metrics, latency, checkpoints, the result
        self.rt = Run("slack", flow, gil_core=gil_core)
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
        write_source(node, self.plan.pusher(node, node.name), self.control, self.clock,
                     self.source_counts, self.ck.run if self.ck is not None else None)

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


def run(flow: Flow, parallelism: int | Mapping[str, int] | None = None,
        key_groups: int | None = None, capacity: int | None = None,
        metrics_interval: float | None = None, controller: Controller | None = None,
        deadline: float | None = None, slt: float | Mapping[str, float] | None = None,
        checkpoint: str | None = None, checkpoint_every: Any = None,
        gil_core: bool | None = None) -> RunResult:
    """Runs ``flow`` with every O+ reading its inputs through an SSG.

    Args:
        parallelism: processing threads per O+ (an int, or a dict by operator name; an
            operator not in it gets 1).
        key_groups: key groups of each O+'s shared state (at least ``parallelism``).
        capacity: the flow-control bound of every SSG (tuples held, see
            :mod:`stretchflow.buffers.ssg`, default 65 536): a writer (source or upstream O+
            thread) blocks while the SSG it writes to is full.
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
        gil_core: run the threads that call Python functions tuple by tuple on one CPU
            while they are measured taking turns at the GIL (default True;
            :mod:`~stretchflow.runtime.gil_core`).

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
    return run_engine(flow, "slack", given(locals()))


def execute(flow: Flow, s: Settings) -> RunResult:
    """Runs ``flow`` with checked settings ``s`` (:func:`stretchflow.engines.run`'s call)."""
    controller, deadline, metrics_interval = s.controller, s.deadline, s.metrics_interval
    checkpoint, checkpoint_every = s.checkpoint, s.checkpoint_every
    if controller is not None:
        controller.reset()
    R = _Run(flow, s.slt, s.parallelism, s.key_groups, s.capacity, s.gil_core)
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
            rt.thread(R.reader_thread, o, r, name=r.name, python=True)  # tuple by tuple
    for n in flow.nodes:
        if n.kind == "source":
            rt.thread(R.source_thread, n, name=f"source-{n.name}",
                      python=gil_bound_source(n.spec))
    mon = Monitor(R, controller, deadline)
    # every interval, and the last one cut short by the end of the run
    rt.sample(metrics_interval, mon.measure, final=True)
    rt.execute(begin=lambda t0: [rt.metrics.parallelism_changed(o.name, o.k, t0)
                                 for o in R.ops.values()])
    return rt.result(R.source_counts, _summary(R, mon.series, mon.decisions, deadline,
                                               controller))


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
