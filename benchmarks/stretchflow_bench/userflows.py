"""``stretchflow bench run userflows`` (or ``python -m stretchflow_bench.userflows``, whose
options choose what runs): NEXMark-shaped flows written as a user writes them —
with lambdas and with column expressions — on every engine, against a hand-written loop and a
Polars script of the same query, whole processes (issue #31 item 4, issue #32 item 5).

The flows (:mod:`.userflow_lambdas`, :mod:`.userflow_exprs`): currency conversion (Q1),
selection (Q2), hot items (Q5), highest bid per window (Q7's shape), mean price per category,
and new persons joined with their auctions (Q8; lambda form only: the join takes no column
names); and ``hot_items_costly``, hot items whose key function costs about 5 us of Python
(lambda form, JSON Lines, no Polars: where the user's functions cost real time, issue #32's
target for process channels). The inputs (:mod:`.nexmark`) are JSON Lines or Parquet of
1 M or 10 M events.

Every measured variant is a fresh process run under :mod:`.peak` and measured by
:func:`.speed.measure` (wall, own time, CPU of every process, peak RSS):

* ``loop``: :mod:`.userflow_loops` as a script, the strongest plain Python we could write;
* ``polars-eager`` / ``polars-lazy``: ``peer_programs/polars_userflows.py`` in its own venv
  (``polars==2.1.0``, made by :func:`.peers.ensure_venv`); the faster of the two by median
  is "Polars" in every ratio (which one is recorded per cell);
* ``ENGINE/FORM``: ``python -m stretchflow run userflow_FORM.py --param flow=...`` with the
  engine flags of :data:`ENGINES` — FORM ``lambda`` or ``expr``;
* ``calls`` (hot items only): the loop that calls the lambda flow's own functions as the
  engine does; the engine's own cost per tuple is (engine's own time - its own time) / tuples;
* ``spark-sql`` (with the spark engine, which runs only when asked for, at 1 M events only,
  and only where pyspark and Java are): Spark's DataFrame API
  (``peer_programs/spark_userflows.py``), set beside ``spark/expr``.

Rounds alternate the variants (:func:`.common.rotation`), each round probed for the load
and the other processes' CPU (:func:`.common.repeat_probe`). Every output of every round is
compared with the loop's as a multiset of rows (each row carries its ``ts``, so this is the
per-timestamp multiset of the determinism contract): exactly, by a digest, and where the
digests differ row by row, float fields within a relative 1e-9 (Polars' and Spark's means
sum in another order), every other field exactly.

What runs is chosen by environment variables (``bench run`` takes no parameters), each a
comma-separated list, or by the same options of ``python -m stretchflow_bench.userflows``:
``USERFLOWS_FLOWS``, ``USERFLOWS_FORMS`` (lambda, expr), ``USERFLOWS_ENGINES`` (keys of
:data:`ENGINES`), ``USERFLOWS_SIZES`` (events), ``USERFLOWS_FORMATS`` (jsonl, parquet),
``USERFLOWS_ROUNDS``, ``USERFLOWS_NAME`` (the result's name: ``userflows-10m`` keeps a 10 M-event
selection beside the default run's); ``USERFLOWS_PROGRESS=1`` prints a line per run on stderr; with
Spark, its lambda forms run only under ``USERFLOWS_SPARK_LAMBDAS=1``. The default
is 1 M events, both formats, every flow and form, every local engine (:data:`DEFAULT_ENGINES`),
3 rounds: budget about an hour on a 2-core machine, more under load (``total_s`` in the
JSON says how long a run took). 10 M events take about ten times as long per variant:
:data:`TEN_M` (``bench run userflows-10m``) is a selection of them, and :data:`SPARK_1M`
(``bench run userflows-spark``) the spark engine's expression flows beside Spark's SQL.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from . import nexmark
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
from .peers import Peer, cache_dir, ensure_venv
from .speed import VARIANTS, _spark_missing, measure, reported_own_s, summary_own_s

HERE = Path(__file__).resolve().parent
LOOPS = HERE / "userflow_loops.py"
FLOW_FILES = {"lambda": HERE / "userflow_lambdas.py", "expr": HERE / "userflow_exprs.py"}
POLARS = Peer("polars-2.1.0", ("polars==2.1.0",), "polars_userflows.py")
SPARK_SQL = HERE / "peer_programs" / "spark_userflows.py"

FLOWS = ("currency", "selection", "hot_items", "highest_bid", "mean_price", "join",
         "hot_items_costly")
#: flows measured on one input format only (the costly flow weighs a Python key function's
#: cost, which does not depend on the input format)
ONE_FORMAT = {"hot_items_costly": "jsonl"}
#: flows without a Polars program, and why
NO_POLARS = {"hot_items_costly": "a Python key function per row is what the flow measures; "
                                 "Polars would run it as a Python UDF, not at its best"}
#: flows without an expression form, and why
NO_EXPR = {"join": "no expression form: Stream.join takes key functions, no column names",
           "hot_items_costly": "no expression form: the flow measures a Python key function"}
#: flows whose loop calls the lambda flow's own functions: the engine's own cost per tuple is
#: measured against that loop (hot items: against the separate "calls" loop)
CALLS_BASELINE = {"hot_items": "calls", "hot_items_costly": "loop"}
FORMS = ("lambda", "expr")
FORMATS = nexmark.FORMATS
#: engine variant -> ``stretchflow run`` flags (bench speed's, and the reference at
#: parallelism 2 and slack)
ENGINES: dict[str, list[str]] = {
    "reference": VARIANTS["reference"],
    "reference2": ["--engine", "reference", "--parallelism", "2"],
    **{v: VARIANTS[v] for v in ("vsn1", "vsn2", "sn2-processes", "ordered2")},
    "slack": ["--engine", "slack"],
    "spark": VARIANTS["spark-local2"],
    # parallelism 1 of the engines measured at 2: their CPU at 2 against 1 (issue #32)
    "sn1-processes": ["--engine", "sn", "--parallelism", "1", "--channels", "processes"],
    "ordered1": ["--engine", "ordered", "--parallelism", "1"],
}
#: the engines of a default run: Spark only when asked for (``USERFLOWS_ENGINES``), its runs
#: take minutes each (a lambda flow's every tuple goes through a Python worker); sn and
#: ordered at parallelism 1 in the 10 M selection (:data:`TEN_M`)
DEFAULT_ENGINES = tuple(e for e in ENGINES if e not in ("spark", "sn1-processes", "ordered1"))
#: (P=1 variant, P=2 variant) of an engine: issue #32's CPU per tuple at 2 within 1.1x of 1
P1_P2 = (("vsn1", "vsn2"), ("reference", "reference2"), ("sn1-processes", "sn2-processes"),
         ("ordered1", "ordered2"))
POLARS_APIS = ("eager", "lazy")
#: Spark runs only at this size (its runs are slow: issue #31's 0.01-0.02x the loop)
SPARK_SIZE = 1_000_000
#: float fields of two outputs are equal within this relative tolerance
REL_TOL = 1e-9
#: the longest one process may run before it is killed and recorded as failed
TIMEOUT_S = 1800.0


# -- the selection ------------------------------------------------------------------------------
def selection(quick: bool, flows: list[str] | None = None, forms: list[str] | None = None,
              engines: list[str] | None = None, sizes: list[int] | None = None,
              formats: list[str] | None = None, rounds: int | None = None) -> dict[str, Any]:
    """What a run measures: the arguments given, else ``USERFLOWS_*``, else the defaults
    (``quick``: 20 000 events, one round, hot items and selection on the reference and vsn
    at parallelism 2)."""
    def pick(given: list | None, env: str, default: tuple, known: tuple) -> list:
        got = given if given is not None else env_list(env)
        got = list(default) if got is None else got
        bad = [x for x in got if x not in known]
        if bad:
            raise ValueError(f"{env}: unknown {bad}; known: {', '.join(map(str, known))}")
        return got

    default_engines = ("reference", "vsn2") if quick else DEFAULT_ENGINES
    env_sizes = env_list("USERFLOWS_SIZES")
    return {
        "flows": pick(flows, "USERFLOWS_FLOWS",
                      ("hot_items", "selection") if quick else FLOWS, FLOWS),
        "forms": pick(forms, "USERFLOWS_FORMS", FORMS, FORMS),
        "engines": pick(engines, "USERFLOWS_ENGINES", default_engines, tuple(ENGINES)),
        "sizes": sizes or ([int(x) for x in env_sizes] if env_sizes else
                           [20_000] if quick else [1_000_000]),
        "formats": pick(formats, "USERFLOWS_FORMATS", FORMATS, FORMATS),
        "rounds": rounds or int(os.environ.get("USERFLOWS_ROUNDS") or (1 if quick else 3)),
        "spark_lambdas": os.environ.get("USERFLOWS_SPARK_LAMBDAS") == "1",
    }


# -- comparing outputs -------------------------------------------------------------------------
def _records(path: Path) -> Any:
    """The rows of a JSON Lines file, a few MiB at a time."""
    with open(path, "rb") as f:
        while lines := f.readlines(4 << 20):
            lines = [ln for ln in lines if ln.strip()]
            if lines:
                yield from orjson.loads(b"[" + b",".join(lines) + b"]")


def digest(path: Path) -> tuple[int, int]:
    """(rows, sum of the rows' hashes mod 2**64): equal for two files holding the same
    multiset of rows (each row canonical: keys sorted, numbers as orjson writes them)."""
    n = h = 0
    dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
    for row in _records(path):
        n += 1
        h = (h + hash(dumps(row, option=sort))) & 0xFFFF_FFFF_FFFF_FFFF
    return n, h


def _grouped(path: Path) -> tuple[dict[tuple, list[tuple]], set[str]]:
    """The rows grouped by their non-float fields (ts included) and the names of their float
    fields, each group the list of its rows' float values; and the float fields' names."""
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    floats: set[str] = set()
    for row in _records(path):
        fl = sorted((k, v) for k, v in row.items() if isinstance(v, float))
        key = tuple(sorted((k, v) for k, v in row.items() if not isinstance(v, float)))
        groups[key + tuple(k for k, _ in fl)].append(tuple(v for _, v in fl))
        floats.update(k for k, _ in fl)
    return groups, floats


def _close(a: tuple, b: tuple) -> bool:
    return all(math.isclose(x, y, rel_tol=REL_TOL, abs_tol=0.0) for x, y in zip(a, b,
                                                                               strict=True))


def compare(expected: Path, got: Path) -> dict[str, Any]:
    """Row by row, ``got`` against ``expected``: rows missing and in excess, float fields
    within :data:`REL_TOL` (relative), every other field exact."""
    e, e_floats = _grouped(expected)
    g, g_floats = _grouped(got)
    missing = extra = 0
    for key in e.keys() | g.keys():
        a, b = sorted(e.get(key, [])), sorted(g.get(key, []))
        i = j = 0
        while i < len(a) and j < len(b):  # both sorted: match within the tolerance
            if _close(a[i], b[j]):
                i, j = i + 1, j + 1
            elif a[i] < b[j]:
                missing, i = missing + 1, i + 1
            else:
                extra, j = extra + 1, j + 1
        missing += len(a) - i
        extra += len(b) - j
    return {"equal": missing == 0 and extra == 0, "missing_rows": missing,
            "extra_rows": extra, "float_fields": sorted(e_floats | g_floats)}


# -- the variants -------------------------------------------------------------------------------
def _inputs(flow: str, size: int, fmt: str, seed: int) -> list[Path]:
    kinds = ("persons", "auctions") if flow == "join" else ("bids",)
    return [nexmark.dataset(k, size, fmt, seed) for k in kinds]


def _engine_params(flow: str, inputs: list[Path], out: Path) -> list[str]:
    named = (("persons", "auctions") if flow == "join" else ("input",))
    pairs = [("flow", flow), *zip(named, map(str, inputs), strict=True), ("output", str(out))]
    return [a for k, v in pairs for a in ("--param", f"{k}={v}")]


def _clean_env() -> dict[str, str]:
    """The environment of a program in its own venv: none of ours on its paths."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _plan(variant: str, flow: str, inputs: list[Path], out: Path, peak: Path,
          polars: Path | None) -> tuple[list[str], Callable[..., float], dict | None]:
    """(command, own-time parser, environment) of one variant's process."""
    ins = list(map(str, inputs))
    if variant == "loop":
        return command(peak, LOOPS, flow, str(out), *ins, script=True), reported_own_s, None
    if variant == "calls":
        return (command(peak, LOOPS, f"{flow}_calls", str(out), *ins, script=True),
                reported_own_s, None)
    if variant.startswith("polars-"):
        cmd = command(peak, HERE / "peer_programs" / POLARS.program, flow, str(out), *ins,
                      f"api={variant.removeprefix('polars-')}", script=True)
        return [str(polars), *cmd[1:]], reported_own_s, _clean_env()  # in Polars' venv
    if variant == "spark-sql":
        return (command(peak, SPARK_SQL, flow, str(out), *ins, "master=local[2]", script=True),
                reported_own_s, None)
    engine, form = variant.split("/")
    return (command(peak, "stretchflow", "run", str(FLOW_FILES[form]),
                    *_engine_params(flow, inputs, out), *ENGINES[engine]),
            summary_own_s, None)


