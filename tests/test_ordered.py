"""The ordered multicore executor against the reference executor (the oracle)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import checked_multiset
from stretchflow.errors import OperatorError
from stretchflow.executors import ordered
from stretchflow.executors.scheduler import POLICIES, Candidate, OpStats, Scheduler
from stretchflow.io.generators import tweets
from stretchflow.queries import build_query

SCHEDULERS = sorted(POLICIES)




Build = Callable[[], tuple[sf.Flow, Any]]


def _check(build: Build, **opts: Any) -> list[tuple[int, Any]]:
    """Runs the flow on both engines; the ordered one must match the reference exactly."""
    flow, col = build()
    ref_res = flow.run()
    expected = list(col.items)
    flow2, col2 = build()
    res = ordered.run(flow2, **opts)
    got = list(col2.items)
    assert checked_multiset(got) == checked_multiset(expected)
    assert res.tuples_in == ref_res.tuples_in
    assert res.tuples_out == ref_res.tuples_out
    return got


def _tweets(rows: int, seed: int) -> list[dict]:
    return tweets(rows, seed=seed, rate=200, vocabulary=40).to_pylist()


def _query_flow(name: str, data: list[dict], **params: Any) -> Build:
    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow(name)
        s = flow.source(sf.io.iterable(data))
        return flow, build_query(name, [s], **params).collect()

    return build


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("query", ["wordcount", "paircount", "longest-hashtag"])
@pytest.mark.parametrize("workers", [1, 3, 8])
def test_builtin_queries(query: str, workers: int, scheduler: str) -> None:
    data = _tweets(600, seed=workers)
    _check(_query_flow(query, data, size=2000, slide=500), parallelism=workers, scheduler=scheduler)


@pytest.mark.parametrize("workers", [2, 5])
def test_stateless_then_query_with_key_groups(workers: int) -> None:
    data = _tweets(500, seed=11)

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("pre")
        s = flow.source(sf.io.iterable(data))
        s = s.filter(lambda t: len(t["text"]) % 3 != 0).map(
            lambda t: {**t, "text": t["text"].upper()})
        return flow, build_query("wordcount", [s], size=1000, slide=250).collect()

    _check(build, parallelism=workers, key_groups=3, max_batch=7)


def _two_oplus() -> Build:
    data = _tweets(800, seed=3)

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("two")
        s = flow.source(sf.io.iterable(data))
        counts = build_query("wordcount", [s], size=2000, slide=500)
        top = counts.aggregate(size=1000, slide=500, keys=lambda t: {len(t["word"])},
                               init=lambda: 0, update=lambda acc, t: acc + t["count"],
                               output=lambda k, acc: {"len": k, "total": acc})
        return flow, top.collect()

    return build


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("workers", [1, 4, 8])
def test_chain_of_two_oplus(workers: int, scheduler: str) -> None:
    got = _check(_two_oplus(), parallelism=workers, scheduler=scheduler)
    assert got


def test_watermarks_through_an_unsorted_source() -> None:
    data: list[Any] = []
    for ts in range(0, 3000, 7):
        data.append({"ts": ts + (5 if ts % 3 == 0 else 0), "k": ts % 5})
        if ts % 100 == 0:
            data.append(sf.Watermark(ts - 10))

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("wm")
        s = flow.source(sf.io.iterable(data, sorted=False))
        a = s.map(lambda t: {**t, "k2": t["k"] * 2}).aggregate(
            size=100, slide=50, keys=lambda t: {t["k2"]}, init=lambda: 0,
            update=lambda acc, t: acc + 1, output=lambda k, acc: {"k": k, "n": acc})
        return flow, a.collect()

    _check(build, parallelism=4)


def test_source_straight_to_sinks() -> None:
    data = [{"ts": i, "v": i} for i in range(100)]

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("copy")
        s = flow.source(sf.io.iterable(data))
        c = s.collect()
        s.collect()
        return flow, c

    _check(build, parallelism=3)


_STAGES = st.lists(
    st.sampled_from(["map", "filter", "flat_map", "agg"]), min_size=1, max_size=5
)


def _random_chain(kinds: list[str], n: int, seed: int) -> Build:
    data = [{"ts": i * 3 + (seed % 3), "v": (i * 7919 + seed) % 101} for i in range(n)]

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("random")
        s = flow.source(sf.io.iterable(data))
        for k, kind in enumerate(kinds):
            if kind == "map":
                s = s.map(lambda t, k=k: {"v": (t["v"] * 3 + k) % 101})
            elif kind == "filter":
                s = s.filter(lambda t, k=k: (t["v"] + k) % 3 != 0)
            elif kind == "flat_map":
                s = s.flat_map(lambda t: [{"v": t["v"]}] * (t["v"] % 3))
            else:
                s = s.aggregate(size=20, slide=10, keys=lambda t: {t["v"] % 4},
                                init=lambda: 0, update=lambda a, t: a + t["v"],
                                output=lambda key, a: {"v": (key * 31 + a) % 101})
        return flow, s.collect()

    return build


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=_STAGES, n=st.integers(0, 150), seed=st.integers(0, 1000),
       workers=st.integers(1, 6), scheduler=st.sampled_from(SCHEDULERS),
       max_batch=st.integers(1, 16), capacity=st.integers(1, 32))
def test_random_chains(kinds: list[str], n: int, seed: int, workers: int, scheduler: str,
                       max_batch: int, capacity: int) -> None:
    _check(_random_chain(kinds, n, seed), parallelism=workers, scheduler=scheduler,
           max_batch=max_batch, capacity=capacity)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_stress_many_workers_tiny_queues(scheduler: str) -> None:
    data = [{"ts": i // 3, "v": i} for i in range(3000)]

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("stress")
        s = flow.source(sf.io.iterable(data))
        s = s.map(lambda t: {"v": t["v"]}).flat_map(
            lambda t: [{"v": t["v"], "s": 1}, {"v": t["v"], "s": -1}])
        s = s.filter(lambda t: (t["v"] * t["s"]) % 7 != 1)
        return flow, s.collect()

    got = _check(build, parallelism=16, scheduler=scheduler, capacity=2, max_batch=3)
    # no loss, no duplication: every surviving value exactly once
    vs = [(p["v"], p["s"]) for _, p in got]
    assert len(vs) == len(set(vs))
    assert set(vs) == {(i, s) for i in range(3000) for s in (1, -1) if (i * s) % 7 != 1}


def test_stress_oplus_many_workers_tiny_queues() -> None:
    _check(_query_flow("wordcount", _tweets(400, seed=5), size=1000, slide=500),
           parallelism=16, capacity=1, max_batch=2)


def _run_in_thread(fn: Callable[[], Any], timeout: float = 20) -> BaseException | None:
    """Runs ``fn``; fails the test if it hangs; returns what it raised."""
    box: list[BaseException | None] = [None]

    def target() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box[0] = e

    before = threading.active_count()
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the run hangs"
    assert threading.active_count() <= before, "worker threads left behind"
    return box[0]


@pytest.mark.parametrize("where", ["map", "filter", "keys", "update", "output"])
@pytest.mark.parametrize("workers", [1, 6])
def test_user_error_raises_operator_error(where: str, workers: int) -> None:
    data = [{"ts": i, "v": i} for i in range(2000)]

    def boom(cond: str) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            if where == cond and x == 777:
                raise ZeroDivisionError("boom")
            return x

        return f

    m, flt, ky, up, out = (boom(c) for c in ["map", "filter", "keys", "update", "output"])
    flow = sf.Flow("err")
    s = flow.source(sf.io.iterable(data))
    s = s.map(lambda t: {"v": m(t["v"])}).filter(lambda t: flt(t["v"]) is not None)
    s = s.aggregate(size=10, keys=lambda t: {ky(t["v"]) % 3}, init=lambda: 0,
                    update=lambda a, t: a + up(t["v"]),
                    output=lambda k, a: {"k": k, "a": out(777 if k == 2 else a)})
    s.collect()
    err = _run_in_thread(lambda: ordered.run(flow, parallelism=workers, capacity=4))
    assert isinstance(err, OperatorError), err
    assert isinstance(err.__cause__, ZeroDivisionError)


def _multi_sink_flows() -> list[Build]:
    """Flows that are not chains: a branching stream, a sink in the middle, a join."""
    def branch() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("branch")
        s = flow.source(sf.io.iterable([{"ts": i, "v": i % 7} for i in range(300)]))
        c = s.map(lambda t: {"v": t["v"] * 2}).collect()
        s.filter(lambda t: t["v"] > 2).collect()
        return flow, c

    def mid_sink() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("mid-sink")
        s = flow.source(sf.io.iterable([{"ts": i // 2, "v": i} for i in range(300)]))
        c = s.collect()
        s.map(lambda t: t).aggregate(size=10, keys=lambda t: {t["v"] % 3}, init=lambda: 0,
                                     update=lambda a, t: a + 1,
                                     output=lambda k, a: {"k": k, "n": a}).collect()
        return flow, c

    def join() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("join")
        a = flow.source(sf.io.iterable([{"ts": i, "k": i % 4} for i in range(200)]), name="a")
        b = flow.source(sf.io.iterable([{"ts": 2 * i, "k": i % 3} for i in range(150)]),
                        name="b")
        return flow, a.join(b, size=10, keys=lambda t: {t["k"]}).collect()

    return [branch, mid_sink, join]


@pytest.mark.parametrize("k", range(3))
@pytest.mark.parametrize("workers", [1, 3])
def test_flows_that_were_refused_now_run(k: int, workers: int) -> None:
    build = _multi_sink_flows()[k]
    flow, _ = build()
    ref = flow.run()
    flow2, _ = build()
    res = ordered.run(flow2, parallelism=workers)
    assert res.tuples_in == ref.tuples_in and res.tuples_out == ref.tuples_out
    assert sum(res.tuples_out.values()) > 0
    _check(build, parallelism=workers)


def test_bad_options() -> None:
    flow = sf.Flow("x")
    flow.source(sf.io.iterable([{"ts": 1}])).collect()
    with pytest.raises(ValueError, match="scheduler must be one of"):
        ordered.run(flow, parallelism=1, scheduler="nope")
    with pytest.raises(TypeError):
        ordered.run(flow, parallelism=1, bogus=1)


def test_run_result() -> None:
    flow, col = _query_flow("wordcount", _tweets(200, seed=1), size=1000, slide=500)()
    res = ordered.run(flow, parallelism=2, scheduler="ct")
    assert res.engine == "ordered"
    assert res.tuples_in == {"iterable": 200}
    assert res.extra["scheduler"] == "ct"
    assert [o["tuples_in"] for o in res.extra["operators"]][0] == 201  # + end of input


# -- the policies themselves (§6) ------------------------------------------------------------

def _cands(sched: Scheduler, queues: list[tuple[int, int]]) -> list[Candidate]:
    return [Candidate(i, sched.stats[i], wl, outq, sched.cum_selectivities[i])
            for i, (wl, outq) in enumerate(queues)]


def _sched(policy: str, **kw: Any) -> Scheduler:
    stats = [OpStats("src", 0, 1), OpStats("a", 1, 4), OpStats("b", 2, 4)]
    return Scheduler(stats, policy=policy, capacity=30, **kw)


def test_lp_picks_the_latest() -> None:
    s = _sched("lp")
    assert s.choose(_cands(s, [(10, 0), (5, 5), (1, 0)])).index == 2
    assert s.choose([]) is None


def test_qst_throttles_by_cumulative_selectivity() -> None:
    s = _sched("qst")
    s.stats[1].selectivity = 2.0  # cs = [1, 2, 2] -> thresholds 30*cs/5 = [6, 12, 12]
    s.refresh()
    assert s.choose(_cands(s, [(9, 5), (5, 0), (1, 0)])).index == 0
    assert s.choose(_cands(s, [(9, 6), (5, 11), (1, 0)])).index == 1
    assert s.choose(_cands(s, [(9, 6), (5, 12), (1, 0)])).index == 2


def test_et_prefers_the_most_estimated_work() -> None:
    s = _sched("et")
    s.stats[1].cost, s.stats[2].cost = 1e-3, 1e-4
    s.stats[1].workers = 3
    # p1 = 10*1e-3/4 = 2.5e-3, p2 = 20*1e-4/1 = 2e-3
    assert s.choose(_cands(s, [(0, 0), (10, 0), (20, 0)])[1:]).index == 1
    s.stats[1].workers = 5
    assert s.choose(_cands(s, [(0, 0), (10, 0), (20, 0)])[1:]).index == 2


def test_ct_picks_the_lowest_normalized_throughput() -> None:
    s = _sched("ct", ct_window=3600)
    for st_ in s.stats:
        st_.cost = 1e-3
    s.stats[0].window_busy, s.stats[1].window_busy, s.stats[2].window_busy = 0.5, 0.1, 0.3
    assert s.choose(_cands(s, [(1, 0), (1, 0), (1, 0)])).index == 1


def test_slice_tuples() -> None:
    s = _sched("lp", time_slice=0.01, max_batch=50)
    s.stats[1].cost = 1e-3
    assert s.slice_tuples(s.stats[1]) == 10
    s.stats[1].cost = 1.0
    assert s.slice_tuples(s.stats[1]) == 1
    s.stats[1].cost = 1e-9
    assert s.slice_tuples(s.stats[1]) == 50


class _Emitting(sf.OPlus):
    """An O+ whose f_U emits into its window (held until the watermark reaches it) and whose
    f_O emits too: outputs of f_U and f_O interleave across instances."""

    def __init__(self, window_type: str) -> None:
        super().__init__(size=30, slide=10, window_type=window_type, name="emitting")

    def keys(self, t: Any, i: int) -> Any:
        return {t["v"] % 5, (t["v"] * 7) % 11}

    def update(self, ws: Any, ts: int, value: Any, i: int) -> Any:
        ws.states[i].append((ts, value))
        if value["v"] % 4 == 0:
            return [{"k": ws.key, "l": ws.l, "seen": len(ws.states[i])}]
        return None

    def output(self, ws: Any) -> Any:
        return [{"k": ws.key, "l": ws.l, "n": sum(map(len, ws.states))}]


@pytest.mark.parametrize("window_type", ["multi", "single"])
@pytest.mark.parametrize("workers", [1, 2, 6])
def test_custom_oplus_emitting_from_update(window_type: str, workers: int) -> None:
    data = [{"ts": i * 2 + (i % 3), "v": (i * 37) % 97} for i in range(400)]

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("emit")
        s = flow.source(sf.io.iterable(data))
        return flow, s.oplus(_Emitting(window_type)).collect()

    _check(build, parallelism=workers, max_batch=5)


@pytest.mark.parametrize("workers", [1, 4])
def test_single_window_aggregate(workers: int) -> None:
    data = _tweets(300, seed=9)

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow("single")
        s = flow.source(sf.io.iterable(data))
        a = s.aggregate(size=1500, slide=500, window_type="single",
                        keys=lambda t: set(t["text"].split()[:3]), init=lambda: 0,
                        update=lambda n, t: n + 1, output=lambda k, n: {"w": k, "n": n})
        return flow, a.collect()

    _check(build, parallelism=workers)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(st.sampled_from(["map", "filter", "flat_map", "agg"]), min_size=1,
                      max_size=7),
       n=st.integers(0, 400), seed=st.integers(0, 1000), workers=st.integers(1, 12),
       scheduler=st.sampled_from(SCHEDULERS), max_batch=st.integers(1, 40),
       capacity=st.integers(1, 64), key_groups=st.integers(1, 40))
def test_random_chains_many(kinds: list[str], n: int, seed: int, workers: int, scheduler: str,
                            max_batch: int, capacity: int, key_groups: int) -> None:
    _check(_random_chain(kinds, n, seed), parallelism=workers, scheduler=scheduler,
           max_batch=max_batch, capacity=capacity, key_groups=key_groups)


def test_source_error_stops_the_run() -> None:
    from stretchflow.errors import SourceError

    data = [{"ts": i} for i in range(500)] + [{"ts": 3}] + [{"ts": 600 + i} for i in range(50)]
    flow = sf.Flow("back")
    flow.source(sf.io.iterable(data)).map(lambda t: t).collect()
    err = _run_in_thread(lambda: ordered.run(flow, parallelism=4, capacity=8))
    assert isinstance(err, SourceError), err


def test_all_options_are_accepted() -> None:
    flow, col = _query_flow("wordcount", _tweets(100, seed=2), size=1000, slide=500)()
    res = ordered.run(flow, parallelism=2, scheduler="lp", time_slice=0.001, ct_window=0.01)
    assert res.tuples_out == {"collect": len(col.items)}
