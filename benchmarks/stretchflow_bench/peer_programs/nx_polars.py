"""NEXMark Q0–Q8 in Polars, bounded: the whole file at once, what a Python user who has the
NEXMark files writes instead of a stream engine (``bench nexmark``'s "polars" baseline).

``python nx_polars.py QUERY DATA_DIR OUTPUT [format=parquet|jsonl] [window=MS] [slide=MS]``
in the Polars venv (``peers.py``); reads ``DATA_DIR/nx-{persons,auctions,bids}.FORMAT``,
writes OUTPUT as JSON Lines (the query's fields and ``ts``) and prints ``{"elapsed_s",
"rows_out", "settings"}`` as JSON, the time from just before the input is scanned to OUTPUT
closed (importing polars is start-up, before it). Polars runs on its own thread pool (all the
machine's cores); ``settings`` says how many.

Every query is the lazy API with expressions only (no Python function over rows): the inputs
are scanned (``pl.scan_parquet``, or ``pl.scan_ndjson`` with the files' schema given so
nothing is inferred), so the optimizer reads only the columns a query uses and pushes its
filters into the scan, and each query collects once, except Q7 (below). Semantics are
stretchflow's (docs/nexmark.md): tumbling windows ``[l, l + W)``, ``l = ts // W * W``, each
output at stretchflow's ``ts``.

- Q0, Q1, Q2: ``select`` / ``filter``, streamed to the file with ``sink_ndjson``.
- Q3, Q8: an inner (Q3) or semi (Q8) join of persons and auctions on (window, id = seller).
- Q4, Q6: the auctions that close in their window joined with the bids on auction id, kept
  when ``date_time <= bid date_time <= expires``, then the max price per auction (the winning
  bid); Q4 takes the mean per (window, category), Q6 sorts the closed auctions by (window,
  expires, id) and takes a ``rolling_mean(10)`` of the winning bids ``over("seller")``.
- Q5: the bids counted per pane (``gcd(window, slide)`` wide) and auction, each pane's
  counts given to the sliding windows that hold it (a list of offsets, exploded) and summed
  per window, then the auctions whose count is the window's max — the slicing a Polars user
  writes for hopping windows, as polars_userflows.py's hot items.
- Q7: from Parquet, the max price per window from (ts, price) alone, then the bids at one
  of those prices scanned again with the filter in the scan (Polars decodes ``extra`` only
  for the rows that pass) and joined with the maxima on (window, price): two collects, which
  saves decoding every bid's ``extra`` for the few rows that win. From JSON Lines, where
  every byte is parsed anyway, one pass: ``filter(price == price.max().over(window))``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import polars as pl

I64, STR = pl.Int64, pl.String
SCHEMAS = {
    "persons": {"ts": I64, "id": I64, "name": STR, "email_address": STR, "credit_card": STR,
                "city": STR, "state": STR, "date_time": I64, "extra": STR},
    "auctions": {"ts": I64, "id": I64, "item_name": STR, "description": STR,
                 "initial_bid": I64, "reserve": I64, "date_time": I64, "expires": I64,
                 "seller": I64, "category": I64, "extra": STR},
    "bids": {"ts": I64, "auction": I64, "bidder": I64, "price": I64, "channel": STR,
             "url": STR, "date_time": I64, "extra": STR},
}
BID_OUT = ("auction", "bidder", "price", "date_time", "extra")


class Inputs:
    """The three tables of DATA_DIR, scanned lazily on demand."""

    def __init__(self, data_dir: str, fmt: str):
        self.data_dir, self.fmt = data_dir, fmt

    def __getattr__(self, name: str) -> pl.LazyFrame:
        if name not in SCHEMAS:
            raise AttributeError(name)
        path = os.path.join(self.data_dir, f"nx-{name}.{self.fmt}")
        if self.fmt == "parquet":
            return pl.scan_parquet(path)
        return pl.scan_ndjson(path, schema=SCHEMAS[name])


def _start(w: int, column: str = "ts") -> pl.Expr:
    return pl.col(column) // w * w


def q0(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    return d.bids.select("ts", *BID_OUT)


def q1(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    return d.bids.select("ts", "auction", "bidder", pl.col("price") * 0.908, "date_time",
                         "extra")


def q2(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    return d.bids.filter(pl.col("auction") % 123 == 0).select("ts", "auction", "price")


def q3(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    sellers = (d.persons.filter(pl.col("state").is_in(["OR", "ID", "CA"]))
               .select(_start(w).alias("l"), pl.col("id").alias("seller"), "name", "city",
                       "state"))
    items = d.auctions.filter(pl.col("category") == 10).select(_start(w).alias("l"), "id",
                                                                "seller")
    return (sellers.join(items, on=["l", "seller"])
            .select((pl.col("l") + w).alias("ts"), "name", "city", "state", "id"))


def _closed(d: Inputs, w: int) -> pl.LazyFrame:
    """Q4's and Q6's closed auctions: those that expire before their window's end, with
    their winning bid ``final`` (auctions without a bid in time drop out of the join)."""
    auctions = (d.auctions.select(_start(w, "date_time").alias("l"), "id", "category",
                                  "seller", pl.col("date_time").alias("opens"), "expires")
                .filter(pl.col("expires") < pl.col("l") + w))
    bids = d.bids.select("auction", "price", "date_time")
    return (auctions.join(bids, left_on="id", right_on="auction")
            .filter(pl.col("date_time").is_between(pl.col("opens"), pl.col("expires")))
            .group_by("l", "id", "category", "seller", "expires")
            .agg(pl.col("price").max().alias("final")))


def q4(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    return (_closed(d, w).group_by("l", "category").agg(pl.col("final").mean().alias("avg"))
            .select((pl.col("l") + 3 * w).alias("ts"), "category", "avg"))


def q6(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    # closing order per seller: window, expiry, id; over() keeps the frame's order per group
    return (_closed(d, w).sort("l", "expires", "id")
            .select((pl.col("l") + 2 * w + 1).alias("ts"), "seller",
                    pl.col("final").rolling_mean(10, min_samples=1).over("seller")
                    .alias("avg")))


def q5(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    g = math.gcd(w, s)
    panes = (d.bids.group_by(_start(g).alias("p"), "auction").agg(pl.len().alias("n")))
    # the pane at p is in the windows l = p // s * s - k * s (k >= 0) with l + w > p
    ks = pl.lit(list(range(-(-w // s))), dtype=pl.List(pl.Int64))
    counts = (panes.with_columns(k=ks).explode("k")
              .with_columns(l=pl.col("p") // s * s - pl.col("k") * s)
              .filter(pl.col("l") + w > pl.col("p"))
              .group_by("l", "auction").agg(pl.col("n").sum().alias("num")))
    return (counts.filter(pl.col("num") == pl.col("num").max().over("l"))
            .select((pl.col("l") + w + s).alias("ts"), "auction", "num"))


def q7(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    if d.fmt == "jsonl":
        # a text file is parsed whole whatever is read of it: one pass, the max over windows
        return (d.bids.select(_start(w).alias("l"), *BID_OUT)
                .filter(pl.col("price") == pl.col("price").max().over("l"))
                .select((pl.col("l") + w).alias("ts"), *BID_OUT))
    best = d.bids.group_by(_start(w).alias("l")).agg(pl.col("price").max()).collect()
    return (d.bids.filter(pl.col("price").is_in(best["price"].unique().implode()))
            .select(_start(w).alias("l"), *BID_OUT)
            .join(best.lazy(), on=["l", "price"])
            .select((pl.col("l") + w).alias("ts"), *BID_OUT))


def q8(d: Inputs, w: int, s: int) -> pl.LazyFrame:
    opened = d.auctions.select(_start(w).alias("l"), pl.col("seller").alias("id"))
    return (d.persons.select(_start(w).alias("l"), "id", "name")
            .join(opened, on=["l", "id"], how="semi")
            .select((pl.col("l") + 2 * w).alias("ts"), "id", "name",
                    pl.col("l").alias("starttime")))


QUERIES = {"q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q6": q6, "q7": q7,
           "q8": q8}
# per-row queries: streamed to the file rather than collected whole and then written
STREAMED = {"q0", "q1", "q2"}


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main(argv: list[str]) -> int:
    query, data_dir, outp, *rest = argv
    opts = dict(a.split("=", 1) for a in rest)
    fmt = opts.pop("format", "parquet")
    w, s = int(opts.pop("window", "10000")), int(opts.pop("slide", "2000"))
    if opts or fmt not in ("parquet", "jsonl") or query not in QUERIES:
        raise SystemExit(f"nx_polars: QUERY one of {', '.join(QUERIES)}, format=parquet|jsonl,"
                         f" window=MS, slide=MS; got {argv}")
    t0 = time.perf_counter()
    lf = QUERIES[query](Inputs(data_dir, fmt), w, s)
    if query in STREAMED:
        lf.sink_ndjson(outp, engine="streaming")
        elapsed = time.perf_counter() - t0
        rows = count_lines(outp)  # the sink does not say how many; counted off the clock
    else:
        df = lf.collect()
        df.write_ndjson(outp)
        elapsed = time.perf_counter() - t0
        rows = df.height
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows,
                      "settings": {"polars": pl.__version__, "format": fmt, "window": w,
                                   "slide": s, "threads": pl.thread_pool_size(),
                                   "engine": "streaming sink" if query in STREAMED
                                   else "collect + write_ndjson"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
