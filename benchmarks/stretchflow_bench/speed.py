"""``stretchflow bench run speed``: every local engine, Spark and the hand-written pane loop
(:mod:`.onethread`, "1T") on the same generated tweets, as whole processes (issue #16).

Each variant is a fresh ``python -m stretchflow run ...`` (or ``python .../onethread.py ...``)
process, so start-up, reading JSON Lines and writing the output are all counted. Each child
runs under :mod:`.peak`, which records its own peak RSS and imports only the standard library;
the loop, run as a script, imports nothing of stretchflow. (Until 2026-11-26 both ran as
modules of the package, so the loop paid for importing ``stretchflow`` and
``stretchflow_bench``, about 80 ms here, and every ratio against it flattered the engines.)
Two times are kept per run: the parent's wall clock around the whole process, and the run's
own time that the child reports (the CLI summary's elapsed, from first read to last write;
the loop's own timer). Beside the wall time, the CPU time (user + system) of the child and of
every process it waited for, so that CPU / wall says how many cores a variant kept busy on
average ("cores_busy": 1.0 is one core all the time). Rounds alternate the variants, starting
each round one variant later, so that drift in the shared machine's load spreads over all of
them; the 1-minute load average is recorded before and after each round. Every output is
compared with the pane loop's as a multiset of rows (a row carries its ``ts``, so this is the
determinism contract's per-timestamp multiset).
"""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from .common import repeat_probe, results_dir, rotation, summarize, write_result
from .onethread import BASELINE
from .peak import command

#: the pane loop's file, run as a script (:mod:`.peak`)
_ONETHREAD = Path(__file__).with_name("onethread.py")

#: variant -> the ``stretchflow run`` engine flags (None: the hand-written pane loop)
VARIANTS: dict[str, list[str] | None] = {
    "1T": None,
    "reference": ["--engine", "reference"],
    "reference-tuple": ["--engine", "reference", "--columnar", "off"],
    "vsn1": ["--engine", "vsn", "--parallelism", "1"],
    "vsn2": ["--engine", "vsn", "--parallelism", "2"],
    "sn2-processes": ["--engine", "sn", "--parallelism", "2", "--channels", "processes"],
    "ordered2": ["--engine", "ordered", "--parallelism", "2"],
    "spark-local2": ["--engine", "spark", "--master", "local[2]"],
}
_SUMMARY = re.compile(r"tuples in, [\d,]+ out, ([\d.]+) s")
#: the longest one variant's process may run before the benchmark gives up on it (a hang must
#: fail, not stall the benchmark; the slowest variant takes well under a minute here)
CHILD_TIMEOUT_S = 1800.0


def _spark_missing() -> str | None:
    """Why the Spark variant cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "no Java runtime (java not on PATH, JAVA_HOME unset)"
    return None


def _command(variant: str, query: str, data: Path, out: Path, params: dict[str, Any],
             peak: Path) -> list[str]:
    """The child's command line, run through :mod:`.peak`, which writes its own peak RSS to
    ``peak`` (a child's rusage would carry this process's peak over). The pane loop runs as
    a script, so it imports the standard library and orjson only, not stretchflow's package;
    an engine variant runs ``python -m stretchflow run ...``, as a user would."""
    flags = VARIANTS[variant]
    if flags is None:
        return command(peak, _ONETHREAD, query, str(data), str(out),
                       *(f"{k}={v}" for k, v in params.items()), script=True)
    return command(peak, "stretchflow", "run", query, "--input", str(data),
                   "--output", str(out), *flags,
                   *(a for k, v in params.items() for a in ("--param", f"{k}={v}")))


def _children_cpu_s() -> tuple[float, float]:
    """User and system CPU seconds of every child this process has waited for so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


#: prctl's option that makes this process adopt its descendants' orphans (Linux >= 3.4)
_PR_SET_CHILD_SUBREAPER = 36
#: the longest a run's orphans are waited for after it (sn's fork server ends at once)
ORPHAN_WAIT_S = 30.0


