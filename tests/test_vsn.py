"""The VSN executor against the reference executor (STRETCH Alg. 4–6, Theorems 3–4)."""

import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import (
    QUERY_PARAMS,
    TWEET_QUERIES,
    assert_same_as_reference,
    diff,
    multiset,
    query_flow,
    run_query,
    schedules,
)
from stretchflow.executors import vsn
from stretchflow.executors.vsn import VSNExecutor
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.queries import build_query


def tweet_records(seed, rows, rate):
    return tweets(rows, seed=seed, rate=rate, vocabulary=40, hashtags=8,
                  gap_prob=0.02, gap_ms=(2_000, 9_000)).to_pylist()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 8),
       st.data())
def test_tweet_queries_match_reference(query, seed, p0, data):
    recs = tweet_records(seed, data.draw(st.integers(0, 300)), rate=200)
    schedule = data.draw(schedules(len(recs), 8, max_steps=6))
    n = max([p0] + [p for _, p in schedule])
    assert_same_as_reference(query_flow(query, [recs]), "vsn", parallelism=p0,
                             max_parallelism=n, reconfigure=schedule)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 8), st.data())
def test_scalejoin_matches_reference(seed, p0, data):
    rows = data.draw(st.integers(0, 40))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50))
    schedule = data.draw(schedules(2 * rows, 8, max_steps=6))
    n = max([p0] + [p for _, p in schedule])
    keys = data.draw(st.sampled_from([1000, 7, 32]))
    assert_same_as_reference(query_flow("scalejoin", [left, right],
                                        {**QUERY_PARAMS["scalejoin"], "keys": keys}), "vsn",
                             parallelism=p0, max_parallelism=n, reconfigure=schedule)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 8), st.data())
def test_forward_matches_reference(seed, p0, data):
    rows = data.draw(st.integers(0, 150))
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=300))
    schedule = data.draw(schedules(2 * rows, 8, max_steps=6))
    n = max([p0] + [p for _, p in schedule])
    assert_same_as_reference(query_flow("forward", [left, right]), "vsn", parallelism=p0,
                             max_parallelism=n, reconfigure=schedule)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 8), st.data())
def test_hundreds_of_random_schedules(seed, p0, data):
    recs = tweet_records(seed, 400, rate=300)
    schedule = data.draw(schedules(len(recs), 8, max_steps=6))
    n = max([p0] + [p for _, p in schedule])
    res = assert_same_as_reference(query_flow("wordcount", [recs]), "vsn",
                                   parallelism=p0, max_parallelism=n, reconfigure=schedule)
    for r in res.extra["reconfigurations"]:
        assert r["applied"] or r["note"]


def test_reconfigurations_are_applied_and_logged():
    recs = tweet_records(1, 2000, rate=500)
    schedule = [(0, 2), (300, 4), (700, 1), (1200, 3), (1200, 5)]
    res = assert_same_as_reference(query_flow("wordcount", [recs]), "vsn",
                                   parallelism=1, max_parallelism=5, reconfigure=schedule)
    log = res.extra["reconfigurations"]
    assert [r["parallelism_after"] for r in log] == [2, 4, 1, 3, 5]
    applied = [r for r in log if r["applied"]]
    assert len(applied) >= 3
    stamps = [t["ts"] for t in recs]
    for r in applied:
        # applied inside the run, at a tuple of the input (issue #20: was duration_ms >= 0)
        assert 0 < r["duration_ms"] <= res.elapsed * 1000
        assert min(stamps) <= r["trigger_ts"] <= max(stamps)
        assert sum(r["key_groups_per_instance"].values()) > 0
    # two requests before any tuple could trigger the first: the latest wins (Theorem 4)
    assert log[3]["applied"] is False and "superseded" in log[3]["note"]
    assert res.extra["parallelism"] == {"wordcount": 5}


