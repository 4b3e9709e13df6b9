"""PNG plots of benchmark results, in the papers' style: one figure per experiment."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .timeline import changes, from_rows
from .timeline import draw as draw_timeline


def _pyplot() -> Any:
    import matplotlib  # a dependency of stretchflow-bench; loaded only when a figure is drawn

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


#: the words on top of a ``--quick`` run's figure
QUICK_LABEL = "QUICK run — not a result"


def save_figure(plt: Any, fig: Any, path: Path, quick: bool) -> Path:
    """Writes ``fig`` to ``path`` and closes it; a ``--quick`` run's figure says so in red
    on top, so that it is never taken for a result."""
    if quick:
        # keeps a figure's own suptitle, after the label
        own = fig.get_suptitle()
        fig.suptitle(QUICK_LABEL + (f"\n{own}" if own else ""), color="tab:red")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot(name: str, metrics: dict[str, Any], path: Path, quick: bool = False) -> Path | None:
    """Draws the figure of benchmark ``name`` into ``path``; None if it has no figure. A
    ``quick`` run's figure is labelled as such (:func:`save_figure`)."""
    plt = _pyplot()
    if name == "vsn-reconfiguration" and _step_timeline(metrics) is not None:
        # results before the timeline was recorded keep the one-panel figure below
        fig, axes = plt.subplots(3, 1, figsize=(6.4, 8.0), dpi=110, height_ratios=[3, 2, 2])
        _reconfiguration(axes[0], metrics)
        _reconfiguration_timeline(axes[1], axes[2], metrics)
        for ax in axes:
            ax.grid(True, axis="y", alpha=0.3)
    elif name in _TIMELINES:
        draw_all = _TIMELINES[name]
        fig, axes = plt.subplots(3, 1, figsize=(6.4, 6.4), dpi=110, sharex=True)
        draw_all(axes, metrics)
        for ax in axes:
            ax.grid(True, axis="y", alpha=0.3)
    else:
        draw = _FIGURES.get(name)
        if draw is None:
            return None
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
        draw(ax, metrics)
        ax.grid(True, axis="y", alpha=0.3)
    return save_figure(plt, fig, path, quick)


def replot(json_path: Path, draw: Callable[[dict[str, Any], Path, bool], Any]) -> Path:
    """Re-draws a committed result's figure from its JSON (``<name>.json`` -> ``<name>.png``
    beside it) with ``draw(metrics, png, quick)``, quick read from the result's parameters:
    a plot can change without re-running its benchmark."""
    doc = json.loads(Path(json_path).read_text())
    if "metrics" not in doc:
        raise ValueError(f"{json_path}: not a benchmark result (no 'metrics' key)")
    png = Path(json_path).with_suffix(".png")
    draw(doc["metrics"], png, bool((doc.get("parameters") or {}).get("quick", False)))
    return png


def _reference(ax: Any, m: dict[str, Any]) -> None:
    names = ["reference", "1T"]
    vals = [m[n]["tuples_per_s"]["median"] for n in names]
    ax.bar(names, vals, color=["tab:blue", "tab:gray"])
    ax.set_ylabel("throughput (tuples/s)")
    ax.set_title(f"wordcount: reference / 1T = {m['ratio_reference_over_1T']['median']:.2f}")


def _reconfiguration(ax: Any, m: dict[str, Any]) -> None:
    """p50 bars with p99 and max marks per offered load, one bar per max_spread variant."""
    loads = ["70%", "120%", "full"]
    variants = list(m["variants"])
    width = 0.8 / len(variants)
    for k, name in enumerate(variants):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(loads))]
        d = [m["variants"][name][ld]["duration_ms"] for ld in loads]
        bars = ax.bar(xs, [v["p50"] for v in d], width=width, label=f"{name}: p50")
        color = bars.patches[0].get_facecolor()
        ax.plot(xs, [v["p99"] for v in d], "v", color=color, label=f"{name}: p99")
        ax.plot(xs, [v["max"] for v in d], "_", color=color, markersize=12)
    cap = m["capacity"]["tuples_per_s"]["median"]
    ax.set_xticks(range(len(loads)), ["70 % of C", "120 % of C", "full speed"])
    ax.set_yscale("log")
    ax.set_ylabel("time (ms), max: dash")
    ax.set_title(f"VSN reconfiguration 1..8, wordcount, C = {cap:,.0f} t/s", fontsize=10)
    ax.axhline(5, color="gray", lw=0.8, ls="--")
    ax.legend(fontsize=7)


