"""NEXMark's queries Q0–Q8 over the streams of :mod:`stretchflow.workloads.nexmark`, written
with the public API: column expressions where the API has them (``filter``, ``select``,
declarative aggregates), key and output functions for the joins (``Stream.join`` takes its
keys as functions only), and for Q6 an aggregate by functions and an ``OPlus`` subclass.

Each query is a function of the streams it reads (``persons``, ``auctions``, ``bids``, named
as NEXMark's tables) and its window parameters, returning its output stream; :func:`build`
adds the sources a query reads to a flow by name. The query text they follow is Flink's
NEXMark SQL (https://github.com/nexmark/nexmark, ``nexmark-flink/src/main/resources/queries``),
with its window sizes (10 s; Q5 10 s every 2 s) as defaults, meant for the generator's
default rate of 10 000 events per second of event time (1 M events span 100 s).
docs/nexmark.md says what each query means and where it differs from NEXMark.

Windowed results carry their window's right boundary as ``ts`` (docs/semantics.md), and
each further windowed step of a chain shifts it by its own window: Q5's output is at
``window end + slide``, Q8's at ``window end + window``, Q4's at ``window end + 2 window`` and
Q6's at ``window end + window + 1 ms``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from operator import itemgetter
from typing import Any

from ..eventtime import DELTA, parse_duration
from ..expr import col
from ..flow import Flow, Stream
from ..io.sources import Source
from ..operators.aggregate import arg_max, count, max_of, mean_of
from ..operators.oplus import OPlus, WindowSet

__all__ = ["QUERIES", "SLIDE", "WINDOW", "AverageOfLast", "build", "q0", "q1", "q2", "q3",
           "q4", "q5", "q6", "q7", "q8"]

#: Flink's NEXMark SQL window (Q3's join, Q4's closing, Q5's size, Q7, Q8): 10 s
WINDOW = "10s"
#: Q5's slide (Flink's NEXMark SQL: HOP of 2 s)
SLIDE = "2s"
#: Q1's dollars to euros (Flink's NEXMark SQL; Beam's Query1 takes ``price * 89 / 100``)
DOLLAR_TO_EURO = 0.908
#: Q2's selection: bids on every 123rd auction (Flink's SQL and Beam's ``auctionSkip``)
AUCTION_SKIP = 123
#: Q3's states and category
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
#: Q6: the closed auctions per seller that the average is over (NEXMark's and Beam's 10)
Q6_LAST = 10


def q0(bids: Stream) -> Stream:
    """Pass-through: every bid's auction, bidder, price, date_time and extra."""
    return bids.select("auction", "bidder", "price", "date_time", "extra")


def q1(bids: Stream) -> Stream:
    """Currency conversion: Q0 with the price in euros, ``price * 0.908`` (a float)."""
    return bids.select("auction", "bidder", (col("price") * DOLLAR_TO_EURO).alias("price"),
                       "date_time", "extra")


def q2(bids: Stream) -> Stream:
    """Selection: auction and price of the bids on auctions whose id is a multiple of 123."""
    return bids.filter(col("auction") % AUCTION_SKIP == 0).select("auction", "price")


def _q3_row(person: dict, auction: dict) -> dict:
    return {"name": person["name"], "city": person["city"], "state": person["state"],
            "id": auction["id"]}


def q3(persons: Stream, auctions: Stream, window: int | str = WINDOW) -> Stream:
    """Local item suggestion: name, city and state of each seller in OR, ID or CA with the id
    of each of their auctions in category 10, for seller and auction in the same tumbling
    ``window`` (NEXMark's Q3 is an unbounded join: docs/nexmark.md)."""
    sellers = (persons.filter(col("state").is_in(list(Q3_STATES)))
                      .select("id", "name", "city", "state"))
    items = auctions.filter(col("category") == Q3_CATEGORY).select("id", "seller")
    return sellers.join(items, size=window, left_keys=itemgetter("id"),
                        right_keys=itemgetter("seller"), output=_q3_row, name="q3-join")


def _in_time(auction: dict, bid: dict) -> bool:
    return auction["date_time"] <= bid["date_time"] <= auction["expires"]


