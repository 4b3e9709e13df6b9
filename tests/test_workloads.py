"""The ordered-multicore workloads: TPCx-BB streaming queries and numpy micro-operators."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest

from stretchflow.executors import ordered
from stretchflow.executors.scheduler import POLICIES
from stretchflow.workloads import micro, tpcxbb

QUERIES = sorted(tpcxbb.NAMES)


def _canon(items: list[tuple[Any, Any]]) -> Counter:
    ts = [t for t, _ in items]
    assert ts == sorted(ts), "output timestamps go back"
    return Counter((t, json.dumps(p, sort_keys=True)) for t, p in items)


@pytest.fixture(scope="module")
def inputs() -> dict[str, list[dict]]:
    return {q: tpcxbb.generate(q, 1500, seed=7, days=2) for q in QUERIES}


@pytest.fixture(scope="module")
def expected(inputs: dict[str, list[dict]]) -> dict[str, list]:
    out = {}
    for q in QUERIES:
        flow, col = tpcxbb.flow(q, inputs[q])
        flow.run()
        out[q] = col.items
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_queries_produce_output(query: str, expected: dict[str, list]) -> None:
    assert len(expected[query]) > 3


@pytest.mark.parametrize("scheduler", sorted(POLICIES))
@pytest.mark.parametrize("query", QUERIES)
def test_tpcxbb_ordered_equals_reference(query: str, scheduler: str,
                                         inputs: dict[str, list[dict]],
                                         expected: dict[str, list]) -> None:
    for workers, opts in ((1, {}), (3, {"queue": "partitioned", "reorder": "lock"}),
                          (4, {"max_batch": 7, "marker_every": 100})):
        flow, col = tpcxbb.flow(query, inputs[query])
        flow.run(engine="ordered", parallelism=workers, scheduler=scheduler, **opts)
        assert _canon(col.items) == _canon(expected[query]), (workers, opts)


def test_tpcxbb_is_a_chain_of_the_paper_kinds() -> None:
    for q in QUERIES:
        flow, _ = tpcxbb.flow(q, [])
        kinds = [n.kind for n in flow.nodes]
        assert kinds[0] == "source" and "oplus" in kinds, q
        # a chain: each operator reads the one before it (the paper's linear pipelines)
        pairs = zip(flow.nodes, flow.nodes[1:], strict=False)
        assert all(n.inputs == [prev] for prev, n in pairs), q
        paper = tpcxbb.PIPELINES[q].replace("(SL)", "SL").split("→")
        assert kinds == ["source"] + [{"SL": "stateless", "PS": "oplus", "SF": "oplus"}[k]
                                      for k in paper[1:]], q


def test_tpcxbb_queries_are_in_the_one_registry() -> None:
    from stretchflow.queries import QUERIES as REGISTRY

    for q in QUERIES:
        entry = REGISTRY[q]
        assert entry.min_inputs == entry.max_inputs == 1
        assert entry.data in tpcxbb.GENERATORS
        assert set(tpcxbb.generate(q, 50, seed=1)[0]) == set(entry.input_fields)
    assert REGISTRY["tpcxbb-q1"].parse_params({"categories": "1,2", "top": "5"})[
        "categories"] == (1, 2)
    with pytest.raises(ValueError, match="categories"):
        REGISTRY["tpcxbb-q1"].parse_params({"categories": "a,b"})


def test_generators_are_deterministic_sorted_and_complete() -> None:
    a, b = tpcxbb.store_sales(500, seed=3), tpcxbb.store_sales(500, seed=3)
    assert a == b and len(a) == 500
    assert [r["ts"] for r in a] == sorted(r["ts"] for r in a)
    assert {"ticket", "item", "category", "store", "price", "quantity"} <= set(a[0])
    c = tpcxbb.web_clickstreams(800, seed=3)
    assert c == tpcxbb.web_clickstreams(800, seed=3) and len(c) == 800
    assert [r["ts"] for r in c] == sorted(r["ts"] for r in c)
    assert {r["page"] for r in c} == {"view", "cart", "buy"}
    assert all(r["sales"] is not None for r in c if r["page"] == "buy")
    assert tpcxbb.store_sales(500, seed=4) != a
    with pytest.raises(ValueError, match="unknown TPCx-BB query"):
        tpcxbb.generate("tpcxbb-q99")


def test_q15_finds_the_declining_categories() -> None:
    data = tpcxbb.store_sales(20_000, seed=1)
    flow, col = tpcxbb.flow("tpcxbb-q15", data)
    flow.run()
    cats = Counter(p["category"] for _, p in col.items)
    # categories 0-2 decline by construction, 3-5 grow: the declining ones dominate
    assert sum(cats[c] for c in (0, 1, 2)) > sum(cats[c] for c in (3, 4, 5))


# -- micro-operators -------------------------------------------------------------------------


def test_selectivity_is_deterministic_and_on_average_right() -> None:
    op = micro.stateless(0, selectivity=0.3)
    data = micro.keyed_tuples(4000, seed=2)
    outs = [op.fn(t) for t in data]
    assert outs == [op.fn(t) for t in data]
    assert 0.25 < sum(map(len, outs)) / len(data) < 0.35
    op2 = micro.stateless(0, selectivity=2.5)
    assert 2.4 < sum(len(op2.fn(t)) for t in data) / len(data) < 2.6


def test_keys_follow_the_normal_law() -> None:
    data = micro.keyed_tuples(5000, sigma=2.0, seed=1)
    keys = np.array([t["key"] for t in data])
    assert abs(keys.mean()) < 0.15 and 1.8 < keys.std() < 2.2
    assert micro.keyed_tuples(10, seed=1) == micro.keyed_tuples(10, seed=1)


def test_range_partitioning_is_skewed() -> None:
    op = micro.partitioned(0, buckets=100, key_range=3.0)
    data = micro.keyed_tuples(5000, sigma=1.0, seed=1)
    hits = Counter(op.partitioner(t["key"]) for t in data)
    assert max(hits.values()) > 10 * max(1, min(hits.get(b, 0) for b in range(100)))


def test_calibrate_reaches_the_cost() -> None:
    size, reps, per = micro.calibrate(0.0005, sizes=(16, 32), probe_s=0.02)
    assert size in (16, 32) and reps >= 1 and per >= 0.0005


@pytest.mark.parametrize("kinds", ["L", "LP", "SLP", "PLS"])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_micro_pipelines_equal_sequential(kinds: str, workers: int) -> None:
    data = micro.keyed_tuples(300, seed=workers)
    sels = [1.0, 0.5, 2.0]
    expected = micro.pipeline(kinds, data, 8, 1, iter(sels)).run("reference").items
    assert expected
    for queue in ordered.QUEUES:
        got = micro.pipeline(kinds, data, 8, 1, iter(sels)).run(
            parallelism=workers, scheduler="ct", queue=queue, max_batch=16).items
        assert got == expected


def test_micro_pipeline_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="kind"):
        micro.pipeline("X", [], 8)
    with pytest.raises(ValueError, match="partitioning"):
        micro.partitioned(8, partitioning="zigzag")
