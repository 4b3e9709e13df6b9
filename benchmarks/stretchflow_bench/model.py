"""``stretchflow bench stretchflow-model``: the DEBS'19 performance model of VSN and SN
(STRETCH conference paper §8, Table 1, Fig. 3), validated against measurements as the paper
does in §9.1 (Fig. 4a), scaled to a 2-core machine running CPython.

The model (§8): three thread sets T_I (ingress), T_P (the parallel O+) and T_O (egress) with
per-tuple costs d^I, d^P, d^O. With n threads in T_P, shared-nothing (PSN, here the ``sn``
engine) adds routing d^R_n at T_I and a deterministic merge d^M_n at T_O; VSN (the ``vsn``
engine) adds ESG synchronization and contention d^C_n at T_I and its own merge d^M_n. A
pipeline runs at the rate of its slowest stage::

    PSN: 1 / max(d^I + d^R_n, d^P_n, d^O + d^M_n)      VSN: 1 / max(d^I + d^C_n, d^P_n, d^O + d^M_n)

(the paper's two unnumbered expressions of §8; it numbers no equation). Table 1's sample
costs for Fig. 3 are d^R_n = 0.1·d^I·n, d^C_n = 0.01·d^I·n, d^M_n(PSN) = 0.1·d^I·n·log n and
d^M_n(VSN) = 0.01·d^I·n·log n (:func:`table1`). The paper does not say which logarithm; we
use log2 (``LOG``) and say so.

The query follows §9.1: a synthetic operator with a tunable per-tuple cost. Records
``{ts, k}``, one per ms, 1000 keys round robin; a tumbling 10 s aggregate per key whose
``update`` computes SHA-256 over a ``work_kib`` KiB buffer (:func:`work`). CPython's hashlib
releases the GIL while it hashes more than 2 KiB, so T_P's threads can run the cost in
parallel as the paper's Java threads do; everything else (sources, ESG, splitter, merger,
the operator's bookkeeping) holds the GIL. SN runs with thread channels: the paper's PSN is
Flink, whose parallel instances are threads of one JVM.

What is measured, each as CPU time per input tuple, from whole engine runs (nothing inside an
engine is changed): while a run is timed, ``threading.Thread.run`` is wrapped so that every
thread reads its own CPU time (``time.thread_time``) as it ends (:class:`ThreadCPU`); stages
are known by their thread names (vsn: ``source …`` = T_I, ``work[j]`` = T_P, ``sink …`` =
T_O; sn: ``sn-splitter-…`` = T_I, ``sn-channel-…`` = T_P, ``sn-merger-…`` = T_O).

* d^I, d^P, d^O (``inputs``): each engine at Π = 1 with the work on, median over
  ``calib_repeats`` runs. vsn: d^I = the source thread (the source and ESG_in's add with one
  reader, so it holds d^C_1), d^P = the instance thread (reading ESG_in, the O+, the work),
  d^O = the sink thread (ESG_out's get, the sink). sn: d^I = the splitter (the source, read
  inline, and routing to one channel: d^R_1), d^P = the channel, d^O = the merger (and the
  sink it calls).
* the overheads' growth with n (``overheads``): each engine with the work off (zero cost) at
  n = 1, 2, 4 threads in T_P; Δ(n) = stage CPU at n − at 1: VSN's d^C_n − d^C_1 (source
  thread) and d^M_n (sink thread; d^M_1 = 0 as log 1 = 0), SN's d^R_n − d^R_1 (splitter) and
  d^M_n (merger). Beyond n = 4 the paper's forms are fitted to them (least squares through
  the origin: Δ_C = c·(n − 1), Δ_M = m·n·log2 n) and the fitted ratio c / d^I, m / d^I is
  reported beside Table 1's 0.01 and 0.1.
* VSN's skip cost d^skip: every instance reads every tuple of ESG_in and skips those of
  other instances' keys (the paper's "extra costs incurred by T_P's threads to choose which
  tuples to process", §8). From the zero-cost runs: an instance at n = 2 reads N tuples and
  processes N/2, so d^skip = 2·CPU_j/N − CPU_1/N. Then d^P_n(VSN) = (d^P + (n−1)·d^skip)/n;
  d^P_n(SN) = d^P / n (a channel gets only its own tuples).
* ``work_alone``: the work function alone, one thread, CPU per call (its GIL-free share).

Two predictions per engine and Π (1, 2 compared with measurements; 4, 8, 16 predictions only):
``paper``: the formulas above with the measured costs, each stage on its own core. ``machine``:
the same, but also no faster than this interpreter allows: the GIL serializes every thread's
GIL-held CPU (total CPU per tuple minus the work, which runs without it) and two cores bound
the total CPU per tuple by half. Measured: both engines at Π = 1, 2, whole runs, input at full
speed, ``repeats`` rounds with the four variants alternating (their order reversed every other
round), each probed (load average before/after, other processes' CPU); throughput = input
tuples / elapsed. Reported: predicted vs the median measured, relative error
(predicted − measured) / measured, and each run's stage CPU (what the model's inputs were in
that run). A shared machine rarely gives a run both cores, so a third prediction,
``loaded``, puts the same calibrated costs on the CPUs each run actually had: the machine's
minus other processes' CPU time over the run's wall time (:func:`available_cores`,
:func:`loaded_rate`); it is the only one of the three that uses anything measured during the
run it predicts, and only about other processes.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stretchflow as sf

from .common import repeat_probe, results_dir, summarize, write_result

NAME = "stretchflow-model"
KEYS = 1000
WINDOW_MS = 10_000
LOG: Callable[[float], float] = math.log2  # the paper writes log(n) without a base
#: Π compared with measurements on this 2-core machine, and Π predicted only
MEASURED_P = (1, 2)
PREDICTED_P = (1, 2, 4, 8, 16)
CALIB_P = (1, 2, 4)

#: what the paper reports about its own model's accuracy: no number, a visual comparison
PAPER_ACCURACY = {
    "citation": "Gulisano, Najdataei, Nikolakopoulos, Papadopoulos, Papatriantafilou, Tsigas: "
                "STRETCH: Scalable and Elastic Deterministic Streaming Analysis with Virtual "
                "Shared-Nothing Parallelism, DEBS 2019, §9.1 and Fig. 4a",
    "numeric_error": None,
    "claim": "the throughput figure of PSN matches the corresponding one from the model. The "
             "behaviour of VSN also matches that of the model (despite the larger deviation "
             "between the observed and expected behavior due to the higher overheads in the "
             "system)",
    "setup": "two synthetic queries in Flink; d^I approximately 0.7 ms; 2x18-core Xeon "
             "E5-2695, Java; average of five runs",
    "table1": {"d_R": "0.1 d^I n", "d_C": "0.01 d^I n", "d_M_psn": "0.1 d^I n log n",
               "d_M_vsn": "0.01 d^I n log n"},
    "paper_d_I_ms": 0.7,
}


# -- the paper's formulas (§8, Table 1) -----------------------------------------------------
def table1(d_i: float, n: int) -> dict[str, float]:
    """Table 1's sample costs at n threads in T_P: routing (PSN), ESG contention (VSN) and
    the merges, all in d^I's unit."""
    nlog = n * LOG(n)
    return {"d_R": 0.1 * d_i * n, "d_C": 0.01 * d_i * n,
            "d_M_psn": 0.1 * d_i * nlog, "d_M_vsn": 0.01 * d_i * nlog}