def _auction_bid(auction: dict, bid: dict) -> dict:
    return {"id": auction["id"], "category": auction["category"], "seller": auction["seller"],
            "expires": auction["expires"], "price": bid["price"]}


def _closing_bids(auctions: Stream, bids: Stream, w: int) -> Stream:
    """Q4's and Q6's core: each auction that opens and closes in one tumbling window of ``w``
    ms, with each of its bids from its opening to its expiry (both included), as ``{"id",
    "category", "seller", "expires", "price"}`` at the window's end. All of such an auction's
    bids are in its window, so its highest is its winning bid."""
    closing = (auctions.filter(col("expires") < (col("date_time") // w + 1) * w)
                       .select("id", "category", "seller", "date_time", "expires"))
    return closing.join(bids.select("auction", "price", "date_time"), size=w,
                        left_keys=itemgetter("id"), right_keys=itemgetter("auction"),
                        predicate=_in_time, output=_auction_bid, name="closing-bids")


def q4(auctions: Stream, bids: Stream, window: int | str = WINDOW) -> Stream:
    """Average price per category: per tumbling ``window`` and category, the mean of the
    winning bids (the highest bid placed from the auction's opening to its expiry, both
    included) of the auctions that open and close in that window; an auction without bids has
    no winning bid. Output ``{"category", "avg"}`` at the window's end plus two windows."""
    w = parse_duration(window)
    winning = _closing_bids(auctions, bids, w).aggregate(
        size=w, keys=("id", "category"), **max_of("price", "final"), name="q4-winning")
    return winning.aggregate(size=w, keys="category", **mean_of("final", name="avg"),
                             name="q4-average")


def _best(acc: dict, bid: dict) -> dict:
    """Per auction of one seller, (expires, the highest price so far)."""
    known = acc.get(bid["id"])
    if known is None or bid["price"] > known[1]:
        acc[bid["id"]] = (bid["expires"], bid["price"])
    return acc


def _closed_in_order(seller: int, acc: dict) -> dict:
    """The seller's auctions closed in the window with their winning bids, in closing order
    (expiry, then id), so what follows does not depend on the order bids arrived in."""
    closed = sorted((expires, auction, final) for auction, (expires, final) in acc.items())
    return {"seller": seller, "closed": [(auction, final) for _, auction, final in closed]}


class LastPrices:
    """ζ of :class:`AverageOfLast`: a seller's last winning bids. Never empty, so the seller's
    window set slides on for the whole stream instead of being removed."""

    __slots__ = ("prices",)

    def __init__(self, last: int):
        self.prices: deque[int] = deque(maxlen=last)

    def __bool__(self) -> bool:
        return True


class AverageOfLast(OPlus):
    """Q6's per-seller state over all time: an O+ keyed by seller, WT single with WS = WA =
    δ, whose ζ keeps the seller's last ``last`` winning bids whatever their age (f_S keeps
    everything). f_U takes a seller's auctions closed in one window, ``{"seller", "closed":
    [(auction, final), ...]}`` in closing order, and emits ``{"seller", "avg"}`` for each: the
    mean of the seller's last ``last`` winning bids once that auction closed, at the tuple's
    ts + δ (the single window set's right boundary)."""

    slide_collapses = True  # f_S does nothing, so any number of slides is one

    def __init__(self, last: int = Q6_LAST, name: str = "q6-average"):
        super().__init__(size=DELTA, slide=DELTA, inputs=1, window_type="single", name=name)
        if last < 1:
            raise ValueError(f"{name}: last must be >= 1, got {last}")
        self.last = last

    def keys(self, t: Any, i: int) -> Any:
        return t["seller"]

    def init(self) -> LastPrices:
        return LastPrices(self.last)

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list:  # type: ignore[override]
        prices = ws.states[0].prices
        out = []
        for _, final in value["closed"]:
            prices.append(final)
            out.append({"seller": ws.key, "avg": sum(prices) / len(prices)})
        return out

    def slide(self, ws: WindowSet) -> None:  # type: ignore[override]
        """f_S: nothing leaves; the last winning bids stay whatever their age."""


def q6(auctions: Stream, bids: Stream, window: int | str = WINDOW,
       last: int = Q6_LAST) -> Stream:
    """Average selling price by seller: at each auction a seller closes (one that opens and
    closes in one tumbling ``window``, as in :func:`q4`, with at least one bid), the mean of
    the winning bids of the seller's last ``last`` such auctions, ``{"seller", "avg"}``, at
    the window's end plus ``window`` plus 1 ms; a seller's auctions closed in one window count
    in closing order (expiry, then id)."""
    w = parse_duration(window)
    per_seller = _closing_bids(auctions, bids, w).aggregate(
        size=w, keys=itemgetter("seller"), init=dict, update=_best, output=_closed_in_order,
        name="q6-closed")
    return per_seller.oplus(AverageOfLast(last))


def q5(bids: Stream, window: int | str = WINDOW, slide: int | str = SLIDE) -> Stream:
    """Hot items: per sliding window (``window`` every ``slide``) the auction(s) with the most
    bids, ``{"auction", "num"}``, ties included, at the window's end plus ``slide``."""
    counts = bids.aggregate(size=window, slide=slide, keys="auction", **count("num"),
                            name="q5-count")
    return counts.aggregate(size=slide, keys=None, **arg_max("num"), name="q5-max")


def q7(bids: Stream, window: int | str = WINDOW) -> Stream:
    """Highest bid: per tumbling ``window`` the bid(s) with the highest price (auction,
    bidder, price, date_time, extra), ties included, at the window's end."""
    return (bids.select("auction", "bidder", "price", "date_time", "extra")
                .aggregate(size=window, keys=None, **arg_max("price"), name="q7-max"))


def _q8_row(window: int, person: dict, auction: dict) -> dict:
    return {"id": person["id"], "name": person["name"],
            "starttime": person["date_time"] // window * window}


def q8(persons: Stream, auctions: Stream, window: int | str = WINDOW) -> Stream:
    """Monitor new users: the persons who joined and opened at least one auction in the same
    tumbling ``window``, ``{"id", "name", "starttime"}`` once per person and window (starttime
    the window's start), at the window's end plus ``window``."""
    w = parse_duration(window)
    pairs = persons.select("id", "name", "date_time").join(
        auctions.select("seller"), size=w, left_keys=itemgetter("id"),
        right_keys=itemgetter("seller"), output=partial(_q8_row, w), name="q8-join")
    once = pairs.aggregate(size=w, keys=("id", "name", "starttime"), **count("auctions"),
                           name="q8-once")
    return once.select("id", "name", "starttime")


#: query name -> (the function, the streams it reads in the order it takes them)
QUERIES: dict[str, tuple[Callable[..., Stream], tuple[str, ...]]] = {
    "q0": (q0, ("bids",)),
    "q1": (q1, ("bids",)),
    "q2": (q2, ("bids",)),
    "q3": (q3, ("persons", "auctions")),
    "q4": (q4, ("auctions", "bids")),
    "q5": (q5, ("bids",)),
    "q6": (q6, ("auctions", "bids")),
    "q7": (q7, ("bids",)),
    "q8": (q8, ("persons", "auctions")),
}


def build(flow: Flow, query: str, sources: Mapping[str, Source], **params: Any) -> Stream:
    """Adds NEXMark ``query`` (``"q0"`` ... ``"q8"``) to ``flow``: a source per stream it
    reads, taken from ``sources`` by name (``persons``, ``auctions``, ``bids``), and its
    operators with ``params`` (``window``, ``slide``, ``last``); returns its output stream.

    >>> import stretchflow as sf
    >>> flow = sf.Flow("q2")
    >>> bids = sf.io.generated("nexmark", rows=5000, seed=1, stream="bids")
    >>> out = build(flow, "q2", {"bids": bids}).collect()
    >>> _ = flow.run()
    >>> all(p["auction"] % 123 == 0 for _, p in out.items), len(out.items)
    (True, 14)
    """
    if query not in QUERIES:
        raise ValueError(f"no NEXMark query {query!r}; queries: {', '.join(QUERIES)}")
    fn, streams = QUERIES[query]
    missing = [s for s in streams if s not in sources]
    if missing:
        raise ValueError(f"NEXMark {query} reads {', '.join(streams)}; no source for "
                         f"{', '.join(missing)}")
    return fn(*(flow.source(sources[s], name=s) for s in streams), **params)
