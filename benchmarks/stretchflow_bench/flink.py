"""``stretchflow bench stretchflow-vs-flink``: STRETCH (our VSN engine) against Flink (PyFlink)
on the shapes of the STRETCH journal's Q1–Q3 (§8.1–§8.3; issue #20, item 5).

Shapes (each with its own generated input, the same for every variant):

* ``q1-wordcount`` (§8.1): the sliding wordcount of ``bench peers`` (WS = 120 s, WA = 60 s)
  on tweets; Flink runs ``peer_programs/pyflink_wc.py`` (DataStream: ``flat_map`` of the
  words, ``SlidingEventTimeWindows`` + ``reduce``), the SN form of the paper's Alg. 11/Op. 12.
* ``q1-paircount`` (§8.1, the low-duplication case L): the same with pairs of words at
  distance <= 3 (Alg. 13).
* ``q2-forward`` (§8.2): Op. 15 over two inputs (``bandjoin`` streams); stretchflow's
  ``forward`` query, Flink ``peer_programs/pyflink_q.py forward`` (keyed by ts mod 1000,
  merged in timestamp order by the watermark, written inside Flink).
* ``q3-scalejoin`` (§8.3): the band join (band 10, |tsL − tsR| <= window); stretchflow's
  ``scalejoin`` query, Flink ``pyflink_q.py scalejoin`` (SQL interval join, which Flink runs
  on one instance: the predicate has no equality to partition by). The paper did not run
  Q3 on Flink for that reason; it is measured here as the shape the brief asks for.

Variants: ``vsn1``, ``vsn2`` (``stretchflow run --engine vsn --parallelism Π``) and
``flink1``, ``flink2`` (the PyFlink program at parallelism 1, 2), every one a whole process.
Rounds alternate the variants (each round starts one later); each run is wrapped in
:func:`~stretchflow_bench.common.repeat_probe` (1-minute load before and after, other
processes' CPU). Every output of every round is compared with the reference engine's as
per-timestamp multisets (peers.py ``compare``). Throughput is input tuples / time, for
two times: ``wall_s`` (the whole process, interpreter and JVM start-up included) and
``own_s`` (stretchflow: its run summary's time; PyFlink: ``span_s`` for Q2 and the DataStream
Q3, first tuple in to last tuple out, else the program's own elapsed time, mini-cluster start
included; ``own_kind`` says which).
Latency: stretchflow's run summary (p50/p99/max of the sampled outputs); PyFlink Q2 every
tuple's write time minus its entry stamp; not measured for Q1/Q3 on PyFlink.

The paper's reported values, with their section and figure, are in the JSON's
``parameters.paper`` so the report prints them beside ours.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import repeat_probe, results_dir, rotation, summarize, write_result
from .peak import command
from .peers import (
    PEERS,
    PROGRAMS,
    WINDOW,
    _java_missing,
    by_ts,
    cache_dir,
    compare,
    ensure_venv,
    run_process,
)

NAME = "stretchflow-vs-flink"
VARIANTS = ("vsn1", "vsn2", "flink1", "flink2")
#: Q3 only: Flink SQL's interval join (one instance whatever the parallelism: run at 1)
SQL_VARIANT = "flinksql1"
#: what a run measures unless told (``shapes=``): q1-paircount is opt-in, a PyFlink process
#: costs a minute of start-up on a loaded 2-core machine
DEFAULT_SHAPES = ("q1-wordcount", "q2-forward", "q3-scalejoin")
# "N tuples in, M out, S s, T tuples/s": own time = N / T (S has two decimals only)
_SUMMARY = re.compile(r"([\d,]+) tuples in, [\d,]+ out, ([\d.]+) s, ([\d,]+) tuples/s")
_LATENCY = re.compile(r"latency: p50 ([\d.]+) ms, p99 ([\d.]+) ms, max ([\d.]+) ms "
                      r"\(([\d,]+) samples")

#: what the paper reports (journal §8; 36-core Xeon E5-2695, STRETCH in Java, Flink 1.6.0,
#: averages of five runs): the report prints these beside our numbers
PAPER: dict[str, Any] = {
    "setup": "STRETCH journal §8: 2×18-core Xeon E5-2695 (72 threads), STRETCH in Java, "
             "Flink 1.6.0, averages of five runs, 4.3 M tweets (1–2 Oct 2018)",
    "q1-wordcount": {
        "cite": "§8.1, Fig. 6",
        "compares": "STRETCH A+ (VSN) vs Flink Map + A (SN), Map parallelism 1..36",
        "throughput_gain_pct": {"wordcount": 17, "paircount-L": 137, "paircount-M": 237,
                                "paircount-H": 283},
        "latency_change_pct": {"wordcount": -94, "paircount-L": -89, "paircount-M": -94,
                               "paircount-H": -94},
    },
    "q2-forward": {
        "cite": "§8.2, Fig. 7",
        "compares": "Op. 15 (I = 2, forwards every tuple, inputs merge-sorted), STRETCH vs "
                    "Flink, increasing Π",
        "stretch_tuples_per_s": {"lowest_pi": 120_000, "highest_pi": 100_000},
        "flink_tuples_per_s": {"lowest_pi": 40_000, "highest_pi": 2_000},
        "stretch_over_flink": {"min": 3, "max": 50},
        "latency_ms": {"stretch_below": 30, "flink_above": 100},
    },
    "q3-scalejoin": {
        "cite": "§8.3, Fig. 8",
        "compares": "not run on Flink in the paper (\"Flink supports only parallel "
                    "equijoins\"): STRETCH vs ScaleJoin and 1T; STRETCH ≈ 1T at Π = 1, "
                    "throughput linear in Π",
    },
}


def _shapes(quick: bool) -> dict[str, dict[str, Any]]:
    """Per shape: the stretchflow query, its parameters, the input (generator, rows, rate)."""
    return {
        "q1-wordcount": {"query": "wordcount", "params": dict(WINDOW),
                         "input": ("tweets", 1_000 if quick else 5_000, 1000.0)},
        "q1-paircount": {"query": "paircount", "params": {**WINDOW, "distance": 3},
                         "input": ("tweets", 300 if quick else 1_000, 1000.0)},
        "q2-forward": {"query": "forward", "params": {},
                       "input": ("bandjoin", 1_000 if quick else 10_000, 5000.0)},
        # rate 100 t/s per stream, window 30 s: ~3 000 tuples per window per stream
        "q3-scalejoin": {"query": "scalejoin",
                         "params": {"window": 30_000, "band": 10, "keys": 2},
                         "input": ("bandjoin", 1_000 if quick else 5_000, 100.0),
                         "extra": (SQL_VARIANT,)},
    }


def _write_inputs(kind: str, rows: int, rate: float, tmp: Path, seed: int) -> list[Path]:
    from stretchflow.io.generators import bandjoin, tweets, write_table

    if kind == "tweets":
        p = tmp / f"tweets-{rows}.jsonl"
        write_table(tweets(rows, seed=seed, rate=rate), p)
        return [p]
    left, right = bandjoin(rows, seed=seed, rate=rate)
    paths = [tmp / f"bandjoin-{rows}-{rate:g}-{side}.jsonl" for side in ("left", "right")]
    write_table(left, paths[0])
    write_table(right, paths[1])
    return paths


def _stretchflow_cmd(engine: str, parallelism: int | None, query: str, inputs: list[Path],
                     out: Path, params: dict[str, Any], peak: Path) -> list[str]:
    cmd = command(peak, "stretchflow", "run", query,
                  *(a for p in inputs for a in ("--input", str(p))), "--output", str(out),
                  "--engine", engine,
                  *(a for k, v in params.items() for a in ("--param", f"{k}={v}")))
    return cmd + (["--parallelism", str(parallelism)] if parallelism else [])


def _flink_cmd(exe: Path, shape: str, variant: str, inputs: list[Path], out: Path,
               params: dict[str, Any]) -> list[str]:
    parallelism = int(variant[-1])
    if shape.startswith("q1-"):
        return [str(exe), str(PROGRAMS / "pyflink_wc.py"), shape[3:], str(inputs[0]),
                str(out), *(f"{k}={v}" for k, v in params.items()), "api=datastream",
                f"parallelism={parallelism}"]
    prog = "forward" if shape == "q2-forward" else "scalejoin"
    extra = [f"{k}={params[k]}" for k in ("window", "band") if k in params]
    # the DataStream ScaleJoin's logical instances: 4 per parallel instance (the copies of
    # every tuple are the SN cost); stretchflow's keys parameter is its own storage keys
    extra += ["api=sql"] if "sql" in variant else ([f"keys={4 * parallelism}"]
                                                    if prog == "scalejoin" else [])
    return [str(exe), str(PROGRAMS / "pyflink_q.py"), prog, *map(str, inputs), str(out),
            f"parallelism={parallelism}", *extra]


def _run_stretchflow(cmd: list[str], peak: Path, timeout: float) -> dict[str, Any]:
    r = run_process(cmd, timeout)
    if peak.exists():  # bench/peak.py: the child's VmHWM at exit, which sampling can miss
        r["peak_rss_mb"] = max(r["peak_rss_mb"], float(peak.read_text()))
    if r["code"] != 0:
        raise RuntimeError(f"exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    m = _SUMMARY.search(r["stderr"])
    if m is None:
        raise RuntimeError(f"no run summary in its output: {r['stderr'][-500:]}")
    n, rate = int(m.group(1).replace(",", "")), int(m.group(3).replace(",", ""))
    r["own_s"] = n / rate if rate else float(m.group(2))
    lat = _LATENCY.search(r["stderr"])
    r["latency_ms"] = ({"p50": float(lat.group(1)), "p99": float(lat.group(2)),
                        "max": float(lat.group(3)), "n": int(lat.group(4).replace(",", "")),
                        "kind": "sampled outputs (run summary)"} if lat else None)
    return r


def _run_flink(cmd: list[str], exe: Path, timeout: float) -> dict[str, Any]:
    # the venv first on PATH: what PyFlink starts as `python` is the venv's
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    r = run_process(cmd, timeout, env=env)
    if r["code"] != 0:
        raise RuntimeError(f"exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    report = json.loads(r["stdout"].strip().splitlines()[-1])
    r["report"] = report
    # Q2's span (first tuple in, last written) excludes the mini-cluster's start; the others
    # only have the program's whole elapsed time
    r["own_s"] = float(report.get("span_s") or report["elapsed_s"])
    r["own_kind"] = "span" if report.get("span_s") else "elapsed, mini-cluster start included"
    r["latency_ms"] = ({**report["latency_ms"], "kind": "every tuple, write - entry"}
                       if report.get("latency_ms") else None)
    return r


def _one_shape(shape: str, spec: dict[str, Any], tmp: Path, variants: list[str],
               exe: Path | None, rounds: int, seed: int, timeout: float,
               progress: Any) -> dict[str, Any]:
    kind, rows, rate = spec["input"]
    inputs = _write_inputs(kind, rows, rate, tmp, seed)
    query, params = spec["query"], spec["params"]
    ref_out = tmp / f"{shape}-reference.jsonl"
    peak = ref_out.with_suffix(".peak")
    ref = _run_stretchflow(_stretchflow_cmd("reference", None, query, inputs, ref_out, params,
                                            peak), peak, timeout)
    tuples_in = int(_SUMMARY.search(ref["stderr"]).group(1).replace(",", ""))
    expected = by_ts(ref_out)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    failed: dict[str, str] = {}
    for r in range(rounds):
        order = rotation(variants, r)
        for v in order:
            if v in failed:
                continue
            if progress:
                progress(f"{NAME} {shape}: round {r + 1}/{rounds}, {v}")
            out = tmp / f"{shape}-{v}.jsonl"
            out.unlink(missing_ok=True)
            par = int(v[-1])
            try:
                with repeat_probe() as probe:
                    if v.startswith("vsn"):
                        peak = out.with_suffix(".peak")
                        res = _run_stretchflow(_stretchflow_cmd("vsn", par, query, inputs, out,
                                                                params, peak), peak, timeout)
                    else:
                        assert exe is not None
                        res = _run_flink(_flink_cmd(exe, shape, v, inputs, out, params), exe,
                                         timeout)
            except (RuntimeError, ValueError, OSError, IndexError, KeyError) as e:
                failed[v] = f"failed: {e}"[-2000:]
                continue
            runs[v].append({"wall_s": res["wall_s"], "own_s": res["own_s"],
                            "peak_rss_mb": res["peak_rss_mb"],
                            "tree_rss_peak_mb": res["tree_rss_peak_mb"],
                            "latency_ms": res["latency_ms"], "report": res.get("report"),
                            "own_kind": res.get("own_kind", "run summary"),
                            "correctness": compare(expected, by_ts(out)), "probe": probe})
    stats: dict[str, Any] = {"tuples_in": tuples_in, "rows_out": ref_out.read_bytes().count(b"\n"),
                             "input": {"kind": kind, "rows_per_stream": rows, "rate": rate},
                             "query": query, "params": params, **failed}
    for v in variants:
        if v in failed or not runs[v]:
            continue
        vr = runs[v]
        wall = summarize([x["wall_s"] for x in vr])
        own = summarize([x["own_s"] for x in vr])
        checks = [x["correctness"] for x in vr]
        worst = max(checks, key=lambda c: c["missing_rows"] + c["extra_rows"])
        lats = [x["latency_ms"] for x in vr if x["latency_ms"]]
        s = stats[v] = {
            "wall_s": wall, "own_s": own,
            "tuples_per_s": {"wall": tuples_in / wall["median"], "own": tuples_in / own["median"]},
            "tuples_per_s_own": summarize([tuples_in / x["own_s"] for x in vr]),
            "peak_rss_mb": summarize([x["peak_rss_mb"] for x in vr]),
            "tree_rss_peak_mb": summarize([x["tree_rss_peak_mb"] for x in vr]),
            # the round with the median p99 (the lower middle one), one round's own numbers
            "latency_ms": sorted(lats, key=lambda d: d["p99"])[(len(lats) - 1) // 2] if lats
            else None,
            "correctness": {**worst, "rounds_correct": sum(c["correct"] for c in checks),
                            "rounds": len(checks)},
            "runs": [{k: x[k] for k in ("wall_s", "own_s", "probe")} for x in vr],
            "own_kind": vr[-1].get("own_kind", "run summary"),
        }
        if v.startswith("flink"):
            rep = vr[-1]["report"] or {}
            s["settings"] = rep.get("settings", {})
            for k in ("plan_joins", "single_instance_join"):
                if k in rep:
                    s[k] = rep[k]
            if "sorted_per_instance" in rep:
                s["sorted_per_instance"] = all(x["report"]["sorted_per_instance"] for x in vr)
    ratios: dict[str, Any] = {}
    for p in (1, 2):  # > 1: stretchflow faster (ratio of median times)
        a, b = stats.get(f"vsn{p}"), stats.get(f"flink{p}")
        if isinstance(a, dict) and isinstance(b, dict):
            ratios[f"vsn{p}_over_flink{p}"] = {
                m: b[m]["median"] / a[m]["median"] for m in ("wall_s", "own_s")}
            # beside the ratio of medians: the median of the rounds' own ratios
            ratios[f"vsn{p}_over_flink{p}"]["own_s_per_round"] = summarize(
                [f["own_s"] / v["own_s"] for v, f in zip(a["runs"], b["runs"], strict=False)])
    stats["throughput_ratios"] = ratios
    return stats


def _pyflink(quick: bool, progress: Any) -> tuple[Path | None, str]:
    """The PyFlink venv's python, or None and why. ``--quick`` never installs (minutes of
    download): it uses the venv if ``bench peers`` or a full run made it."""
    if (why := _java_missing()) is not None:
        return None, f"not installed: {why}"
    peer = PEERS["pyflink-datastream"]
    cache = cache_dir()
    venv = cache / peer.venv
    marker = venv / ".stretchflow-requirements"
    if quick and not (marker.exists()
                      and marker.read_text() == "\n".join(peer.requirements) + "\n"):
        return None, (f"not installed: {venv} is missing and --quick does not install it "
                      f"(the full run or `stretchflow bench peers` does)")
    cache.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(f"{NAME}: venv {peer.venv}")
    return ensure_venv(peer, cache)


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Any = None, rounds: int | None = None, shapes: list[str] | None = None,
        sizes: dict[str, int] | None = None, timeout: float = 1200.0) -> Path:
    """Measures every shape, writes ``stretchflow-vs-flink.json`` and ``.png``; returns the
    JSON's path. ``sizes`` overrides the rows per stream of named shapes."""
    t_start = time.perf_counter()
    rounds = rounds or (1 if quick else 3)
    specs = _shapes(quick)
    for name, n in (sizes or {}).items():
        kind, _, rate = specs[name]["input"]
        specs[name]["input"] = (kind, n, rate)
    names = shapes or list(DEFAULT_SHAPES)
    exe, pyflink = _pyflink(quick, progress)
    variants = [v for v in VARIANTS if exe is not None or v.startswith("vsn")]
    metrics: dict[str, Any] = {"pyflink": pyflink}
    with tempfile.TemporaryDirectory(prefix="sf-vs-flink-") as tmp_s:
        for shape in names:
            extra = list(specs[shape].get("extra", ())) if exe is not None else []
            metrics[shape] = _one_shape(shape, specs[shape], Path(tmp_s), variants + extra, exe,
                                        rounds, seed, timeout, progress)
            if exe is None:
                metrics[shape].update({v: pyflink for v in ("flink1", "flink2",
                                                            *specs[shape].get("extra", ()))})
    metrics["total_s"] = time.perf_counter() - t_start
    params = {
        "quick": quick, "rounds": rounds, "seed": seed, "variants": list(VARIANTS),
        "shapes": {s: {"query": specs[s]["query"], "params": specs[s]["params"],
                       "input": dict(zip(("kind", "rows_per_stream", "rate"),
                                         specs[s]["input"], strict=True))} for s in names},
        "pyflink_venv": PEERS["pyflink-datastream"].venv,
        "programs": {"q1-wordcount": "peer_programs/pyflink_wc.py (api=datastream)",
                     "q1-paircount": "peer_programs/pyflink_wc.py (api=datastream)",
                     "q2-forward": "peer_programs/pyflink_q.py forward (DataStream)",
                     "q3-scalejoin": "peer_programs/pyflink_q.py scalejoin: flink1/2 DataStream "
                                     "ScaleJoin over 4 × parallelism logical instances, "
                                     f"{SQL_VARIANT} the SQL interval join"},
        "times": "wall_s: the whole process; own_s: stretchflow's run summary time, PyFlink "
                 "Q2 and DataStream Q3 first tuple in to last out, PyFlink Q1 and SQL Q3 the "
                 "program's elapsed time (mini-cluster start included; own_kind says which)",
        "expected": "the reference engine's output, per-timestamp multisets (every round)",
        "paper": PAPER,
    }
    png = draw(metrics, names, results_dir(out_dir) / f"{NAME}.png", quick)
    return write_result(NAME, params, metrics, out_dir, plot=png.name)