def stage_times(d_i: float, d_x: float, d_p_n: float, d_o: float,
                d_m: float) -> tuple[float, float, float]:
    """Per-tuple time of T_I, T_P, T_O (§8): d^I + d^X_n (X = R for PSN, C for VSN),
    d^P_n, d^O + d^M_n."""
    return d_i + d_x, d_p_n, d_o + d_m


def pipeline_rate(d_i: float, d_x: float, d_p_n: float, d_o: float, d_m: float) -> float:
    """Tuples per time unit of the pipeline: the rate of its slowest stage (§8's
    max(d^I + d^X_n, d^P_n, d^O + d^M_n))."""
    return 1.0 / max(stage_times(d_i, d_x, d_p_n, d_o, d_m))


def figure3(d_i: float, d_p: float, d_o: float,
            ns: tuple[int, ...] = PREDICTED_P) -> dict[str, dict[int, float]]:
    """Fig. 3: the rate of PSN and VSN against n with Table 1's costs and d^P_n = d^P / n
    (Table 1 gives no extra T_P cost, so both engines divide d^P alike)."""
    out: dict[str, dict[int, float]] = {"psn": {}, "vsn": {}}
    for n in ns:
        t = table1(d_i, n)
        out["psn"][n] = pipeline_rate(d_i, t["d_R"], d_p / n, d_o, t["d_M_psn"])
        out["vsn"][n] = pipeline_rate(d_i, t["d_C"], d_p / n, d_o, t["d_M_vsn"])
    return out


