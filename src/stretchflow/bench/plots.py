"""PNG plots of benchmark results, in the papers' style: one figure per experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


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
    steps = list(m["by_transition_ms"])
    p50 = [m["by_transition_ms"][s]["p50"] for s in steps]
    mx = [m["by_transition_ms"][s]["max"] for s in steps]
    xs = range(len(steps))
    ax.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], mx, width=0.4, label="max")
    ax.set_xticks(list(xs), steps)
    ax.set_xlabel("reconfiguration (instances)")
    ax.set_ylabel("time (ms)")
    ax.set_title("VSN reconfiguration time (call to completion)")
    ax.legend()


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
}


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
