"""The flows of the conformance suite: every built-in query and user flows that exercise what
the engines must all support — chained O+, an O+ with three inputs, an f_U that emits, a join
with a predicate, stateless operators before and after an O+, a stream read by several
consumers, keys of several hashable types.

A :class:`FlowCase` pairs a hypothesis strategy of inputs (one list of records per source,
timestamps non-decreasing with ties) with ``build(inputs) -> (flow, collectors)``, which makes
a fresh flow each call, as :func:`~conformance.contract.assert_same_as_reference` needs.

Order-sensitive user functions (a running count in f_U) read sources directly: within one
source, tuples of the same timestamp keep their order on every engine (docs/semantics.md:
ties in arrival order, across inputs to the lower input index). Operators fed by another O+
use order-insensitive functions (sums, maxima), since the order of an O+'s outputs that share
a timestamp is not part of the contract.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.queries import build_query

from .contract import QUERY_PARAMS, query_inputs

Inputs = list[list[dict]]
Built = tuple[sf.Flow, list[sf.io.Collector]]

WORDS = ("a", "b", "c", "dd", "e")


@dataclass(frozen=True)
class FlowCase:
    name: str
    inputs: st.SearchStrategy[Inputs]
    build: Callable[[Inputs], Built]
    #: the reference run's options: expression flows are checked against the tuple-at-a-time
    #: execution of the same flow (``columnar="off"``), not against the columnar one
    reference_options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return self.name


def _sources(flow: sf.Flow, inputs: Inputs) -> list[sf.Stream]:
    return [flow.source(sf.io.iterable(recs, name=f"in{i}")) for i, recs in enumerate(inputs)]


@st.composite
def records(draw: Any, src: int = 0, max_size: int = 30) -> list[dict]:
    """Timestamp-sorted records with ties (a gap of 0 is likely), small keys and words; ``id``
    and ``src`` make every record distinguishable in outputs."""
    n = draw(st.integers(0, max_size))
    ts = draw(st.integers(0, 6))
    out = []
    for i in range(n):
        ts += draw(st.sampled_from((0, 0, 1, 2, 3, 5, 11)))
        out.append({"ts": ts, "id": i, "src": src, "k": draw(st.integers(0, 5)),
                    "v": draw(st.integers(-3, 12)),
                    "text": " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))})
    return out


def _inputs(n: int) -> st.SearchStrategy[Inputs]:
    return st.tuples(*(records(src=i) for i in range(n))).map(list)


# -- built-in queries -------------------------------------------------------------------------
def _query_case(query: str) -> FlowCase:
    rows = st.integers(0, 40 if query == "scalejoin" else 120)
    inputs = st.builds(query_inputs, st.just(query), st.integers(0, 10_000), rows)

    def build(ins: Inputs) -> Built:
        flow = sf.Flow(query)
        return flow, [build_query(query, _sources(flow, ins), **QUERY_PARAMS[query]).collect()]

    return FlowCase(f"query-{query}", inputs, build)


# -- user flows ---------------------------------------------------------------------------------
def _chain(ins: Inputs) -> Built:
    """wordcount, then per window the total and the largest count by count parity: two O+
    in a row, the second over the first's outputs."""
    flow = sf.Flow("chain")
    (s,) = _sources(flow, ins)
    counts = s.aggregate(size=10, slide=5, keys=lambda t: Counter(t["text"].split()),
                         init=int, update=lambda n, c: n + c,
                         output=lambda w, n: {"word": w, "count": n}, name="count")
    summary = counts.aggregate(
        size=10, slide=10, keys=lambda t: {t["count"] % 2}, init=lambda: (0, 0),
        update=lambda acc, t: (acc[0] + t["count"], max(acc[1], t["count"])),
        output=lambda parity, acc: {"parity": parity, "total": acc[0], "max": acc[1]},
        name="summary")
    return flow, [counts.collect(), summary.collect()]


