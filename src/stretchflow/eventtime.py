"""Event time and window arithmetic (journal §2.1, Alg. 2's earliestWinL/latestWinL).

Time is an integer number of milliseconds (δ = 1 ms). A window instance covers
``[l, l + WS)`` with ``l`` a multiple of ``WA``; a tuple with timestamp τ falls in
every instance with ``l <= τ < l + WS``.
"""

from __future__ import annotations

import re

DELTA = 1  # δ: the smallest step of event time, 1 ms

_UNITS = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def parse_duration(value: int | str) -> int:
    """A duration in ms from an int (ms) or a string such as ``"30s"``, ``"60min"``, ``"1h"``.

    >>> parse_duration("90s"), parse_duration(250), parse_duration("2h")
    (90000, 250, 7200000)
    """
    if isinstance(value, bool):
        raise TypeError(f"a duration must be an int (ms) or a string like '30s', not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _DURATION.match(value.lower())
        if m and (m.group(2) or "ms") in _UNITS:
            return int(m.group(1)) * _UNITS[m.group(2) or "ms"]
    raise ValueError(
        f"cannot read duration {value!r}: use an int (ms) or a number with one of "
        f"{', '.join(sorted(_UNITS))}"
    )


def earliest_win_l(ts: int, wa: int, ws: int) -> int:
    """Left boundary of the earliest window instance ``ts`` falls in (earliestWinL).

    The smallest multiple of WA greater than ``ts - WS``.

    >>> earliest_win_l(58, 30, 60)  # 09:58 with WA=30, WS=60 (minutes) -> 09:00
    0
    """
    return ((ts - ws) // wa + 1) * wa


def latest_win_l(ts: int, wa: int) -> int:
    """Left boundary of the latest window instance ``ts`` falls in (latestWinL): floor(τ/WA)·WA.

    >>> latest_win_l(58, 30)
    30
    """
    return (ts // wa) * wa


def windows_of(ts: int, wa: int, ws: int) -> range:
    """Left boundaries of all window instances ``ts`` falls in, earliest first."""
    return range(earliest_win_l(ts, wa, ws), latest_win_l(ts, wa) + 1, wa)


class _Watermark:
    """Marker payload of an explicit watermark item ``(ts, WATERMARK)`` inside a stream."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WATERMARK"


#: Payload of explicit watermark items. An item ``(w, WATERMARK)`` promises that no later
#: tuple of the same stream has a timestamp below ``w``.
WATERMARK = _Watermark()


class Watermark:
    """An explicit watermark a user puts into an iterable source: no later tuple has ts < ``ts``.

    >>> Watermark(1000)
    Watermark(1000)
    """

    __slots__ = ("ts",)

    def __init__(self, ts: int):
        self.ts = ts

    def __repr__(self) -> str:
        return f"Watermark({self.ts})"
