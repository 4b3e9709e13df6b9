"""The slack executor (O+ reading through SSGs under a deadline) against the reference
executor, its handling of out-of-order (slack-ready) tuples, and its measurements."""

from __future__ import annotations

import inspect
import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import (
    QUERY_PARAMS,
    TWEET_QUERIES,
    assert_same_as_reference,
    multiset,
    query_flow,
    run_query,
)
from stretchflow.elastic.sltuner import StaticSLT
from stretchflow.engines import get_spec
from stretchflow.errors import FlowDefinitionError, OperatorError, SourceError
from stretchflow.executors import slack
from stretchflow.executors.slack import SlackInstance, end_to_end
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.io.traffic import ConstantDelay, DelayedReplay, bus_reports, scats_reports
from stretchflow.queries.traffic import congestion, congestion_join


def tweet_records(seed, rows, rate):
    return tweets(rows, seed=seed, rate=rate, vocabulary=40, hashtags=8,
                  gap_prob=0.02, gap_ms=(2_000, 9_000)).to_pylist()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 4),
       st.integers(0, 300))
def test_tweet_queries_match_reference_with_infinite_slt(query, seed, readers, rows):
    res = assert_same_as_reference(query_flow(query, [tweet_records(seed, rows, 200)]),
                                   "slack", parallelism=readers)
    assert res.extra["slack_ready"] == 0


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 60))
def test_joins_match_reference_with_infinite_slt(seed, readers, rows):
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50))
    assert_same_as_reference(query_flow("scalejoin", [left, right],
                                        {**QUERY_PARAMS["scalejoin"], "keys": 7}),
                             "slack", parallelism=readers)
    assert_same_as_reference(query_flow("forward", [left, right]), "slack",
                             parallelism=readers)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 3), st.sampled_from([0, 50, 500, 5000]))
def test_no_slack_ready_tuple_means_reference_output(seed, readers, slt):
    """Whatever the SLT: a run that read no slack-ready tuple (SLT >= max_ts − merge_ts
    throughout) gives exactly the reference output; one that did counts them."""
    left, right = (t.to_pylist() for t in bandjoin(40, seed=seed, rate=50))
    ref, _ = run_query("forward", [left, right])
    got, res = run_query("forward", [left, right], engine="slack", slt=slt,
                         parallelism=readers)
    # Forward's windows are 1 ms wide: an out-of-order tuple finds its window expired and is
    # counted lost; every other tuple is forwarded once
    x = res.extra
    assert len(got) + x["lost_tuples"] == len(ref)
    assert not Counter(repr(p) for _, p in got) - Counter(repr(p) for _, p in ref)
    if x["slack_ready"] == 0:
        assert x["lost_tuples"] == 0
        assert multiset(got) == multiset(ref)
        assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)


def test_traffic_join_matches_reference():
    b, s = bus_reports(120_000, seed=3), scats_reports(120_000, seed=3)

    def flow():
        f = sf.Flow("traffic")
        col = congestion(f.source(sf.io.iterable(b, name="bus")),
                         f.source(sf.io.iterable(s, name="scats"))).collect()
        return f, col

    f, ref = flow()
    f.run()
    for readers in (1, 3):
        f, got = flow()
        res = slack.run(f, parallelism=readers, deadline=10_000)
        assert multiset(got.items) == multiset(ref.items)
        assert res.extra["events"] == len(ref.items) > 0
        assert res.extra["operators"]["congestion"]["lost_tuples"] == 0


# -- out-of-order tuples in the O+ ----------------------------------------------------------------


def test_late_tuples_go_to_open_windows_or_are_counted_lost():
    op = congestion_join(window=5000, slide=100, flow_threshold=10)
    inst = SlackInstance(op)
    bus = {"ts": 0, "bus": 1, "area": 7, "congested": True}
    sensor = {"sensor": 2, "area": 7, "flow": 50.0}
    inst.process(9000, {**sensor, "ts": 9000}, 1)  # W = 9000: windows from 4100 open
    inst.process(6000, {**bus, "ts": 6000}, 0)  # late, but its window is open: matched
    assert inst.late == 1 and inst.lost == 0
    inst.process(3000, {**bus, "ts": 3000}, 0)  # late and older than every open window
    assert inst.late == 2 and inst.lost == 1
    inst.finish()
    out = inst.take()
    assert [(p["bus_ts"], p["sensor_ts"]) for _, p in out] == [(6000, 9000)]
    assert [ts for ts, _ in out] == sorted(ts for ts, _ in out)


