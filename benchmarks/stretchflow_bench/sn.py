"""``stretchflow bench sn``: the SN executor's benchmarks, scaled to a 2-core machine.

* ``sn-q1`` (STRETCH journal Q1, §8.2): wordcount and paircount with distance 3, 10 and
  unbounded, VSN against SN (thread channels) at Π = 1, 2, 4: throughput and SN's
  duplication factor (a tuple whose keys live on k channels is sent k times).
* ``sn-speedup`` (elastic-scaling App. B.1, Fig. 11): a partitioned operator with 1000 keys
  and a tunable pure-Python per-tuple cost (a loop of ``cost`` integer multiplications), SN
  with process channels at 1, 2, 3, 4 channels and with thread channels for contrast:
  throughput and speed-up over one channel. On 2 cores the ideal is 2x at 2 channels; threads
  stay near 1x (the GIL).
* ``sn-settle`` (App. B.1, Figs. 10/12): the channel count the level controller settles on
  for each per-tuple cost, input at full speed, process channels, repeated with the costs'
  order alternating; beside it each cost's steady throughput at fixed channel counts.
* ``sn-adapt`` (App. B.2, Figs. 13–16): sine and step loads (a paced source whose rate follows
  the profile), channels, offered and handled rate over time with the level controller.
* ``sn-thresholds`` (App. B.3, Fig. 17): the step load with congestion thresholds 0, 0.2, 0.9.
* ``sn-migration`` (App. B.4, Fig. 18): migration time and bytes moved against the number of
  keys and of channels, process channels with the SQLite store and threads with the memory
  store.

Scaling (the paper: 8-core hosts, 5 s periods, 5000 t/s mean load, 250 s phases): here the
adaptation period is 1 s (0.4 s quick), the loads are set relative to the measured capacity
of one channel at the chosen cost (:func:`_capacity`: steady per-interval throughput of one
process channel at full speed, after start-up, median of 3 runs), and phases last 8 periods —
the controller's behaviour is a function of periods, not of seconds. Every run is repeated
(``repeats``, variants alternating) and reported as min/median/max, each repeat probed
(:func:`~stretchflow_bench.common.repeat_probe`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import stretchflow as sf
from stretchflow.elastic.controller import Controller, Decision, Metrics

from .common import repeat_probe, summarize, write_result
from .plots import _pyplot, save_figure
from .timeline import changes, downsample, from_rows, per_period
from .timeline import draw as draw_timeline

KEYS = 1000


# -- workloads -------------------------------------------------------------------------------
def burn(cost: int, seed: int) -> int:
    """``cost`` integer multiplications in pure Python (holds the GIL throughout)."""
    x = seed | 1
    for _ in range(cost):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def _records(n: int, keys: int = KEYS) -> list[dict[str, int]]:
    # one tuple per ms, keys round-robin: every key gets the same load
    return [{"ts": t, "k": (t * 7919) % keys} for t in range(n)]


def _costly_flow(source: Any, cost: int, size: int = 1000) -> tuple[sf.Flow, Any]:
    flow = sf.Flow("costly")

    def update(a: int, t: dict) -> int:
        return a + (burn(cost, t["ts"]) & 1)

    col = flow.source(source).aggregate(
        size=size, keys=lambda t: {t["k"]}, init=lambda: 0, update=update,
        output=lambda k, a: {"k": k, "n": a}, name="costly").collect()
    return flow, col


def _paced(profile: Callable[[float], float], duration: float, keys: int = KEYS,
           delays: list[tuple[float, float]] | None = None,
           every: int = 16) -> Callable[[], Iterator[dict[str, int]]]:
    """A source whose rate (tuples/s) follows ``profile(seconds since start)``; it sleeps
    between small bursts, so the splitter waits for input (not blocked) when channels keep
    up. Event time is wall time in ms since the start.

    With ``delays``, every ``every``-th tuple appends ``(seconds since start, ms)``: how long
    after the profile owed it the engine took it (its admission delay). A congested channel
    blocks the splitter, which stops pulling from this source, so the delay is the queueing
    the controller is there to avoid; the time a tuple was owed is interpolated within the
    interval in which it fell due, not the (later) time the source noticed it."""

    def gen() -> Iterator[dict[str, int]]:
        clock = time.perf_counter
        t0 = clock()
        sent = 0.0
        n = 0
        last = t0
        while True:
            now = clock()
            el = now - t0
            if el >= duration:
                return
            before = sent
            sent += profile(el) * (now - last)  # tuples owed so far
            span = now - last
            while n < sent:
                yield {"ts": int(el * 1000), "k": (n * 7919) % keys}
                if delays is not None and n % every == 0:
                    # n in [before, sent): it fell due at that fraction of the interval
                    owed = last + span * (n - before) / (sent - before)
                    took = clock()
                    delays.append((took - t0, (took - owed) * 1000))
                n += 1
            last = now
            time.sleep(0.002)

    return gen


def _timed(seconds: float, keys: int = KEYS) -> Callable[[], Iterator[dict[str, int]]]:
    """A source at full speed for ``seconds`` (event time: ms since the start)."""

    def gen() -> Iterator[dict[str, int]]:
        t0 = time.perf_counter()
        n = 0
        while True:
            el = time.perf_counter() - t0
            if el >= seconds:
                return
            ts = int(el * 1000)
            for _ in range(256):
                yield {"ts": ts, "k": (n * 7919) % keys}
                n += 1

    return gen


# -- sn-q1 -----------------------------------------------------------------------------------
def q1(rows: int = 8_000, parallelisms: tuple[int, ...] = (1, 2, 4),
       distances: tuple[int | None, ...] = (3, 10, None), repeats: int = 3,
       seed: int = 1) -> dict[str, Any]:
    from stretchflow.io.generators import tweets  # heavy (pyarrow); channel processes skip it
    from stretchflow.queries import build_query

    recs = tweets(rows, seed=seed, rate=1000).to_pylist()
    cases: list[tuple[str, dict[str, Any]]] = [("wordcount", {})]
    cases += [("paircount", {"distance": d}) for d in distances]
    out: dict[str, Any] = {"rows": rows}
    for query, params in cases:
        label = query if query == "wordcount" else f"paircount-d{params['distance'] or 'inf'}"
        row: dict[str, Any] = {}
        for engine in ("vsn", "sn"):
            for p in parallelisms:
                tps, dup, probes = [], 0.0, []
                for _ in range(repeats):
                    flow = sf.Flow(label)
                    build_query(query, [flow.source(sf.io.iterable(recs))], **params).collect()
                    with repeat_probe() as probe:  # what else ran: write_result's "quiet"
                        res = flow.run(engine=engine, parallelism=p,
                                       max_parallelism=max(parallelisms))
                    probes.append(probe)
                    tps.append(rows / res.elapsed)
                    if engine == "sn":
                        dup = res.extra["duplication_factor"]
                row[f"{engine}{p}"] = {"tuples_per_s": summarize(tps), "probes": probes}
                if engine == "sn":
                    row[f"{engine}{p}"]["duplication_factor"] = dup
        out[label] = row
    return out


def _plot_q1(path: Path, m: dict[str, Any], quick: bool = False) -> None:
    plt = _pyplot()
    labels = [k for k in m if k != "rows"]
    fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=110)
    keys = list(m[labels[0]])
    width = 0.8 / len(keys)
    for n, key in enumerate(keys):
        vals = [m[lab][key]["tuples_per_s"]["median"] for lab in labels]
        ax.bar([x + n * width for x in range(len(labels))], vals, width, label=key)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels)
    ax.set_ylabel("throughput (tuples/s)")
    ax.set_title("Q1: VSN vs SN (threads); SN duplicates tuples with multi-key f_MK")
    ax.legend(fontsize=7, ncol=2)
    save_figure(_pyplot(), fig, path, quick)


# -- sn-speedup ------------------------------------------------------------------------------
def _cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def speedup(rows: int = 5_000, cost: int = 5_000, channels: tuple[int, ...] = (1, 2, 3, 4),
            repeats: int = 3, transports: tuple[str, ...] = ("processes", "threads"),
            batch: int = 64) -> dict[str, Any]:
    recs = _records(rows)
    out: dict[str, Any] = {"rows": rows, "cost": cost, "keys": KEYS}
    for transport in transports:
        res_t: dict[str, Any] = {}
        for n in channels:
            tps, parent_us, startup, probes = [], [], [], []
            for _ in range(repeats):
                flow, col = _costly_flow(sf.io.iterable(recs), cost)
                c0 = _cpu_s()
                with repeat_probe() as probe:  # what else ran: write_result's "quiet"
                    res = flow.run(engine="sn", parallelism=n, channels=transport, batch=batch)
                probes.append(probe)
                # steady state: not the processes' start (reported apart)
                tps.append(rows / (res.elapsed - res.extra["startup_s"]))
                startup.append(res.extra["startup_s"])
                # this process's CPU per tuple (splitter, merger, pickling; with threads also
                # the channels): what stands between the channels and a linear speed-up
                parent_us.append((_cpu_s() - c0) / rows * 1e6)
            res_t[str(n)] = {"tuples_per_s": summarize(tps), "startup_s": summarize(startup),
                             "parent_cpu_us_per_tuple": summarize(parent_us), "probes": probes}
        base = res_t[str(channels[0])]["tuples_per_s"]["median"]
        for n in channels:
            res_t[str(n)]["speedup"] = res_t[str(n)]["tuples_per_s"]["median"] / base
        out[transport] = res_t
    return out


def _plot_speedup(path: Path, m: dict[str, Any], quick: bool = False) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    for transport in ("processes", "threads"):
        if transport in m:
            ns = [int(n) for n in m[transport]]
            ax.plot(ns, [m[transport][str(n)]["speedup"] for n in ns], "o-", label=transport)
    ns = [int(n) for n in m.get("processes", m.get("threads", {}))]
    ax.plot(ns, [min(n, 2) for n in ns], "k--", label="ideal on 2 cores")
    ax.set_xlabel("channels")
    ax.set_ylabel("speed-up over 1 channel")
    ax.set_title(f"partitioned operator, {m['keys']} keys, cost {m['cost']}")
    ax.legend()
    save_figure(_pyplot(), fig, path, quick)


# -- one channel's capacity, fixed-parallelism runs -------------------------------------------
class _Passive(Controller):
    """Decides nothing: lets a fixed-parallelism run log the executor's per-interval metrics
    (throughput, congestion), which are measured only when a controller is attached."""

    name = "passive"

    def observe(self, metrics: Metrics) -> Decision | None:
        return None

    def reset(self) -> None:
        pass


def _fixed_run(cost: int, parallelism: int, seconds: float, interval: float = 0.5,
               batch: int = 32) -> dict[str, Any]:
    """Input at full speed for ``seconds`` through ``parallelism`` process channels (the
    adaptive runs' batch and queue sizes); ``tuples_per_s`` is the median of the per-interval
    throughputs after the first interval. The executor starts measuring only once every
    channel process has started (``startup_s``), and the first interval still holds the
    pipeline filling, so neither start-up nor filling is counted (nor the drain at the end,
    which comes after the last interval)."""
    flow, _ = _costly_flow(sf.io.iterable(_timed(seconds)), cost, size=10_000)
    with repeat_probe() as probe:
        res = flow.run(engine="sn", parallelism=parallelism, channels="processes",
                       controller=_Passive(), batch=batch, capacity=4 * batch,
                       metrics_interval=interval)
    ms = res.extra["metrics"]
    return {"tuples_per_s": _steady([m["throughput"] for m in ms]),
            "congestion": statistics.median(m["congestion"] for m in ms) if ms else None,
            "intervals": len(ms), "startup_s": res.extra["startup_s"],
            "elapsed_s": res.elapsed, "probe": probe}


def _steady(throughputs: list[float]) -> float:
    """Median per-interval throughput without the first interval (the pipeline filling)."""
    if not throughputs:
        raise ValueError("sn bench: a fixed-parallelism run logged no metrics interval "
                         "(input shorter than one interval)")
    return statistics.median(throughputs[1:] or throughputs)


def _capacity(cost: int, seconds: float = 4.0, repeats: int = 3) -> dict[str, Any]:
    """Tuples/s one process channel sustains at ``cost`` after start-up: the median over
    ``repeats`` of :func:`_fixed_run`'s steady throughput. ``old_style_tuples_per_s`` is the
    former measure, 2 000 tuples over the whole run's elapsed time (process start-up, pipeline
    fill and drain included), kept for comparison (issue #20: it underestimated one
    channel's capacity, so the "overloads" of sn-adapt and sn-thresholds were not)."""
    flow, _ = _costly_flow(sf.io.iterable(_records(2_000)), cost)
    res = flow.run(engine="sn", parallelism=1, channels="processes", batch=64)
    old = 2_000 / res.elapsed
    runs = [_fixed_run(cost, 1, seconds) for _ in range(repeats)]
    tps = [r["tuples_per_s"] for r in runs]
    return {"tuples_per_s": statistics.median(tps), "repeats": summarize(tps),
            "old_style_tuples_per_s": old, "old_style_startup_s": res.extra["startup_s"],
            "seconds": seconds, "probes": [r["probe"] for r in runs]}


# -- sn-settle -------------------------------------------------------------------------------
def _settle_run(cost: int, seconds: float, period: float, max_parallelism: int,
                batch: int) -> dict[str, Any]:
    flow, _ = _costly_flow(sf.io.iterable(_timed(seconds)), cost, size=10_000)
    with repeat_probe() as probe:
        res = flow.run(engine="sn", parallelism=1, max_parallelism=max_parallelism,
                       channels="processes", controller="level", batch=batch,
                       capacity=4 * batch, controller_options={"period": period},
                       metrics_interval=period / 2)
    ms = res.extra["metrics"]
    path = [m["parallelism"] for m in ms]
    final = res.extra["parallelism"]["costly"]
    half = len(path) // 2
    tail = path[half:] or [final]
    # settled: where it spent most of the second half (a P5 probe up and back is a visit)
    return {"settled": max(set(tail), key=tail.count), "final": final,
            # the second half's per-interval throughput, comparable with _fixed_run's
            "steady_tuples_per_s": statistics.median(m["throughput"] for m in ms[half:])
            if ms[half:] else None,
            "channels_over_time": path,
            "congestion": [round(m["congestion"], 3) for m in ms],
            "throughput": [round(m["throughput"], 1) for m in ms],
            "reasons": [m.get("reason") for m in ms if m.get("reason")],
            "migrations": len(res.extra["reconfigurations"]),
            "tuples_per_s": res.extra["tuples_routed"] / res.elapsed, "probe": probe}


def settle(costs: tuple[int, ...] = (0, 200, 2_000, 8_000), seconds: float = 12.0,
           period: float = 1.0, max_parallelism: int = 4, batch: int = 32, repeats: int = 3,
           fixed: tuple[int, ...] = (1, 2, 4), fixed_seconds: float = 4.0) -> dict[str, Any]:
    """Fig. 10/12: the channels the level controller settles on, per cost, input at full
    speed; ``repeats`` runs per cost, the costs' order alternating between repeats. With
    ``fixed``, one run at each fixed channel count per cost gives the steady throughput the
    controller's choice can be judged against (does a higher level really do better?)."""
    out: dict[str, Any] = {"period_s": period, "seconds": seconds}
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in costs}
    for r in range(repeats):
        for cost in (costs if r % 2 == 0 else tuple(reversed(costs))):
            runs[cost].append(_settle_run(cost, seconds, period, max_parallelism, batch))
    for cost in costs:
        rs = runs[cost]
        out[str(cost)] = {
            "settled": summarize([x["settled"] for x in rs]),
            "migrations": summarize([x["migrations"] for x in rs]),
            "tuples_per_s": summarize([x["tuples_per_s"] for x in rs]),
            "steady_tuples_per_s": summarize([x["steady_tuples_per_s"] for x in rs
                                              if x["steady_tuples_per_s"] is not None]),
            "fixed_tuples_per_s": {str(p): _fixed_run(cost, p, fixed_seconds, batch=batch)
                                   ["tuples_per_s"] for p in fixed},
            "runs": rs}
    return out


