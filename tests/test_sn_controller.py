"""Elasticity controllers driving the SN executor: metrics from the splitter and the channels,
decisions applied as migrations at run time (elastic-scaling §4 and §6)."""

import math

import pytest

import stretchflow as sf
from conformance.contract import QUERY_PARAMS, multiset
from stretchflow.elastic.controller import Controller, Decision, Metrics
from stretchflow.elastic.level import LevelController
from stretchflow.executors import sn
from stretchflow.executors.reference import run as run_reference
from stretchflow.queries import build_query
from test_sn import tweet_records


class Scripted(Controller):
    """Answers each observation with the next scripted parallelism (None: stay)."""

    name = "scripted"

    def __init__(self, script):
        self.script = list(script)
        self.seen: list[Metrics] = []

    def observe(self, metrics):
        self.seen.append(metrics)
        if not self.script:
            return None
        p = self.script.pop(0)
        return None if p is None else Decision(p, f"scripted {p}")

    def reset(self):
        self.script.clear()


def _wordcount(flow, recs, rate):
    src = sf.io.iterable(recs, name="in0")
    if rate:
        src = src.at_rate(rate)
    return build_query("wordcount", [flow.source(src)], **QUERY_PARAMS["wordcount"]).collect()


@pytest.mark.parametrize("channels", ["threads", "processes"])
def test_controller_decisions_become_migrations(channels):
    recs = tweet_records(9, 3000)
    f_ref, f_sn = sf.Flow("a"), sf.Flow("b")
    ref, got = _wordcount(f_ref, recs, None), _wordcount(f_sn, recs, 2500)
    run_reference(f_ref)
    script = [2, None, 4, 1, 3, 3, None, 2]
    ctl = Scripted(script)
    res = sn.run(f_sn, parallelism=1, max_parallelism=4, channels=channels, controller=ctl,
                 metrics_interval=0.03, batch=16)
    assert multiset(got.items) == multiset(ref.items)
    assert [ts for ts, _ in got.items] == sorted(ts for ts, _ in got.items)
    # every observation was made at the parallelism the previous decisions left, and every
    # decision that changes it became one migration (3 -> 3 is none); how much of the script
    # is used depends on how many intervals the run lasted
    p, expected, moves = 1, [], []
    for want in script[:len(ctl.seen)]:
        expected.append(p)
        if want is not None and want != p:
            moves.append((p, want))
            p = want
    assert [m.parallelism for m in ctl.seen[:len(expected)]] == expected
    applied = [(r["parallelism_before"], r["parallelism_after"])
               for r in res.extra["reconfigurations"]]
    assert applied == moves
    assert len(moves) >= 3, "the run should last long enough for several migrations"
    assert all(r["note"].startswith("controller scripted") for r in res.extra["reconfigurations"])
    for m in ctl.seen:
        assert 0 <= m.congestion <= 1 and m.max_parallelism == 4
        assert len(m.per_instance_load) == m.parallelism
    # throughput is tuples the channels finished over the period: summed over the periods it
    # cannot exceed what the splitter routed, and this paced run did process tuples
    done = _processed(ctl.seen)
    assert 0 < sum(done) <= res.extra["tuples_routed"]
    assert res.extra["metrics"] and res.extra["controller"] == "scripted"


def _processed(seen):
    """Tuples processed in each observed period, ``throughput * period``: a whole number,
    as ``throughput`` is a count of tuples divided by the period."""
    out = []
    for m in seen:
        assert math.isfinite(m.throughput) and m.period > 0, m
        n = m.throughput * m.period
        assert abs(n - round(n)) < 1e-6 * max(1.0, n), m
        out.append(round(n))
    return out


def _heavy_flow(n=3000, spin=3000):
    recs = [{"ts": t, "k": t % 64} for t in range(n)]

    def update(a, t):
        x = 1
        for _ in range(spin):  # a CPU-bound f_U: channels are far slower than the source
            x = (x * 31 + 7) & 0xFFFF
        return a + 1 + (x & 0)

    def build(flow):
        return flow.source(sf.io.iterable(recs)).aggregate(
            size=50, keys=lambda t: {t["k"]}, init=lambda: 0, update=update,
            output=lambda k, a: {"k": k, "n": a}).collect()

    return build


def test_congestion_index_sees_a_slow_channel_and_not_a_fast_one():
    build = _heavy_flow(n=1500)
    flow = sf.Flow("heavy")
    build(flow)
    ctl = Scripted([])
    sn.run(flow, parallelism=1, controller=ctl, metrics_interval=0.05, batch=8, capacity=8)
    # the splitter outruns the channel by far: it spends most of its time blocked
    assert max(m.congestion for m in ctl.seen) > 0.5
    # a paced light load whose channel queues can hold every message the splitter can send
    # (at most one flush per input tuple): a send never waits, so the index is exactly 0 —
    # it counts blocked sends only, not a busy or slow machine
    recs = tweet_records(2, 300)
    flow = sf.Flow("light")
    _wordcount(flow, recs, 1500)
    ctl = Scripted([])
    batch = 256
    res = sn.run(flow, parallelism=2, controller=ctl, metrics_interval=0.05, batch=batch,
                 capacity=batch * (len(recs) + 8))
    assert ctl.seen and all(m.congestion == 0.0 for m in ctl.seen)
    assert res.extra["blocked_s"] == 0.0
    assert 0 < sum(_processed(ctl.seen)) <= res.extra["tuples_routed"]


def test_level_controller_expands_under_congestion_and_keeps_the_output():
    build = _heavy_flow()
    f_ref, f_sn = sf.Flow("a"), sf.Flow("b")
    ref, got = build(f_ref), build(f_sn)
    run_reference(f_ref)
    ctl = LevelController(period=0.1)
    res = sn.run(f_sn, parallelism=1, max_parallelism=4, controller=ctl,
                 metrics_interval=0.05, batch=8, capacity=8)
    assert multiset(got.items) == multiset(ref.items)
    log = res.extra["reconfigurations"]
    assert log, "a congested level-0 region must expand (P1)"
    assert (log[0]["parallelism_before"], log[0]["parallelism_after"]) == (1, 2)
    assert "P1 expand" in log[0]["note"]


def test_controller_by_name_with_options():
    recs = tweet_records(4, 200)
    flow = sf.Flow("x")
    _wordcount(flow, recs, None)
    res = sn.run(flow, controller="level",
                 controller_options={"alpha": 0.3, "threshold": 0.1, "period": 5.0,
                                     "max_levels": 3})
    assert res.extra["controller"] == "level"
    with pytest.raises(ValueError):
        sn.run(flow, controller="level", controller_options={"alpha": 2.0})
    with pytest.raises(ValueError):
        sn.run(flow, controller=LevelController(), controller_options={"alpha": 0.5})
    with pytest.raises(ValueError):
        sn.run(flow, controller="level", metrics_interval=0)


def test_vsn_accepts_the_level_controller():
    recs = tweet_records(6, 400)
    f_ref, f_vsn = sf.Flow("a"), sf.Flow("b")
    ref, got = _wordcount(f_ref, recs, None), _wordcount(f_vsn, recs, None)
    run_reference(f_ref)
    f_vsn.run(engine="vsn", parallelism=2, max_parallelism=4, controller="level")
    assert multiset(got.items) == multiset(ref.items)
