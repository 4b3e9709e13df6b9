"""Serial numbers, flow control and the common interface of the reorder buffers
(ordered-multicore paper, §3; :mod:`stretchflow.buffers.reorder` gives the overview).

Every input of an operator gets a serial number from an atomic counter
(:class:`SerialCounter`), starting at 1 (§3, first paragraphs); all the outputs of one
input form one *unit* with that serial, and an input with no output still sends an *empty
unit*, otherwise the buffer would wait for it forever.

Flow control (bounded capacity)
-------------------------------
A unit with serial ``t`` may enter the ring only while
``next <= t < next + capacity`` (the entry condition, Fig. 4 L16; the
lock-based buffer uses the same rule so both have the same interface).
:meth:`ReorderBuffer.try_send` returns ``False`` when ``t`` is too far ahead;
:meth:`ReorderBuffer.send` instead blocks the caller on a condition variable
until ``next`` has advanced far enough -- it never spins, unlike the paper's
"retry until it succeeds". The unit whose serial equals ``next`` is always
admissible, so the buffer always progresses provided every serial is
eventually sent. Hence the one rule for callers: *never block in* ``send``
*for serial t while your own thread still holds an unsent serial smaller than
t* (send the units you hold in increasing serial order), and size the
capacity above the usual spread of serials in flight (the paper, end of §3.2).
Behind a :class:`~stretchflow.buffers.hybrid_queue.HybridQueue` that numbers
its inputs, no capacity can deadlock (argued in that module's docstring).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .atomics import AtomicInt, AtomicRef

__all__ = ["ReorderBuffer", "ReorderBufferError", "SerialCounter"]

T = TypeVar("T")

# A unique sentinel, so that an empty unit (``[]`` or ``()``) is a real,
# non-EMPTY slot value: Fig. 4's EMPTY must differ from "no outputs".
_EMPTY: Any = type("_Empty", (), {"__repr__": lambda self: "EMPTY"})()
# No waiter needs ``next`` to reach this; far beyond any serial.
_NEVER = 1 << 62


class SerialCounter:
    """Hands out consecutive serial numbers (one counter per operator, from 1).

    The serial defines the operator's input order, so it must be drawn in the
    same atomic step that fixes that order: at enqueue by the single upstream
    producer (as in the paper, §3 and §5), or inside the same critical section
    that dequeues the input from a shared worklist. Two workers that dequeue
    first and number afterwards can swap their serials and thereby the order
    of the outputs.

    >>> c = SerialCounter()
    >>> c.next(), c.next(), list(c.take(3)), c.peek()
    (1, 2, [3, 4, 5], 6)
    """

    __slots__ = ("_n",)

    def __init__(self, start: int = 1) -> None:
        self._n = AtomicInt(start)

    def next(self) -> int:
        """Return the next serial."""
        return self._n.fetch_add(1)

    def take(self, count: int) -> range:
        """Reserve ``count`` consecutive serials at once (for a batch of inputs)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        first = self._n.fetch_add(count)
        return range(first, first + count)

    def peek(self) -> int:
        """The serial :meth:`next` would return now (racy, for monitoring)."""
        return self._n.load()


class ReorderBufferError(RuntimeError):
    """The buffer was aborted, or ``emit`` raised; no unit will be released any more."""


