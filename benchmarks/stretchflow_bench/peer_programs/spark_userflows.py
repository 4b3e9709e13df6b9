"""The userflows in Spark's own DataFrame API (Spark SQL): the native query that
``bench userflows`` sets the spark engine's expression flows beside (issue #31, target: the
expression flow within 1.5x of this, own time).

``python spark_userflows.py FLOW OUTPUT INPUT [INPUT2] [master=local[2]]``, with a python that
has pyspark (the project's venv); prints ``{"elapsed_s", "startup_s", "rows_out",
"settings"}`` as JSON: ``startup_s`` the session's start, ``elapsed_s`` the rest, from reading
the input to closing the output. The session is Spark's defaults (adaptive execution on) but
for the UI (off) and the time zone (UTC), as a user running a batch job would leave it.

JSON Lines are read with their schema given (``spark.read.json(schema=...)``: no inference
pass), Parquet by ``spark.read.parquet``. Windows are stretchflow's (``[l, l + WS)``, ``l`` a
multiple of WA, output at ``ts = l + WS``): tumbling ones are ``floor(ts / WS)``, hot items'
sliding ones Spark's ``window(ts, '10 seconds', '2 seconds')``, whose starts are multiples of
the slide since the epoch as stretchflow's are. The result is collected as Arrow
(``toArrow``) and written as JSON Lines by orjson.
"""

from __future__ import annotations

import json
import sys
import time

HOT_SIZE, HOT_SLIDE = 10_000, 2_000
TUMBLE = 10_000
SCHEMAS = {
    "bids": "ts BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, category BIGINT",
    "persons": "ts BIGINT, id BIGINT, name STRING, city STRING, state STRING",
    "auctions": "ts BIGINT, id BIGINT, seller BIGINT, category BIGINT, initial_bid BIGINT",
}


def _flows() -> dict:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def window_end(width: int):  # noqa: ANN202
        return (F.floor(F.col("ts") / width) + 1) * width

    def currency(bids):  # noqa: ANN001, ANN202
        return bids.withColumn("price_eur", F.col("price") * 0.908)

    def selection(bids):  # noqa: ANN001, ANN202
        return bids.filter(F.col("auction") % 123 == 0).select("ts", "auction", "price")

    def hot_items(bids):  # noqa: ANN001, ANN202
        win = F.window(F.timestamp_millis("ts"), f"{HOT_SIZE} milliseconds",
                       f"{HOT_SLIDE} milliseconds")
        counts = (bids.groupBy(win.alias("w"), "auction").count()
                  .select(F.unix_millis(F.col("w.end")).alias("right"), "auction", "count"))
        best = F.max("count").over(Window.partitionBy("right"))
        return (counts.withColumn("best", best).filter(F.col("count") == F.col("best"))
                .select((F.col("right") + HOT_SLIDE).alias("ts"), "auction", "count"))

    def highest_bid(bids):  # noqa: ANN001, ANN202
        w = window_end(TUMBLE)
        best = F.max("price").over(Window.partitionBy(w))
        return (bids.withColumn("best", best).filter(F.col("price") == F.col("best"))
                .select(w.alias("ts"), "auction", "bidder", "price", "category"))

    def mean_price(bids):  # noqa: ANN001, ANN202
        return (bids.groupBy(window_end(TUMBLE).alias("ts"), "category")
                .agg(F.avg("price").alias("mean")))

    def join(persons, auctions):  # noqa: ANN001, ANN202
        p = persons.select(window_end(TUMBLE).alias("ts"), "id", "name")
        a = auctions.select(window_end(TUMBLE).alias("ts"), F.col("id").alias("auction"),
                            "seller")
        return (p.join(a, (p.ts == a.ts) & (p.id == a.seller))
                .select(p.ts, p.id, p.name, a.auction))

    return {"currency": currency, "selection": selection, "hot_items": hot_items,
            "highest_bid": highest_bid, "mean_price": mean_price, "join": join}


def _write(table, path: str) -> int:  # noqa: ANN001
    """The Arrow table as JSON Lines (its first column is ts)."""
    import orjson

    with open(path, "wb") as f:
        for batch in table.to_batches(max_chunksize=200_000):
            rows = batch.to_pylist()
            if rows:
                f.write(orjson.dumps(rows)[1:-1].replace(b'},{"ts":', b'}\n{"ts":') + b"\n")
    return table.num_rows


def main(argv: list[str]) -> None:
    flow, outp, *rest = argv
    inputs = [a for a in rest if "=" not in a]
    opts = dict(a.split("=", 1) for a in rest if "=" in a)
    master = opts.pop("master", "local[2]")
    if opts:
        raise SystemExit(f"spark_userflows: unknown options {sorted(opts)}")
    from pyspark.sql import SparkSession

    flows = _flows()
    if flow not in flows:
        raise SystemExit(f"spark_userflows: flow one of {', '.join(flows)}, got {flow!r}")
    kinds = ["persons", "auctions"] if flow == "join" else ["bids"]
    t0 = time.perf_counter()
    spark = (SparkSession.builder.master(master).appName(f"userflows-{flow}")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    t1 = time.perf_counter()
    frames = [spark.read.parquet(p) if p.endswith(".parquet")
              else spark.read.json(p, schema=SCHEMAS[k]) for p, k in zip(inputs, kinds,
                                                                           strict=True)]
    rows = _write(flows[flow](*frames).toArrow(), outp)
    t2 = time.perf_counter()
    spark.stop()
    print(json.dumps({"elapsed_s": t2 - t1, "startup_s": t1 - t0, "rows_out": rows,
                      "settings": {"master": master, "mode": "batch",
                                   "session": "Spark's defaults, UI off, time zone UTC"}}))


if __name__ == "__main__":
    main(sys.argv[1:])
