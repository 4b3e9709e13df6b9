"""The SN executor with process channels (``channels="processes"``) against the reference
executor, migrations through the SQLite store, and failures across the process boundary."""

import multiprocessing as mp
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import QUERY_PARAMS, TWEET_QUERIES, multiset, run_query, schedules
from stretchflow.elastic.consistent_hash import stable_hash
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.executors import sn
from stretchflow.executors.reference import run as run_reference
from stretchflow.executors.sn_process import stable_group_function, stable_instance
from stretchflow.io.generators import bandjoin
from stretchflow.operators.oplus import SharedState
from stretchflow.queries import build_query
from stretchflow.queries.wordcount import tokens_of
from test_sn import _failing_flow, _run_bounded, _sn_threads, same_as_reference, tweet_records
from threadutil import within

PROC = {"channels": "processes"}


def _no_leftovers(seconds=10):
    """No sn thread and no channel process survives a run."""
    def left() -> list:
        return _sn_threads() + [p for p in mp.active_children() if p.name.startswith("sn-")]

    assert within(lambda: not left(), seconds, poll=0.05), f"left running: {left()}"


# -- same output as the reference, with random migrations ----------------------------------
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 4),
       st.sampled_from([7, 256]), st.data())
def test_tweet_queries_match_reference_with_processes(query, seed, p0, batch, data):
    recs = tweet_records(seed, data.draw(st.integers(0, 200)))
    schedule = data.draw(schedules(len(recs), 4, max_steps=4))
    res = same_as_reference(query, [recs], parallelism=p0,
                            reconfigure=schedule, batch=batch, **PROC)
    assert res.extra["channels"] == "processes"
    assert res.extra["store"] == "SQLiteStateStore"
    assert len(res.extra["reconfigurations"]) == len(schedule)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 3), st.data())
def test_scalejoin_and_forward_match_reference_with_processes(seed, p0, data):
    rows = data.draw(st.integers(0, 40))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50))
    schedule = data.draw(schedules(2 * rows, 4, max_steps=4))
    same_as_reference("scalejoin", [left, right], {**QUERY_PARAMS["scalejoin"], "keys": 7},
                      parallelism=p0, reconfigure=schedule, batch=16, **PROC)
    same_as_reference("forward", [left, right], parallelism=p0,
                      reconfigure=schedule, batch=16, **PROC)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 4),
       st.data())
def test_many_random_schedules_with_processes(query, seed, p0, data):
    recs = tweet_records(seed, 1000, rate=300)
    schedule = data.draw(schedules(len(recs), 5, max_steps=6))
    same_as_reference(query, [recs], parallelism=p0,
                      reconfigure=schedule, batch=64, **PROC)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 3), st.data())
def test_scalejoin_and_forward_many_schedules_with_processes(seed, p0, data):
    rows = data.draw(st.integers(0, 60))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50))
    schedule = data.draw(schedules(2 * rows, 4, max_steps=4))
    keys = data.draw(st.sampled_from([1000, 7, 32]))
    same_as_reference("scalejoin", [left, right], {**QUERY_PARAMS["scalejoin"], "keys": keys},
                      parallelism=p0, reconfigure=schedule, batch=16, **PROC)
    same_as_reference("forward", [left, right], parallelism=p0,
                      reconfigure=schedule, batch=16, **PROC)


def test_spawn_start_method_and_stateless_chains():
    recs = tweet_records(3, 400)

    def build(flow):
        s = flow.source(sf.io.iterable(recs, name="in0"))
        s = s.filter(lambda t: len(t["text"]) > 5)
        out = build_query("wordcount", [s], size=2000, slide=500)
        return out.map(lambda r: {**r, "twice": 2 * r["count"]}).collect()

    f1, f2 = sf.Flow("a"), sf.Flow("b")
    ref, got = build(f1), build(f2)
    run_reference(f1)
    sn.run(f2, parallelism=2, reconfigure=[(150, 3), (300, 1)], start_method="spawn", **PROC)
    assert multiset(got.items) == multiset(ref.items)


# -- stable key groups ---------------------------------------------------------------------
def test_splitter_and_channels_agree_on_stable_groups():
    """Routing uses stable_hash, so the duplication factor is the one stable groups give."""
    recs = tweet_records(5, 600)
    p, groups = 3, 64
    _, res = run_query("wordcount", [recs], None, "sn", parallelism=p,
                       key_groups=groups, **PROC)
    assign = sn.group_assignment(p, groups)
    brute = sum(len({assign[stable_hash(k) % groups] for k in tokens_of(r["text"])})
                for r in recs)
    assert res.extra["tuples_sent"] == brute