def _three_inputs(ins: Inputs) -> Built:
    """An O+ with I = 3 and Table I's f_U (store every tuple); f_O reports per key how many
    tuples each input brought to the window and which."""
    flow = sf.Flow("three")
    a, b, c = _sources(flow, ins)
    op = sf.OPlus(size=8, slide=4, inputs=3, keys=lambda t, i: {t["k"] % 3},
                  output=lambda ws: [{"key": ws.key,
                                      "n": tuple(len(s) for s in ws.states),
                                      "ids": sorted((v["src"], v["id"])
                                                    for s in ws.states for _, v in s)}],
                  name="three")
    return flow, [a.oplus(op, b, c).collect()]


def _emitting_update(ws: sf.WindowSet, ts: int, t: dict, i: int) -> list | None:
    ws.states[0].append((ts, t))
    if t["v"] % 2:
        return None
    return [{"word": ws.key, "id": t["id"], "seen": len(ws.states[0])}]


def _f_u_emits(ins: Inputs) -> Built:
    """A single window set (WT single, Table I's f_S purge) whose f_U emits a running count
    and whose f_O emits the count at each slide."""
    flow = sf.Flow("emits")
    (s,) = _sources(flow, ins)
    op = sf.OPlus(size=6, slide=3, window_type="single",
                  keys=lambda t, i: set(t["text"].split()), update=_emitting_update,
                  output=lambda ws: [{"word": ws.key, "left": ws.l, "n": len(ws.states[0])}],
                  name="emits")
    return flow, [s.oplus(op).collect()]


def _join(ins: Inputs) -> Built:
    """A J+ with a predicate, sliding windows, the left side filtered first."""
    flow = sf.Flow("join")
    left, right = _sources(flow, ins)
    out = left.filter(lambda t: t["v"] != 0).join(
        right, size=6, slide=2, keys=lambda t: {t["k"] % 4},
        predicate=lambda l, r: l["v"] < r["v"],
        output=lambda l, r: {"l": l["id"], "r": r["id"], "k": l["k"] % 4}, name="join")
    return flow, [out.collect()]


def _stateless_around(ins: Inputs) -> Built:
    """map, filter and flat_map before an O+ and after it."""
    flow = sf.Flow("stateless")
    (s,) = _sources(flow, ins)
    words = (s.map(lambda t: {"words": t["text"].split(), "v": t["v"]}, name="split")
             .filter(lambda t: t["v"] >= 0, name="nonneg")
             .flat_map(lambda t: [{"w": w, "v": t["v"]} for w in t["words"]], name="explode"))
    sums = words.aggregate(size=9, slide=3, keys=lambda t: {t["w"]}, init=int,
                           update=lambda n, t: n + t["v"],
                           output=lambda w, n: {"w": w, "sum": n}, name="sum")
    after = (sums.map(lambda t: {**t, "big": t["sum"] > 10}, name="mark")
             .filter(lambda t: t["sum"] != 0, name="nonzero")
             .flat_map(lambda t: [t] * (1 + t["sum"] % 2), name="twice-odd"))
    return flow, [after.collect()]


def _two_consumers(ins: Inputs) -> Built:
    """One source read by an A+ and a map; the A+'s output read by two sinks, one of them
    through a map."""
    flow = sf.Flow("fanout")
    (s,) = _sources(flow, ins)
    agg = s.aggregate(size=5, keys=lambda t: {t["k"]}, init=int, update=lambda n, t: n + 1,
                      output=lambda k, n: {"k": k, "n": n}, name="per-k")
    ids = s.map(lambda t: {"id": t["id"]}, name="ids")
    return flow, [agg.collect(), agg.map(lambda t: t["n"], name="n").collect(), ids.collect()]


def _self_join(ins: Inputs) -> Built:
    """One stream as both inputs of a J+ (each pair of a window found once, when its later
    tuple arrives, whichever order ties take)."""
    flow = sf.Flow("self-join")
    (s,) = _sources(flow, ins)
    out = s.join(s, size=4, keys=lambda t: {t["k"] % 2},
                 predicate=lambda a, b: a["id"] < b["id"],
                 output=lambda a, b: (a["id"], b["id"]), name="self")
    return flow, [out.collect()]


