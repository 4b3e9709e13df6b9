"""The built-in queries of the papers, each written with the public API, in ONE registry.

:data:`QUERIES` is the contract of ``stretchflow run QUERY`` (DESIGN.md, Built-in queries;
docs/queries.md): every built-in query -- the STRETCH operators, the hedge and traffic joins
and the TPCx-BB streaming queries of the ordered-multicore paper (§7.3, logic in
:mod:`stretchflow.workloads.tpcxbb`) -- is one :class:`Query`: its inputs, its output fields,
its parameters with their defaults and types, and how to build it over input streams.
``stretchflow queries``, ``stretchflow run --help``, the benchmarks and the tests read it.

The registry is lazy: it knows every query's name without importing anything, and
``QUERIES[name]`` imports only that query's module. ``stretchflow run wordcount`` used to
import every query module to build the registry (TPCx-BB's alone 0.07 s, with numpy pulled
in early), a tenth of a 200 000-tweet run's whole process (issue #16).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..eventtime import parse_duration

# imported here, not lazily: a submodule's first import binds its name in this package to the
# module, which would shadow these functions of the same name (both modules are light)
from .longest_hashtag import longest_hashtag
from .wordcount import paircount, wordcount

if TYPE_CHECKING:
    from ..flow import Stream


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


def _wordcount() -> Query:
    return Query(
        "wordcount", "occurrences of each token of text per window (Op. 14)", 1, 1,
        {"size": 120_000, "slide": 60_000},
        lambda s, size, slide: _one(s, wordcount(size, slide)),
        TWEET, ("ts", "word", "count"), data="tweets",
    )


def _paircount() -> Query:
    return Query(
        "paircount", "occurrences of token pairs within a distance per window", 1, 1,
        {"size": 120_000, "slide": 60_000, "distance": 3},
        lambda s, size, slide, distance: _one(s, paircount(size, slide, distance)),
        TWEET, ("ts", "first", "second", "count"), {"distance": _distance}, data="tweets",
    )


def _longest_hashtag() -> Query:
    return Query(
        "longest-hashtag", "per hashtag, the length of the longest text (Op. 9)", 1, 1,
        {"size": 3_600_000, "slide": 1_800_000},
        lambda s, size, slide: _one(s, longest_hashtag(size, slide)),
        TWEET, ("ts", "hashtag", "chars"), data="tweets",
    )


def _scalejoin() -> Query:
    from .scalejoin import ScaleJoin

    return Query(
        "scalejoin", "band join of two streams, ScaleJoin (Op. 10)", 2, 2,
        {"window": 300_000, "band": 10, "keys": 1000},
        lambda s, window, band, keys: s[0].oplus(ScaleJoin(window, band, keys), s[1]),
        ("ts", "id", "x", "y | a", "b", "c", "d"), ("ts", "left", "right"),
        data="bandjoin",
    )


def _hedge() -> Query:
    from .hedge import Hedge

    return Query(
        "hedge", "hedge self-join of trades over a window (STRETCH Q6)", 1, 1,
        {"window": 30_000, "lower": -1.05, "upper": -0.95, "keys": 1000},
        lambda s, window, lower, upper, keys: _one(s, Hedge(window, lower, upper, keys)),
        ("ts", "id", "price", "avg_price"), ("ts", "l_id", "l_price", "r_id", "r_price"),
        data="trades",
    )


def _forward() -> Query:
    from .scalejoin import Forward

    return Query(
        "forward", "every input tuple, merged in timestamp order (Op. 15)", 2, 64,
        {},
        lambda s: s[0].oplus(Forward(len(s)), *s[1:]),
        ("ts", "..."), ("ts", "..."),
    )


def _traffic() -> Query:
    from .traffic import congestion

    return Query(
        "traffic-congestion", "per-area sliding-window join of bus and SCATS reports "
        "(determinism-latency §6)", 2, 2,
        {"window": 5000, "slide": 100, "flow_threshold": 50.0},
        lambda s, **p: congestion(s[0], s[1], **p),
        ("ts", "bus", "area", "congested | ts", "sensor", "area", "flow"),
        ("ts", "area", "bus", "bus_ts", "sensor", "sensor_ts", "flow"),
    )


def _tpcxbb(n: int, summary: str, out: tuple[str, ...]) -> Callable[[], Query]:
    """A TPCx-BB query: one generated input; its parameters are ``q<n>``'s keyword arguments
    (their defaults and its data set are written once, in :mod:`stretchflow.workloads.tpcxbb`,
    imported when the query is first looked up)."""

    def make() -> Query:
        from ..workloads import tpcxbb

        name = f"tpcxbb-q{n}"
        fn = tpcxbb.query_fn(name)
        pipeline, data = tpcxbb.PIPELINES[name], tpcxbb.DATA[name]
        return Query(name, f"TPCx-BB Q{n}: {summary} ({pipeline})", 1, 1,
                     dict(fn.__kwdefaults__), lambda s, **p: fn(s[0], **p),
                     STORE_SALES if data == "store-sales" else CLICKS, out, data=data)

    return make


#: NEXMark's streams' fields (:mod:`stretchflow.workloads.nexmark`) and each query's output
#: fields besides ``ts`` (:mod:`.nexmark`)
_NX_FIELDS = {
    "persons": ("ts", "id", "name", "email_address", "credit_card", "city", "state",
                "date_time", "extra"),
    "auctions": ("ts", "id", "item_name", "description", "initial_bid", "reserve",
                 "date_time", "expires", "seller", "category", "extra"),
    "bids": ("ts", "auction", "bidder", "price", "channel", "url", "date_time", "extra"),
}
_NX_OUT = {
    "q0": ("auction", "bidder", "price", "date_time", "extra"),
    "q1": ("auction", "bidder", "price", "date_time", "extra"),
    "q2": ("auction", "price"), "q3": ("name", "city", "state", "id"),
    "q4": ("category", "avg"), "q5": ("auction", "num"), "q6": ("seller", "avg"),
    "q7": ("auction", "bidder", "price", "date_time", "extra"),
    "q8": ("id", "name", "starttime"),
}


def _nexmark(q: str) -> Callable[[], Query]:
    """NEXMark query ``q`` (:mod:`.nexmark`, docs/nexmark.md) as ``nexmark-<q>``: its inputs
    are the streams it reads, in its function's order (``stretchflow generate nexmark``
    writes them), its parameters its function's keyword defaults."""

    def make() -> Query:
        import inspect

        from . import nexmark

        fn, streams = nexmark.QUERIES[q]
        params = {k: p.default for k, p in inspect.signature(fn).parameters.items()
                  if p.default is not inspect.Parameter.empty}
        first = (fn.__doc__ or q).strip().split(":")[0].split(".")[0]
        inputs = [_NX_FIELDS[s] for s in streams]
        fields = tuple(inputs[0]) if len(inputs) == 1 else tuple(
            [*inputs[0][:-1], f"{inputs[0][-1]} | {inputs[1][0]}", *inputs[1][1:]])
        return Query(f"nexmark-{q}", f"NEXMark {q.upper()}: {first.lower()} "
                     f"(reads {', '.join(streams)})", len(streams), len(streams), params,
                     lambda s, **p: fn(*s, **p), fields, ("ts", *_NX_OUT[q]), data="nexmark")

    return make


