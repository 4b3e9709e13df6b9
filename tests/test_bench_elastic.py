"""The input of STRETCH Q5 (bench/elastic.py): phases of random rates for ScaleJoin."""

import pytest

from stretchflow.bench.elastic import phased_bandjoin


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