@contextmanager
def _orphans_counted() -> Iterator[None]:
    """While the block runs, the processes a child leaves behind are adopted by this process
    (Linux's child subreaper), not by init; at its end they are waited for (at most
    :data:`ORPHAN_WAIT_S`), so that their CPU time, and that of the processes they waited
    for, lands in this process's children's usage. Why: sn's process channels are children
    of multiprocessing's fork server, which the run's process starts and never waits for;
    without this a run's CPU time left out the channels (about half of sn's, issue #16)."""
    import ctypes

    from stretchflow.runtime import procfs

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        on = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the children's usage is all there is
        on = False
    me = os.getpid()
    before = set(procfs.children_map().get(me, ()))
    try:
        yield
    finally:
        if on:
            deadline = time.monotonic() + ORPHAN_WAIT_S
            adopted = set(procfs.children_map().get(me, ())) - before
            while adopted and time.monotonic() < deadline:
                for pid in list(adopted):
                    try:
                        done, _ = os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        done = pid
                    if done:
                        adopted.discard(pid)
                # their own children, adopted when they ended
                adopted |= set(procfs.children_map().get(me, ())) - before
                if adopted:
                    time.sleep(0.01)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def summary_own_s(label: str, stdout: str, stderr: str) -> float:
    """A ``stretchflow run``'s own time: the elapsed of its run summary (on stderr)."""
    m = _SUMMARY.search(stderr)
    if m is None:
        raise RuntimeError(f"{label}: no run summary in its output: {stderr[-500:]}")
    return float(m.group(1))


def reported_own_s(label: str, stdout: str, stderr: str) -> float:
    """A baseline program's own time: ``elapsed_s`` of the JSON on its last stdout line."""
    try:
        return float(orjson.loads(stdout.strip().splitlines()[-1])["elapsed_s"])
    except (IndexError, KeyError, ValueError, TypeError) as e:
        raise RuntimeError(f"{label}: no elapsed_s report on its stdout: {stdout[-500:]}") from e


def measure(label: str, cmd: list[str], peak: Path,
            own: Any = summary_own_s, env: dict[str, str] | None = None,
            timeout: float = CHILD_TIMEOUT_S) -> dict[str, Any]:
    """One whole process ``cmd`` (run under :mod:`.peak`, writing its peak RSS to ``peak``):
    the parent's wall time, the run's own time (``own(label, stdout, stderr)``), the
    process's own peak RSS (Spark's JVM is another process, not counted) and its CPU time
    (user + system, with its threads and every process it started, also those it left
    behind (:func:`_orphans_counted`); the difference of this process's children's usage
    around the one child, since the variants run one at a time); ``stdout`` too. A failure
    or a run past ``timeout`` is a RuntimeError naming ``label``."""
    u0, s0 = _children_cpu_s()
    with _orphans_counted():
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{label} ({' '.join(cmd)}) ran longer than "
                               f"{timeout:.0f} s and was killed") from e
        wall = time.perf_counter() - t0
    u1, s1 = _children_cpu_s()
    if proc.returncode != 0:
        raise RuntimeError(f"{label} ({' '.join(cmd)}) failed with exit code "
                           f"{proc.returncode}: {proc.stderr.strip()[-2000:]}")
    cpu = (u1 - u0) + (s1 - s0)
    return {"wall_s": wall, "own_s": own(label, proc.stdout, proc.stderr),
            "peak_rss_mb": float(peak.read_text()), "cpu_s": cpu, "user_s": u1 - u0,
            "sys_s": s1 - s0, "cores_busy": cpu / wall, "stdout": proc.stdout}


def _run_once(variant: str, query: str, data: Path, out: Path,
              params: dict[str, Any]) -> dict[str, float]:
    """One whole process of ``variant`` (:func:`measure`)."""
    peak = out.with_suffix(".peak")
    r = measure(variant, _command(variant, query, data, out, params, peak), peak,
                reported_own_s if VARIANTS[variant] is None else summary_own_s)
    del r["stdout"]
    return r


#: what :func:`_run_once` measures of the CPU, summarized per variant like the times:
#: ``cores_busy`` is each run's CPU / wall (its median, not a ratio of medians)
_CPU_KEYS = ("cpu_s", "user_s", "sys_s", "cores_busy")


def row_multiset(path: Path) -> Counter:
    """The output as a multiset of rows, each row canonical (its fields sorted), so two files
    with the same rows in another order or field order compare equal."""
    loads = orjson.loads
    with open(path, "rb") as f:
        return Counter(tuple(sorted(loads(line).items())) for line in f if line.strip())


