"""The slack executor: O+ operators read their inputs through Slack ScaleGates under a query
deadline (determinism-latency §3–§5).

Threads (the SSGOperator of §4.2, Fig. 7):

* one *writer* thread per source; stateless operators downstream of a source run on it;
* per O+, ``readers`` processing threads (PThreads) that share the operator's state σ as in
  VSN (:class:`~stretchflow.operators.oplus.SharedState`, key groups owned via f_μ): each
  reads every tuple of the operator's SSG and handles the keys of its groups; its outputs go,
  through stateless operators, to the SSGs of the downstream operators (it is one of their
  writers) or to a sink;
* one thread per sink, reading an SSG with SLT = ∞ (ready tuples only) fed by the producers
  of the sink's stream;
* a monitor thread (the MThread) that every ``interval`` seconds measures each operator and
  the end-to-end latency, records the time series and lets a tuner (the SLTuner or a
  baseline, :mod:`stretchflow.elastic.sltuner`) set new SLTs (the SLT Setter).

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

Flow control
    Every SSG (the O+ inputs and the sinks') has a capacity (``capacity``, default 65 536
    tuples held, None for unbounded): a source or upstream O+ thread writing into a full SSG
    blocks until its readers free room, so a fast source in front of a slow operator does not
    grow memory (the bound and its deadlock-freedom argument are in
    :mod:`stretchflow.buffers.ssg`). A failing thread aborts every SSG so no thread stays
    blocked on a full or empty buffer.

With SLT ≥ max_ts − merge_ts throughout (in particular SLT = ∞, the default) no tuple is
slack-ready and the output equals the reference executor's, per timestamp.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Mapping
from typing import Any

from ..buffers.ssg import DEFAULT_CAPACITY, END, SlackScaleGate
from ..elastic.controller import Controller, Metrics
from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import apply_batch
from ..runtime.result import RunResult

__all__ = ["SlackInstance", "run"]

BATCH = 64  # tuples a thread takes from its SSG at once
SOURCE_BATCH = 256  # tuples a non-live source inserts at once
WAIT = 0.05  # seconds a blocked reader waits before re-checking for an abort


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
    def __init__(self, node: Node, k: int, n_groups: int):
        self.node = node
        self.name = node.name
        self.op: OPlus = node.spec
        self.k = k
        self.sigma = SharedState(n_groups)
        self.assign = [g % k for g in range(n_groups)]
        self.readers = [_Reader(f"{node.name}#{j}", j) for j in range(k)]
        self.ssg: SlackScaleGate | None = None
        self.prev_slack = 0
        self.prev_late = 0
        self.prev_lost = 0


class _Run:
    """The physical plan and its threads."""

    def __init__(self, flow: Flow, slt: Any, readers: Any, n_groups: int,
                 capacity: int | None = DEFAULT_CAPACITY):
        flow.validate()
        self.flow = flow
        self.ops: dict[Node, _Operator] = {}
        for node in flow.nodes:
            if node.kind == "oplus":
                k = readers.get(node.name, 1) if isinstance(readers, Mapping) else readers
                if not isinstance(k, int) or k < 1:
                    raise FlowDefinitionError(f"{node.name}: readers must be an int >= 1, "
                                              f"got {k!r}")
                self.ops[node] = _Operator(node, k, max(n_groups, k))
        self.children: dict[Node, list[tuple[str, Any, int]]] = {n: [] for n in flow.nodes}
        for node in flow.nodes:
            for i, up in enumerate(node.inputs):
                self.children[up].append(("node", node, i))
        for k, (node, _sink) in enumerate(flow.sinks):
            self.children[node].append(("sink", k, 0))
        for node, o in self.ops.items():
            s = slt.get(node.name, math.inf) if isinstance(slt, Mapping) else slt
            o.ssg = SlackScaleGate(self._producers_of(node), [r.name for r in o.readers], s,
                                   capacity=capacity)
        self.sink_ssgs = [SlackScaleGate(self._producers_into(node), [("sink", k)],
                                         capacity=capacity)
                          for k, (node, _) in enumerate(flow.sinks)]
        self.failure: BaseException | None = None
        self.sink_counts = [0] * len(flow.sinks)
        self.source_counts: dict[str, int] = {}

    def _producers_into(self, node: Node) -> list[Hashable]:
        if node.kind == "stateless":
            return self._producers_into(node.inputs[0])
        if node.kind == "source":
            return [node.name]
        return [r.name for r in self.ops[node].readers]

    def _producers_of(self, node: Node) -> list[Hashable]:
        out: list[Hashable] = []
        for up in node.inputs:
            for p in self._producers_into(up):
                if p not in out:
                    out.append(p)
        return out

    # -- pushing a producer's output downstream -----------------------------------------------
    def push(self, node: Node, pid: Hashable, batch: list[tuple[int, Any]]) -> None:
        """Sends ``(ts, payload)`` items produced by ``pid`` for ``node``'s stream on."""
        if not batch:
            return
        now = time.perf_counter()
        for kind, child, i in self.children[node]:
            if kind == "sink":
                self.sink_ssgs[child].insert_batch([(ts, p, 0, now) for ts, p in batch], pid)
            elif child.kind == "stateless":
                self.push(child, pid, apply_batch(child.spec, batch))
            else:
                self.ops[child].ssg.insert_batch([(ts, p, i, now) for ts, p in batch], pid)

    def close(self, node: Node, pid: Hashable) -> None:
        for kind, child, _ in self.children[node]:
            if kind == "sink":
                self.sink_ssgs[child].close_writer(pid)
            elif child.kind == "stateless":
                self.close(child, pid)
            else:
                self.ops[child].ssg.close_writer(pid)

    # -- threads --------------------------------------------------------------------------------
    def source_thread(self, node: Node) -> None:
        src = node.spec
        live = bool(getattr(src, "live", False) or src.speed or src.rate)
        n = 0
        buf: list[tuple[int, Any]] = []
        try:
            for item in src.items():
                if self.failure is not None:
                    return
                buf.append(item)
                if item[1] is not WATERMARK:
                    n += 1
                if live or len(buf) >= SOURCE_BATCH:
                    self.push(node, node.name, buf)
                    buf = []
            self.push(node, node.name, buf)
            self.close(node, node.name)
        except BaseException as e:
            self.fail(e)
        finally:
            self.source_counts[node.name] = n

    def reader_thread(self, o: _Operator, r: _Reader) -> None:
        inst = SlackInstance(o.op, o.sigma, r.j, o.assign)
        r.inst = inst
        ssg, name, node = o.ssg, r.name, o.node
        clock = time.perf_counter
        process, advance = inst.process, inst.advance
        ts = p = None
        last_wm = -math.inf
        try:
            while self.failure is None:
                got = ssg.get_batch(name, BATCH, timeout=WAIT)
                if got is END:
                    break
                if not got:
                    continue
                lat = []
                for (ts, p, i, t_in), _slack in got:
                    if p is WATERMARK:
                        advance(ts)
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
                    self.push(node, name, out)
            ts = p = None
            if self.failure is None:
                inst.finish()
                self.push(node, name, inst.take())
                self.close(node, name)
        except StretchflowError as e:
            self.fail(e)
        except BaseException as e:
            self.fail(OperatorError(o.name, ts, p if ts is not None else "<end of input>", e))

    def sink_thread(self, k: int) -> None:
        sink = self.flow.sinks[k][1]
        ssg = self.sink_ssgs[k]
        try:
            while self.failure is None:
                got = ssg.get_batch(("sink", k), 4096, timeout=WAIT)
                if got is END:
                    break
                if got:
                    items = [(t[0], t[1]) for t, _ in got if t[1] is not WATERMARK]
                    if items:
                        sink.write(items)
                        self.sink_counts[k] += len(items)
        except BaseException as e:
            self.fail(e)

    def fail(self, e: BaseException) -> None:
        if self.failure is None:
            self.failure = e
            # a writer blocked on a full SSG (or a reader on an empty one) must not outlive
            # the failure: aborting makes every blocked call raise Aborted
            for o in self.ops.values():
                o.ssg.abort(e)
            for ssg in self.sink_ssgs:
                ssg.abort(e)

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
            }
            o.prev_slack, o.prev_late, o.prev_lost = slack, late, lost
        return out

    def paths(self) -> list[list[str]]:
        """The O+ names on every source-to-sink path (Eq. 2's max over paths)."""
        found: list[list[str]] = []

        def walk(node: Node, acc: list[str]) -> None:
            if node.kind == "oplus":
                acc = [*acc, node.name]
            for kind, child, _ in self.children[node]:
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