class Tracking(sf.OPlus):
    """Records the identity of every window state it creates and sees at expiry."""

    def __init__(self):
        super().__init__(size=800, slide=200, keys=lambda t, i: set(t["text"].split()))
        self.created = {}
        self.lock = threading.Lock()
        self.mismatches = []

    def init(self):
        return {"n": 0}

    def update(self, ws, ts, value, i):
        st_ = ws.states[0]
        with self.lock:
            self.created.setdefault((ws.key, ws.l), id(st_))
            if self.created[(ws.key, ws.l)] != id(st_):
                self.mismatches.append((ws.key, ws.l))
        st_["n"] += 1

    def output(self, ws):
        with self.lock:
            if self.created.get((ws.key, ws.l)) != id(ws.states[0]):
                self.mismatches.append((ws.key, ws.l))
        return [{"k": ws.key, "n": ws.states[0]["n"]}]


def test_reconfiguration_never_copies_state():
    recs = tweet_records(5, 1500, rate=400)
    op = Tracking()
    flow = sf.Flow()
    flow.source(sf.io.iterable(recs)).oplus(op).collect()
    res = flow.run(engine="vsn", parallelism=2, max_parallelism=6,
                   reconfigure=[(200, 5), (500, 1), (800, 6), (1100, 3)])
    assert sum(r["applied"] for r in res.extra["reconfigurations"]) >= 3
    assert op.created and not op.mismatches


def test_reconfigure_from_another_thread_while_running():
    recs = tweet_records(2, 3000, rate=1000)
    done = []

    def driver(ex):
        def go():
            for p in (3, 1, 4, 2):
                done.extend(ex.reconfigure(p))
        threading.Thread(target=go, daemon=True).start()

    ref, _ = run_query("wordcount", [recs])
    flow = sf.Flow()
    col = build_query("wordcount", [flow.source(sf.io.iterable(recs))],
                      **QUERY_PARAMS["wordcount"]).collect()
    VSNExecutor(flow, parallelism=2, max_parallelism=4, on_start=driver).run()
    assert multiset(col) == multiset(ref)
    for rec in done:  # each call returned once its reconfiguration was settled
        assert rec.done.is_set()
        assert rec.applied or rec.note


def test_reconfiguration_does_not_wait_for_an_idle_source():
    """The control tuple goes into ESG_in at once (Inlet.send_control): with the source
    silent, a reconfiguration still applies, and the output is still the reference's."""
    recs = tweet_records(6, 600, rate=300)
    half = threading.Event()
    resume = threading.Event()

    def paused():
        for i, r in enumerate(recs):
            if i == len(recs) // 2:
                half.set()
                assert resume.wait(60)
            yield r

    applied = []

    def driver(ex):
        def go():
            half.wait(60)
            for p in (4, 1, 3):
                applied.append(ex.reconfigure(p)[0])  # returns once applied
            resume.set()
        threading.Thread(target=go, daemon=True).start()

    ref, _ = run_query("wordcount", [recs])
    flow = sf.Flow()
    col = build_query("wordcount", [flow.source(sf.io.iterable(paused))],
                      **QUERY_PARAMS["wordcount"]).collect()
    VSNExecutor(flow, parallelism=2, max_parallelism=4, on_start=driver).run()
    assert [r.applied for r in applied] == [True, True, True]
    assert all(r.trigger_ts <= recs[len(recs) // 2]["ts"] for r in applied)
    assert multiset(col) == multiset(ref)


def test_chained_operators_and_stateless_on_upstream_threads():
    recs = tweet_records(3, 800, rate=300)

    def build(flow):
        counts = build_query("wordcount", [flow.source(sf.io.iterable(recs))], size=1000,
                             slide=500)
        big = counts.filter(lambda r: r["count"] > 1).map(lambda r: {"w": r["word"]})
        return big.aggregate(size=4000, slide=2000, keys=lambda r: {r["w"][0]}, init=int,
                             update=lambda a, r: a + 1,
                             output=lambda k, a: {"letter": k, "words": a}).collect()

    f1, f2 = sf.Flow(), sf.Flow()
    c1, c2 = build(f1), build(f2)
    f1.run()
    f2.run(engine="vsn", parallelism=3, max_parallelism=4, reconfigure=[(100, 1), (400, 4)])
    assert multiset(c2.items) == multiset(c1.items)
    assert c1.items


def test_fan_out_to_several_sinks():
    recs = tweet_records(4, 500, rate=300)
    outs = []
    for engine in ("reference", "vsn"):
        flow = sf.Flow()
        s = flow.source(sf.io.iterable(recs))
        a = build_query("wordcount", [s], size=1000, slide=1000).collect()
        b = s.filter(lambda t: "#" in t["text"]).collect()
        flow.run(engine=engine, **({"parallelism": 2} if engine == "vsn" else {}))
        outs.append((multiset(a.items), multiset(b.items)))
    assert outs[0] == outs[1]


def test_user_error_stops_the_query():
    recs = [{"ts": i, "text": "a b"} for i in range(2000)] + [{"ts": 2000, "text": None}]
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable(recs))]).collect()
    with pytest.raises(sf.OperatorError, match="wordcount.*ts=2000"):
        flow.run(engine="vsn", parallelism=3)


