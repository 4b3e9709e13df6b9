"""Benchmarks of the Spark engine (issue #5) on ``local[2]`` against the local executors.

* ``spark-wordcount``: the same generated tweets through the reference and sn executors and
  through Spark as a batch job and as a streaming query (a directory of JSONL files,
  ``maxFilesPerTrigger=1``); session start, throughput excluding the start, end-to-end time,
  micro-batch durations; plus the streaming query with its stateful stage grouped by each raw
  word (G so large that every word is its own group) against key groups.
* ``spark-scalejoin``: band join (Q3's ScaleJoin) as a Spark batch job against the local
  executors on the same input.

Run: ``stretchflow bench run spark-wordcount [--quick]``. The session is started once per
process; its start is measured by the first run and reported separately.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import repeat_probe, summarize, write_result
from .spark_hosts import run as run_hosts_loss


def _session(master: str = "local[2]") -> tuple[Any, float]:
    from stretchflow.spark.session import get_session

    t0 = time.perf_counter()
    spark = get_session(master)  # state partitions: the session default, one per core
    return spark, time.perf_counter() - t0


def _wordcount_flow(src: Any) -> Any:
    import stretchflow as sf
    from stretchflow.queries import build_query

    flow = sf.Flow("wordcount")
    build_query("wordcount", [flow.source(src)]).sink(sf.io.Collector())
    return flow


def _stream_dir(recs: list[dict], d: Path, files: int) -> None:
    from stretchflow.spark.streaming import end_marker

    d.mkdir(parents=True)
    base = time.time() - 100_000
    step = -(-len(recs) // files)
    k = 0
    for j in range(0, len(recs), step):
        p = d / f"part-{k:05d}.jsonl"
        with open(p, "w") as f:
            for r in recs[j:j + step]:
                f.write(json.dumps(r) + "\n")
        os.utime(p, (base + k, base + k))  # the file source orders files by mtime
        k += 1
    p = d / f"part-{k:05d}.jsonl"
    p.write_text(end_marker(recs[-1]["ts"]))
    os.utime(p, (base + k, base + k))


def _stream(spark: Any, recs: list[dict], work: Path, files: int,
            key_groups: int) -> dict[str, Any]:
    import stretchflow as sf
    from stretchflow.spark.streaming import run_stream

    d = work / f"stream-{key_groups}"
    _stream_dir(recs, d, files)
    flow = _wordcount_flow(sf.io.jsonl(d))
    t0 = time.perf_counter()
    info = run_stream(flow, spark, work / f"ckpt-{key_groups}", key_groups, max_files=1)
    elapsed = time.perf_counter() - t0
    durs = [b["duration_ms"] for b in info["batches"] if b["rows"]]
    # steady state: the data batches after the first (which pays query start and worker
    # start-up); throughput = their rows over their summed durations
    steady = info["batches"][1:]
    s_rows = sum(b["rows"] for b in steady if b["rows"])
    s_ms = sum(b["duration_ms"] for b in steady if b["rows"])
    return {"tweets": len(recs), "files": files, "key_groups": key_groups,
            "end_to_end_s": elapsed, "tweets_per_s_end_to_end": len(recs) / elapsed,
            "tweets_per_s_steady": s_rows / (s_ms / 1000) if s_ms else None,
            "micro_batch_ms": summarize(durs) if durs else None,
            "outputs": flow.sinks[0][1].count}


def wordcount(rows: int = 200_000, raw_rows: int = 5_000, files: int = 10,
              seed: int = 1) -> dict[str, Any]:
    import stretchflow as sf
    from stretchflow.io.generators import tweets, write_table

    spark, start_s = _session()
    work = Path(tempfile.mkdtemp(prefix="sf-bench-spark-"))
    try:
        table = tweets(rows, seed=seed)
        path = work / "tweets.jsonl"
        write_table(table, path)
        out: dict[str, Any] = {"rows": rows, "session_start_s": start_s}
        # spark_batch is the first Spark job of the process (the session's warm-up job
        # excepted); spark_batch_again the same job once more (JIT-compiled JVM code paths)
        for name, engine, opts in (("reference", "reference", {}),
                                   ("sn2", "sn", {"parallelism": 2}),
                                   ("spark_batch", "spark", {}),
                                   ("spark_batch_again", "spark", {})):
            flow = _wordcount_flow(sf.io.jsonl(path))
            t0 = time.perf_counter()
            res = flow.run(engine=engine, **opts)
            wall = time.perf_counter() - t0
            out[name] = {"tweets_per_s": res.throughput, "elapsed_s": res.elapsed,
                         "end_to_end_s": wall, "outputs": res.tuples_out}
        recs = table.to_pylist()
        out["state_partitions"] = int(spark.conf.get("spark.sql.shuffle.partitions"))
        # the first streaming query of the process pays for the stateful Python workers'
        # start and JIT; the same query again (fresh checkpoint) shows a running service
        out["spark_stream_key_groups"] = _stream(spark, recs, work, files, 16)
        out["spark_stream_key_groups_again"] = _stream(spark, recs, work / "again", files, 16)
        # (nearly) each word its own group: G = 65536, the streaming maximum, far above the
        # generator's vocabulary (10 000 words: ~7% of them share a group)
        out["spark_stream_raw_key"] = _stream(spark, recs[:raw_rows], work,
                                              max(2, files // 2), 1 << 16)
        (work / "same").mkdir()
        out["spark_stream_key_groups_same_input_as_raw"] = _stream(
            spark, recs[:raw_rows], work / "same", max(2, files // 2), 16)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: the local executors each Spark run is set beside: (name, engine, options)
LOCAL_ENGINES = (("reference", "reference", {}), ("vsn1", "vsn", {"parallelism": 1}),
                 ("sn2", "sn", {"parallelism": 2}))


def _side_by_side(make_flow: Callable[[], Any]) -> dict[str, Any]:
    """Runs a fresh flow from ``make_flow()`` on each local engine and on Spark (batch);
    every run must give the reference's output count."""
    out: dict[str, Any] = {}
    for name, engine, opts in (*LOCAL_ENGINES, ("spark_batch", "spark", {})):
        flow = make_flow()
        t0 = time.perf_counter()
        with repeat_probe() as probe:  # what else ran meanwhile: write_result's "quiet"
            res = flow.run(engine=engine, **opts)
        out[name] = {"tuples_per_s": res.throughput, "elapsed_s": res.elapsed,
                     "end_to_end_s": time.perf_counter() - t0, "outputs": res.tuples_out,
                     "probe": probe}
        if out[name]["outputs"] != out["reference"]["outputs"]:
            raise RuntimeError(f"{name} gave {res.tuples_out} outputs, the reference "
                               f"{out['reference']['outputs']}")
    return out


