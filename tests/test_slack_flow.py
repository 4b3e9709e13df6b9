"""The slack executor's flow control: a fast source in front of a slow O+ keeps the SSG's
size bounded (and unbounded without a capacity), small capacities still give the reference
output, and a failing operator does not leave writers blocked on a full SSG."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import QUERY_PARAMS, assert_same_as_reference, multiset, query_flow
from stretchflow.errors import OperatorError
from stretchflow.executors import slack
from stretchflow.io.generators import bandjoin, tweets


def slow_flow(n: int, pause: float):
    f = sf.Flow("slow")
    src = f.source(sf.io.iterable([{"ts": i, "k": i % 7} for i in range(n)], name="fast"))

    def update(c, t):
        time.sleep(pause)  # a slow operator: the source is much faster
        return c + 1

    out = src.aggregate(size=50, slide=50, keys=lambda t: {t["k"]}, init=lambda: 0,
                        update=update, output=lambda k, c: {"k": k, "n": c},
                        name="slow").collect()
    return f, out


def test_fast_source_slow_operator_keeps_the_ssg_bounded():
    f, ref = slow_flow(1500, 0)
    f.run()
    f, got = slow_flow(1500, 0.0002)
    res = slack.run(f, capacity=64, metrics_interval=0.05)
    op = res.extra["operators"]["slow"]
    assert op["capacity"] == 64
    assert op["max_held"] <= 64 + 1  # one writer, one reader: capacity + W * R
    assert op["writer_waits"] > 0  # the source did block
    assert all(p["operators"]["slow"]["held"] <= 65 for p in res.extra["series"])
    assert multiset(got.items) == multiset(ref.items)
    # without a capacity the source runs ahead and the SSG holds what it wrote
    f, got = slow_flow(1500, 0.0002)
    res = slack.run(f, capacity=None, metrics_interval=0.05)
    assert res.extra["operators"]["slow"]["max_held"] > 64
    assert multiset(got.items) == multiset(ref.items)


def test_bad_capacity_is_rejected():
    f, _ = slow_flow(10, 0)
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        slack.run(f, capacity=0)


def test_failing_operator_with_a_blocked_source_stops_the_run():
    f = sf.Flow("bad")
    src = f.source(sf.io.iterable([{"ts": i, "x": i} for i in range(5000)], name="in"))

    def update(n, t):
        if t["x"] == 100:
            raise RuntimeError("boom")
        return n + 1

    src.aggregate(size=10, keys=lambda t: {1}, init=lambda: 0, update=update,
                  name="agg").collect()
    t0 = time.perf_counter()
    with pytest.raises(OperatorError, match="agg"):
        slack.run(f, capacity=8, metrics_interval=0.05)
    assert time.perf_counter() - t0 < 30  # not stuck in join timeouts per blocked thread


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["wordcount", "paircount"]), st.integers(0, 10_000), st.integers(1, 3),
       st.integers(0, 200), st.sampled_from([1, 4, 32]))
def test_small_capacity_matches_reference(query, seed, readers, rows, capacity):
    recs = tweets(rows, seed=seed, rate=200, vocabulary=40, hashtags=8).to_pylist()
    assert_res = assert_same_as_reference(query_flow(query, [recs]), "slack",
                                          parallelism=readers, capacity=capacity)
    assert assert_res.extra["slack_ready"] == 0


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 3), st.sampled_from([2, 16]))
def test_two_input_join_with_small_capacity_matches_reference(seed, readers, capacity):
    left, right = (t.to_pylist() for t in bandjoin(60, seed=seed, rate=50))
    assert_same_as_reference(query_flow("scalejoin", [left, right],
                                        {**QUERY_PARAMS["scalejoin"], "keys": 7}),
                             "slack", parallelism=readers, capacity=capacity)
