"""The ordered engine's columnar line for a user's declarative flow (issue #31, items 1-2):
column expressions (filter, with_columns, select) in stateless stages on batches, and an A+
fed by another A+'s output tables (hot items), under every scheduler, reorder buffer and
queue; the output equals the reference's tuple path, and a stage that silently takes tuples
fails."""

from __future__ import annotations

from typing import Any

import pytest

import test_expr_aggregates
import test_sn_chains
from conformance.contract import multiset
from test_expr_aggregates import hot_items, mean_per_category
from test_sn_chains import _expr_chain, _lambda_map

SCHEDULERS = ["qst", "lp", "et", "ct"]
#: the spy counting batches taken tuple at a time (a fixture)
tuple_batches = test_expr_aggregates.tuple_batches
#: the bids (with nulls) test_sn_chains runs (a fixture)
bids_file = test_sn_chains.bids_file


def _reference(build: Any, *args: Any) -> Any:
    flow, col = build(*args)
    flow.run("reference", columnar="off")
    return multiset(col)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("build", [hot_items, mean_per_category], ids=["hot", "mean"])
def test_issue_flows_columnar_under_every_scheduler(build, scheduler, bids_file, monkeypatch,
                                                    tuple_batches):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 256)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 256)
    want = _reference(build, bids_file)
    flow, col = build(bids_file)
    res = flow.run("ordered", parallelism=2, scheduler=scheduler)
    assert multiset(col) == want
    assert "columnar_fallback" not in res.extra
    assert set(res.extra["paths"].values()) == {"columnar"}, res.extra["paths"]
    assert tuple_batches[0] == 0
    if build is hot_items:
        assert res.extra["paths"] == {"bids": "columnar", "hot": "columnar"}


@pytest.mark.parametrize("opts", [{"scheduler": s} for s in SCHEDULERS] +
                         [{"reorder": "lock"}, {"queue": "partitioned"}],
                         ids=lambda o: str(o))
@pytest.mark.parametrize("acc", ["count", "sum", "min", "max", "mean", "top_k"])
def test_expression_chain_columnar_and_exact(acc, opts, bids_file, monkeypatch,
                                             tuple_batches):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 300)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 300)
    want = _reference(_expr_chain, bids_file, acc)
    flow, col = _expr_chain(bids_file, acc)
    res = flow.run("ordered", parallelism=2, **opts)
    assert multiset(col) == want
    assert res.extra["paths"] == {"filter": "columnar", "with_columns": "columnar",
                                  "select": "columnar", "agg": "columnar"}
    assert tuple_batches[0] == 0


def test_a_lambda_stage_runs_tuple_by_tuple_on_the_batch(bids_file, monkeypatch):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 500)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 500)
    want = _reference(_lambda_map, bids_file)
    flow, col = _lambda_map(bids_file)
    res = flow.run("ordered", parallelism=2)
    assert multiset(col) == want
    assert res.extra["paths"] == {"half": "tuple", "agg": "columnar"}
