"""What every benchmark result records: the machine, versions, the git commit, parameters, and
metrics as min/median/max over repeats, and (where a benchmark wraps its repeats in
:func:`repeat_probe`) the load around each repeat and whether the machine was quiet. Results are
JSON files under ``benchmarks/results/``."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from stretchflow.runtime import procfs

#: the repository's top level: this package lives in ``benchmarks/stretchflow_bench/`` of a
#: clone (it is a dev-only package, installed editable from there), never inside stretchflow
ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path("benchmarks/results")


def rotation(variants: list[Any] | tuple[Any, ...], r: int) -> list[Any]:
    """Round ``r``'s order of ``variants``: each round starts one later, so that no variant
    always runs first (warm caches) or last (a machine that drifts during a round).

    >>> rotation(("a", "b", "c"), 4)
    ['b', 'c', 'a']
    """
    k = r % len(variants)
    return list(variants[k:]) + list(variants[:k])

#: "quiet" thresholds (see :func:`quiet`): other processes' CPU at most this fraction of a
#: repeat's wall time, and the 1-minute load before the first repeat at most this many loads
#: per CPU
QUIET_OTHER_CPU_FRACTION = 0.10
QUIET_LOAD_PER_CPU = 0.5
#: what a repeat's other-CPU reading may hold with nothing else running: it is /proc/stat's
#: busy time minus our processes' times, each counted in 10 ms ticks, so their difference
#: rounds by a tick or two. Measured on the idle 2-core machine (2026-12-07, a busy loop of
#: 40 ms, 0.2 s and 1 s in repeat_probe, 68 repeats): 0 ticks in 54, 1 in 12, 2 in 2. Without
#: this allowance a benchmark of many short repeats (ordered-heuristics: 40-190 ms) can never
#: be quiet; with it, the whole run's other CPU must still be within the fraction.
QUIET_RESOLUTION_S = 0.02

#: the keys a probe dict holds; :func:`write_result` finds probes in a result by them
PROBE_KEYS = frozenset({"load_before", "load_after", "wall_s", "own_cpu_s", "other_cpu_s"})

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine() -> dict[str, Any]:
    """The machine and software the numbers were measured on."""
    versions = {}
    for pkg in ("stretchflow", "numpy", "pyarrow", "orjson", "pyspark"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
        "versions": versions,
    }



def git_commit() -> tuple[str | None, bool | None]:
    """The commit HEAD of the checkout the package runs from and whether its work tree has
    changes (``None, None`` outside a git checkout or without git). Results files do not
    count: a benchmark writes them (its plot, before its JSON) while it runs."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip() or None, bool(dirty.stdout.strip()) if dirty.returncode == 0 \
        else None


def _busy_cpu_s() -> float | None:
    """CPU seconds every process on the machine has spent busy since boot (``/proc/stat``'s
    first line without idle and iowait; guest time is already inside user), or None off
    Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _live_descendants_cpu_s(root: int) -> float:
    """CPU seconds of the live descendants of ``root`` (each one's own time and that of its
    reaped children), from ``/proc/PID/stat``. A descendant that exited and was reaped is in
    ``os.times()``'s children fields instead."""
    cpu: dict[int, float] = {}
    children: dict[int, list[int]] = {}
    for pid in procfs.pids():
        rest = procfs.stat_fields(pid)
        if rest is None:
            continue  # exited while we scanned
        children.setdefault(int(rest[1]), []).append(pid)
        cpu[pid] = procfs.cpu_ticks(rest) / _TICK
    return sum(cpu.get(pid, 0.0) for pid in procfs.descendants(root, children))


def _own_tree_cpu_s() -> float:
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system
            + _live_descendants_cpu_s(os.getpid()))


