"""``stretchflow bench peers``: the sliding wordcount and paircount on peer systems — streamz,
Bytewax, PyFlink (SQL and DataStream) and Spark's DataFrame API — beside stretchflow's
engines, measured by the project (issue #20, item 4; docs/peers.md).

Each peer runs a standalone program of :mod:`.peer_programs` in its own virtualenv under the
cache directory (``$STRETCHFLOW_CACHE/peers/<venv>`` or ``~/.cache/stretchflow/peers/<venv>``,
``<venv>`` = ``<peer>-<version>``), created by ``python -m venv`` and ``pip install`` of pinned
versions and reused while its recorded requirements match; never the project's venv. A venv
that cannot be made is reported as ``"not installed: <reason>"`` and the other variants run.

Every variant is a whole process, timed as in :mod:`.speed`: rounds alternate the variants
(each round starts one later), the parent's wall clock around the process and the program's
own elapsed time are kept, and the 1-minute load average is recorded before and after each
round. Memory is sampled every 0.1 s from /proc: the largest VmHWM of one process of the
child's tree, and the peak summed RSS of the whole tree (JVMs and Python workers included).
Every output of every round is compared with the reference engine's as per-timestamp
multisets; a mismatch is reported with the numbers of missing and extra rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import repeat_probe, rotation, summarize, write_result
from .speed import _SUMMARY, _command, _commit, _orphans_counted, row_multiset

PROGRAMS = Path(__file__).resolve().parent / "peer_programs"
WINDOW = {"size": 120_000, "slide": 60_000}  # WS = 120 s, WA = 60 s (issue #20)
_ORJSON = "orjson==3.13.0"  # the peer programs parse JSON Lines with it, as stretchflow does


@dataclass(frozen=True)
class Peer:
    """A peer variant: the venv it runs in (``venv`` = ``<peer>-<version>``, shared by the
    variants of one system), the pinned requirements, its program and extra arguments."""

    venv: str
    requirements: tuple[str, ...]
    program: str
    args: tuple[str, ...] = ()
    quick: bool = False  # part of --quick
    needs_java: bool = False
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)


PEERS: dict[str, Peer] = {
    "streamz": Peer("streamz-0.6.6", ("streamz==0.6.6", _ORJSON), "streamz_wc.py", quick=True,
                    note="no event-time windows in streamz: accumulate() holds the instances"),
    "bytewax": Peer("bytewax-0.21.1", ("bytewax==0.21.1", _ORJSON), "bytewax_wc.py",
                    ("wait_ms=10000",), quick=True,
                    note="SlidingWindower + EventClock(wait_for_system_duration=10 s), 1 worker"),
    "bytewax-wait0": Peer("bytewax-0.21.1", ("bytewax==0.21.1", _ORJSON), "bytewax_wc.py",
                          ("wait_ms=0",), quick=True,
                          note="EventClock(wait_for_system_duration=0): the watermark also "
                               "advances with system time, so replayed tuples can be late"),
    "pyflink-sql": Peer("apache-flink-2.3.0", ("apache-flink==2.3.0",), "pyflink_wc.py",
                        ("api=sql", "parallelism=2"), needs_java=True,
                        note="HOP window TVF, Python UDTF tokens, parallelism 2"),
    "pyflink-datastream": Peer("apache-flink-2.3.0", ("apache-flink==2.3.0",), "pyflink_wc.py",
                               ("api=datastream", "parallelism=2"), needs_java=True,
                               note="SlidingEventTimeWindows + reduce, parallelism 2"),
    "spark-df": Peer("pyspark-4.3.0", ("pyspark==4.3.0",), "spark_df_wc.py",
                     ("master=local[2]",), needs_java=True,
                     note="batch DataFrame window() + groupBy().count(), local[2]"),
}

#: stretchflow's own variants (speed.py's names); the reference is the expected output
OWN_QUICK = ("reference", "1T")
OWN_FULL = ("reference", "1T", "vsn2")


def cache_dir() -> Path:
    base = os.environ.get("STRETCHFLOW_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "stretchflow") / "peers"


def ensure_venv(peer: Peer, cache: Path, python: str | None = None,
                timeout: float = 1200.0) -> tuple[Path | None, str]:
    """The venv's python (None on failure) and what happened ("reused", "installed in N s", or
    "not installed: <reason>"). A venv is reused only if its marker lists the same pins."""
    venv = cache / peer.venv
    marker = venv / ".stretchflow-requirements"
    exe = venv / "bin" / "python"
    want = "\n".join(peer.requirements) + "\n"
    if exe.exists() and marker.exists() and marker.read_text() == want:
        return exe, "reused"
    shutil.rmtree(venv, ignore_errors=True)  # half-made or other pins: start again
    t0 = time.perf_counter()
    steps = [[python or sys.executable, "-m", "venv", str(venv)],
             [str(exe), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *peer.requirements]]
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"not installed: {' '.join(cmd[:4])}: {e}"
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            err = "\n".join(ln for ln in proc.stderr.splitlines() if "is ignored" not in ln)
            return None, (f"not installed: {' '.join(cmd[:4])} exited {proc.returncode}: "
                          f"{err.strip()[-800:]}")
    marker.write_text(want)
    return exe, f"installed in {time.perf_counter() - t0:.1f} s"


def _tree_memory_mb(pid: int) -> tuple[float, float]:
    """(summed RSS of ``pid`` and its descendants, largest VmHWM among them), in MiB, from
    /proc (Linux; 0 when unreadable). VmHWM is a process's own peak RSS, reset by exec."""
    total = hwm = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]))
                    elif line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total / 1024, hwm / 1024