def scalejoin(rows: int = 4_000, window: int = 60_000, band: int = 10, keys: int = 4,
              seed: int = 1) -> dict[str, Any]:
    """STRETCH Q3 on Spark beside the local executors, on the same band-join input."""
    import stretchflow as sf
    from stretchflow.io.generators import bandjoin
    from stretchflow.queries import build_query

    _, start_s = _session()
    left, right = (t.to_pylist() for t in bandjoin(rows, seed=seed, rate=100.0))

    def make_flow() -> Any:
        flow = sf.Flow("scalejoin")
        streams = [flow.source(sf.io.iterable(left, name="left")),
                   flow.source(sf.io.iterable(right, name="right"))]
        build_query("scalejoin", streams, window=window, band=band, keys=keys).collect()
        return flow

    return {"rows_per_input": rows, "window": window, "band": band, "keys": keys,
            "session_start_s": start_s, **_side_by_side(make_flow)}


def paircount(rows: int = 30_000, distance: int = 3, seed: int = 1) -> dict[str, Any]:
    """STRETCH Q1's paircount (pairs of words at most ``distance`` apart, B = 3 by default)
    on Spark beside the local executors, on the same generated tweets."""
    import stretchflow as sf
    from stretchflow.io.generators import tweets
    from stretchflow.queries import build_query

    _, start_s = _session()
    recs = tweets(rows, seed=seed).to_pylist()

    def make_flow() -> Any:
        flow = sf.Flow("paircount")
        build_query("paircount", [flow.source(sf.io.iterable(recs, name="tweets"))],
                    distance=distance).collect()
        return flow

    return {"rows": rows, "distance": distance, "session_start_s": start_s,
            **_side_by_side(make_flow)}


def rate_load(rates: tuple[int, ...] = (5_000, 10_000, 20_000, 40_000), seconds: int = 20,
              key_groups: int = 16) -> dict[str, Any]:
    """Streaming wordcount fed by Spark's rate source (tweet payloads, unbounded) at each
    rate, 1 s trigger, measured for ``seconds`` after the first micro-batch (which pays the
    query's start): it keeps up when it processes rows at least as fast as they are generated
    (the micro-batches then stay about a trigger interval long instead of growing). The
    outputs' correctness on this path is what tests/test_spark.py checks (a bounded rate
    source against the reference)."""
    import stretchflow as sf
    from stretchflow.queries import build_query
    from stretchflow.spark.streaming import StreamRun

    spark, start_s = _session()
    out: dict[str, Any] = {"session_start_s": start_s, "seconds": seconds, "trigger": "1 second"}
    for rate in rates:
        flow = sf.Flow("wordcount")
        src = sf.io.rate(rate, payload="tweet")
        build_query("wordcount", [flow.source(src)]).sink(sf.io.Collector())
        work = Path(tempfile.mkdtemp(prefix="sf-bench-rate-"))
        try:
            run = StreamRun(flow, spark, work / "ckpt", key_groups).start()
            try:
                while not any(p.numInputRows for p in run.progress()):
                    if not run.query.isActive:
                        run.await_end(0.01)  # raises the query's error
                    time.sleep(0.2)
                first = len(run.progress())
                run.await_end(seconds)
            finally:
                run.stop()
                run.close_sinks()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        steady = [p for p in run.progress()[first:] if p.numInputRows]
        rows = sum(p.numInputRows for p in steady)
        ms = sum(p.durationMs.get("triggerExecution") for p in steady)
        processed = rows / (ms / 1000) if ms else None
        out[str(rate)] = {
            "first_batch_rows": run.progress()[first - 1].numInputRows,
            "steady_batches": len(steady),
            "rows_per_batch": summarize([p.numInputRows for p in steady]) if steady else None,
            "micro_batch_ms": summarize([p.durationMs.get("triggerExecution")
                                         for p in steady]) if steady else None,
            "processed_rows_per_s": processed,
            "kept_up": processed is not None and processed >= rate}
    return out


