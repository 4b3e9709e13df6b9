"""The input of STRETCH Q5 (stretchflow_bench/elastic.py): phases of random rates for ScaleJoin."""

import pytest

from stretchflow_bench.elastic import phased_bandjoin


def test_phases_have_rates_in_the_range_and_streams_are_sorted():
    left, right = phased_bandjoin(60.0, min_rate=400.0, max_rate=2000.0, min_phase_s=10.0,
                                  max_phase_s=20.0, seed=3)
    for recs, (u, v) in ((left, ("x", "y")), (right, ("a", "b"))):
        ts = [r["ts"] for r in recs]
        assert ts == sorted(ts) and 0 <= ts[0] and ts[-1] < 60_000
        assert [r["id"] for r in recs] == list(range(len(recs)))
        assert all(1 <= r[u] <= 10_000 and 1 <= r[v] <= 10_000 for r in recs)
    # total rate per 10 s (the shortest phase): within the range, up to Poisson noise and
    # the one phase boundary a bucket may straddle
    counts = [0] * 6
    for r in left + right:
        counts[r["ts"] // 10_000] += 1
    assert all(400 * 10 * 0.8 <= c <= 2000 * 10 * 1.2 for c in counts), counts
    assert max(counts) > 1.5 * min(counts)  # the rate really changes between phases


def test_same_seed_same_streams_and_bad_parameters():
    assert phased_bandjoin(5.0, 100.0, 200.0, 1.0, 2.0, seed=1) == \
        phased_bandjoin(5.0, 100.0, 200.0, 1.0, 2.0, seed=1)
    with pytest.raises(ValueError, match="min_rate"):
        phased_bandjoin(5.0, 300.0, 200.0, 1.0, 2.0)


def test_timeline_keeps_applied_times_latency_percentiles_and_is_bounded():
    from types import SimpleNamespace

    from stretchflow_bench.elastic import _timeline
    from stretchflow_bench.timeline import MAX_POINTS

    rows = [{"time": 0.5 * k, "parallelism": 1 + (k > 4000), "input_rate": 10.0,
             "loads": [0.5, 0.7]} for k in range(6000)]
    lat = [(0.2, 1.0), (0.4, 2.0), (0.6, 9.0), (1.5, 4.0)]
    res = SimpleNamespace(extra={
        "latency_series": lat, "latency_ms": {"p50": 2.0},
        "reconfigurations": [{"applied": True, "duration_ms": 3.0},
                             {"applied": False, "duration_ms": 0.0}],
        "parallelism_series": {"hedge": [(0.0, 1), (2000.3, 2)]}, "metrics": rows})
    out = _timeline(res, [0, 500, 1000, 2500], wall=3.0)
    assert out["reconfigurations"] == 1 and out["reconfiguration_ms"] == [3.0]
    assert out["parallelism_series"] == {"hedge": [[0.0, 1], [2000.3, 2]]}
    assert out["latency_p50_per_s"] == [[0, 2.0], [1, 4.0]]
    assert out["latency_p99_per_s"] == [[0, 9.0], [1, 4.0]]
    assert out["input_rate_per_s"] == [2, 1, 1]
    assert len(out["metrics"]) <= MAX_POINTS and out["metrics"][-1]["time"] == rows[-1]["time"]
    assert out["metrics"][0]["mean_load"] == pytest.approx(0.6)
