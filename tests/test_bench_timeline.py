"""The elastic experiments' over-time figures (stretchflow_bench.timeline and the benches' plots):
parallelism and latency panels, one mark per reconfiguration, the quick label. The figures
are inspected through matplotlib's artists, drawn from small synthetic metrics."""

import json

import pytest

pytest.importorskip("matplotlib")

from stretchflow_bench import plots, slack, sn, timeline  # noqa: E402


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots close, kept open for inspection (save_figure closes each)."""
    plt = plots._pyplot()
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    monkeypatch.undo()
    for fig in kept:
        plt.close(fig)


def test_changes_from_rows_and_downsample():
    series = [[0.0, 1], [2.0, 2], [3.5, 2], [5.0, 1]]
    assert timeline.changes(series) == [2.0, 5.0]
    rows = [{"time": t, "parallelism": p} for t, p in ((1, 1), (2, 1), (3, 3), (4, 3), (5, 1))]
    assert timeline.from_rows(rows) == [[1, 1], [3, 3], [5, 1]]
    pts = list(range(10_001))
    small = timeline.downsample(pts, 2000)
    assert len(small) <= 2000 and small[0] == 0 and small[-1] == 10_000
    assert small == sorted(small)
    assert timeline.downsample([1, 2, 3], 10) == [1, 2, 3]
    with pytest.raises(ValueError, match="limit"):
        timeline.downsample(pts, 1)


def test_per_period_and_from_result():
    samples = [(0.1, 5.0), (0.2, 1.0), (0.3, 3.0), (1.5, 100.0), (2.9, 7.0)]
    p50, p99 = timeline.per_period(samples, [1.0, 2.0, 3.0, 4.0])
    assert p50 == [3.0, 100.0, 7.0, None]
    assert p99 == [5.0, 100.0, 7.0, None]
    extra = {"parallelism_series": {"op": [(0.0, 1), (0.6, 2)]},
             "latency_series": [(0.1, 2.0), (0.3, 4.0), (0.6, 8.0)]}
    tl = timeline.from_result(extra, elapsed=0.7, bin_s=0.25)
    assert tl["parallelism_series"] == {"op": [[0.0, 1], [0.6, 2]]}
    assert tl["latency_p50"] == [[0.125, 2.0], [0.375, 4.0], [0.625, 8.0]]
    assert tl["end_s"] == 0.7 and tl["bin_s"] == 0.25
    with pytest.raises(ValueError, match="bin_s"):
        timeline.from_result(extra, 1.0, bin_s=0)


def test_draw_marks_each_reconfiguration_on_both_panels(figures):
    plt = plots._pyplot()
    fig, (a, b) = plt.subplots(2, 1)
    par = {"join": [[0, 1], [2, 2], [4, 4], [6, 1]], "map": [[0, 1], [3, 2]]}
    marks = sorted(t for s in par.values() for t in timeline.changes(s))
    timeline.draw(a, b, par, {"p50": [[1, 5.0], [2, 9.0]]}, marks, end=8.0)
    assert timeline.mark_count(a) == timeline.mark_count(b) == 4
    steps = [ln for ln in a.get_lines() if ln.get_gid() != timeline.MARK_GID]
    assert [ln.get_label() for ln in steps] == ["join", "map"]
    assert list(steps[0].get_xdata())[-1] == 8.0  # held to the run's end
    assert a.get_ylabel() == "parallelism" and "latency" in b.get_ylabel()
    plt.close(fig)


def _hedge_metrics(series: bool) -> dict:
    rows = [{"time": float(t), "parallelism": p, "input_rate": 100.0, "mean_load": 0.5}
            for t, p in enumerate([1, 1, 2, 2, 2, 3, 1, 1], start=1)]
    m = {"input_rate_per_s": [100, 120, 90], "window_ms": 30_000, "max_parallelism": 4,
         "metrics": rows, "latency_p50_per_s": [[0, 3.0], [1, 4.0], [2, 50.0]],
         "latency_p99_per_s": [[0, 9.0], [1, 12.0], [2, 80.0]]}
    if series:  # applied times, as the engine records them: these win over the rows
        m["parallelism_series"] = {"hedge": [[0.0, 1], [2.4, 2], [5.1, 3], [6.2, 1],
                                             [7.0, 2]]}
    return m


@pytest.mark.parametrize("series,marks", [(False, 3), (True, 4)])
def test_hedge_figure_has_instances_latency_marks_and_quick_label(tmp_path, figures, series,
                                                                  marks):
    path = plots.plot("vsn-hedge", _hedge_metrics(series), tmp_path / "h.png", quick=True)
    assert path.exists()
    fig = figures[-1]
    _, par_ax, lat_ax = fig.axes
    assert par_ax.get_ylabel() == "instances" and lat_ax.get_ylabel() == "latency (ms)"
    assert timeline.mark_count(par_ax) == timeline.mark_count(lat_ax) == marks
    assert {ln.get_label() for ln in lat_ax.get_lines()} >= {"p50 per s", "p99 per s"}
    assert fig.get_suptitle() == plots.QUICK_LABEL


def test_a_full_run_has_no_quick_label(tmp_path, figures):
    plots.plot("vsn-q5", _hedge_metrics(True), tmp_path / "q.png", quick=False)
    assert figures[-1].get_suptitle() == ""


def _sn_run(channels: list[int], delays: bool) -> dict:
    times = [0.5 * (k + 1) for k in range(len(channels))]
    r = {"time": times, "channels": channels, "offered": [100.0] * len(times),
         "throughput": [90.0] * len(times), "handled_fraction": 0.9}
    if delays:
        r["parallelism_series"] = {"costly": timeline.from_rows(
            [{"time": t, "parallelism": c} for t, c in zip(times, channels, strict=True)])}
        r["admission_delay_p50_ms"] = [1.0] * (len(times) - 1) + [None]
        r["admission_delay_p99_ms"] = [5.0] * len(times)
    return r


@pytest.mark.parametrize("delays", [True, False])
def test_sn_adapt_figure_pairs_channels_and_delay_per_variant(tmp_path, figures, delays):
    hf = {"min": 0.9, "median": 0.9, "max": 0.9, "n": 1}
    m = {"cost": 2000, "phase_s": 8.0,
         "sine": {"handled_fraction": hf, "median_run": 0,
                  "runs": [_sn_run([1, 1, 2, 2, 1], delays)]},
         "step": {"handled_fraction": hf, "median_run": 0,
                  "runs": [_sn_run([1, 2, 3, 4, 2, 1], delays)]}}
    sn.PLOTS["sn-adapt"](m, tmp_path / "a.png", True)
    fig = figures[-1]
    assert fig.get_suptitle() == plots.QUICK_LABEL
    pairs = [ax for ax in fig.axes if ax.get_ylabel() in ("channels", "admission delay (ms)")]
    assert [ax.get_ylabel() for ax in pairs] == ["channels", "admission delay (ms)"] * 2
    assert [timeline.mark_count(ax) for ax in pairs] == [2, 2, 5, 5]
    lat_lines = [ln for ln in pairs[1].get_lines() if ln.get_gid() != timeline.MARK_GID]
    if delays:  # a period without a sample is left out, not drawn as 0
        assert [len(ln.get_xdata()) for ln in lat_lines] == [4, 5]
    else:
        assert lat_lines == [] and "not recorded" in pairs[1].texts[0].get_text()


def test_reconfiguration_figure_adds_the_step_run_over_time(tmp_path, figures):
    d = {"p50": 1.0, "p99": 2.0, "max": 3.0, "n": 3}
    load = {"duration_ms": d}
    tl = {"end_s": 4.0, "bin_s": 0.25,
          "parallelism_series": {"wordcount": [[0.0, 1], [1.0, 2], [2.0, 4], [3.0, 1]]},
          "latency_p50": [[0.25, 1.0], [0.5, 2.0]], "latency_p99": [[0.25, 3.0], [0.5, 4.0]]}
    m = {"capacity": {"tuples_per_s": {"median": 1000.0}},
         "variants": {"max_spread=2 (default)": {"70%": load, "120%": load, "full": load,
                                                 "step_run": {"timeline": tl}}}}
    plots.plot("vsn-reconfiguration", m, tmp_path / "r.png", quick=True)
    fig = figures[-1]
    bars, par_ax, lat_ax = fig.axes
    assert par_ax.get_ylabel() == "instances" and lat_ax.get_ylabel() == "latency per 0.25 s (ms)"
    assert timeline.mark_count(par_ax) == timeline.mark_count(lat_ax) == 3
    assert fig.get_suptitle() == plots.QUICK_LABEL
    del m["variants"]["max_spread=2 (default)"]["step_run"]  # an older result: bars only
    plots.plot("vsn-reconfiguration", m, tmp_path / "r.png")
    assert len(figures[-1].axes) == 1


def test_slack_tuning_marks_sltuner_decisions_and_keeps_its_title(tmp_path, figures):
    def series(slts):
        return [{"t": float(k), "latency_ms": 10.0, "slt": s, "slack_ready": 0, "events": 1}
                for k, s in enumerate(slts)]

    m = {"scenario": "zipf", "deadline_ms": 100,
         "policies": {"sltuner": {"series": series([None, None, 50.0, 50.0, 80.0])},
                      "tcp": {"series": series([1.0, 2.0, 3.0, 4.0, 5.0])}}}
    slack.PLOTS["slack-tuning-zipf"](m, tmp_path / "s.png", True)
    fig = figures[-1]
    assert [timeline.mark_count(ax) for ax in fig.axes] == [2, 2, 0, 0]
    title = fig.get_suptitle()
    assert title.startswith(plots.QUICK_LABEL) and "SLT tuning, zipf" in title


def test_replot_reads_quick_from_the_result_and_rejects_other_json(tmp_path, figures):
    doc = {"benchmark": "vsn-hedge", "parameters": {"quick": True},
           "metrics": _hedge_metrics(False)}
    src = tmp_path / "vsn-hedge.json"
    src.write_text(json.dumps(doc))
    png = plots.replot(src, lambda m, p, q: plots.plot("vsn-hedge", m, p, q))
    assert png == tmp_path / "vsn-hedge.png" and png.exists()
    assert figures[-1].get_suptitle() == plots.QUICK_LABEL
    bad = tmp_path / "other.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="other.json.*metrics"):
        plots.replot(bad, lambda m, p, q: None)