def _key_types(t: dict) -> set:
    first, k = (t["text"].split() or ["-"])[0], t["k"]
    return {first, k, (first, k), frozenset({first, k % 2}),
            ("nested", (k % 2, frozenset({k})))}


def _hashable_keys(ins: Inputs) -> Built:
    """Keys of several hashable types in one f_MK: str, int, tuple, frozenset, nested."""
    flow = sf.Flow("keys")
    (s,) = _sources(flow, ins)
    out = s.aggregate(size=6, slide=2, keys=_key_types, init=int,
                      update=lambda n, t: n + t["v"],
                      output=lambda key, n: {"key": key, "sum": n}, name="keys")
    return flow, [out.collect()]


def _one_key_results(ins: Inputs) -> Built:
    """f_MK returning one key, not a set (issue #18): a str (the whole text, not its
    letters), an int, a tuple; and a join whose sides key by different fields."""
    flow = sf.Flow("one-key")
    (s,) = _sources(flow, ins)
    by_text = s.aggregate(size=6, slide=2, keys=lambda t: t["text"], init=int,
                          update=lambda n, t: n + 1,
                          output=lambda key, n: {"text": key, "n": n}, name="by-text")
    by_int = s.aggregate(size=5, keys=lambda t: t["k"] % 3, init=int,
                         update=lambda n, t: n + t["v"],
                         output=lambda key, n: {"k": key, "sum": n}, name="by-int")
    by_pair = s.aggregate(size=4, keys=lambda t: (t["k"] % 2, t["v"] > 3), init=int,
                          update=lambda n, t: n + 1,
                          output=lambda key, n: {"pair": key, "n": n}, name="by-pair")
    named = s.map(lambda t: {"name": str(t["k"] % 3), "id": t["id"]}, name="named")
    joined = s.join(named, size=4, left_keys=lambda t: str(t["k"] % 3),
                    right_keys=lambda t: t["name"],
                    output=lambda a, b: (a["id"], b["id"]), name="lr-join")
    return flow, [by_text.collect(), by_int.collect(), by_pair.collect(), joined.collect()]


# -- declarative aggregates (issue #31): keys and accumulators by column -----------------------
def _expression_aggregates(flow: sf.Flow, s: sf.Stream) -> list[sf.io.Collector]:
    """Every accumulator and keys form of a declarative aggregate, and the hot-items chain
    (counts per key, then per window the key(s) with the most: arg_max over the first O+'s
    outputs, order-insensitive as the contract asks of O+ fed by another)."""
    counts = s.aggregate(size=10, slide=5, keys="k", **sf.count(), name="x-count")
    hot = counts.aggregate(size=5, keys=None, **sf.arg_max("count"), name="x-hot")
    outs = [counts, hot,
            s.aggregate(size=8, keys=("k", (sf.col("v") % 3).alias("m")),
                        **sf.sum_of(sf.col("v") * 0.5), name="x-sum"),
            s.aggregate(size=9, slide=3, keys="src", **sf.mean_of("v"), name="x-mean"),
            s.aggregate(size=6, slide=2, keys=(sf.col("k") > 2).alias("big"),
                        **sf.min_of("v"), name="x-min"),
            s.aggregate(size=7, keys=None, **sf.max_of(sf.col("v") - sf.col("k")), name="x-max"),
            s.aggregate(size=10, slide=5, keys="k", **sf.top_k("v", 2), name="x-top"),
            s.aggregate(size=5, keys=None, **sf.arg_min("v"), name="x-argmin")]
    return [o.collect() for o in outs]


def _expressions(ins: Inputs) -> Built:
    flow = sf.Flow("expressions")
    (s,) = _sources(flow, ins)
    return flow, _expression_aggregates(flow, s)


_FILES: list[Any] = []