def run_process(cmd: list[str], timeout: float, env: dict[str, str] | None = None,
                interval: float = 0.1) -> dict[str, Any]:
    """Runs ``cmd`` to its end: exit code, stdout, stderr, wall time and memory sampled every
    ``interval`` s: ``peak_rss_mb``, the largest VmHWM of a single process of the tree (the
    child's own peak; ``ru_maxrss`` would not do: a child inherits its parent's from before
    exec), ``tree_rss_peak_mb``, the peak of the tree's summed RSS (JVMs and workers
    included), and ``series``, every sample of it as ``(s since the start, MiB)`` (a sample
    of 0, the process already gone, left out). Past ``timeout`` the child (only it, by its
    pid) is killed and ``timed_out`` is set. The processes the child leaves behind (a JVM,
    sn's fork server) are adopted and waited for after it (:func:`.speed._orphans_counted`),
    so their CPU time is this process's children's, not "other processes'" in a probe around
    the run (the first nexmark-1m run without this counted Spark's, Flink's and sn's work as
    another process's and was judged not quiet)."""
    with (_orphans_counted(), tempfile.TemporaryFile() as out,
          tempfile.TemporaryFile() as err):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        peak = [0.0, 0.0]
        series: list[tuple[float, float]] = []
        timed_out = False
        done = threading.Event()

        def sample() -> None:
            while True:
                t = time.perf_counter() - t0
                tree, hwm = _tree_memory_mb(proc.pid)
                peak[0], peak[1] = max(peak[0], tree), max(peak[1], hwm)
                if tree > 0:
                    series.append((t, tree))
                if done.wait(interval):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # only this child, by its pid
            proc.wait()
            timed_out = True
        finally:
            done.set()
        wall = time.perf_counter() - t0
        sampler.join()
        out.seek(0)
        err.seek(0)
        return {"code": proc.returncode, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace"), "wall_s": wall,
                "peak_rss_mb": peak[1], "tree_rss_peak_mb": peak[0], "series": series,
                "timed_out": timed_out}


def compare(expected: dict[int, Counter], got: dict[int, Counter]) -> dict[str, Any]:
    """Per-timestamp multiset comparison: rows missing from ``got`` and rows it has in excess
    (a row with a wrong count is one of each)."""
    missing = extra = 0
    bad_ts = 0
    for ts in expected.keys() | got.keys():
        e, g = expected.get(ts, Counter()), got.get(ts, Counter())
        m, x = sum((e - g).values()), sum((g - e).values())
        missing += m
        extra += x
        bad_ts += bool(m or x)
    return {"correct": missing == 0 and extra == 0, "missing_rows": missing,
            "extra_rows": extra, "timestamps_differing": bad_ts,
            "rows_expected": sum(sum(c.values()) for c in expected.values()),
            "rows_out": sum(sum(c.values()) for c in got.values())}


