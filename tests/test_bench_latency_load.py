"""``bench latency-load`` (issue #33 item 3): the open-loop schedule and its coordinated-omission
correction, the delay and window-closing arithmetic, the histogram's percentiles, the warm-up
cut, the flow on the reference engine in this process, and a quick run end to end with its
RESULTS.md block."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import stretchflow as sf
from stretchflow.io.sources import pace
from stretchflow_bench import BENCHMARKS, CROSS_ENGINE, SUITES
from stretchflow_bench import latency_load as ll
from stretchflow_bench import latency_load_flow as lf
from stretchflow_bench.report import Results, render_blocks


class FakeClock:
    """``time.perf_counter`` and ``time.sleep`` of a test: time moves only when told."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        self.sleeps.append(d)
        self.t += d


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    # pace() reads time.perf_counter / time.sleep when it starts: the fake replaces both
    monkeypatch.setattr(time, "perf_counter", c.now)
    monkeypatch.setattr(time, "sleep", c.sleep)
    return c


# -- the schedule --------------------------------------------------------------------------------
def test_pace_is_open_loop_a_stall_is_caught_up_and_the_schedule_never_rebased(clock):
    """The engines' pacing (what ``at_rate`` uses): tuple i at t0 + i / rate; after a stall
    the tuples due meanwhile go at once, and then the original schedule resumes; a pacer that
    re-based on the stall would send tuple 36 at the stall's end + 25 / rate instead."""
    rate = 100.0
    sent = []
    for _, p in pace(iter([(i * 10, {"i": i}) for i in range(40)]), rate=rate):
        sent.append(clock.t)
        if p["i"] == 10:
            clock.t += 0.25  # the engine holds the source for 25 tuples' time
    t0 = sent[0]
    stall_end = t0 + 0.10 + 0.25
    for i in range(11):
        assert sent[i] == pytest.approx(t0 + i / rate)
    for i in range(11, 35):  # due during the stall: sent at once at its end, no sleep
        assert sent[i] == pytest.approx(stall_end)
    for i in range(35, 40):  # on the original schedule again
        assert sent[i] == pytest.approx(t0 + i / rate)
    assert sum(clock.sleeps) == pytest.approx(0.39 - 0.25)  # it slept only while ahead


def test_the_source_sets_t0_tracks_its_lag_and_stops_at_its_deadline(clock):
    """The flow's source through ``at_rate``: t0 is tuple 0's hand-over; an engine taking
    2 ms a tuple at 1000 t/s offered leaves it ever further behind (lag 1 ms per tuple), the
    schedule not moving; at its 3 s deadline it stops, and the achieved rate is ~500 t/s."""
    run = lf.RunState(1000.0, 1000.0, 5000, time.perf_counter, deadline_s=3.0)
    src = sf.io.iterable(lambda: lf.bids(run), name="bids").at_rate(1000.0)
    got = []
    for ts, p in src.items():
        got.append((ts, p["seq"], clock.t))
        clock.t += 0.002
    assert run.t0 == got[0][2] and run.starts == 1
    assert [s for _, s, _ in got] == list(range(len(got)))
    assert [ts for ts, _, _ in got] == [lf.bid_ts(i, 1000.0) for i in range(len(got))]
    assert run.truncated and run.sent == len(got) == 1536  # the first check past 3 s
    assert run.behind == run.lag_checks > 0
    assert run.max_lag_s == pytest.approx(0.001 * 1536, rel=1e-6)
    assert (run.sent - 1) / run.last_sent_s() == pytest.approx(500, rel=0.01)


def test_a_source_on_schedule_is_never_behind_and_achieves_the_offered_rate(clock):
    run = lf.RunState(2000.0, 2000.0, 3000, time.perf_counter)
    for _ in sf.io.iterable(lambda: lf.bids(run), name="bids").at_rate(2000.0).items():
        clock.t += 0.0001  # 0.1 ms a tuple, 0.5 ms allowed
    assert run.behind == 0 and not run.truncated and run.sent == 3000
    assert (run.sent - 1) / run.last_sent_s() == pytest.approx(2000.0, rel=1e-6)


# -- delays and windows ------------------------------------------------------------------------
def test_the_delay_is_from_the_scheduled_time():
    assert lf.delay_s(10.5, 10.0, 100, 400.0) == pytest.approx(0.25)
    assert lf.delay_s(10.0, 10.0, 0, 400.0) == 0.0
    assert lf.due_s(500, 1000.0) == 0.5


