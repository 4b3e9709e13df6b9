"""Spark's own DataFrame API: ``window()`` over the whole file as one batch job.

``python spark_df_wc.py QUERY INPUT OUTPUT size=MS slide=MS [distance=N] [master=local[2]]``

The tweets are read by ``spark.read.json`` with a fixed schema, tokens are
``split(text, ' ')`` without empty strings (the generator separates tokens by single spaces;
Python's ``str.split()`` would also split on other whitespace), pairs at distance
1..``distance`` come from ``zip_with`` of the token array and its shifted slices, and
``groupBy(window(ts, WS, WA), key).count()`` counts them. Spark's sliding windows start at
multiples of WA since the epoch, as stretchflow's do; the output ``ts`` is the window's end.
A batch job sees all input at once: every window is complete, nothing is ever late.
"""

from __future__ import annotations

import json
import sys
import time

from peer_common import parse_args


def main(argv: list[str]) -> None:
    query, inp, outp, size, slide, distance, extra = parse_args(argv, "spark_df_wc",
                                                                 master="local[2]")
    master = extra["master"]
    if query not in ("wordcount", "paircount"):
        raise SystemExit(f"spark_df_wc: unknown query {query!r}")
    t0 = time.perf_counter()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(master).appName(f"peers-{query}")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.perf_counter()
    df = spark.read.schema("ts BIGINT, text STRING").json(inp)
    df = df.select(F.timestamp_millis("ts").alias("t"),
                   F.filter(F.split("text", " "), lambda w: w != "").alias("w"))
    win = F.window("t", f"{size} milliseconds", f"{slide} milliseconds")
    if query == "wordcount":
        keyed = df.select("t", F.explode("w").alias("word"))
        cols = ["word"]
    else:
        span = "size(w)" if distance is None else str(distance)
        # for d in 1..span: (w[i], w[i+d]) for every i, from the array and its slice shifted
        # by d (an empty slice when d >= size(w))
        pairs = F.expr(
            f"flatten(transform(sequence(1, greatest({span}, 1)), d -> zip_with("
            "slice(w, 1, greatest(size(w) - d, 0)), "
            "if(size(w) > d, slice(w, 1 + d, size(w) - d), array()), "
            "(a, b) -> named_struct('first', a, 'second', b))))")
        keyed = df.select("t", F.explode(pairs).alias("p")).select(
            "t", F.col("p.first").alias("first"), F.col("p.second").alias("second"))
        cols = ["first", "second"]
    counts = keyed.groupBy(win, *cols).count().select(
        F.unix_millis(F.col("window.end")).alias("ts"), *cols, "count")
    rows = 0
    with open(outp, "w") as out:
        for r in counts.toLocalIterator():
            out.write(json.dumps(r.asDict(), ensure_ascii=False) + "\n")
            rows += 1
    elapsed = time.perf_counter() - t0
    spark.stop()
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows,
                      "startup_s": started - t0,
                      "settings": {"master": master, "shuffle_partitions": 4, "mode": "batch"}}))


if __name__ == "__main__":
    main(sys.argv[1:])
