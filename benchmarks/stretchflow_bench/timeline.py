"""One panel pair for every elastic experiment's figure: parallelism per operator over time
(a step line) above latency over time, with a vertical mark at each reconfiguration in both.

The marks carry the gid :data:`MARK_GID` so that a test can count them without looking at
pixels. Series are plain JSON-able lists (``[[seconds, value], ...]``), as the benches store
them, so that a committed result can be re-drawn without re-running it."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

#: gid of every reconfiguration mark (``Line2D.get_gid()``)
MARK_GID = "reconfiguration"
#: at most this many points per series in a result's JSON (:func:`downsample`)
MAX_POINTS = 2000


def changes(series: Sequence[Sequence[float]]) -> list[float]:
    """The times at which a ``[[t, parallelism], ...]`` series changes value: one per
    reconfiguration (the first point is the start, not a change)."""
    out = []
    for (_, before), (t, after) in zip(series, series[1:], strict=False):
        if after != before:
            out.append(t)
    return out


def from_rows(rows: Sequence[Mapping[str, Any]], key: str = "parallelism",
              time_key: str = "time") -> list[list[float]]:
    """``[[t, value], ...]`` at each change of ``rows[i][key]`` (per-period metric rows; a
    change shows at the first period that saw it, so up to one period late)."""
    out: list[list[float]] = []
    for r in rows:
        if not out or out[-1][1] != r[key]:
            out.append([r[time_key], r[key]])
    return out


def downsample(points: Sequence[Any], limit: int = MAX_POINTS) -> list[Any]:
    """Every k-th of ``points`` so that at most ``limit`` remain, keeping the last one (the
    run's end); a JSON result stays small however long the run."""
    if limit < 2:
        raise ValueError(f"downsample: limit must be >= 2, got {limit}")
    if len(points) <= limit:
        return list(points)
    step = -(-(len(points) - 1) // (limit - 1))  # ceil: limit - 1 gaps at most
    kept = list(points[::step])
    if kept[-1] is not points[-1]:
        kept[-1] = points[-1]
    return kept


def per_period(samples: Sequence[Sequence[float]], ends: Sequence[float]
               ) -> tuple[list[float | None], list[float | None]]:
    """p50 and p99 of the ``(t, value)`` samples falling in each period ``(ends[i-1],
    ends[i]]`` (the first from 0); None for a period without a sample."""
    buckets: list[list[float]] = [[] for _ in ends]
    for t, v in samples:
        i = bisect.bisect_left(ends, t)
        if i < len(ends):
            buckets[i].append(v)
    p50: list[float | None] = []
    p99: list[float | None] = []
    for b in buckets:
        b.sort()
        p50.append(round(b[len(b) // 2], 3) if b else None)
        p99.append(round(b[min(len(b) - 1, int(len(b) * 0.99))], 3) if b else None)
    return p50, p99


def from_result(extra: Mapping[str, Any], elapsed: float, bin_s: float = 0.25
                ) -> dict[str, Any]:
    """A run's timeline from its ``RunResult.extra``: instances per operator at each change
    (``parallelism_series``), and p50/p99 latency per ``bin_s`` seconds (from
    ``latency_series``, each bin's at its middle), each at most :data:`MAX_POINTS` long;
    ``end_s`` is the run's length."""
    if bin_s <= 0:
        raise ValueError(f"from_result: bin_s must be > 0, got {bin_s}")
    lat = extra.get("latency_series") or []
    n = max(1, int(elapsed / bin_s) + 1)
    ends = [round((k + 1) * bin_s, 6) for k in range(n)]
    p50, p99 = per_period(lat, ends)
    return {
        "end_s": round(elapsed, 3), "bin_s": bin_s,
        "parallelism_series": {op: downsample([[round(t, 3), p] for t, p in v])
                               for op, v in (extra.get("parallelism_series") or {}).items()},
        # each bin's value at its middle
        "latency_p50": downsample([[round(e - bin_s / 2, 6), v]
                                   for e, v in zip(ends, p50, strict=True) if v is not None]),
        "latency_p99": downsample([[round(e - bin_s / 2, 6), v]
                                   for e, v in zip(ends, p99, strict=True) if v is not None]),
    }


def draw(par_ax: Any, lat_ax: Any, parallelism: Mapping[str, Sequence[Sequence[float]]],
         latency: Mapping[str, Sequence[Sequence[float]]], marks: Sequence[float],
         end: float | None = None, lat_label: str = "latency (ms)",
         log_latency: bool = True) -> None:
    """Draws ``parallelism`` (operator -> ``[[t, p], ...]``, held until the next point or
    ``end``) as step lines on ``par_ax``, ``latency`` (label -> ``[[t, ms], ...]``) as lines
    on ``lat_ax``, and a dashed vertical line at each time of ``marks`` on both axes."""
    for op, series in parallelism.items():
        if not series:
            continue
        ts = [float(t) for t, _ in series]
        ps = [p for _, p in series]
        if end is not None and end > ts[-1]:  # hold the last value to the run's end
            ts.append(end)
            ps.append(ps[-1])
        par_ax.step(ts, ps, where="post", lw=1.2, label=op)
    par_ax.set_ylabel("parallelism")
    top = max((p for s in parallelism.values() for _, p in s), default=1)
    par_ax.set_ylim(0, top + 0.5)
    par_ax.yaxis.get_major_locator().set_params(integer=True)  # instances are whole
    if len(parallelism) > 1:
        par_ax.legend(fontsize=7, loc="upper left")
    for label, series in latency.items():
        lat_ax.plot([t for t, _ in series], [v for _, v in series], lw=0.8, label=label)
    lat_ax.set_ylabel(lat_label)
    if log_latency and any(v > 0 for s in latency.values() for _, v in s):
        lat_ax.set_yscale("log")
    if len(latency) > 1:
        lat_ax.legend(fontsize=7, loc="upper left")
    for k, t in enumerate(marks):
        for ax in (par_ax, lat_ax):
            line = ax.axvline(t, color="tab:gray", lw=0.6, ls="--", alpha=0.7,
                              label="reconfiguration" if k == 0 and ax is par_ax else None)
            line.set_gid(MARK_GID)
    lat_ax.set_xlabel("time (s)")


def mark_count(ax: Any) -> int:
    """How many reconfiguration marks :func:`draw` put on ``ax``."""
    return sum(1 for ln in ax.get_lines() if ln.get_gid() == MARK_GID)


__all__ = ["MARK_GID", "MAX_POINTS", "changes", "downsample", "draw", "from_result", "from_rows",
           "mark_count", "per_period"]