def _file_of(ins: Inputs) -> str:
    """The records of the first input as a JSON Lines file (a directory removed at exit)."""
    import atexit
    import os
    import tempfile

    import orjson

    if not _FILES:
        _FILES.append(tempfile.TemporaryDirectory(prefix="stretchflow-conformance-"))
        atexit.register(_FILES[0].cleanup)
    fd, path = tempfile.mkstemp(suffix=".jsonl", dir=_FILES[0].name)
    with os.fdopen(fd, "wb") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in ins[0]))
    return path


def _expressions_from_a_file(ins: Inputs) -> Built:
    """The same, read from a JSON Lines file: Arrow batches, so the columnar path runs where
    an engine takes batches (reference, vsn, ordered)."""
    flow = sf.Flow("expressions-file")
    s = flow.source(sf.io.jsonl(_file_of(ins), name="in0"))
    return flow, _expression_aggregates(flow, s)


def _expression_chain(ins: Inputs) -> Built:
    """Stateless column expressions around declarative O+, a lambda between them: filter,
    with_columns (arithmetic, when/then, a string predicate, a cast), select, a lambda map,
    aggregates keyed by a column and by an expression, a filter and a select on an
    aggregate's output; read from a file, so batches flow where an engine takes them."""
    flow = sf.Flow("expression-chain")
    s = flow.source(sf.io.jsonl(_file_of(ins), name="in0"))
    w = s.filter(sf.col("v") >= -1).with_columns(
        w=sf.col("v") * 2 + sf.col("k"),
        band=sf.when(sf.col("k") > 2).then(sf.lit("hi")).otherwise(sf.lit("lo")),
        short=sf.col("text").str.len() < 6, kf=sf.col("k").cast(float))
    sel = w.select("k", "band", "w", "short", half=sf.col("kf") / 2)
    lam = sel.map(lambda t: {**t, "w": t["w"] - 1})
    by_band = lam.aggregate(size=6, slide=3, keys="band", **sf.sum_of("w"), name="x-band")
    by_k = sel.filter(sf.col("short")).aggregate(
        size=4, keys=(sf.col("k") % 2).alias("odd"), **sf.max_of("half"), name="x-odd")
    top = by_band.filter(sf.col("sum") > 0).select("band", twice=sf.col("sum") * 2)
    return flow, [sel.collect(), by_band.collect(), by_k.collect(), top.collect()]


def _expression_one_oplus(ins: Inputs) -> Built:
    """One declarative O+ read from a file: the shape sn's process channels run columnar."""
    flow = sf.Flow("expression-one")
    out = flow.source(sf.io.jsonl(_file_of(ins), name="in0")).aggregate(
        size=6, slide=3, keys=("k", "src"), **sf.count(), name="x-one")
    return flow, [out.collect()]


_OFF = {"columnar": "off"}

FLOWS: list[FlowCase] = [
    *(_query_case(q) for q in QUERY_PARAMS),
    FlowCase("chain-two-oplus", _inputs(1), _chain),
    FlowCase("oplus-three-inputs", _inputs(3), _three_inputs),
    FlowCase("oplus-f_U-emits", _inputs(1), _f_u_emits),
    FlowCase("join-predicate", _inputs(2), _join),
    FlowCase("stateless-around-oplus", _inputs(1), _stateless_around),
    FlowCase("two-consumers", _inputs(1), _two_consumers),
    FlowCase("self-join", _inputs(1), _self_join),
    FlowCase("hashable-keys", _inputs(1), _hashable_keys),
    FlowCase("one-key-results", _inputs(1), _one_key_results),
    FlowCase("expression-aggregates", _inputs(1), _expressions, _OFF),
    FlowCase("expression-aggregates-file", _inputs(1), _expressions_from_a_file, _OFF),
    FlowCase("expression-one-oplus-file", _inputs(1), _expression_one_oplus, _OFF),
    FlowCase("expression-chain-file", _inputs(1), _expression_chain, _OFF),
]


def n_tuples(inputs: Inputs) -> int:
    return sum(len(r) for r in inputs)
