"""NEXMark Q0-Q8 as stretchflow defines them, run by Spark Structured Streaming's native API.

``python nx_spark_ss.py QUERY DATA_DIR OUTPUT [format=parquet|jsonl] [master=local[2]]
[window=MS] [slide=MS] [partitions=N] [memory=6g] [q7form=collect|join]``

What it measures: one streaming query per NEXMark query, built from built-in functions only
(no Python UDF, no Python state), reading ``DATA_DIR/nx-{persons,auctions,bids}.FORMAT`` with
``readStream`` (a glob matching just the file, an explicit schema), event time
``timestamp_millis(ts)`` with ``withWatermark(t, 1 ms)``, writing JSON Lines with the file sink
under ``trigger(availableNow=True)``. ``elapsed_s`` runs from just before the query starts
(the SparkSession exists: that is start-up) to OUTPUT closed, the part files of the sink
concatenated into OUTPUT included.

Why a 1 ms watermark delay: Spark drops a row as late when its event time is at or below the
watermark (``<=``), and the input has many equal timestamps; with a delay of 1 ms a row at
the previous batch's largest time is not late. Each input is one file, which the file source
takes as one micro-batch, so nothing is late in practice anyway.

End of input: Structured Streaming never closes the windows the watermark has not passed when
an ``availableNow`` query runs out of input (its last micro-batch advances the watermark to
the largest event time seen, so the last window stays open in the state). The queries that
emit on the watermark (Q4 to Q7) therefore read, unioned with each input, a second stream:
one end-of-input row at 2100-01-01 written by this program (a JSON file in the temporary
directory). It carries the watermark past every window of the data, its own window is never
closed, and no data row can match it, so it never reaches the output. The joins that emit on a
match (Q3, Q8) need no such row.

How each query is expressed:

* Q0, Q1, Q2: ``select``/``filter`` of columns; Q1's ``price * 0.908`` is a double.
* Q3: persons (state in OR, ID, CA) inner-joined with auctions (category 10) on
  ``id = seller`` and equality of their tumbling ``window()`` (which lets Spark drop the state
  of windows the watermark has passed); ``ts`` = the window's end.
* Q4: the auctions that close in the window they open in, inner-joined with the bids on
  ``auction = id AND b.t BETWEEN a.t AND a.expires``, plus the redundant
  ``b.t <= a.t + window`` that gives Spark an event-time bound to evict state by; then two
  chained windowed aggregations in append mode (Spark propagates the watermark through
  chained stateful operators; this chain needs no configuration): ``max(price)`` per (window
  of the auction, auction), then ``avg`` per (window, category); ``ts`` = window start + 3
  windows.
* Q5: ``count`` per (sliding ``window()``, auction), then per window ``max`` of the counts and
  ``collect_list`` of (count, auction), exploded where the count is the max (ties included;
  the max comes from the aggregation because higher-order functions are interpreted: an
  ``array_max`` inside ``filter``'s lambda is recomputed per element, which made the
  no-data batch 20 times slower); ``ts`` = window end + slide. Spark makes every window that
  contains a bid, the partial ones at the start included.
* Q6: Q4's join and per-auction ``max`` give the closed auctions (window, id, seller,
  expiry, winning bid); that stream is joined with itself on ``seller`` and
  ``w2.end <= w1.end`` (every closed auction of the seller from the same or an earlier
  window), and a windowed aggregation per closed auction collects the pairs' (window start,
  expiry, id, winning bid); ``filter`` keeps those at or before the auction in closing order,
  ``array_sort`` + ``slice`` the last 10, ``aggregate`` their mean; ``ts`` = window start +
  2 windows + 1 ms. Structured Streaming has no ROWS OVER window on a stream (non-time-based
  windows are rejected) and arbitrary per-key state is Scala or Python only, so this
  self-join is the native form: exact, but its state and work grow with the square of a
  seller's closed auctions (the history side of the join is never evicted, each auction
  re-collects its seller's whole history).
* Q7 (``q7form=collect``, the default): per tumbling window ``max(price)`` and
  ``collect_list`` of the bids, exploded where the price is the max (ties included); one read
  of the bids and one stateful operator. ``q7form=join``: per window ``max(price)``,
  stream-stream joined back with the bids on window equality and ``price = max`` (reads the
  bids file twice; slower at 1 M). ``ts`` = window end.
* Q8: persons left-semi-joined with auctions on ``id = seller`` and tumbling-window equality
  (a person appears once per window however many auctions they opened); ``ts`` = window
  start + 2 windows.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile
import time

PERSONS = ("ts BIGINT, id BIGINT, name STRING, email_address STRING, credit_card STRING, "
           "city STRING, state STRING, date_time BIGINT, extra STRING")
AUCTIONS = ("ts BIGINT, id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
            "reserve BIGINT, date_time BIGINT, expires BIGINT, seller BIGINT, category BIGINT, "
            "extra STRING")
BIDS = ("ts BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
        "date_time BIGINT, extra STRING")
SCHEMAS = {"persons": PERSONS, "auctions": AUCTIONS, "bids": BIDS}

#: the end-of-input row's time, 2100-01-01 (beyond any data; see the module's docstring)
END_TS = 4102444800000
#: an id no generated row has, so that the end-of-input rows match no data row
END_ID = -1


def main(argv: list[str]) -> None:
    query, data_dir, out, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    fmt = kw.pop("format", "parquet")
    master = kw.pop("master", "local[2]")
    W = int(kw.pop("window", "10000"))
    slide = int(kw.pop("slide", "2000"))
    partitions = int(kw.pop("partitions", "2"))
    memory = kw.pop("memory", "6g")
    q7form = kw.pop("q7form", "collect")
    if kw:
        raise SystemExit(f"nx_spark_ss: unknown parameters {sorted(kw)}")
    if fmt not in ("parquet", "jsonl"):
        raise SystemExit(f"nx_spark_ss: unknown format {fmt!r}")
    if query not in ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"):
        raise SystemExit(f"nx_spark_ss: unknown query {query!r}")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (SparkSession.builder.master(master).appName(f"nx-ss-{query}")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", memory)
               # the state's partitions, one task each per micro-batch: sized for 2 cores
               .config("spark.sql.shuffle.partitions", str(partitions))
               .config("spark.sql.session.timeZone", "UTC"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="nx-spark-ss-", dir=os.path.dirname(os.path.abspath(out)))
    settings = {"master": master, "format": fmt, "shuffle_partitions": partitions,
                "driver_memory": memory, "state_store": "hdfs", "window": W, "slide": slide,
                "trigger": "availableNow", "watermark_delay_ms": 1}
    if query == "q7":
        settings["q7form"] = q7form
    try:
        t0 = time.perf_counter()
        rows = run(spark, F, query, data_dir, out, work, fmt, W, slide, q7form)
        elapsed = time.perf_counter() - t0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows, "settings": settings}))


def run(spark, F, query: str, data_dir: str, out: str, work: str, fmt: str, W: int,
        slide: int, q7form: str) -> int:
    """Build, start and await the streaming query; concatenate its part files into ``out``."""
    ext = "parquet" if fmt == "parquet" else "jsonl"
    flush = query in ("q4", "q5", "q6", "q7")

    def stream(name: str):
        reader = spark.readStream.schema(SCHEMAS[name])
        # a glob matching just the file: given a file's own path, the source takes it as its
        # basePath, which must be a directory
        path = os.path.join(data_dir, f"nx-{name}.{ext[:-1]}[{ext[-1]}]")
        df = reader.parquet(path) if fmt == "parquet" else reader.json(path)
        if flush:
            df = df.unionByName(end_of_input(name))
        return (df.withColumn("t", F.timestamp_millis("ts"))
                .withWatermark("t", "1 millisecond"))

    def end_of_input(name: str):
        # one row past every window of the data (see the module's docstring)
        d = os.path.join(work, f"end-{name}")
        os.makedirs(d)
        row = {f.split()[0]: END_ID for f in SCHEMAS[name].split(", ")
               if f.endswith("BIGINT")}
        row.update(ts=END_TS, date_time=END_TS, expires=END_TS)
        with open(os.path.join(d, "end.json"), "w") as f:
            f.write(json.dumps(row) + "\n")
        return spark.readStream.schema(SCHEMAS[name]).json(d)

    def win(col: str = "t"):
        return F.window(col, f"{W} milliseconds")

    def ms(c):
        return F.unix_millis(c)

    if query in ("q0", "q1", "q2"):
        b = stream("bids")
        if query == "q2":
            res = b.where(F.col("auction") % 123 == 0).select("auction", "price", "ts")
        else:
            price = F.col("price") * 0.908 if query == "q1" else F.col("price")
            res = b.select("auction", "bidder", price.alias("price"), "date_time", "extra",
                           "ts")
    elif query == "q3":
        p = (stream("persons").where(F.col("state").isin("OR", "ID", "CA"))
             .select("id", "name", "city", "state", win().alias("pw")))
        a = (stream("auctions").where(F.col("category") == 10)
             .select(F.col("id").alias("aid"), "seller", win().alias("aw")))
        res = p.join(a, (p.id == a.seller) & (p.pw == a.aw)).select(
            "name", "city", "state", F.col("aid").alias("id"),
            ms(F.col("pw.end")).alias("ts"))
    elif query == "q8":
        p = stream("persons").select("id", "name", win().alias("pw"))
        a = stream("auctions").select("seller", win().alias("aw"))
        res = p.join(a, (p.id == a.seller) & (p.pw == a.aw), "left_semi").select(
            "id", "name", ms(F.col("pw.start")).alias("starttime"),
            (ms(F.col("pw.start")) + 2 * W).alias("ts"))
    elif query in ("q4", "q6"):
        # the auctions that close in the window they open in
        a = (stream("auctions")
             .where(F.col("expires") < F.floor(F.col("date_time") / W) * W + W)
             .select(F.col("id").alias("aid"), "seller", "category", "expires",
                     F.col("t").alias("at"), F.timestamp_millis("expires").alias("aexp")))
        b = stream("bids").select(F.col("auction"), "price", F.col("t").alias("bt"))
        cond = ((b.auction == a.aid) & (b.bt >= a.at) & (b.bt <= a.aexp)
                # implied by the filter above; the bound Spark evicts auctions' state by
                & (b.bt <= a.at + F.expr(f"INTERVAL {W} MILLISECONDS")))
        won = (a.join(b, cond)
               .groupBy(win("at").alias("w"), "aid", "seller", "category", "expires")
               .agg(F.max("price").alias("final")))
        if query == "q4":
            res = (won.groupBy("w", "category").agg(F.avg("final").alias("avg"))
                   .select("category", "avg", (ms(F.col("w.start")) + 3 * W).alias("ts")))
        else:
            res = q6_last_ten(F, won, W)
    elif query == "q5":
        b = stream("bids")
        counts = (b.groupBy(F.window("t", f"{W} milliseconds", f"{slide} milliseconds")
                            .alias("w"), "auction").agg(F.count("*").alias("num")))
        # the greatest count comes with the list: computed inside filter's lambda it would be
        # recomputed per element (higher-order functions are interpreted), quadratic per window
        per = counts.groupBy("w").agg(
            F.max("num").alias("most"), F.collect_list(F.struct("num", "auction")).alias("l"))
        top = F.filter("l", lambda x: x["num"] == F.col("most"))
        res = per.select(F.explode(top).alias("x"), "w").select(
            "x.auction", "x.num", (ms(F.col("w.end")) + slide).alias("ts"))
    elif query == "q7":
        b = stream("bids").select("auction", "bidder", "price", "date_time", "extra", "ts",
                                  win().alias("bw"))
        if q7form == "collect":
            # one read of the bids and one stateful operator; the list of a window's bids is
            # the state the join below keeps too (its bids side), as one row per window
            per = b.groupBy("bw").agg(F.max("price").alias("top"), F.collect_list(
                F.struct("auction", "bidder", "price", "date_time", "extra")).alias("l"))
            res = per.select(F.explode(F.filter("l", lambda x: x["price"] == F.col("top")))
                             .alias("x"), "bw").select("x.*", ms(F.col("bw.end")).alias("ts"))
        else:  # the self-join reads the bids file twice
            best = b.groupBy("bw").agg(F.max("price").alias("top")).withColumnRenamed("bw", "mw")
            res = b.join(best, (b.bw == best.mw) & (b.price == best.top)).select(
                "auction", "bidder", "price", "date_time", "extra", ms(F.col("bw.end")).alias("ts"))

    parts = os.path.join(work, "out")
    q = (res.writeStream.format("json").outputMode("append")
         .option("path", parts).option("checkpointLocation", os.path.join(work, "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    for p in q.recentProgress:  # per micro-batch timings, for whoever reads stderr
        print(json.dumps({"batch": p["batchId"], "rows_in": p["numInputRows"],
                          "duration_ms": p["durationMs"],
                          "state": [(s["operatorName"], s["numRowsTotal"])
                                    for s in p["stateOperators"]]}), file=sys.stderr)
    rows = 0
    with open(out, "wb") as dst:
        for part in sorted(glob.glob(os.path.join(parts, "part-*"))):
            with open(part, "rb") as src:
                while chunk := src.read(1 << 22):
                    rows += chunk.count(b"\n")
                    dst.write(chunk)
    return rows


def q6_last_ten(F, won, W: int):
    """Per closed auction (``won``: window ``w``, ``aid``, ``seller``, ``expires``, ``final``),
    the mean of its seller's last 10 winning bids in closing order (window, expiry, id)."""
    c1 = won.select(F.col("w").alias("w1"), F.col("aid").alias("id1"),
                    F.col("seller").alias("s1"), F.col("expires").alias("e1"))
    c2 = won.select(F.col("w").alias("w2"), F.col("aid").alias("id2"),
                    F.col("seller").alias("s2"), F.col("expires").alias("e2"),
                    F.col("final").alias("f2"))
    # every closed auction of the same seller from the same or an earlier window: the C2
    # side is never evicted (all history), the C1 side is, by the time bound
    pairs = c1.join(c2, (c1.s1 == c2.s2) & (F.col("w2.end") <= F.col("w1.end")))
    key = ("k0", "k1", "k2")  # closing order: window start, expiry, auction id
    per = pairs.groupBy("w1", "id1", "s1", "e1").agg(F.collect_list(F.struct(
        *(c.alias(k) for c, k in zip((F.col("w2.start"), F.col("e2"), F.col("id2")), key,
                                     strict=True)), F.col("f2").alias("f"))).alias("l"))
    me = F.struct(*(c.alias(k) for c, k in zip((F.col("w1.start"), F.col("e1"), F.col("id1")),
                                               key, strict=True)))
    before = F.filter("l", lambda x: F.struct(*(x[k] for k in key)) <= me)
    # the last 10 of the sorted list (slice with a negative start longer than the array
    # gives an empty array, hence the explicit start)
    last = F.slice(F.array_sort(before), F.greatest(F.size(before) - 9, F.lit(1)), 10)
    return per.select(F.col("s1").alias("seller"),
                      (F.aggregate(last, F.lit(0.0), lambda acc, x: acc + x["f"])
                       / F.size(last)).alias("avg"),
                      (F.unix_millis(F.col("w1.start")) + 2 * W + 1).alias("ts"))


if __name__ == "__main__":
    main(sys.argv[1:])
