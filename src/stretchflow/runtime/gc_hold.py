"""Keeping CPython's cyclic garbage collector out of a reconfiguration.

A reconfiguration (Alg. 4–6) takes about a millisecond of work: the control tuple reaches
every connected instance, they meet at the barrier, one of them changes the ESGs' members
and f_μ. A full (generation 2) collection of the cycle collector stops every thread for
tens of milliseconds on this machine (25–80 ms measured while the benchmarks run, growing
with the number of live container objects), and one landing inside a reconfiguration makes
it ten times slower. The executor therefore defers automatic collections from the
``reconfigure`` call until the switch is applied (:class:`GCHold`): the pause is not removed,
it happens right after, where it delays tuples as any other moment's collection would.
Reference counting keeps freeing memory meanwhile; only cycles wait. A reconfiguration
whose instances are slow to reach its control tuple keeps collections deferred as long,
which is why the executor option ``defer_gc`` can turn this off.

The Spark kernels (``spark/plan.py``, ``no_gc``) take the same hold while they allocate
millions of short-lived acyclic objects, where generation-0 passes doubled their time.

**The heap a run starts with** (:data:`RUN_FREEZE`, taken by ``Flow.run``): a full collection
traverses every tracked object, and the libraries a run imports (numba, pandas, pyarrow) leave
tens of thousands of them that take 65–120 ms to traverse here — most of every generation-2
pause, and the tail of a reconfiguration that a pause just delayed. ``gc.freeze()`` at the
start of a run moves the objects alive then out of the collector's generations, so the
collections during the run traverse only what the run created; ``gc.unfreeze()`` at its end
gives them back. Cyclic garbage among the frozen objects waits for the end of the run. A
program that froze objects itself (``gc.get_freeze_count() > 0``) is left alone.

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


class CountedHold:
    """A process-wide switch under counted holds (thread-safe): the first hold turns it on,
    the last release puts back what was there before; a context manager too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds = 0
        self._restore = False

    def _on(self) -> bool:
        """Turns the switch on; True if the last release must turn it off again."""
        raise NotImplementedError

    def _off(self) -> None:
        raise NotImplementedError

    def acquire(self) -> None:
        with self._lock:
            if self._holds == 0:
                self._restore = self._on()
            self._holds += 1

    def release(self) -> None:
        with self._lock:
            if self._holds == 0:
                raise RuntimeError(f"{type(self).__name__}.release without a matching acquire")
            self._holds -= 1
            if self._holds == 0 and self._restore:
                self._off()

    def __enter__(self) -> CountedHold:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def holds(self) -> int:
        return self._holds


class GCHold(CountedHold):
    """A counted hold on automatic garbage collection."""

    def _on(self) -> bool:
        enabled = gc.isenabled()  # a program that disabled it keeps it disabled
        gc.disable()
        return enabled

    def _off(self) -> None:
        gc.enable()


class RunFreeze(CountedHold):
    """A counted ``gc.freeze()`` over running flows."""

    def _on(self) -> bool:
        if gc.get_freeze_count():  # objects someone else froze must not be unfrozen by us
            return False
        gc.freeze()
        return True

    def _off(self) -> None:
        gc.unfreeze()


#: the process's hold: gc.disable() is process-wide, so every executor shares one count
GC_HOLD = GCHold()
#: the heap of the running flows' start, frozen while any of them runs (gc.freeze is global)
RUN_FREEZE = RunFreeze()

__all__ = ["GC_HOLD", "RUN_FREEZE", "CountedHold", "GCHold", "RunFreeze"]