@pytest.mark.parametrize("rate", [1.0, 3.0, 7.5, 999.9, 1000.0, 33_333.3, 571_234.7])
def test_the_closing_tuple_is_the_first_at_or_after_the_window_end(rate):
    for end in range(1000, 20_001, 1000):
        i = lf.closing_index(end, rate)
        assert lf.bid_ts(i, rate) >= end and (i == 0 or lf.bid_ts(i - 1, rate) < end)


def test_the_generator_timestamps_are_bid_ts(clock):
    rate = 33_333.3
    run = lf.RunState(0.0, rate, 20_000, time.perf_counter)  # over two numpy chunks
    assert [p["ts"] for p in lf.bids(run)] == [lf.bid_ts(i, rate) for i in range(20_000)]


def test_warm_index():
    assert lf.warm_index(5.0, 1000.0) == 5000 and lf.warm_index(0.3, 10.0) == 3
    assert lf.warm_index(5.0, 0.0) == 0


# -- the histogram -------------------------------------------------------------------------------
def test_histogram_percentiles_within_one_percent_of_numpy():
    rng = np.random.default_rng(7)
    v = rng.lognormal(mean=-5.0, sigma=1.5, size=200_000)  # seconds: µs to seconds
    h = lf.Histogram()
    for d in v.tolist():
        h.add(d)
    exact = np.sort(v)
    for q in (0.5, 0.99, 0.999):
        ref = exact[min(len(v) - 1, int(len(v) * q))]  # nearest rank, as the sink reads
        assert h.quantile(q) == pytest.approx(ref, rel=0.01), q
    assert h.max_s == exact[-1] and h.n == len(v)
    s = h.summary_ms()
    assert s["samples"] == len(v) and s["p50"] <= s["p99"] <= s["p99_9"] <= s["max"]


def test_an_empty_histogram_has_no_percentiles():
    assert lf.Histogram().summary_ms() == {"p50": None, "p99": None, "p99_9": None,
                                           "max": None, "samples": 0}


# -- the sink ------------------------------------------------------------------------------------
def _sink(query: str, tuples: int, clock: FakeClock, warmup: float, tmp_path) -> lf.DelaySink:
    run = lf.RunState(1000.0, 1000.0, tuples, time.perf_counter)
    run.t0, run.source_pid, run.last_pull = clock.t, 0, clock.t + (tuples - 1) / 1000.0
    sink = lf.DelaySink(run, query, str(tmp_path / "out.json"), warmup)
    sink.open()
    return sink


def test_the_warm_up_is_cut_from_the_histogram_not_from_the_counts(clock, tmp_path):
    sink = _sink("currency", 3000, clock, 0.5, tmp_path)
    t0 = clock.t
    clock.t = t0 + 3.0  # every output handed over 3 s after t0: delay 3 - i / 1000
    for k in range(0, 3000, 100):
        sink.write([(i, {"seq": i}) for i in range(k, k + 100)])
    assert sink.count == 3000 and sink.hist.n == 2500  # tuples 0..499 were due before 0.5 s
    assert sink.hist.max_s == pytest.approx(2.5)  # the first measured: tuple 500
    assert sink.hist.min_s == pytest.approx(3.0 - 2.999)
    sink.commit()
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["outputs"] == doc["sent"] == 3000 and doc["warmup_tuples"] == 500
    assert doc["delay_ms"]["max"] == pytest.approx(2500.0)
    assert doc["achieved_rate"] == pytest.approx(1000.0)


