"""ScaleJoin's column store: growth, purge and the vectorized band comparison."""

from hypothesis import given
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