def _rounds(query: str, data: Path, tmp: Path, variants: list[str], params: dict[str, Any],
            rounds: int, progress: Any) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    identical = {v: True for v in variants}
    load: list[dict[str, float]] = []
    failed: dict[str, str] = {}
    expected: Counter | None = None
    probes: list[dict[str, Any]] = []
    for r in range(rounds):
        before = os.getloadavg()[0]
        order = rotation(variants, r)
        with repeat_probe() as probe:  # load and other processes' CPU during the round
            for v in order:
                if progress:
                    progress(f"speed {query}: round {r + 1}/{rounds}, {v}")
                if v in failed:
                    continue
                out = tmp / f"{query}-{v}.jsonl"
                try:
                    runs[v].append(_run_once(v, query, data, out, params))
                except RuntimeError as e:
                    if not v.startswith("spark"):
                        raise
                    # Spark depends on a JVM and its own start-up: its failure is recorded,
                    # and the local engines are still measured
                    failed[v] = f"skipped: failed: {str(e)[-600:]}"
                if v == "1T" and expected is None:
                    expected = row_multiset(out)
        probes.append(probe)
        if expected is None:
            raise RuntimeError("the pane loop must be one of the variants")
        for v in variants:  # each variant's output of this round against the pane loop's
            if v in failed:
                continue
            identical[v] = identical[v] and row_multiset(tmp / f"{query}-{v}.jsonl") == expected
        load.append({"round": r + 1, "before": before, "after": os.getloadavg()[0]})
    stats: dict[str, Any] = dict(failed)
    variants = [v for v in variants if v not in failed]
    for v in variants:
        stats[v] = {"wall_s": summarize([x["wall_s"] for x in runs[v]]),
                    "own_s": summarize([x["own_s"] for x in runs[v]]),
                    "peak_rss_mb": summarize([x["peak_rss_mb"] for x in runs[v]]),
                    **{k: summarize([x[k] for x in runs[v]]) for k in _CPU_KEYS},
                    "outputs_identical": identical[v]}
    for v in variants:
        # > 1 means faster than the pane loop (ratio of the loop's median time to this one's)
        stats[v]["speedup_vs_1T"] = {
            m: stats["1T"][m]["median"] / stats[v][m]["median"] for m in ("wall_s", "own_s")}
    if "vsn1" in stats and "vsn2" in stats:
        stats["vsn2_over_vsn1"] = {  # the speed-up of the second instance
            m: stats["vsn1"][m]["median"] / stats["vsn2"][m]["median"] for m in ("wall_s", "own_s")}
    if "reference" in stats and "reference-tuple" in stats:
        stats["reference_over_tuple_path"] = {  # the columnar path's speed-up on its own
            m: stats["reference-tuple"][m]["median"] / stats["reference"][m]["median"]
            for m in ("wall_s", "own_s")}
    stats["loadavg_1min"] = load
    stats["probes"] = probes
    stats["rows_out"] = sum(expected.values()) if expected is not None else 0
    return stats


def _commit() -> str | None:
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Any = None) -> Path:
    """Measures both queries and writes ``speed.json`` and ``speed.png``; returns the JSON."""
    from stretchflow.io.generators import tweets, write_table

    workloads = {  # query -> (tweets, parameters of both the CLI and the loop)
        "wordcount": (5_000 if quick else 200_000, {"size": 120_000, "slide": 60_000}),
        "paircount": (1_000 if quick else 20_000,
                      {"size": 120_000, "slide": 60_000, "distance": 3}),
    }
    rounds = 2 if quick else 5
    variants = [v for v in VARIANTS if not (quick and v.startswith("spark"))]
    skipped: dict[str, str] = {}
    if quick:
        skipped["spark-local2"] = "skipped: --quick (Spark's start-up dominates a smoke test)"
    elif (why := _spark_missing()) is not None:
        skipped["spark-local2"] = f"skipped: {why}"
        variants.remove("spark-local2")
    metrics: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for query, (rows, params) in workloads.items():
            data = tmp / f"tweets-{rows}.jsonl"
            if not data.exists():
                write_table(tweets(rows, seed=seed), data)
            metrics[query] = {"rows": rows, **_rounds(query, data, tmp, variants, params,
                                                        rounds, progress)}
            for v, why in skipped.items():
                metrics[query][v] = why
        if not quick:
            metrics["memory"] = _memory(tmp, seed, progress)
    params_doc = {
        "quick": quick, "rounds": rounds, "seed": seed,
        "workloads": {q: {"tweets": n, **p} for q, (n, p) in workloads.items()},
        "variants": {v: ("pane loop" if f is None else " ".join(f)) for v, f in VARIANTS.items()},
        "baseline_1T": BASELINE,
        "input": "generated tweets, JSON Lines", "output": "JSON Lines file",
        "children": "each a fresh process under bench/peak.py started by path (standard "
                    "library only); engines: python -m stretchflow run ...; the pane loop: "
                    "python .../bench/onethread.py ... (imports the standard library and orjson, "
                    "nothing of stretchflow)",
        "times": "wall_s: parent's wall clock around the whole process; own_s: the run's own "
                 "time as the child reports it (CLI summary's elapsed, 10 ms resolution); "
                 "cpu_s (user_s + sys_s): CPU time of the process, its threads and every "
                 "process it started, also those it left behind, which the benchmark adopts "
                 "and waits for (Linux's child subreaper: sn's fork server and its channels; "
                 "before 2026-11-26 these were missing, so sn's cpu_s and cores_busy were "
                 "about half the truth); cores_busy: cpu_s / wall_s of each run",
    }
    plot(metrics, results_dir(out_dir) / "speed.png", quick)
    return write_result("speed", params_doc, metrics, out_dir, commit=_commit(),
                        plot="speed.png")