class ReorderBuffer(Generic[T]):
    """Common interface of the two reorder buffers (do not instantiate).

    ``emit(items)`` receives the output list of each unit, in serial order;
    empty units are skipped unless ``emit_empty`` is true. ``capacity`` is the
    number of ring slots, i.e. how far ahead of ``next`` a unit may be.
    """

    def __init__(
        self,
        emit: Callable[[Sequence[T]], object],
        *,
        capacity: int = 1024,
        start: int = 1,
        emit_empty: bool = False,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._emit = emit
        self._capacity = capacity
        self._emit_empty = emit_empty
        self._error: AtomicRef[BaseException | None] = AtomicRef(None)
        # Flow control: threads blocked until ``next`` reaches a target. The
        # releasing thread compares ``next`` with ``_wake_at`` (the smallest
        # target) and takes ``_cond`` only when someone can actually proceed,
        # so the release path costs one atomic load when nobody waits.
        self._cond = self._make_condition()
        self._targets: dict[int, int] = {}  # target -> number of waiters, under _cond
        self._wake_at = AtomicInt(_NEVER)

    # -- to be provided by subclasses ------------------------------------

    def _make_condition(self) -> threading.Condition:
        raise NotImplementedError

    def _load_next(self) -> int:
        """Read ``next`` from any thread."""
        raise NotImplementedError

    def _load_next_locked(self) -> int:
        """Read ``next`` while holding ``_cond``."""
        raise NotImplementedError

    def try_send(self, serial: int, items: Sequence[T] = ()) -> bool:
        """Deposit unit ``serial`` if it fits in the ring; never waits for capacity.

        Returns ``False`` (and keeps nothing) when ``serial >= next + capacity``.
        Raises :class:`ValueError` for a serial already released or deposited.
        """
        raise NotImplementedError

    def try_send_many(self, units: Sequence[tuple[int, Sequence[T]]]
                      ) -> list[tuple[int, Sequence[T]]]:
        """Deposit several ``(serial, items)`` units, then release what became ready.

        The same as ``try_send`` for each unit in turn, but the release step runs once for
        the batch (a worker that processed a run of inputs hands over all their units at
        once). Returns the units that did not fit in the ring (not kept), in order.
        """
        return [u for u in units if not self.try_send(u[0], u[1])]

    def send(self, serial: int, items: Sequence[T] = (), timeout: float | None = None) -> None:
        """Deposit unit ``serial``, blocking while it is too far ahead (flow control).

        Raises :class:`TimeoutError` if it could not be deposited within
        ``timeout`` seconds (the unit is then *not* in the buffer).
        """
        raise NotImplementedError

    # -- shared ------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def next_serial(self) -> int:
        """The serial of the next unit to release (all smaller ones are released)."""
        return self._load_next()

    @property
    def error(self) -> BaseException | None:
        return self._error.load()

    def wait_emitted(self, serial: int, timeout: float | None = None) -> bool:
        """Block until every unit up to ``serial`` has been released.

        Returns ``False`` on timeout. Useful at end of stream: after the last
        serial is sent, ``wait_emitted(last)`` returns once it went downstream.
        """
        try:
            with self._cond:
                self._wait_next_locked(serial + 1, _deadline(timeout))
        except TimeoutError:
            return False
        return True

    def abort(self, exc: BaseException | None = None) -> None:
        """Stop the buffer: blocked and later senders raise :class:`ReorderBufferError`."""
        self._error.compare_and_set(None, exc or ReorderBufferError("reorder buffer aborted"))
        with self._cond:
            self._cond.notify_all()

    def _check_error(self) -> None:
        err = self._error.load()
        if err is not None:
            raise ReorderBufferError("reorder buffer is stopped") from err

    def _fail(self, exc: BaseException) -> None:
        self._error.compare_and_set(None, exc)
        with self._cond:
            self._cond.notify_all()

    def _check_serial(self, serial: int, nxt: int) -> None:
        if serial < nxt:
            raise ValueError(
                f"serial {serial} was already released (next is {nxt}): duplicate serial?"
            )

    def _wait_next_locked(self, target: int, deadline: float | None) -> None:
        """Wait (holding ``_cond``) until ``next >= target``."""
        if self._load_next_locked() >= target:
            return
        targets = self._targets
        targets[target] = targets.get(target, 0) + 1
        # Publish the target *before* re-reading ``next``; the releaser
        # increments ``next`` *before* reading ``_wake_at``. With sequentially
        # consistent atomics one of the two sees the other's write, so a
        # waiter cannot miss its wake-up (the releaser then takes ``_cond``,
        # which it can only get once we are inside ``wait``).
        if target < self._wake_at.load():
            self._wake_at.store(target)
        try:
            while self._load_next_locked() < target:
                self._check_error()
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"next serial did not reach {target} in time")
                    self._cond.wait(remaining)
        finally:
            left = targets[target] - 1
            if left:
                targets[target] = left
            else:
                del targets[target]
            self._wake_at.store(min(targets) if targets else _NEVER)

    def _emit_unit(self, items: Sequence[T]) -> None:
        if self._emit_empty or len(items):
            self._emit(items)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout
