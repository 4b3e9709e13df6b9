"""Sequentially consistent atomics for the reorder buffers of
:mod:`stretchflow.buffers.reorder` (ordered-multicore paper, §3: the proof of Theorem 3.1
assumes atomic ``next``, buffer slots and flag; Fig. 4 L2–L4).

Atomics without the GIL
-----------------------
Python has no atomic instructions, and a free-threaded CPython gives no
promise that ``x += 1`` or even a read-modify-write of a list slot is atomic.
:class:`AtomicInt`, :class:`AtomicRef` and :class:`AtomicFlag` therefore
guard each single operation (load, store, exchange, fetch-and-add,
compare-and-set) with a private :class:`threading.Lock` that is held for that
operation only and never while user code runs. Each object is then
linearizable, linearizability composes across objects, and lock
release/acquire orders memory, so together they give the sequentially
consistent atomics the proof of Theorem 3.1 assumes. "Non-blocking" here means
what the paper means by it: no worker ever waits for a lock that is held while
another worker runs user code (``emit`` or processing) -- these locks are held
for a few bytecodes.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["AtomicFlag", "AtomicInt", "AtomicRef"]

V = TypeVar("V")


class AtomicRef(Generic[V]):
    """A reference with atomic load/store/exchange and identity compare-and-set.

    The lock is held only for the single operation (see the module docstring),
    so this behaves like ``std::atomic<T*>``.

    >>> r = AtomicRef(None)
    >>> marker = object()
    >>> r.compare_and_set(None, marker), r.compare_and_set(None, 1), r.load() is marker
    (True, False, True)
    >>> r.exchange(3) is marker, r.load()
    (True, 3)
    """

    __slots__ = ("_lock", "_value")

    def __init__(self, value: V) -> None:
        self._lock = threading.Lock()
        self._value = value

    # acquire()/try/finally rather than ``with``: same guarantee, about half
    # the interpreter overhead on these hot paths.
    def load(self) -> V:
        lock = self._lock
        lock.acquire()
        try:
            return self._value
        finally:
            lock.release()

    def store(self, value: V) -> None:
        lock = self._lock
        lock.acquire()
        try:
            self._value = value
        finally:
            lock.release()

    def exchange(self, value: V) -> V:
        lock = self._lock
        lock.acquire()
        try:
            old = self._value
            self._value = value
            return old
        finally:
            lock.release()

    def compare_and_set(self, expected: V, new: V) -> bool:
        """Set to ``new`` iff the current value *is* ``expected`` (pointer CAS)."""
        lock = self._lock
        lock.acquire()
        try:
            if self._value is expected:
                self._value = new
                return True
            return False
        finally:
            lock.release()


class AtomicInt(AtomicRef[int]):
    """An integer with atomic load/store/fetch_add/compare_and_set.

    Built on a :class:`threading.Lock` held only for the one operation, so it
    is correct without the GIL and never blocks across user code. Unlike
    :class:`AtomicRef`, compare-and-set compares by value.

    >>> a = AtomicInt(5)
    >>> a.fetch_add(2), a.load()
    (5, 7)
    >>> a.compare_and_set(7, 0), a.compare_and_set(7, 1), a.load()
    (True, False, 0)
    """

    __slots__ = ()

    def __init__(self, value: int = 0) -> None:
        super().__init__(value)

    def fetch_add(self, delta: int = 1) -> int:
        """Add ``delta``; return the value *before* the addition."""
        lock = self._lock
        lock.acquire()
        try:
            old = self._value
            self._value = old + delta
            return old
        finally:
            lock.release()

    def compare_and_set(self, expected: int, new: int) -> bool:
        """Set to ``new`` iff the current value equals ``expected``."""
        lock = self._lock
        lock.acquire()
        try:
            if self._value == expected:
                self._value = new
                return True
            return False
        finally:
            lock.release()

    def __repr__(self) -> str:
        return f"AtomicInt({self.load()})"


class AtomicFlag:
    """``std::atomic_flag``: a try-lock bit, built on :meth:`AtomicInt.compare_and_set`.

    >>> f = AtomicFlag()
    >>> f.test_and_set(), f.test_and_set()   # previous values: free, then taken
    (False, True)
    >>> f.clear(); f.test_and_set()
    False
    """

    __slots__ = ("_bit",)

    def __init__(self) -> None:
        self._bit = AtomicInt(0)

    def test_and_set(self) -> bool:
        """Set the flag and return whether it was already set."""
        return not self._bit.compare_and_set(0, 1)

    def clear(self) -> None:
        self._bit.store(0)

    def is_set(self) -> bool:
        return self._bit.load() == 1
