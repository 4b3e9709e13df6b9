"""The DEBS'19 performance model (stretchflow_bench.model): the paper's formulas against
hand-computed values of Table 1, the measured-cost predictions, the per-thread CPU meter, and
the quick benchmark's JSON and its report block."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from stretchflow_bench import BENCHMARKS, CROSS_ENGINE, model


def test_table1_costs_by_hand():
    # d^I = 2, n = 4: d^R = 0.1*2*4, d^C = 0.01*2*4, d^M = 0.1*2*4*log2(4) and 0.01*...
    t = model.table1(2.0, 4)
    assert t["d_R"] == pytest.approx(0.8)
    assert t["d_C"] == pytest.approx(0.08)
    assert t["d_M_psn"] == pytest.approx(1.6)
    assert t["d_M_vsn"] == pytest.approx(0.16)
    # n = 1: log 1 = 0, so neither engine pays a merge; routing and contention remain
    t1 = model.table1(2.0, 1)
    assert t1["d_M_psn"] == 0.0 and t1["d_M_vsn"] == 0.0
    assert t1["d_R"] == pytest.approx(0.2) and t1["d_C"] == pytest.approx(0.02)


def test_pipeline_runs_at_its_slowest_stage():
    assert model.stage_times(1.0, 0.5, 3.0, 0.2, 0.1) == pytest.approx((1.5, 3.0, 0.3))
    assert model.pipeline_rate(1.0, 0.5, 3.0, 0.2, 0.1) == pytest.approx(1 / 3.0)
    # the ingress side is the bottleneck once T_P is fast enough
    assert model.pipeline_rate(1.0, 0.5, 0.3, 0.2, 0.1) == pytest.approx(1 / 1.5)


def test_figure3_with_table1_costs_by_hand():
    # d^I = 1, d^P = 10, d^O = 0.5; d^P_n = d^P / n
    f = model.figure3(1.0, 10.0, 0.5, ns=(1, 4, 8, 16))
    # n = 1: T_P (10) is the bottleneck of both
    assert f["psn"][1] == pytest.approx(0.1) and f["vsn"][1] == pytest.approx(0.1)
    # n = 4: PSN max(1.4, 2.5, 0.5 + 0.8) = 2.5; VSN max(1.04, 2.5, 0.58) = 2.5
    assert f["psn"][4] == pytest.approx(1 / 2.5) and f["vsn"][4] == pytest.approx(1 / 2.5)
    # n = 8: PSN's merge 0.5 + 0.1*8*3 = 2.9 dominates; VSN's T_P 1.25
    assert f["psn"][8] == pytest.approx(1 / 2.9)
    assert f["vsn"][8] == pytest.approx(1 / 1.25)
    # n = 16: PSN 0.5 + 0.1*16*4 = 6.9; VSN's ingress 1 + 0.16 = 1.16 (its merge 1.14)
    assert f["psn"][16] == pytest.approx(1 / 6.9)
    assert f["vsn"][16] == pytest.approx(1 / 1.16)
    # the paper's conclusion: VSN scales further than PSN
    assert f["vsn"][16] > f["vsn"][8] > f["psn"][8] > f["psn"][16]


def test_fits_recover_the_paper_forms():
    assert model.fit_linear({1: 0.0, 2: 0.1, 4: 0.3}) == pytest.approx(0.1)
    assert model.fit_nlogn({1: 0.0, 2: 0.2, 4: 0.8}) == pytest.approx(0.1)
    # least squares through the origin for points off the line: (0.2*1 + 0.3*3) / (1 + 9)
    assert model.fit_linear({2: 0.2, 4: 0.3}) == pytest.approx(0.11)


def _synthetic() -> tuple[dict, dict]:
    inputs = {"vsn": {"d_I": 1.0, "d_P": 10.0, "d_O": 0.5},
              "sn": {"d_I": 2.0, "d_P": 10.0, "d_O": 1.0}}
    overheads = {
        "vsn": {"d_C": {"measured": {1: 0.0, 2: 0.1, 4: 0.3}, "coef": 0.1},
                "d_M": {"measured": {1: 0.0, 2: 0.2, 4: 0.8}, "coef": 0.1}, "d_skip": 1.0},
        "sn": {"d_R": {"measured": {1: 0.0, 2: 0.5}, "coef": 0.5},
               "d_M": {"measured": {1: 0.0, 2: 0.4}, "coef": 0.2}},
    }
    return inputs, overheads


def test_predict_with_measured_costs_by_hand():
    inputs, overheads = _synthetic()
    p = model.predict(inputs, overheads, work_s=9.0, cores=2, ns=(1, 2, 8))
    v = p["vsn"]
    # n = 2 (measured overheads): T_I 1.1, T_P (10 + 1)/2 = 5.5, T_O 0.7 -> paper 1/5.5;
    # all threads' CPU 1.1 + 2*5.5 + 0.7 = 12.8: GIL-held 3.8, two cores 6.4 -> 1/6.4
    assert v["stages"][2]["T_P"] == pytest.approx(5.5)
    assert v["paper"][2] == pytest.approx(1 / 5.5)
    assert v["machine"][2] == pytest.approx(1 / 6.4)
    # n = 8 (fitted): d^C growth 0.1*7, d^M 0.1*8*3, T_P (10 + 7)/8 -> T_O 2.9 limits;
    # CPU 1.7 + 8*2.125 + 2.9 = 21.6, GIL-held 12.6 > 21.6/2 -> machine 1/12.6
    assert v["stages"][8]["T_I"] == pytest.approx(1.7)
    assert v["paper"][8] == pytest.approx(1 / 2.9)
    assert v["machine"][8] == pytest.approx(1 / 12.6)
    s = p["sn"]
    # SN: no skip cost; n = 2: max(2.5, 5, 1.4) = 5; n = 8: splitter 2 + 0.5*7 = 5.5,
    # merger 1 + 0.2*24 = 5.8 -> 1/5.8
    assert s["paper"][2] == pytest.approx(1 / 5.0)
    assert s["paper"][8] == pytest.approx(1 / 5.8)
    # n = 1: nothing parallel, machine bound = GIL-held (total 13 - work 9 = 4) or 13/2
    assert s["machine"][1] == pytest.approx(1 / 10.0)


def test_loaded_prediction_by_hand():
    stage = {"T_I": 1.0, "T_P": 5.0, "T_O": 0.5, "gil_held": 3.0, "total_cpu": 12.0}
    # both CPUs free: max(5, 12 / 2) = 6
    assert model.loaded_rate(stage, 2.0) == pytest.approx(1 / 6.0)
    # half a CPU left: the slowest stage takes 5 / 0.5 = 10, the total 12 / 0.5 = 24
    assert model.loaded_rate(stage, 0.5) == pytest.approx(1 / 24.0)
    # 1.5 CPUs: one thread still gets at most one: max(5, 12 / 1.5 = 8)
    assert model.loaded_rate(stage, 1.5) == pytest.approx(1 / 8.0)


def test_available_cores_from_a_probe():
    probe = {"other_cpu_s": 3.0, "wall_s": 2.0, "cpus": 2}
    assert model.available_cores(probe) == pytest.approx(0.5)
    assert model.available_cores({**probe, "other_cpu_s": 10.0}) == pytest.approx(0.05)
    assert model.available_cores({**probe, "other_cpu_s": None}) is None


def test_relative_error():
    assert model.relative_error(110.0, 100.0) == pytest.approx(0.1)
    assert model.relative_error(50.0, 100.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="stretchflow-model"):
        model.relative_error(1.0, 0.0)


def test_thread_cpu_tells_busy_from_waiting_threads():
    original = threading.Thread.run

    def busy() -> None:
        x = 0
        for i in range(300_000):
            x += i * i

    with model.ThreadCPU() as meter:
        a = threading.Thread(target=busy, name="busy")
        b = threading.Thread(target=time.sleep, args=(0.05,), name="idle")
        a.start()
        b.start()
        a.join()
        b.join()
    assert threading.Thread.run is original
    cpu = meter.cpu
    assert set(cpu) == {"busy", "idle"}
    assert cpu["busy"] > 5 * cpu["idle"]


def test_stages_of_sorts_thread_names():
    st = model.stages_of("vsn", {"source records": 1.0, "work[0]": 2.0, "work[1]": 3.0,
                                 "sink callback": 0.5, "metrics": 0.1})
    assert st["T_I"] == 1.0 and st["T_O"] == 0.5
    assert st["T_P"] == {"work[0]": 2.0, "work[1]": 3.0} and st["other"] == {"metrics": 0.1}
    st = model.stages_of("sn", {"sn-splitter-work": 1.0, "sn-channel-work-0": 2.0,
                                "sn-merger-work": 0.5})
    assert (st["T_I"], st["T_O"], st["T_P"]) == (1.0, 0.5, {"sn-channel-work-0": 2.0})
    with pytest.raises(RuntimeError, match="no vsn source/operator threads"):
        model.stages_of("vsn", {"MainThread": 1.0})


def test_work_is_a_real_cost():
    assert model.work(0) == 0
    assert model.work(4) == model.work(4)  # deterministic: same buffer, same digest byte
    assert model.work_alone(64, 20) > model.work_alone(0, 20)


def test_registered_as_a_cross_engine_benchmark():
    assert "stretchflow-model" in BENCHMARKS and "stretchflow-model" in CROSS_ENGINE


def test_quick_bench_json_and_report_block(tmp_path):
    from stretchflow_bench.report import Results
    from stretchflow_bench.report_tables import RENDERERS

    path = BENCHMARKS["stretchflow-model"][2](True, str(tmp_path))
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "stretchflow-model" and doc["parameters"]["quick"] is True
    assert (tmp_path / doc["plot"]).exists()
    acc = doc["parameters"]["paper_accuracy"]
    assert "DEBS 2019" in acc["citation"] and acc["numeric_error"] is None
    m = doc["metrics"]
    assert m["predicted_only_p"] == [4, 8, 16]
    assert set(m["predicted"]["vsn"]["paper"]) == {"1", "2", "4", "8", "16"}
    for eng in ("vsn", "sn"):
        inp = m["inputs_us"][eng]
        assert inp["d_P"] > inp["d_I"] > 0  # the work makes T_P the bottleneck at Π = 1
        for p in ("1", "2"):
            meas = m["measured"][f"{eng}{p}"]
            assert meas["tuples_per_s"]["n"] == doc["parameters"]["repeats"] == 3
            assert all("load_before" in r["probe"] for r in meas["runs"])
            c = m["compare"][f"{eng}{p}"]
            assert c["measured_median"] == meas["tuples_per_s"]["median"]
            assert c["rel_error_paper"] == pytest.approx(
                (c["paper"] - c["measured_median"]) / c["measured_median"])
            # the machine bound can only lower the paper's prediction
            assert c["machine"] <= c["paper"] * (1 + 1e-12)
            assert c["loaded"] <= c["machine"] * (1 + 1e-12)
            assert all(0.05 <= r["available_cores"] <= m["cores"] for r in meas["runs"])
        assert len(m["measured"][f"{eng}2"]["runs"][0]["cpu_per_tuple_s"]["T_P"]) == 2
    assert math.isfinite(m["overheads_us"]["vsn"]["d_C"]["coef_over_d_I"])
    text = RENDERERS["stretchflow-model"](Results(tmp_path))
    assert "Prediction only" in text and "stretchflow-model.json" in text
    assert f"{round(m['compare']['vsn2']['rel_error_paper'] * 100):+d} %" in text
