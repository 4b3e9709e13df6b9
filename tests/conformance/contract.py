"""The engine contract, stated once (DESIGN.md, Semantics, "Determinism"): an engine's output
stream is timestamp-non-decreasing and holds, for every timestamp, exactly the reference
executor's multiset of output tuples — for any parallelism, reconfiguration schedule and
thread interleaving.

Shared by every test that compares an engine with the reference:

* :func:`multiset` — the per-timestamp output multiset (payloads made hashable canonically);
* :func:`schedules` — THE hypothesis strategy of reconfiguration schedules ``[(COUNT, P)]``;
* :data:`QUERY_PARAMS` and :func:`query_inputs` — small-window parameters and generated inputs
  for every built-in query, so tests stay fast;
* :func:`assert_same_as_reference` — builds a flow twice, runs the reference and the engine,
  compares; :func:`query_flow` and :func:`run_query` build and run a built-in query over
  in-memory inputs;
* :func:`per_tuple` — one O+ instance fed tuple by tuple, the executor-free reference of the
  kernels that run an O+ in pieces (Spark's columnar and streaming paths).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.io.generators import bandjoin, trades, tweets
from stretchflow.io.sinks import Collector
from stretchflow.io.traffic import bus_reports, scats_reports
from stretchflow.queries import build_query
from stretchflow.runtime.result import RunResult

Items = list[tuple[int, Any]]
#: ``build_flow()`` returns a new flow (fresh sources and sinks) and its collectors, as a list
#: or a ``{name: collector}`` dict
BuildFlow = Callable[[], tuple[sf.Flow, "list[Collector] | dict[str, Collector]"]]


# -- the output multiset ----------------------------------------------------------------------
def canonical(x: Any) -> Any:
    """A hashable value that is equal exactly for equal payloads: dicts compare by their items
    whatever their order, sets by their members. Everything else keeps its type: a list is not
    a tuple, 1.0 and True are not 1 (Python would hash them alike), a numpy scalar is not a
    Python number — an engine that converted one into the other changed the user's payload."""
    t = type(x)
    if t is float or t is bool:
        return (t.__name__, x)
    if isinstance(x, Mapping):
        return ("dict", tuple(sorted(((canonical(k), canonical(v)) for k, v in x.items()),
                                     key=repr)))
    if isinstance(x, set | frozenset):
        return ("set", tuple(sorted((canonical(v) for v in x), key=repr)))
    if isinstance(x, list | tuple):
        return (t.__name__, tuple(canonical(v) for v in x))
    if t.__module__ == "numpy":
        return (t.__name__, x)
    return x


def multiset(items: Collector | Iterable[tuple[int, Any]]) -> dict[int, Counter]:
    """``{ts: Counter of canonical payloads}``, by increasing ts: the output as the
    determinism contract compares it."""
    if isinstance(items, Collector):
        items = items.items
    per_ts: dict[int, Counter] = {}
    for ts, p in items:
        c = per_ts.get(ts)
        if c is None:
            c = per_ts[ts] = Counter()
        c[canonical(p)] += 1
    return dict(sorted(per_ts.items()))


def checked_multiset(items: Collector | Iterable[tuple[int, Any]]) -> dict[int, Counter]:
    """:func:`multiset` of an engine's output, after asserting its timestamps never go back
    (the other half of the determinism contract)."""
    items = list(items.items if isinstance(items, Collector) else items)
    ts_seq = [ts for ts, _ in items]
    assert ts_seq == sorted(ts_seq), "output timestamps go back"
    return multiset(items)


def diff(got: dict[int, Counter], want: dict[int, Counter], limit: int = 3) -> str:
    """The first timestamps where two multisets differ, with what is missing and extra."""
    lines = []
    for ts in sorted(set(got) | set(want)):
        g, w = got.get(ts, Counter()), want.get(ts, Counter())
        if g != w:
            missing, extra = w - g, g - w
            lines.append(f"ts={ts}: missing {dict(list(missing.items())[:3])} "
                         f"({sum(missing.values())}), extra {dict(list(extra.items())[:3])} "
                         f"({sum(extra.values())})")
            if len(lines) >= limit:
                break
    n_got = sum(sum(c.values()) for c in got.values())
    n_want = sum(sum(c.values()) for c in want.values())
    return f"{n_got} outputs, reference {n_want}; " + "; ".join(lines)


