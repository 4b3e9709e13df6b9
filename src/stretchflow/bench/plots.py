"""PNG plots of benchmark results, in the papers' style: one figure per experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..extras import require


def _pyplot() -> Any:
    matplotlib = require("matplotlib", "plots", "the benchmark plots")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt: Any, fig: Any, path: Path, quick: bool) -> Path:
    """Writes ``fig`` to ``path`` and closes it; a ``--quick`` run's figure says so in red
    on top, so that it is never taken for a result."""
    if quick:
        fig.suptitle("QUICK (smoke test)", color="tab:red")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot(name: str, metrics: dict[str, Any], path: Path) -> Path | None:
    """Draws the figure of benchmark ``name`` into ``path``; None if it has no figure."""
    plt = _pyplot()
    if name in _TIMELINES:
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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


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


_FIGURES = {
    "reference-wordcount": _reference,
    "vsn-reconfiguration": _reconfiguration,
    "vsn-forward": _forward,
    "vsn-scalejoin": _scalejoin,
    "vsn-wordcount": _wordcount,
    "peers": lambda ax, m: _peers(ax, m),  # defined below, looked up when drawn
}


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
        """Input rate, instances and latency over time (the paper's Figure 12–13 panels)."""
        rate = m["input_rate_per_s"]
        axes[0].plot(range(len(rate)), rate, lw=0.8)
        axes[0].set_ylabel("input (t/s)")
        axes[0].set_title(f"{title}, WS {m['window_ms'] // 1000} s, threshold controller")
        ts = [e["time"] for e in m["metrics"]]
        axes[1].step(ts, [e["parallelism"] for e in m["metrics"]], where="post")
        axes[1].set_ylabel("instances")
        axes[1].set_ylim(0, m["max_parallelism"] + 0.5)
        lat = m["latency_p50_per_s"]
        axes[2].plot([t for t, _ in lat], [v for _, v in lat], lw=0.8, color="tab:red")
        axes[2].set_ylabel("latency p50 (ms)")
        axes[2].set_yscale("log")
        axes[2].set_xlabel("time (s)")

    return draw


_TIMELINES = {
    "vsn-hedge": _timeline("Q6 hedge self-join"),
    "vsn-q5": _timeline("Q5 ScaleJoin over random-rate phases"),
}