def _variants(flow: str, size: int, sel: dict[str, Any], polars_ok: bool,
              expr_flows: tuple[str, ...] | None, spark_why: str | None
              ) -> tuple[list[str], dict[str, str]]:
    """The variants of one cell and, for each left out, why."""
    run = ["loop"]
    skipped: dict[str, str] = {}
    if polars_ok and flow in NO_POLARS:
        skipped["polars"] = NO_POLARS[flow]
    elif polars_ok:
        run += [f"polars-{a}" for a in POLARS_APIS]
    if flow == "hot_items":
        run.append("calls")
    spark_here = spark_why or (None if size == SPARK_SIZE else
                               f"Spark runs only at {SPARK_SIZE:,} events")
    for engine in sel["engines"]:
        for form in sel["forms"]:
            v = f"{engine}/{form}"
            if form == "expr" and expr_flows is None:
                skipped[v] = "no expression API in this checkout"
            elif form == "expr" and flow not in expr_flows:
                skipped[v] = NO_EXPR.get(flow, "no expression form")
            elif engine == "spark" and spark_here:
                skipped[v] = f"skipped: {spark_here}"
            elif engine == "spark" and form == "lambda" and not sel.get("spark_lambdas"):
                skipped[v] = ("skipped: a lambda flow on Spark sends every tuple through a "
                              "Python worker, minutes a run (issue #31: 0.01-0.02x the loop); "
                              "USERFLOWS_SPARK_LAMBDAS=1 runs it")
            else:
                run.append(v)
    if "spark" in sel["engines"]:
        if spark_here:
            skipped["spark-sql"] = f"skipped: {spark_here}"
        else:
            run.append("spark-sql")
    return run, skipped