def _collectors(cols: Any) -> dict[str, Collector]:
    if isinstance(cols, Collector):
        return {"0": cols}
    if isinstance(cols, Mapping):
        return dict(cols)
    return {str(i): c for i, c in enumerate(cols)}


def assert_same_as_reference(build_flow: BuildFlow, engine: str, *,
                             check_counts: bool = False,
                             reference_options: Mapping[str, Any] | None = None,
                             **options: Any) -> RunResult:
    """Runs a fresh ``build_flow()`` on the reference (with ``reference_options``, e.g.
    ``columnar="off"`` for its tuple-at-a-time execution) and another on ``engine`` with
    ``options``; asserts that every sink of the engine's run is timestamp-non-decreasing and
    holds the reference's per-timestamp multiset (and, with ``check_counts``, that the run
    counted the reference's tuples in per source and out per sink). Returns the engine's
    RunResult."""
    ref_flow, ref_cols = build_flow()
    ref_result = ref_flow.run("reference", **(reference_options or {}))
    flow, cols = build_flow()
    result = flow.run(engine, **options)
    if check_counts:
        assert result.tuples_in == ref_result.tuples_in, f"{engine} {options}: tuples in"
        assert result.tuples_out == ref_result.tuples_out, f"{engine} {options}: tuples out"
    want, got = _collectors(ref_cols), _collectors(cols)
    assert set(got) == set(want), "build_flow gave different sinks on two calls"
    for name, col in got.items():
        tss = [ts for ts, _ in col.items]
        back = next((i for i in range(1, len(tss)) if tss[i] < tss[i - 1]), None)
        assert back is None, (f"{engine} {options}: sink {name} output goes back in time at "
                              f"position {back}: ts {tss[back - 1]} then {tss[back]}")
        g, w = multiset(col), multiset(want[name])
        assert g == w, f"{engine} {options}: sink {name}: {diff(g, w)}"
    return result


def query_flow(query: str, inputs: list[list[dict]],
               params: Mapping[str, Any] | None = None) -> BuildFlow:
    """A :data:`BuildFlow` of built-in ``query`` (with ``params``, by default
    :data:`QUERY_PARAMS`) over in-memory ``inputs``, one source ``in<i>`` per list."""
    kwargs = dict(QUERY_PARAMS[query] if params is None else params)

    def build() -> tuple[sf.Flow, list[Collector]]:
        flow = sf.Flow(query)
        streams = [flow.source(sf.io.iterable(recs, name=f"in{i}"))
                   for i, recs in enumerate(inputs)]
        return flow, [build_query(query, streams, **kwargs).collect()]

    return build


def run_query(query: str, inputs: list[list[dict]], params: Mapping[str, Any] | None = None,
              engine: str = "reference", **options: Any) -> tuple[Items, RunResult]:
    """Built-in ``query`` over in-memory ``inputs`` on ``engine``: (outputs, run result)."""
    flow, (col,) = query_flow(query, inputs, params)()
    result = flow.run(engine, **options)
    return col.items, result


def per_tuple(op: Any, items: Iterable[tuple[int, Any]]) -> Items:
    """One instance of O+ ``op`` (STRETCH Alg. 2) over ``items`` tuple by tuple, then end of
    input: the outputs an executor-free reference gives."""
    inst = op.instance()
    for ts, p in items:
        inst.process(ts, p)
    inst.finish()
    return inst.take()


