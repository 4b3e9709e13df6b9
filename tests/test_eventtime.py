"""Window arithmetic against brute force (DESIGN: Windows)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretchflow.eventtime import (
    earliest_win_l,
    latest_win_l,
    parse_duration,
    windows_of,
)


@st.composite
def window_params(draw):
    ws = draw(st.integers(1, 50))
    wa = draw(st.integers(1, ws))
    ts = draw(st.integers(-200, 200))
    return ts, wa, ws


@given(window_params())
def test_windows_match_brute_force(p):
    ts, wa, ws = p
    brute = [l for l in range(-400, 401) if l % wa == 0 and l <= ts < l + ws]
    assert list(windows_of(ts, wa, ws)) == brute
    assert earliest_win_l(ts, wa, ws) == brute[0]
    assert latest_win_l(ts, wa) == brute[-1]


def test_appendix_e_boundaries():
    # 09:58 with WA = 30 min, WS = 60 min falls in [09:00, 10:00) and [09:30, 10:30)
    minute = 60_000
    t = (9 * 60 + 58) * minute
    expected = [9 * 60 * minute, (9 * 60 + 30) * minute]
    assert list(windows_of(t, 30 * minute, 60 * minute)) == expected


@pytest.mark.parametrize(
    "text,ms", [("250", 250), ("250ms", 250), ("30s", 30_000), ("5min", 300_000),
                ("1h", 3_600_000), (" 2 d ", 172_800_000), (42, 42)],
)
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "5 parsecs", "-3s", "1.5ms", True])
def test_parse_duration_rejects(bad):
    with pytest.raises((ValueError, TypeError)):
        parse_duration(bad)
