"""STRETCH's elastic runs over time (journal §8.5–8.6): input rate, instances and latency
while the threshold controller follows the load.

* ``hedge`` — Q6: the hedge self-join over bursty trades. The paper's trades arrive at
  0–8 000 t/s on 36 cores; here the generated trades (io.generators.trades: phases of uniform
  length with a rate drawn uniformly from [0, max_rate], Poisson inside a phase) are replayed
  in event time at ``max_rate`` = 900 t/s by default, with the paper's WS = 30 s, on at
  most 4 instances.
* ``scalejoin_phases`` — Q5: ScaleJoin (band join, WS = 1 min) over phases whose total rate
  is drawn uniformly from a range, with the §8.5 controller band (lower 70 %, upper 80 %).
  The paper runs 20 minutes of 100–300 s phases at [500, 8 000] t/s on 36 cores; here
  4 minutes of 20–60 s phases at the paper's [500, 8 000] t/s. A join's work grows with the
  square of the rate (each tuple is compared with the opposite window, which grows with the
  rate). Until 2026-11-26 the range was [500, 5 000] t/s, sized when one instance was about
  110 % busy at the top; since ScaleJoin's kernel runs on runs of tuples on every engine
  (issue #16) one instance was at most 68 % busy there (``vsn-q5.json`` at 3cba601: the
  controller never acted), so the bench now uses the paper's upper rate again.
  The paper's controller also adds work predicted by a join cost model to the measured load;
  ours adds the backlog instead (input rate / throughput, ``use_input_rate``).

Each is one run over time (a timeline, not repeats); its ``probe`` records the load average
before and after it and the CPU time of other processes during it (bench.common.repeat_probe).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import stretchflow as sf
from stretchflow.elastic.threshold import ThresholdController
from stretchflow.io.generators import trades
from stretchflow.io.sinks import Sink
from stretchflow.queries import build_query

from .common import repeat_probe
from .timeline import downsample


class _Count(Sink):
    """Counts outputs and drops them: the experiment measures the engine, not a sink."""

    name = "count"

    def write(self, items: list[tuple[int, Any]]) -> None:
        self.count += len(items)


def _timeline(res: Any, timestamps: list[int], wall: float) -> dict[str, Any]:
    """The run's series: input rate per second of event time (from the inputs themselves),
    p50 and p99 latency per second of the run, instances per operator at each change (the
    time it was applied: one change per reconfiguration) and the controller's periods; each
    series at most timeline.MAX_POINTS long."""
    first = min(timestamps)
    span_s = (max(timestamps) - first) / 1000
    per_s: dict[int, int] = {}
    for ts in timestamps:
        k = (ts - first) // 1000
        per_s[k] = per_s.get(k, 0) + 1
    buckets: dict[int, list[float]] = {}
    for t, ms in res.extra["latency_series"]:
        buckets.setdefault(int(t), []).append(ms)
    p50, p99 = [], []
    for k, v in sorted(buckets.items()):
        v.sort()
        p50.append([k, v[len(v) // 2]])
        p99.append([k, v[min(len(v) - 1, int(len(v) * 0.99))]])
    applied = [r for r in res.extra["reconfigurations"] if r["applied"]]
    return {
        "rows": len(timestamps), "event_time_span_s": span_s, "wall_s": wall,
        "latency_ms": res.extra["latency_ms"],
        "reconfigurations": len(applied),
        "reconfiguration_ms": sorted(r["duration_ms"] for r in applied),
        "parallelism_series": {op: [[t, p] for t, p in s]
                               for op, s in res.extra["parallelism_series"].items()},
        "input_rate_per_s": [per_s.get(k, 0) for k in range(int(span_s) + 1)],
        "latency_p50_per_s": downsample(p50),
        "latency_p99_per_s": downsample(p99),
        "metrics": downsample([{"time": m["time"], "parallelism": m["parallelism"],
                                "input_rate": m["input_rate"],
                                "mean_load": sum(m["loads"]) / max(1, len(m["loads"]))}
                               for m in res.extra["metrics"]]),
    }


def hedge(seconds: float = 90.0, max_rate: float = 900.0, window: int = 30_000,
          max_parallelism: int = 4, metrics_interval: float = 1.0,
          seed: int = 1) -> dict[str, Any]:
    """Runs Q6 for about ``seconds`` of replayed event time; returns the run's time series."""
    # at most max_rate trades per second: enough rows, cut at ``seconds`` of event time (the
    # row count is fixed so that a shorter run replays the start of the same trades)
    table = trades(int(max(seconds, 120.0) * max_rate), seed=seed, max_rate=max_rate,
                   min_phase_s=5.0, max_phase_s=20.0)
    recs = table.to_pylist()
    end = recs[0]["ts"] + seconds * 1000
    recs = [r for r in recs if r["ts"] < end]
    flow = sf.Flow("hedge")
    src = sf.io.iterable(recs, name="trades").replay(1.0)
    sink = _Count()
    build_query("hedge", [flow.source(src)], window=window, keys=max(16, max_parallelism)) \
        .sink(sink)
    with repeat_probe() as probe:
        t0 = time.perf_counter()
        res = flow.run(engine="vsn", parallelism=1, max_parallelism=max_parallelism,
                       controller="threshold", metrics_interval=metrics_interval)
        wall = time.perf_counter() - t0
    out = _timeline(res, [r["ts"] for r in recs], wall)
    return {**out, "window_ms": window, "max_rate": max_rate,
            "max_parallelism": max_parallelism, "outputs": sink.count, "probe": probe}