def fit_linear(deltas: dict[int, float]) -> float:
    """c of Δ(n) = c·(n − 1), least squares through the origin (Table 1's d^C, d^R are
    linear in n; Δ is their growth over n = 1)."""
    num = sum(d * (n - 1) for n, d in deltas.items())
    den = sum((n - 1) ** 2 for n in deltas)
    return num / den if den else 0.0


def fit_nlogn(deltas: dict[int, float]) -> float:
    """m of Δ(n) = m·n·log2 n, least squares through the origin (Table 1's d^M)."""
    num = sum(d * n * LOG(n) for n, d in deltas.items())
    den = sum((n * LOG(n)) ** 2 for n in deltas)
    return num / den if den else 0.0


def overhead_at(measured: dict[int, float], coef: float, form: Callable[[int], float],
                n: int) -> float:
    """Δ(n): measured where it was, else the fitted form."""
    return measured[n] if n in measured else coef * form(n)


def predict(inputs: dict[str, Any], overheads: dict[str, Any], work_s: float, cores: int,
            ns: tuple[int, ...] = PREDICTED_P) -> dict[str, dict[str, dict[int, Any]]]:
    """Per engine and n: the three stage times, ``paper`` (the §8 rate) and ``machine`` (also
    bounded by the GIL and ``cores``; module docstring). Costs in seconds per tuple."""
    out: dict[str, dict[str, dict[int, Any]]] = {}
    for eng, (x_name, m_name) in (("vsn", ("d_C", "d_M")), ("sn", ("d_R", "d_M"))):
        inp, ov = inputs[eng], overheads[eng]
        lin = {int(n): v for n, v in ov[x_name]["measured"].items()}
        nlg = {int(n): v for n, v in ov[m_name]["measured"].items()}
        res: dict[str, dict[int, Any]] = {"stages": {}, "paper": {}, "machine": {}}
        for n in ns:
            dx = overhead_at(lin, ov[x_name]["coef"], lambda k: k - 1, n)
            dm = overhead_at(nlg, ov[m_name]["coef"], lambda k: k * LOG(k), n)
            if eng == "vsn":  # every instance reads every tuple and skips the others' keys
                dp_n = (inp["d_P"] + (n - 1) * ov["d_skip"]) / n
            else:
                dp_n = inp["d_P"] / n
            t_i, t_p, t_o = stage_times(inp["d_I"], dx, dp_n, inp["d_O"], dm)
            paper = 1.0 / max(t_i, t_p, t_o)
            total = t_i + n * t_p + t_o  # CPU per input tuple of all threads
            held = max(total - work_s, 0.0)  # the work runs without the GIL
            machine = 1.0 / max(t_i, t_p, t_o, held, total / cores)
            res["stages"][n] = {"T_I": t_i, "T_P": t_p, "T_O": t_o, "gil_held": held,
                                "total_cpu": total}
            res["paper"][n] = paper
            res["machine"][n] = machine
        out[eng] = res
    return out


def available_cores(probe: dict[str, Any]) -> float | None:
    """The CPUs a run had to itself: the machine's minus what other processes used during it
    (``repeat_probe``'s ``other_cpu_s`` over its wall time); None where it is not measured.
    At least 0.05: a run that finished did get some CPU."""
    other, wall, cpus = probe.get("other_cpu_s"), probe.get("wall_s"), probe.get("cpus")
    if other is None or not wall or not cpus:
        return None
    return max(cpus - other / wall, 0.05)


