"""The userflows written with column expressions (issue #31, docs/api.md): the same queries
and outputs as :mod:`stretchflow_bench.userflow_lambdas`, said declaratively, so that an
engine can run them on Arrow batches. A flow file, run as a user runs one::

    stretchflow run userflow_exprs.py --param flow=hot_items \\
        --param input=bids.parquet --param output=out.jsonl [--engine vsn --parallelism 2]

The join (NEXMark Q8) has no form here: ``Stream.join`` takes its keys as functions only
(no column-name join keys in the API), so it is a lambda flow only.
"""

from __future__ import annotations

import stretchflow as sf


def currency(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q1: every bid with its price in euros beside it."""
    return bids.with_columns(price_eur=sf.col("price") * 0.908)


def selection(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q2: the bids on auctions whose id is a multiple of 123, auction and price."""
    return bids.filter(sf.col("auction") % 123 == 0).select("auction", "price")


def hot_items(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q5: bids per auction in sliding windows of 10 s every 2 s, then per window
    the auction(s) with the most bids (ties included)."""
    counts = bids.aggregate(size="10s", slide="2s", keys="auction", **sf.count())
    return counts.aggregate(size="2s", keys=None, **sf.arg_max("count"))


def highest_bid(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q7's shape: per tumbling 10 s window the bid(s) with the highest price."""
    return bids.aggregate(size="10s", keys=None, **sf.arg_max("price"))


def mean_price(bids: sf.Stream) -> sf.Stream:
    """The mean price per category, tumbling 10 s."""
    return bids.aggregate(size="10s", keys="category", **sf.mean_of("price"))


#: flow name -> the function building it from the bids stream
ON_BIDS = {"currency": currency, "selection": selection, "hot_items": hot_items,
           "highest_bid": highest_bid, "mean_price": mean_price}


def build_flow(params: dict[str, str]) -> sf.Flow:
    """``flow`` names the query, ``input`` the bids file, ``output`` the output file."""
    name = params["flow"]
    if name not in ON_BIDS:
        raise ValueError(f"no expression form of flow {name!r}; flows: {', '.join(ON_BIDS)}"
                         + (" (the join takes key functions only)" if name == "join" else ""))
    flow = sf.Flow(name)
    ON_BIDS[name](flow.source(sf.io.open_source(params["input"]))).sink(params["output"])
    return flow
