"""``stretchflow bench run nexmark``: NEXMark Q0–Q8 on every stretchflow engine and on peers
at their best, on the same files, every output compared (issue #33, items 1 and 2).

The input: ``stretchflow generate nexmark`` (:mod:`stretchflow.workloads.nexmark`, NEXMark's
generator) at :data:`EVENTS` events (10 M: 200 k persons, 600 k auctions, 9.2 M bids over
1 000 s of event time at NEXMark's default 10 000 events/s), seed 1, cached under
``~/.cache/stretchflow/nexmark`` (``$STRETCHFLOW_CACHE/nexmark``) in the formats asked for.
The queries: stretchflow's ``nexmark-q0`` … ``nexmark-q8`` (docs/nexmark.md), with their
default windows (10 s; Q5 10 s every 2 s).

The systems (:data:`OWN`, :data:`PEERS`), each a whole process:

* stretchflow's engines: ``stretchflow run nexmark-qN --input … --output …`` with each
  engine's flags;
* **Flink SQL in the JVM** (``peer_programs/nx_flink.py``): the query in Flink SQL with
  built-in functions only, filesystem source and sink, streaming mode with watermarks,
  parallelism 2; PyFlink's ``TableEnvironment`` only submits it. JSON Lines only: the PyPI
  package has no Parquet format and Maven Central is not reachable here;
* **Spark Structured Streaming** (``nx_spark_ss.py``): ``readStream``, ``withWatermark``,
  ``window()``, stream-stream joins, file sink, ``trigger(availableNow=True)``, ``local[2]``,
  no Python UDF;
* **Bytewax with 2 workers** (``nx_bytewax.py``);
* **Polars** and **DuckDB** (``nx_polars.py``, ``nx_duckdb.py``): the bounded form, the
  whole file at once, expressions and SQL only, 2 threads.

Each peer runs in its own virtualenv (:func:`.peers.ensure_venv`). A query a peer cannot
express with its native operators is reported by the program (exit code 3, one line of
why) and shown as such; nothing is approximated in its place.

What is measured per run: the wall time of the whole process, the system's own time (for
stretchflow its run summary's; for a peer the program's report: from just before its query
starts, engine already up, to its output file closed), **start-up = wall - own** (interpreter,
imports, JVM, Spark session or Flink mini-cluster), throughput = the input events the query
reads / own time, the peak RSS of the process tree, and whether the output is right: the
reference engine's output of the same format is the expected one (tests/test_nexmark.py
checks the reference against a brute force), compared as a multiset of rows (``ts``
included) with float fields within a relative 1e-9 (:func:`.userflows.compare`; a digest
first, the row-by-row comparison only when the digests differ).

Rounds alternate the systems per query (:func:`.common.rotation`), each run inside
:func:`.common.repeat_probe`. A run that fails or passes :data:`TIMEOUT_S` is recorded with
its reason and not run again in later rounds (the reference, whose output is the expected
one, has :data:`REFERENCE_TIMEOUT_S`).

Selection by environment variables (``bench run`` takes no parameters), recorded in the
JSON: ``NEXMARK_EVENTS``, ``NEXMARK_QUERIES`` (q0,…), ``NEXMARK_SYSTEMS`` (names of
:data:`OWN` and :data:`PEERS`), ``NEXMARK_FORMATS`` (jsonl, parquet), ``NEXMARK_ROUNDS``,
``NEXMARK_TIMEOUT`` (s); ``NEXMARK_PROGRESS=1`` prints a line per run on stderr.
Quick (``--quick``): 20 000 events with 500 ms windows (Q5 every 100 ms), the reference and
vsn, Polars where its venv can be made, one round.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stretchflow.io.generators import generate
from stretchflow.queries.nexmark import QUERIES as NX_QUERIES

from .common import (
    env_list,
    repeat_probe,
    results_dir,
    rotation,
    say_progress,
    summarize,
    write_result,
)
from .peak import command
from .peers import PROGRAMS, Peer, cache_dir, ensure_venv, run_process
from .speed import VARIANTS, summary_own_s
from .userflows import _clean_env, compare, digest

NAME = "nexmark"
EVENTS = 10_000_000
#: ``bench run nexmark-1m``: the same at 1 M events, short enough to run every engine and
#: every peer in one sitting (the slow engines' joins take minutes a query at 10 M)
NAME_1M = "nexmark-1m"
EVENTS_1M = 1_000_000
QUICK_EVENTS = 20_000
QUERIES = tuple(f"q{i}" for i in range(9))
#: the streams each query reads, in the order ``stretchflow run nexmark-qN`` takes them (the
#: built-in queries' own table, not a copy of it)
READS: dict[str, tuple[str, ...]] = {q: streams for q, (_, streams) in NX_QUERIES.items()}
#: the windows of a full run (NEXMark's and Flink's SQL: 10 s, Q5 every 2 s) and of --quick
#: (20 000 events span 2 s of event time)
WINDOWS = {"window": 10_000, "slide": 2_000}
QUICK_WINDOWS = {"window": 500, "slide": 100}
FORMATS = ("jsonl", "parquet")
ROUNDS = 2
#: the longest one run may take; past it the run is killed and recorded as timed out
TIMEOUT_S = 1200.0
#: the reference's own limit: its output is the expected one, so it is not cut short with the
#: others (``NEXMARK_TIMEOUT``)
REFERENCE_TIMEOUT_S = 3600.0
#: the most rows compared row by row when two digests differ (more would not fit in memory)
ROWS_COMPARED = 2_000_000
#: bumped when the cached inputs change
VERSION = 1

#: stretchflow's engines: name -> ``stretchflow run`` flags
OWN: dict[str, list[str]] = {
    "reference": ["--engine", "reference"],
    "vsn2": list(VARIANTS["vsn2"] or ()),
    "sn2-processes": list(VARIANTS["sn2-processes"] or ()),
    "ordered2": list(VARIANTS["ordered2"] or ()),
    "slack": ["--engine", "slack"],
    "spark": list(VARIANTS["spark-local2"] or ()),
}
_ORJSON = "orjson==3.13.0"
#: the peers: their venv, program and arguments, and the formats they read
PEERS: dict[str, Peer] = {
    "flink-sql": Peer("apache-flink-2.3.0", ("apache-flink==2.3.0",), "nx_flink.py",
                      ("parallelism=2",), needs_java=True,
                      note="Flink SQL in the JVM, built-in functions, filesystem source and "
                           "sink, streaming mode, parallelism 2"),
    "spark-ss": Peer("pyspark-4.3.0", ("pyspark==4.3.0",), "nx_spark_ss.py",
                     ("master=local[2]",), needs_java=True,
                     note="Spark Structured Streaming, native operators, availableNow, "
                          "local[2]"),
    "bytewax2": Peer("bytewax-0.21.1", ("bytewax==0.21.1", _ORJSON), "nx_bytewax.py",
                     ("workers=2",), note="Bytewax, 2 workers"),
    "polars": Peer("polars-2.1.0", ("polars==2.1.0", _ORJSON), "nx_polars.py",
                   note="Polars lazy API, bounded: the whole file at once"),
    "duckdb": Peer("duckdb-2.0.0", ("duckdb==2.0.0", _ORJSON), "nx_duckdb.py",
                   note="DuckDB SQL, bounded: the whole file at once"),
}
#: the formats a peer reads (every stretchflow engine reads both)
PEER_FORMATS: dict[str, tuple[str, ...]] = {
    "flink-sql": ("jsonl",), "spark-ss": FORMATS, "bytewax2": ("jsonl",), "polars": FORMATS,
    "duckdb": FORMATS,
}
#: a peer program's exit code for "this query is not expressible with my native operators"
UNSUPPORTED = 3
DEFAULT_SYSTEMS = (*OWN, *PEERS)
QUICK_SYSTEMS = ("reference", "vsn2", "polars")


# -- the input ---------------------------------------------------------------------------------
def data_dir() -> Path:
    base = os.environ.get("STRETCHFLOW_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "stretchflow") / "nexmark"


def dataset(events: int, fmt: str, seed: int = 1) -> Path:
    """The directory holding ``nx-persons``, ``nx-auctions`` and ``nx-bids`` in ``fmt`` for
    ``events`` events and ``seed``, generated on first use (into a temporary directory, then
    renamed: a cache entry is whole or absent)."""
    d = data_dir() / f"nx-{events}-s{seed}-v{VERSION}-{fmt}"
    if d.is_dir():
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=d.name + ".", dir=d.parent))
    try:
        generate("nexmark", events, seed, tmp / f"nx.{fmt}")
        tmp.rename(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def inputs(data: Path, query: str, fmt: str) -> list[Path]:
    """The files ``query`` reads, in its order."""
    return [data / f"nx-{s}.{fmt}" for s in READS[query]]


def count_rows(path: Path) -> int:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


# -- one run -----------------------------------------------------------------------------------
class Unsupported(Exception):
    """A peer's program said the query is not expressible with its native operators."""