def test_source_error_stops_the_query():
    recs = [{"ts": i, "text": "a"} for i in range(1000)] + [{"ts": 5, "text": "late"}]
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable(recs, name="tw"))]).collect()
    with pytest.raises(sf.SourceError, match="tw.*goes back"):
        flow.run(engine="vsn", parallelism=2)


def test_bad_parallelism():
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable([]))]).collect()
    with pytest.raises(sf.FlowDefinitionError, match="max_parallelism"):
        flow.run(engine="vsn", parallelism=4, max_parallelism=2)
    with pytest.raises(sf.FlowDefinitionError, match="max_parallelism"):
        flow.run(engine="vsn", parallelism=1, max_parallelism=2, reconfigure=[(5, 3)])


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("SF_SHAKE", "60")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 8),
       st.data())
def test_schedules_under_frequent_thread_switches(frequent_switches, query, seed, p0, data):
    recs = tweet_records(seed, data.draw(st.integers(50, 300)), rate=300)
    schedule = data.draw(schedules(len(recs), 8, max_steps=6))
    n = max([p0] + [p for _, p in schedule])
    assert_same_as_reference(query_flow(query, [recs]), "vsn", parallelism=p0,
                             max_parallelism=n, reconfigure=schedule)


class Scripted:
    """A controller that asks for the parallelisms it is given, one per period."""

    def __init__(self, *targets):
        from stretchflow.elastic.controller import Decision

        self.decisions = [Decision(p, "scripted") for p in targets]
        self.seen = []

    def observe(self, metrics):
        self.seen.append(metrics)
        return self.decisions.pop(0) if self.decisions else None

    def reset(self):
        pass


def test_controller_drives_reconfiguration_with_balanced_f_mu():
    recs = tweet_records(6, 3000, rate=500)
    ref, _ = run_query("wordcount", [recs])
    flow = sf.Flow()
    src = sf.io.iterable(recs).at_rate(3000)  # about one second: several controller periods
    col = build_query("wordcount", [flow.source(src)], **QUERY_PARAMS["wordcount"]).collect()
    ctl = Scripted(3, 1)
    res = VSNExecutor(flow, parallelism=2, max_parallelism=4, controller=ctl,
                      metrics_interval=0.2).run()
    assert multiset(col) == multiset(ref)
    assert ctl.seen and ctl.seen[0].parallelism == 2
    assert len(ctl.seen[0].per_instance_load) == 2
    applied = [r for r in res.extra["reconfigurations"] if r["applied"]]
    assert [r["parallelism_after"] for r in applied] == [3, 1]
    assert set(applied[0]["key_groups_per_instance"]) == {0, 1, 2}


def test_threshold_controller_by_name():
    recs = tweet_records(7, 2000, rate=500)
    ref, _ = run_query("wordcount", [recs])
    flow = sf.Flow()
    src = sf.io.iterable(recs).at_rate(4000)
    col = build_query("wordcount", [flow.source(src)], **QUERY_PARAMS["wordcount"]).collect()
    res = flow.run(engine="vsn", parallelism=4, max_parallelism=8, controller="threshold",
                   metrics_interval=0.2)
    assert multiset(col) == multiset(ref)
    assert res.extra["metrics"], "the controller saw no period"


