"""Benchmarks of the ordered multicore executor (ordered-multicore §7), scaled to a 2-core
machine running CPython.

* ``ordered-heuristics`` (§7.3): QST, LP, ET and CT on the TPCx-BB queries Q1, Q2, Q3, Q4 and
  Q15: throughput, and processing latency from markers at equal tuple intervals (mean of the
  20th–80th percentile, plus p20/p50/p80);
* ``ordered-queues`` (§7.2.1): hybrid vs partitioned queue for a stateless operator feeding a
  partitioned-stateful one (numpy work, GIL released), keys from N(0, σ) range-partitioned into
  100 buckets over [-3, 3): the smaller σ, the hotter the middle buckets;
* ``ordered-reorder`` (§7.2.2): lock-based vs non-blocking reorder buffer behind a stateless
  operator, for a cheap (pure overhead) and a numpy-heavy operator;
* ``ordered-scaling``: 1 vs 2 workers on numpy micro-operators of >= 1 ms per tuple, next to
  the speed-up two bare threads get from the same numpy work at the same moment (on a shared
  machine this bounds what any executor can show).

Every run pins numpy's BLAS to one thread (threadpoolctl): BLAS threads would otherwise use the
second core themselves. The variants alternate within each repeat (so they see the same
machine load) and every run keeps its probe (``probes``, common.repeat_probe: load
average before and after, other processes' CPU time), from which the JSON's ``quiet`` is
measured. Results: JSON + PNG under ``benchmarks/results/``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from .common import repeat_probe, summarize, write_result
from .plots import _pyplot, save_figure

HEURISTICS = ("qst", "lp", "et", "ct")


def single_threaded_blas() -> AbstractContextManager[Any]:
    """A context in which numpy's BLAS uses one thread (threadpoolctl): the calibration and the
    runs of the micro-operators (:mod:`stretchflow.workloads.micro`) measure under it."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def _latency(lat: list[float]) -> dict[str, float]:
    """Mean of the 20th–80th percentile band and the band's edges, in ms (§7 metric), of
    marker latencies in ms (the run's ``extra["marker_latencies_ms"]``)."""
    if not lat:
        return {"mean_20_80_ms": float("nan"), "p20_ms": float("nan"),
                "p50_ms": float("nan"), "p80_ms": float("nan"), "markers": 0}
    v = sorted(lat)
    n = len(v)
    lo, hi = int(n * 0.2), max(int(n * 0.8), int(n * 0.2) + 1)
    band = v[lo:hi]
    return {"mean_20_80_ms": statistics.fmean(band), "p20_ms": v[lo], "p50_ms": v[n // 2],
            "p80_ms": v[min(hi, n - 1)], "markers": n}


def _plot(path: Path, draw: Callable[[Any], None], title: str, quick: bool) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.8), dpi=110)
    draw(ax)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    save_figure(plt, fig, path, quick)
    return path.name