# -- reconfiguration schedules ----------------------------------------------------------------
def schedules(n_tuples: int, max_parallelism: int, max_steps: int = 5
              ) -> st.SearchStrategy[list[tuple[int, int]]]:
    """``[(COUNT, P), ...]`` sorted by COUNT, P in 1..max_parallelism: provisioning and
    decommissioning, several steps at the same count, a step before the first tuple (COUNT 0)
    and after the last (COUNT > n_tuples)."""
    step = st.tuples(st.integers(0, n_tuples + 2), st.integers(1, max_parallelism))
    return st.lists(step, max_size=max_steps).map(sorted)


# -- the built-in queries, on small windows and small generated inputs -----------------------
#: the queries over tweets (the inputs of :func:`query_inputs` for each are alike)
TWEET_QUERIES = ("wordcount", "paircount", "longest-hashtag")
QUERY_PARAMS: dict[str, dict[str, Any]] = {
    "wordcount": {"size": 2000, "slide": 500},
    "paircount": {"size": 2000, "slide": 500, "distance": 2},  # sliding: WS/WA = 4
    "longest-hashtag": {"size": 3000, "slide": 1000},
    "scalejoin": {"window": 400, "band": 3000, "keys": 8},
    "hedge": {"window": 40, "lower": -1.05, "upper": -0.95, "keys": 4},
    "forward": {},
    "traffic-congestion": {"window": 2000, "slide": 500, "flow_threshold": 50.0},
    # TPCx-BB (ordered paper §6): windows of hours to days over a day or two of data
    "tpcxbb-q1": {"window": 3_600_000, "top": 10, "min_count": 1},
    "tpcxbb-q2": {"session": 600_000, "top": 5},
    "tpcxbb-q3": {"last": 3, "window": 43_200_000},
    "tpcxbb-q4": {"session": 600_000},
    "tpcxbb-q15": {"window": 86_400_000, "slide": 21_600_000},
    # NEXMark at 200 events/s of event time (query_inputs): windows of a few hundred events
    **{f"nexmark-q{i}": {} for i in (0, 1, 2)},
    **{f"nexmark-q{i}": {"window": 1000} for i in (3, 4, 7, 8)},
    "nexmark-q5": {"window": 1000, "slide": 250},
    "nexmark-q6": {"window": 1000, "last": 3},
}
#: generator options of the TPCx-BB inputs: few items, users and stores, so keys repeat
_TPCXBB_DATA = {"store-sales": {"days": 2, "items": 12, "stores": 3, "customers": 20},
                "web-clickstreams": {"days": 1, "items": 8, "users": 15}}


def query_inputs(query: str, seed: int, rows: int) -> list[list[dict]]:
    """Inputs of built-in ``query`` (one list of records per source), about ``rows`` records
    per source, from the generators the benchmarks use, made small (short gaps between tweets,
    a small vocabulary) so windows hold several tuples and keys repeat."""
    if query in ("wordcount", "paircount", "longest-hashtag"):
        return [tweets(rows, seed=seed, rate=200, vocabulary=40, hashtags=8, gap_prob=0.02,
                       gap_ms=(2_000, 9_000)).to_pylist()]
    if query == "scalejoin":
        return [t.to_pylist() for t in bandjoin(rows, seed=seed, rate=50)]
    if query == "forward":
        return [t.to_pylist() for t in bandjoin(rows, seed=seed, rate=300)]
    if query == "hedge":
        recs = trades(rows, seed=seed, companies=3, max_rate=2000.0).to_pylist()
        # the generated prices never hedge each other: one trade in three at minus its
        # company's average gives the self-join pairs to find
        for i, r in enumerate(recs):
            if i % 3 == 0:
                r["price"] = -r["avg_price"]
        return [recs]
    if query == "traffic-congestion":
        duration = 40 * rows + 1
        return [bus_reports(duration, buses=4, period_ms=160, areas=3, hot_areas=1,
                            seed=seed),
                scats_reports(duration, sensors=3, period_ms=120, areas=3, hot_areas=1,
                              seed=seed)]
    if query.startswith("tpcxbb-"):
        from stretchflow.queries import QUERIES
        from stretchflow.workloads import tpcxbb

        return [tpcxbb.generate(query, rows, seed, **_TPCXBB_DATA[QUERIES[query].data])]
    if query.startswith("nexmark-"):
        from stretchflow.queries import nexmark as nq
        from stretchflow.workloads.nexmark import STREAMS, nexmark

        tables = dict(zip(STREAMS, nexmark(max(rows, 20) * 4, seed=seed, rate=200.0),
                          strict=True))
        ins = [tables[s].to_pylist() for s in nq.QUERIES[query.removeprefix("nexmark-")][1]]
        if query == "nexmark-q2":  # the first auction a multiple of 123 is id 1107: few
            for i, r in enumerate(ins[0]):  # events have it, so one bid in four bids on one
                if i % 4 == 0:
                    r["auction"] = 123 * (9 + i % 3)
        return ins
    raise ValueError(f"no inputs for query {query!r}")


