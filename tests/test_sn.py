"""The SN executor against the reference executor (STRETCH Alg. 1–2, elastic-scaling §6)."""

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from columnar_cases import bounded
from conformance.contract import (
    QUERY_PARAMS,
    TWEET_QUERIES,
    assert_same_as_reference,
    multiset,
    query_flow,
    run_query,
    schedules,
)
from stretchflow.elastic.migration import MemoryStateStore, SQLiteStateStore, open_store
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.executors import sn, sn_region
from stretchflow.executors.reference import run as run_reference
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.queries import build_query
from stretchflow.queries.wordcount import tokens_of
from threadutil import within

STORES = ["memory", "sqlite"]


def same_as_reference(query, inputs, params=None, **options):
    """The sn run of a built-in query against the reference, tuple counts included."""
    return assert_same_as_reference(query_flow(query, inputs, params), "sn", check_counts=True,
                                    **options)


def tweet_records(seed, rows, rate=200):
    return tweets(rows, seed=seed, rate=rate, vocabulary=40).to_pylist()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 8),
       st.sampled_from(STORES), st.sampled_from([1, 7, 256]), st.data())
def test_tweet_queries_match_reference(query, seed, p0, store, batch, data):
    recs = tweet_records(seed, data.draw(st.integers(0, 300)))
    schedule = data.draw(schedules(len(recs), 8, max_steps=4))
    res = same_as_reference(query, [recs], parallelism=p0,
                            reconfigure=schedule, store=store, batch=batch)
    log = res.extra["reconfigurations"]
    assert len(log) == len(schedule)
    for r in log:
        assert r["applied"] == (r["count"] <= len(recs)) or r["note"]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 8), st.sampled_from(STORES), st.data())
def test_scalejoin_matches_reference(seed, p0, store, data):
    rows = data.draw(st.integers(0, 40))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50))
    schedule = data.draw(schedules(2 * rows, 8, max_steps=4))
    keys = data.draw(st.sampled_from([1000, 7, 32]))
    same_as_reference("scalejoin", [left, right], {**QUERY_PARAMS["scalejoin"], "keys": keys},
                      parallelism=p0, reconfigure=schedule, store=store, batch=16)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 8), st.data())
def test_forward_matches_reference(seed, p0, data):
    rows = data.draw(st.integers(0, 150))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=300))
    schedule = data.draw(schedules(2 * rows, 8, max_steps=4))
    same_as_reference("forward", [left, right], parallelism=p0,
                      reconfigure=schedule, batch=32)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 8),
       st.sampled_from(STORES), st.data())
def test_many_random_schedules(query, seed, p0, store, data):
    recs = tweet_records(seed, 1000, rate=300)
    schedule = data.draw(schedules(len(recs), 8, max_steps=8))
    same_as_reference(query, [recs], parallelism=p0,
                      reconfigure=schedule, store=store, batch=64)


def test_stateless_chains_before_and_after():
    recs = tweet_records(3, 600)

    def build(flow):
        s = flow.source(sf.io.iterable(recs, name="in0"))
        s = s.filter(lambda t: len(t["text"]) > 5).map(lambda t: {**t, "text": t["text"]})
        out = build_query("wordcount", [s], size=2000, slide=500)
        a = out.map(lambda r: {**r, "twice": 2 * r["count"]}).collect()
        b = out.filter(lambda r: r["count"] > 1).collect()
        return a, b

    f1, f2 = sf.Flow("a"), sf.Flow("b")
    ra, rb = build(f1)
    ga, gb = build(f2)
    run_reference(f1)
    sn.run(f2, parallelism=3, reconfigure=[(200, 6), (400, 2)])
    assert multiset(ga.items) == multiset(ra.items)
    assert multiset(gb.items) == multiset(rb.items)


