"""``stretchflow bench latency-load`` (issue #33, item 3, "latency under sustained load"): each
local engine at 25, 50, 75, 90 and 100 % of its own measured capacity, open-loop, for 60 s a
level, and the p50 / p99 / p99.9 / max of each output's delay from its input tuple's
**scheduled** send time (coordinated omission corrected), with the achieved input rate beside
the offered one.

**How.** Every run is a whole ``python -m stretchflow run latency_load_flow.py --param ...``
process with the engine flags of :data:`ENGINES` (``bench userflows``' variants, which take
``bench speed``'s), run under :mod:`.peak` and measured by :func:`.speed.measure` (wall, the
run's own time, CPU of every process it started, its peak RSS). The flow file
(:mod:`.latency_load_flow`) holds the source, the queries and the measuring sink; its module
docstring says how the delay is measured and why it is CO-corrected. In short: tuple ``i`` is
due at ``t0 + i / rate`` and the engine's own pacing (``Source.at_rate``) sends it then, or at
once when late, never moving the schedule; the sink, in the source's process, charges every
output from that due time.

1. **Capacity** per engine and query: the same flow with the source unpaced,
   :data:`CAPACITY_TUPLES` tuples, rate = tuples / (last output − the first tuple's hand-over),
   both read in the run's process: the engine's own time, without the process start-up, the
   imports or the end-of-run commit. The median over the rounds is the engine's capacity C.
   Beside it, the **live capacity**: the same tuples offered at :data:`LIVE_OVERLOAD` x C
   (the source never waits), whose achieved rate is what the engine sustains, overloaded,
   from a paced source. A paced source is live, and the engines take another path for it
   (``io.sources.live_items``: a watermark before each wait for the next tuple, and the
   threaded engines' pump hands on what it holds then), so the live capacity can be below C.
   The first runs of this benchmark found the threaded engines' pump handing a paced
   source's tuples over one at a time even while it caught up (vsn sustained a sixth of C);
   86fa3fa fixed that. The levels are fractions of C, as the issue asks
   (``LATENCY_BASE=live`` makes them fractions of the live capacity instead).
2. **Levels**: offered rate ``f x C`` for each fraction f, ``seconds`` long (N = rate x
   seconds tuples). A level whose engine cannot keep up would run on far past its time (an
   overloaded vsn ran 60 s of schedule in minutes), so the source stops at
   :data:`DEADLINE_FACTOR` x ``seconds`` after its start and the level is marked truncated:
   its percentiles are then lower bounds (the tuples never sent would have waited longer still).
   Tuples due in the first ``min(5 s, 10 % of the level)`` are the warm-up, left out of the
   histogram.

Rounds alternate the engines (:func:`.common.rotation`), every run is probed for the machine's
load and the other processes' CPU (:func:`.common.repeat_probe`); per engine and level the JSON
gives min / median / max over rounds (:func:`.common.summarize`) of the achieved rate and of
each percentile, and every round's numbers. An engine whose run fails is recorded as "not run"
with its error, for that query, and the others go on.

Spark streaming is not measured here (its rate source runs on Spark's executors; a scheduled
time per tuple needs another sink: out of scope for this benchmark).

What runs is chosen by environment variables (``bench`` takes no parameters), each a
comma-separated list or a number: ``LATENCY_ENGINES`` (keys of :data:`ENGINES`),
``LATENCY_QUERIES`` (currency, window_count), ``LATENCY_FRACTIONS``, ``LATENCY_SECONDS``,
``LATENCY_ROUNDS``, ``LATENCY_CAPACITY_ROUNDS`` (default: ``max(3, rounds)``),
``LATENCY_CAPACITY_TUPLES``, ``LATENCY_BASE`` (unpaced, live: what the
fractions are of); ``LATENCY_PROGRESS=1`` prints a line per run.
The run prints its estimated duration at the start.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import latency_load_flow as lf
from .common import (
    env_list,
    repeat_probe,
    rotation,
    say_progress,
    summarize,
    write_result,
)
from .peak import command
from .speed import measure, summary_own_s
from .userflows import ENGINES as USERFLOW_ENGINES

NAME = "latency-load"
FLOW = Path(__file__).with_name("latency_load_flow.py")
#: engine variant -> ``stretchflow run`` flags (``bench userflows``' own, built on ``bench
#: speed``'s VARIANTS): reference, vsn at parallelism 1, sn on 2 process channels, ordered on 2
#: workers, slack (infinite slack: the reference's output)
ENGINES: dict[str, list[str]] = {e: USERFLOW_ENGINES[e] for e in
                                 ("reference", "vsn1", "sn2-processes", "ordered2", "slack")}
FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.0)
QUERIES = lf.QUERIES
SECONDS = 60.0
ROUNDS = 2
#: tuples of a capacity run: 2-15 s at the engines' unpaced rates on the 2-core machine
CAPACITY_TUPLES = 1_000_000
#: event time of a capacity run: tuples per s of event time (unpaced, there is no schedule to
#: take it from); 100 000 puts about as many tuples in a 1 s window as a level near capacity
CAPACITY_TS_RATE = 100_000.0
#: the live capacity run offers this many times the capacity C (the source never waits)
LIVE_OVERLOAD = 4.0
#: the live capacity run's source stops this long after its start (s)
LIVE_DEADLINE_S = 20.0
#: a level's source stops at this many times its length (an overloaded engine's level)
DEADLINE_FACTOR = 1.5
#: the warm-up left out of a level's histogram: min(WARMUP_MAX_S, WARMUP_FRACTION x level)
WARMUP_MAX_S = 5.0
WARMUP_FRACTION = 0.1
#: a ``stretchflow run`` process's start-up and end (imports, the run's set-up), for the
#: estimate only (about 1-2 s here; sn's fork server adds one)
STARTUP_EST_S = 2.0
#: the rate a capacity run is guessed at, for the estimate only
CAPACITY_EST_TPS = 150_000.0
#: a child that runs this much past its deadline is killed as hung
CHILD_GRACE_S = 300.0
#: what the fractions are of: the unpaced capacity C (the issue's "measured capacity", the
#: default) or the live capacity (the rate achieved from a source paced beyond C)
BASES = ("unpaced", "live")
#: (engine, query) -> what the reader must know of that pair (checked: sn.py builds one
#: parallel region per O+, and currency has none: ``extra["regions"]`` is empty)
NOTES = {("sn2-processes", "currency"): "currency has no O+, so sn builds no parallel region "
         "and starts no channel process: the map runs in the parent's threads, as on the "
         "other engines; the process channels are measured by window_count"}
#: capacity rounds at least (full runs): a capacity run is short, and one that hits an engine's
#: occasional multi-second stall (seen on ordered and slack, window_count: 4 s once in five
#: runs of 0.2 s) must not move the median C on which every level depends
CAPACITY_ROUNDS_MIN = 3
QUICK = {"engines": ["reference", "vsn1"], "queries": ["currency"], "fractions": [0.5, 1.0],
         "seconds": 3.0, "rounds": 1, "capacity_tuples": 50_000, "base": "unpaced",
         "capacity_rounds": 1}


# -- the selection ------------------------------------------------------------------------------
def selection(quick: bool, **given: Any) -> dict[str, Any]:
    """What a run measures: ``given`` (engines, queries, fractions, seconds, rounds,
    capacity_rounds, capacity_tuples, base), else ``LATENCY_*``, else the defaults
    (:data:`QUICK` when ``quick``; capacity rounds: at least :data:`CAPACITY_ROUNDS_MIN`)."""
    default: dict[str, Any] = dict(QUICK) if quick else {
        "engines": list(ENGINES), "queries": list(QUERIES), "fractions": list(FRACTIONS),
        "seconds": SECONDS, "rounds": ROUNDS, "capacity_tuples": CAPACITY_TUPLES,
        "base": "unpaced"}

    def pick(key: str, env: str, known: tuple[str, ...]) -> list[str]:
        got = given.get(key) or env_list(env) or default[key]
        bad = [x for x in got if x not in known]
        if bad:
            raise ValueError(f"{env}: unknown {bad}; known: {', '.join(known)}")
        return list(got)

    fractions = given.get("fractions") or [float(x) for x in env_list("LATENCY_FRACTIONS") or []] \
        or default["fractions"]
    if any(not 0 < f <= 2 for f in fractions):
        raise ValueError(f"LATENCY_FRACTIONS: each in (0, 2], got {fractions}")

    def number(key: str, env: str, cast: Callable[[str], Any]) -> Any:
        v = given.get(key)
        if v is None and os.environ.get(env):
            v = cast(os.environ[env])
        if v is None:
            v = default[key]
        if v <= 0:
            raise ValueError(f"{env}: must be positive, got {v}")
        return v

    rounds = int(number("rounds", "LATENCY_ROUNDS", int))
    default.setdefault("capacity_rounds", max(CAPACITY_ROUNDS_MIN, rounds))
    base = given.get("base") or os.environ.get("LATENCY_BASE") or default["base"]
    if base not in BASES:
        raise ValueError(f"LATENCY_BASE: unknown {base!r}; known: {', '.join(BASES)}")
    return {
        "engines": pick("engines", "LATENCY_ENGINES", tuple(ENGINES)),
        "queries": pick("queries", "LATENCY_QUERIES", QUERIES),
        "fractions": sorted(float(f) for f in fractions),
        "seconds": float(number("seconds", "LATENCY_SECONDS", float)),
        "rounds": rounds,
        "capacity_rounds": int(number("capacity_rounds", "LATENCY_CAPACITY_ROUNDS", int)),
        "capacity_tuples": int(number("capacity_tuples", "LATENCY_CAPACITY_TUPLES", int)),
        "base": base,
    }


def warmup_s(seconds: float) -> float:
    """The warm-up of a level ``seconds`` long."""
    return min(WARMUP_MAX_S, WARMUP_FRACTION * seconds)


def estimate_s(sel: dict[str, Any]) -> tuple[float, float]:
    """(expected, at most) seconds of a run of ``sel``: per query and engine two capacity
    runs a capacity round and the levels a round, each a process start-up more; at most:
    every level overloaded to its deadline and every live capacity run to its own."""
    cap = STARTUP_EST_S + sel["capacity_tuples"] / CAPACITY_EST_TPS
    live = STARTUP_EST_S + min(LIVE_DEADLINE_S, sel["capacity_tuples"] / CAPACITY_EST_TPS)
    live_max = STARTUP_EST_S + LIVE_DEADLINE_S
    n = len(sel["fractions"])
    k = len(sel["queries"]) * len(sel["engines"])
    caps = sel["capacity_rounds"] * (cap + live)
    levels = sel["rounds"] * n * (STARTUP_EST_S + sel["seconds"])
    levels_max = sel["rounds"] * n * (STARTUP_EST_S + DEADLINE_FACTOR * sel["seconds"])
    caps_max = sel["capacity_rounds"] * (cap + live_max)
    return k * (caps + levels), k * (caps_max + levels_max)


# -- one run ---------------------------------------------------------------------------------
def _flow_params(query: str, *, rate: float, ts_rate: float, tuples: int, warmup: float,
                 deadline: float, out: Path) -> list[str]:
    params = {"query": query, "rate": repr(rate), "ts_rate": repr(ts_rate), "tuples": tuples,
              "warmup": warmup, "deadline": deadline, "out": out}
    return [a for k, v in params.items() for a in ("--param", f"{k}={v}")]


def run_flow(engine: str, query: str, tmp: Path, label: str, *, rate: float, ts_rate: float,
             tuples: int, warmup: float = 0.0, deadline: float = 0.0) -> dict[str, Any]:
    """One whole ``stretchflow run`` of the flow file on ``engine``: the sink's JSON (delays,
    counts, the achieved and own rates, how late the source was) with the process's wall,
    own time, CPU, peak RSS, and the load probe around it. A failure is a RuntimeError."""
    out, peak = tmp / f"{label}.json", tmp / f"{label}.peak"
    out.unlink(missing_ok=True)
    cmd = command(peak, "stretchflow", "run", str(FLOW), *ENGINES[engine],
                  *_flow_params(query, rate=rate, ts_rate=ts_rate, tuples=tuples,
                                warmup=warmup, deadline=deadline, out=out))
    # the longest a sound run can take: its deadline (or its tuples at a crawl) and a grace
    timeout = (deadline or LIVE_DEADLINE_S) + CHILD_GRACE_S
    with repeat_probe() as probe:
        r = measure(label, cmd, peak, summary_own_s, timeout=timeout)
    del r["stdout"]
    try:
        got = json.loads(out.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{label}: the sink wrote no readable JSON ({e})") from e
    if not got["same_process"]:
        raise RuntimeError(f"{label}: the sink ran in process {got['sink_pid']}, the source "
                           f"in {got['source_pid']}: no shared t0, no delay")
    return {**got, "process": r, "probe": probe}


def outputs_ok(query: str, got: dict[str, Any]) -> bool:
    """The output is complete: one output per tuple sent (currency), or counts that add up
    to the tuples sent (window_count)."""
    if query == "currency":
        return got["outputs"] == got["sent"]
    return got["sum_counts"] == got["sent"]


def _record(query: str, r: int, got: dict[str, Any]) -> dict[str, Any]:
    """What a round keeps of one run (the sink's JSON without the process ids)."""
    keep = {k: v for k, v in got.items() if k not in ("source_pid", "sink_pid")}
    return {"round": r + 1, **keep, "outputs_ok": outputs_ok(query, got)}


# -- the phases ----------------------------------------------------------------------------------
def _capacities(query: str, sel: dict[str, Any], tmp: Path, failed: dict[str, str],
                say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Per engine, the unpaced capacity and the live capacity of every round (engines
    rotating), and their summaries."""
    n = sel["capacity_tuples"]
    out: dict[str, dict[str, Any]] = {e: {"runs": [], "live_runs": []} for e in sel["engines"]}
    for r in range(sel["capacity_rounds"]):
        for e in rotation(sel["engines"], r):
            if e in failed:
                continue
            try:
                say(f"latency-load {query}: capacity, round {r + 1}, {e}")
                got = run_flow(e, query, tmp, f"{query}-{e}-cap", rate=0.0,
                               ts_rate=CAPACITY_TS_RATE, tuples=n)
                out[e]["runs"].append(_record(query, r, got))
                cap = got["own_rate"]
                if not cap:
                    raise RuntimeError(f"{query} on {e}: the capacity run had no output")
                say(f"latency-load {query}: live capacity, round {r + 1}, {e}")
                live = run_flow(e, query, tmp, f"{query}-{e}-live", rate=LIVE_OVERLOAD * cap,
                                ts_rate=LIVE_OVERLOAD * cap, tuples=n,
                                deadline=LIVE_DEADLINE_S)
                out[e]["live_runs"].append(_record(query, r, live))
            except RuntimeError as err:
                failed[e] = f"not run: {str(err)[-1500:]}"
    for e, c in out.items():
        if e in failed:
            continue
        c["tuples_per_s"] = summarize([x["own_rate"] for x in c["runs"]])
        c["live_tuples_per_s"] = summarize([x["achieved_rate"] for x in c["live_runs"]])
        c["outputs_ok"] = all(x["outputs_ok"] for x in c["runs"] + c["live_runs"])
    return out


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min / median / max over rounds of a level's rates, percentiles and process costs."""
    def of(get: Callable[[dict[str, Any]], Any]) -> dict[str, float] | None:
        vals = [v for x in runs if (v := get(x)) is not None]
        return summarize(vals) if vals else None

    return {
        "achieved_tuples_per_s": of(lambda x: x["achieved_rate"]),
        "delay_ms": {k: of(lambda x, k=k: x["delay_ms"][k])
                     for k in (*lf.QUANTILES, "max")},
        "samples": of(lambda x: x["delay_ms"]["samples"]),
        "max_lag_ms": of(lambda x: x["behind"]["max_lag_ms"]),
        "cores_busy": of(lambda x: x["process"]["cores_busy"]),
        "peak_rss_mb": of(lambda x: x["process"]["peak_rss_mb"]),
        "truncated": any(x["truncated"] for x in runs),
        "outputs_ok": all(x["outputs_ok"] for x in runs),
    }


def _levels(query: str, sel: dict[str, Any], caps: dict[str, dict[str, Any]], tmp: Path,
            failed: dict[str, str], say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Per engine and fraction, every round's level run at ``f x`` the median capacity."""
    seconds, warm = sel["seconds"], warmup_s(sel["seconds"])
    levels: dict[str, dict[str, Any]] = {e: {} for e in sel["engines"]}
    for r in range(sel["rounds"]):
        for e in rotation(sel["engines"], r):
            if e in failed:
                continue
            cap = caps[e]["tuples_per_s" if sel["base"] == "unpaced"
                          else "live_tuples_per_s"]["median"]
            for f in sel["fractions"]:
                rate = f * cap
                cell = levels[e].setdefault(f"{f:g}", {
                    "fraction": f, "offered_tuples_per_s": rate,
                    "planned_tuples": math.ceil(rate * seconds), "runs": []})
                say(f"latency-load {query}: round {r + 1}, {e} at {f:.0%} = {rate:,.0f} t/s")
                try:
                    got = run_flow(e, query, tmp, f"{query}-{e}-{f:g}", rate=rate,
                                   ts_rate=rate, tuples=cell["planned_tuples"], warmup=warm,
                                   deadline=DEADLINE_FACTOR * seconds)
                except RuntimeError as err:
                    failed[e] = f"not run: {str(err)[-1500:]}"
                    break
                cell["runs"].append(_record(query, r, got))
    for cells in levels.values():
        for cell in cells.values():
            if cell["runs"]:
                cell.update(_summary(cell["runs"]))
    return levels


# -- the figure ----------------------------------------------------------------------------------
def draw(metrics: dict[str, Any], png: Path, quick: bool) -> Path | None:
    """p50 / p99 / p99.9 (log y, medians over rounds, min-max bars) against the offered load
    (% of C) per engine, a row per query; a truncated level (the engine could not keep up, its
    percentiles lower bounds) has hollow markers."""
    from .plots import _pyplot, save_figure

    queries = [q for q in metrics.get("queries", {}) if metrics["queries"][q]["engines"]]
    if not queries:
        return None
    engines = list(dict.fromkeys(e for q in queries for e in metrics["queries"][q]["engines"]))
    base = "C" if metrics.get("base", "unpaced") == "unpaced" else "live capacity"
    plt = _pyplot()
    fig, axes = plt.subplots(len(queries), len(engines), squeeze=False, sharey="row",
                             figsize=(2.6 * len(engines) + 0.6, 2.6 * len(queries) + 0.4),
                             dpi=110)
    styles = {"p50": ("tab:blue", "o"), "p99": ("tab:orange", "s"), "p99_9": ("tab:red", "^")}
    for qi, q in enumerate(queries):
        for ei, e in enumerate(engines):
            ax = axes[qi][ei]
            eng = metrics["queries"][q]["engines"].get(e) or {}
            cells = [c for c in (eng.get("levels") or {}).values() if c.get("delay_ms")]
            if not cells:
                ax.text(0.5, 0.5, eng.get("not_run", "not run")[:40], ha="center",
                        va="center", fontsize=7, transform=ax.transAxes, wrap=True)
            for k, (color, mark) in styles.items():
                pts = [(c["fraction"] * 100, c["delay_ms"][k], c["truncated"]) for c in cells
                       if c["delay_ms"].get(k)]
                if not pts:
                    continue
                xs = [x for x, _, _ in pts]
                med = [s["median"] for _, s, _ in pts]
                err = [[m - s["min"] for m, (_, s, _) in zip(med, pts, strict=True)],
                       [s["max"] - m for m, (_, s, _) in zip(med, pts, strict=True)]]
                ax.errorbar(xs, med, yerr=err, color=color, lw=1, capsize=2,
                            label=k.replace("_", "."))
                for x, m, (_, _, trunc) in zip(xs, med, pts, strict=True):
                    ax.plot([x], [m], mark, color=color, markersize=4,
                            markerfacecolor="white" if trunc else color)
            for c in cells:  # achieved / offered under each level's p50
                got = c.get("achieved_tuples_per_s")
                if got and c["delay_ms"].get("p50"):
                    ax.annotate(f"{got['median'] / c['offered_tuples_per_s']:.0%}",
                                (c["fraction"] * 100, c["delay_ms"]["p50"]["median"]),
                                textcoords="offset points", xytext=(0, -10), ha="center",
                                fontsize=5, color="tab:gray")
            ax.set_yscale("log")
            ax.margins(x=0.08, y=0.15)  # room for the achieved/offered labels under p50
            ax.grid(True, which="both", axis="y", alpha=0.3)
            cap = eng.get("capacity") or {}
            ax.set_title(f"{q}: {e}" + (
                f"\nC {cap['tuples_per_s']['median']:,.0f}, live "
                f"{cap['live_tuples_per_s']['median']:,.0f} t/s"
                if "live_tuples_per_s" in cap else ""), fontsize=7)
            ax.set_xlabel(f"offered load (% of {base}); gray: achieved/offered", fontsize=6)
            ax.tick_params(labelsize=7)
            if ei == 0:
                ax.set_ylabel("delay from schedule (ms)", fontsize=7)
            if qi == 0 and ei == 0:
                ax.legend(fontsize=6, title="hollow: truncated", title_fontsize=6)
    return save_figure(plt, fig, png, quick)


# -- the benchmark ------------------------------------------------------------------------------
def run(quick: bool = False, out_dir: str | os.PathLike | None = None,
        progress: Callable[[str], None] | None = None, **given: Any) -> Path:
    """Measures the selection (:func:`selection`; ``given`` overrides it), writes
    ``latency-load.json`` and its figure; returns the JSON's path."""
    t_start = time.perf_counter()
    sel = selection(quick, **given)
    expect, most = estimate_s(sel)
    print(f"latency-load: {len(sel['engines'])} engines x {len(sel['queries'])} queries x "
          f"({sel['capacity_rounds']} capacity rounds of 2 runs + {sel['rounds']} rounds of "
          f"{len(sel['fractions'])} levels of {sel['seconds']:g} s): about "
          f"{_duration(expect)}, at most {_duration(most)} if every level is overloaded to "
          f"its deadline", file=sys.stderr, flush=True)
    say = say_progress("LATENCY_PROGRESS", progress)
    queries: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="latency-load-") as tmp_s:
        tmp = Path(tmp_s)
        for q in sel["queries"]:
            failed: dict[str, str] = {}
            caps = _capacities(q, sel, tmp, failed, say)
            levels = _levels(q, sel, caps, tmp, failed, say)
            engines: dict[str, Any] = {}
            for e in sel["engines"]:
                engines[e] = {"capacity": caps[e], "levels": levels[e]}
                if e in failed:  # what it measured before it failed stays, for a look
                    engines[e]["not_run"] = failed[e]
            notes = {e: NOTES[e, q] for e in sel["engines"] if (e, q) in NOTES}
            queries[q] = {"engines": engines, **({"notes": notes} if notes else {})}
    metrics = {"queries": queries, "base": sel["base"], "total_s": time.perf_counter() - t_start}
    params = {
        "quick": quick, **sel,
        "engines_flags": {e: " ".join(ENGINES[e]) for e in sel["engines"]},
        "warmup_s": warmup_s(sel["seconds"]),
        "deadline_s": DEADLINE_FACTOR * sel["seconds"],
        "capacity_ts_rate": CAPACITY_TS_RATE,
        "base_means": "levels are fractions of the median unpaced capacity C" if sel["base"]
        == "unpaced" else "levels are fractions of the median live capacity",
        "live_overload": LIVE_OVERLOAD, "live_deadline_s": LIVE_DEADLINE_S,
        "estimate_s": {"expected": expect, "at_most": most},
        "flow": "stretchflow_bench/latency_load_flow.py, run by `python -m stretchflow run`",
        "delay": "from each tuple's scheduled send time t0 + i / rate (coordinated omission "
                 "corrected): t0 when the source hands over tuple 0; a window's outputs from "
                 "the scheduled time of the first tuple at or after its end; the sink reads "
                 "the clock once per hand-over; 1 % log buckets, nearest rank",
        "capacity": "own time: tuples / (last output - tuple 0's hand-over), in the run's "
                    "process (no start-up, imports or commit); median of the rounds",
        "achieved": "(tuples sent - 1) / (last send - t0): exactly the offered rate on "
                    "schedule",
    }
    png = Path(out_dir or "benchmarks/results") / f"{NAME}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    extra = {"plot": png.name} if draw(metrics, png, quick) is not None else {}
    return write_result(NAME, params, metrics, out_dir, **extra)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _run(quick: bool, out_dir: str | None) -> Path:
    return run(quick=quick, out_dir=out_dir)


#: name -> (what it measures, the paper's experiment, run(quick, out_dir) -> JSON path)
BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    NAME: ("latency under sustained load: each local engine at 25-100 % of its capacity, "
           "open-loop, p50/p99/p99.9 from each tuple's scheduled send time (CO corrected), "
           "whole processes (LATENCY_* select)", "issue #33", _run),
}


if __name__ == "__main__":
    print(run())