def _step_timeline(m: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first variant's step run's timeline (``bench.timeline.from_result``), if any."""
    for name, loads in (m.get("variants") or {}).items():
        tl = (loads.get("step_run") or {}).get("timeline")
        return (name, tl) if tl else None
    return None


def _reconfiguration_timeline(par_ax: Any, lat_ax: Any, m: dict[str, Any]) -> None:
    found = _step_timeline(m)
    assert found is not None  # plot() draws this panel only then
    name, tl = found
    par = tl["parallelism_series"]
    marks = sorted(t for s in par.values() for t in changes(s))
    lat_ax.sharex(par_ax)
    draw_timeline(par_ax, lat_ax, par, {"p50": tl["latency_p50"], "p99": tl["latency_p99"]},
                  marks, end=tl["end_s"], lat_label=f"latency per {tl['bin_s']:g} s (ms)")
    par_ax.set_ylabel("instances")
    par_ax.set_title(f"{name}: the step run (70 % then 120 % of C) over time", fontsize=9)


def _forward(ax: Any, m: dict[str, Any]) -> None:
    ps = sorted(int(p) for p in m)
    ax.plot(ps, [m[str(p)]["throughput_tuples_per_s"] for p in ps], "o-",
            label="throughput (full speed)")
    ax.set_xlabel("parallelism Π")
    ax.set_ylabel("throughput (tuples/s)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_ylim(bottom=0)
    lat = ax.twinx()
    lat.plot(ps, [m[str(p)]["latency_ms_paced"]["p50"] for p in ps], "s--", color="tab:red",
             label="latency p50, live sources")
    lat.set_ylabel("latency (ms)")
    lat.set_ylim(bottom=0)
    lines = ax.get_lines() + lat.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="lower left")
    ax.set_title("Op. 15 forwarding, two inputs")


def _scalejoin(ax: Any, m: dict[str, Any]) -> None:
    names = ["1T", "1T-runs"] + sorted(k for k in m if k.startswith("vsn") and k[3:].isdigit())
    med = [m[n]["comparisons_per_s"]["median"] for n in names]
    lo = [a - m[n]["comparisons_per_s"]["min"] for a, n in zip(med, names, strict=True)]
    hi = [m[n]["comparisons_per_s"]["max"] - a for a, n in zip(med, names, strict=True)]
    ax.bar(names, med, yerr=[lo, hi], capsize=4)
    ax.set_ylabel("comparisons/s (median, min-max)")
    ax.set_title(f"ScaleJoin, window {m['window_ms'] // 1000} s, {m['keys']} keys; "
                 f"kernel alone 2/1 threads: {m['kernel_alone']['ratio_2_over_1']:.2f}x")


def _wordcount(ax: Any, m: dict[str, Any]) -> None:
    names = ["reference", "vsn1"]
    ax.bar(names, [m["tuples_per_s"][n]["median"] for n in names])
    ax.set_ylabel("throughput (tuples/s)")
    ax.set_title(f"wordcount: VSN Π=1 / reference = "
                 f"{m['ratio_vsn1_over_reference']['median']:.2f}")


def _reconfiguration_rows(ax: Any, metrics: dict[str, Any]) -> None:
    """Every reconfiguration's time in the order applied (log scale), per flow, run and
    operator, with the 5 ms target (dashed)."""
    for flow, m in metrics["flows"].items():
        for k, run in enumerate(m["stepping"]):
            for op, ds in run["durations_ms"].items():
                ax.plot(range(len(ds)), ds, ".", markersize=3, alpha=0.6,
                        label=f"{flow}, run {k + 1}, {op}")
    ax.axhline(5.0, color="tab:red", lw=0.8, ls="--", label="target p99 5 ms")
    ax.set_yscale("log")
    steps = next(iter(metrics["flows"].values()))["steps"]  # every flow's are the same
    ax.set_xlabel("reconfiguration (in order: Π " + "→".join(map(str, steps)) + " ...)")
    ax.set_ylabel("reconfigure call to barrier end (ms)")
    ax.set_title("lambda flows, batches of rows in flight, full speed", fontsize=9)
    ax.legend(fontsize=6, ncol=2)


_FIGURES = {
    "reference-wordcount": _reference,
    "vsn-reconfiguration": _reconfiguration,
    "vsn-reconfiguration-rows": _reconfiguration_rows,
    "vsn-forward": _forward,
    "vsn-scalejoin": _scalejoin,
    "vsn-wordcount": _wordcount,
    "peers": lambda ax, m: _peers(ax, m),  # defined below, looked up when drawn
    "live": lambda ax, m: _live(ax, m),
}


def _live(ax: Any, m: dict[str, Any]) -> None:
    """Per variant, every window's delay (dots, log scale) and the 1 s target (dashed)."""
    names = [v for v, r in m.items() if isinstance(r, dict) and r.get("delay_s")]
    for x, v in enumerate(names):
        delays = [d for rep in m[v]["repeats"] for d in rep["delays_s"]]
        ax.plot([x + (i % 9 - 4) * 0.03 for i in range(len(delays))], delays, ".",
                alpha=0.5, markersize=4)
        ax.plot([x - 0.3, x + 0.3], [m[v]["delay_s"]["median"]] * 2, color="black", lw=1.5)
    ax.axhline(1.0, color="tab:red", lw=0.8, ls="--", label="issue #19's 1 s")
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("window delay after the watermark (s)")
    ax.set_title("live inputs: delay of every window (bar: median)", fontsize=10)
    ax.legend(fontsize=7)


def _peers(ax: Any, m: dict[str, Any]) -> None:
    """Per variant, whole-process throughput of each query (median, min-max whiskers, log
    scale); a variant whose output differed from the reference is hatched and marked "WRONG"."""
    queries = [q for q in ("wordcount", "paircount") if isinstance(m.get(q), dict)]
    names = list(dict.fromkeys(v for q in queries for v, s in m[q].items()
                               if isinstance(s, dict) and "wall_s" in s))
    width = 0.8 / max(len(queries), 1)
    for i, q in enumerate(queries):
        xs, med, lo, hi, wrong = [], [], [], [], []
        for x, v in enumerate(names):
            s = m[q].get(v)
            if not isinstance(s, dict) or "wall_s" not in s:
                continue
            n = m[q]["rows_in"]
            xs.append(x + (i - (len(queries) - 1) / 2) * width)
            med.append(n / s["wall_s"]["median"])
            lo.append(med[-1] - n / s["wall_s"]["max"])
            hi.append(n / s["wall_s"]["min"] - med[-1])
            wrong.append(not s["correctness"]["correct"])
        bars = ax.bar(xs, med, width=width, yerr=[lo, hi], capsize=2,
                      label=f"{q}, {m[q]['tweets']:,} tweets")
        for bar, bad in zip(bars, wrong, strict=True):
            if bad:
                bar.set_hatch("//")
                ax.annotate("WRONG", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=6, color="tab:red")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("tuples/s, whole process")
    ax.set_title("peers: sliding wordcount / paircount (WS 120 s, WA 60 s)", fontsize=9)
    ax.legend(fontsize=7)


def _timeline(title: str) -> Any:
    def draw(axes: Any, m: dict[str, Any]) -> None:
        """Input rate, then instances and latency over time with a mark at each
        reconfiguration (the paper's Figure 12–13 panels)."""
        rate = m["input_rate_per_s"]
        # offered: per second of event time, which is run time only while the replay keeps
        # its pace; operator input: its rate per period, in run time like the panels
        # below (a gap between the two is the replay falling behind)
        axes[0].plot(range(len(rate)), rate, lw=0.8, color="tab:gray",
                     label="offered (per event-time s)")
        axes[0].plot([r["time"] for r in m["metrics"]],
                     [r["input_rate"] for r in m["metrics"]], lw=0.8, color="tab:blue",
                     label="operator input (per period)")
        axes[0].set_ylabel("input (t/s)")
        axes[0].legend(fontsize=7, loc="upper right")
        axes[0].set_title(f"{title}, WS {m['window_ms'] // 1000} s, threshold controller",
                          fontsize=10)
        par, marks = _parallelism(m)
        end = m["metrics"][-1]["time"] if m["metrics"] else None
        lat = {"p50 per s": m["latency_p50_per_s"]}
        if m.get("latency_p99_per_s"):  # results before it was recorded have the p50 only
            lat["p99 per s"] = m["latency_p99_per_s"]
        draw_timeline(axes[1], axes[2], par, lat, marks, end=end,
                      lat_label="latency (ms)" if len(lat) > 1 else "latency p50 (ms)")
        axes[1].set_ylim(0, m["max_parallelism"] + 0.5)
        axes[1].set_ylabel("instances")
        axes[1].legend(fontsize=7, loc="upper left")

    return draw


def _parallelism(m: dict[str, Any]) -> tuple[dict[str, Any], list[float]]:
    """Instances per operator over time and the reconfigurations' times: from the engine's
    ``parallelism_series`` (each change at the time it was applied) where the result has it,
    else from the per-period metric rows (results before it was recorded; a change then shows
    at the first period that saw it)."""
    series = m.get("parallelism_series")
    if series:
        return dict(series), sorted(t for s in series.values() for t in changes(s))
    rows = from_rows(m["metrics"])
    return {"instances": rows}, changes(rows)


_TIMELINES = {
    "vsn-hedge": _timeline("Q6 hedge self-join"),
    "vsn-q5": _timeline("Q5 ScaleJoin over random-rate phases"),
}
