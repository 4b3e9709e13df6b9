"""Tests of the partitioned and hybrid queues (ordered-multicore paper, §4)."""

from __future__ import annotations

import doctest
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.buffers import hybrid_queue
from stretchflow.buffers.hybrid_queue import (
    HashPartitioner,
    HybridQueue,
    Lease,
    PartitionedQueue,
    QueueClosed,
    RangePartitioner,
    stable_key_bytes,
)
from stretchflow.buffers.reorder import (
    LockReorderBuffer,
    NonBlockingReorderBuffer,
    ReorderBuffer,
    SerialCounter,
)
from threadutil import JOIN, join_all, start

# every test runs with the interpreter switching threads every 10 µs (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("frequent_switches")


def test_doctests() -> None:
    result = doctest.testmod(hybrid_queue)
    assert result.attempted > 0 and result.failed == 0




# -- partitioners --------------------------------------------------------------


def test_hash_partitioner_is_stable_across_processes() -> None:
    keys = ["alpha", "#tag", "ünïcode", b"raw", 12345, -7, 2.5, ("a", 1), None]
    code = (
        "from stretchflow.buffers.hybrid_queue import HashPartitioner as H;"
        f"print([H(97)(k) for k in {keys!r}])"
    )
    seen = set()
    for seed in ("1", "2", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        seen.add(res.stdout.strip())
    assert seen == {str([HashPartitioner(97)(k) for k in keys])}


def test_equal_keys_share_a_bucket() -> None:
    part = HashPartitioner(1000)
    assert part(1) == part(1.0) == part(True)
    assert stable_key_bytes("1") != stable_key_bytes(1)
    assert len({part(f"k{i}") for i in range(5000)}) > 900  # spreads keys


def test_range_partitioner() -> None:
    part = RangePartitioner.uniform(-1.0, 1.0, 100)
    assert part.num_buckets == 100
    assert part(-5.0) == 0 and part(5.0) == 99 and part(0.0) == 50
    with pytest.raises(ValueError):
        RangePartitioner([1, 1])
    q = HybridQueue(partitioner=part)
    assert q.num_buckets == 100
    with pytest.raises(ValueError, match="not in"):
        HybridQueue(num_buckets=2, partitioner=lambda k: 5).put("x", key=0)


# -- instrumentation shared by the concurrent tests ------------------------------


class Monitor:
    """Checks bucket exclusivity and records each key's processing order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[int, int] = {}
        self.violations: list[tuple[int, int, int]] = []
        self.seen: dict[object, list[int]] = defaultdict(list)

    def process(self, wid: int, lease: Lease, key_of: Callable, seq_of: Callable) -> None:
        with self.lock:
            other = self.holder.get(lease.bucket)
            if other is not None:
                self.violations.append((lease.bucket, other, wid))
            self.holder[lease.bucket] = wid
        for item in lease.items:
            # Appending without the monitor lock is itself a check: only the
            # bucket's single active worker touches its keys' lists.
            self.seen[key_of(item)].append(seq_of(item))
        with self.lock:
            if self.holder.get(lease.bucket) == wid:
                del self.holder[lease.bucket]


def make_items(n: int, n_keys: int, skew: float, seed: int) -> list[tuple[int, int]]:
    """(key, per-key sequence number); with skew > 0, key 0 is hot."""
    rng = random.Random(seed)
    per_key: Counter[int] = Counter()
    items = []
    for _ in range(n):
        k = 0 if rng.random() < skew else rng.randrange(n_keys)
        items.append((k, per_key[k]))
        per_key[k] += 1
    return items


def run_hybrid(
    items: list[tuple[int, int]],
    *,
    n_workers: int,
    num_buckets: int,
    max_batch: int,
    capacity: int,
    seed: int,
    max_delay: float = 0.0001,
) -> Monitor:
    q: HybridQueue[tuple[int, int]] = HybridQueue(
        num_buckets, capacity=capacity, max_batch=max_batch
    )
    mon = Monitor()
    errors: list[BaseException] = []

    def worker(wid: int) -> None:
        rng = random.Random(seed + wid)
        try:
            while (lease := q.take(timeout=JOIN)) is not None:
                while lease is not None:
                    if rng.random() < 0.3:  # random delays: other interleavings
                        time.sleep(rng.random() * max_delay)
                    mon.process(wid, lease, lambda it: it[0], lambda it: it[1])
                    lease = q.release(lease)
        except BaseException as exc:
            errors.append(exc)

    def producer() -> None:
        try:
            for i in range(0, len(items), 7):
                chunk = items[i : i + 7]
                if i % 2:
                    q.put_many([(it, it[0]) for it in chunk], timeout=JOIN)
                else:
                    for it in chunk:
                        q.put(it, it[0], timeout=JOIN)
            q.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [start(lambda w=w: worker(w)) for w in range(n_workers)]
    join_all([start(producer), *threads])
    assert not errors, errors
    assert q.finished and len(q) == 0
    assert mon.violations == [], "two workers held one bucket"
    expected: dict[int, list[int]] = defaultdict(list)
    for k, s in items:
        expected[k].append(s)
    # per-key FIFO, nothing lost, nothing duplicated
    assert dict(mon.seen) == dict(expected)
    return mon


# -- hybrid queue ----------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    n_workers=st.integers(1, 16),
    n_items=st.integers(0, 400),
    n_keys=st.integers(1, 40),
    num_buckets=st.integers(1, 24),
    max_batch=st.integers(1, 16),
    capacity=st.sampled_from([0, 1, 3, 50]),
    skew=st.sampled_from([0.0, 0.5, 0.95]),
    seed=st.integers(0, 2**16),
)
def test_hybrid_exclusive_fifo_exactly_once(
    n_workers: int,
    n_items: int,
    n_keys: int,
    num_buckets: int,
    max_batch: int,
    capacity: int,
    skew: float,
    seed: int,
) -> None:
    run_hybrid(
        make_items(n_items, n_keys, skew, seed),
        n_workers=n_workers,
        num_buckets=num_buckets,
        max_batch=max_batch,
        capacity=capacity,
        seed=seed,
    )


def test_hybrid_multiple_producers_serials_define_order() -> None:
    serials = SerialCounter()
    q: HybridQueue = HybridQueue(16, serials=serials, max_batch=4, capacity=64)
    n_prod, per = 4, 2000
    seen: dict[str, list[int]] = defaultdict(list)
    mon = Monitor()

    def produce(p: int) -> None:
        for i in range(per):
            q.put((p, i), key=f"k{i % 10}")

    def work(w: int) -> None:
        q.consume(
            lambda b, items: mon.process(
                w, Lease(None, b, items), lambda it: f"k{it[1][1] % 10}", lambda it: it[0]
            )
        )

    workers = [start(lambda w=w: work(w)) for w in range(8)]
    join_all([start(lambda p=p: produce(p)) for p in range(n_prod)])
    q.close()
    join_all(workers)
    assert mon.violations == []
    seen = mon.seen
    assert sorted(s for v in seen.values() for s in v) == list(range(1, n_prod * per + 1))
    # the queue stamps serials under its lock, so per key they are processed increasing
    assert all(v == sorted(v) for v in seen.values())


def test_hybrid_hot_bucket_does_not_stall_the_others() -> None:
    """§4.3 progress under skew: while the hot bucket's active worker is stuck,
    the other workers keep taking the other buckets (delegating hot ids)."""
    q: HybridQueue = HybridQueue(
        num_buckets=8, partitioner=lambda k: 0 if k == "hot" else 1 + k % 7
    )
    cold_total = 200
    cold_done = threading.Semaphore(0)
    processed: list[object] = []
    lock = threading.Lock()

    def operate(bucket: int, items: list) -> None:
        for key, i in items:
            if key == "hot" and i == 0:
                # the hot worker waits until every cold item is done
                for _ in range(cold_total):
                    assert cold_done.acquire(timeout=JOIN), "cold buckets made no progress"
            with lock:
                processed.append((key, i))
            if key != "hot":
                cold_done.release()

    for i in range(cold_total):
        q.put(("hot", i), "hot")  # hot ids first: they are ahead in the master queue
        q.put((i, i), i)
    q.close()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            q.consume(operate)
        except BaseException as exc:
            errors.append(exc)

    join_all([start(work) for _ in range(3)])
    assert not errors, errors
    assert len(processed) == 2 * cold_total
    assert [i for k, i in processed if k == "hot"] == list(range(cold_total))


def test_hybrid_picks_buckets_in_arrival_order_and_delegates() -> None:
    q: HybridQueue = HybridQueue(num_buckets=3, partitioner=lambda k: k, max_batch=10)
    for i, k in enumerate([0, 1, 0, 2, 0]):
        q.put(i, k)
    a = q.take()
    assert (a.bucket, a.items) == (0, [0])  # stops at the first id needing a new worker
    b = q.take()
    assert (b.bucket, b.items) == (1, [1])  # absorbed the 0 that followed: delegated
    c = q.take()
    assert (c.bucket, c.items) == (2, [3])
    assert q.take(timeout=0) is None  # the last 0 is owed to a's worker
    assert q.release(b) is None and q.release(c) is None
    nxt = q.release(a)
    assert nxt is not None and (nxt.bucket, nxt.items) == (0, [2, 4])
    assert q.release(nxt) is None
    with pytest.raises(ValueError):
        q.release(nxt)  # double release


def test_hybrid_capacity_blocks_put() -> None:
    q: HybridQueue = HybridQueue(num_buckets=4, capacity=2)
    q.put("a", 1)
    q.put("b", 2)
    with pytest.raises(TimeoutError):
        q.put("c", 3, timeout=0.05)
    t = start(lambda: q.put("c", 3, timeout=JOIN))
    t.join(0.05)
    assert t.is_alive() and len(q) == 2
    lease = q.take()
    join_all([t])
    assert len(q) == 2
    assert q.release(lease) is None


def test_hybrid_close_and_abort() -> None:
    q: HybridQueue = HybridQueue(num_buckets=4)
    got: list[object] = []
    t = start(lambda: got.append(q.take(timeout=JOIN)))
    t.join(0.05)
    q.close()
    join_all([t])
    assert got == [None] and q.finished
    with pytest.raises(QueueClosed):
        q.put("x", 1)

    q2: HybridQueue = HybridQueue(num_buckets=4, capacity=1)
    q2.put("x", 1)
    blocked: list[BaseException] = []

    def put_more() -> None:
        try:
            q2.put("y", 2, timeout=JOIN)
        except BaseException as exc:
            blocked.append(exc)

    t2 = start(put_more)
    t2.join(0.05)
    q2.abort()
    join_all([t2])
    assert [type(e) for e in blocked] == [QueueClosed]
    assert q2.take(timeout=0) is None and len(q2) == 0


# -- partitioned queue -----------------------------------------------------------


def test_partitioned_queue_enforces_one_worker_per_bucket() -> None:
    q: PartitionedQueue = PartitionedQueue(num_buckets=2, partitioner=lambda k: k % 2)
    q.put("a", 0)
    lease = q.take(0)
    with pytest.raises(RuntimeError, match="already leased"):
        q.take(0, timeout=0)
    assert q.take(1, timeout=0.01) is None  # empty bucket: timeout
    q.release(lease)
    with pytest.raises(ValueError):
        q.release(lease)


def test_partitioned_queue_threads_fifo_exactly_once() -> None:
    n_workers = 8
    items = make_items(20_000, 50, 0.3, seed=5)
    q: PartitionedQueue = PartitionedQueue(n_workers, capacity=500, max_batch=16)
    mon = Monitor()

    def worker(b: int) -> None:
        while (lease := q.take(b, timeout=JOIN)) is not None:
            mon.process(b, lease, lambda it: it[0], lambda it: it[1])
            q.release(lease)

    workers = [start(lambda b=b: worker(b)) for b in range(n_workers)]
    for i in range(0, len(items), 100):
        q.put_many([(it, it[0]) for it in items[i : i + 100]], timeout=JOIN)
    q.close()
    join_all(workers)
    expected: dict[int, list[int]] = defaultdict(list)
    for k, s in items:
        expected[k].append(s)
    assert mon.violations == [] and dict(mon.seen) == dict(expected)


# -- a partitioned-stateful operator: hybrid queue + reorder buffer (§5) ----------


@pytest.mark.parametrize("capacity", [1, 64])
@pytest.mark.parametrize("kind", [LockReorderBuffer, NonBlockingReorderBuffer])
def test_ps_operator_output_equals_sequential_run(kind: type[ReorderBuffer], capacity: int) -> None:
    """Running count per key, emitted when the count is even (so some inputs
    have no output): the ordered parallel run must equal the sequential one.
    Capacity 1 checks that flow control cannot deadlock behind the hybrid queue."""
    items = make_items(5000, 30, 0.4, seed=9)
    expected: list[tuple[int, int]] = []
    counts: Counter[int] = Counter()
    for k, _ in items:
        counts[k] += 1
        if counts[k] % 2 == 0:
            expected.append((k, counts[k]))

    out: list[tuple[int, int]] = []
    buf = kind(out.extend, capacity=capacity)
    q: HybridQueue = HybridQueue(16, serials=SerialCounter(), max_batch=8)
    state: Counter[int] = Counter()  # per-key state, exclusive through the queue

    def operate(bucket: int, batch: list) -> None:
        for serial, (k, _) in batch:
            state[k] += 1
            buf.send(serial, [(k, state[k])] if state[k] % 2 == 0 else [], timeout=JOIN)

    workers = [start(lambda: q.consume(operate)) for _ in range(6)]
    for k, s in items:
        q.put((k, s), k)
    q.close()
    join_all(workers)
    assert buf.wait_emitted(len(items), timeout=JOIN)
    assert out == expected


# -- stress ----------------------------------------------------------------------


@pytest.mark.slow
def test_hybrid_stress_16_workers_50k_skewed() -> None:
    t0 = time.monotonic()
    run_hybrid(
        make_items(50_000, 500, 0.3, seed=1),
        n_workers=16,
        num_buckets=100,
        max_batch=32,
        capacity=4096,
        seed=1,
        max_delay=0.00002,
    )
    assert time.monotonic() - t0 < JOIN


# -- what the ordered executor's scheduler asks of the queues --------------------------------


def test_unclaimed_counts_master_ids_not_delegated_items() -> None:
    q: HybridQueue[str] = HybridQueue(num_buckets=4, partitioner=lambda k: k % 4, max_batch=1)
    q.put_many([("a0", 0), ("a1", 0), ("b0", 1)])
    assert q.unclaimed() == 3
    lease = q.take(timeout=0)  # takes a0 and absorbs a1's id (delegated to itself)
    assert lease is not None and lease.items == ["a0"] and q.unclaimed() == 1
    other = q.take(timeout=0)
    assert other is not None and other.items == ["b0"] and q.unclaimed() == 0
    assert q.take(timeout=0) is None
    assert q.release(other) is None
    nxt = q.release(lease)
    assert nxt is not None and nxt.items == ["a1"]


def test_limit_caps_a_lease() -> None:
    q: HybridQueue[int] = HybridQueue(num_buckets=2, partitioner=lambda k: 0, max_batch=50)
    q.put_many([(i, 0) for i in range(10)])
    lease = q.take(timeout=0, limit=3)  # 1 id claimed + 3 absorbed (limit), 3 items leased
    assert lease is not None and lease.items == [0, 1, 2] and q.unclaimed() == 6
    other = q.take(timeout=0, limit=2)  # bucket 0 is active: every id is delegated to it
    assert other is None and q.unclaimed() == 0
    rest = q.release(lease, limit=4)  # 7 items owed to the active worker, 4 at a time
    assert rest is not None and rest.items == [3, 4, 5, 6]
    pq: PartitionedQueue[int] = PartitionedQueue(num_buckets=2, partitioner=lambda k: k % 2)
    for i in range(6):
        pq.put(i, key=i)
    pl = pq.take(0, timeout=0, limit=2)
    assert pl is not None and pl.items == [0, 2]


def test_ready_names_an_unleased_non_empty_bucket() -> None:
    pq: PartitionedQueue[int] = PartitionedQueue(num_buckets=4, partitioner=lambda k: k)
    assert pq.ready(range(4)) is None
    pq.put(1, key=1)
    pq.put(3, key=3)
    assert pq.ready([0, 1]) == 1 and pq.ready([2, 3]) == 3
    lease = pq.take(1, timeout=0)
    assert pq.ready([0, 1]) is None
    assert lease is not None
    pq.release(lease)
