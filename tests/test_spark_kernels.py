"""The Spark engine's worker kernels and helpers, without a Spark session (fast).

The batch plan is: route (chain, f_MK, one row per owning bucket) -> repartition by bucket ->
sort by (ts, input, seq, sub) -> one O+ instance per bucket. Here the shuffle is simulated
in Python, so the kernels are checked against the reference executor on many random inputs
in well under a second each; tests/test_spark.py runs the same plan on Spark.
"""


import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import QUERY_PARAMS, TWEET_QUERIES, multiset
from stretchflow.errors import EngineUnavailableError, FlowDefinitionError, OperatorError
from stretchflow.executors.reference import run as run_reference
from stretchflow.executors.spark import parse_conf
from stretchflow.io.generators import bandjoin, tweets
from stretchflow.operators.oplus import OPlus
from stretchflow.operators.stateless import Filter, FlatMap, Map
from stretchflow.queries import build_query
from stretchflow.spark import plan
from stretchflow.spark.session import (
    check_java,
    default_partitions,
    partition_tokens,
    spark_int_hash,
)
from stretchflow.spark.streaming import END_TS, end_marker, stream_shape


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 7 tuples, so inputs span many chunks and the merge is exercised."""
    monkeypatch.setattr(plan, "CHUNK", 7)


def _batch(items):
    """Stream chunks in *reversed* order, as a round-robin repartition may deliver them: the
    kernels must not rely on the order of chunks inside a batch."""
    b = plan.chunks_batch(pa, [(ts, n, 0, p) for n, (ts, p) in enumerate(items)])
    return b.take(pa.array(list(range(b.num_rows - 1, -1, -1)), pa.int64()))


def run_kernels(op, inputs, n_groups, n_buckets, chains=None):
    """The batch plan of one O+ with the shuffle done in Python."""
    tokens = list(range(n_buckets))
    rows = []
    for i, items in enumerate(inputs):
        chain = chains[i] if chains else []
        for out in plan.route_kernel(chain, op, i, n_groups, tokens)(iter([_batch(items)])):
            rows.extend(out.to_pylist())
    last = None
    if plan.needs_last_ts(op):
        last = max((ts for items in inputs for ts, p in items
                    if (chains is None or plan.chain_outputs(chains[0], ts, p))), default=None)
    got = []
    for b in range(n_buckets):
        mine = sorted((r for r in rows if r["b"] == b), key=lambda r: (r["tmin"], r["i"], r["seq"]))
        batches = [pa.RecordBatch.from_pylist(mine[k:k + 3], schema=pa.schema(
            [("dest", pa.int32()), ("b", pa.int32()), ("tmin", pa.int64()), ("i", pa.int32()),
             ("seq", pa.int64()), ("p", pa.binary())])) for k in range(0, len(mine), 3)]
        for out in plan.oplus_kernel(op, last, None)(iter(batches)):
            for raw in out.column("p").to_pylist():
                got.extend((ts, q) for ts, _, _, q in plan.loads(raw))
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got) or n_buckets > 1
    return got


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1)), max_size=12),
                max_size=6))
def test_merge_chunks_gives_the_global_order(chunks):
    """Chunks (each sorted, arriving sorted by their first item) merge to the sorted union."""
    rows, seq = [], 0
    for c in chunks:
        items = []
        for ts, i in sorted(c):
            items.append((ts, i, seq, 0, None, None))
            seq += 1
        items.sort(key=lambda t: t[:4])
        if items:
            rows.append({"tmin": items[0][0], "i": items[0][1], "seq": items[0][2],
                         "p": plan.dumps(items)})
    rows.sort(key=lambda r: (r["tmin"], r["i"], r["seq"]))
    batches = [pa.RecordBatch.from_pylist(rows)] if rows else []
    got = [t[:4] for t in plan.merge_chunks(iter(batches))]
    assert got == sorted(t[:4] for r in rows for t in plan.loads(r["p"]))


def reference(query, inputs, params):
    flow = sf.Flow(query)
    streams = [flow.source(sf.io.iterable([p for _, p in items], name=f"in{i}"))
               for i, items in enumerate(inputs)]
    col = build_query(query, streams, **params).collect()
    run_reference(flow)
    return col.items, flow.nodes[-1].spec


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TWEET_QUERIES), st.integers(0, 10_000), st.integers(1, 40),
       st.integers(1, 5))
def test_tweet_queries_kernels_match_reference(query, seed, groups, buckets):
    recs = tweets(150, seed=seed, rate=200, vocabulary=30).to_pylist()
    items = [(r["ts"], r) for r in recs]
    ref, op = reference(query, [items], QUERY_PARAMS[query])
    got = run_kernels(op, [items], groups, buckets)
    assert multiset(got) == multiset(ref)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(1, 12), st.integers(1, 4))
def test_scalejoin_kernels_match_reference(seed, groups, buckets):
    left, right = bandjoin(120, seed=seed, rate=50)
    inputs = [[(r["ts"], r) for r in t.to_pylist()] for t in (left, right)]
    # test_spark.py's join parameters: windows spanning most of the input, a narrow band
    ref, op = reference("scalejoin", inputs, {"window": 3000, "band": 30, "keys": 20})
    got = run_kernels(op, inputs, groups, buckets)
    assert multiset(got) == multiset(ref)


def _single_sum():
    """A user O+ with WT single, custom f_U (emits), f_O and f_S: its end-of-input output
    depends on the latest ts of the whole operator (``needs_last_ts``)."""

    def update(ws, ts, t, i):
        ws.states[0].append(t["v"])
        return [{"k": ws.key, "running": len(ws.states[0])}] if t["v"] % 3 == 0 else None

    def output(ws):
        return [{"k": ws.key, "l": ws.l, "sum": sum(ws.states[0])}]

    def slide(ws):
        ws.states[0][:] = ws.states[0][1:]

    return OPlus(size=40, slide=10, keys=lambda t, i: {t["k"], t["k"] + 100}, init=list,
                 update=update, output=output, slide_fn=slide, window_type="single",
                 name="single-sum")


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 5), st.integers(0, 20)),
                max_size=40), st.integers(1, 9), st.integers(1, 4))
def test_user_single_window_oplus_matches_reference(steps, groups, buckets):
    ts, items = 0, []
    for dt, k, v in steps:
        ts += dt
        items.append((ts, {"ts": ts, "k": k, "v": v}))
    op = _single_sum()
    flow = sf.Flow()
    col = flow.source(sf.io.iterable([p for _, p in items])).oplus(_single_sum()).collect()
    run_reference(flow)
    assert plan.needs_last_ts(op)
    assert multiset(run_kernels(op, [items], groups, buckets)) == multiset(col.items)


def test_chain_is_fused_before_routing():
    items = [(t, {"ts": t, "text": "a b a" if t % 2 else "c"}) for t in range(0, 50, 3)]
    chain = [FlatMap(lambda r: [r, r] if "c" in r["text"] else [r], "dup"),
             Filter(lambda r: r["ts"] != 9, "drop9"),
             Map(lambda r: {**r, "text": r["text"].upper()}, "upper")]
    flow = sf.Flow()
    s = flow.source(sf.io.iterable([p for _, p in items]))
    s = s.flat_map(chain[0].fn).filter(chain[1].fn).map(chain[2].fn)
    col = build_query("wordcount", [s], size=20, slide=10).collect()
    run_reference(flow)
    op = flow.nodes[-1].spec
    got = run_kernels(op, [items], 5, 2, chains=[chain])
    assert multiset(got) == multiset(col.items)
    assert any(p["word"] == "C" and p["count"] >= 2 for _, p in got)


def test_route_reports_the_failing_operator():
    op = OPlus(size=10, keys=lambda t, i: {t["missing"]}, name="bad-keys")
    kernel = plan.route_kernel([], op, 0, 4, [0, 1])
    with pytest.raises(OperatorError, match="operator 'bad-keys' failed on tuple ts=3"):
        list(kernel(iter([_batch([(3, {"ts": 3})])])))


def test_split_keys_partitions_keys_by_owner():
    b = plan.Buckets(7, 3)
    keys = [f"w{i}" for i in range(50)] + [("pair", 1), 3, 3.0, "w1"]
    parts = plan.split_keys(keys, b)
    seen = [k for owner, ks in parts.items() for k in ks if b.of(k) == owner]
    assert sorted(map(repr, seen)) == sorted(map(repr, dict.fromkeys(keys)))  # once each
    counted = plan.split_keys({"w1": 2, "w2": 5}, b)
    assert counted[b.of("w1")]["w1"] == 2
    op = OPlus(size=10, keys=lambda t, i: {"never"}, name="k")
    current = [["x"]]
    assert plan.given_keys(op, current).keys("anything", 0) == ["x"]


def test_spark_hash_and_partition_tokens():
    # values of Spark's hash(CAST(g AS INT)) (Murmur3, seed 42), from `SELECT hash(0), ...`
    # on pyspark 4.3; tests/test_spark.py checks many more against a live session
    assert spark_int_hash(0) == 933211791
    assert spark_int_hash(1) == -559580957
    for n in (1, 2, 3, 4, 8, 13):
        tokens = partition_tokens(n)
        assert sorted(spark_int_hash(t) % n for t in tokens) == list(range(n))


def test_translate_worker_errors():
    text = ("py4j... Traceback (most recent call last):\n  File x\n"
            "ValueError: boom\n\nThe above exception was the direct cause:\n"
            "stretchflow.errors.OperatorError: operator 'w' failed on tuple ts=5 payload={}: "
            "ValueError: boom\n")
    err = plan.translate(RuntimeError(text))
    assert isinstance(err, OperatorError)
    assert str(err) == "operator 'w' failed on tuple ts=5 payload={}: ValueError: boom"
    other = RuntimeError("nothing of ours")
    assert plan.translate(other) is other


def test_parse_conf_and_partitions():
    assert parse_conf(["a.b=1", "c = x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_conf(["novalue"])
    assert default_partitions("local[3]") == 3
    assert default_partitions("spark://h:7077") == 4


def test_missing_java_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineUnavailableError, match="needs a Java runtime"):
        check_java()


def test_streaming_shape_is_checked(tmp_path):
    flow = sf.Flow()
    build_query("wordcount", [flow.source(sf.io.iterable([]))]).collect()
    with pytest.raises(FlowDefinitionError, match="JSON Lines directories"):
        stream_shape(flow)
    assert end_marker(5) == '{"ts": 5, "__end__": true}\n'
    assert END_TS > 10 ** 13


def test_rate_input_on_the_command_line():
    from stretchflow.io.sources import RateSource
    from stretchflow.spark.sources import open_input

    src = open_input("rate:2000:50")
    assert isinstance(src, RateSource) and (src.rows_per_second, src.rows) == (2000, 50)
    assert "text" in next(iter(src.items()))[1]
    assert open_input("rate:10").rows is None
    for bad in ("rate:", "rate:x", "rate:1:2:3", "rate:10:n"):
        with pytest.raises(ValueError, match="rate:ROWS_PER_SECOND or"):
            open_input(bad)