def test_a_window_is_measured_from_the_tuple_that_closed_it(clock, tmp_path):
    sink = _sink("window_count", 2500, clock, 0.0, tmp_path)
    t0 = clock.t
    for end, n in ((1000, 1000), (2000, 1000), (3000, 500)):
        # each window's outputs 50 ms after its closing tuple was due (tuple `end` at 1000 t/s)
        clock.t = t0 + end / 1000.0 + 0.05
        sink.write([(end, {"auction": a, "count": n // 4}) for a in range(4)])
    assert sink.sum_counts == 2500
    assert sink.closed_by_end == 4  # window [2000, 3000): tuple 3000 was never sent
    assert sink.hist.n == 8
    assert sink.hist.min_s == pytest.approx(0.05) and sink.hist.max_s == pytest.approx(0.05)


# -- the flow, in this process ------------------------------------------------------------------
def _run_flow(tmp_path, **params: object) -> dict:
    out = tmp_path / "flow.json"
    flow = lf.build_flow({**{k: str(v) for k, v in params.items()}, "out": str(out)})
    flow.run(engine="reference")
    return json.loads(out.read_text())


def test_the_currency_flow_has_one_output_per_tuple_on_schedule(tmp_path):
    doc = _run_flow(tmp_path, query="currency", rate=20_000, tuples=10_000, warmup=0.1)
    assert doc["same_process"] and doc["source_starts"] == 1
    assert doc["outputs"] == doc["sent"] == 10_000 and not doc["truncated"]
    assert doc["delay_ms"]["samples"] == 10_000 - 2000
    assert doc["achieved_rate"] <= 20_000 * 1.0001
    d = doc["delay_ms"]
    assert 0 < d["p50"] <= d["p99"] <= d["p99_9"] <= d["max"]


def test_the_window_flow_counts_every_tuple_and_measures_closed_windows(tmp_path):
    doc = _run_flow(tmp_path, query="window_count", rate=5000, tuples=7500, warmup=0.1)
    assert doc["sum_counts"] == 7500
    # [0, 1000) closed by tuple 5000 and measured; [1000, 2000) only by the end of input
    assert doc["delay_ms"]["samples"] + doc["closed_by_end"] == doc["outputs"]
    assert 0 < doc["closed_by_end"] < doc["outputs"] <= 2 * lf.AUCTIONS
    assert doc["delay_ms"]["max"] < 1000


def test_an_unpaced_run_measures_the_own_rate(tmp_path):
    doc = _run_flow(tmp_path, query="currency", rate=0, ts_rate=100_000, tuples=20_000)
    assert doc["outputs"] == 20_000 and doc["delay_ms"]["samples"] == 0
    assert doc["own_rate"] > 1000 and doc["behind"]["checks"] == 0


# -- the selection, the registry, the report ----------------------------------------------------
def test_selection_defaults_environment_and_errors(monkeypatch):
    for k in ("ENGINES", "QUERIES", "FRACTIONS", "SECONDS", "ROUNDS", "CAPACITY_TUPLES",
              "CAPACITY_ROUNDS", "BASE"):
        monkeypatch.delenv(f"LATENCY_{k}", raising=False)
    full = ll.selection(False)
    assert full["engines"] == ["reference", "vsn1", "sn2-processes", "ordered2", "slack"]
    assert full["fractions"] == [0.25, 0.5, 0.75, 0.9, 1.0] and full["seconds"] == 60.0
    assert full["base"] == "unpaced" and full["rounds"] == 2 and full["capacity_rounds"] == 3
    assert ll.selection(True)["capacity_rounds"] == 1
    monkeypatch.setenv("LATENCY_ENGINES", "slack,reference")
    monkeypatch.setenv("LATENCY_FRACTIONS", "1.0,0.25")
    monkeypatch.setenv("LATENCY_SECONDS", "10")
    sel = ll.selection(False)
    assert sel["engines"] == ["slack", "reference"] and sel["fractions"] == [0.25, 1.0]
    assert sel["seconds"] == 10.0
    monkeypatch.setenv("LATENCY_ENGINES", "spark")
    with pytest.raises(ValueError, match="LATENCY_ENGINES"):
        ll.selection(False)
    monkeypatch.setenv("LATENCY_ENGINES", "reference")
    monkeypatch.setenv("LATENCY_BASE", "paced")
    with pytest.raises(ValueError, match="LATENCY_BASE"):
        ll.selection(False)
    # the engines' flags are bench speed's variants, not written again
    from stretchflow_bench.speed import VARIANTS

    assert ll.ENGINES["vsn1"] is VARIANTS["vsn1"]
    assert ll.ENGINES["sn2-processes"] is VARIANTS["sn2-processes"]


def test_the_estimate_covers_every_run():
    sel = {"engines": ["a"] * 5, "queries": ["currency"], "fractions": [0.25] * 5,
           "seconds": 60.0, "rounds": 1, "capacity_rounds": 3, "capacity_tuples": 1_000_000}
    expect, most = ll.estimate_s(sel)
    assert 5 * 5 * 60 < expect < most <= 5 * (3 * 2 * (2 + 20) + 5 * (2 + 90)) + 1
    assert ll.estimate_s({**sel, "rounds": 2})[0] > expect + 5 * 5 * 60


def test_registered_as_a_cross_engine_suite():
    assert "latency_load" in SUITES and "latency-load" in CROSS_ENGINE
    assert BENCHMARKS["latency-load"][1] == "issue #33"


def test_the_block_says_not_measured_without_a_result(tmp_path):
    text, _ = render_blocks("<!-- report:latency-load -->\n<!-- /report:latency-load -->\n",
                            Results(tmp_path))
    assert "*Not measured*" in text and "latency-load.json" in text


def test_the_block_shows_spreads_truncation_notes_and_engines_not_run(tmp_path):
    """A result written by hand in the benchmark's shape (two rounds): the capacity's spread,
    a truncated level, an engine that failed, the sn note."""
    def three(lo: float, mid: float, hi: float) -> dict:
        return {"min": lo, "median": mid, "max": hi, "n": 2}

    run = {"sent": 50, "tuples": 100}
    cell = {"fraction": 1.0, "offered_tuples_per_s": 1000.0, "runs": [run, run],
            "achieved_tuples_per_s": three(400, 500, 600), "truncated": True,
            "outputs_ok": True, "cores_busy": three(1, 1, 1), "peak_rss_mb": three(40, 41, 42),
            "delay_ms": {k: three(1, v, 9000) for k, v in
                         (("p50", 10.0), ("p99", 20.0), ("p99_9", 30.0), ("max", 4000.0))}}
    doc = {"benchmark": "latency-load", "time": "2026-12-07T12:00:00Z", "commit": "abc",
           "quiet": None,
           "parameters": {"engines_flags": {"sn2-processes": "--engine sn", "slack": "-e"},
                          "fractions": [1.0], "seconds": 60.0, "rounds": 2,
                          "capacity_rounds": 2, "warmup_s": 5.0,
                          "deadline_s": 90.0, "live_overload": 4.0, "base": "unpaced"},
           "metrics": {"queries": {"currency": {
               "engines": {"sn2-processes": {"capacity": {
                   "tuples_per_s": three(900, 1000, 1100),
                   "live_tuples_per_s": three(400, 500, 600)},
                   "levels": {"1": cell}},
                   "slack": {"capacity": {"runs": []}, "levels": {},
                             "not_run": "not run: slack failed with exit code 2"}},
               "notes": {"sn2-processes": ll.NOTES["sn2-processes", "currency"]}}}}}
    (tmp_path / "latency-load.json").write_text(json.dumps(doc))
    text, _ = render_blocks("<!-- report:latency-load -->\n<!-- /report:latency-load -->\n",
                            Results(tmp_path))
    assert "sn2-processes 1 000 (900–1 100) t/s, live 500 (400–600)" in text
    assert "| sn2-processes | 100% | 1 000 | 500 (**truncated**: 50 % sent by the deadline) " \
           "| 10.0 | 20.0 | 30.0 | 4 000 |" in text
    assert "slack **not run: slack failed with exit code 2**" in text
    assert "starts no channel process" in text


@pytest.mark.bench
def test_a_quick_run_writes_every_engine_and_level_and_the_report_renders_it(tmp_path,
                                                                             monkeypatch):
    for k in ("ENGINES", "QUERIES", "FRACTIONS", "SECONDS", "ROUNDS", "CAPACITY_TUPLES",
              "CAPACITY_ROUNDS", "BASE"):
        monkeypatch.delenv(f"LATENCY_{k}", raising=False)
    path = BENCHMARKS["latency-load"][2](True, str(tmp_path))
    doc = json.loads(path.read_text())
    p, m = doc["parameters"], doc["metrics"]
    assert p["quick"] is True and p["engines"] == ["reference", "vsn1"]
    assert p["fractions"] == [0.5, 1.0] and p["seconds"] == 3.0
    assert doc["plot"] == "latency-load.png" and (tmp_path / "latency-load.png").exists()
    engines = m["queries"]["currency"]["engines"]
    assert set(engines) == {"reference", "vsn1"}
    for e, eng in engines.items():
        assert "not_run" not in eng, eng.get("not_run")
        cap = eng["capacity"]
        assert cap["outputs_ok"] and cap["tuples_per_s"]["median"] > 0
        assert cap["live_tuples_per_s"]["median"] > 0
        assert set(eng["levels"]) == {"0.5", "1"}
        for cell in eng["levels"].values():
            (r,) = cell["runs"]
            assert r["same_process"] and r["outputs"] == r["sent"], (e, cell["fraction"])
            assert r["achieved_rate"] <= cell["offered_tuples_per_s"] * 1.05
            d = r["delay_ms"]
            assert d["samples"] > 0, (e, cell["fraction"])
            assert 0 <= d["p50"] <= d["p99"] <= d["p99_9"] <= d["max"]
            assert r["probe"]["wall_s"] > 0 and "other_cpu_s" in r["probe"]
            assert r["process"]["peak_rss_mb"] > 0 and r["process"]["cpu_s"] > 0
    text, stale = render_blocks(
        "<!-- report:latency-load -->\n<!-- /report:latency-load -->\n", Results(tmp_path))
    assert stale == ["latency-load"]
    assert "| reference | 50% |" in text and "| vsn1 | 100% |" in text
    assert "scheduled" in text and "![latency-load](../benchmarks/results/latency-load.png)" \
        in text
