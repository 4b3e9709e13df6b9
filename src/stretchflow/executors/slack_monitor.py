"""The slack executor's measurements and its SLT Setter (determinism-latency §4.2, Eq. 1-2,
4-5): the MThread, run as the run's metrics sampler (:mod:`stretchflow.runtime.metrics`).

* per operator (Eq. 1): for each processing thread, the 95th percentile over the interval of
  queue delay (from the insertion of a tuple in the SSG to its read; transfer from the
  upstream operator included, so ``comm`` of Eq. 2 is part of it) plus processing time, and
  at least the age of the oldest tuple the thread has not read yet (a thread stalled on an
  unready tuple reads nothing, and its latency must still show); the operator's latency is
  the slowest thread's;
* end to end (Eq. 2): the maximum over source-to-sink paths of the sum of the latencies of
  the O+ on the path;
* slack-ready tuples read (Eq. 4-5), per operator and in total.

Every interval is a point of the run's series and a row per operator of its metrics, and the
tuner (the SLTuner or a baseline, :mod:`stretchflow.elastic.sltuner`) may set new SLTs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..elastic.controller import Controller, Metrics
from ..flow import Node

if TYPE_CHECKING:
    from .slack import _Run

__all__ = ["Monitor", "end_to_end", "measure_operators", "operator_paths"]


def _p95(values: list[float]) -> float:
    """Eq. 1's per-thread statistic: the 95th percentile (nearest rank) of one interval's
    samples, 0 for none. Not :func:`stretchflow.runtime.percentiles`: that reports p50/p99/max
    of a whole run; the paper's operator latency is the p95 of the interval."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(0.95 * len(v)))]


def end_to_end(per_op: Mapping[str, Mapping[str, Any]], paths: list[list[str]]) -> float:
    """Eq. 2: the maximum over paths of the sum of the operators' latencies (ms)."""
    return max((sum(per_op[n]["latency_ms"] for n in p) for p in paths), default=0.0)


class Monitor:
    """The MThread and the SLT Setter (§4.2), as the run's metrics sampler: every interval
    it measures every operator (Eq. 1) and the end-to-end latency (Eq. 2), records a point of
    the series and each operator's row of the run's metrics (the runtime's schema: the live
    view and /metrics read it), and applies the tuner's new SLTs."""

    def __init__(self, R: _Run, controller: Controller | None,  # noqa: N803 - the engine's name
                 deadline: float | None):
        self.R = R
        self.controller = controller
        self.deadline = deadline
        self.paths = operator_paths(R)
        self.series: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.k_total = sum(o.k for o in R.ops.values())
        self.prev_out = 0
        self.prev_t: float | None = None
        self.prev_read = {o.name: 0 for o in R.ops.values()}

    def measure(self) -> list[tuple[str, Metrics]]:
        """One interval (the sampler's period): the series' point, the operators' rows
        (returned, for the run's metrics log), the tuner's new SLTs."""
        R, controller = self.R, self.controller
        now = time.perf_counter()
        t0 = R.rt.t0
        prev_t = self.prev_t if self.prev_t is not None else t0
        period = max(now - prev_t, 1e-6)
        per_op = measure_operators(R, now)
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


def measure_operators(R: _Run, now: float) -> dict[str, dict[str, Any]]:  # noqa: N803 - the engine's name
    """Each operator's interval since the last call: Eq. 1's latency (ms), slack-ready (Eq.
    4-5), late and lost tuples, SLT, skew, tuples held and read."""
    out = {}
    for o in R.ops.values():
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


def operator_paths(R: _Run) -> list[list[str]]:  # noqa: N803 - the engine's name
    """The O+ names on every source-to-sink path (Eq. 2's max over paths)."""
    found: list[list[str]] = []
    children = R.plan.children

    def walk(node: Node, acc: list[str]) -> None:
        if node.kind == "oplus":
            acc = [*acc, node.name]
        for kind, child, _ in children[node]:
            if kind == "sink":
                found.append(acc)
            else:
                walk(child, acc)

    for node in R.flow.nodes:
        if node.kind == "source":
            walk(node, [])
    return found