def loaded_rate(stage: dict[str, float], avail: float) -> float:
    """The ``machine`` prediction on ``avail`` CPUs instead of all (other processes took the
    rest): one thread gets at most min(1, avail) of a CPU, so each stage and the GIL-held sum
    slow down by that factor, and the total CPU per tuple is spread over ``avail``."""
    serial = max(stage["T_I"], stage["T_P"], stage["T_O"], stage["gil_held"])
    return 1.0 / max(serial / min(1.0, avail), stage["total_cpu"] / avail)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured."""
    if measured <= 0:
        raise ValueError(f"{NAME}: measured throughput must be positive, got {measured}")
    return (predicted - measured) / measured


# -- the query --------------------------------------------------------------------------------
_BUF: dict[int, bytes] = {}


def work(kib: int) -> int:
    """The synthetic per-tuple cost: SHA-256 over ``kib`` KiB (hashlib releases the GIL while
    it hashes more than 2 KiB); 0 KiB: no work."""
    if kib <= 0:
        return 0
    buf = _BUF.get(kib)
    if buf is None:
        buf = _BUF.setdefault(kib, bytes(range(256)) * (4 * kib))
    return hashlib.sha256(buf).digest()[0]


def records(n: int, keys: int = KEYS) -> list[dict[str, int]]:
    """One tuple per ms, keys round robin: every key, so every instance, gets the same load."""
    return [{"ts": t, "k": t % keys} for t in range(n)]


def _drop(ts: int, payload: Any) -> None:
    """A sink that keeps nothing."""


def build(recs: list[dict[str, int]], kib: int) -> sf.Flow:
    """The synthetic query: source ``records`` → tumbling aggregate ``work`` per key → sink."""
    flow = sf.Flow("model")

    def update(acc: int, t: dict[str, int]) -> int:
        return acc + (work(kib) & 1)

    flow.source(sf.io.iterable(recs, name="records")).aggregate(
        size=WINDOW_MS, keys=lambda t: t["k"], init=lambda: 0, update=update,
        output=lambda k, a: {"k": k, "n": a}, name="work").sink(sf.io.callback(_drop))
    return flow


def work_alone(kib: int, calls: int) -> float:
    """CPU seconds per call of :func:`work`, one thread, no engine (CPU, not wall time: it
    is subtracted from CPU times, and other processes do not inflate it)."""
    work(kib)
    t0 = time.thread_time()
    for _ in range(calls):
        work(kib)
    return (time.thread_time() - t0) / calls


# -- per-thread CPU -----------------------------------------------------------------------------
class ThreadCPU:
    """While active, every ``threading.Thread`` that finishes records its own CPU time
    (``time.thread_time``: CLOCK_THREAD_CPUTIME_ID, ns resolution) under its name:
    ``Thread.run`` is wrapped for the duration, and restored on exit. ``cpu`` maps each
    thread name to its CPU seconds (summed over threads that share a name). Only threads
    whose ``run`` ends inside the block count; the engines join theirs before returning."""

    def __init__(self) -> None:
        self._done: list[tuple[str, float]] = []
        self._lock = threading.Lock()
        self._orig: Any = None

    def __enter__(self) -> ThreadCPU:
        orig = self._orig = threading.Thread.run
        done, lock = self._done, self._lock

        def run(thread: threading.Thread) -> None:
            try:
                orig(thread)
            finally:
                cpu = time.thread_time()
                with lock:
                    done.append((thread.name, cpu))

        threading.Thread.run = run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        threading.Thread.run = self._orig  # type: ignore[method-assign]

    @property
    def cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with self._lock:
            for name, cpu in self._done:
                out[name] = out.get(name, 0.0) + cpu
        return out


def stages_of(engine: str, cpu: dict[str, float]) -> dict[str, Any]:
    """Thread CPU seconds grouped by stage (module docstring): T_I, T_P per thread (a list, by
    name), T_O, and the rest."""
    out: dict[str, Any] = {"T_I": 0.0, "T_P": {}, "T_O": 0.0, "other": {}}
    for name, s in sorted(cpu.items()):
        if engine == "vsn":
            stage = ("T_I" if name.startswith("source ") else "T_O" if name.startswith("sink ")
                     else "T_P" if name.startswith("work[") else None)
        else:
            stage = ("T_I" if name.startswith("sn-splitter-") else
                     "T_O" if name.startswith("sn-merger-") else
                     "T_P" if name.startswith("sn-channel-") else None)
        if stage == "T_P":
            out["T_P"][name] = s
        elif stage is not None:
            out[stage] += s
        else:
            out["other"][name] = s
    if not out["T_P"] or not out["T_I"]:
        raise RuntimeError(f"{NAME}: no {engine} source/operator threads among {sorted(cpu)} "
                           f"(thread names changed? see stages_of)")
    return out


def run_once(engine: str, p: int, recs: list[dict[str, int]], kib: int) -> dict[str, Any]:
    """One whole run: throughput (input tuples / elapsed), per-stage CPU per tuple (s), and
    its probe."""
    flow = build(recs, kib)
    kw: dict[str, Any] = {"parallelism": p}
    if engine == "sn":
        kw["channels"] = "threads"
    with repeat_probe() as probe, ThreadCPU() as cpu:
        res = flow.run(engine=engine, **kw)
    n = len(recs)
    st = stages_of(engine, cpu.cpu)
    return {"tuples_per_s": n / res.elapsed, "elapsed_s": res.elapsed,
            "cpu_per_tuple_s": {"T_I": st["T_I"] / n, "T_O": st["T_O"] / n,
                                "T_P": {k: v / n for k, v in st["T_P"].items()},
                                "other": {k: v / n for k, v in st["other"].items()}},
            "probe": probe}


def _med(runs: list[dict[str, Any]], stage: str) -> float:
    return statistics.median(r["cpu_per_tuple_s"][stage] for r in runs)


def _med_tp(runs: list[dict[str, Any]]) -> float:
    """Median over runs of the mean T_P thread's CPU per tuple."""
    return statistics.median(statistics.fmean(r["cpu_per_tuple_s"]["T_P"].values())
                             for r in runs)


