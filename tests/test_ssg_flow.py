"""SSG flow control: a full SSG blocks its writers on a condition, never the writer holding
merge_ts back while no reader can take a tuple (deadlock freedom), late queues count, and the
bound ``held <= capacity + writers`` holds under threaded load with finite and infinite SLT."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter

import pytest

from stretchflow.buffers.esg import Aborted
from stretchflow.buffers.ssg import END, SlackScaleGate
from test_ssg import drain
from threadutil import join_all, start


def blocked(t: threading.Thread, wait: float = 0.2) -> bool:
    """True if ``t`` is still running after ``wait`` seconds (it is blocked)."""
    t.join(wait)
    return t.is_alive()


def test_bad_capacity():
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="capacity must be a positive integer"):
            SlackScaleGate(["a"], ["r"], capacity=bad)
    assert SlackScaleGate(["a"], ["r"], capacity=None).capacity is None
    assert SlackScaleGate(["a"], ["r"]).capacity == 65536


def test_full_ssg_blocks_the_writer_until_a_reader_frees_room():
    ssg = SlackScaleGate(["a"], ["r"], capacity=4)
    ssg.insert_batch([(i, i) for i in range(4)], "a")  # all ready: the reader can free room
    t = start(lambda: ssg.insert((4, 4), "a"))
    assert blocked(t)
    assert ssg.stats()["held"] == 4 and ssg.stats()["writer_waits"] == 1
    assert ssg.get("r", timeout=0) == ((0, 0), False)
    join_all([t], 10)
    assert [x for x, _ in drain(ssg, "r")] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert ssg.stats()["max_held"] == 4


def test_unbounded_ssg_never_blocks():
    ssg = SlackScaleGate(["a"], ["r"], capacity=None)
    ssg.insert_batch([(i, i) for i in range(10_000)], "a")
    assert ssg.stats()["held"] == 10_000


def test_writer_holding_merge_ts_is_not_blocked_by_a_full_ssg():
    """The fast writer fills the SSG with unready tuples; only the slow writer can make them
    ready, so it must be admitted (the exemption), or the SSG deadlocks."""
    ssg = SlackScaleGate(["fast", "slow"], ["r"], capacity=4)
    ssg.insert_batch([(ts, "f") for ts in (1, 2, 3, 4)], "fast")
    fast = start(lambda: ssg.insert((5, "f"), "fast"))
    assert blocked(fast)  # fast is ahead of merge_ts = -inf
    slow = start(lambda: ssg.insert((0, "s"), "slow"))  # holds merge_ts, nothing deliverable
    join_all([slow], 10)
    assert ssg.stats()["exempt_inserts"] == 1
    assert ssg.get("r", timeout=0) == ((0, "s"), False)
    assert ssg.get("r", timeout=0) is None  # 1..4 wait for slow
    # slow is at merge_ts again and no reader can take anything: admitted over capacity
    slow = start(lambda: ssg.insert((10, "s"), "slow"))
    join_all([slow], 10)
    got = [x for x, _ in drain(ssg, "r")]
    join_all([fast], 10)  # the reader freed room
    got += [x for x, _ in drain(ssg, "r")]
    assert [ts for ts, _ in got] == [1, 2, 3, 4, 5]
    assert ssg.stats()["max_held"] <= 4 + 2


def test_a_writer_at_merge_ts_waits_while_a_reader_can_take_tuples():
    ssg = SlackScaleGate(["a", "b"], ["r"], capacity=3)
    ssg.insert((0, "b0"), "b")
    ssg.insert_batch([(0, "a0"), (1, "a1")], "a")  # b0 and a0 ready, a1 not
    t = start(lambda: ssg.insert((2, "b2"), "b"))  # b holds merge_ts but r can read
    assert blocked(t)
    assert [x for x, _ in drain(ssg, "r")] == [(0, "b0"), (0, "a0")]
    join_all([t], 10)  # r has nothing deliverable left: b is exempt (and there is room)
    assert ssg.get("r", timeout=0) == ((1, "a1"), False)


def test_finite_slt_lets_the_fast_writer_advance_past_a_silent_one():
    """Slack-ready tuples are deliverable: the reader frees room although the slow writer
    never writes, as long as the SLT span fits in the capacity."""
    ssg = SlackScaleGate(["fast", "slow"], ["r"], slt=5, capacity=8)
    got = []

    def read():
        while (x := ssg.get_batch("r", 4, timeout=10)) is not END:
            got.extend(x)
            if not x:
                return

    fast = start(lambda: [ssg.insert((ts, "f"), "fast") for ts in range(200)])
    reader = start(read)
    join_all([fast], 20)
    assert ssg.stats()["max_held"] <= 8 + 2
    ssg.close_writer("slow")
    ssg.close_writer("fast")
    join_all([reader], 20)
    assert [x[0] for x, _ in got] == list(range(200))
    # every tuple but the last max_held ones was read before the close: slack-ready
    assert all(slack for (ts, _), slack in got if ts < 200 - 10)
    assert ssg.stats()["writer_waits"] > 0


def test_late_queues_count_toward_the_bound():
    ssg = SlackScaleGate(["a", "b"], ["r1", "r2"], slt=0, capacity=7)
    ssg.insert_batch([(10, 0), (11, 0), (12, 0)], "a")
    assert len(drain(ssg, "r1")) == 2  # slack-ready 10, 11: r1 is at 11
    ssg.insert_batch([(1, 1), (2, 1)], "b")  # behind r1 (its late queue), ahead of r2
    st_ = ssg.stats()
    assert st_["late_queued"] == {"r1": 2, "r2": 0}
    # each b tuple costs two entries: the log (for r2) and r1's late queue
    assert st_["held"] == 3 + 2 + 2 == st_["max_held"]
    t = start(lambda: ssg.insert((3, 1), "b"))
    assert blocked(t)  # it would cost 2 > room 0, and readers can read: b waits
    drain(ssg, "r1")
    drain(ssg, "r2")
    join_all([t], 10)


def test_removed_writer_blocked_in_insert_gets_an_error():
    ssg = SlackScaleGate(["a", "b"], ["r"], capacity=3)
    ssg.insert((0, 0), "b")
    ssg.insert_batch([(0, 0), (1, 1)], "a")
    errors = []

    def insert():
        try:
            ssg.insert((2, 2), "a")
        except ValueError as e:
            errors.append(e)

    t = start(insert)
    assert blocked(t)
    assert ssg.remove_writers(["a"])
    join_all([t], 10)
    assert "writer 'a' was removed while waiting" in str(errors[0])
    assert [x[0] for x, _ in drain(ssg, "r")] == [0, 0]  # b (at 0) still holds merge_ts
    ssg.close_writer("b")
    assert [x[0] for x, _ in drain(ssg, "r")] == [1]  # what a wrote is kept
    assert ssg.get("r", timeout=0) is END


def test_abort_wakes_blocked_writers_and_readers():
    ssg = SlackScaleGate(["a", "b"], ["r1", "r2"], capacity=2)
    ssg.insert_batch([(0, 0), (1, 1)], "a")
    errors = []

    def call(fn):
        try:
            fn()
        except Aborted as e:
            errors.append(e)

    ts_ = [start(lambda: call(lambda: ssg.insert((2, 2), "a"))),
           start(lambda: call(lambda: ssg.get("r1")))]
    assert blocked(ts_[0]) and blocked(ts_[1], 0)
    ssg.abort(RuntimeError("boom"))
    join_all(ts_, 10)
    assert len(errors) == 2
    with pytest.raises(Aborted):
        ssg.get_batch("r2", 5)


def test_batch_is_admitted_in_parts_and_validated_first():
    ssg = SlackScaleGate(["a"], ["r"], capacity=4)
    with pytest.raises(ValueError, match=r"writer 'a' went back in time from 5 to 3"):
        ssg.insert_batch([(1, 0), (5, 0), (3, 0)], "a")
    assert ssg.stats()["held"] == 0  # nothing of the unsorted run was added
    got = []
    reader = start(lambda: got.extend(
        x for b in iter(lambda: ssg.get_batch("r", 3, timeout=10), END) for x in b))
    ssg.insert_batch([(i, i) for i in range(50)], "a")
    ssg.close_writer("a")
    join_all([reader], 10)
    assert [x for x, _ in got] == [(i, i) for i in range(50)]
    assert ssg.stats()["max_held"] <= 4 + 1


# -- threaded stress: many writers and readers, small capacity --------------------------------


def stress(seed: int, n_writers: int, n_readers: int, per_writer: int, capacity: int,
           slts: list[float]) -> dict:
    rng = random.Random(seed)
    writers = [f"w{i}" for i in range(n_writers)]
    readers = [f"r{i}" for i in range(n_readers)]
    ssg = SlackScaleGate(writers, readers, slt=slts[0], capacity=capacity)
    streams = {}
    for w in writers:
        ts, s = 0, []
        speed = rng.choice([1, 2, 5])  # writers advance at different speeds: skew
        for k in range(per_writer):
            ts += rng.randint(0, speed)
            s.append((ts, w, k))
        streams[w] = s
    got = {r: [] for r in readers}
    errors: list[BaseException] = []
    stop = threading.Event()
    held_seen = []

    def write(w):
        try:
            s = streams[w]
            r = random.Random(f"{w}{seed}")
            i = 0
            while i < len(s):
                n = r.randint(1, 6)
                if n == 1:
                    ssg.insert(s[i], w)
                else:
                    ssg.insert_batch(s[i:i + n], w)
                i += n
                if r.random() < 0.01:
                    time.sleep(0.001)  # a writer lagging now and then
            ssg.close_writer(w)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def read(r):
        rr = random.Random(f"{r}{seed}")
        try:
            while True:
                res = ssg.get_batch(r, rr.randint(1, 8), timeout=20)
                if res is END:
                    return
                assert res, f"reader {r} timed out (deadlock?)"
                m = ssg.merge_ts()
                for t, slack in res:
                    if not slack:  # ready when returned, and merge_ts never goes back
                        assert t[0] <= m
                got[r].extend(res)
                if rr.random() < 0.02:
                    time.sleep(0.001)  # slow reader: writers must block
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def tune():
        r = random.Random(seed)
        while not stop.is_set():
            ssg.set_slt(r.choice(slts))
            held_seen.append(ssg.stats()["held"])
            stop.wait(0.002)

    threads = [threading.Thread(target=read, args=(r,), daemon=True) for r in readers]
    threads += [threading.Thread(target=write, args=(w,), daemon=True) for w in writers]
    tuner = threading.Thread(target=tune, daemon=True)
    tuner.start()
    for t in threads:
        t.start()
    try:
        join_all(threads, 90)
    finally:
        stop.set()
        tuner.join(5)
    assert not errors, errors[0]
    expected = Counter(t for s in streams.values() for t in s)
    for r in readers:
        assert Counter(t for t, _ in got[r]) == expected, f"reader {r} lost or duplicated"
        if all(s == math.inf for s in slts):
            assert not any(s for _, s in got[r])
            assert [t[0] for t, _ in got[r]] == sorted(t[0] for t in expected)
    st_ = ssg.stats()
    bound = capacity + n_writers * n_readers  # the documented bound
    assert st_["max_held"] <= bound, st_
    assert st_["max_size"] <= bound + st_["gc_every"] - 1, st_
    assert max(held_seen, default=0) <= bound
    return st_


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("slts", [[math.inf], [0, 3, 20, math.inf]], ids=["inf", "finite"])
def test_stress_small_capacity(seed, slts, frequent_switches):
    st_ = stress(seed, n_writers=4, n_readers=3, per_writer=600, capacity=8, slts=slts)
    assert st_["writer_waits"] > 0  # the bound was hit and writers blocked


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_stress_many_threads(seed, frequent_switches):
    stress(seed, n_writers=8, n_readers=6, per_writer=1500, capacity=16,
           slts=[0, 1, 5, 50, math.inf])