def test_level_controller_expands_a_congested_operator():
    """SASO's level controller on VSN (P1, expand on congestion): a source blocked on a full
    ESG_in is congestion, measured from the ESG's blocked time, and the operator grows."""
    import time as _time

    from stretchflow.elastic import LevelController

    class Slow(sf.OPlus):
        def __init__(self):
            super().__init__(size=10, slide=10, window_type="multi")

        def keys(self, t, i):
            return {t["k"]}

        def update(self, ws, ts, value, i):
            _time.sleep(0.0002)  # releases the GIL: more instances really go faster

    rows = [{"ts": t // 20, "k": t % 64} for t in range(12_000)]
    flow = sf.Flow("congested")
    flow.source(sf.io.iterable(rows)).oplus(Slow()).collect()
    res = flow.run(engine="vsn", parallelism=1, max_parallelism=4,
                   controller=LevelController(max_parallelism=4, period=0.3),
                   metrics_interval=0.3, capacity=256)
    congestion = [m.get("congestion", 0) for m in res.extra["metrics"]]
    applied = [r for r in res.extra["reconfigurations"] if r["applied"]]
    assert applied and applied[0]["parallelism_after"] > 1, (congestion, applied)


@pytest.mark.parametrize("through", ["map", "oplus"])
def test_a_live_source_is_pushed_without_waiting_for_a_full_batch(through):
    """A source that says ``live = True`` (like io/traffic.py's DelayedReplay) has each tuple
    pushed at once: this source stops after a few tuples until the sink has seen their
    outputs, which a batch held back for more tuples (or for its delay, checked at the next
    tuple) would never allow. The 60 s wait only keeps a failure from hanging."""
    first = 10
    seen = threading.Event()
    waited = []

    def gen():
        for t in range(first):
            yield {"ts": t, "v": t}
        waited.append(seen.wait(60))
        for t in range(first, 3 * first):
            yield {"ts": t, "v": t}

    out = []

    def write(ts, p):
        out.append(p["v"])
        if p["v"] == first - 2:  # its output is released by the source's last tuple so far
            seen.set()

    src = sf.io.iterable(gen, name="live")
    src.live = True
    flow = sf.Flow("live")
    s = flow.source(src)
    if through == "map":
        s = s.map(lambda r: r)
    else:
        from stretchflow.queries.scalejoin import Forward

        s = s.oplus(Forward(inputs=1))
    s.sink(sf.io.callback(write))
    flow.run(engine="vsn", parallelism=2)
    assert waited == [True]
    assert sorted(out) == list(range(3 * first))


def test_parallelism_series_and_latency_of_the_whole_run():
    recs = tweet_records(8, 2000, rate=500)
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable(recs))],
                **QUERY_PARAMS["wordcount"]).collect()
    res = flow.run(engine="vsn", parallelism=1, max_parallelism=4,
                   reconfigure=[(300, 3), (900, 2)], key_groups=64)
    series = res.extra["parallelism_series"]["wordcount"]
    assert [p for _, p in series] == [1, 3, 2]
    times = [t for t, _ in series]
    assert times[0] == 0.0 and times == sorted(times)
    lat = res.extra["latency_ms"]
    assert lat["samples"] > 0 and lat["p50"] <= lat["p99"] <= lat["max"]
    assert res.extra["controller"] is None
    assert res.extra["reconfigurations"][0]["key_groups_per_instance"] == {0: 22, 1: 21, 2: 21}


def test_controller_options():
    def flow():
        f = sf.Flow()
        build_query("wordcount", [f.source(sf.io.iterable(tweet_records(9, 200, rate=500)))],
                    **QUERY_PARAMS["wordcount"]).collect()
        return f

    with pytest.raises(sf.FlowDefinitionError, match="controller_options need"):
        flow().run(engine="vsn", controller_options={"upper": 0.9})
    with pytest.raises(sf.FlowDefinitionError, match="given by name"):
        flow().run(engine="vsn", controller=Scripted(), controller_options={"upper": 0.9})
    with pytest.raises(sf.FlowDefinitionError, match="threshold"):
        flow().run(engine="vsn", controller="threshold", controller_options={"nope": 1})
    res = flow().run(engine="vsn", parallelism=2, max_parallelism=4, controller="threshold",
                     controller_options={"upper": 0.95, "lower": 0.1})
    assert res.extra["controller"] == "threshold"


