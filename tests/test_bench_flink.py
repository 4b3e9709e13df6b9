"""``stretchflow bench stretchflow-vs-flink`` (stretchflow_bench.flink): the JSON of a quick run,
the report block that prints the paper's values from it, and the PyFlink programs' outputs
against the reference engine's (when the PyFlink venv exists)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretchflow_bench import BENCHMARKS, CROSS_ENGINE, flink
from stretchflow_bench.report import Results
from stretchflow_bench.report_tables import RENDERERS


@pytest.fixture(scope="module")
def quick_doc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A quick run of two shapes, tiny inputs, PyFlink reported missing (its own test is
    below): the JSON does not depend on whether this machine has the venv."""
    out = tmp_path_factory.mktemp("vs-flink")
    mp = pytest.MonkeyPatch()
    mp.setattr(flink, "_pyflink", lambda quick, progress: (None, "not installed: test"))
    try:
        path = flink.run(quick=True, out_dir=out, shapes=["q2-forward", "q3-scalejoin"],
                         sizes={"q2-forward": 300, "q3-scalejoin": 400}, rounds=2)
    finally:
        mp.undo()
    return path, json.loads(path.read_text())


def test_registered_as_a_cross_engine_benchmark():
    assert flink.NAME in BENCHMARKS and flink.NAME in CROSS_ENGINE


def test_quick_json_shape(quick_doc):
    path, doc = quick_doc
    assert path.name == "stretchflow-vs-flink.json" and doc["benchmark"] == flink.NAME
    assert doc["parameters"]["quick"] is True and doc["parameters"]["rounds"] == 2
    assert doc["plot"] == "stretchflow-vs-flink.png" and (path.parent / doc["plot"]).exists()
    m = doc["metrics"]
    assert m["pyflink"] == "not installed: test"
    q2, q3 = m["q2-forward"], m["q3-scalejoin"]
    # two streams of 300 tuples: every one forwarded once
    assert q2["tuples_in"] == 600 and q2["rows_out"] == 600
    assert q3["tuples_in"] == 800
    for shape in (q2, q3):
        assert shape["flink1"] == shape["flink2"] == "not installed: test"
        assert shape["throughput_ratios"] == {}
        for v in ("vsn1", "vsn2"):
            s = shape[v]
            assert s["correctness"]["correct"], s["correctness"]
            assert s["correctness"]["rounds"] == 2 == len(s["runs"])
            assert s["correctness"]["rows_expected"] == shape["rows_out"]
            # a load probe per run: what the report's quiet verdict is measured from
            assert all({"load_before", "load_after", "other_cpu_s"} <= r["probe"].keys()
                       for r in s["runs"])
            assert s["tuples_per_s"]["own"] == pytest.approx(
                shape["tuples_in"] / s["own_s"]["median"])
    assert doc["parameters"]["paper"]["q2-forward"]["cite"] == "§8.2, Fig. 7"
    assert doc["quiet"] in (True, False)


def test_report_prints_the_papers_values_from_the_json(quick_doc, tmp_path):
    path, doc = quick_doc
    doc["parameters"]["paper"]["q2-forward"]["flink_tuples_per_s"]["lowest_pi"] = 43_210
    (tmp_path / path.name).write_text(json.dumps(doc))
    text = RENDERERS[flink.NAME](Results(tmp_path))
    assert "43 210 → 2 000 t/s" in text  # from the JSON, not typed in
    assert "§8.3, Fig. 8" in text
    rate = doc["metrics"]["q2-forward"]["vsn1"]["tuples_per_s_own"]["median"]
    assert f"{rate:,.0f}".replace(",", " ") in text
    assert text.count("| PyFlink, parallelism 1 | not installed |") == 2


def _pyflink_exe() -> Path:
    exe, why = flink._pyflink(quick=True, progress=None)
    if exe is None:
        print(f"skipped: {why}")
        pytest.skip(why)
    return exe


@pytest.mark.slow
# Q3: a band of 40 instead of 10 finds more matches in fewer tuples (500 rows per stream
# give 15 joined rows; 1500 at band 10 gave 9), each PyFlink variant then has less to join
@pytest.mark.parametrize("shape,rows,params", [("q2-forward", 200, {}),
                                               ("q3-scalejoin", 500, {"band": 40}),
                                               ("q1-wordcount", 200, {})],
                         ids=["q2-forward", "q3-scalejoin", "q1-wordcount"])
def test_pyflink_programs_match_the_reference(shape, rows, params, tmp_path):
    exe = _pyflink_exe()
    spec = flink._shapes(quick=True)[shape]
    kind, _, rate = spec["input"]
    spec["input"] = (kind, rows, rate)
    spec["params"] = {**spec["params"], **params}
    variants = ["flink1", "flink2", *spec.get("extra", ())]  # Q3: and the SQL join
    stats = flink._one_shape(shape, spec, tmp_path, variants, exe, rounds=1, seed=3,
                             timeout=600, progress=None)
    assert stats["rows_out"] > 0
    for v in variants:
        s = stats[v]
        assert isinstance(s, dict), s  # a string says why it failed
        assert s["correctness"]["correct"], s["correctness"]
        if shape == "q2-forward":
            assert s["sorted_per_instance"] is True
            assert s["latency_ms"]["n"] == stats["tuples_in"]
