"""The suite checks itself: its helpers can fail, it covers every built-in query and engine,
and it speaks the engines' option vocabulary."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.engines import ENGINES
from stretchflow.queries import QUERIES

from .contract import QUERY_PARAMS, VARIANTS, assert_same_as_reference, multiset, schedules
from .flows import FLOWS


def test_multiset_is_per_timestamp_and_canonical():
    a = [(1, {"x": [1, 2], "y": {"b", "a"}}), (1, {"y": {"a", "b"}, "x": [1, 2]}), (0, "z")]
    assert list(multiset(a)) == [0, 1]
    assert multiset(a)[1] == Counter({next(iter(multiset(a[:1])[1])): 2})
    assert multiset([(1, (1, 2))]) != multiset([(1, [1, 2])])  # a tuple is not a list
    assert multiset([(1, {"n": 1})]) != multiset([(1, {"n": 1.0})])  # nor 1.0 an int
    assert multiset([(1, {"n": 1})]) != multiset([(1, {"n": True})])
    assert multiset([(1, "a")]) != multiset([(2, "a")])  # the timestamp counts
    assert multiset([(1, "a"), (1, "a")]) != multiset([(1, "a")])  # so does multiplicity
    assert multiset([(1, frozenset({("k", 1)}))]) == multiset([(1, frozenset({("k", 1)}))])


@settings(max_examples=30)
@given(st.integers(0, 50), st.integers(1, 8), st.data())
def test_schedules_stay_in_range(n, p, data):
    sched = data.draw(schedules(n, p))
    assert sched == sorted(sched)
    assert all(0 <= c <= n + 2 and 1 <= q <= p for c, q in sched)


def _wrong_engine_flow(shift: int):
    flow = sf.Flow("t")
    col = flow.source(sf.io.iterable([{"ts": 1}, {"ts": 3}])).map(
        lambda t: {"ts": t["ts"] + shift}).collect()
    return flow, [col]


def test_assert_same_as_reference_catches_a_difference(monkeypatch):
    """An engine whose output differs from the reference's, or goes back in time, fails."""
    import stretchflow.executors.reference as ref

    real = ref.run

    def corrupt(kind):
        def run(flow, **options):
            res = real(flow, **options)
            for _, sink in flow.sinks:
                if kind == "drop":
                    sink.items.pop()
                else:
                    sink.items.reverse()
            return res
        return run

    ENGINE = "conformance-selftest"
    spec = ENGINES["reference"]
    for kind, message in (("drop", "missing"), ("reverse", "back in time")):
        fake = type(spec)(ENGINE, "fake", "", ())
        monkeypatch.setitem(ENGINES, ENGINE, fake)
        monkeypatch.setattr(type(spec), "load", lambda self, k=kind: (
            corrupt(k) if self.name == ENGINE else real))
        with pytest.raises(AssertionError, match=message):
            assert_same_as_reference(lambda: _wrong_engine_flow(0), ENGINE)
    monkeypatch.undo()
    assert_same_as_reference(lambda: _wrong_engine_flow(0), "reference")


def test_every_built_in_query_is_in_the_suite():
    assert set(QUERY_PARAMS) == set(QUERIES)
    assert {f"query-{q}" for q in QUERIES} <= {f.name for f in FLOWS}


def test_every_engine_has_a_variant_with_canonical_options():
    assert {v.engine for v in VARIANTS} == set(ENGINES)
    for v in VARIANTS:
        given_names = set(v.options) | (
            {"max_parallelism", "reconfigure"} if v.max_parallelism is not None else set())
        assert given_names <= set(ENGINES[v.engine].option_names), v.id
    assert {v.options.get("scheduler") for v in VARIANTS if v.engine == "ordered"} == \
        {"qst", "lp", "et", "ct"}
