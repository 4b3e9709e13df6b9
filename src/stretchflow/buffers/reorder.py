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
V = TypeVar("V")

# A unique sentinel, so that an empty unit (``[]`` or ``()``) is a real,
# non-EMPTY slot value: Fig. 4's EMPTY must differ from "no outputs".
_EMPTY: Any = type("_Empty", (), {"__repr__": lambda self: "EMPTY"})()
# No waiter needs ``next`` to reach this; far beyond any serial.
_NEVER = 1 << 62


# ---------------------------------------------------------------------------
# Atomics
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Reorder buffers
# ---------------------------------------------------------------------------


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
