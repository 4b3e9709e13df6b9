"""The per-source and per-reader records of the Elastic ScaleGate (STRETCH journal §6, Table II).

They are shared by :mod:`stretchflow.buffers.esg` (the core: the sorted merge, readiness, reads
and flow control) and :mod:`stretchflow.buffers.esg_membership` (sources and readers that join
and leave at run time); keeping them here lets ``esg`` import the membership mixin without an
import circle.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from operator import attrgetter
from typing import Any

_pos = attrgetter("pos")


class Aborted(RuntimeError):
    """Raised by a blocking call on a buffer that :meth:`ElasticScaleGate.abort` stopped
    (defined here so that the membership mixin raises it too; ``buffers.esg`` exports it)."""


class _Source:
    __slots__ = ("name", "rank", "last", "pending", "head", "active")

    def __init__(self, name: Hashable, rank: int, last: float) -> None:
        self.name = name
        self.rank = rank
        self.last = last  # latest ts added (or the dummy's ts); -inf before the first add
        self.pending: list[tuple] = []  # not-yet-ready tuples are pending[head:]
        self.head = 0
        self.active = True  # False: removed (flushed) but with pending tuples left


class _Reader:
    __slots__ = ("pos", "start", "wm")

    def __init__(self, pos: int, wm: Any) -> None:
        self.pos = pos  # absolute index in the ready log of the next tuple to return
        self.start = pos
        self.wm = wm


def _unknown_source(source: Hashable) -> ValueError:
    return ValueError(f"unknown source {source!r} (never added, removed or closed)")


def _unknown_reader(reader: Hashable) -> ValueError:
    return ValueError(f"unknown reader {reader!r} (never added or removed)")


def _ts_back(source: Hashable, last: Any, ts: Any) -> ValueError:
    return ValueError(
        f"source {source!r}: timestamp {ts!r} is lower than its previous timestamp {last!r}"
        " (sources must add timestamp-sorted tuples)"
    )


def _as_members(items: Iterable[Hashable], what: str) -> list[Hashable]:
    if isinstance(items, str | bytes):
        raise TypeError(f"{what} must be an iterable of names, not the single name {items!r}")
    return list(dict.fromkeys(items))
