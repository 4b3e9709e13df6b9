"""The hedge self-join (STRETCH Q6) against the paper's definition: a two-input J+ fed the
same trade stream twice, written here as a brute force over all ordered pairs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import schedules
from stretchflow.io.generators import trades
from stretchflow.queries import build_query


def brute_force(rows: list[dict], window: int, lower: float, upper: float) -> Counter:
    """J+ self-join: tuple t on input 0 meets the window's input-1 tuples that precede it in
    the merge of the two copies (ties go to input 0), and vice versa; output at ts + 1."""
    merged = sorted([(r["ts"], 0, k) for k, r in enumerate(rows)]
                    + [(r["ts"], 1, k) for k, r in enumerate(rows)])
    out: Counter = Counter()
    seen: list[tuple[int, int]] = []  # (input, row) already processed
    for ts, i, k in merged:
        t = rows[k]
        for j, m in seen:
            s = rows[m]
            if j == i or s["ts"] < ts - window or s["id"] == t["id"]:
                continue
            left, right = (t, s) if i == 0 else (s, t)
            nd_l = (left["price"] - left["avg_price"]) / left["avg_price"]
            nd_r = (right["price"] - right["avg_price"]) / right["avg_price"]
            if nd_l != 0 and lower <= nd_r / nd_l <= upper:
                out[(ts + 1, left["id"], left["price"], right["id"], right["price"])] += 1
        seen.append((i, k))
    return out


def run(rows, engine, **opts):
    flow = sf.Flow("hedge")
    params = {k: opts.pop(k) for k in ("window", "lower", "upper", "keys") if k in opts}
    out = build_query("hedge", [flow.source(sf.io.iterable(rows))], **params).collect()
    flow.run(engine=engine, **opts)
    return Counter((ts, p["l_id"], p["l_price"], p["r_id"], p["r_price"])
                   for ts, p in out.items)


@st.composite
def trade_rows(draw):
    n = draw(st.integers(1, 40))
    ts, rows = 0, []
    for _ in range(n):
        ts += draw(st.integers(0, 4))
        avg = draw(st.sampled_from([10.0, 20.0, 40.0]))
        price = avg * (1 + draw(st.sampled_from([-0.1, -0.05, 0.0, 0.05, 0.1, 0.2])))
        rows.append({"ts": ts, "id": draw(st.sampled_from("ABC")), "price": price,
                     "avg_price": avg})
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trade_rows(), st.integers(1, 12), st.sampled_from([(-1.05, -0.95), (-2.5, -0.4)]),
       st.integers(1, 4))
def test_reference_equals_the_self_join(rows, window, bounds, keys):
    lower, upper = bounds
    assert run(rows, "reference", window=window, lower=lower, upper=upper, keys=keys) == \
        brute_force(rows, window, lower, upper)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trade_rows(), st.integers(1, 12), st.integers(1, 4), st.data())
def test_vsn_equals_the_self_join(rows, window, p, data):
    schedule = data.draw(schedules(len(rows), 4, max_steps=3))
    got = run(rows, "vsn", window=window, keys=4, parallelism=p, max_parallelism=4,
              reconfigure=schedule)
    assert got == brute_force(rows, window, -1.05, -0.95)


def test_generated_trades_match():
    rows = trades(600, seed=5).to_pylist()
    want = brute_force(rows, 2000, -1.05, -0.95)
    assert want  # the generator produces hedges at all
    assert run(rows, "vsn", window=2000, parallelism=2) == want


def test_zero_average_price_is_reported():
    rows = [{"ts": 1, "id": "A", "price": 1.0, "avg_price": 0}]
    with pytest.raises(sf.errors.OperatorError, match="avg_price must be non-zero"):
        run(rows, "reference")
