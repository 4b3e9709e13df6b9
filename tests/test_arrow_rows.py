"""stretchflow.arrow_rows.pylist gives exactly pyarrow's ``to_pylist`` (issue #32: the rows a
lambda flow reads from Parquet)."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest

from stretchflow.arrow_rows import pylist


def _same(a: list[dict], b: list[dict]) -> None:
    # repr: NaN != NaN, but the same value prints the same; key order matters too
    assert [list(r.items()) for r in a].__repr__() == [list(r.items()) for r in b].__repr__()


def test_every_kind_of_column_and_null_comes_out_as_to_pylist_gives_it():
    t = pa.table({"a": [1, None, 3], "b": ["x", "y", None], "c": [[1], [], None],
                  "d": [{"x": 1}, None, {"x": 2}], "e": pa.array([0, 1, 2], pa.timestamp("ms")),
                  "f": [1.5, math.nan, None], "g": [True, False, None],
                  "h": pa.array([b"\x00", None, b"z"]),
                  "m": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64()))})
    for data in (t, t.to_batches()[0], t.slice(1)):
        _same(data.to_pylist(), pylist(data))


@pytest.mark.parametrize("names", [["k", "k"], ["it's", 'q"', "a b", "1", ""], ["x"],
                                   ["__import__('os')", "{c0}", "c0"]])
def test_any_column_names_are_keys_never_code(names):
    cols = [pa.array([i, i + 1]) for i in range(len(names))]
    b = pa.RecordBatch.from_arrays(cols, names=names)
    _same(b.to_pylist(), pylist(b))  # a repeated name keeps its last value in both


def test_empty_batches_and_no_columns():
    _same(pa.table({"x": pa.array([], pa.int64())}).to_pylist(),
          pylist(pa.table({"x": pa.array([], pa.int64())})))
    assert pylist(pa.table({})) == pa.table({}).to_pylist()


def test_random_tables_equal_to_pylist():
    rng = random.Random(7)
    for _ in range(30):
        n, k = rng.randint(0, 50), rng.randint(1, 6)
        cols = {f"c{j}": [rng.choice([None, rng.randint(-5, 5), rng.random()]) if j % 2 else
                          rng.choice([None, str(rng.randint(0, 9))]) for _ in range(n)]
                for j in range(k)}
        cols = {name: pa.array([None if v is None else float(v) for v in vs]) if j % 2 else
                pa.array(vs, pa.string()) for j, (name, vs) in enumerate(cols.items())}
        t = pa.table(cols)
        _same(t.to_pylist(), pylist(t))
