"""One core for the threads of a run that run Python (issue #32).

CPython 3.11 runs one thread's Python at a time (the GIL), so the threads of a run that each
run Python — an O+'s instances calling the user's functions tuple by tuple, a source parsing
JSON Lines — take turns whatever the cores. On a machine with several cores the scheduler
starts each turn on whichever core is free: at a hand-over of the GIL the thread that takes it
often runs on the other core, and its working set (σ's dictionaries, the batch's rows, the
interpreter's own state) moves between the cores' caches. With the instances of a lambda flow
handing the GIL back and forth at every batch, that cost as much as the instances' own extra
work in some runs: hot items with lambdas on vsn at parallelism 2 (1 M bids, JSON Lines, the
2-core machine of the results) took 1.7 times the CPU of parallelism 1, and 1.3 times with
these threads on one core; the same run pinned against unpinned, alternating, took 0.81 and
0.95 of the wall time (medians of 4 and of 6 pairs on a noisy machine; single pairs 0.69 to
1.15). Issue #32's closing note of 2026-12-07 has the runs.

So a run puts those threads on one core: each pins itself when it starts
(``os.sched_setaffinity(0, ...)`` sets the calling thread's affinity on Linux). Only threads
that hold the GIL for most of their work are pinned; a columnar O+ (Arrow kernels release the
GIL), a source Arrow parses (Parquet, CSV, JSON Lines read into tables: Arrow's threads, and
the parse-ahead threads, take the affinity of the thread that starts them) and the sinks are
left to the scheduler, so GIL-free work still uses the other cores (pinned, the JSON Lines
source of hot items with column expressions made vsn at parallelism 2 1.15 times slower). The
cost: the kernel cannot move the pinned threads off a core that another process keeps busy.
``gil_core='off'`` leaves every thread to the scheduler.

Nothing is pinned on an interpreter without the GIL, on a platform without per-thread
affinity, or in a process allowed one CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .result import gil_serializes_threads

__all__ = ["gil_bound_source", "pinned", "python_core"]


def python_core(on: bool) -> int | None:
    """The CPU the run's Python threads share, or None when they are not pinned: ``on``
    False, no GIL, no ``sched_setaffinity``, or one CPU allowed. The highest-numbered CPU
    this process may use (the first ones usually take the most interrupts)."""
    if not on or not gil_serializes_threads() or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except OSError:
        return None
    return cpus[-1] if len(cpus) > 1 else None


def pinned(fn: Callable[..., Any], cpu: int) -> Callable[..., Any]:
    """``fn``, pinning the thread that runs it to ``cpu`` first (a thread the system refuses
    to pin runs where the scheduler puts it: pinning is an optimization, never a failure)."""

    def target(*args: Any) -> Any:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            pass
        return fn(*args)

    target.__name__ = getattr(fn, "__name__", "target")
    return target


def gil_bound_source(spec: Any) -> bool:
    """Whether reading source ``spec`` holds the GIL for most of its work (``Source.gil_bound``;
    a source class of the user's that does not say is taken to)."""
    return getattr(spec, "gil_bound", True)