def _expr_flows() -> tuple[tuple[str, ...] | None, str | None]:
    """The flows with an expression form, or None and why there is no expression API."""
    try:
        from . import userflow_exprs
    except ImportError as e:
        return None, f"{type(e).__name__}: {e}"
    return tuple(userflow_exprs.ON_BIDS), None


# -- one cell: a flow on one input, every variant, in rounds -------------------------------------
def _cell(flow: str, fmt: str, size: int, variants: list[str], rounds: int, seed: int,
          tmp: Path, polars: Path | None, say: Callable[[str], None]) -> dict[str, Any]:
    inputs = _inputs(flow, size, fmt, seed)
    runs: dict[str, dict[int, dict[str, Any]]] = {v: {} for v in variants}
    checks: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    failed: dict[str, str] = {}
    expected: tuple[int, int] | None = None
    probes, load = [], []
    for r in range(rounds):
        before = os.getloadavg()[0]
        with repeat_probe() as probe:
            for v in rotation(variants, r):
                if v in failed:
                    continue
                out = tmp / f"{flow}-{fmt}-{v.replace('/', '-')}.jsonl"
                out.unlink(missing_ok=True)
                cmd, own, env = _plan(v, flow, inputs, out, out.with_suffix(".peak"), polars)
                say(f"userflows {flow} {fmt} {size:,}: round {r + 1}/{rounds}, {v}")
                try:
                    res = measure(v, cmd, out.with_suffix(".peak"), own, env, TIMEOUT_S)
                except RuntimeError as e:
                    if v == "loop":
                        raise
                    failed[v] = f"failed: {str(e)[-1500:]}"
                    continue
                report = orjson.loads(res.pop("stdout").strip().splitlines()[-1]) \
                    if own is reported_own_s else {}
                res.update({k: report[k] for k in ("startup_s", "settings", "tuples_in",
                                                   "keys_us_per_call") if k in report})
                runs[v][r] = res
                if v == "loop" and expected is None:
                    expected = digest(out)
                    shutil.copyfile(out, tmp / "expected.jsonl")
        probes.append(probe)
        for v in variants:  # this round's outputs against the loop's
            if v in failed or r not in runs[v]:
                continue
            out = tmp / f"{flow}-{fmt}-{v.replace('/', '-')}.jsonl"
            got = digest(out)
            c = {"identical": got == expected, "rows_out": got[0]}
            if not c["identical"]:
                c.update(compare(tmp / "expected.jsonl", out))
            checks[v].append(c)
            out.unlink()  # a currency output is 90 MB per million events
        load.append({"round": r + 1, "before": before, "after": os.getloadavg()[0]})
    assert expected is not None  # the loop ran (or raised)
    cell: dict[str, Any] = {"flow": flow, "format": fmt, "size": size, "inputs":
                            [p.name for p in inputs], "rows_out": expected[0],
                            "tuples_in": runs["loop"][0].get("tuples_in") or size,
                            "variants": {}, "failed": failed, "loadavg_1min": load,
                            "probes": probes}
    keys_us = [x["keys_us_per_call"] for x in runs["loop"].values() if "keys_us_per_call" in x]
    if keys_us:  # what the costly key function cost in each round (the loop measures it)
        cell["keys_us_per_call"] = summarize(keys_us)
    for v in variants:
        if v in failed or not runs[v]:
            continue
        rs = runs[v]
        s = {k: summarize([x[k] for x in rs.values()])
             for k in ("wall_s", "own_s", "peak_rss_mb", "cpu_s", "user_s", "sys_s",
                       "cores_busy")}
        if any("startup_s" in x for x in rs.values()):
            s["startup_s"] = summarize([x["startup_s"] for x in rs.values() if "startup_s" in x])
        if any("settings" in x for x in rs.values()):
            s["settings"] = next(x["settings"] for x in rs.values() if "settings" in x)
        s["rounds"] = {str(k): {m: x[m] for m in ("wall_s", "own_s", "cpu_s", "peak_rss_mb")}
                       for k, x in rs.items()}
        worst = next((c for c in checks[v] if not c["identical"]), checks[v][0])
        s["output"] = {**worst, "rounds_identical": sum(c["identical"] for c in checks[v]),
                       "rounds_equal": sum(c["identical"] or c.get("equal", False)
                                           for c in checks[v]),
                       "rounds": len(checks[v])}
        s["correct"] = s["output"]["rounds_equal"] == s["output"]["rounds"]
        cell["variants"][v] = s
    _ratios(cell)
    return cell