def phased_bandjoin(seconds: float, min_rate: float, max_rate: float, min_phase_s: float,
                    max_phase_s: float, seed: int = 1) -> tuple[list[dict], list[dict]]:
    """ScaleJoin's two streams over consecutive phases of uniform length in [min_phase_s,
    max_phase_s] whose total rate is uniform in [min_rate, max_rate] (half per stream),
    Poisson inside a phase; attributes uniform on [1, 10 000] as in Q3."""
    if not 0 < min_rate <= max_rate or not 0 < min_phase_s <= max_phase_s or seconds <= 0:
        raise ValueError("need 0 < min_rate <= max_rate, 0 < min_phase_s <= max_phase_s "
                         "and seconds > 0")
    rng = np.random.default_rng(seed)
    streams: list[list[dict]] = [[], []]
    begin = 0.0
    while begin < seconds:
        length = min(rng.uniform(min_phase_s, max_phase_s), seconds - begin)
        rate = rng.uniform(min_rate, max_rate) / 2
        for i, (u, v) in enumerate((("x", "y"), ("a", "b"))):
            n = rng.poisson(rate * length)
            ts = np.sort(np.floor((begin + rng.random(n) * length) * 1000)).astype(np.int64)
            us, vs = rng.integers(1, 10_001, (2, n)).tolist()
            base = len(streams[i])
            streams[i].extend({"ts": t, "id": base + k, u: a, v: b}
                              for k, (t, a, b) in enumerate(zip(ts.tolist(), us, vs,
                                                                strict=True)))
        begin += length
    return streams[0], streams[1]


def scalejoin_phases(seconds: float = 240.0, min_rate: float = 500.0,
                     max_rate: float = 8000.0, window: int = 60_000,
                     min_phase_s: float = 20.0, max_phase_s: float = 60.0,
                     max_parallelism: int = 4, metrics_interval: float = 1.0,
                     seed: int = 1) -> dict[str, Any]:
    """Runs Q5 for ``seconds`` of replayed event time; returns the run's time series."""
    left, right = phased_bandjoin(seconds, min_rate, max_rate, min_phase_s, max_phase_s, seed)
    flow = sf.Flow("q5")
    streams = [flow.source(sf.io.iterable(left, name="left").replay(1.0)),
               flow.source(sf.io.iterable(right, name="right").replay(1.0))]
    sink = _Count()
    # one storage key per instance: every key costs a kernel call per run (Op. 10's 1 000
    # keys are for 36 cores)
    build_query("scalejoin", streams, window=window, band=10, keys=max_parallelism).sink(sink)
    controller = ThresholdController(upper=0.8, target=0.75, lower=0.7)  # §8.5's band
    with repeat_probe() as probe:
        t0 = time.perf_counter()
        res = flow.run(engine="vsn", parallelism=1, max_parallelism=max_parallelism,
                       controller=controller, metrics_interval=metrics_interval)
        wall = time.perf_counter() - t0
    out = _timeline(res, [r["ts"] for r in left] + [r["ts"] for r in right], wall)
    return {**out, "window_ms": window, "min_rate": min_rate, "max_rate": max_rate,
            "max_parallelism": max_parallelism, "outputs": sink.count,
            "thresholds": {"lower": 0.7, "target": 0.75, "upper": 0.8}, "probe": probe}


__all__ = ["hedge", "phased_bandjoin", "scalejoin_phases"]