def draw(metrics: dict[str, Any], shapes: list[str], path: Path, quick: bool) -> Path:
    """One panel per shape: tuples/s (own time; median, min–max bars, log scale) of each
    variant, a cross over a bar whose output differed from the reference's; the paper's
    Q2 numbers (Fig. 7) as dashed lines on the Q2 panel."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(shapes), figsize=(4.0 * len(shapes), 4.4), dpi=110,
                             squeeze=False)
    colors = {"vsn1": "tab:blue", "vsn2": "tab:cyan", "flink1": "tab:red", "flink2": "tab:orange",
              SQL_VARIANT: "tab:purple"}
    for ax, shape in zip(axes[0], shapes, strict=True):
        m = metrics[shape]
        shown = [*VARIANTS, *([SQL_VARIANT] if SQL_VARIANT in m else [])]
        for k, v in enumerate(shown):
            s = m.get(v)
            if not isinstance(s, dict):
                ax.text(k, 1, "not run", rotation=90, ha="center", va="bottom", fontsize=8)
                continue
            t = s["tuples_per_s_own"]
            # hatched: PyFlink's own time there includes its mini-cluster's start
            ax.bar(k, t["median"], color=colors[v],
                   hatch="//" if s.get("own_kind", "").startswith("elapsed") else None,
                   yerr=[[t["median"] - t["min"]], [t["max"] - t["median"]]], capsize=3)
            if not s["correctness"]["correct"]:
                ax.plot(k, t["median"], "kx", markersize=12)
        if shape == "q2-forward":
            q2 = PAPER["q2-forward"]
            for key, color in (("stretch_tuples_per_s", "tab:blue"),
                               ("flink_tuples_per_s", "tab:red")):
                for y in q2[key].values():
                    ax.axhline(y, color=color, ls="--", lw=0.8)
            ax.text(0.02, 0.02, "dashed: paper Fig. 7 (36 cores, Java)", fontsize=7,
                    transform=ax.transAxes)
        ax.set_xticks(range(len(shown)), shown, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{shape} ({m['tuples_in']:,} tuples)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("input tuples/s (own time)")
    fig.suptitle("STRETCH (stretchflow vsn) vs Flink (PyFlink), whole processes; hatched: "
                 "own time includes Flink's start-up", fontsize=10)
    return save_figure(plt, fig, path, quick)
