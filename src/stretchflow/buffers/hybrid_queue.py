"""Work queues for partitioned-stateful (PS) operators: partitioned and hybrid.

Implements §4 of Prasaad, Ramalingam and Rajan, *Scaling ordered stream
processing on shared-memory multicores* (arXiv 1803.11328;
``papers/ordered-multicore.txt``). Items carry a key; a partitioner maps the
key to one of ``p`` buckets; items of one bucket must be processed one at a
time and in arrival order (per-key order and exclusive access to the key's
state), items of different buckets in parallel.

* :class:`PartitionedQueue` -- §4.2, Fig. 6: one FIFO per bucket, each bucket
  statically owned by one worker. Simple, but a bucket without a (free) worker
  holds back every later output in the reorder buffer, and a hot bucket
  leaves its worker overloaded while others idle.
* :class:`HybridQueue` -- §4.3, Fig. 7: the same per-bucket FIFOs plus a
  *master queue* holding the bucket id of every item in arrival order (the
  single shared queue of §4.1, but of bucket ids, not tuples) and a counter
  per bucket. Any worker takes the next bucket id from the master queue; if
  that bucket has no active worker (``count[p]`` was 0) it becomes its active
  worker, otherwise it *delegates* the item to the active worker by
  incrementing ``count[p]`` and moves on to the next id. So workers pick
  buckets in arrival order (outputs reach the reorder buffer nearly in serial
  order) and a hot bucket never holds an idle worker hostage: everyone else
  keeps taking the other buckets' ids, which is how the design absorbs skew
  together with fine partitioning (the paper uses 100 buckets, §7.2.1).

Worker protocol (both queues hand out :class:`Lease` objects)::

    lease = q.take()                  # blocks while there is nothing to do
    while lease is not None:
        for item in lease.items:      # one bucket, arrival order
            process(item)
        lease = q.release(lease)      # hybrid: more delegated items of the same
                                      # bucket, or None when the bucket is done

With the hybrid queue a worker *must* keep processing while ``release``
returns a lease: it is the bucket's active worker and nobody else will take
those delegated items (Fig. 7 L14). :meth:`HybridQueue.consume` runs that loop.

Composed with a reorder buffer (§5: a PS operator), number the inputs in the
queue (``serials=SerialCounter()``: drawn under the queue lock, so serial
order is arrival order) and send each lease's units in order. Then the
reorder buffer's flow control cannot deadlock for any capacity: the input
whose serial is the buffer's ``next`` is either still in the master queue --
then every input taken so far is older, hence released, and no worker is
parked -- or owed to its bucket's active worker, all of whose earlier items
are older, hence released, so that worker reaches it and may send it.

Locking: all the state of one queue is guarded by one :class:`threading.Lock`
held for O(batch) bytecodes per call and never while user code runs. In
Python that is cheaper than Fig. 7's lock-free queues plus separate atomic
counters emulated by several locks, and it keeps the progress property the
paper proves: no worker ever waits for another worker's processing. It is
correct without the GIL (every shared field is read and written under the
lock).
"""

from __future__ import annotations

import threading
import time
import zlib
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from stretchflow.buffers.reorder import SerialCounter

__all__ = [
    "HashPartitioner",
    "HybridQueue",
    "Lease",
    "PartitionedQueue",
    "QueueClosed",
    "RangePartitioner",
    "stable_key_bytes",
]

T = TypeVar("T")


class QueueClosed(RuntimeError):
    """``put`` on a closed (or aborted) queue."""


# ---------------------------------------------------------------------------
# Partitioning
# ---------------------------------------------------------------------------


def stable_key_bytes(key: Any) -> bytes:
    """Encode a key as bytes that are the same in every process and run.

    Python's ``hash`` of ``str``/``bytes`` is salted per process
    (``PYTHONHASHSEED``), so bucket choices and hence benchmark schedules would
    change between runs. Keys equal under ``==`` across ``bool``/``int`` and
    integral ``float`` encode alike, because they address the same state.
    Other objects fall back to ``repr``, which must then be deterministic.

    >>> stable_key_bytes("ab"), stable_key_bytes(3) == stable_key_bytes(3.0)
    (b's:ab', True)
    >>> stable_key_bytes(("ab", 1))
    b't(s:ab,i:1,)'
    """
    if isinstance(key, str):
        return b"s:" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, int):  # includes bool: True == 1
        return b"i:%d" % key
    if isinstance(key, float):
        if key.is_integer():
            return b"i:%d" % int(key)
        return b"f:" + repr(key).encode()
    if isinstance(key, bytes | bytearray | memoryview):
        return b"b:" + bytes(key)
    if isinstance(key, tuple):
        return b"t(" + b"".join(stable_key_bytes(k) + b"," for k in key) + b")"
    if key is None:
        return b"n:"
    return b"r:" + repr(key).encode("utf-8", "surrogatepass")