def by_ts(path: Path) -> dict[int, Counter]:
    """The output file as ``{ts: multiset of rows}`` (row fields sorted, ts included)."""
    out: dict[int, Counter] = {}
    for row, n in row_multiset(path).items():
        out.setdefault(dict(row)["ts"], Counter())[row] += n
    return out


def _own_run(variant: str, query: str, data: Path, out: Path, params: dict[str, Any],
             timeout: float) -> dict[str, Any]:
    peak = out.with_suffix(".peak")
    r = run_process(_command(variant, query, data, out, params, peak), timeout)
    if peak.exists():  # bench/peak.py: the child's VmHWM at exit, which sampling can miss
        r["peak_rss_mb"] = max(r["peak_rss_mb"], float(peak.read_text()))
    if r["code"] != 0:
        raise RuntimeError(f"stretchflow {variant} failed with exit code {r['code']}: "
                           f"{r['stderr'].strip()[-2000:]}")
    if variant == "1T":
        r["own_s"] = float(json.loads(r["stdout"])["elapsed_s"])
    else:
        m = _SUMMARY.search(r["stderr"])
        if m is None:
            raise RuntimeError(f"{variant}: no run summary in its output: {r['stderr'][-500:]}")
        r["own_s"] = float(m.group(1))
    return r


