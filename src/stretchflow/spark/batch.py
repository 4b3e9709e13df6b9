"""Bounded inputs on Spark: one batch job per sink, O+ stages run shared-nothing.

For each O+ stage (see :mod:`.plan`): every input feed is routed (fused stateless chain, f_MK
once per tuple, each tuple into the chunk of every bucket owning one of its keys), the inputs
are unioned, ``repartition(P, dest)`` puts bucket b in partition b, ``sortWithinPartitions(
tmin, i, seq)`` orders the chunks so that :func:`.plan.merge_chunks` restores the order the
reference executor's merge gives (timestamp, ties to the lower input, then arrival), and one
:class:`OPlusInstance` per partition runs Alg. 2 over it, expiring every window at the end of
input. Sinks collect their feed on the driver, sort it by (ts, seq, sub) and write it through
the stretchflow sink: the output file is written by the driver (simple and exactly the local
executors' format; for outputs larger than the driver's memory write from Spark instead).

Sources are read on the driver by the stretchflow source objects, so a malformed record, a
missing timestamp or a timestamp going back on a sorted source is reported exactly as by the
local executors (source, file:line, reason), then shipped to Spark as Arrow. Explicit
watermarks do not change a bounded run's output, except the last one, which can slide
``single`` window sets past the last tuple: it is passed to the O+ stages.
"""

from __future__ import annotations

import time
from typing import Any

from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..runtime.sinks import sink_session
from . import columnar, plan
from .session import partition_tokens


def source_table(node: Node) -> tuple[Any, int, int | None]:
    """(Arrow table of stream chunks, tuples read, last explicit watermark or None)."""
    import pyarrow as pa

    items: list[tuple[int, int, int, Any]] = []
    append = items.append
    wm: int | None = None
    n = 0
    with plan.no_gc():
        for ts, p in node.spec.items():
            if p is WATERMARK:
                wm = ts
                continue
            append((ts, n, 0, p))
            n += 1
        batch = plan.chunks_batch(pa, items)
    return pa.Table.from_batches([batch], schema=batch.schema), n, wm


def spread(spark: Any, table: Any, slices: int) -> Any:
    """``table`` (a source's chunks) as a DataFrame of up to ``slices`` partitions, one Arrow
    batch each: the chunks spread over the cluster for the routing stage.

    Not ``createDataFrame(table).repartition(slices)``: a round-robin shuffle's reducers read
    its rows in whatever order the fetches come, so the routing stage's output differed
    between a first attempt and a retry, and a lost worker whose map outputs the final stage
    had partly read failed the whole job ("A shuffle map stage with indeterminate output was
    failed and retried", the spark-hosts-loss benchmark). Local data split into slices is
    the same on every attempt, so Spark recomputes what a lost worker held."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"  # createDataFrame's rows per batch
    per = max(1, -(-table.num_rows // max(1, slices)))
    before = spark.conf.get(key)
    spark.conf.set(key, str(per))
    try:
        return spark.createDataFrame(table)
    finally:
        spark.conf.set(key, before)


def run_batch(flow: Flow, spark: Any, n_groups: int, n_partitions: int) -> dict[str, Any]:
    """Runs ``flow`` on its bounded inputs; writes its sinks; returns counts and timings."""
    from pyspark.sql import functions as F

    stages, sink_feeds = plan.analyse(flow)
    tokens = partition_tokens(n_partitions)
    consumers = flow.consumers()
    dfs: dict[Node, Any] = {}
    last_wm: dict[Node, int | None] = {}
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    by_node = {s.node: s for s in stages}
    for node in flow.nodes:
        if node.kind == "source":
            table, n, wm = source_table(node)
            counts[node.name] = n
            last_wm[node] = wm
            df = spread(spark, table, spark.sparkContext.defaultParallelism)
        elif node.kind == "oplus":
            stage = by_node[node]
            op = stage.op
            wms = [last_wm[f.producer] for f in stage.feeds if last_wm[f.producer] is not None]
            last_wm[node] = max(wms) if wms else None
            last_ts = None
            if plan.needs_last_ts(op):
                fed = [_feed_df(dfs, f) for f in stage.feeds]
                union = fed[0]
                for other in fed[1:]:
                    union = union.unionByName(other)
                last_ts = _action(lambda u=union: u.agg(F.max("tmax")).collect()[0][0])
            if columnar.applies(op):
                (f,) = stage.feeds  # an A+ has one input
                df = (dfs[f.producer]
                      .mapInArrow(columnar.explode_kernel(f.chain, op, n_groups, tokens),
                                  columnar.KEYED_SCHEMA)
                      .repartition(n_partitions, "dest")
                      .mapInArrow(columnar.keyed_kernel(op, last_wm[node]), plan.STREAM_SCHEMA))
                if consumers.get(node, 0) > 1:
                    df = df.persist()
                dfs[node] = df
                continue
            routed = None
            for i, f in enumerate(stage.feeds):
                r = dfs[f.producer].mapInArrow(
                    plan.route_kernel(f.chain, op, i, n_groups, tokens), plan.ROUTED_SCHEMA)
                routed = r if routed is None else routed.unionByName(r)
            df = (routed.repartition(n_partitions, "dest")
                  .sortWithinPartitions("tmin", "i", "seq")
                  .mapInArrow(plan.oplus_kernel(op, last_ts, last_wm[node]), plan.STREAM_SCHEMA))
        else:
            continue  # stateless nodes are fused into their consumers' feeds
        if consumers.get(node, 0) > 1:
            df = df.persist()  # read by several consumers: compute once
        dfs[node] = df
    t_plan = time.perf_counter() - t0
    for feed, (_, sink) in zip(sink_feeds, flow.sinks, strict=True):
        table = _action(lambda f=feed: _feed_df(dfs, f).toArrow())
        write_sink(sink, table)
    for df in dfs.values():
        if df.is_cached:
            df.unpersist()
    return {"tuples_in": counts, "driver_read_s": t_plan}


def _feed_df(dfs: dict[Node, Any], feed: plan.Feed) -> Any:
    df = dfs[feed.producer]
    if feed.chain:
        df = df.mapInArrow(plan.chain_kernel(feed.chain), plan.STREAM_SCHEMA)
    return df


def write_sink(sink: Any, table: Any, batch: int = 4096) -> None:
    """Writes a collected stream (chunks) to a stretchflow sink in (ts, seq, sub) order."""
    from operator import itemgetter

    items: list[tuple[int, int, int, Any]] = []
    loads = plan.loads
    # millions of new acyclic objects, here and in the sink (a Collector keeps them all): GC
    # passes over them would double the time (a third of a 200k-tweet wordcount job)
    with plan.no_gc():
        for raw in table.column("p").to_pylist():
            items.extend(loads(raw))
        items.sort(key=itemgetter(0, 1, 2))
        with sink_session([sink]):
            for k in range(0, len(items), batch):
                sink.write([(t, p) for t, _, _, p in items[k:k + batch]])


def _action(fn: Any) -> Any:
    """Runs a Spark action; a stretchflow error raised in a worker is re-raised as such."""
    try:
        return fn()
    except Exception as e:
        err = plan.translate(e)
        if err is e:
            raise
        raise err from None
