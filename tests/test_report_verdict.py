"""Issue #33 (item 6): a target's verdict in docs/RESULTS.md is met only when every round is
past the target (``report_tables.verdict``), with the per-round range beside it; where a result
keeps only min/median/max per variant, over the conservative interval of the ratio
(``report_tables.ratio_interval``); one run is never called met. The renderers judge
results that way, whatever verdict a benchmark stored in its JSON (here: copies of the results
of 2026-11/12 in tests/verdict_results, whose verdicts these tests know)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stretchflow_bench import report_more, report_tables
from stretchflow_bench.report_tables import ratio_interval, verdict

#: the results these tests judge, as they were when the tests were written (copies: the
#: committed benchmarks/results are re-run and their verdicts change with them)
RESULTS = Path(__file__).resolve().parent / "verdict_results"


def _doc(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


# ---- the helper -----------------------------------------------------------------------------

def test_a_range_wholly_past_the_target_is_met_with_its_range():
    assert verdict([0.81, 0.86, 0.97], 0.7) == "**met** (per round 0.81–0.97, target ≥ 0.70)"


def test_a_range_that_crosses_the_target_is_not_met_though_its_median_is_past():
    got = verdict([1.26, 1.68, 1.70, 1.9, 2.11], 1.6)
    assert got == "**not met**: per round 1.26–2.11 crosses the target 1.60"
    assert "**met**" not in got


def test_a_range_wholly_short_of_the_target_is_not_met():
    assert verdict([0.3, 0.4], 0.7) == \
        "**not met**: per round 0.30–0.40, wholly short of the target ≥ 0.70"


def test_lower_is_better_mirrors_the_rule():
    ms = {"unit": " ms", "per": "per run"}
    assert verdict([4.1, 4.9], 5.0, higher_is_better=False, **ms) == \
        "**met** (per run 4.10–4.90 ms, target ≤ 5.00 ms)"
    assert verdict([4.5, 5.2], 5.0, higher_is_better=False, **ms) == \
        "**not met**: per run 4.50–5.20 ms crosses the target 5.00 ms"
    assert verdict([5.38, 6.37], 5.0, higher_is_better=False, **ms) == \
        "**not met**: per run 5.38–6.37 ms, wholly over the target ≤ 5.00 ms"


def test_a_round_exactly_at_the_target_is_past_it():
    assert verdict([0.7, 0.8], 0.7).startswith("**met**")
    assert verdict([5.0, 4.0], 5.0, higher_is_better=False).startswith("**met**")


def test_a_summary_of_the_rounds_judges_as_the_rounds_do():
    rounds = [0.8951, 0.92, 0.95]
    summary = {"min": 0.8951, "median": 0.92, "max": 0.95, "n": 3}
    assert verdict(summary, 0.9) == verdict(rounds, 0.9)


def test_a_bound_below_the_target_never_reads_as_the_target():
    # 0.8951 at two decimals is 0.90: the verdict shows the third decimal
    assert verdict([0.8951, 0.95], 0.9) == \
        "**not met**: per round 0.895–0.95 crosses the target 0.90"


@pytest.mark.parametrize("one", [36_037.0, [36_037.0], {"min": 36_037.0, "median": 36_037.0,
                                                          "max": 36_037.0, "n": 1}])
def test_one_run_has_no_interval_and_is_never_called_met(one):
    got = verdict(one, 30_000, fmt=report_tables.n0)
    assert got == ("**met in the one run measured** (36 037, target ≥ 30 000; one run: "
                   "no interval)")
    assert "**met**" not in got


def test_one_run_short_of_the_target_is_not_met():
    assert verdict(7.83, 5.0, higher_is_better=False, unit=" ms") == \
        ("**not met in the one run measured** (7.83 ms, target ≤ 5.00 ms; one run: "
         "no interval)")


def test_no_values_is_an_error():
    with pytest.raises(ValueError):
        verdict([], 1.0)


def test_the_conservative_ratio_interval_takes_the_extremes_of_both_sides():
    a = {"min": 10.0, "median": 12.0, "max": 14.0, "n": 3}
    b = {"min": 5.0, "median": 6.0, "max": 8.0, "n": 3}
    iv = ratio_interval(a, b)
    assert iv["min"] == pytest.approx(10 / 8) and iv["max"] == pytest.approx(14 / 5)
    assert iv["median"] == pytest.approx(2.0) and iv["n"] == 3
    assert verdict(iv, 1.2, per="conservative interval") == \
        "**met** (conservative interval 1.25–2.80, target ≥ 1.20)"
    # the ratio of medians (2.0) is past 1.5, the interval is not
    assert verdict(iv, 1.5, per="conservative interval").startswith("**not met**: ")
    # lower is better: the same interval, its other end must be past the target
    assert verdict(iv, 3.0, higher_is_better=False).startswith("**met**")
    assert verdict(iv, 2.0, higher_is_better=False).startswith("**not met**: ")


def test_the_ratio_interval_of_one_run_each_is_one_run():
    one = {"min": 4.0, "median": 4.0, "max": 4.0, "n": 1}
    iv = ratio_interval(one, {"min": 2.0, "median": 2.0, "max": 2.0, "n": 1})
    assert verdict(iv, 1.7).startswith("**met in the one run measured** (2.00,")


# ---- the renderers on the committed results ---------------------------------------------------

def test_vsn_wordcount_is_judged_on_its_per_round_ratios():
    text = report_tables._vsn_wordcount(_doc("vsn-wordcount"))
    assert "**met** (per round 0.81–0.97, target ≥ 0.70)" in text


def test_sn_speedup_is_judged_on_the_conservative_interval():
    text = report_more._sn_speedup(_doc("sn-speedup"))
    assert "**met** (conservative interval 1.95–2.20, target ≥ 1.70)" in text


def test_ordered_scaling_is_not_met_when_one_shape_s_interval_crosses_the_target():
    text = report_more._scaling(_doc("ordered-scaling"))
    assert ("the shape with the lowest bound, P (partitioned-stateful): **not met**: "
            "conservative interval 1.60–2.07 crosses the target 1.70") in text
    assert "| **met** (conservative interval 1.94–2.07, target ≥ 1.70) |" in text


def test_spark_wordcount_s_single_run_is_not_called_met():
    text = report_more._spark_wordcount(_doc("spark-wordcount"))
    assert text.count("**met in the one run measured**") == 2
    assert "**met**" not in text and "one run: no interval" in text


def test_the_checkpoint_verdict_follows_the_rounds_not_the_stored_met():
    d = _doc("checkpoint")
    assert "**met** (per round 0.94–0.98, target ≥ 0.90)" in report_more._checkpoint(d)
    bad = copy.deepcopy(d)
    bad["metrics"]["tuple-ck1s"]["throughput_ratio_per_round"]["min"] = 0.85
    assert bad["metrics"]["target"]["met"] is True  # what the benchmark stored
    text = report_more._checkpoint(bad)
    assert ("`tuple-ck1s` at least 0.90 of the throughput without checkpoints, met only when "
            "every round's ratio is: **not met**: per round 0.85–0.98 crosses the target 0.90"
            ) in text
    # the other paths with a checkpoint every second, judged beside it
    assert "`columnar-ck1s` **not met**: per round 0.87–1.01 crosses the target 0.90" in text


def test_live_is_judged_per_repeat():
    d = _doc("live")
    assert "| **met** (per repeat 0.064–0.080 s, target ≤ 1.000 s) |" in report_more._live(d)
    slow = copy.deepcopy(d)
    slow["metrics"]["reference"]["repeats"][1]["first_window_s"] = 1.5
    assert "| **not met**: per repeat 0.064–1.500 s crosses the target 1.000 s |" \
        in report_more._live(slow)


def test_the_reconfiguration_targets_say_one_run_and_every_run():
    text = report_tables._reconfiguration(_doc("vsn-reconfiguration"))
    assert "**not met in the one run measured** (7.83 ms, target ≤ 5.00 ms" in text
    rows = report_tables._reconfiguration_rows(_doc("vsn-reconfiguration-rows"))
    assert "**not met**: p99 per run 5.38–6.37 ms, wholly over the target ≤ 5.00 ms" in rows