class HashPartitioner:
    """Hash partitioning with CRC-32 of :func:`stable_key_bytes`.

    >>> part = HashPartitioner(100)
    >>> part("user-42") == HashPartitioner(100)("user-42"), 0 <= part("user-42") < 100
    (True, True)
    """

    __slots__ = ("num_buckets",)

    def __init__(self, num_buckets: int) -> None:
        if num_buckets < 1:
            raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
        self.num_buckets = num_buckets

    def __call__(self, key: Any) -> int:
        return zlib.crc32(stable_key_bytes(key)) % self.num_buckets


class RangePartitioner:
    """Range partitioning: bucket ``i`` holds keys in ``[bounds[i-1], bounds[i])``.

    ``len(bounds) + 1`` buckets; keys only need ``<``. The paper induces skew
    this way (§7.2.1: Gaussian keys range-partitioned into 100 buckets).

    >>> part = RangePartitioner([10, 20])
    >>> [part(k) for k in (-5, 10, 19, 20, 99)], part.num_buckets
    ([0, 1, 1, 2, 2], 3)
    >>> RangePartitioner.uniform(0.0, 1.0, 4)(0.6)
    2
    """

    __slots__ = ("_bounds", "num_buckets")

    def __init__(self, bounds: Sequence[Any]) -> None:
        self._bounds = list(bounds)
        if any(not a < b for a, b in zip(self._bounds, self._bounds[1:], strict=False)):
            raise ValueError("range bounds must be strictly increasing")
        self.num_buckets = len(self._bounds) + 1

    @classmethod
    def uniform(cls, low: float, high: float, num_buckets: int) -> RangePartitioner:
        """``num_buckets`` equal-width ranges over ``[low, high)``; outliers go to the ends."""
        if num_buckets < 1 or not low < high:
            raise ValueError("need num_buckets >= 1 and low < high")
        width = (high - low) / num_buckets
        return cls([low + width * i for i in range(1, num_buckets)])

    def __call__(self, key: Any) -> int:
        return bisect_right(self._bounds, key)


def _make_partitioner(
    num_buckets: int | None, partitioner: Callable[[Any], int] | None
) -> tuple[Callable[[Any], int], int]:
    if partitioner is None:
        if num_buckets is None:
            raise ValueError("give num_buckets or a partitioner")
        return HashPartitioner(num_buckets), num_buckets
    n = getattr(partitioner, "num_buckets", None) if num_buckets is None else num_buckets
    if n is None:
        raise ValueError("num_buckets is required for a partitioner without .num_buckets")
    if n < 1:
        raise ValueError(f"num_buckets must be >= 1, got {n}")
    return partitioner, n


# ---------------------------------------------------------------------------
# Leases
# ---------------------------------------------------------------------------


class Lease(Generic[T]):
    """A batch of items of one bucket, in arrival order, plus the right to process them.

    The lease is the token to hand back with ``release``. ``items`` are
    ``(serial, item)`` pairs when the queue numbers its inputs.
    """

    __slots__ = ("_owner", "bucket", "items")

    def __init__(self, owner: object, bucket: int, items: list[T]) -> None:
        self._owner: object | None = owner
        self.bucket = bucket
        self.items = items

    def __repr__(self) -> str:
        state = "live" if self._owner is not None else "released"
        return f"Lease(bucket={self.bucket}, items={len(self.items)}, {state})"


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _wait(cond: threading.Condition, deadline: float | None) -> bool:
    """Wait once on ``cond``; ``False`` when the deadline has passed."""
    if deadline is None:
        cond.wait()
        return True
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    cond.wait(remaining)
    return True


