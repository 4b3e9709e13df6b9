"""The per-writer and per-reader records of the Slack ScaleGate (determinism-latency.txt
§5.1, Alg. 1: ``maxWriterTs``, ``lastReadTs`` and each reader's late queue).

They are shared by :mod:`stretchflow.buffers.ssg` (the core: Alg. 2 and 3 and flow control)
and :mod:`stretchflow.buffers.ssg_membership` (run-time SLT, membership and statistics);
keeping them here lets ``ssg`` import that mixin without an import circle.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class _Writer:
    __slots__ = ("name", "rank", "last", "open")

    def __init__(self, name: Hashable, rank: int, last: float) -> None:
        self.name = name
        self.rank = rank  # index in lastReadTs rows; never reused
        self.last = last  # maxWriterTs[w] (Alg. 1); -inf before the first insert
        self.open = True


class _Reader:
    __slots__ = ("name", "pos", "late", "last_read", "n_ready", "n_slack", "n_late")

    def __init__(self, name: Hashable, pos: tuple[float, int], late: list[tuple[Any, ...]],
                 last_read: list[float]) -> None:
        self.name = name
        self.pos = pos  # key (ts, seq) of the last entry taken from the log
        self.late = late  # the late queue: a heap of log entries (Alg. 1)
        self.last_read = last_read  # lastReadTs[r][w] by writer rank (Alg. 1)
        self.n_ready = 0
        self.n_slack = 0
        self.n_late = 0
