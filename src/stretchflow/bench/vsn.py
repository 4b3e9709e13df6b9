"""``stretchflow bench vsn``: the VSN executor's benchmarks (STRETCH journal §8, scaled to a
2-core machine running CPython).

* ``reconfiguration`` (Q4): wordcount replayed below capacity; the parallelism steps through
  1→2→4→8→16 and back, several times; each reconfiguration's time from the reconfigure call
  to the end of the barrier action.
* ``forward`` (Q2): Op. 15 over two inputs; throughput at full speed and latency at a paced
  rate, for Π = 1, 2, 4, 8.
* ``wordcount``: VSN at Π = 1 against the reference executor on the same input, alternating.
* ``scalejoin`` (Q3): comparisons per second against Π, with a hand-written single-thread
  band join (1T) on the same input in the same invocation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import stretchflow as sf

from ..io.generators import bandjoin, tweets
from ..queries import build_query
from .common import summarize

STEPS = (1, 2, 4, 8, 16, 8, 4, 2, 1)


def _pct(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    n = len(v)
    return {"p50": v[n // 2], "p99": v[min(n - 1, int(n * 0.99))], "max": v[-1], "n": n}


def reconfiguration(rate: float = 1000.0, cycles: int = 4, gap: int = 400,
                    seed: int = 1) -> dict[str, Any]:
    steps = list(STEPS[1:]) * cycles
    schedule = [(gap * (k + 1), p) for k, p in enumerate(steps)]
    rows = gap * (len(steps) + 2)
    flow = sf.Flow("reconfiguration")
    src = sf.io.generated("tweets", rows=rows, seed=seed).at_rate(rate)
    # outputs are counted, not kept: 190 000 live output tuples would make every full
    # collection of the run traverse them (~60 ms each here), a cost of the harness that
    # lands in whichever reconfiguration it overlaps (docs/vsn.md)
    sink = build_query("wordcount", [flow.source(src)]).sink(sf.io.callback(_drop))
    res = flow.run(engine="vsn", parallelism=1, max_parallelism=16, reconfigure=schedule)
    done = [r for r in res.extra["reconfigurations"] if r["applied"]]
    by_step: dict[str, list[float]] = {}
    for r in done:
        by_step.setdefault(f"{r['parallelism_before']}->{r['parallelism_after']}",
                           []).append(r["duration_ms"])
    return {
        "query": "wordcount", "rate_tuples_per_s": rate, "requested": len(schedule),
        "applied": len(done),
        "duration_ms": _pct([r["duration_ms"] for r in done]),
        "by_transition_ms": {k: _pct(v) for k, v in by_step.items()},
        "latency_ms": res.extra["latency_ms"],
        "outputs": sink.count,
    }


def _drop(ts: int, payload: Any) -> None:
    """A sink function that keeps nothing."""


def forward(rows: int = 40_000, paced_rate: float = 2000.0,
            parallelisms: tuple[int, ...] = (1, 2, 4, 8), seed: int = 1) -> dict[str, Any]:
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=5000))
    out: dict[str, Any] = {}
    for p in parallelisms:
        flow = sf.Flow("forward")
        streams = [flow.source(sf.io.iterable(left, name="left")),
                   flow.source(sf.io.iterable(right, name="right"))]
        build_query("forward", streams).collect()
        res = flow.run(engine="vsn", parallelism=p)
        # live sources: each replayed in event time at half the paced rate, 5 s long
        pl, pr = (t.to_pylist() for t in bandjoin(int(paced_rate * 2.5), seed=seed,
                                                   rate=paced_rate / 2))
        flow = sf.Flow("forward-paced")
        streams = [flow.source(sf.io.iterable(pl, name="left").replay()),
                   flow.source(sf.io.iterable(pr, name="right").replay())]
        build_query("forward", streams).collect()
        paced = flow.run(engine="vsn", parallelism=p)
        out[str(p)] = {"throughput_tuples_per_s": res.throughput,
                       "latency_ms_at_full_speed": res.extra["latency_ms"],
                       "paced_rate": paced_rate,
                       "latency_ms_paced": paced.extra["latency_ms"]}
    return out


def wordcount_vs_reference(rows: int = 100_000, repeats: int = 3,
                           seed: int = 1) -> dict[str, Any]:
    from ..io.generators import write_table

    path = Path("benchmarks/results/.wordcount-input.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(tweets(rows, seed=seed), path)
    runs: dict[str, list[float]] = {"reference": [], "vsn1": []}
    try:
        for _ in range(repeats):
            for engine, opts in (("reference", {}), ("vsn1", {"parallelism": 1})):
                flow = sf.Flow("wordcount")
                build_query("wordcount", [flow.source(sf.io.jsonl(path))]).collect()
                res = flow.run(engine="vsn" if engine == "vsn1" else engine, **opts)
                runs[engine].append(res.throughput)
    finally:
        path.unlink(missing_ok=True)
    ratios = [v / r for v, r in zip(runs["vsn1"], runs["reference"], strict=True)]
    return {"rows": rows, "tuples_per_s": {k: summarize(v) for k, v in runs.items()},
            "ratio_vsn1_over_reference": summarize(ratios)}


def scalejoin_1t(left: list[dict], right: list[dict], window: int, band: int) -> int:
    """A hand-written single-thread band join (1T): merge the inputs by ts; for each tuple,
    purge the opposite window and compare against all of it in one numpy call; store the
    tuple. No engine, no keys. Returns the number of matches."""
    from ..queries.scalejoin import Columns

    wl, wr = Columns(), Columns()
    i = j = matches = 0
    while i < len(left) or j < len(right):
        if j >= len(right) or (i < len(left) and left[i]["ts"] <= right[j]["ts"]):
            t = left[i]
            i += 1
            wr.purge(t["ts"] - window)
            matches += len(wr.band_match(t["x"], t["y"], band))
            wl.append(t["ts"], t["x"], t["y"], t["id"])
        else:
            t = right[j]
            j += 1
            wl.purge(t["ts"] - window)
            matches += len(wl.band_match(t["a"], t["b"], band))
            wr.append(t["ts"], t["a"], t["b"], t["id"])
    return matches


def scalejoin_1t_runs(left: list[dict], right: list[dict], window: int, band: int,
                      run: int = 256) -> int:
    """1T over runs: the same hand-written loop, but ``run`` merged tuples at a time through
    the vectorized kernel the VSN instances use (queries.scalejoin.join_run), one key, no
    engine. Returns the number of matches."""
    import heapq

    import numpy as np

    from ..queries.scalejoin import Columns, join_run, run_columns

    merged = heapq.merge(((t["ts"], 0, t) for t in left), ((t["ts"], 1, t) for t in right),
                         key=lambda e: (e[0], e[1]))
    stores = (Columns(), Columns())
    matches = 0
    items = list(merged)
    for a in range(0, len(items), run):
        part = items[a:a + run]
        cols = run_columns([e[0] for e in part], [e[2] for e in part], [e[1] for e in part])
        keep = np.ones(len(part), dtype=bool)
        matches += len(join_run(stores, cols, keep, band, window))
    return matches


def _comparisons(left: list[dict], right: list[dict], window: int) -> int:
    """Σ over tuples of the opposite window's size when they arrive (same for every engine)."""
    import bisect

    lt = [t["ts"] for t in left]
    rt = [t["ts"] for t in right]
    total = 0
    for ts in lt:
        total += bisect.bisect_right(rt, ts) - bisect.bisect_left(rt, ts - window)
    for ts in rt:
        total += bisect.bisect_left(lt, ts) - bisect.bisect_left(lt, ts - window)
    return total