class _Registry(Mapping[str, Query]):
    """Query name -> :class:`Query`, in the listing's order; each query is made (its module
    imported) on first look-up, so iterating over the names or ``in`` imports nothing."""

    def __init__(self, makers: dict[str, Callable[[], Query]]) -> None:
        self._makers = makers
        self._made: dict[str, Query] = {}

    def __getitem__(self, name: str) -> Query:
        q = self._made.get(name)
        if q is None:
            q = self._makers[name]()  # KeyError for an unknown name, as a dict
            if q.name != name:
                raise AssertionError(f"registry entry {name!r} made query {q.name!r}")
            self._made[name] = q
        return q

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)

    def __contains__(self, name: object) -> bool:
        return name in self._makers

    def __repr__(self) -> str:
        return f"<queries {', '.join(self._makers)}>"


QUERIES: Mapping[str, Query] = _Registry({
    "wordcount": _wordcount,
    "paircount": _paircount,
    "longest-hashtag": _longest_hashtag,
    "scalejoin": _scalejoin,
    "hedge": _hedge,
    "forward": _forward,
    "traffic-congestion": _traffic,
    "tpcxbb-q1": _tpcxbb(1, "the top item pairs sold together", ("ts", "top", "of")),
    "tpcxbb-q2": _tpcxbb(2, "the top items viewed in a session with an item",
                         ("ts", "top", "of")),
    "tpcxbb-q3": _tpcxbb(3, "items among the last views before a purchase",
                         ("ts", "item", "before_purchase")),
    "tpcxbb-q4": _tpcxbb(4, "abandoned shopping carts per window",
                         ("ts", "sessions", "avg_pages")),
    "tpcxbb-q15": _tpcxbb(15, "categories with flat or declining sales in a store",
                          ("ts", "category", "slope")),
    **{f"nexmark-q{i}": _nexmark(f"q{i}") for i in range(9)},
})


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


#: the join operators, importable from here (``from stretchflow.queries import Hedge``), each
#: from its module when first asked for (PEP 562): they pull in numpy and the band kernel
_LAZY = {"Forward": ".scalejoin", "Hedge": ".hedge", "ScaleJoin": ".scalejoin"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value  # once: later look-ups are plain module attributes
    return value


__all__ = ["QUERIES", "Forward", "Hedge", "Query", "ScaleJoin", "build_query", "get_query",
           "longest_hashtag", "paircount", "wordcount"]
