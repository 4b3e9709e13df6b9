"""The built-in queries of the papers, each an O+ written with the public API.

The registry is the contract of ``stretchflow run QUERY`` (DESIGN.md, Built-in queries):
input and output fields, parameters and their defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..flow import Stream
from .hedge import Hedge
from .longest_hashtag import longest_hashtag
from .scalejoin import Forward, ScaleJoin
from .traffic import congestion
from .wordcount import paircount, wordcount


@dataclass(frozen=True)
class Query:
    """A built-in query: how many inputs it reads, its parameters and how to build it."""

    name: str
    summary: str
    min_inputs: int
    max_inputs: int
    params: dict[str, Any]
    build: Callable[..., Stream]
    input_fields: tuple[str, ...] = ()
    output_fields: tuple[str, ...] = ()
    param_types: dict[str, Callable[[str], Any]] = field(default_factory=dict)

    def parse_params(self, given: dict[str, str]) -> dict[str, Any]:
        """Parameters from ``NAME=VALUE`` strings, with defaults; unknown names are errors."""
        out = dict(self.params)
        for k, v in given.items():
            if k not in self.params:
                raise ValueError(
                    f"query {self.name!r} has no parameter {k!r}; parameters: "
                    + (", ".join(f"{p}={d}" for p, d in self.params.items()) or "none")
                )
            conv = self.param_types.get(k, int)
            try:
                out[k] = conv(v)
            except ValueError as e:
                raise ValueError(f"query {self.name!r}: bad value {v!r} for {k}: {e}") from None
        return out


def _distance(v: str) -> int | None:
    if v.lower() in ("inf", "unbounded", "none", "infinity"):
        return None
    d = int(v)
    if d < 1:
        raise ValueError("distance must be >= 1, or 'inf' for unbounded")
    return d


def _one(streams: list[Stream], op: Any) -> Stream:
    return streams[0].oplus(op)


QUERIES: dict[str, Query] = {
    q.name: q
    for q in (
        Query(
            "wordcount", "occurrences of each token of text per window", 1, 1,
            {"size": 120_000, "slide": 60_000},
            lambda s, size, slide: _one(s, wordcount(size, slide)),
            ("ts", "user", "text"), ("ts", "word", "count"),
        ),
        Query(
            "paircount", "occurrences of token pairs within a distance per window", 1, 1,
            {"size": 120_000, "slide": 60_000, "distance": 3},
            lambda s, size, slide, distance: _one(s, paircount(size, slide, distance)),
            ("ts", "user", "text"), ("ts", "first", "second", "count"),
            {"distance": _distance},
        ),
        Query(
            "longest-hashtag", "per hashtag, the length of the longest text (Op. 9)", 1, 1,
            {"size": 3_600_000, "slide": 1_800_000},
            lambda s, size, slide: _one(s, longest_hashtag(size, slide)),
            ("ts", "user", "text"), ("ts", "hashtag", "chars"),
        ),
        Query(
            "scalejoin", "band join of two streams, ScaleJoin (Op. 10)", 2, 2,
            {"window": 300_000, "band": 10, "keys": 1000},
            lambda s, window, band, keys: s[0].oplus(ScaleJoin(window, band, keys), s[1]),
            ("ts", "id", "x", "y | a", "b", "c", "d"), ("ts", "left", "right"),
        ),
        Query(
            "hedge", "hedge self-join of trades over a window (STRETCH Q6)", 1, 1,
            {"window": 30_000, "lower": -1.05, "upper": -0.95, "keys": 1000},
            lambda s, window, lower, upper, keys: _one(s, Hedge(window, lower, upper, keys)),
            ("ts", "id", "price", "avg_price"), ("ts", "l_id", "l_price", "r_id", "r_price"),
            {"lower": float, "upper": float},
        ),
        Query(
            "forward", "every input tuple, merged in timestamp order (Op. 15)", 2, 64,
            {},
            lambda s: s[0].oplus(Forward(len(s)), *s[1:]),
            ("ts", "..."), ("ts", "..."),
        ),
        Query(
            "traffic-congestion", "per-area sliding-window join of bus and SCATS reports", 2, 2,
            {"window": 5000, "slide": 100, "flow_threshold": 50.0},
            lambda s, **p: congestion(s[0], s[1], **p),
            ("ts", "bus", "area", "congested | ts", "sensor", "area", "flow"),
            ("ts", "area", "bus", "bus_ts", "sensor", "sensor_ts", "flow"),
            {"flow_threshold": float},
        ),
    )
}


def build_query(name: str, streams: list[Stream], **params: Any) -> Stream:
    """Adds built-in query ``name`` over ``streams`` to their flow; returns its output."""
    q = QUERIES.get(name)
    if q is None:
        raise ValueError(f"unknown query {name!r}; queries: {', '.join(QUERIES)}")
    if not q.min_inputs <= len(streams) <= q.max_inputs:
        want = str(q.min_inputs) if q.min_inputs == q.max_inputs else f"{q.min_inputs} or more"
        raise ValueError(f"query {name!r} reads {want} inputs, got {len(streams)}")
    return q.build(streams, **{**q.params, **params})


__all__ = ["QUERIES", "Forward", "Hedge", "Query", "ScaleJoin", "build_query", "longest_hashtag",
           "paircount", "wordcount"]
