"""Event time and window arithmetic (journal §2.1, Alg. 2's earliestWinL/latestWinL).

Time is an integer number of milliseconds (δ = 1 ms). A window instance covers
``[l, l + WS)`` with ``l`` a multiple of ``WA``; a tuple with timestamp τ falls in
every instance with ``l <= τ < l + WS``.
"""

from __future__ import annotations

import numbers
import re
from datetime import timedelta
from fractions import Fraction

DELTA = 1  # δ: the smallest step of event time, 1 ms

_MS = 1
_S = 1000
_MIN = 60 * _S
_H = 60 * _MIN
_D = 24 * _H
#: unit names a duration string may use, singular and plural, as Flink, Spark, Bytewax and
#: Python users write them ("10 seconds", "1 minute", "2min", "250ms", "1h")
_UNITS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millis", "millisecond", "milliseconds"), _MS),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), _S),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), _MIN),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), _H),
    **dict.fromkeys(("d", "day", "days"), _D),
    **dict.fromkeys(("w", "week", "weeks"), 7 * _D),
}
# one or more "<number> <unit>" parts ("1h 30min", "1.5s"); a bare number is ms
_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*,?")
_HELP = ("use ms (an int), a timedelta, or a string such as '250ms', '10s', '1.5s', "
         "'10 seconds', '2min', '1 minute', '1h', '1h 30min', '1d'")


def parse_duration(value: int | str | timedelta) -> int:
    """A duration in whole ms from an int (ms), a :class:`~datetime.timedelta`, or a string:
    a number and a unit (``"30s"``, ``"1.5s"``, ``"10 seconds"``, ``"2min"``, ``"1 minute"``,
    ``"250ms"``, ``"1h"``), several such parts (``"1h 30min"``), or a bare number of ms.

    >>> parse_duration("90s"), parse_duration(250), parse_duration("2h")
    (90000, 250, 7200000)
    >>> parse_duration("1.5s"), parse_duration("1 minute"), parse_duration(timedelta(seconds=10))
    (1500, 60000, 10000)

    Anything else (a negative or fractional number of ms, an unknown unit, a bool) is one
    ValueError naming the value.
    """
    if isinstance(value, bool):
        raise ValueError(f"cannot read duration {value!r}: {_HELP}")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ValueError(f"cannot read duration {value!r}: a duration is not negative")
        return int(value)
    if isinstance(value, timedelta):
        ms, rest = divmod(value, timedelta(milliseconds=1))
        if rest or ms < 0:
            raise ValueError(f"cannot read duration {value!r}: durations are whole, "
                             f"non-negative milliseconds")
        return ms
    if isinstance(value, str):
        return _parse_text(value)
    raise ValueError(f"cannot read duration {value!r} ({type(value).__name__}): {_HELP}")


def _parse_text(value: str) -> int:
    text = value.strip().lower()
    pos, total, parts = 0, Fraction(0), 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.end() == pos:
            break
        unit = m.group(2) or ("ms" if parts == 0 and m.end() == len(text) else "")
        if unit not in _UNITS:
            why = f"unknown unit {m.group(2)!r}" if m.group(2) else "a number needs a unit"
            raise ValueError(f"cannot read duration {value!r}: {why}; {_HELP}")
        total += Fraction(m.group(1)) * _UNITS[unit]
        parts += 1
        pos = m.end()
    if not parts or pos != len(text):
        raise ValueError(f"cannot read duration {value!r}: {_HELP}")
    if total.denominator != 1:
        raise ValueError(f"cannot read duration {value!r}: {float(total):g} ms is not a whole "
                         f"number of milliseconds")
    return int(total)


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