class _KeyedQueue(Generic[T]):
    """What both queues share: partitioning, bucket FIFOs, capacity, closing."""

    def __init__(
        self,
        num_buckets: int | None,
        partitioner: Callable[[Any], int] | None,
        capacity: int,
        max_batch: int,
        serials: SerialCounter | None,
    ) -> None:
        if capacity < 0 or max_batch < 1:
            raise ValueError("need capacity >= 0 (0 = unbounded) and max_batch >= 1")
        self._partition, self.num_buckets = _make_partitioner(num_buckets, partitioner)
        self.capacity = capacity
        self.max_batch = max_batch
        self._serials = serials
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._put_waiters = 0
        self._queues: list[deque[Any]] = [deque() for _ in range(self.num_buckets)]
        self._size = 0  # items in bucket FIFOs, not yet leased
        self._closed = False
        self._aborted = False

    def bucket_of(self, key: Hashable) -> int:
        """The bucket of ``key`` (validated)."""
        b = self._partition(key)
        if not 0 <= b < self.num_buckets:
            raise ValueError(
                f"partitioner mapped key {key!r} to bucket {b}, not in [0, {self.num_buckets})"
            )
        return b

    def __len__(self) -> int:
        with self._lock:
            return self._size

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def put(self, item: T, key: Hashable, timeout: float | None = None) -> int | None:
        """Append ``item`` to its key's bucket; block while the queue is full.

        Returns the item's serial when the queue numbers its inputs (the
        serial is drawn under the queue lock, so serial order *is* arrival
        order even with several producers), else ``None``. Raises
        :class:`QueueClosed` after :meth:`close` and :class:`TimeoutError`
        if no room appeared within ``timeout`` seconds.
        """
        b = self.bucket_of(key)  # user code: outside the lock
        with self._lock:
            self._wait_room_locked(_deadline(timeout))
            return self._append_locked(item, b)

    def put_many(self, pairs: Iterable[tuple[T, Hashable]], timeout: float | None = None) -> int:
        """``put`` each ``(item, key)`` in order, taking the lock once per run of room.

        Returns the number of items added (all of them unless an exception).
        """
        staged = [(item, self.bucket_of(key)) for item, key in pairs]
        deadline = _deadline(timeout)
        i = 0
        with self._lock:
            while i < len(staged):
                room = self._wait_room_locked(deadline)
                for item, b in staged[i : i + room]:
                    self._append_locked(item, b)
                i += room
        return len(staged)

    def close(self) -> None:
        """No more puts; workers drain what is left, then ``take`` returns ``None``."""
        with self._lock:
            self._closed = True
            self._wake_all_locked()

    def abort(self) -> None:
        """Stop now (a user function failed): drop queued items, wake everyone."""
        with self._lock:
            self._closed = self._aborted = True
            for q in self._queues:
                q.clear()
            self._size = 0
            self._abort_locked()
            self._wake_all_locked()

    # -- internals (caller holds _lock) -----------------------------------

    def _wait_room_locked(self, deadline: float | None) -> int:
        """Block until at least one item fits; return how many fit."""
        while True:
            if self._closed:
                raise QueueClosed("put on a closed queue")
            if not self.capacity:
                return 1 << 62
            room = self.capacity - self._size
            if room > 0:
                return room
            self._put_waiters += 1
            try:
                if not _wait(self._not_full, deadline):
                    raise TimeoutError("queue stayed full")
            finally:
                self._put_waiters -= 1

    def _append_locked(self, item: T, b: int) -> int | None:
        serial = None
        if self._serials is not None:
            serial = self._serials.next()
            item = (serial, item)  # type: ignore[assignment]
        self._queues[b].append(item)
        self._size += 1
        self._on_append_locked(b)
        return serial

    def _popleft_locked(self, b: int, k: int) -> list[Any]:
        q = self._queues[b]
        items = [q.popleft() for _ in range(k)]
        self._size -= k
        if self._put_waiters:
            self._not_full.notify(k)
        return items

    def _check_lease_locked(self, lease: Lease[T]) -> None:
        if lease._owner is not self:
            raise ValueError(f"{lease!r} is not a live lease of this queue")
        lease._owner = None

    def _on_append_locked(self, b: int) -> None:
        raise NotImplementedError

    def _abort_locked(self) -> None:
        raise NotImplementedError

    def _wake_all_locked(self) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------
# Partitioned queue (§4.2, Fig. 6)
# ---------------------------------------------------------------------------


