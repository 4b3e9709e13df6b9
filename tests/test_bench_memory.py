"""``stretchflow bench run memory`` (issue #33 item 4): the pure logic the verdicts rest on
(RSS at a fraction of a run, growth, the rule, thinning), the expected output computed from
the input (a wrong expectation would call every engine wrong, or a wrong engine right), the
output check, and a quick run end to end whose JSON the report renders."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stretchflow.cli_run import load_app
from stretchflow_bench import BENCHMARKS, CROSS_ENGINE
from stretchflow_bench import memory as mem
from stretchflow_bench.report import Results, render_blocks

BLOCK = "<!-- report:memory -->\n<!-- /report:memory -->\n"


# -- RSS at a fraction, growth, the rule, thinning -------------------------------------------
def test_rss_at_is_the_highest_sample_of_the_tenth_ending_there() -> None:
    series = [(t, 100.0 + t) for t in range(0, 101)]  # rises 1 MiB a second for 100 s
    assert mem.rss_at(series, 0.5) == 150.0
    assert mem.rss_at(series, 1.0) == 200.0
    # a dip inside the stretch does not count, a spike does
    spiky = [(t, 500.0 if t == 47 else 100.0) for t in range(0, 101)]
    assert mem.rss_at(spiky, 0.5) == 500.0
    assert mem.rss_at(spiky, 0.25) == 100.0
    # no sample in the stretch: the last one before it
    assert mem.rss_at([(0.0, 10.0), (1.0, 20.0), (10.0, 30.0)], 0.5) == 20.0
    assert mem.rss_at([], 0.5) is None


def test_growth_is_near_one_when_flat_and_above_the_bound_when_memory_climbs() -> None:
    flat = [(t * 0.15, 300.0 + (t % 7)) for t in range(400)]  # a sawtooth around 300 MiB
    assert mem.growth(flat) == pytest.approx(1.0, abs=0.03)
    leak = [(float(t), 100.0 + 10.0 * t) for t in range(101)]  # 100 -> 1100 MiB
    assert mem.growth(leak) == pytest.approx(1100 / 600)
    assert mem.growth(leak) > mem.BOUND
    # the teardown's last samples (sn's channels gone) do not make the end look smaller
    teardown = [(float(t), 400.0) for t in range(100)] + [(100.0, 150.0)]
    assert mem.growth(teardown) == pytest.approx(1.0)
    assert mem.growth([]) is None


def test_verdict_is_bounded_only_when_every_round_at_every_k_is_within_the_bound() -> None:
    ok = mem.verdict({1_000: [1.01, 1.03], 10_000: [1.0, 1.2]})
    assert ok["bounded"] is True and ok["unbounded_from_keys"] is None
    # one round above the bound at 10⁵ and at 10⁶: memory stops being bounded at 10⁵
    bad = mem.verdict({1_000: [1.0, 1.0], 100_000: [1.05, 1.31], 1_000_000: [1.9, 2.0],
                       10_000: [1.1, 1.19]})
    assert bad["bounded"] is False and bad["unbounded_from_keys"] == 100_000
    assert bad["worst_growth"] == 1.31
    assert "100,000" in bad["text"]
    # the median within the bound does not save a round above it
    assert mem.verdict({1_000: [1.0, 1.0, 1.5]})["bounded"] is False
    # a K that failed is named, not counted as bounded
    part = mem.verdict({1_000: [1.0], 10_000: []}, not_measured=[1_000_000])
    assert part["bounded"] is True and part["keys_not_measured"] == [10_000, 1_000_000]
    assert "not measured at K = 10,000, 1,000,000" in part["text"]
    assert mem.verdict({1_000: []})["bounded"] is None


def test_thin_keeps_at_most_max_points_with_first_last_and_peak() -> None:
    series = [(i * 0.15, float(i % 50)) for i in range(1_000)]
    series[333] = (series[333][0], 999.0)  # the peak, between two kept samples
    out = mem.thin(series, 200)
    assert len(out) <= 200
    assert out[0] == series[0] and out[-1] == series[-1]
    assert (series[333][0], 999.0) in out
    assert all(a[0] < b[0] for a, b in zip(out, out[1:], strict=False))
    short = [(0.0, 1.0), (0.1, 2.0)]
    assert mem.thin(short, 200) == short


# -- the expected output -------------------------------------------------------------------------
def _brute(ts: list[int], keys: list[int], values: list[int], size: int
           ) -> dict[tuple[int, int], tuple[int, int]]:
    """(window end, key) -> (count, sum), one event at a time."""
    out: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    for t, k, v in zip(ts, keys, values, strict=True):
        acc = out[((t // size + 1) * size, k)]
        acc[0] += 1
        acc[1] += v
    return {key: (c, s) for key, (c, s) in out.items()}


def _digest(rows: dict[tuple[int, int], tuple[int, int]]) -> int:
    ends, ks = (np.array([r[i] for r in rows], dtype=np.int64) for i in (0, 1))
    cs, ss = (np.array([v[i] for v in rows.values()], dtype=np.int64) for i in (0, 1))
    return mem.row_digest(ends, ks, cs, ss)


def test_expected_rows_from_a_small_array() -> None:
    ts = np.array([0, 10, 990, 1000, 1500, 1999, 3100], dtype=np.int64)
    keys = np.array([2, 0, 2, 1, 1, 1, 0], dtype=np.int64)
    values = np.array([5, 1, 7, 2, 3, 4, 9], dtype=np.int64)
    stats = mem.window_stats(ts, keys, values, 3, 1000)
    rows, digest, per_window = mem.expected_rows(stats, 1000)
    # window [0, 1000): keys 2 and 0; [1000, 2000): key 1; [3000, 4000): key 0; none for
    # [2000, 3000)
    assert rows == 4 and per_window == [2, 1, 1]
    brute = _brute(ts.tolist(), keys.tolist(), values.tolist(), 1000)
    assert brute[(1000, 2)] == (2, 12) and brute[(2000, 1)] == (3, 9)
    assert digest == _digest(brute)


def test_row_digest_ignores_order_and_sees_every_change() -> None:
    rng = np.random.default_rng(5)
    cols = [rng.integers(0, 1_000, 50, dtype=np.int64) for _ in range(4)]
    d = mem.row_digest(*cols)
    perm = rng.permutation(50)
    assert mem.row_digest(*(c[perm] for c in cols)) == d
    for i in range(4):  # one field of one row changed
        changed = [c.copy() for c in cols]
        changed[i][7] += 1
        assert mem.row_digest(*changed) != d
    assert mem.row_digest(*(c[1:] for c in cols)) != d  # a row lost
    assert mem.row_digest(*(np.append(c, c[0]) for c in cols)) != d  # a row doubled


def test_dataset_is_seeded_cached_sorted_and_expected_matches_a_brute_force(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # row groups (and the expectation's batches) of 4 000 rows: windows straddle them
    monkeypatch.setattr(mem, "CHUNK", 4_000)
    p = mem.dataset(30_000, 50, rate=1_000, seed=3, directory=tmp_path)
    stamp = p.stat().st_mtime_ns
    assert mem.dataset(30_000, 50, rate=1_000, seed=3, directory=tmp_path) == p
    assert p.stat().st_mtime_ns == stamp  # reused, not rewritten
    other = mem.dataset(30_000, 50, rate=1_000, seed=4, directory=tmp_path)
    t, u = pq.read_table(p), pq.read_table(other)
    assert t.column_names == ["ts", "key", "value"] and not t.equals(u)
    assert pq.ParquetFile(p).metadata.num_row_groups == 8
    ts, keys, values = (t.column(c).to_numpy() for c in t.column_names)
    assert (np.diff(ts) >= 0).all() and ts[-1] == 29_999  # 1 000 events/s: 30 s
    assert set(np.unique(keys)) == set(range(50))
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".")] == []
    want = mem.expected(p, 50, window_ms=7_000)  # windows that straddle row groups' ends
    brute = _brute(ts.tolist(), keys.tolist(), values.tolist(), 7_000)
    assert want["rows"] == len(brute) and want["digest"] == _digest(brute)
    assert want["events"] == 30_000 and want["windows"] == 5
    assert want["keys_per_window"] == [50] * 5  # 7 000 events per window see every key


def test_check_output_accepts_the_right_rows_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    p = mem.dataset(5_000, 20, rate=1_000, seed=1, directory=tmp_path)
    want = mem.expected(p, 20, window_ms=1_000)
    t = pq.read_table(p)
    brute = _brute(*(t.column(c).to_pylist() for c in ("ts", "key", "value")), 1_000)
    rows = [{"ts": e, "key": k, "count": c, "sum": s} for (e, k), (c, s) in brute.items()]

    def write(rs: list[dict]) -> Path:
        out = tmp_path / "out.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in rs))
        return out

    assert mem.check_output(write(rows[::-1]), want)["correct"] is True  # any order
    lost = mem.check_output(write(rows[1:]), want)
    assert lost["correct"] is False and lost["rows_out"] == want["rows"] - 1
    wrong = [dict(r) for r in rows]
    wrong[3]["sum"] += 1
    res = mem.check_output(write(wrong), want)
    assert res["correct"] is False and res["digest_equal"] is False
    assert res["rows_out"] == res["rows_expected"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert mem.check_output(empty, want)["correct"] is False


def test_the_flow_file_outputs_what_expected_counts(tmp_path: Path) -> None:
    """The flow's window ends and fields are the ones :func:`expected` assumes: a run of the
    flow file on the reference engine, in process, gives the digest numpy computes."""
    p = mem.dataset(3_000, 30, rate=500, seed=2, directory=tmp_path)
    out = tmp_path / "flow.jsonl"
    load_app(mem.FLOW_FILE, {"input": str(p), "output": str(out), "size": "1s"}).run(
        engine="reference")
    assert mem.check_output(out, mem.expected(p, 30, window_ms=1_000))["correct"] is True


# -- registration and selection -----------------------------------------------------------------
def test_registered_cross_engine_and_selected_by_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert "memory" in BENCHMARKS and "memory" in CROSS_ENGINE
    assert BENCHMARKS["memory"][1] == "issue #33"
    for v in ("MEMORY_ENGINES", "MEMORY_KEYS", "MEMORY_EVENTS", "MEMORY_ROUNDS"):
        monkeypatch.delenv(v, raising=False)
    full = mem.selection(quick=False)
    assert full["engines"] == list(mem.ENGINES) and full["keys"] == list(mem.KEYS)
    assert full["events"] == 10_000_000 and full["rounds"] == 2
    monkeypatch.setenv("MEMORY_KEYS", "5000,100")
    monkeypatch.setenv("MEMORY_ENGINES", "slack")
    monkeypatch.setenv("MEMORY_ROUNDS", "3")
    sel = mem.selection(quick=True)
    assert sel["keys"] == [100, 5000] and sel["engines"] == ["slack"] and sel["rounds"] == 3
    assert sel["env"]["MEMORY_KEYS"] == "5000,100"
    monkeypatch.setenv("MEMORY_ENGINES", "vsn1,warp")
    with pytest.raises(ValueError, match="warp"):
        mem.selection(quick=True)


def test_report_says_not_run_without_a_result(tmp_path: Path) -> None:
    text, _ = render_blocks(BLOCK, Results(tmp_path))
    assert "*Not measured*: `benchmarks/results/memory.json` does not exist" in text


# -- a quick run, end to end ----------------------------------------------------------------------
@pytest.mark.bench
def test_quick_run_measures_every_engine_and_k_and_renders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRETCHFLOW_CACHE", str(tmp_path / "cache"))  # its own inputs
    for v in ("MEMORY_ENGINES", "MEMORY_KEYS", "MEMORY_EVENTS", "MEMORY_ROUNDS"):
        monkeypatch.delenv(v, raising=False)
    path = BENCHMARKS["memory"][2](True, str(tmp_path / "results"))
    doc = json.loads(path.read_text())
    m, p = doc["metrics"], doc["parameters"]
    assert doc["benchmark"] == "memory" and doc["plot"] == "memory.png"
    assert (path.parent / "memory.png").exists()
    assert p["quick"] is True and p["engines"] == list(mem.QUICK_ENGINES)
    assert sorted(m["cells"], key=int) == [str(k) for k in mem.QUICK_KEYS]
    assert m["all_correct"] is True and m["failed"] == {}
    for k, cell in m["cells"].items():
        assert cell["events"] == mem.QUICK_EVENTS and cell["windows"] == 10
        assert 0 < cell["keys_per_window"]["max"] <= int(k)
        for e in mem.QUICK_ENGINES:
            s = cell["engines"][e]
            assert s["correct"] is True and s["peak_rss_mb"]["n"] == 1
            run = cell["runs"][e][0]
            assert run["output"]["rows_out"] == cell["rows_expected"] > 0
            assert run["series"] and len(run["series"]) <= mem.MAX_POINTS
            assert run["peak_rss_mb"] >= max(r for _, r in run["series"]) > 20
            assert set(run["rss_at_mb"]) == {"25", "50", "75", "100"}
            assert run["growth"] is not None
            assert {"load_before", "other_cpu_s", "wall_s"} <= run["probe"].keys()
    assert set(m["verdicts"]) == set(mem.QUICK_ENGINES)
    assert set(m["rss_per_live_key_bytes"]["reference"]) == {"1000"}
    assert doc["quiet"] in (True, False)  # probed
    text, stale = render_blocks(BLOCK, Results(path.parent))
    assert stale == ["memory"]
    assert "Source: `memory.json`" in text and "**Quick run**" in text
    assert "| K | reference | vsn1 |" in text and "| 1 000 |" in text
    assert "Every output right" in text and ": yes." in text
    assert "![memory](../benchmarks/results/memory.png)" in text
