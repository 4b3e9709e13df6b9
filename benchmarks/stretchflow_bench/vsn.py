"""``stretchflow bench vsn``: the VSN executor's benchmarks (STRETCH journal §8, scaled to a
2-core machine running CPython).

* ``reconfiguration`` (Q4): wordcount at 70 % stepping to 120 % of one instance's capacity
  (calibrated in the run) and at full speed; the parallelism steps 1→2→4→8→4→2→1→8→1,
  several times; each reconfiguration's time from the reconfigure call to the end of the
  barrier action, with the spread bound and without it.
* ``reconfiguration_rows`` (Q4 with batches of rows in flight, issue #32): a user's lambda
  flow over NEXMark bids from a JSON Lines file (read as batches of rows), at full speed, the
  parallelism stepping as in ``reconfiguration``; each reconfiguration's time per operator,
  the output against the reference engine's, the run's time against the same flow without
  reconfigurations.
* ``forward`` (Q2): Op. 15 over two inputs; throughput at full speed and latency at a paced
  rate, for Π = 1, 2, 4, 8, in rounds with every Π once per round.
* ``wordcount``: VSN at Π = 1 against the reference executor on the same input, alternating.
* ``scalejoin`` (Q3): comparisons per second against Π, with a hand-written single-thread
  band join (1T) on the same input in the same invocation.

Every timed run keeps its probe (bench.common.repeat_probe: load average before and after,
other processes' CPU time), from which the JSON's ``quiet`` is measured.
"""

from __future__ import annotations

import os
import statistics
import time
from itertools import islice
from pathlib import Path
from typing import Any

import stretchflow as sf
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.queries import build_query

from .common import repeat_probe, summarize
from .timeline import from_result

# Q4's schedule, scaled to this machine: one cycle doubles the parallelism up to 8 and halves
# it back, then jumps 1 -> 8 -> 1 (provisioning and decommissioning seven instances at once).
STEPS = (1, 2, 4, 8, 4, 2, 1, 8, 1)
MAX_P = max(STEPS)
# The offered loads of a run, as fractions of one instance's calibrated capacity: the
# paper's Q4 step (70 % -> 120 %) and, in a separate run, the source at full speed.
STEP_LOADS = (0.7, 1.2)