def kernel_threads(seconds: float = 1.0) -> dict[str, float]:
    """The machine's ceiling for GIL-free work: the band kernel alone (no engine) in 1 and
    2 threads, comparisons/s. On a VM the two vCPUs may not give 2x."""
    import threading

    import numpy as np

    from ..queries.band_kernel import band_pairs

    rng = np.random.default_rng(1)
    u, v = rng.uniform(1, 10_000, 20_000), rng.uniform(1, 10_000, 20_000)
    qu, qv = rng.uniform(1, 10_000, 256), rng.uniform(1, 10_000, 256)
    lo, hi = np.zeros(256, dtype=np.int64), np.full(256, 20_000, dtype=np.int64)
    band_pairs(u, v, lo, hi, qu, qv, 10.0)  # compiled before timing
    out = {}
    for n in (1, 2):
        done = [0] * n

        def work(k: int, stop: float, done: list[int]) -> None:
            while time.perf_counter() < stop:
                band_pairs(u, v, lo, hi, qu, qv, 10.0)
                done[k] += 1

        stop = time.perf_counter() + seconds
        ts = [threading.Thread(target=work, args=(k, stop, done)) for k in range(n)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[f"threads{n}"] = sum(done) * 256 * 20_000 / (time.perf_counter() - t0)
    out["ratio_2_over_1"] = out["threads2"] / out["threads1"]
    return out


def scalejoin(rows: int = 60_000, window: int = 600_000, rate: float = 100.0, band: int = 10,
              keys: int = 2, parallelisms: tuple[int, ...] = (1, 2), repeats: int = 5,
              seed: int = 1) -> dict[str, Any]:
    """Comparisons/s of VSN ScaleJoin at each Π and of the two 1T joins, ``repeats`` rounds
    with every variant once per round; speed-ups are taken within a round."""
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=rate))
    comps = _comparisons(left, right, window)
    rates: dict[str, list[float]] = {}
    speedups: dict[str, list[float]] = {}
    matches = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        found = scalejoin_1t(left, right, window, band)
        rates.setdefault("1T", []).append(comps / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        if scalejoin_1t_runs(left, right, window, band) != found:
            raise RuntimeError("the run-at-a-time 1T join disagrees with the tuple-at-a-time one")
        rates.setdefault("1T-runs", []).append(comps / (time.perf_counter() - t0))
        matches = found
        for p in parallelisms:
            flow = sf.Flow("scalejoin")
            streams = [flow.source(sf.io.iterable(left, name="left")),
                       flow.source(sf.io.iterable(right, name="right"))]
            col = build_query("scalejoin", streams, window=window, band=band,
                              keys=keys).collect()
            res = flow.run(engine="vsn", parallelism=p, max_parallelism=max(parallelisms))
            if len(col.items) != matches:
                raise RuntimeError(f"scalejoin at Π={p} found {len(col.items)} matches, "
                                   f"1T {matches}")
            rates.setdefault(f"vsn{p}", []).append(comps / res.elapsed)
        for p in parallelisms:
            speedups.setdefault(f"vsn{p}", []).append(rates[f"vsn{p}"][-1] / rates["vsn1"][-1])
    out: dict[str, Any] = {"rows_per_stream": rows, "window_ms": window, "keys": keys,
                           "comparisons": comps, "matches": matches, "repeats": repeats}
    for name, vals in rates.items():
        out[name] = {"comparisons_per_s": summarize(vals)}
    out["speedup_vs_vsn1"] = {k: summarize(v) for k, v in speedups.items()}
    out["vsn1_over_1T_runs"] = (out["vsn1"]["comparisons_per_s"]["median"]
                                / out["1T-runs"]["comparisons_per_s"]["median"])
    out["kernel_alone"] = kernel_threads()
    return out


__all__ = ["forward", "reconfiguration", "scalejoin", "scalejoin_1t", "scalejoin_1t_runs",
           "wordcount_vs_reference"]
