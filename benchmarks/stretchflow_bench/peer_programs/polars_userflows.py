"""The userflows in Polars: what a Python user with a bounded file writes instead of a stream
engine (``bench userflows``' baseline "polars", issue #31).

``python polars_userflows.py FLOW OUTPUT INPUT [INPUT2] [api=eager|lazy]``, in the Polars venv
that ``bench userflows`` makes (``peers.ensure_venv``); prints ``{"elapsed_s", "rows_out",
"settings"}`` as JSON, the time from reading the input to closing the output (import of polars
before it). ``api=eager`` reads the whole file (``pl.read_ndjson`` / ``pl.read_parquet``) and
runs DataFrame operations; ``api=lazy`` scans it (``pl.scan_ndjson`` / ``pl.scan_parquet``),
so Polars' optimizer prunes columns, and collects once. The output is ``write_ndjson``.

Windows as stretchflow defines them (``[l, l + WS)``, ``l`` a multiple of WA, output at
``ts = l + WS``): a tumbling window is ``ts // WS``; hot items' sliding windows count per pane
of width WA (WA divides WS here), then each pane's counts go to its WS / WA windows and are
summed per window — the slicing a Polars user writes for hopping windows (``group_by_dynamic``
does the same with more set-up).
"""

from __future__ import annotations

import json
import sys
import time

import polars as pl

HOT_SIZE, HOT_SLIDE = 10_000, 2_000
TUMBLE = 10_000


def _read(path: str, lazy: bool) -> pl.LazyFrame:
    if path.endswith(".parquet"):
        return pl.scan_parquet(path) if lazy else pl.read_parquet(path).lazy()
    return pl.scan_ndjson(path) if lazy else pl.read_ndjson(path).lazy()


def _window_end(width: int) -> pl.Expr:
    return (pl.col("ts") // width + 1) * width


def currency(bids: pl.LazyFrame) -> pl.LazyFrame:
    return bids.with_columns(price_eur=pl.col("price") * 0.908)


def selection(bids: pl.LazyFrame) -> pl.LazyFrame:
    return bids.filter(pl.col("auction") % 123 == 0).select("ts", "auction", "price")


def hot_items(bids: pl.LazyFrame) -> pl.LazyFrame:
    panes = bids.group_by((pl.col("ts") // HOT_SLIDE * HOT_SLIDE).alias("pane"),
                          "auction").agg(pl.len().alias("n"))
    # the pane that starts at p is in the windows with l = p - k * WA, k = 0 .. WS / WA - 1
    shifts = pl.lit(list(range(HOT_SIZE // HOT_SLIDE)), dtype=pl.List(pl.Int64))
    counts = (panes.with_columns(k=shifts).explode("k")
              .group_by((pl.col("pane") + HOT_SIZE - pl.col("k") * HOT_SLIDE).alias("right"),
                        "auction")
              .agg(pl.col("n").sum().alias("count")))
    return (counts.filter(pl.col("count") == pl.col("count").max().over("right"))
            .select((pl.col("right") + HOT_SLIDE).alias("ts"), "auction", "count"))


def highest_bid(bids: pl.LazyFrame) -> pl.LazyFrame:
    w = pl.col("ts") // TUMBLE
    return (bids.filter(pl.col("price") == pl.col("price").max().over(w))
            .with_columns(ts=_window_end(TUMBLE)))


def mean_price(bids: pl.LazyFrame) -> pl.LazyFrame:
    return (bids.group_by(_window_end(TUMBLE).alias("ts"), "category")
            .agg(pl.col("price").mean().alias("mean")))


def join(persons: pl.LazyFrame, auctions: pl.LazyFrame) -> pl.LazyFrame:
    p = persons.select(_window_end(TUMBLE).alias("ts"), "id", "name")
    a = auctions.select(_window_end(TUMBLE).alias("ts"), pl.col("id").alias("auction"),
                        "seller")
    return (p.join(a, left_on=["ts", "id"], right_on=["ts", "seller"])
            .select("ts", "id", "name", "auction"))


FLOWS = {"currency": currency, "selection": selection, "hot_items": hot_items,
         "highest_bid": highest_bid, "mean_price": mean_price, "join": join}


def main(argv: list[str]) -> None:
    flow, outp, *rest = argv
    inputs = [a for a in rest if "=" not in a]
    opts = dict(a.split("=", 1) for a in rest if "=" in a)
    api = opts.pop("api", "eager")
    if opts or api not in ("eager", "lazy") or flow not in FLOWS:
        raise SystemExit(f"polars_userflows: flow one of {', '.join(FLOWS)}, api=eager|lazy; "
                         f"got {argv}")
    t0 = time.perf_counter()
    frames = [_read(p, api == "lazy") for p in inputs]
    df = FLOWS[flow](*frames).collect()
    df.write_ndjson(outp)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"elapsed_s": elapsed, "rows_out": df.height,
                      "settings": {"api": api, "polars": pl.__version__,
                                   "threads": pl.thread_pool_size()}}))


if __name__ == "__main__":
    main(sys.argv[1:])