class PartitionedQueue(_KeyedQueue[T]):
    """One FIFO per bucket, each bucket served by one worker (§4.2, Fig. 6).

    A worker names the bucket it owns in :meth:`take`; a second concurrent
    lease on the same bucket is refused, which is what makes per-bucket state
    exclusive and processing in order. With ``p`` buckets at most ``p``
    workers are useful (the paper's baseline sets ``p`` = workers).

    >>> q = PartitionedQueue(num_buckets=2, partitioner=lambda k: k % 2)
    >>> for i in range(5):
    ...     q.put(f"x{i}", key=i)
    >>> lease = q.take(bucket=0); lease.items
    ['x0', 'x2', 'x4']
    >>> q.release(lease); q.close(); q.take(bucket=0) is None
    True
    """

    def __init__(
        self,
        num_buckets: int | None = None,
        *,
        partitioner: Callable[[Any], int] | None = None,
        capacity: int = 0,
        max_batch: int = 64,
        serials: SerialCounter | None = None,
    ) -> None:
        super().__init__(num_buckets, partitioner, capacity, max_batch, serials)
        self._leased = [False] * self.num_buckets
        self._not_empty = [threading.Condition(self._lock) for _ in range(self.num_buckets)]

    @staticmethod
    def buckets_of_worker(worker: int, num_workers: int, num_buckets: int) -> range:
        """Static assignment of buckets to workers (round robin).

        >>> list(PartitionedQueue.buckets_of_worker(1, 3, 8))
        [1, 4, 7]
        """
        return range(worker, num_buckets, num_workers)

    def take(self, bucket: int, timeout: float | None = None,
             limit: int | None = None) -> Lease[T] | None:
        """Lease up to ``max_batch`` (or ``limit``) items of ``bucket``; block while empty.

        Returns ``None`` on timeout, or once the queue is closed and the bucket
        empty. Raises :class:`RuntimeError` if the bucket is already leased.
        """
        cap = self.max_batch if limit is None else max(1, limit)
        deadline = _deadline(timeout)
        with self._lock:
            if self._leased[bucket]:
                raise RuntimeError(f"bucket {bucket} is already leased by another worker")
            q = self._queues[bucket]
            while not q:
                if self._closed or not _wait(self._not_empty[bucket], deadline):
                    return None
                if self._leased[bucket]:
                    raise RuntimeError(f"bucket {bucket} is already leased by another worker")
            self._leased[bucket] = True
            return Lease(self, bucket, self._popleft_locked(bucket, min(len(q), cap)))

    def ready(self, buckets: Iterable[int]) -> int | None:
        """The first of ``buckets`` that has items and no lease, else ``None``.

        A scheduler's schedulability test for the worker owning ``buckets``
        (ordered-multicore §6: a non-empty worklist the worker may serve).
        """
        with self._lock:
            for b in buckets:
                if self._queues[b] and not self._leased[b]:
                    return b
            return None

    def release(self, lease: Lease[T]) -> None:
        """Give the bucket back (the owner then calls ``take`` again)."""
        with self._lock:
            self._check_lease_locked(lease)
            self._leased[lease.bucket] = False

    def _on_append_locked(self, b: int) -> None:
        self._not_empty[b].notify()

    def _abort_locked(self) -> None:
        pass

    def _wake_all_locked(self) -> None:
        for c in self._not_empty:
            c.notify_all()
        self._not_full.notify_all()


# ---------------------------------------------------------------------------
# Hybrid queue (§4.3, Fig. 7)
# ---------------------------------------------------------------------------


