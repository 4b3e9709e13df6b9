"""The traffic application of determinism-latency §6: generators, delay injection and the
congestion join (checked against a brute-force definition)."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

import stretchflow as sf
from stretchflow.io.traffic import (
    ConstantDelay,
    DelayedReplay,
    ZipfDelay,
    bus_reports,
    scats_reports,
)
from stretchflow.queries.traffic import congestion


def test_bus_reports_every_20_s_per_bus():
    recs = bus_reports(100_000, seed=1)
    assert [r["ts"] for r in recs] == sorted(r["ts"] for r in recs)
    per_bus = Counter(r["bus"] for r in recs)
    assert len(per_bus) == 911 and set(per_bus.values()) == {5}
    by_bus: dict[int, list[int]] = {}
    for r in recs:
        by_bus.setdefault(r["bus"], []).append(r["ts"])
    assert all(np.all(np.diff(v) == 20_000) for v in by_bus.values())
    assert {r["area"] for r in recs} <= set(range(40))
    assert 0 < sum(r["congested"] for r in recs) < len(recs)


def test_scats_reports_every_minute_per_sensor():
    recs = scats_reports(120_000, seed=1)
    per = Counter(r["sensor"] for r in recs)
    assert len(per) == 3504 and set(per.values()) == {2}
    areas = {}
    for r in recs:
        assert areas.setdefault(r["sensor"], r["area"]) == r["area"]  # sensors do not move
    assert all(r["flow"] > 0 for r in recs)


def test_generator_errors():
    with pytest.raises(ValueError, match="probabilities"):
        bus_reports(10, congestion_prob=2)
    with pytest.raises(ValueError, match="areas >= 1"):
        scats_reports(10, areas=0)


def test_zipf_delay_phases():
    z = ZipfDelay(((20, 1.0, 10), (50, 0.35, 2)), seed=0)
    assert z.phase_at(5) == 0 and z.phase_at(25) == 1 and z.phase_at(75) == 0
    assert z.mean_ms(0) == pytest.approx(10 / sum(1 / k for k in range(1, 11)))
    high = [z.delay_ms(1.0) for _ in range(4000)]
    low = [z.delay_ms(30.0) for _ in range(4000)]
    assert set(high) <= set(range(1, 11)) and set(low) <= {1, 2}
    assert np.mean(high) == pytest.approx(z.mean_ms(0), rel=0.1)
    assert np.mean(low) == pytest.approx(z.mean_ms(1), rel=0.1)
    with pytest.raises(ValueError, match="phase"):
        ZipfDelay(((0, 1.0, 10),))


def test_delayed_replay_paces_and_delays():
    recs = [{"ts": 10 * i} for i in range(100)]  # 1 s of event time
    t0 = time.perf_counter()
    assert [ts for ts, _ in DelayedReplay(recs, speedup=20).items()] == [r["ts"] for r in recs]
    fast = time.perf_counter() - t0  # ~50 ms at speed-up 20
    t0 = time.perf_counter()
    list(DelayedReplay(recs, speedup=20, delay=ConstantDelay(2.0)).items())
    slow = time.perf_counter() - t0  # additive: each tuple leaves 2 ms later than the last
    # lower bounds only (a loaded machine can only make these longer): the schedule is kept
    # and the delays add up
    assert fast >= 0.049 and slow >= 0.24  # 99 gaps of 0.5 ms + 100 delays of 2 ms


def test_delayed_replay_checks_order():
    with pytest.raises(sf.errors.SourceError, match="goes back"):
        list(DelayedReplay([{"ts": 5}, {"ts": 1}], speedup=1000, name="bus").items())


def brute_force(buses, sensors, window=5000, slide=100, threshold=50.0):
    """A pair matches when it shares an area, the bus reports congestion, the sensor's flow
    exceeds the threshold, and the earlier tuple still lies in the single sliding window
    [earliestWinL(later), +window) of the later one (the later tuple, ties: the sensor, input
    1, is processed second by the reference merge)."""
    out = Counter()
    for b in buses:
        if not b["congested"]:
            continue
        for s in sensors:
            if s["area"] != b["area"] or not s["flow"] > threshold:
                continue
            later = max(b["ts"], s["ts"])
            earlier = min(b["ts"], s["ts"])
            lo = ((later - window) // slide + 1) * slide
            if earlier >= lo:
                out[(b["bus"], b["ts"], s["sensor"], s["ts"])] += 1
    return out


def test_congestion_join_matches_brute_force():
    buses = bus_reports(90_000, buses=150, areas=8, seed=4)
    sensors = scats_reports(90_000, sensors=400, areas=8, seed=4)
    f = sf.Flow("traffic")
    col = congestion(f.source(sf.io.iterable(buses, name="bus")),
                     f.source(sf.io.iterable(sensors, name="scats"))).collect()
    f.run()
    got = Counter((p["bus"], p["bus_ts"], p["sensor"], p["sensor_ts"]) for _, p in col.items)
    want = brute_force(buses, sensors)
    assert got == want and sum(want.values()) > 0


def test_delayed_replay_stops_at_the_end_of_the_experiment():
    recs = [{"ts": 10 * i} for i in range(100)]  # due every 0.5 ms at speed-up 20
    got = [ts for ts, _ in DelayedReplay(recs, speedup=20, until_s=0.02).items()]
    assert got == [10 * i for i in range(41)]  # due at 0, 0.5, ..., 20 ms
