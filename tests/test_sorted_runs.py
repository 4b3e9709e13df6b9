"""merge_runs gives heapq.merge's order: by key, ties in run order, then place in a run."""

from __future__ import annotations

import heapq
from operator import itemgetter

from hypothesis import given
from hypothesis import strategies as st

from stretchflow.sorted_runs import merge_runs

runs = st.lists(st.lists(st.integers(0, 5), max_size=12).map(sorted), max_size=5)


@given(runs)
def test_merge_runs_is_heapq_merge(rs):
    tagged = [[(ts, r, n) for n, ts in enumerate(run)] for r, run in enumerate(rs)]
    want = list(heapq.merge(*tagged, key=itemgetter(0)))
    got = merge_runs(tagged, itemgetter(0))
    assert got == want
    assert got is not (tagged[0] if tagged else None)  # a new list: the runs are untouched
    assert [len(r) for r in tagged] == [len(r) for r in rs]
