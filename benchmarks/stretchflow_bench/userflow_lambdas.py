"""The userflows as a user writes them today, from docs/api.md: keys, values and rows given by
Python functions (lambdas, or a ``def`` where a lambda cannot say it). A flow file, run as a
user runs one (``bench userflows`` runs each variant so)::

    stretchflow run userflow_lambdas.py --param flow=hot_items \\
        --param input=bids.jsonl --param output=out.jsonl [--engine vsn --parallelism 2]
    stretchflow run userflow_lambdas.py --param flow=join --param persons=persons.parquet \\
        --param auctions=auctions.parquet --param output=out.jsonl

Inputs are JSON Lines or Parquet (by their extension). The flows and their outputs are those
of :mod:`stretchflow_bench.userflow_exprs` (the same queries with column expressions), of the
hand-written loops (:mod:`stretchflow_bench.userflow_loops`) and of the Polars and Spark SQL
programs (``peer_programs/``): one row per output tuple, its ``ts`` the window's end.

:data:`HOT_ITEMS` holds hot items' functions by name: the calls loop of ``bench userflows``
(the engine's own cost per tuple, issue #32) calls these same functions; so does the loop of
``hot_items_costly`` with :data:`HOT_ITEMS_COSTLY` (its key function costs about 5 us).
"""

from __future__ import annotations

from typing import Any

import stretchflow as sf


def _top_update(field: str) -> Any:
    """f_U of "the rows with the largest ``field``, ties included": the accumulator is
    ``(largest, rows)``; ``init`` makes a new one per window."""

    def update(acc: tuple[Any, list], t: dict) -> tuple[Any, list]:
        best, rows = acc
        x = t[field]
        if best is None or x > best:
            return (x, [t])
        if x == best:
            rows.append(t)
        return acc
    return update


#: hot items' user functions, by name (the flow below and the calls loop use these)
HOT_ITEMS: dict[str, Any] = {
    "keys": lambda t: t["auction"],
    "count": sf.count(),
    "output": lambda k, n: {"auction": k, "count": n},
    "top_keys": lambda t: 0,
    "top_init": lambda: (None, []),
    "top_update": _top_update("count"),
    "top_output": lambda k, acc: {"rows": acc[1]},
    "rows": lambda t: t["rows"],
}


#: iterations of hot_items_costly's key function: about 5-7 us of Python per call on the
#: 2-core machine of the results (the loop measures it in each run: ``keys_us_per_call``)
BURN = 90


def costly_auction(t: dict) -> int:
    """Hot items' key with Python work a real key function might do (a parse, a lookup):
    ``BURN`` steps of a linear congruential generator, then the auction."""
    x = t["auction"]
    for _ in range(BURN):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return t["auction"]


#: hot items whose key function costs real time (issue #32: process channels must beat the
#: reference there), everything else as :data:`HOT_ITEMS`
HOT_ITEMS_COSTLY: dict[str, Any] = {**HOT_ITEMS, "keys": costly_auction}


def currency(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q1: every bid with its price in euros beside it."""
    return bids.map(lambda t: {**t, "price_eur": t["price"] * 0.908})


def selection(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q2: the bids on auctions whose id is a multiple of 123, auction and price."""
    return (bids.filter(lambda t: t["auction"] % 123 == 0)
            .map(lambda t: {"auction": t["auction"], "price": t["price"]}))


def hot_items(bids: sf.Stream, f: dict[str, Any] = HOT_ITEMS) -> sf.Stream:
    """NEXMark Q5: bids per auction in sliding windows of 10 s every 2 s, then per window
    the auction(s) with the most bids (ties included); ``f``: its functions."""
    counts = bids.aggregate(size="10s", slide="2s", keys=f["keys"], **f["count"],
                            output=f["output"])
    top = counts.aggregate(size="2s", keys=f["top_keys"], init=f["top_init"],
                           update=f["top_update"], output=f["top_output"])
    return top.flat_map(f["rows"])


def highest_bid(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q7's shape: per tumbling 10 s window the bid(s) with the highest price."""
    top = bids.aggregate(size="10s", keys=lambda t: 0, init=lambda: (None, []),
                         update=_top_update("price"), output=lambda k, acc: {"rows": acc[1]})
    return top.flat_map(lambda t: t["rows"])


def hot_items_costly(bids: sf.Stream) -> sf.Stream:
    """Hot items with a key function costing about 5 us (:data:`HOT_ITEMS_COSTLY`)."""
    return hot_items(bids, HOT_ITEMS_COSTLY)


def mean_price(bids: sf.Stream) -> sf.Stream:
    """The mean price per category, tumbling 10 s."""
    return bids.aggregate(size="10s", keys=lambda t: t["category"],
                          **sf.mean_of(lambda t: t["price"],
                                    output=lambda k, m: {"category": k, "mean": m}))


def join(persons: sf.Stream, auctions: sf.Stream) -> sf.Stream:
    """NEXMark Q8: new persons with the auctions they opened, in tumbling 10 s windows."""
    return persons.join(auctions, size="10s", left_keys=lambda p: p["id"],
                        right_keys=lambda a: a["seller"],
                        output=lambda p, a: {"id": p["id"], "name": p["name"],
                                             "auction": a["id"]})


#: flow name -> the function building it from the bids stream
ON_BIDS = {"currency": currency, "selection": selection, "hot_items": hot_items,
           "highest_bid": highest_bid, "mean_price": mean_price,
           "hot_items_costly": hot_items_costly}


def build_flow(params: dict[str, str]) -> sf.Flow:
    """``flow`` names the query; ``input`` (bids) or ``persons`` and ``auctions`` (join) the
    input files; ``output`` the output file."""
    name = params["flow"]
    flow = sf.Flow(name)
    if name == "join":
        out = join(flow.source(sf.io.open_source(params["persons"])),
                   flow.source(sf.io.open_source(params["auctions"])))
    elif name in ON_BIDS:
        out = ON_BIDS[name](flow.source(sf.io.open_source(params["input"])))
    else:
        raise ValueError(f"unknown flow {name!r}; flows: {', '.join([*ON_BIDS, 'join'])}")
    out.sink(params["output"])
    return flow
