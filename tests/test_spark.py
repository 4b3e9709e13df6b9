"""The Spark engine on a live local[2] session against the reference executor.

One session for the whole module (starting one costs 20+ s): every test here is marked slow.
Inputs are small; the properties are the same as for the local executors: per-timestamp
output multisets equal to the reference, ts-sorted output, clear errors for bad input.
"""

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import (
    QUERY_PARAMS,
    TWEET_QUERIES,
    assert_same_as_reference,
    multiset,
    query_flow,
    run_query,
)
from stretchflow.cli import main
from stretchflow.errors import OperatorError, SourceError
from stretchflow.executors.reference import run as run_reference
from stretchflow.executors.spark import run as run_spark
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.operators.oplus import OPlus
from stretchflow.queries import build_query
from stretchflow.spark.rescale import rescale, state_partitions
from stretchflow.spark.session import get_session, partition_tokens, spark_int_hash
from stretchflow.spark.streaming import StreamRun, end_marker, run_stream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    return get_session("local[2]", {"spark.sql.shuffle.partitions": "4"})


def same_as_reference(query, inputs, params=None, **options):
    """The spark run of a built-in query against the reference, tuple counts included."""
    return assert_same_as_reference(query_flow(query, inputs, params), "spark",
                                    check_counts=True, **options)


def test_partitioner_matches_spark(spark):
    from pyspark.sql import functions as F

    df = spark.range(0, 200).select(F.col("id").cast("int").alias("g"))
    assert [r[0] for r in df.select(F.hash("g")).collect()] == [spark_int_hash(g)
                                                                for g in range(200)]
    tokens = partition_tokens(4)
    rows = (spark.createDataFrame([(t,) for t in tokens], "g int").repartition(4, "g")
            .select("g", F.spark_partition_id()).collect())
    assert {g: pid for g, pid in rows} == {t: b for b, t in enumerate(tokens)}


#: not QUERY_PARAMS["scalejoin"]: a 3 s window spans most of these inputs' event time, so
#: window state is carried across the streaming tests' micro-batches; the narrow band keeps
#: the output small
JOIN_PARAMS = {"window": 3000, "band": 30, "keys": 20}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 16),
       st.integers(1, 4))
def test_tweet_queries_match_reference(spark, query, seed, groups, partitions):
    recs = tweets(300, seed=seed, rate=200, vocabulary=40).to_pylist()
    res = same_as_reference(query, [recs], key_groups=groups, parallelism=partitions)
    assert res.extra["mode"] == "batch"


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 12))
def test_scalejoin_and_forward_match_reference(spark, seed, groups):
    left, right = bandjoin(150, seed=seed, rate=50)
    inputs = [left.to_pylist(), right.to_pylist()]
    same_as_reference("scalejoin", inputs, JOIN_PARAMS, key_groups=groups, parallelism=2)
    same_as_reference("forward", inputs, parallelism=3)


def test_user_flow_custom_oplus_chains_and_two_sinks(spark):
    """map/flat_map/filter before and after, a custom f_U (emitting) and f_O, an O+ feeding
    another O+, a stream read by two consumers, two sinks."""

    def update(ws, ts, t, i):
        ws.states[i].append(t["v"])
        return [{"k": ws.key, "early": t["v"]}] if t["v"] > 15 else None

    def output(ws):
        return [{"k": ws.key, "n0": len(ws.states[0]), "n1": len(ws.states[1])}]

    recs = [{"ts": t, "k": t % 5, "v": (t * 7) % 20} for t in range(0, 400, 3)]
    other = [{"ts": t, "k": t % 3, "v": t % 11} for t in range(1, 400, 4)]

    def build():
        flow = sf.Flow("user")
        a = flow.source(sf.io.iterable(recs, name="a")).filter(lambda r: r["v"] != 4)
        b = flow.source(sf.io.iterable(other, name="b")).flat_map(lambda r: [r, {**r, "v": 1}])
        j = a.oplus(OPlus(size=50, slide=25, inputs=2, keys=lambda t, i: {t["k"]},
                          init=list, update=update, output=output, name="pairs"), b)
        j = j.map(lambda p: {**p, "tag": "x"})
        c = j.aggregate(size=100, keys=lambda p: {p["k"]}, init=int,
                        update=lambda n, p: n + 1, output=lambda k, n: {"k": k, "n": n})
        return flow, j.collect(), c.collect()

    f1, r1, r2 = build()
    run_reference(f1)
    f2, s1, s2 = build()
    res = run_spark(f2, key_groups=5, parallelism=3)
    assert multiset(s1.items) == multiset(r1.items) and len(r1.items) > 50
    assert multiset(s2.items) == multiset(r2.items) and r2.items
    assert res.tuples_in == {"a": len(recs), "b": len(other)}