def _per_round(cell: dict[str, Any], a: str, b: str, metric: str = "wall_s"
               ) -> dict[str, float] | None:
    """min/median/max over the rounds both ran of a's metric / b's (> 1: b is faster when
    the metric is a time); None unless both were measured."""
    va, vb = cell["variants"].get(a), cell["variants"].get(b)
    if va is None or vb is None:
        return None
    return _rounds_ratio(va, vb, metric)


def _rounds_ratio(va: dict[str, Any], vb: dict[str, Any], metric: str
                  ) -> dict[str, float] | None:
    """min/median/max over the rounds both variants ran of va's metric / vb's, round k
    against round k; None when they share no round."""
    common = sorted(set(va["rounds"]) & set(vb["rounds"]))
    if not common:
        return None
    return summarize([va["rounds"][k][metric] / vb["rounds"][k][metric] for k in common])


def _ratios(cell: dict[str, Any]) -> None:
    """Per variant, its speed against the loop and against Polars (the faster API by median
    wall time), per round (min/median/max) and as a ratio of medians; > 1: faster."""
    vs = cell["variants"]
    apis = [f"polars-{a}" for a in POLARS_APIS if f"polars-{a}" in vs]
    polars = min(apis, key=lambda v: vs[v]["wall_s"]["median"]) if apis else None
    cell["polars"] = polars
    for v, s in vs.items():
        s["vs_loop"] = {m: _per_round(cell, "loop", v, m) for m in ("wall_s", "own_s")}
        s["vs_loop_of_medians"] = {m: vs["loop"][m]["median"] / s[m]["median"]
                                   for m in ("wall_s", "own_s")}
        if polars is not None:
            s["vs_polars"] = {m: _per_round(cell, polars, v, m) for m in ("wall_s", "own_s")}
            s["vs_polars_of_medians"] = {m: vs[polars][m]["median"] / s[m]["median"]
                                         for m in ("wall_s", "own_s")}


