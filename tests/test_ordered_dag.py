"""The ordered executor on flows that are not chains: several sources merged by timestamp,
branches, multi-input O+ (joins, ScaleJoin, a three-input O+), chained O+, stateless operators
before and after, several sinks. Every sink must get the reference engine's per-timestamp
multiset, in timestamp order, for 1, 2 and 4 workers and every scheduling heuristic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import checked_multiset
from stretchflow.executors import ordered
from stretchflow.executors.scheduler import POLICIES
from stretchflow.io.generators import bandjoin
from stretchflow.operators.stateful import Stateful
from stretchflow.queries import build_query

SCHEDULERS = sorted(POLICIES)
WORKERS = [1, 2, 4]

Build = Callable[[], tuple[sf.Flow, list[Any]]]




def _check(build: Build, **opts: Any) -> None:
    flow, cols = build()
    ref = flow.run()
    expected = [checked_multiset(c.items) for c in cols]
    assert any(expected), "the flow produces output"
    flow2, cols2 = build()
    res = ordered.run(flow2, **opts)
    assert [checked_multiset(c.items) for c in cols2] == expected
    assert res.tuples_in == ref.tuples_in
    assert res.tuples_out == ref.tuples_out


def _join_flow() -> Build:
    left = [{"ts": i * 3, "k": i % 5, "v": i} for i in range(250)]
    right = [{"ts": i * 2 + 1, "k": i % 7, "w": i} for i in range(350)]

    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("join")
        a = flow.source(sf.io.iterable(left), name="left")
        b = flow.source(sf.io.iterable(right), name="right")
        a2 = a.map(lambda t: {**t, "k": t["k"] % 3}).filter(lambda t: t["v"] % 4 != 1)
        b2 = b.flat_map(lambda t: [t] * (1 + t["w"] % 2))
        j = a2.join(b2, size=30, slide=10, keys=lambda t: {t["k"] % 3},
                    predicate=lambda x, y: (x["v"] + y["w"]) % 3 != 0,
                    output=lambda x, y: {"v": x["v"], "w": y["w"]})
        after = j.map(lambda t: {**t, "s": t["v"] + t["w"]}).filter(lambda t: t["s"] % 5 != 0)
        return flow, [after.collect(), a.collect()]

    return build


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("workers", WORKERS)
def test_join_with_stateless_before_and_after(workers: int, scheduler: str) -> None:
    _check(_join_flow(), parallelism=workers, scheduler=scheduler)


def _scalejoin_flow() -> Build:
    left, right = (t.to_pylist() for t in bandjoin(300, seed=4, rate=200))

    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("scalejoin")
        a = flow.source(sf.io.iterable(left), name="bj-left")
        b = flow.source(sf.io.iterable(right), name="bj-right")
        out = build_query("scalejoin", [a, b], window=5000, band=2500, keys=16)
        return flow, [out.collect()]

    return build


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("workers", WORKERS)
def test_scalejoin(workers: int, scheduler: str) -> None:
    _check(_scalejoin_flow(), parallelism=workers, scheduler=scheduler)


class _Three(sf.OPlus):
    """A three-input O+ whose f_U emits for input 1 and whose f_O sums per input."""

    def __init__(self) -> None:
        super().__init__(size=40, slide=20, inputs=3, name="three")

    def keys(self, t: Any, i: int) -> Any:
        return {t["k"] % 3}

    def update(self, ws: Any, ts: int, value: Any, i: int) -> Any:
        ws.states[i].append(value["v"])
        if i == 1 and value["v"] % 3 == 0:
            return [{"k": ws.key, "from": 1, "v": value["v"], "n0": len(ws.states[0])}]
        return None

    def output(self, ws: Any) -> Any:
        return [{"k": ws.key, "l": ws.l, "sums": [sum(s) for s in ws.states]}]


def _three_input_flow() -> Build:
    data = [[{"ts": i * (2 + j) + j, "k": (i * (j + 1)) % 5, "v": i} for i in range(200)]
            for j in range(3)]

    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("three")
        srcs = [flow.source(sf.io.iterable(d), name=f"s{j}") for j, d in enumerate(data)]
        s0 = srcs[0].map(lambda t: {**t, "v": t["v"] * 2})
        s2 = srcs[2].filter(lambda t: t["v"] % 3 != 0)
        out = s0.oplus(_Three(), srcs[1], s2)
        # a chained O+ after it, and stateless operators after that
        agg = out.aggregate(size=100, slide=50, keys=lambda t: {t["k"]}, init=lambda: 0,
                            update=lambda a, t: a + 1, output=lambda k, a: {"k": k, "n": a})
        return flow, [out.collect(), agg.flat_map(lambda t: [t, {**t, "n": -t["n"]}]).collect()]

    return build


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("workers", WORKERS)
def test_three_input_oplus_then_another_oplus(workers: int, scheduler: str) -> None:
    _check(_three_input_flow(), parallelism=workers, scheduler=scheduler)


def _self_join_and_stateful() -> Build:
    data = [{"ts": i // 2, "k": i % 4, "v": i} for i in range(300)]

    def step(state: list, t: dict) -> list[dict]:
        state.append(t["v"])
        return [{**t, "seen": len(state)}]

    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("self")
        s = flow.source(sf.io.iterable(data))
        seen = s.stateful(Stateful(step, init=list, name="seen"))
        j = seen.join(s, size=6, keys=lambda t: {t["k"]},
                      output=lambda x, y: {"a": x["v"], "b": y["v"], "seen": x["seen"]})
        return flow, [j.collect(), seen.collect()]

    return build


@pytest.mark.parametrize("queue", ordered.QUEUES)
@pytest.mark.parametrize("workers", WORKERS)
def test_join_of_a_stream_with_its_stateful_branch(workers: int, queue: str) -> None:
    _check(_self_join_and_stateful(), parallelism=workers, queue=queue, max_batch=7)


@pytest.mark.parametrize("workers", [1, 3])
def test_forward_of_three_streams_with_watermarks(workers: int) -> None:
    data = [[{"ts": i * 5 + j, "id": i} for i in range(120)] for j in range(3)]
    for j, d in enumerate(data):
        d.insert(40, sf.Watermark(190 + j))

    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("forward")
        srcs = [flow.source(sf.io.iterable(d, sorted=False), name=f"f{j}")
                for j, d in enumerate(data)]
        return flow, [build_query("forward", srcs).collect()]

    _check(build, parallelism=workers, marker_every=17)


def test_user_error_in_a_join_names_the_operator() -> None:
    from stretchflow.errors import OperatorError

    flow = sf.Flow("bad-join")
    a = flow.source(sf.io.iterable([{"ts": i, "k": i % 3} for i in range(200)]), name="a")
    b = flow.source(sf.io.iterable([{"ts": i, "k": i % 3} for i in range(200)]), name="b")
    a.join(b, size=10, keys=lambda t: {t["k"]},
           predicate=lambda x, y: 1 // (x["ts"] - 150) is not None, name="victim").collect()
    with pytest.raises(OperatorError, match="victim"):
        ordered.run(flow, parallelism=3, capacity=4)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), workers=st.integers(1, 5),
       scheduler=st.sampled_from(SCHEDULERS), max_batch=st.integers(1, 20),
       capacity=st.integers(1, 40), key_groups=st.integers(1, 20))
def test_random_schedules_on_the_join(seed: int, workers: int, scheduler: str,
                                      max_batch: int, capacity: int, key_groups: int) -> None:
    _check([_join_flow(), _three_input_flow()][seed % 2], parallelism=workers,
           scheduler=scheduler, max_batch=max_batch, capacity=capacity, key_groups=key_groups)


def test_options_follow_the_engine_spec() -> None:
    import inspect

    from stretchflow.engines import ENGINES
    from stretchflow.errors import FlowDefinitionError

    params = list(inspect.signature(ordered.run).parameters)[1:]
    assert params == list(ENGINES["ordered"].option_names)
    flow, (col, left) = _join_flow()()
    res = flow.run(engine="ordered", parallelism=2, key_groups=5)
    assert res.extra["workers"] == 2 and res.extra["parallelism"]["join"] == 2
    assert len(col.items) > 0 and len(left.items) == 250
    with pytest.raises(FlowDefinitionError, match="ordered.*workers"):
        flow.run(engine="ordered", workers=2)


def test_a_branch_no_sink_reads_does_not_run() -> None:
    # the reference executor pulls from the sinks, so a dangling branch never runs there;
    # the ordered engine must not run it either (its error would fail the run)
    def build() -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("dangling")
        s = flow.source(sf.io.iterable([{"ts": i} for i in range(50)]))
        s.map(lambda t: 1 // 0)
        return flow, [s.filter(lambda t: t["ts"] % 2 == 0).collect()]

    _check(build, parallelism=2)