def test_a_batch_job_recomputes_what_a_lost_worker_held(spark, monkeypatch):
    """Every shuffle of a batch job is fed by output Spark can recompute to the same bytes
    (DETERMINATE): the source's chunks were spread by a round-robin repartition, whose
    reducers read in fetch order, and a lost worker then failed the job ("a shuffle map stage
    with indeterminate output", bench spark-hosts-loss). The source spreads over the cores."""
    import stretchflow.spark.batch as batch

    frames = []
    feed = batch._feed_df

    def kept(dfs, f):
        frames.append(feed(dfs, f))
        return frames[-1]

    monkeypatch.setattr(batch, "_feed_df", kept)
    recs = tweets(3000, seed=5, rate=200).to_pylist()
    flow, sinks = query_flow("wordcount", [recs])()
    res = run_spark(flow)
    assert res.total_in == 3000 and sinks[0].records()  # it ran
    levels = []

    def walk(rdd):
        deps = rdd.dependencies()
        for i in range(deps.size()):
            dep = deps.apply(i)
            if "Shuffle" in dep.getClass().getSimpleName():
                levels.append(dep.rdd().outputDeterministicLevel().toString())
            walk(dep.rdd())

    (df,) = frames
    walk(df._jdf.queryExecution().toRdd())
    assert levels and set(levels) == {"DETERMINATE"}, levels
    table = batch.source_table(next(n for n in flow.nodes if n.kind == "source"))[0]
    assert batch.spread(spark, table, 2).rdd.getNumPartitions() == min(2, table.num_rows)