def _out(out_dir: str | None) -> Path:
    from .common import RESULTS_DIR

    d = Path(out_dir) if out_dir is not None else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def _bars(ax: Any, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / max(1, len(series))
    for k, (name, vals) in enumerate(series.items()):
        xs = [x + (k - (len(series) - 1) / 2) * width for x in range(len(groups))]
        ax.bar(xs, vals, width=width, label=name)
    ax.set_xticks(list(range(len(groups))), groups)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


# -- heuristics on TPC-BB ----------------------------------------------------------------------


def heuristics(rows: int, repeats: int, workers: int = 2, markers: int = 50,
               seed: int = 1) -> dict[str, Any]:
    """Per query and heuristic: throughput (input tuples/s), marker latency and each run's
    probe (:func:`~.common.repeat_probe`). The heuristics alternate within a repeat, so each
    sees the same machine load."""
    from stretchflow.executors import ordered
    from stretchflow.workloads import tpcxbb

    out: dict[str, Any] = {}
    for q in tpcxbb.NAMES:
        data = tpcxbb.generate(q, rows, seed=seed)
        every = max(1, rows // markers)
        tput: dict[str, list[float]] = {h: [] for h in HEURISTICS}
        lats: dict[str, list[float]] = {h: [] for h in HEURISTICS}
        probes: dict[str, list[dict[str, Any]]] = {h: [] for h in HEURISTICS}
        for _ in range(repeats):
            for h in HEURISTICS:
                flow, _col = tpcxbb.flow(q, data)
                with repeat_probe() as probe:
                    res = ordered.run(flow, parallelism=workers, scheduler=h,
                                      marker_every=every)
                tput[h].append(res.throughput)
                lats[h].extend(res.extra["marker_latencies_ms"])
                probes[h].append(probe)
        out[q] = {h: {"tuples_per_s": summarize(tput[h]), "latency": _latency(lats[h]),
                      "probes": probes[h]} for h in HEURISTICS}
    return out


def _run_heuristics(quick: bool, out_dir: str | None) -> Path:
    rows, repeats = (3000, 1) if quick else (20_000, 3)
    m = heuristics(rows, repeats)
    d = _out(out_dir)
    qs = list(m)

    def draw(ax: Any) -> None:
        base = {q: max(m[q][h]["tuples_per_s"]["median"] for h in HEURISTICS) for q in qs}
        _bars(ax, [q.split("-")[1] for q in qs],
              {h: [m[q][h]["tuples_per_s"]["median"] / base[q] for q in qs]
               for h in HEURISTICS}, "throughput / best heuristic")

    png = _plot(d / "ordered-heuristics.png", draw,
                "ordered engine, 2 workers: heuristics on TPCx-BB (higher is better)", quick)
    return write_result("ordered-heuristics",
                        {"rows": rows, "repeats": repeats, "workers": 2, "markers": 50}, m,
                        out_dir, plot=png)


# -- hybrid vs partitioned queue ---------------------------------------------------------------


def _sleep_ps(cost_s: float, buckets: int) -> Any:
    """A PS operator whose GIL-free part is ``time.sleep(cost_s)`` (needs no CPU)."""
    from stretchflow.buffers.hybrid_queue import RangePartitioner
    from stretchflow.operators.stateful import PartitionedStateful

    def fn(state: list, t: dict) -> list[dict]:
        time.sleep(cost_s)
        state.append(t["id"])
        return [{"id": t["id"], "seen": len(state)}]

    return PartitionedStateful(fn, key=lambda t: t["key"], init=lambda k: [], buckets=buckets,
                               partitioner=RangePartitioner.uniform(-3.0, 3.0, buckets),
                               name="P1")


def queues(n: int, sigmas: tuple[float, ...], cost_s: float, repeats: int = 1
           ) -> dict[str, Any]:
    """Hybrid vs partitioned queue for L→PS, keys N(0, σ) in 100 range buckets over [-3, 3).

    Two set-ups: numpy work with 2 workers (the machine's cores), and ``time.sleep`` work with
    4 workers (structural: needs no CPU, so the queues' scheduling freedom shows even on a
    loaded 2-core machine). The partitioned queue gives bucket b to worker b mod n (Fig. 6).
    """
    from stretchflow.pipeline import Pipeline
    from stretchflow.workloads import micro

    with single_threaded_blas():
        size, reps, per = micro.calibrate(cost_s)
    out: dict[str, Any] = {"calibration": {"size": size, "reps": reps, "cost_ms": per * 1e3}}
    setups = {"numpy_2_workers": 2, "sleep_4_workers": 4}
    with single_threaded_blas():
        for sigma in sigmas:
            data = micro.keyed_tuples(n, sigma=sigma, seed=3)
            row: dict[str, Any] = {}
            for setup, workers in setups.items():
                queues_ = ("hybrid", "partitioned")
                tput: dict[str, list[float]] = {q: [] for q in queues_}
                probes: dict[str, list[dict[str, Any]]] = {q: [] for q in queues_}
                for _ in range(repeats):
                    for queue in queues_:  # alternate: both queues see the same load
                        pl = Pipeline(micro.source(data), name="queues")
                        pl.add(micro.stateless(0, name="L0"))
                        if setup.startswith("numpy"):
                            pl.add(micro.partitioned(size, reps, buckets=100, key_range=3.0,
                                                     name="P1"))
                        else:
                            pl.add(_sleep_ps(cost_s, 100))
                        with repeat_probe() as probe:
                            r = pl.run(parallelism=workers, scheduler="ct",
                                       queue=queue).result
                        tput[queue].append(r.throughput)
                        probes[queue].append(probe)
                res: dict[str, Any] = {q: {"tuples_per_s": summarize(tput[q]),
                                           "probes": probes[q]} for q in queues_}
                res["hybrid_over_partitioned"] = (res["hybrid"]["tuples_per_s"]["median"]
                                                  / res["partitioned"]["tuples_per_s"]["median"])
                row[setup] = res
            out[f"sigma={sigma}"] = row
    return out


def _run_queues(quick: bool, out_dir: str | None) -> Path:
    n, sigmas, repeats = (300, (0.1, 1.0), 1) if quick else (1500, (0.05, 0.1, 0.25, 1.0), 3)
    m = queues(n, sigmas, 0.0005, repeats=repeats)
    keys = [k for k in m if k.startswith("sigma=")]

    def draw(ax: Any) -> None:
        _bars(ax, keys, {f"{setup}: {q}": [m[k][setup][q]["tuples_per_s"]["median"]
                                           for k in keys]
                         for setup in ("numpy_2_workers", "sleep_4_workers")
                         for q in ("hybrid", "partitioned")}, "throughput (tuples/s)")

    png = _plot(_out(out_dir) / "ordered-queues.png", draw,
                "L→PS (0.5 ms/tuple), 100 range buckets: hybrid vs partitioned queue", quick)
    return write_result("ordered-queues", {"tuples": n, "sigmas": list(sigmas),
                                           "ps_cost_s": 0.0005, "repeats": repeats}, m,
                        out_dir, plot=png)


# -- lock-based vs non-blocking reordering -----------------------------------------------------


def reorder(n_cheap: int, n_heavy: int, workers: int = 2, repeats: int = 1) -> dict[str, Any]:
    from stretchflow.pipeline import Pipeline
    from stretchflow.workloads import micro

    with single_threaded_blas():
        size, reps, per = micro.calibrate(0.0005)
    out: dict[str, Any] = {"calibration": {"size": size, "reps": reps, "cost_ms": per * 1e3}}
    cases = {"cheap": (micro.keyed_tuples(n_cheap, seed=4), 0, 1),
             "numpy_0.5ms": (micro.keyed_tuples(n_heavy, seed=4), size, reps)}
    with single_threaded_blas():
        for case, (data, sz, rp) in cases.items():
            buffers = ("lock", "nonblocking")
            tput: dict[str, list[float]] = {rb: [] for rb in buffers}
            probes: dict[str, list[dict[str, Any]]] = {rb: [] for rb in buffers}
            for _ in range(repeats):
                for rb in buffers:  # alternate: both buffers see the same machine load
                    # two stateless operators and a PS one: every stage has a reorder buffer
                    pl = Pipeline(micro.source(data), name="reorder")
                    pl.add(micro.stateless(sz, rp, name="L0"))
                    pl.add(micro.stateless(sz, rp, 0.5, name="L1"))
                    pl.add(micro.partitioned(0, buckets=100, name="P2"))
                    with repeat_probe() as probe:
                        r = pl.run(parallelism=workers, scheduler="ct", reorder=rb,
                                   max_batch=8).result
                    tput[rb].append(r.throughput)
                    probes[rb].append(probe)
            row: dict[str, Any] = {rb: {"tuples_per_s": summarize(tput[rb]),
                                        "probes": probes[rb]} for rb in buffers}
            row["nonblocking_over_lock"] = (row["nonblocking"]["tuples_per_s"]["median"]
                                            / row["lock"]["tuples_per_s"]["median"])
            out[case] = row
    return out


def _run_reorder(quick: bool, out_dir: str | None) -> Path:
    n_cheap, n_heavy, repeats = (5000, 200, 1) if quick else (50_000, 1500, 3)
    m = reorder(n_cheap, n_heavy, repeats=repeats)
    cases = [k for k in m if k != "calibration"]

    def draw(ax: Any) -> None:
        _bars(ax, cases, {rb: [m[c][rb]["tuples_per_s"]["median"] for c in cases]
                          for rb in ("lock", "nonblocking")}, "throughput (tuples/s)")
        ax.set_yscale("log")

    png = _plot(_out(out_dir) / "ordered-reorder.png", draw,
                "L→L→PS, 2 workers: lock-based vs non-blocking reorder buffers", quick)
    return write_result("ordered-reorder", {"cheap_tuples": n_cheap, "heavy_tuples": n_heavy,
                                            "workers": 2, "max_batch": 8,
                                            "repeats": repeats}, m, out_dir, plot=png)


# -- 1 vs 2 workers ----------------------------------------------------------------------------


def _bare_threads(work: Callable[[], float], n: int, threads: int) -> float:
    """Calls/s of ``threads`` plain threads each calling ``work`` n times (the machine bound)."""
    def loop() -> None:
        for _ in range(n):
            work()

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return n * threads / (time.perf_counter() - t0)


def scaling(n: int, cost_s: float, repeats: int) -> dict[str, Any]:
    from stretchflow.workloads import micro

    with single_threaded_blas():
        size, reps, per = micro.calibrate(cost_s)
    out: dict[str, Any] = {"calibration": {"size": size, "reps": reps, "cost_ms": per * 1e3}}
    data = micro.keyed_tuples(n, seed=5)
    pipelines = {"L": "L", "L-P": "LP", "P": "P"}
    with single_threaded_blas():
        w = micro.Work(size, reps)
        bare = {k: [] for k in (1, 2)}  # type: dict[int, list[float]]
        bare_probes: dict[str, list[dict[str, Any]]] = {"threads_1": [], "threads_2": []}
        for name, kinds in pipelines.items():
            tp: dict[int, list[float]] = {1: [], 2: []}
            cpu: dict[int, list[float]] = {1: [], 2: []}
            probes: dict[str, list[dict[str, Any]]] = {"workers_1": [], "workers_2": []}
            for _ in range(repeats):
                for workers in (1, 2):  # alternate so both see the same machine load
                    # each operator does the full cost: an L-P tuple costs 2 units of work
                    pl = micro.pipeline(kinds, data, size, reps)
                    with repeat_probe() as probe:
                        c0 = time.process_time()
                        res = pl.run(parallelism=workers, scheduler="ct").result
                        # process CPU seconds per wall second: how many cores the run really
                        # used at once (2 = the workers overlapped; a loaded machine caps it)
                        cpu[workers].append((time.process_time() - c0) / res.elapsed)
                    tp[workers].append(res.throughput)
                    probes[f"workers_{workers}"].append(probe)
                    with repeat_probe() as probe:
                        bare[workers].append(_bare_threads(w, max(20, n // 10), workers))
                    bare_probes[f"threads_{workers}"].append(probe)
            out[name] = {
                "workers_1": summarize(tp[1]), "workers_2": summarize(tp[2]),
                "speedup": statistics.median(tp[2]) / statistics.median(tp[1]),
                "cores_used_1": summarize(cpu[1]), "cores_used_2": summarize(cpu[2]),
                "probes": probes,
            }
        # control: the same pipelines with time.sleep(cost) as the GIL-free part. Sleeping
        # needs no CPU, so this shows whether the executor overlaps GIL-free work even when
        # a loaded machine gives the process less than two cores
        from stretchflow.pipeline import Pipeline

        def nap(t: dict) -> dict:
            time.sleep(cost_s)
            return t

        def nap_ps(state: list, t: dict) -> list[dict]:
            time.sleep(cost_s)
            state.append(t["id"])
            return [t]

        for name, kinds in pipelines.items():
            tp = {1: [], 2: []}
            probes = {"workers_1": [], "workers_2": []}
            for _ in range(repeats):
                for workers in (1, 2):
                    pl = Pipeline(micro.source(data), name=f"sleep-{kinds}")
                    for k in kinds:
                        if k == "L":
                            pl.map(nap)
                        else:
                            pl.partitioned(nap_ps, key=lambda t: t["key"], init=lambda k: [],
                                           buckets=100)
                    with repeat_probe() as probe:
                        res = pl.run(parallelism=workers, scheduler="ct").result
                    tp[workers].append(res.throughput)
                    probes[f"workers_{workers}"].append(probe)
            out[f"sleep_{name}"] = {
                "workers_1": summarize(tp[1]), "workers_2": summarize(tp[2]),
                "speedup": statistics.median(tp[2]) / statistics.median(tp[1]),
                "probes": probes,
            }
        out["bare_threads"] = {
            "threads_1": summarize(bare[1]), "threads_2": summarize(bare[2]),
            "speedup": statistics.median(bare[2]) / statistics.median(bare[1]),
            "probes": bare_probes,
        }
    return out


def _run_scaling(quick: bool, out_dir: str | None) -> Path:
    n, repeats = (150, 1) if quick else (1500, 3)
    m = scaling(n, 0.0012, repeats)
    names = ["L", "L-P", "P", "bare_threads", "sleep_L", "sleep_L-P", "sleep_P"]

    def draw(ax: Any) -> None:
        ax.bar(names, [m[k]["speedup"] for k in names],
               color=["tab:blue"] * 3 + ["tab:gray"] + ["tab:green"] * 3)
        ax.tick_params(axis="x", labelsize=8)
        ax.axhline(1.7, color="tab:red", ls="--", lw=1, label="target 1.7x")
        ax.set_ylabel("throughput 2 workers / 1 worker")
        ax.legend(fontsize=8)

    png = _plot(_out(out_dir) / "ordered-scaling.png", draw,
                f"numpy micro-operators ({m['calibration']['cost_ms']:.2f} ms/tuple): "
                "1 vs 2 workers", quick)
    return write_result("ordered-scaling", {"tuples": n, "cost_s": 0.0012, "repeats": repeats},
                        m, out_dir, plot=png)


BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    "ordered-heuristics": (
        "QST/LP/ET/CT on TPCx-BB Q1-Q4, Q15: throughput and marker latency (20-80th pct)",
        "ordered-multicore §7.3 (TPCx-BB queries)", _run_heuristics),
    "ordered-queues": (
        "hybrid vs partitioned queue, L->PS with N(0, sigma) keys in 100 range buckets",
        "ordered-multicore §7.2.1 (skew)", _run_queues),
    "ordered-reorder": (
        "lock-based vs non-blocking reorder buffers, cheap and numpy stateless operators",
        "ordered-multicore §7.2.2 (reordering)", _run_reorder),
    "ordered-scaling": (
        "1 vs 2 workers on numpy micro-operators of >= 1 ms/tuple, vs bare threads",
        "ordered-multicore §7.2 (scalability)", _run_scaling),
}