def _plot_settle(path: Path, m: dict[str, Any], quick: bool = False) -> None:
    plt = _pyplot()
    costs = [c for c in m if isinstance(m[c], dict)]
    med = [m[c]["settled"]["median"] for c in costs]
    lo = [a - m[c]["settled"]["min"] for a, c in zip(med, costs, strict=True)]
    hi = [m[c]["settled"]["max"] - a for a, c in zip(med, costs, strict=True)]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    ax.bar(costs, med, yerr=[lo, hi], capsize=4)
    ax.set_xlabel("per-tuple cost (multiplications)")
    ax.set_ylabel("settled channels (median, min-max)")
    ax.set_title("level controller, input at full speed, process channels")
    save_figure(_pyplot(), fig, path, quick)


# -- sn-adapt / sn-thresholds ----------------------------------------------------------------
def _profiles(cap: float, phase: float) -> dict[str, Callable[[float], float]]:
    # App. B.2's shapes relative to one channel's capacity: mean 0.9 cap (5000 t/s in the
    # paper), amplitude 0.45 cap; step 0.9 → 1.8 → 0.36 → 0.9 cap (5000/10000/2000/5000)
    def sine(el: float) -> float:
        return cap * (0.9 + 0.45 * math.sin(2 * math.pi * el / (4 * phase)))

    def step(el: float) -> float:
        k = int(el // phase) % 4
        return cap * (0.9, 1.8, 0.36, 0.9)[k]

    return {"sine": sine, "step": step}


def _adaptive_run(profile: Callable[[float], float], seconds: float, cost: int,
                  period: float, threshold: float = 0.2) -> dict[str, Any]:
    delays: list[tuple[float, float]] = []
    flow, _ = _costly_flow(sf.io.iterable(_paced(profile, seconds, delays=delays)), cost,
                           size=10_000)
    with repeat_probe() as probe:
        res = flow.run(engine="sn", parallelism=1, max_parallelism=4, channels="processes",
                       controller="level", batch=32, capacity=128,
                       controller_options={"period": period, "threshold": threshold},
                       metrics_interval=period / 2)
    ms = res.extra["metrics"]
    offered = [profile(m["time"]) for m in ms]
    # App. B.2's "handles the load": per period, the part of the offered rate processed
    # (a backlog drained after a rise may exceed the offer; it is capped at 1)
    handled = [min(1.0, m["throughput"] / o) if o > 0 else 1.0
               for o, m in zip(offered, ms, strict=True)]
    # the source's clock starts with the run, as the metric rows' (up to start-up apart)
    p50, p99 = per_period(delays, [m["time"] for m in ms])
    return {"time": [round(m["time"], 3) for m in ms],
            "channels": [m["parallelism"] for m in ms],
            # channels per region at each change, when applied: one per migration
            "parallelism_series": {op: downsample([[round(t, 3), p] for t, p in v])
                                   for op, v in res.extra["parallelism_series"].items()},
            "admission_delay_p50_ms": p50, "admission_delay_p99_ms": p99,
            "offered": [round(o, 1) for o in offered],
            "throughput": [round(m["throughput"], 1) for m in ms],
            "congestion": [round(m["congestion"], 3) for m in ms],
            "handled_fraction": sum(handled) / len(handled) if handled else None,
            "migrations": len(res.extra["reconfigurations"]),
            "migration_time_ms": res.extra["migration_time_ms"], "probe": probe}


def _summarize_runs(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/max over repeats; ``median_run`` indexes the run of median handled fraction
    (the one plotted)."""
    hf = [r["handled_fraction"] for r in rs]
    order = sorted(range(len(rs)), key=lambda i: hf[i])
    return {"handled_fraction": summarize(hf),
            "migrations": summarize([r["migrations"] for r in rs]),
            "max_channels": summarize([max(r["channels"]) for r in rs]),
            "min_channels": summarize([min(r["channels"]) for r in rs]),
            "median_run": order[len(order) // 2], "runs": rs}


def _alternating(names: list[str], repeats: int) -> Iterator[str]:
    for r in range(repeats):
        yield from (names if r % 2 == 0 else list(reversed(names)))


def adapt(cost: int = 2_000, phase: float = 8.0, cycles: int = 1,
          period: float = 1.0, repeats: int = 3,
          capacity_seconds: float = 4.0) -> dict[str, Any]:
    cap = _capacity(cost, capacity_seconds)
    out: dict[str, Any] = {"cost": cost, "capacity": cap,
                           "capacity_1_channel": cap["tuples_per_s"], "phase_s": phase,
                           "period_s": period}
    profs = _profiles(cap["tuples_per_s"], phase)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in profs}
    for name in _alternating(list(profs), repeats):
        runs[name].append(_adaptive_run(profs[name], 4 * phase * cycles, cost, period))
    for name, rs in runs.items():
        out[name] = _summarize_runs(rs)
    return out


def thresholds(cost: int = 2_000, phase: float = 8.0, period: float = 1.0,
               values: tuple[float, ...] = (0.0, 0.2, 0.9), repeats: int = 3,
               capacity_seconds: float = 4.0) -> dict[str, Any]:
    cap = _capacity(cost, capacity_seconds)
    prof = _profiles(cap["tuples_per_s"], phase)["step"]
    out: dict[str, Any] = {"cost": cost, "capacity": cap,
                           "capacity_1_channel": cap["tuples_per_s"], "phase_s": phase,
                           "period_s": period}
    runs: dict[str, list[dict[str, Any]]] = {str(th): [] for th in values}
    for th in _alternating(list(runs), repeats):
        runs[th].append(_adaptive_run(prof, 4 * phase, cost, period, threshold=float(th)))
    for th, rs in runs.items():
        out[th] = _summarize_runs(rs)
    return out


def _plot_runs(path: Path, m: dict[str, Any], title: str, quick: bool = False) -> None:
    """Each variant's run of median handled fraction (``median_run``) over time: channels
    (with offered and processed rate on a second axis), then the source's admission delay
    per period, a mark at each migration in both (bench.timeline)."""
    plt = _pyplot()
    names = [k for k, v in m.items() if isinstance(v, dict) and "runs" in v]
    fig, axes = plt.subplots(2 * len(names), 1, figsize=(6.4, 3.6 * len(names)), dpi=110,
                             squeeze=False, height_ratios=[3, 2] * len(names))
    for k, name in enumerate(names):
        ax, lat_ax = axes[2 * k, 0], axes[2 * k + 1, 0]
        lat_ax.sharex(ax)
        v = m[name]
        r = v["runs"][v["median_run"]]
        par = r.get("parallelism_series") or {
            "channels": from_rows([{"time": t, "parallelism": c} for t, c
                                            in zip(r["time"], r["channels"], strict=True)])}
        marks = sorted(t for s in par.values() for t in changes(s))
        lat = {f"{q} per period": [[t, d] for t, d in zip(r["time"], r[key], strict=True)
                                   if d is not None]
               for q in ("p50", "p99") if (key := f"admission_delay_{q}_ms") in r}
        draw_timeline(ax, lat_ax, par, lat, marks, end=r["time"][-1] if r["time"] else None,
                      lat_label="admission delay (ms)")
        if not lat:  # a result from before the delay was recorded
            lat_ax.text(0.5, 0.5, "admission delay not recorded in this result",
                        transform=lat_ax.transAxes, ha="center", va="center", fontsize=8)
        ax.set_ylabel("channels")
        ax2 = ax.twinx()
        ax2.plot(r["time"], r["offered"], color="tab:gray", lw=0.8, label="offered t/s")
        ax2.plot(r["time"], r["throughput"], color="tab:green", lw=0.8,
                 label="throughput t/s")
        ax2.set_ylabel("tuples/s")
        ax2.legend(fontsize=6, loc="upper right")
        hf = v["handled_fraction"]
        ax.set_title(f"{title} {name}: median run of {hf['n']}, handled {r['handled_fraction']:.2f}"
                     f" (all runs {hf['min']:.2f}-{hf['max']:.2f})", fontsize=9)
    save_figure(plt, fig, path, quick)


# -- sn-migration ----------------------------------------------------------------------------
def migration(keys: tuple[int, ...] = (1_000, 10_000, 50_000),
              channels: tuple[int, ...] = (1, 2, 3, 4),
              transports: tuple[tuple[str, str], ...] = (("processes", "sqlite"),
                                                         ("threads", "memory"))
              ) -> dict[str, Any]:
    """For each key count: load K keys' state, then migrate 1→2→…→max→…→1; each step's time
    and bytes moved (App. B.4: linear in the state, smaller per step with more channels)."""
    out: dict[str, Any] = {}
    probes: list[dict[str, Any]] = []  # what else ran during each run: the result's "quiet"
    steps = list(channels[1:]) + list(reversed(channels[:-1]))
    for transport, store in transports:
        res_t: dict[str, Any] = {}
        for k in keys:
            rows = k * 2
            recs = _records(rows, keys=k)
            gap = rows // (len(steps) + 1)
            schedule = [(gap * (i + 1), p) for i, p in enumerate(steps)]
            flow, _ = _costly_flow(sf.io.iterable(recs), 0, size=10 * rows)
            with repeat_probe() as probe:
                res = flow.run(engine="sn", parallelism=channels[0],
                               max_parallelism=max(channels), channels=transport, store=store,
                               reconfigure=schedule, batch=256)
            probes.append(probe)
            res_t[str(k)] = [{"from": r["parallelism_before"], "to": r["parallelism_after"],
                              "duration_ms": round(r["duration_ms"], 2),
                              "bytes_moved": r["bytes_moved"],
                              "groups_moved": r["groups_moved"]}
                             for r in res.extra["reconfigurations"] if r["applied"]]
        out[f"{transport}-{store}"] = res_t
    out["probes"] = probes
    return out


def _plot_migration(path: Path, m: dict[str, Any], quick: bool = False) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    for name, by_keys in m.items():
        if name == "probes":
            continue
        for k, steps in by_keys.items():
            labels = [f"{s['from']}->{s['to']}" for s in steps]
            ax.plot(labels, [s["duration_ms"] for s in steps], "o-", label=f"{name} {k} keys")
    ax.set_xlabel("migration (channels)")
    ax.set_ylabel("time (ms)")
    ax.set_yscale("log")
    ax.set_title("SN migration time")
    ax.legend(fontsize=7)
    save_figure(_pyplot(), fig, path, quick)


# -- plumbing --------------------------------------------------------------------------------
def _write(name: str, params: dict[str, Any], metrics: dict[str, Any],
           draw: Callable[[dict[str, Any], Path, bool], None], out_dir: str | None,
           quick: bool) -> Path:
    from .common import results_dir

    png = results_dir(out_dir) / f"{name}.png"
    draw(metrics, png, quick)
    return write_result(name, {"quick": quick, **params}, metrics, out_dir, plot=png.name)


def run_q1(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(rows=3_000, parallelisms=(1, 2), distances=(3,), repeats=1) if quick
              else dict(rows=8_000, parallelisms=(1, 2, 4), distances=(3, 10, None),
                        repeats=3))
    return _write("sn-q1", params, q1(**params), PLOTS["sn-q1"], out_dir, quick)


def run_speedup(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(rows=1_000, cost=5_000, channels=(1, 2), repeats=1) if quick
              else dict(rows=5_000, cost=5_000, channels=(1, 2, 3, 4), repeats=3))
    return _write("sn-speedup", params, speedup(**params), PLOTS["sn-speedup"], out_dir, quick)


def run_settle(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(costs=(200, 4_000), seconds=4.0, period=0.4, repeats=2, fixed=(1, 2),
                   fixed_seconds=2.0) if quick
              else dict(costs=(0, 300, 1_000, 3_000, 10_000), seconds=10.0, period=1.0,
                        repeats=3, fixed=(1, 2, 4), fixed_seconds=3.0))
    return _write("sn-settle", params, settle(**params), PLOTS["sn-settle"], out_dir, quick)


def run_adapt(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(cost=2_000, phase=2.0, period=0.4, repeats=2, capacity_seconds=2.0)
              if quick else dict(cost=2_000, phase=8.0, period=1.0, repeats=3,
                                 capacity_seconds=4.0))
    return _write("sn-adapt", params, adapt(**params), PLOTS["sn-adapt"], out_dir, quick)


def run_thresholds(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(cost=2_000, phase=1.6, period=0.4, repeats=2, capacity_seconds=2.0)
              if quick else dict(cost=2_000, phase=8.0, period=1.0, repeats=3,
                                 capacity_seconds=4.0))
    return _write("sn-thresholds", params, thresholds(**params),
                  PLOTS["sn-thresholds"], out_dir, quick)


def run_migration(quick: bool, out_dir: str | None = None) -> Path:
    params = (dict(keys=(1_000, 10_000), channels=(1, 2, 3)) if quick
              else dict(keys=(1_000, 10_000, 50_000), channels=(1, 2, 3, 4)))
    return _write("sn-migration", params, migration(**params), PLOTS["sn-migration"], out_dir,
                  quick)


#: each result's figure, ``draw(metrics, png, quick)``: also re-draws a committed result
#: (``bench.plots.replot``)
PLOTS: dict[str, Callable[[dict[str, Any], Path, bool], None]] = {
    "sn-q1": lambda m, p, q: _plot_q1(p, m, q),
    "sn-speedup": lambda m, p, q: _plot_speedup(p, m, q),
    "sn-settle": lambda m, p, q: _plot_settle(p, m, q),
    "sn-adapt": lambda m, p, q: _plot_runs(p, m, "load", q),
    "sn-thresholds": lambda m, p, q: _plot_runs(p, m, "threshold", q),
    "sn-migration": lambda m, p, q: _plot_migration(p, m, q),
}

#: merged by the lead into ``stretchflow_bench.BENCHMARKS``
BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    "sn-q1": ("throughput of wordcount and paircount (d = 3, 10, unbounded), VSN vs SN at "
              "P = 1, 2, 4, with SN's duplication factor", "STRETCH journal Q1 (§8.2)", run_q1),
    "sn-speedup": ("speed-up vs channels of a CPU-bound partitioned operator (1000 keys), "
                   "process and thread channels", "elastic-scaling App. B.1, Fig. 11",
                   run_speedup),
    "sn-settle": ("channels the level controller settles on vs per-tuple cost",
                  "elastic-scaling App. B.1 (elastic)", run_settle),
    "sn-adapt": ("channels over time under sine and step loads, level controller",
                 "elastic-scaling App. B.2, Figs. 13-16", run_adapt),
    "sn-thresholds": ("step load with congestion thresholds 0, 0.2, 0.9",
                      "elastic-scaling App. B.3, Fig. 17", run_thresholds),
    "sn-migration": ("migration time and bytes vs keys and channels",
                     "elastic-scaling App. B.4, Fig. 18", run_migration),
}

__all__ = ["BENCHMARKS", "PLOTS", "adapt", "burn", "migration", "q1", "settle", "speedup",
           "thresholds"]
