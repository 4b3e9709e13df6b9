"""The Prometheus exporter of one run: a collector over its :class:`RunState`, in a
registry of its own (never prometheus_client's global one: two runs in one process, or a
test after a test, must not see each other's series).

Names follow Prometheus' conventions (``_total`` counters, base units, ``_ratio``); labels are
``flow``, ``operator`` and, per instance, ``instance``. docs/live-view.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .state import RunState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RECONFIG_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
# barrier injected -> manifest committed: a barrier crosses the whole flow, so longer than a
# reconfiguration's switch, up to the seconds a slow operator holds it back
CHECKPOINT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                      30.0)
_HDR = 1.01  # LatencyRecorder's bucket b holds values in [1.01^b, 1.01^(b+1)) µs


def _histogram(name: str, doc: str, labels: list[str], label_values: list[str],
               bounds: tuple[float, ...], cumulative: list[int], total: int,
               total_sum: float) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=labels)
    buckets = [(repr(b), c) for b, c in zip(bounds, cumulative, strict=True)]
    buckets.append(("+Inf", total))
    h.add_metric(label_values, buckets, total_sum)
    return h


def _latency_cumulative(state: RunState) -> tuple[list[int], int, float]:
    """Cumulative counts of the announced recorder's samples below each bound (read from its
    HDR buckets, so every sample of the run counts, not only the thinned series)."""
    if state.recorders:
        rec = state.recorders[-1]
        with rec._lock:  # the recorder keeps no public histogram; its buckets are exact
            buckets = dict(rec._buckets)
    else:
        buckets = {}
    cumulative, total, total_sum = [], 0, 0.0
    upper = {b: _HDR ** (b + 1) / 1e6 for b in buckets}  # seconds
    for bound in LATENCY_BUCKETS:
        cumulative.append(sum(c for b, c in buckets.items() if upper[b] <= bound))
    for b, c in buckets.items():
        total += c
        total_sum += c * _HDR ** (b + 0.5) / 1e6
    return cumulative, total, total_sum


class RunCollector:
    """Reads the state at each scrape (nothing is copied between scrapes)."""

    def __init__(self, state: RunState):
        self.state = state

    def collect(self) -> Iterator[Metric]:
        s = self.state
        flow = s.flow_name
        with s._lock:
            kinds = {n["name"]: n["kind"] for n in s.nodes}
            t_in = CounterMetricFamily(
                "stretchflow_tuples_in", "Tuples into a sink or an elastic operator (an "
                "operator's from its per-period input rate)", labels=["flow", "operator",
                                                                       "instance"])
            t_out = CounterMetricFamily(
                "stretchflow_tuples_out", "Tuples out of a source, or processed by an elastic "
                "operator", labels=["flow", "operator", "instance"])
            par = GaugeMetricFamily("stretchflow_operator_parallelism",
                                    "Instances of an elastic operator", labels=["flow",
                                                                                "operator"])
            busy = GaugeMetricFamily("stretchflow_operator_busy_ratio",
                                     "Busy fraction of an instance over the last period",
                                     labels=["flow", "operator", "instance"])
            cong = GaugeMetricFamily("stretchflow_operator_congestion_ratio",
                                     "Fraction of the last period writers spent blocked on "
                                     "the operator's full input (congestion index)",
                                     labels=["flow", "operator"])
            backlog = GaugeMetricFamily("stretchflow_operator_backlog_tuples",
                                        "Tuples waiting in an operator's input, where the "
                                        "engine reports it", labels=["flow", "operator"])
            for name, kind in kinds.items():
                tot = s.totals[name]
                cur = s.current.get(name, {})
                if kind == "source":
                    t_out.add_metric([flow, name, "all"], tot["out"])
                elif kind == "sink":
                    t_in.add_metric([flow, name, "all"], tot["in"])
                elif "parallelism" in cur:  # an elastic operator the log measures
                    t_in.add_metric([flow, name, "all"], round(tot["in"]))
                    t_out.add_metric([flow, name, "all"], round(tot["out"]))
                    par.add_metric([flow, name], cur["parallelism"])
                    for j, load in enumerate(cur.get("loads") or []):
                        busy.add_metric([flow, name, str(j)], load)
                    if cur.get("congestion") is not None:
                        cong.add_metric([flow, name], cur["congestion"])
                    if cur.get("backlog") is not None:
                        backlog.add_metric([flow, name], cur["backlog"])
            yield from (t_in, t_out, par, busy, cong, backlog)

            cumulative, total, total_sum = _latency_cumulative(s)
            yield _histogram("stretchflow_latency_seconds", "Output latency (from the input "
                             "that closed an output to its write)", ["flow"], [flow],
                             LATENCY_BUCKETS, cumulative, total, total_sum)

            rc = CounterMetricFamily("stretchflow_reconfigurations", "Parallelism changes "
                                     "applied (vsn reconfigurations, sn migrations)",
                                     labels=["flow", "operator"])
            for op in sorted(set(s.reconfigurations) | {o for o, _ in
                                                          s.reconfiguration_durations}):
                rc.add_metric([flow, op], s.reconfigurations.get(op, 0))
            yield rc
            durations: dict[str, list[float]] = {}
            for op, d in s.reconfiguration_durations:
                durations.setdefault(op, []).append(d)
            rh = HistogramMetricFamily("stretchflow_reconfiguration_duration_seconds",
                                       "Duration of applied reconfigurations (known once the "
                                       "run ends)", labels=["flow", "operator"])
            for op, ds in durations.items():
                rh.add_metric([flow, op], [(repr(b), sum(1 for d in ds if d <= b))
                                           for b in RECONFIG_BUCKETS] + [("+Inf", len(ds))],
                              sum(ds))
            yield rh
            if s.checkpoints is not None:
                ck = CounterMetricFamily("stretchflow_checkpoints", "Checkpoints written by "
                                         "the run", labels=["flow"])
                ck.add_metric([flow], s.checkpoints)
                yield ck
                ds = [c["duration_ms"] / 1000.0 for c in s.checkpoint_log]
                yield _histogram("stretchflow_checkpoint_duration_seconds", "Duration of a "
                                 "checkpoint, from its barrier entering the flow to its "
                                 "manifest committed", ["flow"], [flow], CHECKPOINT_BUCKETS,
                                 [sum(1 for d in ds if d <= b) for b in CHECKPOINT_BUCKETS],
                                 len(ds), sum(ds))
                cb = CounterMetricFamily("stretchflow_checkpoint_written_bytes", "Bytes of "
                                         "checkpoint state and manifests written",
                                         labels=["flow"])
                cb.add_metric([flow], sum(c["bytes"] for c in s.checkpoint_log))
                yield cb


def registry_for(state: RunState) -> CollectorRegistry:
    """A registry holding only this run's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RunCollector(state))  # type: ignore[arg-type]
    return reg


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry), CONTENT_TYPE_LATEST


def describe() -> list[tuple[str, str, Any]]:
    """(name, type, labels) of every family, for docs and tests."""
    return [("stretchflow_tuples_in_total", "counter", "flow, operator, instance"),
            ("stretchflow_tuples_out_total", "counter", "flow, operator, instance"),
            ("stretchflow_operator_parallelism", "gauge", "flow, operator"),
            ("stretchflow_operator_busy_ratio", "gauge", "flow, operator, instance"),
            ("stretchflow_operator_congestion_ratio", "gauge", "flow, operator"),
            ("stretchflow_operator_backlog_tuples", "gauge", "flow, operator"),
            ("stretchflow_latency_seconds", "histogram", "flow"),
            ("stretchflow_reconfigurations_total", "counter", "flow, operator"),
            ("stretchflow_reconfiguration_duration_seconds", "histogram", "flow, operator"),
            ("stretchflow_checkpoints_total", "counter", "flow"),
            ("stretchflow_checkpoint_duration_seconds", "histogram", "flow"),
            ("stretchflow_checkpoint_written_bytes_total", "counter", "flow")]