@contextmanager
def repeat_probe() -> Iterator[dict[str, Any]]:
    """Measures what else ran on the machine during one repeat of a benchmark::

        with repeat_probe() as probe:
            run_once()
        repeats.append({"elapsed_s": ..., "probe": probe})

    On exit the dict holds ``load_before`` / ``load_after`` (1-minute load average),
    ``wall_s``, ``own_cpu_s`` (this process, its threads and its child processes, live or
    reaped) and ``other_cpu_s`` (every other process's CPU time during the repeat:
    ``/proc/stat``'s busy time minus our own), both in seconds at the kernel's 10 ms tick, and
    ``cpus``. ``other_cpu_s`` is None where ``/proc/stat`` is not readable (not Linux)."""
    probe: dict[str, Any] = {"load_before": os.getloadavg()[0], "cpus": os.cpu_count()}
    busy0, own0, t0 = _busy_cpu_s(), _own_tree_cpu_s(), time.perf_counter()
    try:
        yield probe
    finally:
        wall = time.perf_counter() - t0
        busy1, own1 = _busy_cpu_s(), _own_tree_cpu_s()
        probe["load_after"] = os.getloadavg()[0]
        probe["wall_s"] = wall
        probe["own_cpu_s"] = own1 - own0
        # tick rounding can make the difference a tick or two negative on an idle machine
        probe["other_cpu_s"] = (max(0.0, (busy1 - busy0) - (own1 - own0))
                                if busy0 is not None and busy1 is not None else None)


def find_probes(obj: Any) -> list[dict[str, Any]]:
    """Every probe dict (:func:`repeat_probe`) anywhere inside a result's metrics."""
    if isinstance(obj, dict):
        if PROBE_KEYS <= obj.keys():
            return [obj]
        return [p for v in obj.values() for p in find_probes(v)]
    if isinstance(obj, list):
        return [p for v in obj for p in find_probes(v)]
    return []


def quiet(probes: list[dict[str, Any]]) -> bool | None:
    """Whether the machine was quiet during a benchmark, measured: every repeat's other
    processes used at most ``QUIET_OTHER_CPU_FRACTION`` of its wall time in CPU (give or take
    the counters' resolution, ``QUIET_RESOLUTION_S``), so did all repeats together (without
    that allowance), and the 1-minute load average before the first repeat was at most
    ``QUIET_LOAD_PER_CPU`` per CPU. Only the first repeat's load counts: the load average
    trails by a minute and later repeats' includes the benchmark's own earlier work. None
    when nothing was probed."""
    if not probes or any(p.get("other_cpu_s") is None for p in probes):
        return None
    first = probes[0]
    f = QUIET_OTHER_CPU_FRACTION
    return (first["load_before"] <= QUIET_LOAD_PER_CPU * (first.get("cpus") or 1)
            and all(p["other_cpu_s"] <= f * p["wall_s"] + QUIET_RESOLUTION_S for p in probes)
            and sum(p["other_cpu_s"] for p in probes) <= f * sum(p["wall_s"] for p in probes))


def env_list(name: str) -> list[str] | None:
    """The comma-separated items of environment variable ``name`` (how a benchmark's
    selection is given: ``bench run`` takes no parameters), or None when it is unset or
    empty."""
    raw = os.environ.get(name)
    return [x.strip() for x in raw.split(",") if x.strip()] if raw else None


def say_progress(variable: str, progress: Callable[[str], None] | None = None
                 ) -> Callable[[str], None]:
    """Where a benchmark's progress lines go: ``progress`` when given, else stderr with the
    time when the environment variable ``variable`` is ``1``, else nowhere."""
    if progress is not None:
        return progress
    if os.environ.get(variable) == "1":
        def say(msg: str) -> None:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
        return say
    return lambda _: None


def summarize(values: list[float]) -> dict[str, float]:
    """min / median / max of a metric over repeats."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def results_dir(out_dir: str | os.PathLike | None = None) -> Path:
    """``out_dir`` (default :data:`RESULTS_DIR`), created if missing: where a result's JSON
    and its figure go."""
    d = Path(out_dir) if out_dir is not None else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_result(name: str, params: dict[str, Any], metrics: dict[str, Any],
                 out_dir: str | os.PathLike | None = None, **extra: Any) -> Path:
    """Writes ``<out_dir>/<name>.json`` and returns its path. The document records the git
    commit (``commit``, ``commit_dirty``) and ``quiet`` (:func:`quiet` over the probes found
    in ``metrics``; None when the benchmark does not probe its repeats)."""
    path = results_dir(out_dir) / f"{name}.json"
    commit, dirty = git_commit()
    doc = {
        "benchmark": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "commit_dirty": dirty,
        "machine": machine(),
        "quiet": quiet(find_probes(metrics)),
        "parameters": params,
        "metrics": metrics,
        **extra,
    }
    from .plots import plot

    png = path.with_suffix(".png")
    if plot(name, metrics, png, quick=bool(params.get("quick"))) is not None:
        doc["plot"] = png.name
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
