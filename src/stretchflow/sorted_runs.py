"""Sorted runs merged into one (issue #32): the outputs of P instances of one step, a
producer's batches for several inputs.

``heapq.merge`` is written in Python: a generator step and a key call per item, paid here on
every output of a step at parallelism > 1. A stable sort of the runs' concatenation gives the
same order — by key, ties in run order, as ``heapq.merge`` breaks them — and timsort finds
the sorted runs and merges them in C: two runs of 700 000 ``(ts, i)`` items in 0.21–0.36 s
against 0.80–0.88 s, and two of 64 items 7× faster (a scratch timing on this machine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def merge_runs(runs: Iterable[Iterable[T]], key: Callable[[T], Any]) -> list[T]:
    """The items of ``runs``, each sorted by ``key``, in one list sorted by ``key``; equal
    keys in the order of their runs, then of their places in a run (``heapq.merge``'s)."""
    out: list[T] = []
    for run in runs:
        out.extend(run)
    out.sort(key=key)
    return out
