"""``bench reference`` compares the engine's and the 1T loop's outputs for real (issue #20):
per timestamp as multisets of records, and it fails loudly when they differ. The runs are
faked here (no child process), so the order, the load averages and the ratios are known."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conformance.contract import multiset
from stretchflow.cli import main
from stretchflow_bench import reference
from stretchflow_bench.reference import OutputsDiffer, compare_outputs


def _write(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


ROWS = [{"ts": 10, "word": "a", "count": 2}, {"ts": 10, "word": "b", "count": 1},
        {"ts": 10, "word": "b", "count": 1}, {"ts": 20, "word": "a", "count": 1}]


def test_same_multisets_in_another_row_and_field_order_are_identical(tmp_path):
    a = _write(tmp_path / "a.jsonl", ROWS)
    b = _write(tmp_path / "b.jsonl", [
        '{"word": "b", "count": 1, "ts": 10}', ROWS[0], "", ROWS[2], ROWS[3]])
    got = compare_outputs(a, b)
    assert got == (True, 4, None)
    # the contract's own helper agrees on this pair
    loaded = [[(json.loads(x)["ts"], json.loads(x)) for x in p.read_text().splitlines() if x]
              for p in (a, b)]
    assert multiset(loaded[0]) == multiset(loaded[1])


@pytest.mark.parametrize("other, says", [
    # a count changed: the record that only one side has is named
    ([ROWS[0], ROWS[1], {"ts": 10, "word": "b", "count": 2}, ROWS[3]], '"count":1'),
    # a duplicate lost: multisets, not sets
    ([ROWS[0], ROWS[1], ROWS[3]], "ts 10"),
    # a whole timestamp missing, at the end and in the middle
    (ROWS[:3], "ts 20 is in"),
    ([ROWS[3]], "ts 10 is in"),
    # 1 and 1.0 are different payloads
    ([{**ROWS[0], "count": 2.0}, *ROWS[1:]], "ts 10"),
    # the stream goes back in time
    ([ROWS[3], *ROWS[:3]], "goes back in time"),
    # not a record
    ([*ROWS, "not json"], "line 5: not JSON"),
    ([*ROWS, '{"word": "x"}'], "line 5: not an object with an integer ts"),
])
def test_different_outputs_are_reported_with_the_first_difference(tmp_path, other, says):
    a = _write(tmp_path / "a.jsonl", ROWS)
    b = _write(tmp_path / "b.jsonl", other)
    for x, y in ((a, b), (b, a)):
        got = compare_outputs(x, y)
        assert got.identical is False and says in got.difference, got


def _fake_children(monkeypatch, speeds, corrupt_1t_in_repeat=None):
    """Replaces the child processes: each run writes ROWS (or, for the 1T loop of the given
    repeat, one row less) and reports the next throughput of its variant; the load average
    counts up by one per reading, so before/after pairs are known."""
    calls: list[str] = []
    seen = {"reference": 0, "1T": 0}
    load = iter(range(1000))
    monkeypatch.setattr(os, "getloadavg", lambda: (float(next(load)), 0.0, 0.0))
    real_run = subprocess.run

    def fake_run(argv, **kw):
        if argv[1:3] != ["-m", "stretchflow_bench.reference"]:
            return real_run(argv, **kw)  # git, for the result's commit
        variant, out = argv[3], Path(argv[6])
        k = seen[variant]
        seen[variant] += 1
        calls.append(variant)
        rows = ROWS[:-1] if variant == "1T" and k == corrupt_1t_in_repeat else ROWS
        _write(out, rows)
        tps = speeds[variant][k]
        doc = {"elapsed_s": 1000 / tps, "tuples_in": 1000, "rows_out": len(rows),
               "tuples_per_s": tps, "peak_rss_mb": 30.0}
        return subprocess.CompletedProcess(argv, 0, json.dumps(doc), "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    return calls


def test_variants_alternate_with_load_and_both_ratios(tmp_path, monkeypatch):
    speeds = {"reference": [100.0, 300.0, 200.0], "1T": [400.0, 100.0, 250.0]}
    calls = _fake_children(monkeypatch, speeds)
    path = reference.run(rows=50, repeats=3, out_dir=str(tmp_path))
    assert calls == ["reference", "1T", "1T", "reference", "reference", "1T"]
    doc = json.loads(path.read_text())
    assert doc["outputs_identical"] is True and doc["output_difference"] is None
    m = doc["metrics"]
    # per-repeat ratios 0.25, 3.0, 0.8: their median is 0.8; medians 200 / 250 = 0.8 too here,
    # so compare with a case where they differ below
    assert [r["ratio_reference_over_1T"] for r in doc["rounds"]] == [0.25, 3.0, 0.8]
    assert m["ratio_reference_over_1T"]["median"] == 0.8
    assert m["ratio_of_medians_reference_over_1T"] == 200.0 / 250.0
    assert m["reference"]["tuples_per_s"] == {"min": 100.0, "median": 200.0, "max": 300.0,
                                             "n": 3}
    # the load is read just before and after each of the six runs, in run order
    assert [r["order"] for r in doc["rounds"]] == [["reference", "1T"], ["1T", "reference"],
                                                   ["reference", "1T"]]
    assert doc["rounds"][0]["reference_load_1min"] == [0.0, 1.0]
    assert doc["rounds"][0]["1T_load_1min"] == [2.0, 3.0]
    assert doc["rounds"][1]["1T_load_1min"] == [4.0, 5.0]
    assert doc["rounds"][1]["reference_load_1min"] == [6.0, 7.0]
    assert m["1T"]["load_1min_before"] == {"min": 2.0, "median": 4.0, "max": 10.0, "n": 3}
    assert all(r["rows_compared"] == len(ROWS) for r in doc["rounds"])


def test_ratio_of_medians_is_not_the_median_of_ratios(tmp_path, monkeypatch):
    speeds = {"reference": [100.0, 100.0, 400.0], "1T": [50.0, 400.0, 200.0]}
    _fake_children(monkeypatch, speeds)
    m = json.loads(reference.run(rows=50, repeats=3, out_dir=str(tmp_path)).read_text())[
        "metrics"]
    assert m["ratio_reference_over_1T"]["median"] == 2.0  # of 2.0, 0.25, 2.0
    assert m["ratio_of_medians_reference_over_1T"] == 0.5  # 100 / 200


def test_different_outputs_fail_the_bench_and_are_recorded(tmp_path, monkeypatch):
    speeds = {"reference": [100.0] * 3, "1T": [100.0] * 3}
    calls = _fake_children(monkeypatch, speeds, corrupt_1t_in_repeat=1)
    with pytest.raises(OutputsDiffer, match="differ in repeat 2: ts 20 is in"):
        reference.run(rows=50, repeats=3, out_dir=str(tmp_path))
    assert len(calls) == 4  # stopped after the repeat that differed
    doc = json.loads((tmp_path / "reference-wordcount.json").read_text())
    assert doc["outputs_identical"] is False and "ts 20" in doc["output_difference"]
    assert [r["outputs_identical"] for r in doc["rounds"]] == [True, False]


def test_cli_exits_non_zero_when_outputs_differ(tmp_path, monkeypatch, capsys):
    _fake_children(monkeypatch, {"reference": [100.0], "1T": [100.0]}, corrupt_1t_in_repeat=0)
    rc = main(["bench", "reference", "--rows", "50", "--repeats", "1", "--out", str(tmp_path)])
    assert rc == 2
    assert "outputs differ in repeat 1" in capsys.readouterr().err
