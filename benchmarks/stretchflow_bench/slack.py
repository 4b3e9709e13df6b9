"""``stretchflow bench slack``: the slack engine's experiments — the Slack ScaleGate (SSG)
buffer and the SLTuner of determinism-latency §6, scaled to a 2-core machine running CPython.

* ``slack-overhead`` (Fig. 8): 2 writers × 20 000 tuples, 1–8 readers that only read; the read
  time per tuple of the ESG, the SSG and a lock-based K-slack.
* ``slack-estimators`` (Table 1): NRMSE of the latency and slack-ready models (GP, linear,
  isotonic, SVR) on a 50/50 split of samples from runs with varied SLT.
* ``slack-tuning-zipf`` (Fig. 12) and ``slack-tuning-constant`` (Fig. 13): the traffic join
  with a delayed bus source, SLTuner against static-low, static-high, max-timestamp and
  TCP-like: latency, SLT, slack-ready tuples and detected events over time.

The ``ssg`` / ``ssg-cap1024`` entries of ``slack-overhead`` name the buffer, not the engine.
Every run (each overhead repeat, training run and policy run) keeps its probe
(bench.common.repeat_probe: load average before and after, other processes' CPU time), from
which the JSON's ``quiet`` is measured.

Scaling (documented in docs/slack.md): both sources are replayed at a speed-up of 10 (bus
455 reports/s, SCATS 584/s, close to the paper's 500/s each); the Zipf phases are 10 s / 20 s
(paper 20 s / 50 s) and the deadline 2 400 ms (paper 6 000 ms), keeping the deadline below the
peak skew as in the paper; the constant scenario adds 1 ms per bus tuple as in the paper and
runs 40 s with an 8 000 ms deadline (paper 35 000 ms over a longer run), so that reading ready
tuples only crosses the deadline after about 18 s, as Fig. 13's crossing at about 75 s.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from .common import repeat_probe, summarize, write_result

SPEEDUP = 10.0

SCENARIOS: dict[str, dict[str, Any]] = {
    "zipf": {"delay": "zipf", "phases": ((10, 1.0, 10), (20, 0.35, 2)), "duration_s": 32,
             "deadline_ms": 2400, "slt_cap": 60_000, "step": 1000},
    "constant": {"delay": "constant", "delay_ms": 1.0, "duration_s": 40,
                 "deadline_ms": 8000, "slt_cap": 150_000, "step": 2000},
}
QUICK: dict[str, dict[str, Any]] = {
    "zipf": {**SCENARIOS["zipf"], "phases": ((2.5, 1.0, 10), (2.5, 0.35, 2)),
             "duration_s": 5, "deadline_ms": 600, "slt_cap": 20_000},
    "constant": {**SCENARIOS["constant"], "duration_s": 6, "deadline_ms": 1300,
                 "slt_cap": 30_000},
}
STATIC_LOW = 1000.0
ALPHA = 0.3
INTERVAL = 0.5


# -- the K-slack of [16], lock-based, for the overhead comparison ------------------------------


class KSlack:
    """A lock-based K-slack buffer shared by several readers: writers push into a heap under
    one lock; a tuple is released (to every reader, in timestamp order) once the largest
    timestamp seen exceeds it by at least K, or at the end of input."""

    def __init__(self, writers: list[str], readers: list[str], k: int = 0):
        import heapq

        self._heapq = heapq
        self.k = k
        self._lock = threading.Condition()
        self._heap: list[tuple[int, int, Any]] = []
        self._out: list[Any] = []
        self._pos = dict.fromkeys(readers, 0)
        self._open = set(writers)
        self._max = -math.inf
        self._seq = 0

    def insert(self, t: tuple, writer: str) -> None:
        with self._lock:
            self._seq += 1
            self._heapq.heappush(self._heap, (t[0], self._seq, t))
            if t[0] > self._max:
                self._max = t[0]
            self._release(self._max - self.k)

    def _release(self, upto: float) -> None:
        heap, out = self._heap, self._out
        n = len(out)
        while heap and heap[0][0] <= upto:
            out.append(self._heapq.heappop(heap)[2])
        if len(out) > n:
            self._lock.notify_all()

    def close_writer(self, writer: str) -> None:
        with self._lock:
            self._open.discard(writer)
            if not self._open:
                self._release(math.inf)
                self._lock.notify_all()

    def get(self, reader: str) -> Any:
        with self._lock:
            while True:
                i = self._pos[reader]
                if i < len(self._out):
                    self._pos[reader] = i + 1
                    return self._out[i]
                if not self._open:
                    return None
                self._lock.wait()


def _overhead_one(kind: str, n_readers: int, per_writer: int) -> dict[str, float]:
    from stretchflow.buffers.esg import END, ElasticScaleGate
    from stretchflow.buffers.ssg import SlackScaleGate

    writers = ["w0", "w1"]
    readers = [f"r{i}" for i in range(n_readers)]
    if kind == "esg":
        buf: Any = ElasticScaleGate(writers, readers, capacity=10**9)
        add, close = buf.add, buf.close_source

        def get(r: str) -> Any:
            x = buf.get(r)
            return None if x is END else x
    elif kind in ("ssg", "ssg-cap1024"):
        # "ssg": the default capacity (65 536), not reached here; "ssg-cap1024": a capacity
        # the writers hit, so the cost of flow control (blocking, wake-ups) shows
        buf = SlackScaleGate(writers, readers, slt=1000,
                             capacity=1024 if kind == "ssg-cap1024" else 65536)
        add, close = buf.insert, buf.close_writer

        def get(r: str) -> Any:
            x = buf.get(r)
            return None if x is END else x
    else:
        buf = KSlack(writers, readers, k=1000)
        add, close, get = buf.insert, buf.close_writer, buf.get
    times: list[float] = []
    lock = threading.Lock()

    def write(w: str, offset: int) -> None:
        for i in range(per_writer):
            add((2 * i + offset, w), w)
        close(w)

    def read(r: str) -> None:
        n = 0
        t0 = time.perf_counter()
        while get(r) is not None:
            n += 1
        dt = time.perf_counter() - t0
        with lock:
            times.append(dt / max(n, 1))

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    threads += [threading.Thread(target=write, args=(w, k)) for k, w in enumerate(writers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    res = {"read_ms_per_tuple": 1000 * sum(times) / len(times), "wall_s": wall}
    if kind.startswith("ssg"):
        st = buf.stats()
        res.update(writer_waits=st["writer_waits"], max_held=st["max_held"])
    return res


OVERHEAD_KINDS = ("esg", "ssg", "ssg-cap1024", "kslack")


def overhead(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    """Per reader count and buffer: ``read_ms_per_tuple`` and ``wall_s`` are the medians of
    ``repeats`` runs (1 in --quick, else 3; the buffers alternate within a repeat so each
    sees the same machine load), with their min/median/max (``*_summary``) and every run's
    numbers and probe (``repeats``). For the SSGs ``writer_waits`` is the median run's and
    ``max_held`` the largest of any run."""
    per_writer = 5000 if quick else 20_000
    repeats = (1 if quick else 3) if repeats is None else repeats
    if repeats < 1:
        raise ValueError(f"slack-overhead: repeats must be >= 1, got {repeats}")
    out: dict[str, Any] = {}
    for n in (1, 2, 4, 8):
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in OVERHEAD_KINDS}
        for _ in range(repeats):
            for kind in OVERHEAD_KINDS:
                with repeat_probe() as probe:
                    one = _overhead_one(kind, n, per_writer)
                runs[kind].append({**one, "probe": probe})
        out[str(n)] = {kind: _overhead_summary(runs[kind]) for kind in OVERHEAD_KINDS}
    return {"per_writer": per_writer, "writers": 2, "repeats": repeats, "readers": out}


def _overhead_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    read = [r["read_ms_per_tuple"] for r in runs]
    wall = [r["wall_s"] for r in runs]
    res: dict[str, Any] = {
        "read_ms_per_tuple": statistics.median(read), "wall_s": statistics.median(wall),
        "read_ms_per_tuple_summary": summarize(read), "wall_s_summary": summarize(wall),
        "repeats": runs,
    }
    if "writer_waits" in runs[0]:
        res["writer_waits"] = statistics.median_low([r["writer_waits"] for r in runs])
        res["max_held"] = max(r["max_held"] for r in runs)
    return res


# -- the traffic scenarios ------------------------------------------------------------------------


def scenario_data(sc: dict[str, Any], seed: int = 0) -> tuple[list, list]:
    from stretchflow.io.traffic import bus_reports, scats_reports

    ev = int(sc["duration_s"] * SPEEDUP * 1000)
    return bus_reports(ev, seed=seed), scats_reports(ev, seed=seed)


def run_scenario(sc: dict[str, Any], data: tuple[list, list], controller: Any, slt0: float,
                 seed: int = 0, interval: float = INTERVAL) -> Any:
    """One run of the congestion join with a delayed bus source under ``controller``."""
    import stretchflow as sf
    from stretchflow.executors.slack import run
    from stretchflow.io.traffic import ConstantDelay, DelayedReplay, ZipfDelay
    from stretchflow.queries.traffic import congestion

    delay: Any = (ZipfDelay(sc["phases"], seed=seed) if sc["delay"] == "zipf"
                  else ConstantDelay(sc["delay_ms"]))
    start = time.perf_counter() + 0.2
    flow = sf.Flow("traffic")
    # the experiment lasts duration_s: a delayed bus source does not send its backlog after
    # that (an end-of-input flush of it would show as a latency artefact of the end)
    bus = flow.source(DelayedReplay(data[0], speedup=SPEEDUP, delay=delay, name="bus",
                                    start=start, until_s=sc["duration_s"]))
    scats = flow.source(DelayedReplay(data[1], speedup=SPEEDUP, name="scats", start=start))
    congestion(bus, scats).collect()
    return run(flow, deadline=sc["deadline_ms"], slt=slt0, controller=controller,
               metrics_interval=interval)


def training_slts(sc: dict[str, Any], quick: bool) -> list[float]:
    """The SLTs of the training runs: from 0 to the cap, and ∞ (ready tuples only)."""
    cap = sc["slt_cap"]
    fractions = (0,) if quick else (0, 0.15, 0.3, 0.5, 0.75)
    return [cap * f for f in fractions] + [math.inf]


def _train_runs(sc: dict[str, Any], data: tuple[list, list], quick: bool,
                probes: list[dict[str, Any]] | None = None) -> list[Any]:
    """§6: "we run the application for different slack threshold parameters and kept the
    latency and the amount of slack-ready tuples as historical data": one run per SLT, the SLT
    fixed for the whole run. (Changing the SLT within a run, as :class:`Explorer` does, gives
    samples whose latency still reflects the previous SLT for seconds — a reader that read
    ahead under a low SLT needs time to fall back — and the models then learn no SLT effect.)
    Each run's probe (:func:`~.common.repeat_probe`) is appended to ``probes``."""
    runs = []
    for slt in training_slts(sc, quick):
        with repeat_probe() as probe:
            runs.append(run_scenario(sc, data, None, slt))
        if probes is not None:
            probes.append({**_finite({"slt": slt}), **probe})
    return runs


