"""ScaleJoin's column store: growth, purge and the vectorized band comparison."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.queries.scalejoin import Columns


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-20, 20), st.integers(-20, 20)),
                max_size=80),
       st.integers(0, 400), st.integers(-20, 20), st.integers(-20, 20), st.integers(0, 6))
def test_columns_match_a_plain_list(steps, horizon, u, v, band):
    cols = Columns(capacity=2)
    plain = []
    ts = 0
    for k, (dt, a, b) in enumerate(steps):
        ts += dt
        cols.append(ts, a, b, f"id{k}")
        plain.append((ts, a, b, f"id{k}"))
        if k % 7 == 3:  # purge while growing
            cols.purge(ts - 5)
            plain = [p for p in plain if p[0] >= ts - 5]
    cols.purge(horizon)
    plain = [p for p in plain if p[0] >= horizon]
    assert len(cols) == len(plain)
    assert sorted(cols.band_match(u, v, band)) == sorted(
        p[3] for p in plain if abs(p[1] - u) <= band and abs(p[2] - v) <= band)


@st.composite
def join_inputs(draw):
    """Interleaved left/right tuples with non-decreasing ts (ties included) and small values
    so that band matches are frequent."""
    n = draw(st.integers(1, 120))
    out, ts = [], 0
    for k in range(n):
        ts += draw(st.integers(0, 3))
        i = draw(st.integers(0, 1))
        a, b = draw(st.integers(0, 12)), draw(st.integers(0, 12))
        rec = {"ts": ts, "id": k, "x": a, "y": b} if i == 0 else \
            {"ts": ts, "id": k, "a": a, "b": b}
        out.append((ts, rec, i))
    return out


def _outputs(inst):
    return sorted((ts, p["left"], p["right"]) for ts, p in inst.take())


@settings(deadline=None)  # the first example compiles the numba kernel
@given(join_inputs(), st.integers(1, 5), st.integers(1, 40), st.integers(0, 3),
       st.lists(st.integers(1, 30), min_size=1, max_size=10), st.sampled_from([1, 8]))
def test_runs_through_update_many_equal_tuple_at_a_time(items, n_keys, window, band, cuts,
                                                        min_run):
    """process_batch (ScaleJoin.update_many over runs, numpy matrices) gives the outputs and
    final stores of processing each tuple with f_U, for any split of the input into runs
    (with min_run 1 every run, even of one tuple, goes through update_many)."""
    from stretchflow.queries.scalejoin import ScaleJoin

    op = ScaleJoin(window=window, band=band, n_keys=n_keys)
    op.min_run = min_run
    one, many = op.instance(), op.instance()
    for ts, rec, i in items:
        one.process(ts, rec, i)
    pos, c = 0, 0
    while pos < len(items):
        step = cuts[c % len(cuts)]
        many.process_batch(items[pos:pos + step])
        pos += step
        c += 1
    assert _outputs(many) == _outputs(one)  # outputs released so far (up to W)
    one.finish()
    many.finish()
    assert _outputs(many) == _outputs(one)
    for l_, d in one.sigma.items():
        for key, ws in d.items():
            other = many.sigma[l_][key]
            for s1, s2 in zip(ws.states, other.states, strict=True):
                assert s1.c == s2.c
                h1, h2 = s1.stored, s2.stored
                assert h1.ids[h1.head:h1.tail].tolist() == h2.ids[h2.head:h2.tail].tolist()


def test_a_bad_record_in_a_run_is_named():
    """A run's failure names the tuple that failed, not the run's first tuple."""
    import pytest

    import stretchflow as sf
    from stretchflow.errors import OperatorError
    from stretchflow.queries import build_query

    left = [{"ts": t, "id": t, "x": 1, "y": 1} for t in range(50)]
    right = [{"ts": t, "id": t, "a": 1, "b": 1} for t in range(50)]
    right[30] = {"ts": 30, "id": 30, "a": 1}  # no "b"
    flow = sf.Flow("bad")
    streams = [flow.source(sf.io.iterable(left, name="L")),
               flow.source(sf.io.iterable(right, name="R"))]
    build_query("scalejoin", streams, window=10, band=1).collect()
    with pytest.raises(OperatorError, match=r"ts=30 payload=\{'ts': 30, 'id': 30, 'a': 1\}"):
        flow.run(engine="vsn", parallelism=2)


@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(-20, 20),
                                   st.integers(-20, 20)), max_size=12), max_size=12),
       st.integers(0, 80))
def test_extend_equals_appending_one_by_one(chunks, horizon):
    """A run's stored tuples go in with one extend: the same store as appending each."""
    import numpy as np

    one, many = Columns(capacity=2), Columns(capacity=2)
    ts, k = 0, 0
    for chunk in chunks:
        rows = []
        for dt, a, b in chunk:
            ts += dt
            rows.append((ts, a, b, f"id{k}"))
            one.append(ts, a, b, f"id{k}")
            k += 1
        cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
        many.extend(np.asarray(cols[0], dtype=np.int64), np.asarray(cols[1], dtype=float),
                    np.asarray(cols[2], dtype=float), np.asarray(cols[3], dtype=object))
        one.purge(ts - 30)
        many.purge(ts - 30)
    for c in (one, many):
        c.purge(horizon)
    h1, t1, h2, t2 = one.head, one.tail, many.head, many.tail
    assert one.ts[h1:t1].tolist() == many.ts[h2:t2].tolist()
    assert one.uv[:, h1:t1].tolist() == many.uv[:, h2:t2].tolist()
    assert one.ids[h1:t1].tolist() == many.ids[h2:t2].tolist()


@pytest.mark.parametrize("bad", [{"ts": 7, "id": 3, "y": 1},               # no x
                                 {"ts": 7, "id": 3, "x": "left", "y": 1},  # not a number
                                 {"ts": 7, "x": 1, "y": 1}])               # no id
def test_a_bad_tuple_in_a_run_is_named(bad):
    from stretchflow.errors import RunTupleError
    from stretchflow.queries.scalejoin import run_columns

    good = [{"ts": t, "id": t, "x": 1, "y": 2} for t in range(5)]
    values = good[:3] + [bad] + good[3:]
    ts = [v["ts"] for v in values]
    with pytest.raises(RunTupleError) as info:
        run_columns(ts, values, [0] * len(values))
    assert info.value.ts == 7 and info.value.payload is bad
