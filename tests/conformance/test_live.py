"""A live source (``live = True``, io/traffic.py's DelayedReplay: tuples handed over one at a
time, paced in wall-clock time) gives the same output as the same records read at once, on
every engine."""

from __future__ import annotations

import pytest

import stretchflow as sf
from stretchflow.io.traffic import DelayedReplay
from stretchflow.queries import build_query

from .contract import (
    QUERY_PARAMS,
    Variant,
    assert_same_as_reference,
    multiset,
    query_inputs,
    require,
    variant_params,
)

# 80 tweets and two 40-row band-join streams; replayed 400 times faster than event time they
# take about a tenth of a second
TWEETS = query_inputs("wordcount", seed=5, rows=80)
BANDS = query_inputs("scalejoin", seed=5, rows=40)
SPEEDUP = 400.0


def _build(query: str, inputs: list[list[dict]], live: bool):
    def build():
        flow = sf.Flow(f"live-{query}")
        streams = [flow.source(DelayedReplay(recs, speedup=SPEEDUP, origin=None,
                                             name=f"in{i}") if live
                               else sf.io.iterable(recs, name=f"in{i}"))
                   for i, recs in enumerate(inputs)]
        return flow, [build_query(query, streams, **QUERY_PARAMS[query]).collect()]
    return build


CASES = {"wordcount": TWEETS, "scalejoin": BANDS}


@pytest.mark.parametrize("query", sorted(CASES))
def test_live_source_is_live_and_gives_the_reference_output(query: str) -> None:
    """The reference's own output does not depend on the source being live."""
    assert DelayedReplay([], name="x").live is True
    flow, (live,) = _build(query, CASES[query], True)()
    flow.run("reference")
    flow, (at_once,) = _build(query, CASES[query], False)()
    flow.run("reference")
    assert at_once.items and multiset(live) == multiset(at_once)


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("query", sorted(CASES))
def test_live_source_on_every_engine(query: str, variant: Variant) -> None:
    require(variant)
    assert_same_as_reference(_build(query, CASES[query], True), variant.engine,
                             **variant.draw_options_fixed())
