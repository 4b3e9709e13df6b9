"""STRETCH Q6 (journal §8.6): the hedge self-join over bursty trades with the threshold
controller, showing input rate, instances and latency over time.

Scaled to 2 cores and Python: the paper's trades arrive at 0–8 000 t/s on 36 cores; here the
generated trades (io.generators.trades: phases of uniform length with a rate drawn uniformly
from [0, max_rate], Poisson inside a phase) are replayed in event time at
``max_rate`` = 1 200 t/s by default, with the paper's WS = 30 s, on at most 4 instances.
"""

from __future__ import annotations

import time
from typing import Any

import stretchflow as sf

from ..io.generators import trades
from ..io.sinks import Sink
from ..queries import build_query


class _Count(Sink):
    """Counts outputs and drops them: the experiment measures the engine, not a sink."""

    name = "count"

    def write(self, items: list[tuple[int, Any]]) -> None:
        self.count += len(items)


def hedge(seconds: float = 120.0, max_rate: float = 1200.0, window: int = 30_000,
          max_parallelism: int = 4, period: float = 1.0, seed: int = 1) -> dict[str, Any]:
    """Runs Q6 for about ``seconds`` of replayed event time; returns the run's time series."""
    rows = int(seconds * max_rate / 2)  # the mean phase rate is max_rate / 2
    table = trades(rows, seed=seed, max_rate=max_rate, min_phase_s=5.0, max_phase_s=20.0)
    recs = table.to_pylist()
    span_s = (recs[-1]["ts"] - recs[0]["ts"]) / 1000
    flow = sf.Flow("hedge")
    src = sf.io.iterable(recs, name="trades").replay(1.0)
    sink = _Count()
    build_query("hedge", [flow.source(src)], window=window, keys=max(16, max_parallelism)) \
        .sink(sink)
    t0 = time.perf_counter()
    res = flow.run(engine="vsn", parallelism=1, max_parallelism=max_parallelism,
                   controller="threshold", period=period)
    wall = time.perf_counter() - t0
    # the input rate per second of event time, from the trades themselves
    first = recs[0]["ts"]
    per_s: dict[int, int] = {}
    for r in recs:
        k = (r["ts"] - first) // 1000
        per_s[k] = per_s.get(k, 0) + 1
    lat = res.extra["latency_series"]
    buckets: dict[int, list[float]] = {}
    for t, ms in lat:
        buckets.setdefault(int(t), []).append(ms)
    latency_per_s = {k: sorted(v)[len(v) // 2] for k, v in sorted(buckets.items())}
    recs_log = res.extra["reconfigurations"]
    return {
        "rows": len(recs), "event_time_span_s": span_s, "wall_s": wall,
        "window_ms": window, "max_rate": max_rate, "max_parallelism": max_parallelism,
        "outputs": sink.count,
        "latency_ms": res.extra["latency_ms"],
        "reconfigurations": len([r for r in recs_log if r["applied"]]),
        "reconfiguration_ms": sorted(r["duration_ms"] for r in recs_log if r["applied"]),
        "input_rate_per_s": [per_s.get(k, 0) for k in range(int(span_s) + 1)],
        "latency_p50_per_s": [[k, v] for k, v in latency_per_s.items()],
        "metrics": [{"time": m["time"], "parallelism": m["parallelism"],
                     "input_rate": m["input_rate"],
                     "mean_load": sum(m["loads"]) / max(1, len(m["loads"]))}
                    for m in res.extra["metrics"]],
    }


__all__ = ["hedge"]
