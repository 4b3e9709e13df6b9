"""``stretchflow bench run nexmark`` (issue #33, items 1 and 2): the selection, the output
check a peer's numbers rest on (a wrong check would call a wrong peer right), a peer program
that cannot express a query, the renderer's verdict of who is faster, and a quick run end to
end whose JSON the report renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest

from stretchflow_bench import BENCHMARKS, CROSS_ENGINE
from stretchflow_bench import nexmark_suite as nx
from stretchflow_bench.peers import Peer
from stretchflow_bench.report import Results, render_blocks
from stretchflow_bench.report_nexmark import _versus, rate

BLOCK = "<!-- report:nexmark -->\n<!-- /report:nexmark -->\n"
ENV = ("NEXMARK_EVENTS", "NEXMARK_QUERIES", "NEXMARK_SYSTEMS", "NEXMARK_FORMATS",
       "NEXMARK_ROUNDS", "NEXMARK_TIMEOUT")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_registered_cross_engine_and_selected_by_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"nexmark", "nexmark-1m"} <= BENCHMARKS.keys() & set(CROSS_ENGINE)
    for v in ENV:
        monkeypatch.delenv(v, raising=False)
    assert nx.selection(quick=False, events=nx.EVENTS_1M)["events"] == 1_000_000
    full = nx.selection(quick=False)
    assert full["systems"] == list(nx.DEFAULT_SYSTEMS)
    assert full["queries"] == [f"q{i}" for i in range(9)]
    assert full["events"] == 10_000_000 and full["formats"] == ["jsonl"]
    assert full["windows"] == {"window": 10_000, "slide": 2_000}
    monkeypatch.setenv("NEXMARK_SYSTEMS", "polars,vsn2")
    monkeypatch.setenv("NEXMARK_QUERIES", "q5")
    monkeypatch.setenv("NEXMARK_ROUNDS", "3")
    sel = nx.selection(quick=True)
    # the reference always runs: its output is the expected one
    assert sel["systems"] == ["reference", "polars", "vsn2"] and sel["queries"] == ["q5"]
    assert sel["rounds"] == 3 and sel["env"]["NEXMARK_QUERIES"] == "q5"
    for var, bad in (("NEXMARK_SYSTEMS", "flink-datastream"), ("NEXMARK_QUERIES", "q9"),
                     ("NEXMARK_FORMATS", "csv")):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ValueError, match=bad):
            nx.selection(quick=True)
        monkeypatch.delenv(var)


def test_every_query_reads_the_streams_its_builtin_query_takes() -> None:
    # in the order `stretchflow run nexmark-qN --input ...` takes them
    assert nx.READS["q4"] == nx.READS["q6"] == ("auctions", "bids")
    assert nx.READS["q3"] == nx.READS["q8"] == ("persons", "auctions")
    assert set(nx.READS) == set(nx.QUERIES)


def test_check_accepts_the_same_rows_in_any_order_and_float_noise_only(tmp_path: Path) -> None:
    want = _write(tmp_path / "want.jsonl", [
        {"ts": 10, "category": 10, "avg": 2.0 / 3.0}, {"ts": 10, "category": 11, "avg": 5.5},
        {"ts": 20, "category": 10, "avg": 1e8 / 7}])
    digests: dict[Path, tuple[int, int]] = {}
    # another order and field order: the digest says equal
    same = _write(tmp_path / "same.jsonl", [
        {"avg": 1e8 / 7, "ts": 20, "category": 10}, {"category": 11, "ts": 10, "avg": 5.5},
        {"ts": 10, "avg": 2.0 / 3.0, "category": 10}])
    assert nx.check(want, same, digests) == {"correct": True, "rows": 3, "by": "digest"}
    assert want in digests  # kept for the next system's check
    # a DECIMAL printed by another system: the last bits differ, row by row says equal
    noisy = _write(tmp_path / "noisy.jsonl", [
        {"ts": 10, "category": 10, "avg": 0.6666666666666667 * (1 + 1e-15)},
        {"ts": 10, "category": 11, "avg": 5.5}, {"ts": 20, "category": 10, "avg": 14285714.2857}])
    assert nx.check(want, noisy, digests) == {"correct": True, "rows": 3, "by": "rows",
                                              "missing_rows": 0, "extra_rows": 0}
    # off by a relative 1e-6: a wrong value, one row missing and one in excess
    off = _write(tmp_path / "off.jsonl", [
        {"ts": 10, "category": 10, "avg": 2.0 / 3.0}, {"ts": 10, "category": 11, "avg": 5.5},
        {"ts": 20, "category": 10, "avg": 1e8 / 7 * (1 + 1e-6)}])
    assert nx.check(want, off, digests)["missing_rows"] == 1


def test_check_refuses_a_wrong_value_a_wrong_ts_and_a_missing_row(tmp_path: Path) -> None:
    rows = [{"ts": 10, "auction": 1, "num": 5}, {"ts": 12, "auction": 2, "num": 5}]
    want = _write(tmp_path / "want.jsonl", rows)
    for i, bad in enumerate(([{"ts": 10, "auction": 1, "num": 6}, rows[1]],
                             [{"ts": 11, "auction": 1, "num": 5}, rows[1]],
                             [rows[0]],
                             [*rows, rows[1]])):
        got = nx.check(want, _write(tmp_path / f"bad{i}.jsonl", bad))
        assert got["correct"] is False and got["by"] == "rows", bad
        assert got["missing_rows"] + got["extra_rows"] >= 1
    assert nx.check(None, want)["correct"] is None


def _fake_peer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> str:
    program = tmp_path / "prog.py"
    program.write_text(body)
    monkeypatch.setitem(nx.PEERS, "fake", Peer("fake-0", (), str(program)))
    return "fake"


def test_a_peer_that_cannot_express_a_query_says_why_and_one_that_can_reports_its_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exe = Path(sys.executable)
    name = _fake_peer(monkeypatch, tmp_path, (
        "import json, sys\n"
        "q, data, out, *kw = sys.argv[1:]\n"
        "if q == 'q6':\n"
        "    print(json.dumps({'unsupported': 'no OVER window on a stream'})); sys.exit(3)\n"
        "open(out, 'w').write(json.dumps({'ts': 1, 'kw': sorted(kw)}) + '\\n')\n"
        "print('log line'); print(json.dumps({'elapsed_s': 0.25, 'rows_out': 1}))\n"))
    with pytest.raises(nx.Unsupported, match="no OVER window"):
        nx._peer_run(name, exe, "q6", tmp_path, tmp_path / "o.jsonl", "jsonl",
                     {"window": 10_000, "slide": 2_000}, 60)
    r = nx._peer_run(name, exe, "q5", tmp_path, tmp_path / "o.jsonl", "parquet",
                     {"window": 10_000, "slide": 2_000}, 60)
    assert r["own_s"] == 0.25 and r["wall_s"] > 0
    assert json.loads((tmp_path / "o.jsonl").read_text())["kw"] == [
        "format=parquet", "slide=2000", "window=10000"]
    _fake_peer(monkeypatch, tmp_path, "import sys; print('boom', file=sys.stderr); sys.exit(1)")
    with pytest.raises(RuntimeError, match="exit code 1: boom"):
        nx._peer_run(name, exe, "q5", tmp_path, tmp_path / "o.jsonl", "jsonl", {}, 60)


def _cell(runs: dict[str, tuple[float, float, float, int]], wrong: tuple[str, ...] = ()
          ) -> dict:
    return {"systems": {s: {"events_per_s": {"min": lo, "median": med, "max": hi, "n": n},
                            "correct": s not in wrong}
                        for s, (lo, med, hi, n) in runs.items()},
            "unsupported": {}, "failed": {}, "not_run": {}}


def test_versus_names_the_faster_side_with_its_ratio_and_interval() -> None:
    own, peers = ["reference", "vsn2"], ["flink-sql", "polars"]
    c = _cell({"reference": (1e6, 1.1e6, 1.2e6, 2), "vsn2": (0.5e6, 0.6e6, 0.7e6, 2),
               "flink-sql": (3e6, 3.3e6, 3.6e6, 2), "polars": (2e6, 2.2e6, 2.4e6, 2)})
    best_own, best_peer, faster, interval = _versus(c, own, peers)
    assert (best_own, best_peer) == ("reference", "flink-sql")
    assert faster == "flink-sql 3.00×"
    assert interval == "0.28–0.40"  # 1.0/3.6 … 1.2/3.0
    # a wrong output never wins; one run each has no interval
    c = _cell({"reference": (2e6, 2e6, 2e6, 1), "flink-sql": (9e6, 9e6, 9e6, 1),
               "polars": (1e6, 1e6, 1e6, 1)}, wrong=("flink-sql",))
    assert _versus(c, own, peers) == ["reference", "polars", "stretchflow 2.00×",
                                      "one run each: no interval"]
    assert _versus(_cell({"reference": (1, 1, 1, 1)}), own, peers)[2] == "–"
    assert rate(1_234_567) == "1.23 M" and rate(45_678) == "46 k"


def test_report_says_not_measured_without_a_result(tmp_path: Path) -> None:
    text, _ = render_blocks(BLOCK, Results(tmp_path))
    assert "*Not measured*: `benchmarks/results/nexmark.json` does not exist" in text


@pytest.mark.bench
def test_quick_run_measures_every_query_checks_outputs_and_renders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRETCHFLOW_CACHE", str(tmp_path / "cache"))  # its own inputs
    for v in ENV:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("NEXMARK_SYSTEMS", "reference,vsn2")  # no peer venv to install here
    path = BENCHMARKS["nexmark"][2](True, str(tmp_path / "results"))
    doc = json.loads(path.read_text())
    m, p = doc["metrics"], doc["parameters"]
    assert doc["benchmark"] == "nexmark" and (path.parent / "nexmark.png").exists()
    assert p["systems"] == ["reference", "vsn2"] and p["formats"] == ["parquet"]
    assert sorted(m["cells"]) == [f"parquet/q{i}" for i in range(9)]
    for cell in m["cells"].values():
        assert cell["failed"] == {} and cell["unsupported"] == {}
        assert cell["events_in"] > 0
        for s in ("reference", "vsn2"):
            v = cell["systems"][s]
            assert v["correct"] is True and v["own_s"]["n"] == 1
            assert v["wall_s"]["median"] > v["own_s"]["median"] > 0
        assert cell["runs"]["vsn2"][0]["output"]["by"] in ("digest", "rows")
        assert cell["runs"]["reference"][0]["output"]["by"] == "is the expected output"
    # q3 and q8 read persons and auctions: 1 + 3 of every 50 events
    assert m["cells"]["parquet/q3"]["events_in"] == nx.QUICK_EVENTS * 4 // 50
    text, _ = render_blocks(BLOCK, Results(path.parent))
    assert "| Q5 |" in text and "Every output right" in text and ": yes." in text


@pytest.mark.bench
def test_the_polars_and_duckdb_programs_give_the_references_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded peers in their own venvs (installed on first use, as the bench does; the
    inputs and venvs in the default cache, shared), on every query of the quick input in
    both formats: the same rows as the reference engine."""
    monkeypatch.setenv("NEXMARK_SYSTEMS", "reference,polars,duckdb")
    monkeypatch.setenv("NEXMARK_FORMATS", "jsonl,parquet")
    for v in ("NEXMARK_EVENTS", "NEXMARK_QUERIES", "NEXMARK_ROUNDS", "NEXMARK_TIMEOUT"):
        monkeypatch.delenv(v, raising=False)
    doc = json.loads(BENCHMARKS["nexmark"][2](True, str(tmp_path / "results")).read_text())
    cells = doc["metrics"]["cells"]
    assert len(cells) == 18
    for key, cell in cells.items():
        if cell["not_run"]:
            pytest.skip(f"a peer venv could not be made: {cell['not_run']}")
        assert cell["failed"] == {} and cell["unsupported"] == {}, key
        for s in ("polars", "duckdb"):
            assert cell["runs"][s][0]["output"]["correct"] is True, (key, s)
            assert cell["runs"][s][0]["output"]["by"] in ("digest", "rows")


def test_the_figure_has_a_colour_for_every_system(tmp_path: Path) -> None:
    systems = [*nx.OWN, *nx.PEERS]  # eleven: more than one ten-colour palette
    run = {"events_per_s": {"min": 1.0, "median": 2.0, "max": 3.0, "n": 1}, "correct": True}
    metrics = {"cells": {"jsonl/q0": {"format": "jsonl", "query": "q0",
                                      "systems": {s: run for s in systems}}}}
    assert nx.draw(metrics, systems, tmp_path / "nx.png", quick=True).exists()