def test_late_tuple_in_multi_windows_is_partially_lost():
    agg = sf.operators.aggregate.Aggregate(size=1000, slide=250, keys=lambda t: {"k"},
                                           init=lambda: 0, update=lambda n, t: n + 1,
                                           output=lambda k, n: {"n": n})
    inst = SlackInstance(agg)
    inst.process(2000, {}, 0)
    inst.process(1500, {}, 0)  # windows 750..1500; those with l + 1000 <= 2000 expired
    assert inst.late == 1 and inst.partial == 1 and inst.lost == 0
    inst.finish()
    counts = {ts: p["n"] for ts, p in inst.take()}
    assert counts[2250] == 2 and counts[2500] == 2  # windows [1250, 2250), [1500, 2500)
    assert counts[2750] == 1 and counts[3000] == 1


# -- measurements, tuner, errors ------------------------------------------------------------------


def test_time_series_and_tuner_under_a_delayed_source():
    """A constantly delayed bus source with a low SLT reads slack-ready tuples; a tuner's
    decision is applied and recorded; latency, SLT and events are in the series."""
    b, s = bus_reports(40_000, buses=120, seed=1), scats_reports(40_000, sensors=400, seed=1)
    f = sf.Flow("traffic")
    bus = f.source(DelayedReplay(b, speedup=40, delay=ConstantDelay(3.0), name="bus"))
    sc = f.source(DelayedReplay(s, speedup=40, name="scats"))
    congestion(bus, sc).collect()
    res = slack.run(f, deadline=5000, slt=math.inf, controller=StaticSLT(200),
                    metrics_interval=0.1)
    x = res.extra
    assert x["intervals"] >= 3
    assert x["decisions"] and x["decisions"][0]["slt"] == {"congestion": 200}
    assert x["operators"]["congestion"]["slt_final"] == 200
    assert x["slack_ready"] > 0  # the bus falls behind by more than 200 ms of event time
    assert x["slack_ready"] == sum(p["slack_ready"] for p in x["series"])
    # Eq. 2 per interval: finite, and tuples did wait in the SSG (the bus is 3 s behind), so
    # not every interval can be 0; the run's summaries are made of these very points
    # (of the intervals in which the operators read tuples: the others measured nothing)
    lat = [p["latency_ms"] for p in x["series"] if p["read"]]
    assert all(math.isfinite(v) for v in lat) and max(lat) > 0
    assert x["e2e_latency_ms"] == {"max": max(lat), "mean": sum(lat) / len(lat)}
    assert x["violations"] == sum(v >= 5000 for v in lat) and x["intervals"] == len(lat)
    out = x["latency_ms"]  # the sinks' samples: a histogram, so ordered percentiles
    assert out["samples"] > 0 and 0 < out["p50"] <= out["p99"] <= out["max"]
    assert x["events"] == sum(p["events"] for p in x["series"])
    assert res.tuples_in == {"bus": len(b), "scats": len(s)}
    assert x["controller"] == "static"


def test_end_to_end_is_the_max_over_paths():
    per_op = {"a": {"latency_ms": 5.0}, "b": {"latency_ms": 7.0}, "c": {"latency_ms": 1.0}}
    assert end_to_end(per_op, [["a", "b"], ["c"]]) == 12.0
    assert end_to_end(per_op, [["a"], ["c", "b"]]) == 8.0


def _two_operator_flow():
    f = sf.Flow("two")
    src = f.source(sf.io.iterable([{"ts": i, "text": "a b"} for i in range(50)], name="in"))
    first = src.aggregate(size=10, slide=5, keys=lambda t: t["text"].split(), init=lambda: 0,
                          update=lambda n, t: n + 1, output=lambda k, n: {"k": k, "n": n},
                          name="first")
    out = first.map(lambda p: p).aggregate(size=20, keys=lambda t: {t["k"]}, init=lambda: 0,
                                           update=lambda n, t: n + t["n"],
                                           output=lambda k, n: {"k": k, "n": n},
                                           name="second").collect()
    return f, out