def test_stable_group_instance_owns_only_its_groups():
    op = sf.Flow("x").source(sf.io.iterable([])).aggregate(
        size=10, keys=lambda t: set(t), init=lambda: 0, update=lambda a, t: a + 1).node.spec
    G = 16
    gof = stable_group_function(G)
    assign = sn.group_assignment(2, G)
    plain = op.instance(SharedState(G), 1, assign)
    inst = stable_instance(op, SharedState(G), 1, assign, gof)
    assert isinstance(inst, type(plain))  # the operator's own instance class is kept
    keys = [f"w{i}" for i in range(50)]
    routed = {k for k, _, _, _ in inst._route(set(keys), None)}
    assert routed == {k for k in keys if assign[stable_hash(k) % G] == 1}
    assert gof("w3") == stable_hash("w3") % G


# -- migration -------------------------------------------------------------------------------
def test_migrated_state_continues_across_processes():
    n = 3000
    recs = [{"ts": t, "k": t % 50} for t in range(n)]
    flow = sf.Flow("count")
    col = flow.source(sf.io.iterable(recs)).aggregate(
        size=10 * n, keys=lambda t: {t["k"]}, init=lambda: 0, update=lambda a, t: a + 1,
        output=lambda k, a: {"k": k, "n": a}).collect()
    res = sn.run(flow, parallelism=2, reconfigure=[(500, 4), (1500, 1), (2500, 3)],
                 key_groups=32, batch=50, **PROC)
    assert sorted((p["k"], p["n"]) for _, p in col.items) == [(k, n // 50) for k in range(50)]
    log = res.extra["reconfigurations"]
    assert [r["parallelism_after"] for r in log] == [4, 1, 3]
    for r in log:
        assert r["applied"] and r["bytes_moved"] > 0 and r["groups_moved"] > 0
    assert res.extra["bytes_moved"] == sum(r["bytes_moved"] for r in log)
    assert list(res.extra["parallelism"].values()) == [3]
    _no_leftovers()


# -- failures --------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["keys", "update", "sink"])
def test_user_function_error_surfaces_as_operator_error(where):
    flow = _failing_flow(where)
    box = _run_bounded(lambda: sn.run(flow, parallelism=3, reconfigure=[(1000, 2), (3000, 4)],
                                      capacity=20, batch=10, **PROC), 60)
    err = box.get("error")
    assert isinstance(err, OperatorError), box
    assert "boom" in str(err) or "division" in str(err)
    if where == "update":  # raised in a channel process: same operator, tuple and cause
        assert err.operator == "agg" and err.ts > 2000 and err.payload["k"] == 7
        assert "ZeroDivisionError: boom" in str(err)
        assert isinstance(err.__cause__, ZeroDivisionError)
    _no_leftovers()


def test_channel_process_that_dies_stops_the_run():
    recs = [{"ts": t, "k": t % 13} for t in range(3000)]
    flow = sf.Flow("die")

    def die(a, t):
        if t["ts"] == 1500:
            os._exit(3)  # no exception, no message: the process just vanishes
        return a + 1

    flow.source(sf.io.iterable(recs)).aggregate(size=100, keys=lambda t: {t["k"]},
                                                init=lambda: 0, update=die).collect()
    box = _run_bounded(lambda: sn.run(flow, parallelism=2, capacity=20, batch=10, **PROC), 60)
    assert isinstance(box.get("error"), RuntimeError), box
    assert "exited (code 3)" in str(box["error"])
    _no_leftovers()


def test_unshippable_operator_is_named():
    lock = threading.Lock()
    flow = sf.Flow("lock")
    flow.source(sf.io.iterable([{"ts": 1, "k": 1}])).aggregate(
        size=10, keys=lambda t: {t["k"]}, init=lambda: 0,
        update=lambda a, t: a + (1 if lock else 0), name="locked").collect()
    with pytest.raises(FlowDefinitionError, match="'locked'"):
        sn.run(flow, **PROC)
    sn.run(flow)  # threads need no pickling


def test_unpicklable_state_fails_the_migration_without_hanging():
    recs = [{"ts": t, "k": t % 40} for t in range(2000)]
    flow = sf.Flow("lock")
    flow.source(sf.io.iterable(recs)).aggregate(
        size=10_000, keys=lambda t: {t["k"]}, init=lambda: [threading.Lock(), 0],
        update=lambda a, t: [a[0], a[1] + 1]).collect()
    box = _run_bounded(lambda: sn.run(flow, parallelism=2, reconfigure=[(1000, 4)], **PROC), 60)
    assert isinstance(box.get("error"), TypeError), box
    _no_leftovers()