# -- the targets of issues 31 and 32 -------------------------------------------------------------
def _verdict(r: dict[str, float] | None, target: float, at_least: bool = True
             ) -> dict[str, Any]:
    """Met only when every round's value is past ``target``; else missed by the factor the
    worst round is off (``target / min`` for at-least targets, ``max / target`` for at-most
    ones)."""
    if r is None:
        return {"verdict": "not measured"}
    worst = r["min"] if at_least else r["max"]
    met = worst >= target if at_least else worst <= target
    out: dict[str, Any] = {"value": r, "threshold": target, "at_least": at_least,
                           "verdict": "met" if met else "missed"}
    if not met:
        out["missed_by"] = target / worst if at_least else worst / target
    return out


def targets(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target of issues #31 and #32 this benchmark measures, per cell it applies to."""
    rows: list[dict[str, Any]] = []

    def add(tid: str, cell: dict, variant: str, r: dict | None, target: float,
            at_least: bool = True, why: str = "") -> None:
        v = cell["variants"].get(variant)
        row = {"target": tid, "flow": cell["flow"], "format": cell["format"],
               "size": cell["size"], "variant": variant}
        if v is not None and not v["correct"]:
            row["verdict"] = "wrong output"
        elif variant in cell["failed"]:
            row["verdict"] = "failed"
        elif v is None:
            row["verdict"] = "not measured" + (f": {why}" if why else "")
        else:
            row.update(_verdict(r, target, at_least))
        rows.append(row)

    for c in cells:
        vs = c["variants"]
        skipped = c.get("skipped", {})

        def chosen(v: str) -> bool:
            return v in vs or v in skipped or v in c["failed"]  # noqa: B023

        loop_target = 1.6 if c["format"] == "jsonl" else 2.5
        for e in ("reference", "vsn1", "vsn2"):
            v = f"{e}/expr"
            if chosen(v):
                add("31-expr-vs-polars", c, v, (vs.get(v) or {}).get("vs_polars", {})
                    .get("wall_s"), 0.8, why=skipped.get(v, ""))
                add("31-expr-vs-loop", c, v, (vs.get(v) or {}).get("vs_loop", {})
                    .get("wall_s"), loop_target, why=skipped.get(v, ""))
        for e, t in (("reference", 0.7), ("vsn1", 0.6)):
            v = f"{e}/lambda"
            if chosen(v):
                add(f"32-lambda-{e}-vs-loop", c, v,
                    (vs.get(v) or {}).get("vs_loop", {}).get("wall_s"), t,
                    why=skipped.get(v, ""))
        for form in FORMS:
            for a, b, tid in (("vsn1", "vsn2", "32-vsn2-vs-vsn1"),
                              ("reference", "ordered2", "32-ordered2-vs-reference")):
                if f"{a}/{form}" in vs and f"{b}/{form}" in vs:
                    add(f"{tid}-{form}", c, f"{b}/{form}",
                        _per_round(c, f"{a}/{form}", f"{b}/{form}"), 1.0)
            for a, b in P1_P2:
                if f"{a}/{form}" in vs and f"{b}/{form}" in vs:
                    add(f"32-cpu-p2-vs-p1-{form}", c, f"{b}/{form}",
                        _per_round(c, f"{b}/{form}", f"{a}/{form}", "cpu_s"), 1.1,
                        at_least=False)
        if "spark/expr" in vs and "spark-sql" in vs:
            add("31-spark-expr-vs-sql", c, "spark/expr",
                _per_round(c, "spark-sql", "spark/expr", "own_s"), 1 / 1.5)
        cost = c.get("own_cost_us_per_tuple", {}).get("reference/lambda")
        if cost is not None and c["flow"] == "hot_items":
            add("32-own-cost-reference", c, "reference/lambda", cost, 1.0, at_least=False)
        if c["flow"] == "hot_items_costly" and chosen("sn2-processes/lambda"):
            add("32-sn2-vs-reference-costly", c, "sn2-processes/lambda",
                _per_round(c, "reference/lambda", "sn2-processes/lambda"), 1.3,
                why=skipped.get("sn2-processes/lambda", ""))
    for big, small in _size_pairs(cells):
        for v in big["variants"]:
            if "/" in v and v in small["variants"]:
                add("31-memory-10x", big, v, _rss_growth(small, big, v), MEMORY_GROWTH,
                    at_least=False)
    return rows


#: issue #31's "memory bounded at 10 M events (peak RSS not growing with the input)": a
#: variant's peak RSS at ten times the input is at most this many times its own at the
#: smaller input (same flow and format, same run, so the same commit)
MEMORY_GROWTH = 1.2


def _size_pairs(cells: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """(the cell at the largest size, the cell at a tenth of it) per flow and format where the
    run measured both."""
    by = {(c["flow"], c["format"], c["size"]): c for c in cells}
    return [(c, by[(c["flow"], c["format"], c["size"] // 10)]) for c in cells
            if c["size"] % 10 == 0 and (c["flow"], c["format"], c["size"] // 10) in by]


def _rss_growth(small: dict[str, Any], big: dict[str, Any], v: str) -> dict[str, float] | None:
    """min/median/max over the rounds both ran of a variant's peak RSS at the larger input /
    its peak RSS at the smaller one (round k against round k: the rounds alternate the same
    way at both sizes)."""
    return _rounds_ratio(big["variants"][v], small["variants"][v], "peak_rss_mb")


#: what each target id means (the report prints these)
TARGETS = {
    "31-expr-vs-polars": "expression flow within 1.25x of Polars, whole process "
                         "(Polars' time / the flow's >= 0.8)",
    "31-expr-vs-loop": "expression flow >= 1.6x the loop on JSON Lines, >= 2.5x on Parquet",
    "31-spark-expr-vs-sql": "spark expression flow within 1.5x of Spark's native SQL, own "
                            "time (SQL's / the flow's >= 0.67)",
    "31-memory-10x": f"peak RSS at ten times the input at most {MEMORY_GROWTH}x the "
                     "smaller input's (same variant, flow and format, same run)",
    "32-lambda-reference-vs-loop": "lambda flow on the reference >= 0.7x the loop",
    "32-lambda-vsn1-vs-loop": "lambda flow on vsn at parallelism 1 >= 0.6x the loop",
    "32-vsn2-vs-vsn1-lambda": "lambda flow: vsn at parallelism 2 no slower than at 1",
    "32-vsn2-vs-vsn1-expr": "expression flow: vsn at parallelism 2 no slower than at 1",
    "32-ordered2-vs-reference-lambda": "lambda flow: ordered with 2 workers no slower than "
                                       "the reference",
    "32-ordered2-vs-reference-expr": "expression flow: ordered with 2 workers no slower than "
                                     "the reference",
    "32-cpu-p2-vs-p1-lambda": "lambda flow: CPU at parallelism 2 within 1.1x of parallelism 1",
    "32-cpu-p2-vs-p1-expr": "expression flow: CPU at parallelism 2 within 1.1x of "
                            "parallelism 1",
    "32-own-cost-reference": "the engine's own cost per tuple on the reference <= 1 us "
                             "(hot items with lambdas, against the calls loop, own time)",
    "32-sn2-vs-reference-costly": "sn with 2 process channels >= 1.3x the reference on a flow "
                                  "whose key function costs about 5 us (hot_items_costly)",
}


def own_cost(cell: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per engine variant of the lambda form, its own time beyond the calls loop's per input
    tuple, in microseconds, per round (min/median/max)."""
    vs = cell["variants"]
    calls = vs.get(CALLS_BASELINE.get(cell["flow"], "calls"))
    if calls is None:
        return {}
    n = cell["tuples_in"]
    out = {}
    for v, s in vs.items():
        if not v.endswith("/lambda"):
            continue
        common = sorted(set(s["rounds"]) & set(calls["rounds"]))
        if common:
            out[v] = summarize([(s["rounds"][k]["own_s"] - calls["rounds"][k]["own_s"])
                                / n * 1e6 for k in common])
    return out


# -- the run ------------------------------------------------------------------------------------
#: result names a run may write: the default run, and the 10 M-event selection kept beside it
#: (its own block in RESULTS.md; ``USERFLOWS_NAME`` or ``--name`` chooses)
NAMES = ("userflows", "userflows-10m", "userflows-spark")
#: what ``stretchflow bench run userflows-10m`` measures (a quick run: the quick selection):
#: both forms of a flow with a sliding window and a second O+ and of a tumbling one, both
#: formats, on the engines of issues #31's and #32's targets and sn and ordered at
#: parallelism 1 (the CPU target's pairs), at ten million events and at one million (the
#: memory target's pairs: peak RSS at 10 M against 1 M in the same run)
TEN_M: dict[str, Any] = {"flows": ["hot_items", "mean_price"], "forms": ["lambda", "expr"],
                         "engines": ["reference", "vsn1", "vsn2", "sn1-processes",
                                     "sn2-processes", "ordered1", "ordered2"],
                         "sizes": [1_000_000, 10_000_000], "formats": ["jsonl", "parquet"],
                         "rounds": 2}


#: what ``stretchflow bench run userflows-spark`` measures: issue #31's Spark target, the
#: expression form of every flow that has one on the spark engine (local[2]) beside Spark's
#: native DataFrame query of it (``spark-sql``), a million events, both formats (the lambda
#: forms take minutes a run: ``USERFLOWS_SPARK_LAMBDAS=1`` with a run of your own)
SPARK_1M: dict[str, Any] = {"flows": ["currency", "selection", "hot_items", "highest_bid",
                                      "mean_price"],
                            "forms": ["expr"], "engines": ["spark"], "sizes": [SPARK_SIZE],
                            "formats": ["jsonl", "parquet"], "rounds": 2}


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Callable[[str], None] | None = None, name: str | None = None,
        **choose: Any) -> Path:
    """Measures the selection (:func:`selection`; ``choose`` overrides it) and writes
    ``NAME.json`` (``name``, else ``USERFLOWS_NAME``, else ``userflows``: :data:`NAMES`);
    returns its path."""
    name = name or os.environ.get("USERFLOWS_NAME") or "userflows"
    if name not in NAMES:
        raise ValueError(f"USERFLOWS_NAME: unknown {name!r}; known: {', '.join(NAMES)}")
    t_start = time.perf_counter()
    sel = selection(quick, **choose)
    say = say_progress("USERFLOWS_PROGRESS", progress)
    say("userflows: the Polars venv")
    polars, polars_install = ensure_venv(POLARS, cache_dir())
    expr_flows, no_expr = _expr_flows()
    spark_why = _spark_missing() if "spark" in sel["engines"] else None
    if spark_why is None and "spark" in sel["engines"] \
            and importlib.util.find_spec("orjson") is None:
        spark_why = "orjson missing (the Spark SQL program writes with it)"
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="userflows-") as tmp_s:
        tmp = Path(tmp_s)
        for size in sel["sizes"]:
            for fmt in sel["formats"]:
                for flow in sel["flows"]:
                    if ONE_FORMAT.get(flow, fmt) != fmt:
                        continue
                    variants, skipped = _variants(flow, size, sel, polars is not None,
                                                  expr_flows, spark_why)
                    cell = _cell(flow, fmt, size, variants, sel["rounds"], seed, tmp,
                                 polars, say)
                    cell["skipped"] = skipped
                    cell["own_cost_us_per_tuple"] = own_cost(cell)
                    cells.append(cell)
                    # what a run that fails later (or is stopped) still leaves to look at
                    partial = nexmark.data_dir() / f"{name}-partial.json"
                    partial.write_text(orjson.dumps({"selection": sel, "cells": cells}).decode())
    metrics = {"cells": cells, "targets": targets(cells),
               "polars_venv": polars_install, "total_s": time.perf_counter() - t_start}
    if no_expr:
        metrics["no_expression_api"] = no_expr
    params = {
        "quick": quick, "seed": seed, **sel,
        "engines_flags": {e: " ".join(ENGINES[e]) for e in sel["engines"]},
        "data": "stretchflow_bench/nexmark.py: NEXMark-shaped bids (join: persons and "
                "auctions), sorted by ts, cached under " + str(nexmark.data_dir()),
        "loop": "stretchflow_bench/userflow_loops.py as a script (orjson chunks for JSON "
                "Lines, pyarrow to_pydict of the needed columns for Parquet)",
        "polars": f"peer_programs/{POLARS.program} in venv {POLARS.venv} "
                  f"({', '.join(POLARS.requirements)}); eager and lazy, the faster by "
                  "median is Polars",
        "spark_sql": "peer_programs/spark_userflows.py, local[2], the project's pyspark",
        "calls": "hot items by a loop calling the lambda flow's own functions "
                 "(userflow_loops.hot_items_calls); own cost = (engine own - calls own) "
                 "/ tuples in",
        "outputs": "every round's output against the loop's: a digest of the multiset of "
                   f"rows; on a difference row by row, float fields within relative {REL_TOL}"
                   ", others exact",
        "times": "wall_s: the parent's clock around the whole process; own_s: the run "
                 "summary's elapsed (engines) or the program's own (loop, Polars: from "
                 "reading the input to closing the output; Spark SQL: after the session "
                 "started, startup_s apart); cpu_s: the process, its threads and every "
                 "process it started",
        "ratios": "vs_loop / vs_polars: the baseline's time / the variant's (> 1: faster), "
                  "per round (min/median/max over the rounds) and of medians; a verdict "
                  "is met only when every round's ratio is past the target",
    }
    png = draw(metrics, results_dir(out_dir) / f"{name}.png", quick)
    return write_result(name, params, metrics, out_dir, plot=png.name)


def draw(metrics: dict[str, Any], path: Path, quick: bool) -> Path:
    """One panel per input format (the first size measured): per flow, each variant's speed
    against the loop (the loop's median wall time / the variant's, log scale; above 1 is
    faster than the loop), colour by engine, a circle for the lambda form and a square for
    the expression form, Polars as a black star; a variant whose output was wrong is red x."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    cells = metrics.get("cells", [])
    size = min((c["size"] for c in cells), default=0)
    formats = [f for f in FORMATS if any(c["format"] == f and c["size"] == size for c in cells)]
    fig, axes = plt.subplots(1, max(len(formats), 1), figsize=(5.6 * max(len(formats), 1), 4.2),
                             dpi=110, squeeze=False)
    engines = list(ENGINES)
    colors = dict(zip(engines, plt.get_cmap("tab10").colors, strict=False))
    for ax, fmt in zip(axes[0], formats, strict=False):
        here = [c for c in cells if c["format"] == fmt and c["size"] == size]
        for x, c in enumerate(here):
            for v, s in c["variants"].items():
                r = (s.get("vs_loop_of_medians") or {}).get("wall_s")
                if r is None:
                    continue
                engine, _, form = v.partition("/")
                dx = (engines.index(engine) - len(engines) / 2) * 0.08 if engine in colors \
                    else 0.0
                if not s.get("correct", True):
                    ax.plot(x + dx, r, "x", color="tab:red", markersize=8)
                elif v == c.get("polars"):
                    ax.plot(x, r, "*", color="black", markersize=10)
                elif engine in colors:
                    ax.plot(x + dx, r, "s" if form == "expr" else "o",
                            color=colors[engine], markersize=5, alpha=0.85)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xticks(range(len(here)), [c["flow"] for c in here], rotation=20, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("loop's time / variant's (whole process)")
        ax.set_title(f"{fmt}, {size:,} events: > 1 is faster than the loop", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    for e in engines:
        axes[0][0].plot([], [], "o", color=colors[e], label=e)
    axes[0][0].plot([], [], "s", color="gray", label="expr form (o: lambdas)")
    axes[0][0].plot([], [], "*", color="black", label="Polars")
    axes[0][0].legend(fontsize=6, ncol=2)
    return save_figure(plt, fig, path, quick)


def main(argv: list[str] | None = None) -> None:
    """``python -m stretchflow_bench.userflows [--quick] [--flows ...] ...``"""
    p = argparse.ArgumentParser(prog="python -m stretchflow_bench.userflows",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    for name in ("flows", "forms", "engines", "formats"):
        p.add_argument(f"--{name}", default=None, help="comma-separated")
    p.add_argument("--sizes", default=None, help="comma-separated event counts")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--name", default=None, choices=NAMES, help="the result's name")
    a = p.parse_args(argv)
    split = (lambda s: s.split(",") if s else None)  # noqa: E731
    path = run(a.quick, a.out, flows=split(a.flows), forms=split(a.forms),
               engines=split(a.engines), formats=split(a.formats),
               sizes=[int(x) for x in a.sizes.split(",")] if a.sizes else None,
               rounds=a.rounds, name=a.name,
               progress=lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}",
                                        file=sys.stderr, flush=True))
    print(path)


if __name__ == "__main__":
    main()
