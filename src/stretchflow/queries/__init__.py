"""The built-in queries of the papers, each written with the public API, in ONE registry.

:data:`QUERIES` is the contract of ``stretchflow run QUERY`` (DESIGN.md, Built-in queries;
docs/queries.md): every built-in query -- the STRETCH operators, the hedge and traffic joins
and the TPCx-BB streaming queries of the ordered-multicore paper (§7.3, logic in
:mod:`stretchflow.workloads.tpcxbb`) -- is one :class:`Query`: its inputs, its output fields,
its parameters with their defaults and types, and how to build it over input streams.
``stretchflow queries``, ``stretchflow run --help``, the benchmarks and the tests read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..eventtime import parse_duration
from ..flow import Stream
from ..workloads import tpcxbb
from .hedge import Hedge
from .longest_hashtag import longest_hashtag
from .scalejoin import Forward, ScaleJoin
from .traffic import congestion
from .wordcount import paircount, wordcount


def _distance(v: str) -> int | None:
    if v.lower() in ("inf", "unbounded", "none", "infinity"):
        return None
    d = int(v)
    if d < 1:
        raise ValueError("distance must be >= 1, or 'inf' for unbounded")
    return d


def _ints(v: str) -> tuple[int, ...]:
    """``1,2,3`` (or ``4``) as a tuple of ints: TPCx-BB's category and store lists."""
    return tuple(int(x) for x in v.split(","))


def _duration(v: str) -> int:
    """A window length or slide: ms, or a duration such as ``2min``, ``10s``, ``1.5s``,
    ``"1 minute"`` (:func:`~stretchflow.eventtime.parse_duration`), as the API takes it."""
    return parse_duration(v)


#: parameters that are durations in every query that has them: parsed like the API's
#: ``size=``/``slide=`` (``--param size=2min``), shown as ms
DURATIONS = frozenset({"size", "slide", "window", "session"})

TYPE_NAMES: dict[Callable[[str], Any], str] = {
    int: "int", float: "float", _ints: "ints, comma-separated", _distance: "int or inf",
    _duration: "duration"}


