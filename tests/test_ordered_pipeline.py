"""The ordered executor on pipelines of stateless, stateful and partitioned-stateful operators:
the output must equal the sequential run exactly (ordered execution, Def. 5.1) for every
heuristic, reorder buffer, work queue and number of workers."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.buffers.hybrid_queue import RangePartitioner
from stretchflow.errors import OperatorError
from stretchflow.executors import ordered
from stretchflow.executors.scheduler import POLICIES
from stretchflow.operators.stateful import PartitionedStateful, range_partitioned
from stretchflow.pipeline import Pipeline

SCHEDULERS = sorted(POLICIES)


def _coin(*xs: int) -> float:
    return zlib.crc32(repr(xs).encode()) / 2**32


def _spin(n: int) -> int:
    # a pure-Python cost that varies per operator (random costs without sleeping)
    x = 0
    for i in range(n):
        x += i
    return x


def _data(n: int, keys: int, seed: int) -> list[dict]:
    return [{"ts": i // 3, "id": i, "k": (i * 7919 + seed) % keys} for i in range(n)]


def _build(ops: list[tuple[str, float, int, int]], data: list[dict]) -> Pipeline:
    """ops: (kind, selectivity, cost, buckets), kind in L (stateless), S, P (hash), R (range)."""
    pl = Pipeline(sf.io.iterable(lambda: iter(data)))
    for j, (kind, sel, cost, buckets) in enumerate(ops):
        if kind == "L":
            def fn(t: dict, j: int = j, sel: float = sel, cost: int = cost) -> list[dict]:
                _spin(cost)
                n = int(sel) + (_coin(t["id"], j) < sel - int(sel))
                return [{**t, "id": t["id"] * 4 + c} for c in range(n)]
            pl.flat_map(fn, name=f"L{j}")
        else:
            def step(state: list, t: dict, j: int = j, sel: float = sel,
                     cost: int = cost) -> list[dict]:
                _spin(cost)
                state.append(t["id"])
                n = int(sel) + (_coin(t["id"], j) < sel - int(sel))
                return [{"id": t["id"] * 4 + c, "k": (t["k"] + len(state)) % 17,
                         "seen": len(state), "sum": sum(state[-3:])} for c in range(n)]
            if kind == "S":
                pl.stateful(step, init=list, name=f"S{j}")
            elif kind == "P":
                pl.partitioned(step, key=lambda t: t["k"], init=lambda k: [], buckets=buckets,
                               name=f"P{j}")
            else:
                pl.partitioned(step, key=lambda t: t["k"], init=lambda k: [], buckets=buckets,
                               partitioner=RangePartitioner.uniform(0, 17, buckets),
                               name=f"R{j}")
    return pl


_OPS = st.lists(st.tuples(st.sampled_from("LSPR"), st.sampled_from([0.0, 0.5, 1.0, 1.7, 3.0]),
                          st.sampled_from([0, 10, 200]), st.integers(1, 12)),
                min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, n=st.integers(0, 250), workers=st.integers(1, 8),
       scheduler=st.sampled_from(SCHEDULERS), reorder=st.sampled_from(ordered.REORDERS),
       queue=st.sampled_from(ordered.QUEUES), max_batch=st.sampled_from([1, 7, 256]),
       capacity=st.sampled_from([2, 64, 1024]), seed=st.integers(0, 99))
def test_random_pipelines_equal_sequential(ops: list, n: int, workers: int, scheduler: str,
                                           reorder: str, queue: str, max_batch: int,
                                           capacity: int, seed: int) -> None:
    data = _data(n, 23, seed)
    expected = _build(ops, data).run(engine="reference")
    got = _build(ops, data).run(parallelism=workers, scheduler=scheduler, reorder=reorder,
                                queue=queue, max_batch=max_batch, capacity=capacity)
    assert got.items == expected.items
    assert got.result.tuples_in == expected.result.tuples_in
    assert got.result.tuples_out == expected.result.tuples_out


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("reorder,queue", [("nonblocking", "hybrid"), ("lock", "partitioned"),
                                           ("lock", "hybrid"), ("nonblocking", "partitioned")])
def test_every_heuristic_and_worker_count(scheduler: str, workers: int, reorder: str,
                                          queue: str) -> None:
    ops = [("L", 1.5, 0, 1), ("P", 1.0, 20, 7), ("L", 0.5, 0, 1), ("S", 1.0, 0, 1),
           ("R", 2.0, 0, 5)]
    data = _data(300, 11, workers)
    expected = _build(ops, data).run(engine="reference").items
    got = _build(ops, data).run(parallelism=workers, scheduler=scheduler, reorder=reorder,
                                queue=queue, max_batch=5, capacity=16).items
    assert got == expected
    assert got  # the pipeline does produce output


def test_skewed_keys_many_buckets_many_workers() -> None:
    # one hot key: every input of bucket 0 must still be processed in arrival order
    data = [{"ts": i, "id": i, "k": 0 if i % 4 else i % 13} for i in range(2000)]
    ops = [("P", 1.0, 0, 100)]
    assert _build(ops, data).run(parallelism=8, max_batch=3).items == \
        _build(ops, data).run(engine="reference").items


def test_markers_do_not_change_the_output_and_give_latencies() -> None:
    ops = [("L", 1.0, 0, 1), ("P", 1.0, 0, 4)]
    data = _data(500, 9, 1)
    expected = _build(ops, data).run(engine="reference").items
    got = _build(ops, data).run(parallelism=3, marker_every=50)
    assert got.items == expected
    lat = got.result.extra["marker_latencies_ms"]
    # each marker is timed from its source to the sinks: a real duration, not a placeholder
    assert len(lat) == 10 and all(math.isfinite(x) and x > 0 for x in lat)
    assert len(set(lat)) > 1
    # the summary is of these ten (latency_ms is the outputs' latency, as on every engine)
    summary = got.result.extra["marker_latency_ms"]
    assert summary["samples"] == 10 and summary["max"] == max(lat)
    assert 0 < summary["p50"] <= summary["p99"] <= summary["max"]
    assert summary["p50"] == pytest.approx(sorted(lat)[5], rel=0.02)


def test_run_result_names_the_buffers() -> None:
    res = _build([("S", 1.0, 0, 1)], _data(10, 3, 0)).run(parallelism=2, reorder="lock",
                                                            queue="partitioned").result
    assert (res.extra["reorder"], res.extra["queue"]) == ("lock", "partitioned")
    assert res.extra["operators"][1]["tuples_in"] == 10


@pytest.mark.parametrize("where", ["fn", "key", "partitioner", "init"])
@pytest.mark.parametrize("workers", [1, 4])
def test_user_errors_name_the_operator(where: str, workers: int) -> None:
    data = _data(100, 5, 0)

    def fn(s: Any, t: dict) -> list:
        if where == "fn" and t["id"] == 42:
            raise RuntimeError("boom")
        return [t]

    def key(t: dict) -> int:
        if where == "key" and t["id"] == 42:
            raise RuntimeError("boom")
        return t["k"]

    def part(k: int) -> int:
        return 99 if where == "partitioner" and k == 3 else k % 4

    part.num_buckets = 4  # type: ignore[attr-defined]

    def init(k: Any) -> list:
        if where == "init":
            raise RuntimeError("boom")
        return []

    pl = Pipeline(sf.io.iterable(data)).map(lambda t: t).partitioned(
        fn, key=key, init=init, buckets=4, partitioner=part, name="victim")
    with pytest.raises(OperatorError, match="victim"):
        pl.run(parallelism=workers)
    if where != "partitioner":  # the reference run does not partition
        with pytest.raises(OperatorError, match="victim"):
            pl.run(engine="reference")


def test_bad_options_and_specs() -> None:
    pl = Pipeline(sf.io.iterable([{"ts": 1}])).map(lambda t: t)
    with pytest.raises(ValueError, match="reorder"):
        pl.run(reorder="nope")
    with pytest.raises(ValueError, match="queue"):
        pl.run(queue="nope")
    with pytest.raises(ValueError, match="marker_every"):
        pl.run(marker_every=-1)
    with pytest.raises(ValueError, match="engine"):
        pl.run(engine="vsn")
    with pytest.raises(ValueError, match="parallelism"):
        pl.run(parallelism=0)
    with pytest.raises(ValueError, match="does not take option 'workers'"):
        pl.run(workers=2)
    with pytest.raises(ValueError, match="buckets"):
        PartitionedStateful(lambda s, t: [t], key=lambda t: 0, init=lambda k: 0,
                                    buckets=3, partitioner=RangePartitioner([1, 2, 3]))
    with pytest.raises(sf.errors.FlowDefinitionError):
        Pipeline([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("query", ["wordcount", "longest-hashtag"])
@pytest.mark.parametrize("reorder,queue", [("lock", "partitioned"), ("lock", "hybrid"),
                                           ("nonblocking", "partitioned")])
def test_flows_with_every_buffer_combination(query: str, reorder: str, queue: str) -> None:
    from stretchflow.io.generators import tweets
    from stretchflow.queries import build_query

    data = tweets(500, seed=3, rate=200, vocabulary=40).to_pylist()

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow(query)
        s = flow.source(sf.io.iterable(data)).filter(lambda t: len(t["text"]) % 4 != 1)
        return flow, build_query(query, [s], size=2000, slide=500).collect()

    flow, col = build()
    flow.run()
    flow2, col2 = build()
    ordered.run(flow2, parallelism=4, reorder=reorder, queue=queue, max_batch=9,
                marker_every=37)
    assert Counter(map(repr, col2.items)) == Counter(map(repr, col.items))
    ts = [t for t, _ in col2.items]
    assert ts == sorted(ts)


def test_doctests() -> None:
    import doctest

    from stretchflow import pipeline

    res = doctest.testmod(pipeline, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 1 and res.failed == 0


def test_range_partitioned_helper() -> None:
    op = range_partitioned(lambda s, t: [t], key=lambda t: t["k"], init=lambda k: [],
                                   low=0, high=23, buckets=5, name="ranged")
    assert op.buckets == 5 and op.partitioner(0) == 0 and op.partitioner(22) == 4
    data = _data(200, 23, 2)
    pl = Pipeline(sf.io.iterable(data)).add(op)
    assert pl.run(parallelism=3, queue="partitioned").items == pl.run(engine="reference").items
