"""Keeping CPython's cyclic garbage collector out of a reconfiguration.

A reconfiguration (Alg. 4–6) takes about a millisecond of work: the control tuple reaches
every connected instance, they meet at the barrier, one of them changes the ESGs' members
and f_μ. A full (generation 2) collection of the cycle collector stops every thread for
tens of milliseconds on this machine (25–80 ms measured while the benchmarks run, growing
with the number of live container objects), and one landing inside a reconfiguration makes
it ten times slower. The executor therefore defers automatic collections from the
``reconfigure`` call until the switch is applied (:class:`GCHold`): the pause is not removed,
it happens right after, where it delays tuples as any other moment's collection would.
Reference counting keeps freeing memory meanwhile; only cycles wait. A reconfiguration that
waits a long time for its trigger (a slow source: Alg. 5's control tuple needs the next
tuple of every source) keeps collections deferred as long, which is why the executor option
``defer_gc`` can turn this off.

The Spark kernels (``spark/plan.py``, ``no_gc``) take the same hold while they allocate
millions of short-lived acyclic objects, where generation-0 passes doubled their time.

The collector's switch is process-wide, so the holds of every operator and executor in the
process are counted together; the collector is enabled again when the last hold is released,
and only if it was enabled when the first was taken (a program that disabled it itself keeps
it disabled).

Example:
    >>> import gc
    >>> hold = GCHold()
    >>> hold.acquire(); gc.isenabled()
    False
    >>> hold.release(); gc.isenabled()
    True
"""

from __future__ import annotations

import gc
import threading


class GCHold:
    """A counted hold on automatic garbage collection (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds = 0
        self._restore = False

    def acquire(self) -> None:
        with self._lock:
            if self._holds == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holds += 1

    def release(self) -> None:
        with self._lock:
            if self._holds == 0:
                raise RuntimeError("GCHold.release without a matching acquire")
            self._holds -= 1
            if self._holds == 0 and self._restore:
                gc.enable()

    @property
    def holds(self) -> int:
        return self._holds


#: the process's hold: gc.disable() is process-wide, so every executor shares one count
GC_HOLD = GCHold()

__all__ = ["GC_HOLD", "GCHold"]