# -- the experiment ---------------------------------------------------------------------------
def calibrate(recs: list[dict[str, int]], kib: int, repeats: int
              ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The model's inputs (d^I, d^P, d^O per engine, at Π = 1 with the work) and overheads
    (zero-cost runs at n = 1, 2, 4), seconds per tuple; and every calibration run."""
    log: list[dict[str, Any]] = []
    inputs: dict[str, Any] = {}
    overheads: dict[str, Any] = {}
    for eng in ("vsn", "sn"):
        runs = [run_once(eng, 1, recs, kib) for _ in range(repeats)]
        log += [{"engine": eng, "p": 1, "work_kib": kib, **r} for r in runs]
        inputs[eng] = {"d_I": _med(runs, "T_I"), "d_P": _med_tp(runs), "d_O": _med(runs, "T_O")}
        zero: dict[int, list[dict[str, Any]]] = {}
        for n in CALIB_P:
            zero[n] = [run_once(eng, n, recs, 0) for _ in range(repeats)]
            log += [{"engine": eng, "p": n, "work_kib": 0, **r} for r in zero[n]]
        ti = {n: _med(zero[n], "T_I") for n in CALIB_P}
        to = {n: _med(zero[n], "T_O") for n in CALIB_P}
        x_name = "d_C" if eng == "vsn" else "d_R"
        dx = {n: ti[n] - ti[1] for n in CALIB_P}
        dm = {n: to[n] - to[1] for n in CALIB_P}
        cx, cm = fit_linear(dx), fit_nlogn(dm)
        d_i = inputs[eng]["d_I"]
        overheads[eng] = {
            x_name: {"measured": dx, "coef": cx, "coef_over_d_I": cx / d_i,
                     "table1_coef_over_d_I": 0.01 if eng == "vsn" else 0.1},
            "d_M": {"measured": dm, "coef": cm, "coef_over_d_I": cm / d_i,
                    "table1_coef_over_d_I": 0.01 if eng == "vsn" else 0.1},
            "zero_cost_T_P": {n: _med_tp(zero[n]) for n in CALIB_P},
        }
        if eng == "vsn":
            # an instance at n = 2 reads all N tuples and processes N/2 (module docstring)
            overheads[eng]["d_skip"] = max(0.0, 2 * _med_tp(zero[2]) - _med_tp(zero[1]))
    return inputs, overheads, log


def measure(recs: list[dict[str, int]], kib: int, repeats: int) -> dict[str, Any]:
    """VSN and SN at Π = 1, 2, ``repeats`` rounds, variants alternating."""
    variants = [(eng, p) for p in MEASURED_P for eng in ("vsn", "sn")]
    runs: dict[str, list[dict[str, Any]]] = {f"{e}{p}": [] for e, p in variants}
    for r in range(repeats):
        for eng, p in (variants if r % 2 == 0 else list(reversed(variants))):
            runs[f"{eng}{p}"].append(run_once(eng, p, recs, kib))
    return {k: {"tuples_per_s": summarize([x["tuples_per_s"] for x in v]), "runs": v}
            for k, v in runs.items()}


def experiment(rows: int = 40_000, calib_rows: int = 20_000, work_kib: int = 128,
               repeats: int = 3, calib_repeats: int = 3) -> dict[str, Any]:
    """Calibrate, predict, measure, compare (module docstring). Times in the JSON are
    microseconds per tuple; rates tuples/s."""
    if repeats < 1 or calib_repeats < 1:
        raise ValueError(f"{NAME}: repeats must be >= 1, got {repeats}, {calib_repeats}")
    cores = os.cpu_count() or 1
    with repeat_probe() as wprobe:
        w = work_alone(work_kib, 300)
    inputs, overheads, calib = calibrate(records(calib_rows), work_kib, calib_repeats)
    pred = predict(inputs, overheads, w, cores)
    measured = measure(records(rows), work_kib, repeats)
    compare: dict[str, Any] = {}
    for eng in ("vsn", "sn"):
        for p in MEASURED_P:
            got = measured[f"{eng}{p}"]["tuples_per_s"]["median"]
            compare[f"{eng}{p}"] = {
                "measured_median": got,
                "paper": pred[eng]["paper"][p],
                "machine": pred[eng]["machine"][p],
                "rel_error_paper": relative_error(pred[eng]["paper"][p], got),
                "rel_error_machine": relative_error(pred[eng]["machine"][p], got)}
            # the same costs on the CPUs each run actually had (others' CPU measured)
            loaded, errs, avails = [], [], []
            for r in measured[f"{eng}{p}"]["runs"]:
                avail = available_cores(r["probe"])
                if avail is None:
                    continue
                r["available_cores"] = avail
                r["predicted_loaded"] = loaded_rate(pred[eng]["stages"][p], avail)
                loaded.append(r["predicted_loaded"])
                errs.append(relative_error(r["predicted_loaded"], r["tuples_per_s"]))
                avails.append(avail)
            if loaded:
                compare[f"{eng}{p}"].update({
                    "loaded": statistics.median(loaded),
                    "rel_error_loaded": relative_error(statistics.median(loaded), got),
                    "rel_error_loaded_per_run": summarize(errs),
                    "available_cores": summarize(avails)})
        sp = (measured[f"{eng}2"]["tuples_per_s"]["median"]
              / measured[f"{eng}1"]["tuples_per_s"]["median"])
        compare[f"{eng}_speedup_2_over_1"] = {
            "measured_ratio_of_medians": sp,
            "paper": pred[eng]["paper"][2] / pred[eng]["paper"][1],
            "machine": pred[eng]["machine"][2] / pred[eng]["machine"][1]}
    # Fig. 3's lines: Table 1's overheads on each engine's own measured d^I, d^P, d^O
    fig3 = {"vsn": figure3(*(inputs["vsn"][k] for k in ("d_I", "d_P", "d_O")))["vsn"],
            "psn": figure3(*(inputs["sn"][k] for k in ("d_I", "d_P", "d_O")))["psn"]}
    return {"query": "synthetic per-tuple cost aggregate (DEBS'19 §9.1)", "keys": KEYS,
            "window_ms": WINDOW_MS, "rows": rows, "calib_rows": calib_rows,
            "work_kib": work_kib, "cores": cores, "sn_channels": "threads",
            "work_alone_us": w * 1e6, "work_alone_probe": wprobe,
            "inputs_us": _us(inputs), "overheads_us": _us(overheads),
            "predicted": {eng: {"stages_us": _us(pred[eng]["stages"]),
                                "paper": _keys(pred[eng]["paper"]),
                                "machine": _keys(pred[eng]["machine"])}
                          for eng in pred},
            "predicted_only_p": [p for p in PREDICTED_P if p not in MEASURED_P],
            "table1_with_our_costs": {k: _keys(v) for k, v in fig3.items()},
            "measured": measured, "compare": compare, "calibration_runs": calib}


_RATIO_KEYS = ("coef_over_d_I", "table1_coef_over_d_I")


def _us(obj: Any, key: str = "") -> Any:
    """Seconds → microseconds throughout (keys stringified); ratios stay ratios."""
    if isinstance(obj, dict):
        return {str(k): _us(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, float) and key not in _RATIO_KEYS:
        return obj * 1e6
    return obj


def _keys(d: dict[int, float]) -> dict[str, float]:
    return {str(k): v for k, v in d.items()}


# -- the figure ---------------------------------------------------------------------------------
def draw(m: dict[str, Any], path: Path, quick: bool) -> None:
    """Fig. 4a's layout: predicted throughput lines against Π (solid: the paper's model with
    our costs; dotted: bounded by the GIL and the cores; grey: Table 1's costs), measured
    medians with min–max bars; and the stage times as Fig. 3."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    colors = {"vsn": "tab:blue", "sn": "tab:orange"}
    for eng, c in colors.items():
        pr = m["predicted"][eng]
        ns = [int(n) for n in pr["paper"]]
        ax.plot(ns, [pr["paper"][str(n)] for n in ns], "-", color=c,
                label=f"{eng}: model (paper's form, our costs)")
        ax.plot(ns, [pr["machine"][str(n)] for n in ns], ":", color=c,
                label=f"{eng}: model bounded by GIL and {m['cores']} cores")
        t1 = m["table1_with_our_costs"]["vsn" if eng == "vsn" else "psn"]
        ax.plot(ns, [t1[str(n)] for n in ns], "--", color=c, alpha=0.4,
                label=f"{eng}: Table 1 costs (d^I, d^P, d^O ours)")
        for p in MEASURED_P:
            s = m["measured"][f"{eng}{p}"]["tuples_per_s"]
            ax.errorbar([p], [s["median"]], yerr=[[s["median"] - s["min"]],
                                                  [s["max"] - s["median"]]],
                        fmt="o", color=c, capsize=3,
                        label=f"{eng}: measured" if p == MEASURED_P[0] else None)
            loaded = m["compare"][f"{eng}{p}"].get("loaded")
            if loaded is not None:
                ax.plot([p], [loaded], "x", color=c, markersize=8,
                        label=(f"{eng}: model on the CPUs the runs had"
                               if p == MEASURED_P[0] else None))
        st = m["predicted"][eng]["stages_us"]
        for stage, style in (("T_I", "s-"), ("T_P", "o-"), ("T_O", "^-")):
            ax2.plot(ns, [1e6 / st[str(n)][stage] for n in ns], style, color=c, alpha=0.8,
                     label=f"{eng} {stage}")
    ax.set_yscale("log")  # the measured points sit far below the unbounded predictions
    ax.axvspan(max(MEASURED_P) + 0.5, max(PREDICTED_P) + 1, color="0.93")
    ax.text(max(MEASURED_P) + 0.7, ax.get_ylim()[1] * 0.9, "prediction only", fontsize=8,
            va="top")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("Π (threads in T_P)")
    ax.set_ylabel("throughput (tuples/s)")
    ax.set_title(f"predicted vs measured (points: median, min–max of "
                 f"{m['measured']['vsn1']['tuples_per_s']['n']})", fontsize=9)
    ax.legend(fontsize=6)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("Π (threads in T_P)")
    ax2.set_ylabel("stage rate (tuples/s)")
    ax2.set_title("per-stage rates, as Fig. 3 (measured costs)", fontsize=9)
    ax2.legend(fontsize=6, ncol=2)
    save_figure(plt, fig, path, quick)


def run(quick: bool = False, out_dir: str | None = None) -> Path:
    """The benchmark: full, or ``quick`` (small inputs, < 2 min)."""
    params: dict[str, Any] = (
        {"rows": 10_000, "calib_rows": 8_000, "work_kib": 128, "repeats": 3,
         "calib_repeats": 1}
        if quick else
        {"rows": 40_000, "calib_rows": 20_000, "work_kib": 128, "repeats": 5,
         "calib_repeats": 3})
    metrics = experiment(**params)
    png = results_dir(out_dir) / f"{NAME}.png"
    draw(metrics, png, quick)
    return write_result(NAME, {"quick": quick, **params, "paper_accuracy": PAPER_ACCURACY},
                        metrics, out_dir, plot=png.name)


__all__ = ["PAPER_ACCURACY", "ThreadCPU", "available_cores", "build", "experiment", "figure3",
           "fit_linear", "fit_nlogn", "loaded_rate", "pipeline_rate", "predict",
           "relative_error", "run", "stage_times", "table1", "work"]