def _own_run(system: str, query: str, ins: list[Path], out: Path, windows: dict[str, int],
             timeout: float) -> dict[str, Any]:
    peak = out.with_suffix(".peak")
    params = {"window": f"{windows['window']}ms"}
    if query == "q5":
        params["slide"] = f"{windows['slide']}ms"
    if query in ("q0", "q1", "q2"):
        params = {}
    cmd = command(peak, "stretchflow", "run", f"nexmark-{query}",
                  *(a for p in ins for a in ("--input", str(p))), "--output", str(out),
                  *OWN[system], *(a for k, v in params.items() for a in ("--param", f"{k}={v}")))
    r = run_process(cmd, timeout)
    if r["timed_out"]:
        raise RuntimeError(f"timed out: killed after {timeout:.0f} s")
    if r["code"] != 0:
        raise RuntimeError(f"exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    if peak.exists():  # the run's own VmHWM at exit, which sampling can miss
        r["peak_rss_mb"] = max(r["peak_rss_mb"], float(peak.read_text()))
    r["own_s"] = summary_own_s(system, r["stdout"], r["stderr"])
    return r


def _peer_run(system: str, exe: Path, query: str, data: Path, out: Path, fmt: str,
              windows: dict[str, int], timeout: float) -> dict[str, Any]:
    peer = PEERS[system]
    cmd = [str(exe), str(PROGRAMS / peer.program), query, str(data), str(out),
           f"format={fmt}", *(f"{k}={v}" for k, v in windows.items()), *peer.args]
    # the peer's venv first on PATH (PyFlink starts `python` workers), none of ours on its paths
    env = _clean_env()
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    r = run_process(cmd, timeout, env={**env, **peer.env})
    if r["timed_out"]:
        raise RuntimeError(f"timed out: killed after {timeout:.0f} s")
    last = (r["stdout"].strip().splitlines() or [""])[-1]
    if r["code"] == UNSUPPORTED:
        raise Unsupported(json.loads(last)["unsupported"])
    if r["code"] != 0:
        raise RuntimeError(f"exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    report = json.loads(last)
    r["own_s"] = float(report["elapsed_s"])
    r["report"] = report
    return r


def check(expected: Path | None, got: Path,
          digests: dict[Path, tuple[int, int]] | None = None) -> dict[str, Any]:
    """``got`` against the expected output: equal digests, else row by row (floats within a
    relative 1e-9) up to :data:`ROWS_COMPARED` rows. ``digests`` keeps the expected output's
    digest between calls (10 M rows take seconds to digest)."""
    if expected is None:
        return {"correct": None, "why": "no expected output: the reference did not run"}
    known = digests if digests is not None else {}
    if expected not in known:
        known[expected] = digest(expected)
    n, h = digest(got)
    if (n, h) == known[expected]:
        return {"correct": True, "rows": n, "by": "digest"}
    if n > ROWS_COMPARED or known[expected][0] > ROWS_COMPARED:
        # too many rows to hold them all in memory (9.2 M rows of Q1 take >10 GB): wrong, by
        # the digest, without the count of rows that differ
        return {"correct": False, "rows": n, "by": "digest", "rows_expected": known[expected][0]}
    c = compare(expected, got)
    return {"correct": c["equal"], "rows": n, "by": "rows", "missing_rows": c["missing_rows"],
            "extra_rows": c["extra_rows"]}


# -- the selection and the run -----------------------------------------------------------------
def selection(quick: bool, events: int = EVENTS) -> dict[str, Any]:
    """What a run measures: ``NEXMARK_*`` where set, else the defaults."""
    systems = env_list("NEXMARK_SYSTEMS") or list(QUICK_SYSTEMS if quick else DEFAULT_SYSTEMS)
    bad = [s for s in systems if s not in OWN and s not in PEERS]
    if bad:
        raise ValueError(f"NEXMARK_SYSTEMS: unknown {bad}; known: "
                         f"{', '.join([*OWN, *PEERS])}")
    queries = env_list("NEXMARK_QUERIES") or list(QUERIES)
    bad = [q for q in queries if q not in QUERIES]
    if bad:
        raise ValueError(f"NEXMARK_QUERIES: unknown {bad}; known: {', '.join(QUERIES)}")
    formats = env_list("NEXMARK_FORMATS") or (["parquet"] if quick else ["jsonl"])
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"NEXMARK_FORMATS: unknown {bad}; known: {', '.join(FORMATS)}")
    if "reference" not in systems:
        systems.insert(0, "reference")  # the expected output
    n = os.environ.get("NEXMARK_EVENTS")
    rounds = os.environ.get("NEXMARK_ROUNDS")
    timeout = os.environ.get("NEXMARK_TIMEOUT")
    return {"systems": systems, "queries": queries, "formats": formats,
            "events": int(n) if n else (QUICK_EVENTS if quick else events),
            "rounds": int(rounds) if rounds else (1 if quick else ROUNDS),
            "timeout_s": float(timeout) if timeout else TIMEOUT_S,
            "windows": dict(QUICK_WINDOWS if quick else WINDOWS),
            "env": {k: v for k, v in os.environ.items() if k.startswith("NEXMARK_")}}


def _summary(runs: list[dict[str, Any]], events_in: int) -> dict[str, Any]:
    own = [r["own_s"] for r in runs]
    wall = [r["wall_s"] for r in runs]
    start = [w - o for w, o in zip(wall, own, strict=True)]
    return {"own_s": summarize(own), "wall_s": summarize(wall), "startup_s": summarize(start),
            "startup_share": summarize([s / w for s, w in zip(start, wall, strict=True)]),
            "events_per_s": summarize([events_in / o for o in own]),
            "peak_rss_mb": summarize([r["peak_rss_mb"] for r in runs]),
            "correct": all(r["output"]["correct"] for r in runs), "rounds": len(runs)}


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Callable[[str], None] | None = None, name: str = NAME,
        events: int = EVENTS) -> Path:
    """Measures the selection (:func:`selection`, ``events`` unless ``NEXMARK_EVENTS`` says)
    and writes ``<name>.json`` and ``<name>.png``; returns the JSON's path."""
    t_start = time.perf_counter()
    sel = selection(quick, events)
    say = say_progress("NEXMARK_PROGRESS", progress)
    # the peers' venvs: made (or reused) once; one that cannot be made is reported
    exes: dict[str, Path] = {}
    not_run: dict[str, str] = {}
    installs: dict[str, str] = {}
    for s in sel["systems"]:
        if s in PEERS:
            say(f"nexmark: venv of {s}")
            exe, what = ensure_venv(PEERS[s], cache_dir())
            installs[PEERS[s].venv] = what
            if exe is None:
                not_run[s] = what
            else:
                exes[s] = exe
    cells: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="nexmark-") as tmp_s:
        tmp = Path(tmp_s)
        for fmt in sel["formats"]:
            say(f"nexmark: the input, {sel['events']:,} events, {fmt}")
            data = dataset(sel["events"], fmt, seed)
            rows = {s: count_rows(data / f"nx-{s}.{fmt}")
                    for s in ("persons", "auctions", "bids")}
            for q in sel["queries"]:
                ins = inputs(data, q, fmt)
                cell: dict[str, Any] = {
                    "format": fmt, "query": q, "events_in": sum(rows[s] for s in READS[q]),
                    "runs": {}, "failed": {}, "unsupported": {}, "not_run": {}}
                cells[f"{fmt}/{q}"] = cell
                systems = []
                for s in sel["systems"]:
                    if s in not_run:
                        cell["not_run"][s] = not_run[s]
                    elif s in PEERS and fmt not in PEER_FORMATS[s]:
                        cell["not_run"][s] = f"reads {', '.join(PEER_FORMATS[s])} only"
                    else:
                        systems.append(s)
                expected = tmp / f"{fmt}-{q}-expected.jsonl"
                digests: dict[Path, tuple[int, int]] = {}
                for r in range(sel["rounds"]):
                    # the reference first in round 1: its output is the expected one
                    order = rotation(systems, r) if r else systems
                    for s in order:
                        if s in cell["failed"] or s in cell["unsupported"]:
                            continue
                        say(f"nexmark {fmt} {q}: round {r + 1}/{sel['rounds']}, {s}")
                        out = expected if (s == "reference" and r == 0) else tmp / "out.jsonl"
                        try:
                            with repeat_probe() as probe:
                                limit = (max(sel["timeout_s"], REFERENCE_TIMEOUT_S)
                                         if s == "reference" else sel["timeout_s"])
                                if s in OWN:
                                    res = _own_run(s, q, ins, out, sel["windows"], limit)
                                else:
                                    res = _peer_run(s, exes[s], q, data, out, fmt,
                                                    sel["windows"], limit)
                        except Unsupported as why:
                            cell["unsupported"][s] = str(why)
                            continue
                        except (RuntimeError, ValueError, KeyError) as err:
                            cell["failed"][s] = f"round {r + 1}: {str(err)[-1500:]}"
                            continue
                        res["output"] = (
                            {"correct": True, "by": "is the expected output"}
                            if out == expected else
                            check(expected if expected.exists() else None, out, digests))
                        if out != expected:
                            out.unlink(missing_ok=True)  # Q0/Q1 write GBs at 10 M events
                        cell["runs"].setdefault(s, []).append(
                            {"round": r + 1, "probe": probe,
                             **{k: res[k] for k in ("wall_s", "own_s", "peak_rss_mb",
                                                    "tree_rss_peak_mb", "output")},
                             **({"report": res["report"]} if "report" in res else {})})
                expected.unlink(missing_ok=True)
                cell["systems"] = {s: _summary(rs, cell["events_in"])
                                   for s, rs in cell["runs"].items()}
    metrics = {"cells": cells, "venvs": installs, "total_s": time.perf_counter() - t_start}
    params = {
        "quick": quick, "seed": seed, **sel,
        "own_flags": {s: " ".join(OWN[s]) for s in sel["systems"] if s in OWN},
        "peers": {s: {"venv": PEERS[s].venv, "requirements": list(PEERS[s].requirements),
                      "program": f"peer_programs/{PEERS[s].program}",
                      "args": list(PEERS[s].args), "note": PEERS[s].note,
                      "formats": list(PEER_FORMATS[s])}
                  for s in sel["systems"] if s in PEERS},
        "data": "stretchflow generate nexmark --rows EVENTS --seed SEED (NEXMark's generator, "
                f"10 000 events/s of event time), cached under {data_dir()}",
        "own_s": "stretchflow: its run summary's time; a peer: its program's report, from "
                 "just before its query starts (engine up) to its output file closed",
        "startup_s": "wall - own: interpreter, imports, JVM, Spark session, Flink cluster",
        "events_per_s": "the events of the streams the query reads / own time",
        "output": "against the reference engine's output of the same format: digest, else "
                  "row by row, float fields within a relative 1e-9",
    }
    # the JSON first: a figure that fails must not lose an hour of measurements
    path = write_result(name, params, metrics, out_dir, plot=f"{name}.png")
    draw(metrics, sel["systems"], results_dir(out_dir) / f"{name}.png", quick)
    return path


