"""The non-blocking reorder buffer of Fig. 4 (ordered-multicore paper, §3.2): a bounded
ring of atomic slots, an atomic ``next`` counter and an atomic flag with try-lock semantics,
so that a worker depositing a unit never waits for the worker that is currently sending
units downstream. The overview, the shared interface and flow control are in
:mod:`stretchflow.buffers.reorder` and :mod:`stretchflow.buffers.reorder_base`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from .atomics import AtomicFlag, AtomicInt, AtomicRef
from .reorder_base import _EMPTY, ReorderBuffer, _deadline

__all__ = ["NonBlockingReorderBuffer"]

T = TypeVar("T")


class NonBlockingReorderBuffer(ReorderBuffer[T]):
    """Non-blocking reordering, Fig. 4 (§3.2).

    A worker deposits its unit in slot ``t mod capacity`` (``try_add``) and
    then, whether or not that worked, tries to become the *drainer* by
    test-and-setting a flag (``send_pending_outputs``). Only the drainer
    releases units; everyone else returns at once instead of blocking behind
    it, which is the whole point against Fig. 2.

    >>> out = []
    >>> buf = NonBlockingReorderBuffer(out.extend, capacity=8)
    >>> buf.send(2, ["b1", "b2"]); buf.send(3, []); out
    []
    >>> buf.send(1, ["a"]); out, buf.next_serial
    (['a', 'b1', 'b2'], 4)
    >>> buf.try_send(12, ["too far ahead"])   # 12 >= next + capacity
    False
    """

    def __init__(
        self,
        emit: Callable[[Sequence[T]], object],
        *,
        capacity: int = 1024,
        start: int = 1,
        emit_empty: bool = False,
    ) -> None:
        super().__init__(emit, capacity=capacity, start=start, emit_empty=emit_empty)
        self._next = AtomicInt(start)  # Fig. 4 L2: atomic_long next
        self._slots = [AtomicRef(_EMPTY) for _ in range(capacity)]  # L3: atomic buffer[s]
        self._flag = AtomicFlag()  # L4: atomic_flag

    def _make_condition(self) -> threading.Condition:
        # Used only to park senders that are too far ahead (and wait_emitted);
        # depositing and draining never touch it unless someone is parked.
        return threading.Condition(threading.Lock())

    def _load_next(self) -> int:
        return self._next.load()

    _load_next_locked = _load_next  # _cond has its own lock; next is atomic

    def try_send(self, serial: int, items: Sequence[T] = ()) -> bool:
        # Fig. 4 L7-11: send = try_add, then send_pending_outputs regardless.
        self._check_error()
        success = self._try_add(serial, items)
        self._send_pending_outputs()
        return success

    def try_send_many(self, units: Sequence[tuple[int, Sequence[T]]]
                      ) -> list[tuple[int, Sequence[T]]]:
        # try_add (L13-20) for each unit, then one send_pending_outputs (L22-42) for all:
        # the drain releases every deposited unit that is ready, whoever deposited it
        self._check_error()
        try_add = self._try_add
        rejected = [u for u in units if not try_add(u[0], u[1])]
        self._send_pending_outputs()
        return rejected

    def send(self, serial: int, items: Sequence[T] = (), timeout: float | None = None) -> None:
        deadline = _deadline(timeout)
        while not self.try_send(serial, items):
            # The paper retries in a loop; we park on a condition until the
            # drainer has moved ``next`` past serial - capacity (flow control).
            with self._cond:
                self._wait_next_locked(serial - self._capacity + 1, deadline)

    def _try_add(self, serial: int, items: Sequence[T]) -> bool:
        n = self._next.load()  # L15
        self._check_serial(serial, n)
        # L16, the entry condition. It cannot turn false before the store:
        # ``next`` only passes ``serial`` after this very unit was released.
        if serial >= n + self._capacity:
            return False
        # L17-18. A CAS instead of a plain store, to reject a duplicate serial;
        # the slot is EMPTY here because it was cleared before ``next`` passed
        # serial - capacity (clear-before-increment, L33-34).
        if not self._slots[serial % self._capacity].compare_and_set(_EMPTY, items):
            raise ValueError(f"serial {serial} was already deposited")
        return True

    def _on_empty_slot(self) -> None:
        """Hook between seeing an EMPTY slot (L30) and clearing the flag (L36).

        This is the lost-wake-up window: a unit deposited right here finds the
        flag still taken, so its depositor leaves it to us. Tests override this
        to force that interleaving; it is a no-op otherwise.
        """

    def _send_pending_outputs(self) -> None:
        slots = self._slots
        nxt = self._next
        flag = self._flag
        cap = self._capacity
        emit = self._emit
        emit_empty = self._emit_empty
        # The loop replaces the tail call at L42 (no recursion depth to run out of).
        while True:
            if flag.test_and_set():  # L25: someone else is the drainer; leave it to them
                return
            while True:  # L27: send as many outputs as possible
                n = nxt.load()  # L28
                i = n % cap  # L29
                o = slots[i].load()  # L30
                if o is _EMPTY:
                    self._on_empty_slot()
                    flag.clear()  # L36
                    break
                try:
                    if emit_empty or len(o):
                        emit(o)  # L32 (an empty unit only advances the order)
                except BaseException as exc:
                    # Keep the flag set: nobody may release past a unit whose
                    # delivery failed. Everyone else now fails fast.
                    self._fail(exc)
                    raise
                slots[i].store(_EMPTY)  # L33: clear *before* increment, else a
                nxt.fetch_add(1)  # L34: unit t+cap could land in the slot and be wiped
                if n + 1 >= self._wake_at.load():
                    with self._cond:
                        self._cond.notify_all()
            # L39-41: re-check the slot we gave up on. A unit deposited between
            # L30 and L36 saw the flag taken and left; without this re-check it
            # would sit in the buffer with no drainer (the lost wake-up).
            if slots[i].load() is _EMPTY:
                return