def test_bad_input_and_failing_function_are_reported(spark, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": 1, "text": "a"}\n{"ts": 2, "text": \n')
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.jsonl(bad))]).collect()
    with pytest.raises(SourceError, match=r"bad.jsonl:2: malformed JSON"):
        run_spark(flow)

    flow = sf.Flow()
    src = flow.source(sf.io.iterable([{"ts": 1, "v": 1}, {"ts": 2, "v": 0}]))
    src.aggregate(size=10, keys=lambda t: {1 // t["v"]}, init=int,
                  update=lambda n, t: n + 1, name="divide").collect()
    with pytest.raises(OperatorError, match=r"operator 'divide' failed on tuple ts=2 .*"
                                            r"ZeroDivisionError"):
        run_spark(flow)


def _write_stream_dir(d: Path, recs, files: int, start: int = 0, end: bool = True,
                      first_mtime: float | None = None):
    """Files part-N.jsonl with strictly increasing mtimes (the file source orders by mtime)."""
    d.mkdir(parents=True, exist_ok=True)
    base = first_mtime if first_mtime is not None else time.time() - 10_000
    step = max(1, -(-len(recs) // files))
    k = start
    for j in range(0, len(recs), step):
        p = d / f"part-{k:05d}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in recs[j:j + step]))
        os.utime(p, (base + k, base + k))
        k += 1
    if end:
        p = d / f"part-{k:05d}.jsonl"
        p.write_text(end_marker(recs[-1]["ts"]))
        os.utime(p, (base + k, base + k))
        k += 1
    return k


def _stream_flow(query, dirs, params):
    flow = sf.Flow(query)
    streams = [flow.source(sf.io.jsonl(d, name=f"in{i}")) for i, d in enumerate(dirs)]
    return flow, build_query(query, streams, **params).collect()


@pytest.mark.parametrize("query", ["wordcount", "scalejoin"])
def test_streaming_matches_reference(spark, tmp_path, query):
    if query == "wordcount":
        inputs = [tweets(600, seed=11, rate=200, vocabulary=40).to_pylist()]
        params = QUERY_PARAMS["wordcount"]
    else:
        left, right = bandjoin(200, seed=4, rate=50)
        inputs = [left.to_pylist(), right.to_pylist()]
        params = JOIN_PARAMS
    ref, _ = run_query(query, inputs, params)
    dirs = []
    for i, recs in enumerate(inputs):
        _write_stream_dir(tmp_path / f"in{i}", recs, 3)
        dirs.append(tmp_path / f"in{i}")
    flow, col = _stream_flow(query, dirs, params)
    if query == "wordcount":  # through the engine's run(): directories make it streaming
        res = run_spark(flow, key_groups=6, checkpoint=str(tmp_path / "ckpt"))
        assert res.extra["mode"] == "streaming"
        assert res.tuples_in == {"in0": len(inputs[0])}
        batches = res.extra["batches"]
    else:
        batches = run_stream(flow, spark, tmp_path / "ckpt", n_groups=6, max_files=1)["batches"]
    assert len(batches) >= 3  # really micro-batched
    got = col.items
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    assert multiset(got) == multiset(ref)


@pytest.mark.parametrize("query", ["wordcount", "paircount"])
def test_rate_source_streaming_matches_reference(spark, tmp_path, query):
    """Spark's rate source (3 000 rows at 1 500 rows/s, tweet payloads) through the columnar
    route (wordcount) and the tuple-at-a-time route (paircount): the same outputs as the
    reference executor generating the same rows locally."""
    params = QUERY_PARAMS[query]

    def flow_of():
        flow = sf.Flow(query)
        src = sf.io.rate(1500, rows=3000, payload="tweet")
        return flow, build_query(query, [flow.source(src)], **params).collect()

    ref_flow, ref = flow_of()
    ref_flow.run()
    flow, col = flow_of()
    res = run_spark(flow, key_groups=6, checkpoint=str(tmp_path / "ckpt"))
    assert res.extra["mode"] == "streaming"
    assert res.tuples_in == {"rate": 3000}
    assert len(res.extra["batches"]) >= 2  # really micro-batched
    got = col.items
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    assert multiset(got) == multiset(ref)


def test_streaming_output_unchanged_across_rescale(spark, tmp_path):
    recs = tweets(600, seed=5, rate=200, vocabulary=30).to_pylist()
    params = QUERY_PARAMS["wordcount"]
    ref, _ = run_query("wordcount", [recs])
    d, ckpt = tmp_path / "in", tmp_path / "ckpt"
    base = time.time() - 10_000
    half = len(recs) // 2
    k = _write_stream_dir(d, recs[:half], 2, end=False, first_mtime=base)
    flow, col = _stream_flow("wordcount", [d], params)
    run = StreamRun(flow, spark, ckpt, n_groups=8).start()
    run.await_end()
    run.stop()
    before = len(col.items)
    assert state_partitions(ckpt) == 4
    rescale(spark, ckpt, 2)  # offline: the stopped query's state to 2 partitions
    assert state_partitions(ckpt) == 2
    _write_stream_dir(d, recs[half:], 2, start=k, first_mtime=base)
    run.start()  # same checkpoint, same sinks: resumes after the rescale batch
    run.await_end()
    run.stop()
    run.close_sinks()
    assert 0 < before < len(col.items)
    assert multiset(col) == multiset(ref)


def test_cli_run_and_generate_with_spark(spark, tmp_path, capsys):
    data = tmp_path / "tw.parquet"
    assert main(["generate", "tweets", "--rows", "400", "--seed", "3", "--out", str(data),
                 "--engine", "spark", "-q"]) == 0
    assert data.is_dir() and list(data.glob("*.parquet"))
    out_s, out_r = tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    assert main(["run", "wordcount", "--input", str(data), "--output", str(out_s),
                 "--engine", "spark", "--key-groups", "6", "--spark-conf",
                 "spark.sql.shuffle.partitions=4", "-q"]) == 0
    flat = tmp_path / "tw.jsonl"
    main(["generate", "tweets", "--rows", "400", "--seed", "3", "--out", str(flat), "-q"])
    assert main(["run", "wordcount", "--input", str(flat), "--output", str(out_r), "-q"]) == 0

    def read(p):
        return Counter(p.read_text().splitlines())

    assert read(out_s) == read(out_r) and read(out_r)
    rc = main(["run", "wordcount", "--input", str(flat), "--output", str(out_s),
               "--engine", "spark", "--reconfigure", "5:2"])
    err_line = capsys.readouterr().err
    assert rc == 2 and "the spark engine does not take option --reconfigure" in err_line
    assert err_line.count("\n") == 1  # one line, no traceback


def test_standalone_cluster_runs_a_query(tmp_path):
    """A master and one worker on 127.0.0.1 from the pyspark installation; the query runs in
    a separate process (one SparkSession per process)."""
    import subprocess
    import sys

    from stretchflow.spark.cluster import standalone

    inp, out, ref = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ref.jsonl"
    main(["generate", "tweets", "--rows", "500", "--seed", "2", "--out", str(inp), "-q"])
    main(["run", "wordcount", "--input", str(inp), "--output", str(ref), "-q"])
    with standalone(workers=1, cores=2) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "stretchflow", "run", "wordcount", "--input", str(inp),
             "--output", str(out), "--engine", "spark", "--master", url, "-q"],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Counter(out.read_text().splitlines()) == Counter(ref.read_text().splitlines())
    shutil.rmtree(tmp_path, ignore_errors=True)