def draw(metrics: dict[str, Any], systems: Sequence[str], path: Path, quick: bool) -> Path:
    """One panel per format: per query, each system's median throughput on own time (log
    y), min–max as error bars; a wrong output's bar hatched."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    cells = metrics["cells"]
    formats = list(dict.fromkeys(c["format"] for c in cells.values()))
    fig, axes = plt.subplots(len(formats), 1, figsize=(12, 3.8 * len(formats)), dpi=110,
                             squeeze=False)
    palette = plt.get_cmap("tab20").colors  # 11 systems by default: more than tab10 has
    colors = {s: palette[i % len(palette)] for i, s in enumerate(systems)}
    width = 0.8 / max(len(systems), 1)
    for ax, fmt in zip((row[0] for row in axes), formats, strict=True):
        queries = [c for c in cells.values() if c["format"] == fmt]
        for j, s in enumerate(systems):
            xs, ys, lo, hi, wrong = [], [], [], [], []
            for i, c in enumerate(queries):
                v = c["systems"].get(s)
                if v is None:
                    continue
                e = v["events_per_s"]
                xs.append(i + (j - (len(systems) - 1) / 2) * width)
                ys.append(e["median"])
                lo.append(e["median"] - e["min"])
                hi.append(e["max"] - e["median"])
                wrong.append(not v["correct"])
            if xs:
                bars = ax.bar(xs, ys, width, yerr=[lo, hi], label=s, color=colors[s],
                              capsize=2)
                for b, w in zip(bars, wrong, strict=True):
                    if w:
                        b.set_hatch("//")
        ax.set_xticks(range(len(queries)), [c["query"].upper() for c in queries])
        ax.set_yscale("log")
        ax.set_ylabel("events/s, own time")
        ax.set_title(f"NEXMark, {fmt}: throughput per query (no bar: not expressible, "
                     "failed or not run)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=min(len(systems), 6))
    fig.tight_layout()
    return save_figure(plt, fig, path, quick)


def _run(quick: bool, out_dir: str | None) -> Path:
    return run(quick=quick, out_dir=out_dir)


def _run_1m(quick: bool, out_dir: str | None) -> Path:
    return run(quick=quick, out_dir=out_dir, name=NAME_1M, events=EVENTS_1M)


#: name -> (what it measures, the issue, run(quick, out_dir) -> JSON path)
BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    NAME: ("NEXMark Q0–Q8 at 10 M events on every engine and on peers at their best (Flink "
           "SQL in the JVM, Spark Structured Streaming, Bytewax with 2 workers, Polars): "
           "throughput on own time, start-up apart, outputs compared (NEXMARK_* select)",
           "issue #33", _run),
    NAME_1M: ("NEXMark Q0–Q8 at 1 M events on every engine and peer (bench nexmark's "
              "selection, smaller: start-up weighs more, own time is apart)", "issue #33",
              _run_1m),
}