def _pct(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    n = len(v)
    if not n:
        return {"n": 0}
    return {"p50": v[n // 2], "p99": v[min(n - 1, int(n * 0.99))], "max": v[-1], "n": n}


class _SteppedRate(sf.io.IterableSource):
    """The records of a pre-built table, repeated with shifted timestamps as often as needed,
    replayed at a piecewise-constant rate: ``phases`` is ``[(tuples, rate or None), ...]``
    (None: full speed). Tuple n of a phase is due n / rate seconds after the phase's own
    due start, so under overload the source pushes as fast as the engine admits it (the
    offered load does not drop). Records the 1-minute load average as each phase starts
    and once the input ends (``loadavg``)."""

    live = True  # pushed at once by the pump, like any paced source

    def __init__(self, table: Any, phases: list[tuple[int, float | None]]):
        span = table["ts"][-1].as_py() - table["ts"][0].as_py() + 1

        def rows() -> Any:
            shift = 0
            while True:
                for batch in table.to_batches(max_chunksize=4096):
                    for rec in batch.to_pylist():
                        rec["ts"] += shift
                        yield rec
                shift += span

        super().__init__(rows, name="tweets")
        self.phases = phases
        self.loadavg: list[float] = []

    def items(self) -> Any:
        clock, sleep = time.perf_counter, time.sleep
        it = super().items()
        t0 = clock()
        for count, rate in self.phases:
            self.loadavg.append(os.getloadavg()[0])
            t0 = max(t0, clock()) if rate is None else t0
            for n, item in enumerate(islice(it, count)):
                if rate is not None:
                    ahead = n / rate - (clock() - t0)
                    if ahead > 0:
                        sleep(ahead)
                yield item
            t0 = t0 + count / rate if rate is not None else clock()
        self.loadavg.append(os.getloadavg()[0])


def _run_vsn(flow: sf.Flow, **kw: Any) -> Any:
    return flow.run(engine="vsn", **kw)


def calibrate(table: Any, rows: int, repeats: int = 3) -> dict[str, Any]:
    """One instance's capacity: wordcount tuples/s at Π = 1 (the key groups of an
    8-instance run), input pre-built, from the threads' start to the end of the input
    (no process start, no data generation); min/median/max of ``repeats`` runs."""
    rates, probes = [], []
    for _ in range(repeats):
        flow = sf.Flow("calibrate")
        build_query("wordcount", [flow.source(_SteppedRate(table, [(rows, None)]))]
                    ).sink(sf.io.callback(_drop))
        with repeat_probe() as probe:
            res = _run_vsn(flow, parallelism=1, max_parallelism=MAX_P)
        rates.append(rows / res.elapsed)
        probes.append(probe)
    return {"tuples": rows, "tuples_per_s": summarize(rates), "probes": probes}


def _phase_run(table: Any, phases: list[tuple[int, float | None]], gap: int,
               steps: list[int], **vsn_kw: Any) -> tuple[list[dict], Any, dict[str, Any]]:
    schedule = [(gap * (k + 1), p) for k, p in enumerate(steps)]
    flow = sf.Flow("reconfiguration")
    src = _SteppedRate(table, phases)
    # outputs are counted, not kept: live output tuples would make every full collection of
    # the run traverse them, a cost of the harness that lands in whichever reconfiguration
    # it overlaps (docs/vsn.md)
    build_query("wordcount", [flow.source(src)]).sink(sf.io.callback(_drop))
    with repeat_probe() as probe:
        res = _run_vsn(flow, parallelism=1, max_parallelism=MAX_P, reconfigure=schedule,
                       **vsn_kw)
    probe["loadavg_at_phases"] = src.loadavg
    return res.extra["reconfigurations"], res, probe


def reconfiguration(cycles: int = 4, interval: float = 0.1, seed: int = 1,
                    calib_rows: int = 30_000, calib_repeats: int = 3,
                    spreads: tuple[int | None, ...] = (None, 0, 32),
                    hold_baseline: bool = True,
                    switch_baseline: bool = True) -> dict[str, Any]:
    """STRETCH Q4 under load. One instance's capacity C is calibrated in the run; then, for
    each ``max_spread`` of ``spreads`` (None: the engine's default; 0: unbounded, the
    baseline; 32: a tighter bound, to weigh its latency against its full-speed throughput)
    and, with ``hold_baseline``, for the default without the control hold
    (the vsn option ``control_hold``: sources wait from a control tuple to its switch),
    and, with ``switch_baseline``, for the default with the switch-interval hold flipped
    (the vsn option ``hold_switch``, off by default: the GIL switch interval lowered from a
    request to its switch, ``runtime/switch_hold.py``), wordcount with a reconfiguration every
    ``interval`` × C input tuples
    (``STEPS``, ``cycles`` times per load): one run whose source offers 70 % of C and
    then steps to 120 % of C, and one at full speed. Each reconfiguration's time runs
    from the reconfigure call to the end of the barrier action: p50/p99/max per load, with
    each run's probe (the load average before and after, other processes' CPU time) and the
    load average as each phase starts and ends (``loadavg_at_phases``), and each run's
    ``timeline`` (instances at each change, latency p50/p99 per 0.25 s: the figure's
    over-time panels); ``phases_ms`` splits the durations (Reconfiguration.phases_ms)."""
    from stretchflow.engines import ENGINES
    from stretchflow.executors.vsn import MAX_SPREAD
    from stretchflow.runtime.switch_hold import SWITCH_HOLD

    table = tweets(calib_rows, seed=seed)
    cal = calibrate(table, calib_rows, calib_repeats)
    cap = cal["tuples_per_s"]["median"]
    gap = max(1, round(interval * cap))
    steps = list(STEPS[1:]) * cycles
    per_load = gap * len(steps)
    out: dict[str, Any] = {}
    # the engine's defaults, from its spec (docs/api.md's options table)
    defaults = {o.name: o.value for o in ENGINES["vsn"].options}
    hold, switch = defaults["control_hold"], defaults["hold_switch"]
    # (max_spread, control hold on, switch-interval hold on)
    variants = [(spread, True, switch) for spread in spreads]
    if hold_baseline:
        variants.append((None, False, switch))
    if switch_baseline:
        variants.append((None, True, not switch))
    for spread, held, switched in variants:
        vsn_kw: dict[str, Any] = {} if spread is None else {"max_spread": spread}
        vsn_kw.update(control_hold=hold if held else 0, hold_switch=switched)
        name = f"max_spread={MAX_SPREAD if spread is None else spread}" + (
            ", no control hold" if not held
            else f", {'' if switched else 'no '}switch-interval hold" if switched != switch
            else " (default)" if spread is None else " (unbounded)" if spread == 0 else "")
        out[name] = _variant(table, cap, gap, steps, per_load, vsn_kw)
    return {"query": "wordcount", "steps": list(STEPS), "gap_tuples": gap,
            "capacity": cal, "control_hold_s": hold,
            "switch_interval_hold_s": SWITCH_HOLD.interval, "switch_hold_default": switch,
            "variants": out}


def _variant(table: Any, cap: float, gap: int, steps: list[int], per_load: int,
             vsn_kw: dict[str, Any]) -> dict[str, Any]:
    """One variant of :func:`reconfiguration`: the stepped run and the full-speed run."""
    loads: dict[str, Any] = {}
    # the step: the first len(steps) reconfigurations at 70 %, the next ones at 120 %
    phases: list[tuple[int, float | None]] = [(per_load, f * cap) for f in STEP_LOADS]
    phases[-1] = (per_load + gap, phases[-1][1])  # the last step falls before the end
    recs, res, probe = _phase_run(table, phases, gap, steps * len(STEP_LOADS), **vsn_kw)
    for k, f in enumerate(STEP_LOADS):
        part = recs[k * len(steps):(k + 1) * len(steps)]
        loads[f"{round(f * 100)}%"] = _load_summary(
            part, f * cap, probe["loadavg_at_phases"][k:k + 2])
    loads["step_run"] = {"latency_ms": res.extra["latency_ms"], "probe": probe,
                         "timeline": from_result(res.extra, res.elapsed)}
    recs, res, probe = _phase_run(table, [(per_load + gap, None)], gap, steps, **vsn_kw)
    loads["full"] = _load_summary(recs, None, probe["loadavg_at_phases"])
    loads["full"]["tuples_per_s"] = (per_load + gap) / res.elapsed
    loads["full_run"] = {"latency_ms": res.extra["latency_ms"], "probe": probe,
                         "timeline": from_result(res.extra, res.elapsed)}
    return loads


def _load_summary(recs: list[dict], rate: float | None, lavg: list[float]) -> dict[str, Any]:
    done = [r for r in recs if r["applied"]]
    by_step: dict[str, list[float]] = {}
    for r in done:
        by_step.setdefault(f"{r['parallelism_before']}->{r['parallelism_after']}",
                           []).append(r["duration_ms"])
    phases = [r["phases_ms"] for r in done if r.get("phases_ms")]
    spreads = [r["spread_at_send"] for r in done if r.get("spread_at_send") is not None]
    return {"rate_tuples_per_s": rate, "requested": len(recs), "applied": len(done),
            "duration_ms": _pct([r["duration_ms"] for r in done]),
            "phases_ms": {k: _pct([ph[k] for ph in phases])
                          for k in ("send", "first", "reach", "switch")} if phases else {},
            "spread_at_send": _pct(spreads),
            "by_transition_ms": {k: _pct(v) for k, v in by_step.items()},
            "loadavg_at_phase_start_end": lavg}


def reconfiguration_rows(events: int = 1_000_000, gap: int = 8_000, repeats: int = 3,
                         flows: tuple[str, ...] = ("mean_price", "hot_items"), seed: int = 1
                         ) -> dict[str, Any]:
    """:func:`reconfiguration_rows_of` for each of ``flows`` (mean price: one tumbling O+;
    hot items: a sliding O+ whose every window emits thousands of rows into a second O+)."""
    return {"flows": {f: reconfiguration_rows_of(events, gap, repeats, f, seed) for f in flows}}


def reconfiguration_rows_of(events: int, gap: int, repeats: int, flow: str,
                            seed: int) -> dict[str, Any]:
    """STRETCH Q4 with batches of rows in flight (issue #32): ``flow`` of
    :mod:`.userflow_lambdas` (lambdas: the instances take whole batches of rows, f_MK once
    per batch for all of them) over ``events`` NEXMark bids in a JSON Lines file, read at
    full speed, every O+ of it stepping through :data:`STEPS` over and over, a
    reconfiguration every ``gap`` source tuples (so each one meets batches in ESG_in and in
    the instances). ``repeats`` rounds, each running, in alternating order, that run and
    the same flow at parallelism 1 without reconfigurations (what the reconfigurations cost
    the run). Per run: each reconfiguration's time from the reconfigure call to the end of
    the barrier action, per operator and over all, with its phases; and the output, against
    the reference engine's (a digest of the rows: the per-timestamp multiset)."""
    import tempfile

    from . import nexmark
    from .userflow_lambdas import build_flow
    from .userflows import digest

    data = nexmark.dataset("bids", events, "jsonl", seed)
    cycle = list(STEPS[1:])
    steps = cycle * max(1, events // gap // len(cycle) - 1)  # every step before the end
    schedule = [(gap * (k + 1), p) for k, p in enumerate(steps)]
    runs: dict[str, list[dict[str, Any]]] = {"stepping": [], "fixed": []}
    with tempfile.TemporaryDirectory(prefix="reconf-rows-") as tmp:
        def go(kind: str) -> tuple[Any, Path]:
            out = Path(tmp) / f"{kind}.jsonl"
            f = build_flow({"flow": flow, "input": str(data), "output": str(out)})
            kw: dict[str, Any] = {"engine": "reference"} if kind == "reference" else {
                "engine": "vsn", "parallelism": 1, "max_parallelism": MAX_P}
            if kind == "stepping":
                kw["reconfigure"] = schedule
            with repeat_probe() as probe:
                res = f.run(**kw)
            return {"elapsed_s": res.elapsed, "probe": probe, "extra": res.extra}, out

        _, ref_out = go("reference")
        expected = digest(ref_out)
        for r in range(repeats):
            for kind in (("stepping", "fixed") if r % 2 == 0 else ("fixed", "stepping")):
                got, out = go(kind)
                got["output_identical"] = digest(out) == expected
                runs[kind].append(got)
    per_run = []
    for got in runs["stepping"]:
        recs = got["extra"]["reconfigurations"]
        by_op: dict[str, list[dict]] = {}
        for rec in recs:
            by_op.setdefault(rec["operator"], []).append(rec)
        per_run.append({
            "elapsed_s": got["elapsed_s"], "probe": got["probe"],
            "output_identical": got["output_identical"], "paths": got["extra"].get("paths"),
            "all": _load_summary(recs, None, [got["probe"]["load_before"]]),
            # each reconfiguration's time, in the order applied, per operator (the figure)
            "durations_ms": {op: [rec["duration_ms"] for rec in rs if rec["applied"]]
                             for op, rs in by_op.items()},
            "operators": {op: _load_summary(rs, None, []) for op, rs in by_op.items()},
            "slowest": sorted(({k: rec.get(k) for k in ("operator", "parallelism_before",
                                                        "parallelism_after", "duration_ms",
                                                        "phases_ms", "spread_at_send")}
                               for rec in recs if rec["applied"]),
                              key=lambda rec: -rec["duration_ms"])[:5]})
    fixed = [{"elapsed_s": g["elapsed_s"], "probe": g["probe"],
              "output_identical": g["output_identical"]} for g in runs["fixed"]]
    return {"flow": flow, "events": events, "input": data.name, "gap_tuples": gap,
            "steps": list(STEPS), "reconfigurations_per_run": len(schedule),
            "repeats": repeats, "stepping": per_run, "fixed": fixed,
            "stepping_elapsed_s": summarize([r["elapsed_s"] for r in per_run]),
            "fixed_elapsed_s": summarize([r["elapsed_s"] for r in fixed]),
            "p99_ms": summarize([r["all"]["duration_ms"]["p99"] for r in per_run]),
            "p50_ms": summarize([r["all"]["duration_ms"]["p50"] for r in per_run]),
            "max_ms": summarize([r["all"]["duration_ms"]["max"] for r in per_run])}


def _drop(ts: int, payload: Any) -> None:
    """A sink function that keeps nothing."""


def forward(rows: int = 40_000, paced_rate: float = 2000.0,
            parallelisms: tuple[int, ...] = (1, 2, 4, 8), repeats: int = 3,
            seed: int = 1) -> dict[str, Any]:
    """Per Π: throughput at full speed and latency with live sources, ``repeats`` rounds with
    every Π once per round. ``throughput_tuples_per_s`` is the median over rounds (its
    min/median/max in ``throughput_summary``); ``latency_ms_at_full_speed`` and
    ``latency_ms_paced`` are those of the round with the median p99 of its kind; every round's
    numbers and probes are in ``repeats``."""
    if repeats < 1:
        raise ValueError(f"vsn-forward: repeats must be >= 1, got {repeats}")
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=5000))
    # live sources: each replayed in event time at half the paced rate, 5 s long
    pl, pr = (t.to_pylist() for t in bandjoin(int(paced_rate * 2.5), seed=seed,
                                               rate=paced_rate / 2))
    rounds: dict[int, list[dict[str, Any]]] = {p: [] for p in parallelisms}
    for _ in range(repeats):
        for p in parallelisms:
            flow = sf.Flow("forward")
            streams = [flow.source(sf.io.iterable(left, name="left")),
                       flow.source(sf.io.iterable(right, name="right"))]
            build_query("forward", streams).collect()
            with repeat_probe() as full_probe:
                res = flow.run(engine="vsn", parallelism=p)
            flow = sf.Flow("forward-paced")
            streams = [flow.source(sf.io.iterable(pl, name="left").replay()),
                       flow.source(sf.io.iterable(pr, name="right").replay())]
            build_query("forward", streams).collect()
            with repeat_probe() as paced_probe:
                paced = flow.run(engine="vsn", parallelism=p)
            rounds[p].append({"throughput_tuples_per_s": res.throughput,
                              "latency_ms_at_full_speed": res.extra["latency_ms"],
                              "latency_ms_paced": paced.extra["latency_ms"],
                              "probe_full_speed": full_probe, "probe_paced": paced_probe})
    out: dict[str, Any] = {}
    for p, runs in rounds.items():
        tput = [r["throughput_tuples_per_s"] for r in runs]
        out[str(p)] = {"throughput_tuples_per_s": statistics.median(tput),
                       "throughput_summary": summarize(tput),
                       "latency_ms_at_full_speed": _median_by_p99(
                           [r["latency_ms_at_full_speed"] for r in runs]),
                       "paced_rate": paced_rate,
                       "latency_ms_paced": _median_by_p99([r["latency_ms_paced"] for r in runs]),
                       "repeats": runs}
    return out


def _median_by_p99(lats: list[dict[str, Any]]) -> dict[str, Any]:
    """The latency summary whose p99 is the median of the rounds' (the lower middle one for
    an even count): one round's own p50/p99/max, not a mix of rounds."""
    return sorted(lats, key=lambda d: d["p99"])[(len(lats) - 1) // 2]


def wordcount_vs_reference(rows: int = 100_000, repeats: int = 3,
                           seed: int = 1) -> dict[str, Any]:
    from stretchflow.io.generators import write_table

    path = Path("benchmarks/results/.wordcount-input.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(tweets(rows, seed=seed), path)
    runs: dict[str, list[float]] = {"reference": [], "vsn1": []}
    probes: dict[str, list[dict[str, Any]]] = {"reference": [], "vsn1": []}
    try:
        for _ in range(repeats):
            for engine, opts in (("reference", {}), ("vsn1", {"parallelism": 1})):
                flow = sf.Flow("wordcount")
                build_query("wordcount", [flow.source(sf.io.jsonl(path))]).collect()
                with repeat_probe() as probe:
                    res = flow.run(engine="vsn" if engine == "vsn1" else engine, **opts)
                runs[engine].append(res.throughput)
                probes[engine].append(probe)
    finally:
        path.unlink(missing_ok=True)
    ratios = [v / r for v, r in zip(runs["vsn1"], runs["reference"], strict=True)]
    return {"rows": rows, "tuples_per_s": {k: summarize(v) for k, v in runs.items()},
            "ratio_vsn1_over_reference": summarize(ratios), "probes": probes}


def scalejoin_1t(left: list[dict], right: list[dict], window: int, band: int) -> int:
    """A hand-written single-thread band join (1T): merge the inputs by ts; for each tuple,
    purge the opposite window and compare against all of it in one numpy call; store the
    tuple. No engine, no keys. Returns the number of matches."""
    from stretchflow.queries.scalejoin import Columns

    wl, wr = Columns(), Columns()
    i = j = matches = 0
    while i < len(left) or j < len(right):
        if j >= len(right) or (i < len(left) and left[i]["ts"] <= right[j]["ts"]):
            t = left[i]
            i += 1
            wr.purge(t["ts"] - window)
            matches += len(wr.band_match(t["x"], t["y"], band))
            wl.append(t["ts"], t["x"], t["y"], t["id"])
        else:
            t = right[j]
            j += 1
            wl.purge(t["ts"] - window)
            matches += len(wl.band_match(t["a"], t["b"], band))
            wr.append(t["ts"], t["a"], t["b"], t["id"])
    return matches


def scalejoin_1t_runs(left: list[dict], right: list[dict], window: int, band: int,
                      run: int = 256) -> int:
    """1T over runs: the same hand-written loop, but ``run`` merged tuples at a time through
    the vectorized kernel the VSN instances use (queries.scalejoin.join_run), one key, no
    engine. Returns the number of matches."""
    import heapq

    import numpy as np

    from stretchflow.queries.scalejoin import Columns, join_run, run_columns

    merged = heapq.merge(((t["ts"], 0, t) for t in left), ((t["ts"], 1, t) for t in right),
                         key=lambda e: (e[0], e[1]))
    stores = (Columns(), Columns())
    matches = 0
    items = list(merged)
    for a in range(0, len(items), run):
        part = items[a:a + run]
        cols = run_columns([e[0] for e in part], [e[2] for e in part], [e[1] for e in part])
        keep = np.ones(len(part), dtype=bool)
        matches += len(join_run(stores, cols, keep, band, window))
    return matches


def _comparisons(left: list[dict], right: list[dict], window: int) -> int:
    """Σ over tuples of the opposite window's size when they arrive (same for every engine)."""
    import bisect

    lt = [t["ts"] for t in left]
    rt = [t["ts"] for t in right]
    total = 0
    for ts in lt:
        total += bisect.bisect_right(rt, ts) - bisect.bisect_left(rt, ts - window)
    for ts in rt:
        total += bisect.bisect_left(lt, ts) - bisect.bisect_left(lt, ts - window)
    return total


def kernel_threads(seconds: float = 1.0) -> dict[str, float]:
    """The machine's ceiling for GIL-free work: the band kernel alone (no engine) in 1 and
    2 threads, comparisons/s. On a VM the two vCPUs may not give 2x."""
    import threading

    import numpy as np

    from stretchflow.queries.band_kernel import band_pairs

    rng = np.random.default_rng(1)
    u, v = rng.uniform(1, 10_000, 20_000), rng.uniform(1, 10_000, 20_000)
    qu, qv = rng.uniform(1, 10_000, 256), rng.uniform(1, 10_000, 256)
    lo, hi = np.zeros(256, dtype=np.int64), np.full(256, 20_000, dtype=np.int64)
    band_pairs(u, v, lo, hi, qu, qv, 10.0)  # compiled before timing
    out = {}
    for n in (1, 2):
        done = [0] * n

        def work(k: int, stop: float, done: list[int]) -> None:
            while time.perf_counter() < stop:
                band_pairs(u, v, lo, hi, qu, qv, 10.0)
                done[k] += 1

        stop = time.perf_counter() + seconds
        ts = [threading.Thread(target=work, args=(k, stop, done)) for k in range(n)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[f"threads{n}"] = sum(done) * 256 * 20_000 / (time.perf_counter() - t0)
    out["ratio_2_over_1"] = out["threads2"] / out["threads1"]
    return out


def scalejoin(rows: int = 60_000, window: int = 600_000, rate: float = 100.0, band: int = 10,
              keys: int = 2, parallelisms: tuple[int, ...] = (1, 2), repeats: int = 5,
              seed: int = 1) -> dict[str, Any]:
    """Comparisons/s of VSN ScaleJoin at each Π and of the two 1T joins, ``repeats`` rounds
    with every variant once per round; speed-ups are taken within a round."""
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=rate))
    comps = _comparisons(left, right, window)
    rates: dict[str, list[float]] = {}
    probes: dict[str, list[dict[str, Any]]] = {}
    speedups: dict[str, list[float]] = {}
    matches = None
    for _ in range(repeats):
        with repeat_probe() as probe:
            t0 = time.perf_counter()
            found = scalejoin_1t(left, right, window, band)
            rates.setdefault("1T", []).append(comps / (time.perf_counter() - t0))
        probes.setdefault("1T", []).append(probe)
        with repeat_probe() as probe:
            t0 = time.perf_counter()
            found_runs = scalejoin_1t_runs(left, right, window, band)
            rates.setdefault("1T-runs", []).append(comps / (time.perf_counter() - t0))
        probes.setdefault("1T-runs", []).append(probe)
        if found_runs != found:
            raise RuntimeError("the run-at-a-time 1T join disagrees with the tuple-at-a-time one")
        matches = found
        for p in parallelisms:
            flow = sf.Flow("scalejoin")
            streams = [flow.source(sf.io.iterable(left, name="left")),
                       flow.source(sf.io.iterable(right, name="right"))]
            col = build_query("scalejoin", streams, window=window, band=band,
                              keys=keys).collect()
            with repeat_probe() as probe:
                res = flow.run(engine="vsn", parallelism=p, max_parallelism=max(parallelisms))
            probes.setdefault(f"vsn{p}", []).append(probe)
            if len(col.items) != matches:
                raise RuntimeError(f"scalejoin at Π={p} found {len(col.items)} matches, "
                                   f"1T {matches}")
            rates.setdefault(f"vsn{p}", []).append(comps / res.elapsed)
        for p in parallelisms:
            speedups.setdefault(f"vsn{p}", []).append(rates[f"vsn{p}"][-1] / rates["vsn1"][-1])
    out: dict[str, Any] = {"rows_per_stream": rows, "window_ms": window, "keys": keys,
                           "comparisons": comps, "matches": matches, "repeats": repeats}
    for name, vals in rates.items():
        out[name] = {"comparisons_per_s": summarize(vals), "probes": probes[name]}
    out["speedup_vs_vsn1"] = {k: summarize(v) for k, v in speedups.items()}
    out["vsn1_over_1T_runs"] = (out["vsn1"]["comparisons_per_s"]["median"]
                                / out["1T-runs"]["comparisons_per_s"]["median"])
    with repeat_probe() as probe:
        kernel = kernel_threads()
    out["kernel_alone"] = {**kernel, "probe": probe}
    return out


__all__ = ["forward", "reconfiguration", "reconfiguration_rows", "reconfiguration_rows_of",
           "scalejoin", "scalejoin_1t", "scalejoin_1t_runs", "wordcount_vs_reference"]
