"""``stretchflow bench reference``: the reference executor against the 1T loop, the
hand-written pane loop of :mod:`.onethread` (the strongest single-thread loop we have).

Each run is a fresh child process (so its peak RSS is its own). The engine and the pane loop
alternate on the same generated input, and the order flips every repeat (reference first in
even repeats, 1T first in odd ones) so neither always runs on the warmer or quieter machine.
The 1-minute load average is recorded before and after every run. The summary gives
min/median/max of each variant, the per-repeat throughput ratio, and the ratio of the two
medians.

After every repeat the two output files are compared as the determinism contract compares
outputs: per timestamp, as multisets of records (rows of one timestamp may come in any order),
each stream's timestamps non-decreasing. ``outputs_identical`` in the JSON is that
comparison's verdict. If the outputs differ, the JSON is still written (with the first
difference) and :class:`OutputsDiffer` is raised, so the CLI exits non-zero.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from stretchflow.errors import StretchflowError

from .common import repeat_probe, summarize, write_result
from .peak import peak_rss_mb


class OutputsDiffer(StretchflowError):
    """The engine's output and the 1T loop's output are not the same multisets per ts."""


class Comparison(NamedTuple):
    """The verdict of :func:`compare_outputs`."""

    identical: bool
    rows: int  # rows read from the first file (all of it when identical)
    difference: str | None  # the first difference found, None when identical


def _groups(path: Path) -> Iterator[tuple[int, Counter[bytes], int]]:
    """``(ts, multiset of records, line of the group's first row)`` for each run of rows with
    the same ``ts``, in file order. A record's key is its JSON with sorted keys, so field
    order does not matter and 1 and 1.0 stay different. Raises ValueError on a line that is
    not a JSON object with an integer ``ts``, and on a ts lower than the one before (an
    output stream must not go back in time)."""
    loads, dumps, sort = orjson.loads, orjson.dumps, orjson.OPT_SORT_KEYS
    cur: int | None = None
    group: Counter[bytes] = Counter()
    first = 0
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = loads(line)
            except orjson.JSONDecodeError as e:
                raise ValueError(f"{path}, line {n}: not JSON ({e}): {line[:200]!r}") from None
            ts = rec.get("ts") if isinstance(rec, dict) else None
            if type(ts) is not int:
                raise ValueError(f"{path}, line {n}: not an object with an integer ts: "
                                 f"{line[:200]!r}")
            if ts != cur:
                if cur is not None:
                    if ts < cur:
                        raise ValueError(f"{path}, line {n}: ts {ts} after ts {cur}: the "
                                         f"output goes back in time")
                    yield cur, group, first
                cur, group, first = ts, Counter(), n
            group[dumps(rec, option=sort)] += 1
    if cur is not None:
        yield cur, group, first


def _first(c: Counter[bytes]) -> str:
    """The smallest record of a multiset, with its surplus count, for an error message."""
    key = min(c)
    return f"{key.decode()} (x{c[key]})"


def compare_outputs(a: str | os.PathLike, b: str | os.PathLike) -> Comparison:
    """Compares two JSON Lines outputs per timestamp as multisets of records, reading both
    files in step one timestamp at a time (memory: one timestamp's rows). A file whose ts
    goes back, or that holds a line that is not a record, makes them differ; the difference
    names the files, the ts, the line and the record."""
    pa, pb = Path(a), Path(b)
    rows = 0
    try:
        ga, gb = _groups(pa), _groups(pb)
        while True:
            x, y = next(ga, None), next(gb, None)
            if x is None and y is None:
                return Comparison(True, rows, None)
            if y is None or (x is not None and x[0] < y[0]):
                assert x is not None
                return Comparison(False, rows, f"ts {x[0]} is in {pa} (line {x[2]}: "
                                  f"{_first(x[1])}) but not in {pb}")
            if x is None or y[0] < x[0]:
                return Comparison(False, rows, f"ts {y[0]} is in {pb} (line {y[2]}: "
                                  f"{_first(y[1])}) but not in {pa}")
            if x[1] != y[1]:
                surplus = [f"{p} (rows from line {line}) has {_first(only)} more"
                           for p, line, only in ((pa, x[2], x[1] - y[1]),
                                                 (pb, y[2], y[1] - x[1])) if only]
                return Comparison(False, rows, f"ts {x[0]}: {'; '.join(surplus)}")
            rows += x[1].total()
    except ValueError as e:
        return Comparison(False, rows, str(e))


def _child(variant: str, query: str, path: str, out: str) -> dict[str, Any]:
    if variant == "1T":
        from .onethread import run_loop

        r = run_loop(query, path, out)  # the query's default parameters, as the engine's
        elapsed, n_in, n_out = r["elapsed_s"], r["tuples_in"], r["rows_out"]
    else:
        import stretchflow as sf
        from stretchflow.queries import build_query

        flow = sf.Flow(query)
        build_query(query, [flow.source(sf.io.jsonl(path))]).sink(out)
        res = flow.run(engine=variant)
        elapsed, n_in, n_out = res.elapsed, res.total_in, sum(res.tuples_out.values())
    rss = peak_rss_mb()
    return {"elapsed_s": elapsed, "tuples_in": n_in, "rows_out": n_out,
            "tuples_per_s": n_in / elapsed, "peak_rss_mb": rss}


def _measure(variant: str, query: str, data: Path, out: Path) -> tuple[dict[str, Any],
                                                                         dict[str, Any]]:
    """One run in a fresh process: its numbers, with the 1-minute load average just before
    and after, and the probe of what else ran meanwhile (:func:`.common.repeat_probe`)."""
    with repeat_probe() as probe:
        proc = subprocess.run(
            [sys.executable, "-m", "stretchflow_bench.reference", variant, query, str(data),
             str(out)],
            check=True, capture_output=True, text=True,
        )
    return ({**json.loads(proc.stdout), "load_1min_before": probe["load_before"],
             "load_1min_after": probe["load_after"]}, probe)


def run(query: str = "wordcount", rows: int = 200_000, seed: int = 1, repeats: int = 3,
        out_dir: str | None = None, progress: Any = None, quick: bool = False) -> Path:
    """Measures and writes ``reference-<query>.json``; returns its path. Raises
    :class:`OutputsDiffer` (after writing the JSON) when the two outputs differ."""
    from .onethread import BASELINE, LOOPS

    if query not in LOOPS:
        raise ValueError(f"a 1T baseline exists for {', '.join(LOOPS)} only, not {query!r}")
    if repeats < 1 or rows < 1:
        raise ValueError(f"bench reference: rows and repeats must be >= 1, got rows={rows}, "
                         f"repeats={repeats}")
    from stretchflow.io.generators import tweets, write_table

    runs: dict[str, list[dict[str, Any]]] = {"reference": [], "1T": []}
    rounds: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    verdict = Comparison(True, 0, None)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "tweets.jsonl"
        write_table(tweets(rows, seed=seed), data)
        outs = {v: Path(tmp) / f"out-{v}.jsonl" for v in runs}
        for rep in range(repeats):
            order = ("reference", "1T") if rep % 2 == 0 else ("1T", "reference")
            for variant in order:
                if progress:
                    progress(f"repeat {rep + 1}/{repeats}: {variant}")
                outs[variant].unlink(missing_ok=True)  # never compare a previous repeat's file
                numbers, probe = _measure(variant, query, data, outs[variant])
                runs[variant].append(numbers)
                probes.append({"repeat": rep + 1, "variant": variant, **probe})
            verdict = compare_outputs(outs["reference"], outs["1T"])
            ref, one = runs["reference"][-1], runs["1T"][-1]
            rounds.append({
                "repeat": rep + 1, "order": list(order),
                "ratio_reference_over_1T": ref["tuples_per_s"] / one["tuples_per_s"],
                "outputs_identical": verdict.identical, "rows_compared": verdict.rows,
                **{f"{v}_load_1min": [runs[v][-1]["load_1min_before"],
                                      runs[v][-1]["load_1min_after"]] for v in order},
            })
            if not verdict.identical:
                break  # a wrong output makes any speed meaningless
    metrics: dict[str, Any] = {
        variant: {k: summarize([r[k] for r in rs]) for k in rs[0]} for variant, rs in runs.items()
    }
    metrics["ratio_reference_over_1T"] = summarize([r["ratio_reference_over_1T"]
                                                    for r in rounds])
    # the median of per-repeat ratios pairs runs made moments apart; the ratio of the medians
    # is robust to one variant having a single bad run: both are reported, they should agree
    metrics["ratio_of_medians_reference_over_1T"] = (
        statistics.median(r["tuples_per_s"] for r in runs["reference"])
        / statistics.median(r["tuples_per_s"] for r in runs["1T"]))
    metrics["probes"] = probes  # in metrics, where write_result looks for them ("quiet")
    path = write_result(
        f"reference-{query}",
        {"query": query, "rows": rows, "seed": seed, "repeats": repeats, "quick": quick,
         "input": "generated tweets, JSON Lines", "output": "JSON Lines file",
         "baseline_1T": BASELINE,
         "order": "alternating: reference first in odd repeats (1, 3, ...), 1T first in even"},
        metrics,
        out_dir,
        outputs_identical=verdict.identical,
        output_difference=verdict.difference,
        rounds=rounds,
    )
    if not verdict.identical:
        raise OutputsDiffer(f"bench reference: the reference executor's and the 1T loop's "
                            f"{query} outputs differ in repeat {len(rounds)}: "
                            f"{verdict.difference} (results in {path})")
    return path


if __name__ == "__main__":
    print(json.dumps(_child(*sys.argv[1:5])))
