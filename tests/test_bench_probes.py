"""Issue #20: the ordered, slack, elastic and VSN benchmarks probe every timed repeat
(bench.common.repeat_probe) and their JSON records whether the machine was quiet. One cheap
benchmark of each module runs at a small size into a temporary directory; its JSON must hold
one probe per run, each with numeric load averages and other processes' CPU time, and still
render in docs/RESULTS.md's block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stretchflow_bench import BENCHMARKS, elastic, vsn
from stretchflow_bench.common import find_probes, write_result
from stretchflow_bench.report import Results
from stretchflow_bench.report_tables import RENDERERS


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check(path: Path, runs: int) -> dict[str, Any]:
    """The JSON at ``path`` has ``runs`` complete probes and a measured ``quiet``, and its
    RESULTS.md block renders with the measured quiet line."""
    doc = json.loads(path.read_text())
    assert "quiet" in doc
    probes = find_probes(doc["metrics"])
    assert len(probes) == runs, [sorted(p) for p in probes]
    for p in probes:
        for key in ("load_before", "load_after", "other_cpu_s", "wall_s", "own_cpu_s"):
            assert _is_number(p[key]), (key, p)
        assert p["wall_s"] > 0 and p["load_before"] >= 0 and p["other_cpu_s"] >= 0
    # /proc/stat is readable here, so quiet is a measured yes/no, not None
    assert doc["quiet"] in (True, False)
    text = RENDERERS[doc["benchmark"]](Results(path.parent))
    assert "(measured)" in text and "not measured" not in text, text
    return doc


@pytest.mark.bench
def test_ordered_reorder_probes_each_run(tmp_path: Path) -> None:
    path = BENCHMARKS["ordered-reorder"][2](True, str(tmp_path))
    doc = _check(path, runs=2 * 2)  # 2 cases x 2 reorder buffers x 1 quick repeat
    for case in ("cheap", "numpy_0.5ms"):
        assert [len(doc["metrics"][case][rb]["probes"]) for rb in ("lock", "nonblocking")] \
            == [1, 1]


@pytest.mark.bench
def test_slack_overhead_probes_each_run(tmp_path: Path) -> None:
    path = BENCHMARKS["slack-overhead"][2](True, str(tmp_path))
    doc = _check(path, runs=4 * 4)  # 4 reader counts x 4 buffers x 1 quick repeat
    one = doc["metrics"]["readers"]["2"]["ssg-cap1024"]
    # the median of one repeat is that repeat; the renderer's scalar keys stay
    assert one["read_ms_per_tuple"] == one["repeats"][0]["read_ms_per_tuple"]
    assert one["read_ms_per_tuple_summary"]["n"] == 1
    assert one["writer_waits"] == one["repeats"][0]["writer_waits"]


@pytest.mark.bench
def test_elastic_hedge_probes_its_run(tmp_path: Path) -> None:
    kw = {"seconds": 3.0, "max_rate": 200.0, "window": 2000, "max_parallelism": 2}
    m = elastic.hedge(**kw)
    _check(write_result("vsn-hedge", {"quick": True, **kw}, m, tmp_path), runs=1)
    assert m["probe"]["wall_s"] >= m["wall_s"]


@pytest.mark.bench
def test_vsn_wordcount_probes_each_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    monkeypatch.chdir(tmp_path)  # the benchmark writes its input under ./benchmarks/results
    m = vsn.wordcount_vs_reference(rows=2000, repeats=2)
    path = write_result("vsn-wordcount", {"rows": 2000, "repeats": 2}, m, tmp_path / "out")
    _check(path, runs=2 * 2)
    assert {k: len(v) for k, v in m["probes"].items()} == {"reference": 2, "vsn1": 2}


@pytest.mark.bench
def test_vsn_forward_repeats_and_probes_each_run(tmp_path: Path) -> None:
    # the paced run lasts 5 s whatever the rate: 2 rounds of one parallelism keep it short
    m = vsn.forward(rows=2000, paced_rate=400.0, parallelisms=(1,), repeats=2)
    path = write_result("vsn-forward", {"repeats": 2}, m, tmp_path)
    _check(path, runs=2 * 2)  # full-speed and paced run per round
    r = m["1"]
    tput = sorted(x["throughput_tuples_per_s"] for x in r["repeats"])
    assert r["throughput_summary"]["n"] == 2
    assert r["throughput_summary"]["min"] == tput[0] and r["throughput_summary"]["max"] == tput[1]
    # one round's latency summary (the lower middle p99), not a mix of rounds
    assert r["latency_ms_paced"] == min((x["latency_ms_paced"] for x in r["repeats"]),
                                        key=lambda d: d["p99"])


def test_forward_rejects_no_repeats() -> None:
    with pytest.raises(ValueError, match="vsn-forward: repeats must be >= 1"):
        vsn.forward(rows=10, repeats=0)


def test_progress_lines_go_where_asked(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from stretchflow_bench.common import say_progress

    got: list[str] = []
    monkeypatch.setenv("X_PROGRESS", "1")
    say_progress("X_PROGRESS", got.append)("given")  # a given callback wins
    assert got == ["given"] and capsys.readouterr().err == ""
    say_progress("X_PROGRESS")("to stderr")
    err = capsys.readouterr().err
    assert err.endswith("] to stderr\n") and err.startswith("[")
    monkeypatch.setenv("X_PROGRESS", "0")
    say_progress("X_PROGRESS")("nowhere")
    assert capsys.readouterr().err == ""