def _show(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _type_of(default: Any) -> Callable[[str], Any]:
    """The parser of a parameter whose type the registry does not state: its default's."""
    if isinstance(default, bool):
        raise TypeError("boolean query parameters need an explicit parser")
    if isinstance(default, float):
        return float
    if isinstance(default, tuple):
        return _ints
    return int


@dataclass(frozen=True)
class Query:
    """A built-in query.

    ``params`` maps each parameter to its default and ``param_types`` to the function that
    parses it from a ``--param NAME=VALUE`` string (filled from the default's type when not
    given: a duration for ``size``, ``slide``, ``window`` and ``session`` (ms or ``2min``),
    else int, float, or a comma-separated tuple of ints). ``build(streams, **params)`` adds
    the query over ``streams`` (input i is the i-th ``--input``) and returns its output.
    ``data`` names the ``stretchflow generate`` kind that writes its input ("" if none).
    """

    name: str
    summary: str
    min_inputs: int
    max_inputs: int
    params: dict[str, Any]
    build: Callable[..., Stream]
    input_fields: tuple[str, ...] = ()
    output_fields: tuple[str, ...] = ()
    param_types: dict[str, Callable[[str], Any]] = field(default_factory=dict)
    data: str = ""

    def __post_init__(self) -> None:
        types = {k: self.param_types.get(k) or (_duration if k in DURATIONS else _type_of(d))
                 for k, d in self.params.items()}
        object.__setattr__(self, "param_types", types)  # frozen: completed once, here

    def parse_params(self, given: dict[str, str]) -> dict[str, Any]:
        """Parameters from ``NAME=VALUE`` strings, with defaults; unknown names are errors."""
        out = dict(self.params)
        for k, v in given.items():
            if k not in self.params:
                raise ValueError(
                    f"query {self.name!r} has no parameter {k!r}; parameters: "
                    + (", ".join(f"{p}={d}" for p, d in self.params.items()) or "none")
                )
            try:
                out[k] = self.param_types[k](v)
            except ValueError as e:
                raise ValueError(f"query {self.name!r}: bad value {v!r} for {k}: {e}") from None
        return out

    def describe_params(self) -> str:
        """``name=default (type)`` of every parameter, or ``-`` (``stretchflow queries``)."""
        return " ".join(f"{k}={_show(d)} ({TYPE_NAMES.get(self.param_types[k], 'str')})"
                        for k, d in self.params.items()) or "-"

    def check_inputs(self, n: int) -> None:
        if not self.min_inputs <= n <= self.max_inputs:
            want = (str(self.min_inputs) if self.min_inputs == self.max_inputs
                    else f"{self.min_inputs} or more")
            raise ValueError(f"query {self.name!r} reads {want} input"
                             f"{'s' if want != '1' else ''}, got {n}")


def _one(streams: list[Stream], op: Any) -> Stream:
    return streams[0].oplus(op)


TWEET = ("ts", "user", "text")
STORE_SALES = ("ts", "ticket", "item", "category", "store", "customer", "quantity", "price")
CLICKS = ("ts", "user", "item", "category", "page", "sales")


def _tpcxbb(n: int, summary: str, out: tuple[str, ...]) -> Query:
    """A TPCx-BB query: one generated input; its parameters are ``q<n>``'s keyword arguments
    (their defaults and its data set are written once, in :mod:`stretchflow.workloads.tpcxbb`)."""
    name = f"tpcxbb-q{n}"
    fn = tpcxbb.query_fn(name)
    pipeline, data = tpcxbb.PIPELINES[name], tpcxbb.DATA[name]
    return Query(f"tpcxbb-q{n}", f"TPCx-BB Q{n}: {summary} ({pipeline})", 1, 1,
                 dict(fn.__kwdefaults__), lambda s, **p: fn(s[0], **p),
                 STORE_SALES if data == "store-sales" else CLICKS, out, data=data)


QUERIES: dict[str, Query] = {
    q.name: q
    for q in (
        Query(
            "wordcount", "occurrences of each token of text per window (Op. 14)", 1, 1,
            {"size": 120_000, "slide": 60_000},
            lambda s, size, slide: _one(s, wordcount(size, slide)),
            TWEET, ("ts", "word", "count"), data="tweets",
        ),
        Query(
            "paircount", "occurrences of token pairs within a distance per window", 1, 1,
            {"size": 120_000, "slide": 60_000, "distance": 3},
            lambda s, size, slide, distance: _one(s, paircount(size, slide, distance)),
            TWEET, ("ts", "first", "second", "count"), {"distance": _distance}, data="tweets",
        ),
        Query(
            "longest-hashtag", "per hashtag, the length of the longest text (Op. 9)", 1, 1,
            {"size": 3_600_000, "slide": 1_800_000},
            lambda s, size, slide: _one(s, longest_hashtag(size, slide)),
            TWEET, ("ts", "hashtag", "chars"), data="tweets",
        ),
        Query(
            "scalejoin", "band join of two streams, ScaleJoin (Op. 10)", 2, 2,
            {"window": 300_000, "band": 10, "keys": 1000},
            lambda s, window, band, keys: s[0].oplus(ScaleJoin(window, band, keys), s[1]),
            ("ts", "id", "x", "y | a", "b", "c", "d"), ("ts", "left", "right"),
            data="bandjoin",
        ),
        Query(
            "hedge", "hedge self-join of trades over a window (STRETCH Q6)", 1, 1,
            {"window": 30_000, "lower": -1.05, "upper": -0.95, "keys": 1000},
            lambda s, window, lower, upper, keys: _one(s, Hedge(window, lower, upper, keys)),
            ("ts", "id", "price", "avg_price"), ("ts", "l_id", "l_price", "r_id", "r_price"),
            data="trades",
        ),
        Query(
            "forward", "every input tuple, merged in timestamp order (Op. 15)", 2, 64,
            {},
            lambda s: s[0].oplus(Forward(len(s)), *s[1:]),
            ("ts", "..."), ("ts", "..."),
        ),
        Query(
            "traffic-congestion", "per-area sliding-window join of bus and SCATS reports "
            "(determinism-latency §6)", 2, 2,
            {"window": 5000, "slide": 100, "flow_threshold": 50.0},
            lambda s, **p: congestion(s[0], s[1], **p),
            ("ts", "bus", "area", "congested | ts", "sensor", "area", "flow"),
            ("ts", "area", "bus", "bus_ts", "sensor", "sensor_ts", "flow"),
        ),
        _tpcxbb(1, "the top item pairs sold together", ("ts", "top", "of")),
        _tpcxbb(2, "the top items viewed in a session with an item", ("ts", "top", "of")),
        _tpcxbb(3, "items among the last views before a purchase",
                ("ts", "item", "before_purchase")),
        _tpcxbb(4, "abandoned shopping carts per window", ("ts", "sessions", "avg_pages")),
        _tpcxbb(15, "categories with flat or declining sales in a store",
                ("ts", "category", "slope")),
    )
}


def get_query(name: str) -> Query:
    """The registered query ``name``, or a ValueError listing them all."""
    q = QUERIES.get(name)
    if q is None:
        raise ValueError(f"unknown query {name!r}; queries: {', '.join(QUERIES)}")
    return q


def build_query(name: str, streams: list[Stream], **params: Any) -> Stream:
    """Adds built-in query ``name`` over ``streams`` to their flow; returns its output."""
    q = get_query(name)
    q.check_inputs(len(streams))
    unknown = sorted(set(params) - set(q.params))
    if unknown:
        raise ValueError(f"query {name!r} has no parameter {unknown[0]!r}; parameters: "
                         + (", ".join(q.params) or "none"))
    return q.build(streams, **{**q.params, **params})


__all__ = ["QUERIES", "Forward", "Hedge", "Query", "ScaleJoin", "build_query", "get_query",
           "longest_hashtag", "paircount", "wordcount"]