class HybridQueue(_KeyedQueue[T]):
    """Per-bucket FIFOs + a master FIFO of bucket ids + delegation counters (Fig. 7).

    >>> q = HybridQueue(num_buckets=4, partitioner=lambda k: k % 4, max_batch=8)
    >>> q.put_many([("a0", 0), ("b0", 1), ("a1", 0)])
    3
    >>> lease = q.take(); lease.bucket, lease.items
    (0, ['a0'])
    >>> other = q.take(); other.bucket, other.items   # bucket 0 is active: its id is delegated
    (1, ['b0'])
    >>> q.release(other) is None
    True
    >>> nxt = q.release(lease); nxt.items                # the active worker gets the delegated item
    ['a1']
    >>> q.release(nxt) is None, q.take(timeout=0) is None
    (True, True)
    """

    def __init__(
        self,
        num_buckets: int | None = None,
        *,
        partitioner: Callable[[Any], int] | None = None,
        capacity: int = 0,
        max_batch: int = 64,
        serials: SerialCounter | None = None,
    ) -> None:
        if num_buckets is None and partitioner is None:
            num_buckets = 100  # the paper's setting for the hybrid queue (§7.2.1)
        super().__init__(num_buckets, partitioner, capacity, max_batch, serials)
        self._master: deque[int] = deque()  # bucket id of every item, arrival order
        # Fig. 7 count[p]: master entries of p taken so far minus items of p
        # processed. Non-zero exactly while p has an active worker; it is both
        # the mutual exclusion and the number of items owed to that worker.
        self._count = [0] * self.num_buckets
        self._not_empty = threading.Condition(self._lock)
        self._take_waiters = 0

    @property
    def finished(self) -> bool:
        """Closed and every bucket id handed out: ``take`` will only return ``None``."""
        with self._lock:
            return self._closed and not self._master

    def unclaimed(self) -> int:
        """Bucket ids in the master queue: items no worker has claimed or been delegated.

        The schedulability test of ordered-multicore §6 for a PS operator: items that are
        only owed to an active worker (delegated) need no new worker, so a scheduler that
        counted them would send workers to ``take`` in vain.
        """
        with self._lock:
            return len(self._master)

    def take(self, timeout: float | None = None, limit: int | None = None) -> Lease[T] | None:
        """Become the active worker of some bucket and lease its next items.

        Blocks while the master queue is empty. Returns ``None`` on timeout
        (``timeout=0`` polls) or when the queue is closed and drained (see
        :attr:`finished`). ``limit`` caps this lease below ``max_batch`` (a
        scheduler's time slice, ordered-multicore §6).
        """
        cap = self.max_batch if limit is None else max(1, min(limit, self.max_batch))
        deadline = _deadline(timeout)
        master, count = self._master, self._count
        with self._lock:
            while True:
                while not master:
                    if self._closed:
                        return None
                    self._take_waiters += 1
                    try:
                        if not _wait(self._not_empty, deadline):
                            return None
                    finally:
                        self._take_waiters -= 1
                p = master.popleft()  # Fig. 7 L9
                c = count[p]
                count[p] = c + 1  # L10: fetch_add
                if c == 0:
                    break  # we are p's active worker
                # else: p's active worker will process this item (delegated);
                # go on with the next bucket id instead of waiting for p.
            # Absorb the ids at the head of the master queue that would be
            # delegated anyway -- our own bucket's, or an active bucket's -- as
            # a worker running L9-10 right now would. It only lengthens
            # batches; it stops at the first id that needs a new worker.
            budget = cap
            while master and budget:
                q = master[0]
                if q != p and count[q] == 0:
                    break
                master.popleft()
                count[q] += 1
                budget -= 1
            return self._lease_locked(p, cap)

    def release(self, lease: Lease[T], limit: int | None = None) -> Lease[T] | None:
        """Report a lease's items processed (Fig. 7 L14).

        Returns the next lease of the *same* bucket when items were delegated
        meanwhile -- keep processing, you are still its active worker -- or
        ``None`` when the bucket is free again.
        """
        with self._lock:
            self._check_lease_locked(lease)
            if self._aborted:
                return None
            p = lease.bucket
            left = self._count[p] - len(lease.items)  # L14: fetch_sub(k) > k
            self._count[p] = left
            if left > 0:
                cap = self.max_batch if limit is None else max(1, min(limit, self.max_batch))
                return self._lease_locked(p, cap)
            return None

    def consume(self, operate: Callable[[int, list[T]], object]) -> int:
        """Fig. 7 ``consumeInputs``: run ``operate(bucket, items)`` until closed and drained.

        Returns the number of items processed. If ``operate`` raises, the
        exception propagates and the bucket stays owned (its later items must
        not run on a half-updated state): call :meth:`abort`.
        """
        done = 0
        while (lease := self.take()) is not None:
            while lease is not None:
                operate(lease.bucket, lease.items)
                done += len(lease.items)
                lease = self.release(lease)
        return done

    def _lease_locked(self, p: int, cap: int) -> Lease[T]:
        # count[p] items of p are owed and none is leased (the active worker
        # released its last batch), and each was in partitionQueues[p] before
        # its id entered the master queue, so these pops succeed (L12).
        k = min(self._count[p], cap)
        return Lease(self, p, self._popleft_locked(p, k))

    def _on_append_locked(self, b: int) -> None:
        self._master.append(b)  # Fig. 7 L5, after the item itself (L4)
        if self._take_waiters:
            self._not_empty.notify()

    def _abort_locked(self) -> None:
        self._master.clear()
        self._count = [0] * self.num_buckets

    def _wake_all_locked(self) -> None:
        self._not_empty.notify_all()
        self._not_full.notify_all()