def run(flow: Flow, deadline_ms: float | None = None, slt: float | Mapping[str, float] = math.inf,
        tuner: Controller | None = None, readers: int | Mapping[str, int] = 1,
        interval: float = 0.5, n_groups: int = 64,
        capacity: int | None = DEFAULT_CAPACITY, **options: Any) -> RunResult:
    """Runs ``flow`` with every O+ reading its inputs through an SSG.

    Args:
        deadline_ms: the query deadline (Eq. 3) in wall-clock ms; intervals whose end-to-end
            latency reaches it count as violations. Passed to the tuner in ``Metrics.extras``.
        slt: the initial SLT (event-time ms) of every O+, or a dict by operator name
            (``math.inf``: ready tuples only, deterministic).
        tuner: a :class:`~stretchflow.elastic.controller.Controller` that answers
            :class:`~stretchflow.elastic.sltuner.SLTDecision` with new SLTs.
        readers: processing threads per O+ (an int, or a dict by operator name).
        interval: seconds between measurements (time series points, tuner calls).
        n_groups: key groups of each O+'s shared state.
        capacity: the flow-control bound of every SSG (tuples held, see
            :mod:`stretchflow.buffers.ssg`): a writer (source or upstream O+ thread) blocks
            while the SSG it writes to is full; None disables it (memory then grows with
            the skew).

    Returns a :class:`RunResult` whose ``extra`` holds ``series`` (one point per interval:
    ``t``, ``latency_ms`` (Eq. 2), per-operator latency / SLT / slack-ready / late / lost /
    skew, ``events`` written to sinks in the interval), totals and ``violations``.
    """
    if options:
        raise TypeError(f"the slack engine got unknown options {sorted(options)}")
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval!r}")
    if deadline_ms is not None and not deadline_ms > 0:
        raise ValueError(f"deadline_ms must be > 0, got {deadline_ms!r}")
    if tuner is not None:
        tuner.reset()
    if capacity is not None and (not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive integer or None, got {capacity!r}")
    R = _Run(flow, slt, readers, n_groups, capacity)
    paths = R.paths()
    threads = [threading.Thread(target=R.sink_thread, args=(k,), daemon=True,
                                name=f"sink-{k}") for k in range(len(flow.sinks))]
    for o in R.ops.values():
        threads += [threading.Thread(target=R.reader_thread, args=(o, r), daemon=True,
                                     name=r.name) for r in o.readers]
    threads += [threading.Thread(target=R.source_thread, args=(n,), daemon=True,
                                 name=f"source-{n.name}")
                for n in flow.nodes if n.kind == "source"]
    sinks = [s for _, s in flow.sinks]
    for s in sinks:
        s.open()
    series: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    prev_out = 0
    prev_in_t = t0
    try:
        while any(t.is_alive() for t in threads):
            _wait_any(threads, interval)
            if R.failure is not None:
                break
            now = time.perf_counter()
            per_op = R.measure(now)
            out_now = sum(R.sink_counts)
            point = {"t": now - t0, "latency_ms": end_to_end(per_op, paths),
                     "events": out_now - prev_out, "operators": per_op,
                     "slack_ready": sum(v["slack_ready"] for v in per_op.values())}
            prev_out = out_now
            series.append(point)
            if tuner is not None and per_op:
                period = max(now - prev_in_t, 1e-6)
                m = Metrics(time=now - t0, period=period,
                            parallelism=sum(o.k for o in R.ops.values()),
                            throughput=point["events"] / period, input_rate=0.0,
                            max_parallelism=sum(o.k for o in R.ops.values()),
                            extras={"operators": per_op, "latency_ms": point["latency_ms"],
                                    "deadline_ms": deadline_ms, "paths": paths})
                d = tuner.observe(m)
                new = getattr(d, "slt", None)
                if new:
                    for o in R.ops.values():
                        if o.name in new:
                            o.ssg.set_slt(new[o.name])
                    decisions.append({"t": now - t0, "slt": dict(new),
                                      "reason": getattr(d, "reason", None)})
            prev_in_t = now
    finally:
        if R.failure is not None:
            for t in threads:
                t.join(5)
        for s in sinks:
            s.close()
    if R.failure is not None:
        raise R.failure
    elapsed = time.perf_counter() - t0
    return RunResult(
        engine="slack", elapsed=elapsed, tuples_in=dict(R.source_counts),
        tuples_out={s.name: s.count for s in sinks},
        extra=_summary(R, series, decisions, deadline_ms),
    )


def _wait_any(threads: list[threading.Thread], timeout: float) -> None:
    """Sleeps ``timeout`` seconds, or less once every thread has ended."""
    end = time.perf_counter() + timeout
    for t in threads:
        left = end - time.perf_counter()
        if left <= 0:
            return
        t.join(left)


def _summary(R: _Run, series: list[dict[str, Any]], decisions: list[dict[str, Any]],
             deadline_ms: float | None) -> dict[str, Any]:
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
    lat = [p["latency_ms"] for p in series]
    return {
        "deadline_ms": deadline_ms,
        "operators": ops,
        "slack_ready": sum(v["slack_ready"] for v in ops.values()),
        "lost_tuples": sum(v["lost_tuples"] for v in ops.values()),
        "events": sum(R.sink_counts),
        "latency_ms": {"max": max(lat, default=0.0),
                       "mean": sum(lat) / len(lat) if lat else 0.0},
        "violations": sum(1 for x in lat if deadline_ms is not None and x >= deadline_ms),
        "intervals": len(series),
        "series": series,
        "decisions": decisions,
    }