def _plot(path: Path, bars: dict[str, float], ylabel: str, quick: bool) -> None:
    from .plots import _pyplot, save_figure

    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(8.4, 3.8), dpi=110)
    ax.bar(list(bars), [v or 0 for v in bars.values()])
    ax.tick_params(axis="x", labelrotation=20)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    save_figure(plt, fig, path, quick)


def run_wordcount(quick: bool, out_dir: str | None) -> Path:
    params = ({"rows": 10_000, "raw_rows": 200, "files": 3} if quick else
              {"rows": 200_000, "raw_rows": 5_000, "files": 10})
    m = wordcount(**params)
    path = write_result("spark-wordcount", {**params, "master": "local[2]"}, m, out_dir)
    _plot(path.with_suffix(".png"), {
        "reference": m["reference"]["tweets_per_s"], "sn (2)": m["sn2"]["tweets_per_s"],
        "spark batch": m["spark_batch"]["tweets_per_s"],
        "spark batch (2nd)": m["spark_batch_again"]["tweets_per_s"],
        "spark stream": m["spark_stream_key_groups"]["tweets_per_s_steady"],
        "spark stream (2nd)": m["spark_stream_key_groups_again"]["tweets_per_s_steady"],
        "stream raw key": m["spark_stream_raw_key"]["tweets_per_s_steady"]}, "tweets/s",
          quick)
    return path


def run_rate(quick: bool, out_dir: str | None) -> Path:
    params: dict[str, Any] = ({"rates": (2_000,), "seconds": 5} if quick else
                              {"rates": (5_000, 10_000, 20_000, 40_000), "seconds": 20})
    m = rate_load(**params)
    path = write_result("spark-rate", {"rates": list(params["rates"]),
                                       "seconds": params["seconds"], "master": "local[2]"},
                        m, out_dir)
    _plot(path.with_suffix(".png"), {
        f"{r} rows/s": (m[str(r)]["micro_batch_ms"] or {}).get("median")
        for r in params["rates"]}, "median micro-batch (ms), 1 s trigger", quick)
    return path


def _run_side_by_side(name: str, fn: Callable[..., dict[str, Any]],
                      params: dict[str, Any], ylabel: str) -> Callable[[bool, str | None], Path]:
    def run(quick: bool, out_dir: str | None) -> Path:
        kw = params["quick"] if quick else params["full"]
        m = fn(**kw)
        path = write_result(name, {**kw, "master": "local[2]"}, m, out_dir)
        _plot(path.with_suffix(".png"), {k: m[k]["tuples_per_s"] for k in
                                         (*(e[0] for e in LOCAL_ENGINES), "spark_batch")},
              ylabel, quick)
        return path

    return run


BENCHMARKS = {
    "spark-wordcount": ("wordcount on Spark local[2] (batch, streaming, raw key vs key "
                        "groups) vs local executors", "issue #5", run_wordcount),
    "spark-rate": ("streaming wordcount fed by Spark's rate source at 5k-40k rows/s: "
                   "does it keep up?", "issue #5", run_rate),
    "spark-scalejoin": ("ScaleJoin on Spark local[2] (batch) vs local executors", "Q3/#5",
                        _run_side_by_side("spark-scalejoin", scalejoin, {
                            "quick": {"rows": 1_000, "window": 30_000},
                            "full": {"rows": 4_000, "window": 60_000}}, "tuples/s")),
    "spark-paircount": ("paircount (B = 3) on Spark local[2] (batch) vs local executors",
                        "Q1/#5", _run_side_by_side("spark-paircount", paircount, {
                            "quick": {"rows": 2_000}, "full": {"rows": 30_000}}, "tweets/s")),
    "spark-hosts-loss": ("a lost worker on a cluster of network-namespace hosts: batch "
                         "wordcount undisturbed vs worker SIGKILLed", "issue #21",
                         run_hosts_loss),
}
