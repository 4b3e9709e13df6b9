"""sum_by (operators/columnar_kernels.py) against a plain Python dict, on each of its ways of
grouping: dense codes counted (bincount, with counts of one or other values), sparse codes
sorted (counts of one) or argsorted (other values), and values too large for float64 weights
(exact, or OverflowError: never a wrapped sum); one and two key columns, with and without
slices."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.batch import arrow_strings
from stretchflow.operators.columnar_kernels import group_sums, sum_by

WORDS = ["a", "b", "c", "é", "", "dd", "x y"]


def _expected(keys, values, slices):
    acc = defaultdict(int)
    for r, v in enumerate(values):
        acc[(None if slices is None else int(slices[r]), tuple(k[r] for k in keys))] += int(v)
    return dict(acc)


def _got(keys, values, slices):
    sl, cols, sums = sum_by([arrow_strings(k) for k in keys], np.asarray(values, np.int64),
                            None if slices is None else np.asarray(slices, np.int64))
    got_keys = list(zip(*[c.to_pylist() for c in cols], strict=True))
    if slices is None:
        assert sl is None
        sl = [None] * len(sums)
    else:
        assert list(sl) == sorted(sl)  # groups in ascending slice order
    return {(s if s is None else int(s), k): int(v)
            for s, k, v in zip(sl, got_keys, sums, strict=True)}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sum_by_matches_a_dict(data):
    n = data.draw(st.integers(1, 60))
    ncols = data.draw(st.integers(1, 2))
    keys = [data.draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n))
            for _ in range(ncols)]
    values = data.draw(st.one_of(
        st.just([1] * n),  # f_MK's counts of one
        st.lists(st.integers(-5, 5), min_size=n, max_size=n),
        st.lists(st.integers(-2**62, 2**62), min_size=n, max_size=n)))  # past float64
    slices = data.draw(st.one_of(
        st.none(),
        # few slices (dense codes) or far apart ones of a common width (sparse codes)
        st.lists(st.sampled_from([0, 60, 120]), min_size=n, max_size=n),
        st.lists(st.integers(-10**6, 10**6).map(lambda s: s * 60), min_size=n, max_size=n)))
    # exact, or OverflowError when a sum may leave int64 (never a wrapped sum)
    want = _expected(keys, values, slices)
    biggest = max(abs(v) for v in want.values())
    try:
        got = _got(keys, values, slices)
    except OverflowError:
        assert biggest >= 2**61  # refused only near the edge (the float64 estimate's margin)
        return
    assert biggest < 2**63
    assert got == want


@pytest.mark.parametrize("values", [[1] * 7, [3, -1, 4, 1, -5, 9, 2], [2**60] * 7])
@pytest.mark.parametrize("bins", [10, 10**7])  # dense (bincount) and sparse (sort) codes
def test_group_sums_each_path(values, bins):
    code = np.array([7, 2, 7, 9, 2, 2, 0], np.int64)
    first, sums = group_sums(code, np.array(values, np.int64), bins)
    assert first.tolist() == [0, 2, 7, 9]
    want = defaultdict(int)
    for c, v in zip(code.tolist(), values, strict=True):
        want[c] += v
    assert sums.tolist() == [want[c] for c in [0, 2, 7, 9]]
    assert sums.dtype == np.int64


def test_group_sums_keeps_a_group_whose_sum_is_zero():
    first, sums = group_sums(np.array([1, 1, 3], np.int64), np.array([2, -2, 5], np.int64), 4)
    assert first.tolist() == [1, 3] and sums.tolist() == [0, 5]