# -- duplication (forwardSN sends a tuple to every channel owning one of its keys) -----------
def test_duplication_factor_is_distinct_channels_per_tuple():
    recs = tweet_records(5, 800)
    p, groups = 5, 64
    _, res = run_query("wordcount", [recs], None, "sn", parallelism=p,
                       key_groups=groups)
    assign = sn.group_assignment(p, groups)
    brute = sum(len({assign[hash(k) % groups] for k in tokens_of(r["text"])}) for r in recs)
    assert res.extra["tuples_sent"] == brute
    assert res.extra["tuples_routed"] == len(recs)
    assert res.extra["duplication_factor"] == pytest.approx(brute / len(recs))
    assert res.extra["duplication_factor"] > 1
    _, one = run_query("wordcount", [recs], None, "sn", parallelism=1)
    with_keys = sum(1 for r in recs if tokens_of(r["text"]))  # a tuple without keys goes nowhere
    assert one.extra["tuples_sent"] == with_keys


def test_group_assignment_is_consistent():
    """Growing the ring moves groups only to the new channel (elastic-scaling §6.2)."""
    for n in range(1, 8):
        a, b = sn.group_assignment(n, 256), sn.group_assignment(n + 1, 256)
        assert all(x == y or y == n for x, y in zip(a, b, strict=True))
        assert set(b) == set(range(n + 1))