def _finite(x: Any) -> Any:
    """JSON has no infinity: an SLT of ∞ (ready tuples only) is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def nrmse_table(samples: Any, seed: int = 0) -> dict[str, Any]:
    """Table 1: per estimator, NRMSE (%) of latency and slack-ready predictions on a random
    50/50 split of the samples, and the time to fit both models."""
    import numpy as np

    from stretchflow.elastic.sltuner import ESTIMATORS, make_estimator, nrmse

    X, lat, slr = samples.arrays()
    idx = np.random.default_rng(seed).permutation(len(X))
    tr, te = idx[: len(X) // 2], idx[len(X) // 2:]
    out: dict[str, Any] = {"train": len(tr), "test": len(te)}
    for est in ESTIMATORS:
        t0 = time.perf_counter()
        m1 = make_estimator(est).fit(X[tr], lat[tr])
        m2 = make_estimator(est).fit(X[tr], slr[tr])
        out[est] = {"nrmse_latency_pct": 100 * nrmse(lat[te], m1.predict(X[te])),
                    "nrmse_slack_ready_pct": 100 * nrmse(slr[te], m2.predict(X[te])),
                    "fit_s": time.perf_counter() - t0}
    return out


def estimators(quick: bool = False) -> dict[str, Any]:
    from stretchflow.elastic.sltuner import samples_from_series

    table: dict[str, Any] = {}
    probes: dict[str, list[dict[str, Any]]] = {}
    for name in ("zipf", "constant"):
        sc = (QUICK if quick else SCENARIOS)[name]
        data = scenario_data(sc)
        samples: dict[str, Any] = {}
        for res in _train_runs(sc, data, quick, probes.setdefault(name, [])):
            samples_from_series(res.extra["series"], sc["slt_cap"], samples)
        table[name] = nrmse_table(samples["congestion"])
    # the training runs' probes sit beside the table, not in it: the plot draws every dict
    # of a scenario's table as an estimator
    return {"table": table, "train_probes": probes}


def _policies(sc: dict[str, Any], model: Any) -> dict[str, tuple[Any, float]]:
    from stretchflow.elastic.sltuner import MaxTimestamp, SLTuner, StaticSLT, TCPLike

    return {
        "sltuner": (SLTuner(model, sc["deadline_ms"], alpha=ALPHA, step=sc["step"],
                            max_slt=sc["slt_cap"]), math.inf),
        "static-low": (StaticSLT(STATIC_LOW), STATIC_LOW),
        "static-high": (None, math.inf),
        "max-timestamp": (MaxTimestamp(), math.inf),
        "tcp": (TCPLike(STATIC_LOW, 1000.0, sc["slt_cap"]), STATIC_LOW),
    }


def tuning(name: str, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    from stretchflow.elastic.sltuner import train

    sc = (QUICK if quick else SCENARIOS)[name]
    data = scenario_data(sc)
    t0 = time.perf_counter()
    train_probes: list[dict[str, Any]] = []
    model, samples = train(_train_runs(sc, data, quick, train_probes), "gp", sc["slt_cap"])
    train_s = time.perf_counter() - t0
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        model.save(Path(out_dir) / f"slack-tuning-{name}-model.joblib")
    policies = _policies(sc, model)
    if quick:
        policies = {k: v for k, v in policies.items()
                    if k in ("sltuner", "static-low", "static-high")}
    results: dict[str, Any] = {}
    for pname, (ctrl, slt0) in policies.items():
        with repeat_probe() as probe:
            res = run_scenario(sc, data, ctrl, slt0)
        x = res.extra
        series = [{"t": p["t"], "latency_ms": p["latency_ms"],
                   "slt": p["operators"]["congestion"]["slt"],
                   "slack_ready": p["slack_ready"], "events": p["events"],
                   "lost": p["operators"]["congestion"]["lost"],
                   "skew_ms": p["operators"]["congestion"]["skew_ms"]} for p in x["series"]]
        results[pname] = _finite({
            "violations": x["violations"], "intervals": x["intervals"],
            "max_latency_ms": x["e2e_latency_ms"]["max"],
            "mean_latency_ms": x["e2e_latency_ms"]["mean"],
            "slack_ready": x["slack_ready"], "events": x["events"],
            "lost_tuples": x["lost_tuples"], "late_tuples":
                x["operators"]["congestion"]["late_tuples"],
            "decisions": len(x["decisions"]), "series": series, "probe": probe,
        })
    s, lo, hi = results["sltuner"], results["static-low"], results["static-high"]
    checks = {
        "sltuner_meets_deadline": s["violations"] == 0,
        "sltuner_fewer_slack_ready_than_static_low": s["slack_ready"] < lo["slack_ready"],
        "sltuner_more_events_than_static_low": s["events"] > lo["events"],
        "static_high_violates_deadline": hi["violations"] > 0,
    }
    return {"scenario": name, "deadline_ms": sc["deadline_ms"], "train_samples":
            len(samples["congestion"].X), "train_s": train_s,
            "training_slts": _finite(training_slts(sc, quick)),
            # before "policies": the training runs come first, and quiet() judges the load
            # before the first probe it finds
            "train_probes": train_probes,
            # Table 1 on these samples (skipped in --quick: too few samples to mean anything)
            "estimators_nrmse": None if quick else nrmse_table(samples["congestion"]),
            "policies": results,
            "paper_checks": checks}


def _plot_tuning(m: dict[str, Any], path: Path, quick: bool = False) -> None:
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), dpi=100, sharex=True)
    for pname, r in m["policies"].items():
        t = [p["t"] for p in r["series"]]
        axes[0][0].plot(t, [p["latency_ms"] for p in r["series"]], label=pname)
        axes[0][1].plot(t, [p["slt"] if p["slt"] is not None else float("nan")
                            for p in r["series"]], label=pname)
        axes[1][0].plot(t, [p["slack_ready"] for p in r["series"]], label=pname)
        cum, acc = [], 0
        for p in r["series"]:
            acc += p["events"]
            cum.append(acc)
        axes[1][1].plot(t, cum, label=pname)
    # SLTuner's decisions: a mark where its SLT changes (the other policies are fixed or
    # decide every interval: their SLT line shows it)
    from .timeline import MARK_GID

    tuner = m["policies"].get("sltuner", {}).get("series", [])
    changes = [b["t"] for a, b in zip(tuner, tuner[1:], strict=False) if a["slt"] != b["slt"]]
    for k, t in enumerate(changes):
        for ax in (axes[0][0], axes[0][1]):
            ax.axvline(t, color="tab:gray", lw=0.6, ls="--", alpha=0.7, gid=MARK_GID,
                       label="SLTuner decision" if k == 0 else None)
    axes[0][0].axhline(m["deadline_ms"], color="k", ls="--", lw=1, label="deadline")
    axes[0][0].set_ylabel("latency (ms, Eq. 2)")
    axes[0][1].set_ylabel("SLT (event ms; gaps = ∞)")
    axes[1][0].set_ylabel("slack-ready tuples / interval")
    axes[1][1].set_ylabel("detected events (cumulative)")
    for ax in axes[1]:
        ax.set_xlabel("time (s)")
    for row in axes:
        for ax in row:
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"SLT tuning, {m['scenario']} delays (deadline {m['deadline_ms']} ms)")
    save_figure(plt, fig, path, quick)


def _plot_overhead(m: dict[str, Any], path: Path, quick: bool = False) -> None:
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    ns = sorted(int(n) for n in m["readers"])
    for kind in ("esg", "ssg", "ssg-cap1024", "kslack"):
        if kind not in m["readers"][str(ns[0])]:
            continue
        ax.plot(ns, [m["readers"][str(n)][kind]["read_ms_per_tuple"] for n in ns], "o-",
                label=kind)
    ax.set_xlabel("reader threads")
    ax.set_ylabel("read time per tuple (ms)")
    ax.set_title("2 writers, reads only (Fig. 8)")
    ax.legend()
    ax.grid(True, alpha=0.3)
    save_figure(plt, fig, path, quick)


def _write(name: str, params: dict[str, Any], metrics: dict[str, Any], out_dir: str | None,
           draw: Any) -> Path:
    from .common import RESULTS_DIR

    d = Path(out_dir) if out_dir is not None else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    png = d / f"{name}.png"
    draw(metrics, png, bool(params.get("quick")))
    return write_result(name, params, metrics, out_dir, plot=png.name)


def run_overhead(quick: bool, out_dir: str | None) -> Path:
    return _write("slack-overhead", {"quick": quick}, overhead(quick), out_dir,
                  _plot_overhead)


def _plot_estimators(m: dict[str, Any], path: Path, quick: bool = False) -> None:
    """Table 1 as bars: NRMSE of each estimator, latency and slack-ready models, per scenario."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    scenarios = list(m["table"])
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6.4, 3.6), dpi=110, sharey=True)
    for ax, sc in zip(axes if len(scenarios) > 1 else [axes], scenarios, strict=True):
        t = m["table"][sc]
        names = [k for k in t if isinstance(t[k], dict)]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [t[n]["nrmse_latency_pct"] for n in names], width=0.4,
               label="latency")
        ax.bar([x + 0.2 for x in xs], [t[n]["nrmse_slack_ready_pct"] for n in names],
               width=0.4, label="slack-ready")
        ax.set_xticks(list(xs), names)
        ax.set_title(f"{sc} ({t.get('test', '?')} test samples)")
        ax.grid(True, axis="y", alpha=0.3)
    axes_list = axes if len(scenarios) > 1 else [axes]
    axes_list[0].set_ylabel("NRMSE (%)")
    axes_list[0].legend()
    save_figure(plt, fig, path, quick)


