"""SN's columnar path for a user's declarative flow (issue #31, items 1-2): column expressions
(filter, select, with_columns) before the A+, every declarative accumulator in the channels,
and the A+ after it (hot items' arg max) on the merged windows, all on Arrow batches; the
output equals the reference's tuple path, and a stage that silently takes tuples fails."""

from __future__ import annotations

from typing import Any

import pytest

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.operators.aggregate import count, max_of, mean_of, min_of, sum_of, top_k
from test_expr_aggregates import bids, hot_items, mean_per_category, write_jsonl

PROC = {"channels": "processes"}
CHANNELS = [{"channels": "processes"}, {"channels": "threads"}]


@pytest.fixture(scope="module")
def bids_file(tmp_path_factory) -> Any:
    rows = bids(4000, 11, nulls=0.02)
    for r in rows:
        r["ts"] *= 10
    return write_jsonl(tmp_path_factory.mktemp("bids") / "bids.jsonl", rows)


def _expr_chain(path: Any, acc: str) -> tuple[sf.Flow, Any]:
    """filter -> with_columns -> select -> a declarative A+ (``acc``) over the new column."""
    accs = {"count": count, "sum": lambda: sum_of("cents"), "min": lambda: min_of("net"),
            "max": lambda: max_of("cents"), "mean": lambda: mean_of("net"),
            "top_k": lambda: top_k("cents", 2)}
    flow = sf.Flow(f"chain-{acc}")
    s = flow.source(sf.io.jsonl(str(path)))
    s = s.filter(sf.col("price") > 1000)
    s = s.with_columns(net=sf.col("price") * 0.9, cents=sf.col("price") * 100)
    s = s.select("auction", "category", "net", "cents")
    return flow, s.aggregate(size="10s", slide="4s", keys="category", **accs[acc](),
                             name="agg").collect()


def _lambda_map(path: Any) -> tuple[sf.Flow, Any]:
    """A lambda map (no columnar form) before a declarative A+."""
    flow = sf.Flow()
    s = flow.source(sf.io.jsonl(str(path))).map(
        lambda t: {**t, "half": (t["price"] or 0) // 2}, name="half")
    return flow, s.aggregate(size="10s", keys="auction", **sum_of("half"),
                             name="agg").collect()


def _reference(build: Any, *args: Any) -> Any:
    flow, col = build(*args)
    flow.run("reference", columnar="off")
    return multiset(col)


def _columnar_run(build: Any, *args: Any, **opts: Any) -> tuple[Any, Any]:
    flow, col = build(*args)
    res = flow.run("sn", parallelism=2, **opts)
    return res, multiset(col)


def _all_columnar(res: Any) -> None:
    """Every operator ran on batches: paths say so, no pulse nor downstream batch went tuple
    at a time."""
    extra = res.extra
    assert "columnar_fallback" not in extra, extra.get("columnar_fallback")
    assert set(extra["paths"].values()) == {"columnar"}, extra["paths"]
    c = extra["columnar"]
    assert c["pulses_tuple"] == 0 and c["pulses_columnar"] > 5, c
    assert not any(c["batches_tuple"].values()), c["batches_tuple"]


@pytest.mark.parametrize("opts", CHANNELS, ids=lambda o: o["channels"])
@pytest.mark.parametrize("acc", ["count", "sum", "min", "max", "mean", "top_k"])
def test_expression_chain_runs_columnar_and_exact(acc, opts, bids_file, monkeypatch):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 300)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 300)
    want = _reference(_expr_chain, bids_file, acc)
    assert sum(sum(c.values()) for c in want.values()) > 20
    res, got = _columnar_run(_expr_chain, bids_file, acc, **opts)
    assert got == want
    _all_columnar(res)
    assert set(res.extra["paths"]) == {"filter", "with_columns", "select", "agg"}


@pytest.mark.parametrize("opts", CHANNELS, ids=lambda o: o["channels"])
@pytest.mark.parametrize("pre_in_channels", [True, False])
@pytest.mark.parametrize("build", [hot_items, mean_per_category], ids=["hot", "mean"])
def test_issue_flows_run_columnar_end_to_end(build, pre_in_channels, opts, bids_file,
                                             monkeypatch):
    """Hot items: the channels count per auction, the parent's instance takes the merged
    windows as batches for the arg max (parallelism 1, said in ``parallelism``)."""
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 256)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 256)
    monkeypatch.setattr("stretchflow.executors.sn_columnar.PRE_IN_CHANNELS", pre_in_channels)
    want = _reference(build, bids_file)
    res, got = _columnar_run(build, bids_file, **opts)
    assert got == want
    _all_columnar(res)
    assert res.extra["channels"] == opts["channels"]
    if build is hot_items:
        assert res.extra["paths"] == {"bids": "columnar", "hot": "columnar"}
        assert res.extra["parallelism"] == {"bids": 2, "hot": 1}


def test_a_lambda_between_falls_back_per_operator_and_stays_exact(bids_file, monkeypatch):
    """A lambda map before the A+ runs tuple by tuple on the batch (its path says so); the
    A+ still takes its output as a batch (a table built from the payloads)."""
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 500)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 500)
    want = _reference(_lambda_map, bids_file)
    res, got = _columnar_run(_lambda_map, bids_file, **PROC)
    assert got == want
    assert res.extra["paths"] == {"half": "tuple", "agg": "columnar"}


@pytest.mark.parametrize("opts,reason", [
    ({"reconfigure": [(1000, 3)], **PROC}, "reconfiguring"),
    ({"reconfigure": [(1000, 3)], "channels": "threads"}, "reconfiguring"),
    ({"columnar": "off", **PROC}, "columnar='off'"),
])
def test_runs_the_path_does_not_cover_fall_back_exactly(opts, reason, bids_file):
    want = _reference(hot_items, bids_file)
    res, got = _columnar_run(hot_items, bids_file, **opts)
    assert got == want
    assert reason in res.extra["columnar_fallback"]["bids"]