# -- migration ---------------------------------------------------------------------------------
@pytest.mark.parametrize("store", STORES)
def test_migrated_state_continues(store):
    """One window holds every tuple; the key groups move several times, yet the counts at the
    end equal the number of tuples per key: the window state arrived intact."""
    n = 3000
    recs = [{"ts": t, "k": t % 50} for t in range(n)]
    flow = sf.Flow("count")
    col = flow.source(sf.io.iterable(recs)).aggregate(
        size=10 * n, keys=lambda t: {t["k"]}, init=lambda: 0, update=lambda a, t: a + 1,
        output=lambda k, a: {"k": k, "n": a}).collect()
    res = sn.run(flow, parallelism=2, reconfigure=[(500, 6), (1500, 1), (2500, 4)],
                 store=store, key_groups=32, batch=50)
    assert sorted((p["k"], p["n"]) for _, p in col.items) == [(k, n // 50) for k in range(50)]
    log = res.extra["reconfigurations"]
    assert [r["parallelism_after"] for r in log] == [6, 1, 4]
    for r in log:
        assert r["applied"] and r["bytes_moved"] > 0
        assert r["groups_moved"] > 0 and r["trigger_ts"] == r["count"] - 1
        # a migration is timed: it moved state, so it took some time, and it happened inside
        # the run (each is a part of the run's elapsed time, so are they all together)
        assert isinstance(r["duration_ms"], float) and 0 < r["duration_ms"]
    assert res.extra["bytes_moved"] == sum(r["bytes_moved"] for r in log)
    assert res.extra["migration_time_ms"] == sum(r["duration_ms"] for r in log)
    assert res.extra["migration_time_ms"] < res.elapsed * 1000
    assert list(res.extra["parallelism"].values()) == [4]


@pytest.mark.parametrize("make", [MemoryStateStore, SQLiteStateStore])
def test_state_store_roundtrip(make):
    store = make()
    try:
        state = {0: {"a": [1, 2]}, 500: {"b": {"x": 3}}}
        nbytes = store.put(1, 7, state)
        assert nbytes > 0 and len(store) == 1
        assert store.take(2, 7) is None  # another epoch's blob is not visible
        got = store.take(1, 7)
        assert got == state and got is not state
        assert store.take(1, 7) is None and len(store) == 0
    finally:
        store.close()


def test_open_store():
    s, own = open_store("sqlite")
    assert isinstance(s, SQLiteStateStore) and own
    s.close()
    m = MemoryStateStore()
    assert open_store(m) == (m, False)
    with pytest.raises(ValueError):
        open_store("redis")


# -- errors --------------------------------------------------------------------------------------
def _sn_threads():
    return [t for t in threading.enumerate() if t.name.startswith("sn-")]


def _no_sn_threads(seconds: float = 5) -> None:
    """No sn thread survives a failed run: each ends within ``seconds``."""
    assert within(lambda: not _sn_threads(), seconds), f"left running: {_sn_threads()}"


def _run_bounded(fn, seconds=20):
    """Runs ``fn`` in a thread; fails the test instead of hanging it."""
    return bounded(fn, seconds, "the sn executor")


def _failing_flow(where):
    recs = [{"ts": t, "k": t % 13} for t in range(5000)]
    flow = sf.Flow("bad")
    src = flow.source(sf.io.iterable(recs))

    def boom(x):
        if x["k"] == 7 and x["ts"] > 2000:
            raise ZeroDivisionError("boom")
        return x

    if where == "chain":
        src = src.map(boom, name="pre")
    keys = (lambda t: {boom(t)["k"]}) if where == "keys" else (lambda t: {t["k"]})
    update = (lambda a, t: a + boom(t)["k"]) if where == "update" else (lambda a, t: a + 1)
    out = src.aggregate(size=100, keys=keys, init=lambda: 0, update=update,
                        output=lambda k, a: {"k": k, "n": a}, name="agg")
    if where == "sink":
        out = out.map(lambda r: 1 / (r["k"] - 7), name="post")
    out.collect()
    return flow


@pytest.mark.parametrize("where", ["keys", "update", "chain", "sink"])
def test_user_function_error_stops_everything(where):
    flow = _failing_flow(where)
    box = _run_bounded(lambda: sn.run(flow, parallelism=4, reconfigure=[(1000, 2), (3000, 6)],
                                      capacity=20, batch=10))
    assert isinstance(box.get("error"), OperatorError), box
    assert "boom" in str(box["error"]) or "division" in str(box["error"])
    _no_sn_threads()


def test_bad_options_are_rejected():
    # (flows with two O+ or a teed source, once refused here, now run: tests/test_sn_flows.py)
    agg = dict(size=10, keys=lambda t: {t["k"]}, init=lambda: 0, update=lambda a, t: a + 1)
    flow = sf.Flow("ok")
    flow.source(sf.io.iterable([{"ts": 1, "k": 1}])).aggregate(**agg).collect()
    with pytest.raises(FlowDefinitionError):
        sn.run(flow, channels="fibers")
    with pytest.raises(ValueError):  # processes migrate through a file, not process memory
        sn.run(flow, channels="processes", store="memory")
    with pytest.raises(ValueError):
        sn.run(flow, controller_options={"alpha": 0.5})
    with pytest.raises(ValueError):
        sn.run(flow, controller="bogus")
    with pytest.raises(ValueError):
        sn.run(flow, parallelism=3, max_parallelism=2)
    with pytest.raises(TypeError):
        sn.run(flow, colour="blue")


def test_explicit_watermarks_and_unsorted_source():
    """Explicit watermarks (a reordering source) reach every channel as pulses."""
    from stretchflow.eventtime import Watermark

    recs = tweet_records(11, 400)
    data = []
    for n, r in enumerate(recs):
        data.append(r)
        if n % 37 == 36:
            data.append(Watermark(r["ts"]))

    def build(flow):
        s = flow.source(sf.io.iterable(data, sorted=False, name="in0"))
        return build_query("longest-hashtag", [s], size=2000, slide=500).collect()

    f1, f2 = sf.Flow("a"), sf.Flow("b")
    ref, got = build(f1), build(f2)
    run_reference(f1)
    sn.run(f2, parallelism=4, reconfigure=[(100, 2), (300, 7)], batch=1000)
    assert multiset(got.items) == multiset(ref.items)
    assert [ts for ts, _ in got.items] == sorted(ts for ts, _ in got.items)


def test_races_under_frequent_thread_switches(frequent_switches):
    recs = tweet_records(2, 1500, rate=400)
    same_as_reference("wordcount", [recs], parallelism=3,
                      reconfigure=[(0, 5), (200, 8), (200, 1), (900, 6)], batch=5,
                      capacity=5, store="sqlite")


def test_single_window_sets_slide_to_the_end_on_every_channel():
    """At the end of input a `single` window set keeps sliding (emitting f_O) up to the latest
    window any tuple fell in — a channel must know that tuple even if another channel got it."""
    recs = [{"ts": t * 97, "k": (t * 7) % 11} for t in range(300)]

    def build(flow):
        return flow.source(sf.io.iterable(recs)).aggregate(
            size=2000, slide=500, window_type="single", keys=lambda t: {t["k"]},
            init=lambda: 0, update=lambda a, t: a + 1,
            output=lambda k, a: {"k": k, "n": a}).collect()

    f1, f2 = sf.Flow("a"), sf.Flow("b")
    ref, got = build(f1), build(f2)
    run_reference(f1)
    sn.run(f2, parallelism=4, reconfigure=[(150, 2), (300, 6)])
    assert multiset(got.items) == multiset(ref.items)


def test_slow_source_is_pulsed_by_time():
    """A paced source: outputs reach the sink before the end of input (time-based pulses).
    The batch is larger than the input, so only a pulse can flush before the end. Instead of
    timing the first output, the source holds back its last tuples until an output arrived
    (each held at most 1 s, so a run without pulses ends, and fails, after 10 s)."""
    recs = [{"ts": t * 100, "k": t % 3} for t in range(40)]
    read = [0]  # source tuples handed to the engine so far
    seen = []  # (ts, source tuples read when it reached the sink)
    arrived = threading.Event()

    def source():
        for i, r in enumerate(recs):
            if i >= 30:
                # the wait is itself time passing: the next tuple's pulse check then flushes
                arrived.wait(1.0)
            read[0] += 1
            yield r

    def sink(ts, p):
        seen.append((ts, read[0]))
        arrived.set()

    flow = sf.Flow("slow")
    flow.source(sf.io.iterable(source()).at_rate(400)).aggregate(
        size=500, keys=lambda t: {t["k"]}, init=lambda: 0, update=lambda a, t: a + 1,
    ).sink(sf.io.sinks.Callback(sink))
    sn.run(flow, parallelism=2, batch=10_000, pulse_ms=10)
    assert len(seen) == 24  # 8 windows x 3 keys
    assert seen[0][1] < len(recs), "the first output waited for the end of input"


def test_reconfigure_counts_source_tuples():
    """COUNT counts tuples of all sources, also those a stateless chain drops before the O+."""
    recs = [{"ts": t, "k": t % 5} for t in range(400)]
    flow = sf.Flow("f")
    flow.source(sf.io.iterable(recs)).filter(lambda t: t["ts"] % 2 == 0).aggregate(
        size=50, keys=lambda t: {t["k"]}, init=lambda: 0, update=lambda a, t: a + 1).collect()
    res = sn.run(flow, parallelism=1, reconfigure=[(0, 2), (101, 3), (102, 4), (400, 2),
                                                   (401, 5)])
    log = res.extra["reconfigurations"]
    assert [(r["count"], r["applied"], r["trigger_ts"]) for r in log] == [
        (0, True, None), (101, True, 100), (102, True, 100), (400, True, 398), (401, False, None)]
    assert res.extra["tuples_routed"] == 200 and res.tuples_in == {"iterable": 400}


def test_reconfigure_before_the_first_tuple_races_the_merger(monkeypatch):
    """COUNT 0 migrates while the merger starts: it must start from the initial channels
    (a late merger, forced here, once saw the migrated channel set)."""
    merger = sn_region.Region._merger

    def late_merger(self):
        time.sleep(0.05)  # the late start is the race under test
        return merger(self)

    monkeypatch.setattr(sn_region.Region, "_merger", late_merger)
    recs = tweet_records(4, 50)
    for schedule in ([(0, 1)], [(0, 6), (0, 2)]):
        same_as_reference("wordcount", [recs],
                          parallelism=4, reconfigure=schedule)


@pytest.mark.parametrize("store", STORES)
def test_unpicklable_state_fails_the_migration_without_hanging(store):
    recs = [{"ts": t, "k": t % 40} for t in range(2000)]
    flow = sf.Flow("lock")
    flow.source(sf.io.iterable(recs)).aggregate(
        size=10_000, keys=lambda t: {t["k"]}, init=lambda: [threading.Lock(), 0],
        update=lambda a, t: [a[0], a[1] + 1]).collect()
    box = _run_bounded(lambda: sn.run(flow, parallelism=2, reconfigure=[(1000, 5)],
                                      store=store))
    assert isinstance(box.get("error"), TypeError), box  # cannot pickle '_thread.lock'
    _no_sn_threads()