# -- the engines and their main variants ------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """An engine with fixed options; with ``max_parallelism`` set, each example also draws a
    ``reconfigure`` schedule up to it. ``examples`` is the default run's hypothesis budget
    per flow (process channels and Spark sessions start slowly, so they get fewer; Hypothesis
    tries the simplest inputs, often empty ones, first, so no variant gets fewer than 3)."""

    id: str
    engine: str
    options: dict[str, Any] = field(default_factory=dict)
    max_parallelism: int | None = None
    examples: int = 4
    slow: bool = False

    def draw_options(self, data: st.DataObject, n_tuples: int) -> dict[str, Any]:
        opts = dict(self.options)
        if self.max_parallelism is not None:
            opts["max_parallelism"] = self.max_parallelism
            opts["reconfigure"] = data.draw(schedules(n_tuples, self.max_parallelism),
                                            label="reconfigure")
        return opts

    def draw_options_fixed(self) -> dict[str, Any]:
        """The options with a fixed schedule (grow to the maximum after 5 tuples, shrink to 1
        after 12), for tests that do not draw inputs from hypothesis."""
        opts = dict(self.options)
        if self.max_parallelism is not None:
            opts["max_parallelism"] = self.max_parallelism
            opts["reconfigure"] = [(5, self.max_parallelism), (12, 1)]
        return opts


VARIANTS: list[Variant] = [
    Variant("reference", "reference", examples=3),
    Variant("vsn-p1", "vsn", {"parallelism": 1}, examples=5),
    Variant("vsn-p2-reconfigure", "vsn", {"parallelism": 2}, max_parallelism=4, examples=10),
    Variant("sn-threads-p2-reconfigure", "sn", {"parallelism": 2, "channels": "threads"},
            max_parallelism=4, examples=8),
    Variant("sn-processes-p2", "sn", {"parallelism": 2, "channels": "processes"},
            examples=3),
    Variant("ordered-p1-qst", "ordered", {"parallelism": 1, "scheduler": "qst"}, examples=4),
    *(Variant(f"ordered-p2-{s}", "ordered", {"parallelism": 2, "scheduler": s}, examples=4)
      for s in ("qst", "lp", "et", "ct")),
    Variant("slack-p2", "slack", {"parallelism": 2}, examples=5),
    Variant("spark-p2", "spark", {"parallelism": 2}, examples=3, slow=True),
]


def require(variant: Variant) -> None:
    """Skips (with the reason printed by ``-ra``) a Spark variant where Spark cannot start:
    no Java runtime, or no pyspark. Every other engine must run everywhere."""
    if variant.engine != "spark":
        return
    import importlib.util
    import shutil

    import pytest

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("spark variant: no Java runtime (java not on PATH, JAVA_HOME unset)")
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("spark variant: pyspark is not installed")
    # Spark's Python workers do not have tests/ on their path: the suite's named functions
    # travel by value, as lambdas do (what a user does for functions of an unshipped module)
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__package__])


def variant_params() -> list[Any]:
    """:data:`VARIANTS` as pytest parameters, the slow ones marked ``slow``."""
    import pytest

    return [pytest.param(v, id=v.id, marks=[pytest.mark.slow] if v.slow else [])
            for v in VARIANTS]
