"""``stretchflow bench reference``: the reference executor against the 1T loop, the
hand-written pane loop of :mod:`.onethread` (the strongest single-thread loop we have).

Each repetition runs in a fresh child process (so its peak RSS is its own), the engine and the
hand-written loop alternating on the same generated input; the ratio of their throughputs is
computed per repetition and summarized.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .common import peak_rss_mb, summarize, write_result


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


def run(query: str = "wordcount", rows: int = 200_000, seed: int = 1, repeats: int = 3,
        out_dir: str | None = None, progress: Any = None) -> Path:
    """Measures and writes ``reference-<query>.json``; returns its path."""
    from .onethread import BASELINE, LOOPS

    if query not in LOOPS:
        raise ValueError(f"a 1T baseline exists for {', '.join(LOOPS)} only, not {query!r}")
    from ..io.generators import tweets, write_table

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "tweets.jsonl"
        write_table(tweets(rows, seed=seed), data)
        runs: dict[str, list[dict[str, Any]]] = {"reference": [], "1T": []}
        for rep in range(repeats):
            for variant in ("reference", "1T"):
                if progress:
                    progress(f"repeat {rep + 1}/{repeats}: {variant}")
                out = Path(tmp) / f"out-{variant}.jsonl"
                proc = subprocess.run(
                    [sys.executable, "-m", "stretchflow.bench.reference", variant, query,
                     str(data), str(out)],
                    check=True, capture_output=True, text=True,
                )
                runs[variant].append(json.loads(proc.stdout))
            # rows of one ts may come in another order: compare the multisets of rows
            same = sorted(Path(tmp, "out-reference.jsonl").read_bytes().splitlines()) == sorted(
                Path(tmp, "out-1T.jsonl").read_bytes().splitlines())
            if not same:
                raise RuntimeError(f"reference and 1T {query} outputs differ")
    ratios = [r["tuples_per_s"] / o["tuples_per_s"]
              for r, o in zip(runs["reference"], runs["1T"], strict=True)]
    metrics = {
        variant: {k: summarize([r[k] for r in rs]) for k in rs[0]} for variant, rs in runs.items()
    }
    metrics["ratio_reference_over_1T"] = summarize(ratios)
    return write_result(
        f"reference-{query}",
        {"query": query, "rows": rows, "seed": seed, "repeats": repeats,
         "input": "generated tweets, JSON Lines", "output": "JSON Lines file",
         "baseline_1T": BASELINE},
        metrics,
        out_dir,
        outputs_identical=True,
    )


if __name__ == "__main__":
    print(json.dumps(_child(*sys.argv[1:5])))