def test_a_two_operator_flow_with_stateless_between():
    f, ref = _two_operator_flow()
    f.run()
    f, got = _two_operator_flow()
    res = slack.run(f, parallelism={"first": 2, "second": 1}, metrics_interval=0.05)
    assert multiset(got.items) == multiset(ref.items)
    assert sum(p["n"] for _, p in got.items) == 2 * 50 * 2  # 2 words, 2 windows each
    assert set(res.extra["operators"]) == {"first", "second"}
    assert res.extra["operators"]["first"]["threads"] == 2


def test_errors_name_operator_and_source():
    f = sf.Flow("bad")
    src = f.source(sf.io.iterable([{"ts": 1, "x": 1}, {"ts": 2}], name="in"))
    src.aggregate(size=10, keys=lambda t: {t["x"]}, init=lambda: 0,
                  update=lambda n, t: n + 1, name="agg").collect()
    with pytest.raises(OperatorError, match="agg"):
        slack.run(f)
    f = sf.Flow("bad")
    src = f.source(sf.io.iterable([{"ts": 5}, {"ts": 2}], name="in"))
    src.aggregate(size=10, keys=lambda t: {1}, init=lambda: 0,
                  update=lambda n, t: n + 1, name="agg").collect()
    with pytest.raises(SourceError, match="in"):
        slack.run(f)
    with pytest.raises(FlowDefinitionError, match="does not take option 'readers'"):
        f.run(engine="slack", readers=2)
    with pytest.raises(FlowDefinitionError, match="SLT tuner object"):
        f.run(engine="slack", controller="threshold")


def test_options_are_the_specs_and_the_result_follows_the_runtime_schema():
    """``run``'s keywords are the slack spec's options; ``extra`` has the runtime's keys."""
    assert list(inspect.signature(slack.run).parameters)[1:] == list(
        get_spec("slack").option_names)
    f, got = _two_operator_flow()
    res = f.run(engine="slack", parallelism={"first": 2}, key_groups=8, capacity=16,
                metrics_interval=0.05, deadline=60_000)
    x = res.extra
    assert x["parallelism"] == {"first": 2, "second": 1}
    assert set(x["latency_ms"]) == {"p50", "p99", "max", "samples"}
    assert x["latency_ms"]["samples"] > 0 and x["latency_ms"]["max"] >= x["latency_ms"]["p50"]
    assert x["latency_series"] and x["controller"] is None
    assert x["deadline_ms"] == 60_000 and x["violations"] == 0
    assert x["operators"]["first"]["capacity"] == 16
    assert set(x["e2e_latency_ms"]) == {"max", "mean"}
    assert len(got.items) > 0


def _self_join_flow(branches: bool):
    """One source as both inputs of a join: directly, or through a map and a filter (two
    stateless branches of one producer meeting again in one SSG)."""
    f = sf.Flow("self")
    recs = [{"ts": i // 2, "id": i, "k": i % 3} for i in range(120)]
    s = f.source(sf.io.iterable(recs, name="in"))
    left, right = (s.map(lambda t: {**t, "side": "l"}), s.filter(lambda t: t["id"] % 4)
                   ) if branches else (s, s)
    out = left.join(right, size=6, keys=lambda t: {t["k"]},
                    predicate=lambda a, b: a["id"] < b["id"],
                    output=lambda a, b: {"a": a["id"], "b": b["id"]}, name="self").collect()
    return f, out


@pytest.mark.parametrize("branches", [False, True])
def test_one_producer_into_both_inputs_of_a_join(branches):
    """The producer's batches for the two inputs reach the SSG as one sorted run (added one
    after the other they went back in time and the SSG refused them)."""
    f, ref = _self_join_flow(branches)
    f.run()
    assert ref.items
    for p in (1, 2):
        f, got = _self_join_flow(branches)
        f.run(engine="slack", parallelism=p, capacity=8)
        assert multiset(got.items) == multiset(ref.items)
