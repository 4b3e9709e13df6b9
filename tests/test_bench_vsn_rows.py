"""``stretchflow bench run vsn-reconfiguration-rows`` (issue #32): reconfigurations of a lambda
flow whose instances take batches of rows, measured and checked against the reference."""

from __future__ import annotations

import pytest

from stretchflow_bench import vsn
from stretchflow_bench.report_tables import _reconfiguration_rows_of


@pytest.mark.parametrize("flow", ["mean_price", "hot_items"])
def test_every_scheduled_step_is_applied_timed_and_the_output_is_the_references(flow):
    m = vsn.reconfiguration_rows_of(events=12_000, gap=1_000, repeats=2, flow=flow, seed=3)
    assert m["reconfigurations_per_run"] == 8 and len(m["stepping"]) == len(m["fixed"]) == 2
    n_ops = 2 if flow == "hot_items" else 1
    for run in m["stepping"]:
        assert run["output_identical"], run
        assert run["all"]["applied"] == run["all"]["requested"] == 8 * n_ops
        assert len(run["operators"]) == n_ops
        assert all(len(ds) == 8 for ds in run["durations_ms"].values())
        # the operators read batches of rows (not the tuple path): what this bench is about
        assert set(run["paths"].values()) <= {"sliced", "tuple"}
    assert all(r["output_identical"] for r in m["fixed"])
    assert m["p99_ms"]["max"] >= m["p50_ms"]["min"] > 0
    text = _reconfiguration_rows_of(m)
    assert f"{flow} with lambdas over 12 000" in text and "| 2 | " in text