def test_an_error_in_the_barrier_action_is_the_one_reported(monkeypatch):
    """The barrier action records its error before the barrier breaks: the run reports it,
    not the broken barrier the other instances see."""
    from stretchflow.executors.vsn import VSNInstance

    def join(self, acting, ctrl):
        raise ZeroDivisionError("join failed")

    monkeypatch.setattr(VSNInstance, "join", join)
    recs = tweet_records(10, 1000, rate=500)
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable(recs))],
                **QUERY_PARAMS["wordcount"]).collect()
    with pytest.raises(ZeroDivisionError, match="join failed"):
        flow.run(engine="vsn", parallelism=3, max_parallelism=4, reconfigure=[(300, 4)])


# -- the spread bound (issue #16) -------------------------------------------------------------
def run_vsn_same_as_reference(query, inputs, **options):
    """``query`` over ``inputs`` on vsn.run (options the engine spec may not list yet) and on
    the reference: same per-timestamp multisets, non-decreasing timestamps."""
    ref, _ = run_query(query, inputs)
    flow, (col,) = query_flow(query, inputs)()
    res = vsn.run(flow, **options)
    tss = [ts for ts, _ in col.items]
    assert tss == sorted(tss), f"{options}: output goes back in time"
    got, want = multiset(col.items), multiset(ref)
    assert got == want, f"{options}: {diff(got, want)}"
    return res


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 8),
       st.sampled_from([1, 2, 3, 8, 64, 0]), st.data())
def test_random_schedules_with_a_tight_spread_bound(query, seed, p0, spread, data):
    """Many rounds of random schedules with instances held back after 1..64 tuples (0: no
    bound): outputs equal the reference's and no run deadlocks (the slowest instance is
    never held back; leaving instances release the others)."""
    recs = tweet_records(seed, data.draw(st.integers(0, 400)), rate=300)
    schedule = data.draw(schedules(len(recs), 8, max_steps=8))
    n = max([p0] + [p for _, p in schedule])
    res = run_vsn_same_as_reference(query, [recs], parallelism=p0, max_parallelism=n,
                                    reconfigure=schedule, max_spread=spread)
    for r in res.extra["reconfigurations"]:
        assert r["applied"] or r["note"]


def test_spread_never_exceeds_the_bound_while_reconfiguring():
    recs = tweet_records(5, 3000, rate=500)
    seen: list[int] = []
    stop = threading.Event()

    def watch(ex):
        esg = next(iter(ex.ops.values())).inlet.esg
        assert esg.max_spread == 5

        def loop():
            while not stop.is_set():
                seen.append(esg.stats()["spread"])
        threading.Thread(target=loop, daemon=True).start()

    schedule = [(k * 200, p) for k, p in enumerate([4, 1, 8, 2, 8, 1, 3, 6, 1], start=1)]
    try:
        res = run_vsn_same_as_reference("wordcount", [recs], parallelism=2,
                                        max_parallelism=8, reconfigure=schedule,
                                        max_spread=5, on_start=watch)
    finally:
        stop.set()
    assert seen and max(seen) <= 5
    assert sum(r["applied"] for r in res.extra["reconfigurations"]) >= 5


def test_scalejoin_with_a_spread_bound_below_its_run_size():
    left, right = (t.to_pylist() for t in bandjoin(60, seed=3, rate=50))
    run_vsn_same_as_reference("scalejoin", [left, right], parallelism=3, max_parallelism=4,
                              reconfigure=[(20, 1), (50, 4), (90, 2)], max_spread=7)


def test_default_and_bad_max_spread():
    flow, _ = query_flow("wordcount", [tweet_records(1, 10, 100)])()
    ex = VSNExecutor(flow, parallelism=2)
    (vop,) = ex.ops.values()
    assert vop.inlet.esg.max_spread == vsn.MAX_SPREAD
    assert ex.ops and all(vi._take <= vsn.MAX_SPREAD // 2 for vi in vop.instances)
    flow, _ = query_flow("wordcount", [tweet_records(1, 10, 100)])()
    (vop,) = VSNExecutor(flow, parallelism=2, max_spread=0).ops.values()
    assert vop.inlet.esg.max_spread is None
    for bad in (-1, 2.5, "8"):
        flow, _ = query_flow("wordcount", [tweet_records(1, 10, 100)])()
        with pytest.raises(sf.FlowDefinitionError, match="max_spread"):
            vsn.run(flow, max_spread=bad)