def run_estimators(quick: bool, out_dir: str | None) -> Path:
    return _write("slack-estimators", {"quick": quick, "speedup": SPEEDUP}, estimators(quick),
                  out_dir, _plot_estimators)


def run_tuning_zipf(quick: bool, out_dir: str | None) -> Path:
    sc = (QUICK if quick else SCENARIOS)["zipf"]
    return _write("slack-tuning-zipf", {"quick": quick, "speedup": SPEEDUP, "alpha": ALPHA,
                                        "static_low": STATIC_LOW, **_finite(dict(sc))},
                  tuning("zipf", quick, out_dir), out_dir, _plot_tuning)


def run_tuning_constant(quick: bool, out_dir: str | None) -> Path:
    sc = (QUICK if quick else SCENARIOS)["constant"]
    return _write("slack-tuning-constant", {"quick": quick, "speedup": SPEEDUP,
                                            "alpha": ALPHA, "static_low": STATIC_LOW,
                                            **_finite(dict(sc))},
                  tuning("constant", quick, out_dir), out_dir, _plot_tuning)


#: each result's figure, ``draw(metrics, png, quick)``: also re-draws a committed result
#: (``bench.plots.replot``)
PLOTS = {"slack-overhead": _plot_overhead, "slack-estimators": _plot_estimators,
         "slack-tuning-zipf": _plot_tuning, "slack-tuning-constant": _plot_tuning}

BENCHMARKS = {
    "slack-overhead": ("read time per tuple of ESG, SSG and a lock-based K-slack, 1-8 readers",
                       "determinism-latency Fig. 8", run_overhead),
    "slack-estimators": ("NRMSE of GP / linear / isotonic / SVR latency and slack-ready models",
                         "determinism-latency Table 1", run_estimators),
    "slack-tuning-zipf": ("SLTuner vs baselines, Zipf-delayed bus source, deadline-scaled",
                          "determinism-latency Fig. 12", run_tuning_zipf),
    "slack-tuning-constant": ("SLTuner vs baselines, constantly delayed bus source",
                              "determinism-latency Fig. 13", run_tuning_constant),
}
