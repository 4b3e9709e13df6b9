"""Serial numbers and reorder buffers for ordered data-parallel operators.

Implements §3 of Prasaad, Ramalingam and Rajan, *Scaling ordered stream
processing on shared-memory multicores* (arXiv 1803.11328;
``papers/ordered-multicore.txt``):

* every input of an operator gets a serial number from an atomic counter,
  starting at 1 (§3, first paragraphs); all the outputs of one input form one
  *unit* with that serial, and an input with no output still sends an *empty
  unit*, otherwise the buffer would wait for it forever;
* :class:`LockReorderBuffer` is the lock-based baseline of Fig. 2;
* :class:`NonBlockingReorderBuffer` is the non-blocking scheme of Fig. 4: a
  bounded ring of slots, an atomic ``next`` counter and an atomic flag with
  try-lock semantics, so that a worker depositing a unit never waits for the
  worker that is currently sending units downstream.

Both buffers release units to the ``emit(items)`` callback given at
construction strictly in serial order, each exactly once; ``emit`` is never
called by two threads at the same time (it is called by the thread that holds
the buffer's lock, resp. its drainer flag), so it needs no lock of its own.

Layout
------
:mod:`~stretchflow.buffers.atomics` holds the atomics (how they are correct without the
GIL), :mod:`~stretchflow.buffers.reorder_base` the serial counter, the common interface
and flow control (the entry condition, ``send`` blocking, the rule for callers),
:mod:`~stretchflow.buffers.reorder_nonblocking` the buffer of Fig. 4, and this module the
lock-based buffer of Fig. 2. Every name is importable from here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .atomics import AtomicFlag, AtomicInt, AtomicRef
from .reorder_base import (
    _EMPTY,
    ReorderBuffer,
    ReorderBufferError,
    SerialCounter,
    _deadline,
)
from .reorder_nonblocking import NonBlockingReorderBuffer

__all__ = [
    "AtomicFlag",
    "AtomicInt",
    "AtomicRef",
    "LockReorderBuffer",
    "NonBlockingReorderBuffer",
    "ReorderBuffer",
    "ReorderBufferError",
    "SerialCounter",
]

T = TypeVar("T")


class LockReorderBuffer(ReorderBuffer[T]):
    """Lock-based reordering, Fig. 2: one global lock around deposit *and* release.

    The thread that deposits unit ``next`` releases it and every consecutive
    buffered unit while holding the lock, so meanwhile every other worker
    blocks in :meth:`send` (Fig. 3) -- the baseline the non-blocking buffer
    improves on.

    >>> out = []
    >>> buf = LockReorderBuffer(out.extend, capacity=8)
    >>> buf.send(2, ["b1", "b2"]); buf.send(3, []); out
    []
    >>> buf.send(1, ["a"]); out, buf.next_serial
    (['a', 'b1', 'b2'], 4)
    """

    def __init__(
        self,
        emit: Callable[[Sequence[T]], object],
        *,
        capacity: int = 1024,
        start: int = 1,
        emit_empty: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        super().__init__(emit, capacity=capacity, start=start, emit_empty=emit_empty)
        self._next = start  # guarded by _lock
        self._slots: list[Any] = [_EMPTY] * capacity  # the waiting buffer, under _lock

    def _make_condition(self) -> threading.Condition:
        # Waiting for capacity happens under the Fig. 2 global lock itself.
        return threading.Condition(self._lock)

    def _load_next(self) -> int:
        with self._lock:  # no reliance on an unlocked read being atomic
            return self._next

    def _load_next_locked(self) -> int:
        return self._next  # _cond's lock is the global lock

    def try_send(self, serial: int, items: Sequence[T] = ()) -> bool:
        with self._lock:
            return self._send_locked(serial, items)

    def try_send_many(self, units: Sequence[tuple[int, Sequence[T]]]
                      ) -> list[tuple[int, Sequence[T]]]:
        with self._lock:  # Fig. 2 per unit, one lock acquisition for the batch
            return [u for u in units if not self._send_locked(u[0], u[1])]

    def send(self, serial: int, items: Sequence[T] = (), timeout: float | None = None) -> None:
        with self._lock:
            if self._send_locked(serial, items):
                return
            self._wait_next_locked(serial - self._capacity + 1, _deadline(timeout))
            accepted = self._send_locked(serial, items)
            assert accepted, "entry condition must hold after the wait"

    def _send_locked(self, serial: int, items: Sequence[T]) -> bool:
        self._check_error()
        self._check_serial(serial, self._next)
        cap = self._capacity
        if serial >= self._next + cap:
            return False
        slots = self._slots
        if serial != self._next:  # Fig. 2 L9-10: not the next one, buffer it
            i = serial % cap
            if slots[i] is not _EMPTY:
                raise ValueError(f"serial {serial} was already deposited")
            slots[i] = items
            return True
        try:
            self._emit_unit(items)  # L4
            self._next += 1  # L5
            while True:  # L6-8: release the buffered successors
                i = self._next % cap
                o = slots[i]
                if o is _EMPTY:
                    break
                self._emit_unit(o)
                slots[i] = _EMPTY
                self._next += 1
        except BaseException as exc:
            self._error.compare_and_set(None, exc)
            self._cond.notify_all()
            raise
        if self._next >= self._wake_at.load():
            self._cond.notify_all()
        return True
