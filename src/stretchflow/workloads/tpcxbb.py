"""TPCx-BB streaming queries Q1, Q2, Q3, Q4 and Q15 as chain flows (ordered-multicore §7.3).

The paper runs five TPCx-BB queries adapted to streams over web clickstreams (WC) and store
sales (SS), each a linear pipeline of stateless (SL), partitioned-stateful (PS) and stateful
"sink-side" (SF) operators; it gives only the operator kinds and the queries' intent, so the
operators below are derived from the TPCx-BB specification's query text (documented, with the
deviations, in ``docs/ordered.md``). Every query is a chain :class:`~stretchflow.flow.Flow`
of map / flat_map / filter and single-input O+ operators, so it runs on every engine
(reference, vsn, ordered): a PS operator is an O+ keyed by its partitioning key, an SF
operator an O+ with one constant key (degree 1). Windows are tumbling unless stated; an O+
output carries its window's right boundary, so each windowed step shifts the stream by one
window.

* Q1 (SS→SL→PS→PS→SF) "products sold together": select the tickets of some categories in some
  stores; per ticket and hour the set of items (PS by ticket); every pair of distinct items
  of a basket (SL, a flat_map: the paper folds it into the PS step); per pair and hour the
  number of baskets (PS by pair); per hour the ``top`` pairs with at least ``min_count``
  baskets (SF).
* Q2 (WC→SL→PS→SL→PS→SF) "viewed together with a product": item views; per user a session of
  ``session`` ms -- TPCx-BB closes a session after 60 min of inactivity, here sessions are
  per-user tumbling windows of 60 min (O+ windows are fixed; see docs) -- with its set of
  items (PS by user); for sessions containing ``item`` every other item (SL); views per item
  and window (PS by item); the ``top`` 30 (SF).
* Q3 (WC→SL→PS→PS) "last viewed before a purchase": views of items in ``categories`` and
  purchases of ``item``; per user the last ``last`` (5) views in the current 10-day window,
  emitted when the user buys ``item`` (PS by user, an O+ whose f_U emits); per viewed item the
  number of such appearances (PS by item, f_MK returns the set of viewed items).
* Q4 (WC→SL→PS→SL→SF) "shopping-cart abandonment": project user and page type; per user
  session (tumbling 60 min) the pages visited and whether a cart was filled but not bought
  (PS by user); keep abandoned sessions (SL); per window the number of abandoned sessions and
  their mean page count (SF).
* Q15 (SS→SL→SL→PS) "categories with flat or declining sales": sales of one store (SL);
  project category, day and amount in cents (SL); per category the least-squares slope of
  daily sales over a sliding ``window`` (7 days, slide 1 day), emitted when <= 0 (PS by
  category; 10 categories).

Data (:func:`store_sales`, :func:`web_clickstreams`): synthetic, deterministic, ts-sorted
lists of dicts with the columns the queries read (named after TPCx-BB's ``ss_*`` / ``wcs_*``
columns without prefixes). Scaling: TPCx-BB's scale factors give GBs; here ``rows`` sets the
size (default 20 000 rows: each query runs in about a second on the ordered engine) and the
time span is fixed (14 days of sales, 30 days of clicks) so windows hold realistic counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import stretchflow as sf

from ..flow import Flow, Stream
from ..io.sinks import Collector
from ..operators.oplus import OPlus, WindowSet

HOUR = 3_600_000
DAY = 24 * HOUR
N_CATEGORIES = 10


# -- data ------------------------------------------------------------------------------------


def _zipf_items(rng: np.random.Generator, n: int, items: int, a: float = 1.3) -> np.ndarray:
    return (rng.zipf(a, n) - 1) % items


def store_sales(rows: int = 20_000, *, days: int = 14, items: int = 500, stores: int = 10,
                customers: int = 2_000, seed: int = 0) -> list[dict]:
    """Store-sales line items ``{"ts","ticket","item","category","store","customer",
    "quantity","price"}`` (price in cents), grouped in tickets of 1–6 lines, ts-sorted over
    ``days`` days. Categories 0–2 decline over time and 3–5 grow (Q15 has something to find).
    """
    rng = np.random.default_rng(seed)
    baskets: list[list[int]] = []  # the tickets' distinct items, until there are ``rows`` lines
    total = 0
    while total < rows:
        basket = sorted(set(_zipf_items(rng, int(rng.integers(1, 7)), items).tolist()))
        baskets.append(basket)
        total += len(basket)
    ts = np.sort(rng.integers(0, days * DAY, len(baskets)))
    base = rng.integers(100, 5_000, items)
    out: list[dict] = []
    for t, basket in enumerate(baskets):
        store = int(rng.integers(0, stores))
        cust = int(rng.integers(0, customers))
        day = int(ts[t]) / DAY
        for it in basket:
            cat = it % N_CATEGORIES
            trend = -0.04 if cat < 3 else 0.04 if cat < 6 else 0.0
            price = int(base[it] * max(0.1, 1 + trend * day + rng.normal(0, 0.05)))
            out.append({"ts": int(ts[t]), "ticket": t, "item": it, "category": cat,
                        "store": store, "customer": cust,
                        "quantity": int(rng.integers(1, 5)), "price": price})
    return out[:rows]


def web_clickstreams(rows: int = 20_000, *, days: int = 30, items: int = 300,
                     users: int = 1_000, seed: int = 0) -> list[dict]:
    """Web clicks ``{"ts","user","item","category","page","sales"}``, ts-sorted over ``days``.

    Clicks come in user sessions of 1–12 clicks 10 s – 5 min apart: 70 % only view items
    (``page="view"``), 15 % add to the cart and leave (``"cart"``, abandoned), 15 % add to the
    cart and buy (``"buy"``, with a ``sales`` id). Items are Zipf-popular (item 0 the most).
    """
    rng = np.random.default_rng(seed)
    out: list[dict] = []
    n_sessions = max(1, rows // 6)
    starts = rng.integers(0, days * DAY, n_sessions)
    sales = 0
    for s in range(n_sessions):
        user = int((rng.zipf(1.2) - 1) % users)
        k = int(rng.integers(1, 13))
        t = int(starts[s])
        kind = rng.random()
        viewed = _zipf_items(rng, k, items).tolist()
        for it in viewed:
            out.append({"ts": t, "user": user, "item": it, "category": it % N_CATEGORIES,
                        "page": "view", "sales": None})
            t += int(rng.integers(10_000, 300_000))
        if kind >= 0.7:
            it = viewed[-1]
            out.append({"ts": t, "user": user, "item": it, "category": it % N_CATEGORIES,
                        "page": "cart", "sales": None})
            if kind >= 0.85:
                t += int(rng.integers(10_000, 120_000))
                sales += 1
                out.append({"ts": t, "user": user, "item": it, "category": it % N_CATEGORIES,
                            "page": "buy", "sales": sales})
    out.sort(key=lambda r: r["ts"])  # stable: a session's clicks keep their order
    return out[:rows]


# -- query helpers ---------------------------------------------------------------------------


def _append(acc: list, x: Any) -> list:
    acc.append(x)
    return acc


def _top(n: int, min_count: int, what: str) -> Callable[[Any, list], dict | None]:
    def output(_key: Any, acc: list) -> dict | None:
        best = sorted((x for x in acc if x[0] >= min_count), key=lambda x: (-x[0], x[1]))[:n]
        return {"top": [[*x[1], x[0]] if isinstance(x[1], tuple) else [x[1], x[0]]
                        for x in best], "of": what} if best else None

    return output


# -- the queries -----------------------------------------------------------------------------


def q1(ss: Stream, *, categories: tuple[int, ...] = (0, 1, 2, 3), stores: tuple[int, ...] =
       (0, 1, 2, 3, 4), window: int = HOUR, top: int = 100, min_count: int = 2) -> Stream:
    """Q1: the ``top`` item pairs sold together in ``window`` (see the module docstring)."""
    cats, sts = frozenset(categories), frozenset(stores)
    baskets = ss.filter(lambda t: t["category"] in cats and t["store"] in sts,
                        name="q1-select").aggregate(
        size=window, keys=lambda t: {t["ticket"]}, init=list,
        update=lambda acc, t: _append(acc, t["item"]),
        output=lambda k, acc: {"ticket": k, "items": sorted(set(acc))}, name="q1-basket")
    pairs = baskets.flat_map(
        lambda b: [{"pair": (a, c)} for i, a in enumerate(b["items"]) for c in b["items"][i + 1:]],
        name="q1-pairs")
    counts = pairs.aggregate(size=window, keys=lambda t: {t["pair"]}, init=lambda: 0,
                             update=lambda n, t: n + 1,
                             output=lambda k, n: {"pair": k, "count": n}, name="q1-count")
    return counts.aggregate(size=window, keys=lambda t: {0}, init=list,
                            update=lambda acc, t: _append(acc, (t["count"], t["pair"])),
                            output=_top(top, min_count, "pairs"), name="q1-top")


def q2(wc: Stream, *, item: int = 0, session: int = HOUR, top: int = 30) -> Stream:
    """Q2: the ``top`` items viewed in the same session as ``item``."""
    views = wc.filter(lambda t: t["page"] == "view" and t["item"] is not None, name="q2-views")
    sessions = views.aggregate(
        size=session, keys=lambda t: {t["user"]}, init=list,
        update=lambda acc, t: _append(acc, t["item"]),
        output=lambda k, acc: {"user": k, "items": sorted(set(acc))}, name="q2-session")
    together = sessions.flat_map(
        lambda s: [{"item": i} for i in s["items"] if i != item] if item in s["items"] else [],
        name="q2-together")
    counts = together.aggregate(size=session, keys=lambda t: {t["item"]}, init=lambda: 0,
                                update=lambda n, t: n + 1,
                                output=lambda k, n: {"item": k, "views": n}, name="q2-count")
    return counts.aggregate(size=session, keys=lambda t: {0}, init=list,
                            update=lambda acc, t: _append(acc, (t["views"], t["item"])),
                            output=_top(top, 1, "items"), name="q2-top")


class _LastViews(OPlus):
    """Q3's PS-by-user step: keeps a user's last ``last`` views in the window and emits them
    from f_U when the user buys the target item (an O+ whose f_U emits, STRETCH Table I)."""

    def __init__(self, item: int, last: int, window: int):
        super().__init__(size=window, name="q3-last-views")
        self.item = item
        self.last = last

    def keys(self, t: Any, i: int) -> Any:
        return {t["user"]}

    def init(self) -> Any:
        return []

    def update(self, ws: WindowSet, ts: int, t: Any, i: int) -> Any:
        views = ws.states[0]
        if t["page"] == "view":
            views.append(t["item"])
            if len(views) > self.last:
                del views[0]
            return None
        if t["item"] == self.item and views:  # a purchase of the target item
            return [{"user": ws.key, "viewed": list(views)}]
        return None


def q3(wc: Stream, *, item: int = 0, categories: tuple[int, ...] = (0, 1, 2, 3, 4),
       last: int = 5, window: int = 10 * DAY) -> Stream:
    """Q3: how often each item was among the ``last`` views before a purchase of ``item``."""
    cats = frozenset(categories)
    sel = wc.filter(lambda t: (t["page"] == "view" and t["category"] in cats)
                    or (t["page"] == "buy" and t["item"] == item), name="q3-select")
    before = sel.oplus(_LastViews(item, last, window))
    return before.aggregate(size=window, keys=lambda t: set(t["viewed"]), init=lambda: 0,
                            update=lambda n, t: n + 1,
                            output=lambda k, n: {"item": k, "before_purchase": n},
                            name="q3-count")


def _session_update(acc: list, t: dict) -> list:
    acc[0] += 1
    if t["page"] == "cart":
        acc[1] = True
    elif t["page"] == "buy":
        acc[2] = True
    return acc


def q4(wc: Stream, *, session: int = HOUR) -> Stream:
    """Q4: number of abandoned carts and mean pages of those sessions, per window."""
    proj = wc.map(lambda t: {"user": t["user"], "page": t["page"]}, name="q4-project")
    sessions = proj.aggregate(
        size=session, keys=lambda t: {t["user"]}, init=lambda: [0, False, False],
        update=_session_update,
        output=lambda k, acc: {"user": k, "pages": acc[0], "abandoned": acc[1] and not acc[2]},
        name="q4-session")
    abandoned = sessions.filter(lambda s: s["abandoned"], name="q4-abandoned")
    return abandoned.aggregate(
        size=session, keys=lambda t: {0}, init=lambda: [0, 0],
        update=lambda acc, s: [acc[0] + 1, acc[1] + s["pages"]],
        output=lambda k, acc: {"sessions": acc[0], "avg_pages": acc[1] / acc[0]},
        name="q4-average")


def _slope(_cat: int, daily: dict) -> float | None:
    if len(daily) < 2:
        return None
    xs = sorted(daily)
    n = len(xs)
    mx = sum(xs) / n
    my = sum(daily[x] for x in xs) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (daily[x] - my) for x in xs) / den


def _add_day(acc: dict, t: dict) -> dict:
    acc[t["day"]] = acc.get(t["day"], 0) + t["cents"]
    return acc


def q15(ss: Stream, *, store: int = 0, window: int = 7 * DAY, slide: int = DAY) -> Stream:
    """Q15: categories whose daily sales in ``store`` have a slope <= 0 over ``window``."""

    def output(cat: int, daily: dict) -> dict | None:
        s = _slope(cat, daily)
        return None if s is None or s > 0 else {"category": cat, "slope": s}

    sel = ss.filter(lambda t: t["store"] == store, name="q15-store")
    proj = sel.map(lambda t: {"category": t["category"], "day": t["ts"] // DAY,
                              "cents": t["price"] * t["quantity"]}, name="q15-project")
    return proj.aggregate(size=window, slide=slide, keys=lambda t: {t["category"]},
                          init=dict, update=_add_day, output=output, name="q15-trend")


# -- registry --------------------------------------------------------------------------------
# The queries are registered, with their inputs, outputs and parameters, in the one query
# registry (:data:`stretchflow.queries.QUERIES`); here: each query's pipeline of operator kinds
# as the paper gives it, and which generator writes its input.

PIPELINES: dict[str, str] = {
    "tpcxbb-q1": "SS→SL→PS→(SL)→PS→SF",
    "tpcxbb-q2": "WC→SL→PS→SL→PS→SF",
    "tpcxbb-q3": "WC→SL→PS→PS",
    "tpcxbb-q4": "WC→SL→PS→SL→SF",
    "tpcxbb-q15": "SS→SL→SL→PS",
}
NAMES: tuple[str, ...] = tuple(PIPELINES)
GENERATORS: dict[str, Callable[..., list[dict]]] = {
    "store-sales": store_sales, "web-clickstreams": web_clickstreams}


#: the generated data set each query reads
DATA: dict[str, str] = {"tpcxbb-q1": "store-sales", "tpcxbb-q2": "web-clickstreams",
                        "tpcxbb-q3": "web-clickstreams", "tpcxbb-q4": "web-clickstreams",
                        "tpcxbb-q15": "store-sales"}


def query_fn(name: str) -> Callable[..., Stream]:
    """The function ``q<n>(stream, **params)`` of query ``name`` (``tpcxbb-q<n>``)."""
    if name not in PIPELINES:
        raise ValueError(f"unknown TPCx-BB query {name!r}; queries: {', '.join(NAMES)}")
    return globals()[f"q{name.split('-q')[1]}"]


def flow(name: str, data: list[dict], **params: Any) -> tuple[Flow, Collector]:
    """A chain flow of query ``name`` over ``data``; returns the flow and its collector."""
    fn = query_fn(name)
    f = Flow(name)
    src = f.source(sf.io.iterable(lambda: iter(data), name=name.split("-")[1] + "-input"))
    return f, fn(src, **params).collect()


def generate(name: str, rows: int = 20_000, seed: int = 0, **kw: Any) -> list[dict]:
    """The generated input of query ``name`` (``kw`` go to the generator, e.g. ``days``)."""
    query_fn(name)  # the one check of the name
    return GENERATORS[DATA[name]](rows, seed=seed, **kw)