def _peer_run(peer: Peer, exe: Path, query: str, data: Path, out: Path,
              params: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [str(exe), str(PROGRAMS / peer.program), query, str(data), str(out),
           *(f"{k}={'inf' if v is None else v}" for k, v in params.items()), *peer.args]
    # the peer's venv first on PATH: tools that start `python` (PyFlink's workers) get its own
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    r = run_process(cmd, timeout, env={**env, **peer.env})
    if r["code"] != 0:
        raise RuntimeError(f"exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    report = json.loads(r["stdout"].strip().splitlines()[-1])
    r["own_s"] = float(report["elapsed_s"])
    r["report"] = report
    return r


def _rounds(query: str, data: Path, tmp: Path, variants: list[str], exes: dict[str, Path],
            params: dict[str, Any], rounds: int, timeout: float,
            progress: Any) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    checks: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    failed: dict[str, str] = {}
    load: list[dict[str, Any]] = []
    expected: dict[int, Counter] | None = None
    for r in range(rounds):
        before = os.getloadavg()[0]
        for v in rotation(variants, r):
            if v in failed:
                continue
            if progress:
                progress(f"peers {query}: round {r + 1}/{rounds}, {v}")
            out = tmp / f"{query}-{v}.jsonl"
            out.unlink(missing_ok=True)
            with repeat_probe() as probe:  # what else ran: the result's "quiet"
                if v in PEERS:
                    try:
                        res = _peer_run(PEERS[v], exes[v], query, data, out, params, timeout)
                    except (RuntimeError, ValueError, IndexError) as e:
                        failed[v] = f"failed: {str(e)[-1500:]}"  # a peer's failure: a result
                        continue
                else:
                    res = _own_run(v, query, data, out, params, timeout)
            res["probe"] = probe
            runs[v].append(res)
            if v == "reference" and expected is None:
                expected = by_ts(out)
        if expected is None:
            raise RuntimeError("the reference engine must be one of the variants")
        for v in variants:  # this round's outputs against the reference's
            if v not in failed and len(runs[v]) == r + 1:
                checks[v].append(compare(expected, by_ts(tmp / f"{query}-{v}.jsonl")))
        load.append({"round": r + 1, "before": before, "after": os.getloadavg()[0]})
    rows_in = sum(1 for line in data.read_bytes().splitlines() if line.strip())
    stats: dict[str, Any] = dict(failed)
    for v in variants:
        if v in failed:
            continue
        vr = runs[v]
        worst = max(checks[v], key=lambda c: c["missing_rows"] + c["extra_rows"])
        s = stats[v] = {
            "wall_s": summarize([x["wall_s"] for x in vr]),
            "own_s": summarize([x["own_s"] for x in vr]),
            "peak_rss_mb": summarize([x["peak_rss_mb"] for x in vr]),
            "tree_rss_peak_mb": summarize([x["tree_rss_peak_mb"] for x in vr]),
            # every round correct, else the round that was furthest off
            "correctness": {**worst, "rounds_correct": sum(c["correct"] for c in checks[v]),
                            "rounds": len(checks[v])},
            "probes": [x["probe"] for x in vr],
        }
        s["tuples_per_s"] = {m: rows_in / s[m]["median"] for m in ("wall_s", "own_s")}
        if v in PEERS:
            reports = [x["report"] for x in vr]
            s["settings"] = reports[-1].get("settings", {})
            if "late_items" in reports[-1]:
                s["late_items"] = [rep["late_items"] for rep in reports]
    for v in variants:
        if v in failed:
            continue
        for base in ("reference", "1T"):  # > 1: faster than base (ratio of median times)
            stats[v][f"throughput_vs_{base}"] = {
                m: stats[base][m]["median"] / stats[v][m]["median"] for m in ("wall_s", "own_s")}
    stats["loadavg_1min"] = load
    stats["rows_in"] = rows_in
    stats["rows_out"] = sum(sum(c.values()) for c in expected.values())
    return stats


def _java_missing() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "no Java runtime (java not on PATH, JAVA_HOME unset)"
    return None


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Any = None, peers: list[str] | None = None, rounds: int | None = None,
        workloads: dict[str, int] | None = None, timeout: float = 1800.0) -> Path:
    """Installs (or reuses) the peers' venvs, measures both queries, writes ``peers.json`` and
    ``peers.png``; returns the JSON's path."""
    from stretchflow.io.generators import tweets, write_table

    t_start = time.perf_counter()
    sizes = workloads or ({"wordcount": 5_000, "paircount": 1_000} if quick
                          else {"wordcount": 10_000, "paircount": 1_000})
    rounds = rounds or (2 if quick else 3)
    names = peers if peers is not None else [p for p, d in PEERS.items() if d.quick or not quick]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    installs: dict[str, str] = {}
    exes: dict[str, Path] = {}
    not_run: dict[str, str] = {}
    for name in names:
        peer = PEERS[name]
        if peer.needs_java and (why := _java_missing()) is not None:
            not_run[name] = f"not installed: {why}"
            continue
        if progress:
            progress(f"peers: venv {peer.venv}")
        exe, what = ensure_venv(peer, cache)
        installs.setdefault(peer.venv, what)
        if exe is None:
            not_run[name] = installs[peer.venv]
        else:
            exes[name] = exe
    install_s = time.perf_counter() - t_start
    own = list(OWN_QUICK if quick else OWN_FULL)
    variants = own + [n for n in names if n in exes]
    metrics: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for query, n in sizes.items():
            data = tmp / f"tweets-{n}.jsonl"
            if not data.exists():
                write_table(tweets(n, seed=seed), data)
            params = {**WINDOW, **({"distance": 3} if query == "paircount" else {})}
            metrics[query] = {"tweets": n, **_rounds(query, data, tmp, variants, exes, params,
                                                     rounds, timeout, progress)}
            metrics[query].update(not_run)
    metrics["venvs"] = installs
    metrics["install_s"] = install_s
    metrics["total_s"] = time.perf_counter() - t_start
    params_doc = {
        "quick": quick, "rounds": rounds, "seed": seed, "window": WINDOW,
        "workloads": {q: {"tweets": n, **WINDOW, **({"distance": 3} if q == "paircount"
                                                    else {})} for q, n in sizes.items()},
        "stretchflow_variants": own,
        "peers": {n: {"venv": PEERS[n].venv, "requirements": list(PEERS[n].requirements),
                      "program": f"stretchflow_bench/peer_programs/{PEERS[n].program}",
                      "args": list(PEERS[n].args), "note": PEERS[n].note} for n in names},
        "cache": str(cache),
        "expected": "the reference engine's output, per-timestamp multisets (every round)",
        "times": "wall_s: parent's wall clock around the whole process (start-up, JVM, "
                 "reading, writing); own_s: the program's own elapsed time as it reports it",
        "memory": "sampled every 0.1 s from /proc: peak_rss_mb, the largest VmHWM of one "
                  "process of the child's tree; tree_rss_peak_mb, the peak summed RSS of the "
                  "tree (a peak in the last 0.1 s of a process is missed)",
    }
    return write_result("peers", params_doc, metrics, out_dir, commit=_commit())
