"""What every benchmark result records: the machine, versions, parameters, and metrics as
min/median/max over repeats. Results are JSON files under ``benchmarks/results/``."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path("benchmarks/results")


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


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB. VmHWM is reset by exec, unlike
    ``ru_maxrss``, which a child started with fork+exec inherits from its parent on Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def summarize(values: list[float]) -> dict[str, float]:
    """min / median / max of a metric over repeats."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def write_result(name: str, params: dict[str, Any], metrics: dict[str, Any],
                 out_dir: str | os.PathLike | None = None, **extra: Any) -> Path:
    """Writes ``<out_dir>/<name>.json`` and returns its path."""
    d = Path(out_dir) if out_dir is not None else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.json"
    doc = {
        "benchmark": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "parameters": params,
        "metrics": metrics,
        **extra,
    }
    from .plots import plot

    png = path.with_suffix(".png")
    if plot(name, metrics, png) is not None:
        doc["plot"] = png.name
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