#: tweets of the memory comparison (issue #16: "1 000 000 tweets of wordcount: peak RSS no
#: higher than today's tuple path")
MEMORY_TWEETS = 1_000_000


def _memory(tmp: Path, seed: int, progress: Any, rounds: int = 3) -> dict[str, Any]:
    """Peak RSS and time of wordcount on :data:`MEMORY_TWEETS` tweets, the reference engine's
    columnar path against its tuple path (``--columnar off``), alternating; outputs compared."""
    from stretchflow.io.generators import tweets, write_table

    data = tmp / f"tweets-{MEMORY_TWEETS}.jsonl"
    write_table(tweets(MEMORY_TWEETS, seed=seed), data)
    params = {"size": 120_000, "slide": 60_000}
    runs: dict[str, list[dict[str, float]]] = {"reference": [], "reference-tuple": []}
    probes = []
    for r in range(rounds):
        with repeat_probe() as probe:
            for v in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                if progress:
                    progress(f"speed memory: round {r + 1}/{rounds}, {v}")
                runs[v].append(_run_once(v, "wordcount", data, tmp / f"mem-{v}.jsonl", params))
        probes.append(probe)
    same = row_multiset(tmp / "mem-reference.jsonl") == \
        row_multiset(tmp / "mem-reference-tuple.jsonl")
    out: dict[str, Any] = {"tweets": MEMORY_TWEETS, "outputs_identical": same,
                           "probes": probes}
    for v, rs in runs.items():
        out[v] = {k: summarize([x[k] for x in rs])
                  for k in ("peak_rss_mb", "wall_s", "own_s", *_CPU_KEYS)}
    out["rss_columnar_over_tuple"] = (out["reference"]["peak_rss_mb"]["median"]
                                      / out["reference-tuple"]["peak_rss_mb"]["median"])
    return out


def plot(metrics: dict[str, Any], path: Path, quick: bool) -> Path:
    """Per query, bars of the median whole-process time of each variant with min–max whiskers,
    the run's own time beside it (``stretchflow_bench/plots.py``'s conventions)."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    queries = [q for q in metrics if q != "memory"]
    fig, axes = plt.subplots(1, len(queries), figsize=(6.4 * len(queries), 3.8), dpi=110)
    for ax, q in zip(axes if len(queries) > 1 else [axes], queries, strict=True):
        m = metrics[q]
        names = [v for v in VARIANTS if isinstance(m.get(v), dict)]
        xs = range(len(names))
        for off, key, label in ((-0.2, "wall_s", "whole process"), (0.2, "own_s", "run's own")):
            med = [m[n][key]["median"] for n in names]
            lo = [a - m[n][key]["min"] for a, n in zip(med, names, strict=True)]
            hi = [m[n][key]["max"] - a for a, n in zip(med, names, strict=True)]
            ax.bar([x + off for x in xs], med, width=0.4, yerr=[lo, hi], capsize=3, label=label)
        ax.set_xticks(list(xs), names, rotation=30, ha="right")
        ax.set_ylabel("time (s; median, min-max)")
        title = f"{q}, {m['rows']:,} tweets"
        if "vsn2_over_vsn1" in m:
            title += f"; vsn Π=2/Π=1 {m['vsn2_over_vsn1']['own_s']:.2f}x"
        ax.set_title(title, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(plt, fig, path, quick)
