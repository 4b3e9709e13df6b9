"""Multi-threaded stress and flow-control tests of the Elastic ScaleGate.

Every thread is joined with a timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from stretchflow.buffers.esg import END, ElasticScaleGate
from threadutil import wait_until

JOIN_S = 60.0


class Crew:
    """Threads that may start more threads; errors are collected, joins are bounded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, fn, *args) -> None:
        def target():
            try:
                fn(*args)
            except BaseException as e:
                with self.lock:
                    self.errors.append(e)

        th = threading.Thread(target=target, daemon=True)
        with self.lock:
            self.threads.append(th)
        th.start()

    def join(self, timeout: float = JOIN_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                alive = [th for th in self.threads if th.is_alive()]
            if not alive:
                break
            alive[0].join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                pytest.fail(f"{len(alive)} threads still running: deadlock or lost wake-up")
        if self.errors:
            raise self.errors[0]


def produce(esg, source, start_ts, n, seed, added, every=None, hook=None):
    """Add n tuples with non-decreasing ts (many ties), randomly as add or add_batch."""
    rng = random.Random(seed)
    ts = start_ts
    out = []
    i = 0
    while i < n:
        k = min(n - i, rng.choice((1, 1, 3, 17, 50)))
        run = []
        for _ in range(k):
            ts += rng.choice((0, 0, 1, 2, 5))
            run.append((ts, source, i))
            i += 1
        if k == 1 and rng.random() < 0.5:
            esg.add(run[0], source)
        else:
            esg.add_batch(run, source)
        out.extend(run)
        if hook is not None and every and i // every != (i - k) // every:
            hook(ts)
    assert esg.close_source(source)
    added.append(out)


def consume(esg, reader, seed, into, hook=None):
    rng = random.Random(seed)
    while True:
        if rng.random() < 0.3:
            got = esg.get(reader)
            if got is END:
                break
            into.append(got)
        else:
            got = esg.get_batch(reader, rng.randint(1, 60))
            if got is END:
                break
            into.extend(got)
        if hook is not None:
            hook(len(into))


def check_common_sequence(seq, added):
    ts = [t[0] for t in seq]
    assert ts == sorted(ts), "ready log not in timestamp order"
    assert len(set(seq)) == len(seq), "duplicates"
    assert Counter(seq) == Counter(t for run in added for t in run), "lost or invented tuples"


def test_many_sources_and_readers_with_membership_changes_under_load():
    n_src, n_rdr, n, cap = 8, 8, 2000, 64
    srcs = [f"s{i}" for i in range(n_src)]
    rdrs = [f"r{i}" for i in range(n_rdr)]
    esg = ElasticScaleGate(srcs, rdrs, capacity=cap)
    crew = Crew()
    added: list[list] = []  # list.append is atomic enough for collecting results here
    seqs: dict[str, list] = {r: [] for r in rdrs + ["late"]}
    late_start: list[int] = []
    late_start_x0: list[int] = []

    def s0_hook(last_ts):
        if not late_start_x0:
            late_start_x0.append(last_ts)
            assert esg.add_sources(["x0"], "s0")
            # The new source starts at its dummy: s0's latest ts (Lemma 3).
            crew.start(produce, esg, "x0", last_ts, n // 2, 77, added)

    for i, s in enumerate(srcs):
        crew.start(produce, esg, s, 0, n, i, added, n // 2, s0_hook if i == 0 else None)

    # Racers are not sources, so waiting at the barrier cannot stall flow control.
    n_racers = 4
    race_go = threading.Event()
    barrier = threading.Barrier(n_racers)
    race: dict[str, list[bool]] = {"add": [], "remove": []}

    def racer(i):
        race_go.wait(JOIN_S)
        barrier.wait(JOIN_S)
        race["add"].append(esg.add_sources(["x1"], srcs[i]))
        barrier.wait(JOIN_S)
        race["remove"].append(esg.remove_sources(["x1"]))

    for i in range(n_racers):
        crew.start(racer, i)

    def r0_hook(count):
        if count >= 2000:
            race_go.set()
        if not late_start and count >= 3000:
            late_start.append(count)
            assert esg.add_readers(["late"], "r0")
            crew.start(consume, esg, "late", 99, seqs["late"])

    def r1_hook(count):
        if count >= 5000 and "r6" in esg.readers():
            assert esg.remove_readers(["r6"])

    def r7_hook(count):
        if count >= 4000 and "r7" in esg.readers():
            assert esg.remove_readers(["r7"])  # a reader retires itself

    hooks = {"r0": r0_hook, "r1": r1_hook, "r7": r7_hook}
    for i, r in enumerate(rdrs):
        crew.start(consume, esg, r, 100 + i, seqs[r], hooks.get(r))
    crew.join()

    assert race["add"].count(True) == 1 and len(race["add"]) == n_racers
    assert race["remove"].count(True) == 1 and len(race["remove"]) == n_racers
    assert len(added) == n_src + 1
    full = seqs["r0"]
    check_common_sequence(full, added)
    for r in ("r1", "r2", "r3", "r4", "r5"):
        assert seqs[r] == full
    assert seqs["late"] == full[late_start[0] :]
    assert seqs["r6"] == full[: len(seqs["r6"])] and len(seqs["r6"]) < len(full)
    assert seqs["r7"] == full[: len(seqs["r7"])] and len(seqs["r7"]) >= 4000
    st = esg.stats()
    assert st["added"] == len(full) == n_src * n + n // 2
    assert st["buffered"] == 0 and st["log_len"] == 0
    assert st["max_buffered"] <= cap + n_src + 2


def test_add_next_from_many_threads_under_load():
    """Control tuples added by other threads while sources add and readers read: every
    reader gets every one of them at the same position, the log stays sorted, and none
    lands where a reader has already passed (each reader's sequence is the same)."""
    srcs, rdrs, n, cap = ["s0", "s1", "s2"], [f"r{i}" for i in range(6)], 3000, 128
    esg = ElasticScaleGate(srcs, rdrs, capacity=cap)
    crew = Crew()
    added: list[list] = []
    seqs: dict[str, list] = {r: [] for r in rdrs}
    sent: list = []

    def controller(k):
        rng = random.Random(k)
        for i in range(40):
            ctrl = (k, i)
            if esg.add_next(ctrl) is not None:
                sent.append(ctrl)
            time.sleep(rng.random() / 1000)  # requests spread over the run

    for i, s in enumerate(srcs):
        crew.start(produce, esg, s, 0, n, i, added)
    for k in range(4):
        crew.start(controller, k)
    for i, r in enumerate(rdrs):
        crew.start(consume, esg, r, 100 + i, seqs[r])
    crew.join()

    full = seqs["r0"]
    for r in rdrs[1:]:
        assert seqs[r] == full
    data = [t for t in full if t[1] in srcs]
    check_common_sequence(data, added)
    assert [t[0] for t in full] == sorted(t[0] for t in full)
    got = [t[1] for t in full if t[1] not in srcs]
    assert Counter(got) == Counter(sent) and len(sent) > 0
    for k in range(4):  # one thread's requests keep their order
        assert [c for c in got if c[0] == k] == sorted(c for c in got if c[0] == k)


@pytest.mark.parametrize("cap", [1, 2, 8])
def test_fast_and_slow_source_with_tiny_capacity_both_finish(cap):
    esg = ElasticScaleGate(["fast", "slow"], ["r1", "r2"], capacity=cap)
    crew = Crew()
    seqs: dict[str, list] = {"r1": [], "r2": []}
    n_fast = 5000

    def fast():
        for i in range(0, n_fast, 100):
            esg.add_batch([(k, "f") for k in range(i, i + 100)], "fast")
        esg.close_source("fast")

    def slow():
        for k in range(0, n_fast, 10):
            esg.add((k, "s"), "slow")
            if k % 500 == 0:
                time.sleep(0.001)  # lag behind for real
        esg.close_source("slow")

    crew.start(fast)
    crew.start(slow)
    for r in seqs:
        crew.start(consume, esg, r, hash(r), seqs[r])
    crew.join()
    assert seqs["r1"] == seqs["r2"]
    assert len(seqs["r1"]) == n_fast + n_fast // 10
    ts = [t[0] for t in seqs["r1"]]
    assert ts == sorted(ts)
    st = esg.stats()
    assert st["max_buffered"] <= cap + 2
    assert st["source_waits"] > 0


def test_memory_bounded_with_a_slow_reader():
    cap = 32
    esg = ElasticScaleGate(["a", "b", "c"], ["quick", "slow"], capacity=cap)
    crew = Crew()
    added: list[list] = []
    seqs: dict[str, list] = {"quick": [], "slow": []}
    worst = {"buffered": 0, "log": 0}
    stop = threading.Event()

    def slow_hook(count):
        if count % 200 == 0:
            time.sleep(0.002)  # a slow reader, so the quick one runs ahead

    def monitor():
        while not stop.wait(0.001):
            st = esg.stats()
            worst["buffered"] = max(worst["buffered"], st["buffered"])
            worst["log"] = max(worst["log"], st["log_len"])

    for i, s in enumerate(("a", "b", "c")):
        crew.start(produce, esg, s, 0, 3000, i, added)
    crew.start(consume, esg, "quick", 1, seqs["quick"])
    crew.start(consume, esg, "slow", 2, seqs["slow"], slow_hook)
    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    crew.join()
    stop.set()
    mon.join(JOIN_S)
    assert seqs["quick"] == seqs["slow"]
    check_common_sequence(seqs["quick"], added)
    bound = cap + 3
    assert esg.stats()["max_buffered"] <= bound
    assert worst["buffered"] <= bound
    assert worst["log"] <= 2 * bound


def test_lagging_source_is_never_blocked_by_a_source_running_ahead():
    """The fast source fills the buffer with tuples that the lagging source keeps from being
    ready; the lagging source must still get in, or nothing would ever become ready."""
    esg = ElasticScaleGate(["ahead", "behind"], ["r"], capacity=4)
    crew = Crew()
    got: list = []

    def ahead():
        esg.add_batch([(1000 + k, "a") for k in range(200)], "ahead")
        esg.close_source("ahead")

    def behind():
        # "ahead" has filled the buffer first and waits for room
        wait_until(lambda: esg.stats()["source_waits"] >= 1, JOIN_S, "'ahead' waits for room")
        for k in range(0, 3000, 3):
            esg.add((k, "b"), "behind")
        esg.close_source("behind")

    crew.start(ahead)
    crew.start(behind)
    crew.start(consume, esg, "r", 5, got)
    crew.join()
    assert len(got) == 1200
    assert [t[0] for t in got] == sorted(t[0] for t in got)
    assert esg.stats()["max_buffered"] <= 4 + 2


def _stitched(slices: dict[str, tuple[int, list]], total: int) -> list:
    """The one sequence the readers' slices (``name -> (start, tuples read)``) are parts of:
    asserts that overlapping slices agree and that together they cover all ``total``."""
    full: list = [None] * total
    for start, seq in slices.values():
        for k, t in enumerate(seq):
            if full[start + k] is None:
                full[start + k] = t
            assert full[start + k] == t, "readers disagree on the order"
    assert None not in full
    return full


@pytest.mark.slow
def test_membership_churn_readers_come_and_go():
    """Readers keep adding successors and retiring, as VSN instances do at epoch switches;
    every reader's sequence must be a contiguous slice of the one common sequence."""
    esg = ElasticScaleGate(["a", "b", "c", "d"], ["g0"], capacity=128)
    crew = Crew()
    added: list[list] = []
    slices: dict[str, tuple[int, list]] = {}
    lock = threading.Lock()
    counter = [0]

    def reader(name, start, seed):
        seq: list = []
        slices[name] = (start, seq)
        rng = random.Random(seed)
        quota = rng.randint(200, 2000)
        handed_over = False
        while True:
            got = esg.get_batch(name, rng.randint(1, 40))
            if got is END:
                return
            seq.extend(got)
            if not handed_over and len(seq) >= quota:
                # Hand over to a successor that starts exactly where this reader is.
                with lock:
                    counter[0] += 1
                    succ = f"g{counter[0]}"
                assert esg.add_readers([succ], name)
                crew.start(reader, succ, start + len(seq), seed + 1)
                handed_over = True
                if rng.random() < 0.7:
                    assert esg.remove_readers([name])

    for i, s in enumerate(("a", "b", "c", "d")):
        crew.start(produce, esg, s, 0, 6000, 10 + i, added)
    crew.start(reader, "g0", 0, 1)
    crew.join()

    full = _stitched(slices, sum(len(run) for run in added))
    check_common_sequence(full, added)
    assert len(slices) > 5


@pytest.mark.parametrize("spread", [1, 4, 32])
def test_spread_bound_under_load_with_control_tuples_and_churn(spread):
    """Readers of random speeds under a spread bound, control tuples from other threads, and
    readers handing over to successors and leaving (as VSN instances do): the spread stays
    within the bound at every moment a monitor looks, nothing deadlocks (every thread is
    joined with a timeout), and every reader's sequence is a slice of one common one."""
    srcs = ["s0", "s1", "s2"]
    esg = ElasticScaleGate(srcs, ["g0", "g1", "g2"], capacity=64, max_spread=spread)
    crew = Crew()
    added: list[list] = []
    slices: dict[str, tuple[int, list]] = {}
    lock = threading.Lock()
    counter = [2]
    spreads: list[int] = []
    done = threading.Event()

    def reader(name, start, seed):
        seq: list = []
        slices[name] = (start, seq)
        rng = random.Random(seed)
        quota = rng.randint(300, 1500)
        handed_over = False
        while True:
            got = esg.get_batch(name, rng.randint(1, 50))
            if got is END:
                return
            seq.extend(got)
            if rng.random() < 0.05:
                time.sleep(rng.random() / 500)  # a slow instance, for a while
            if not handed_over and len(seq) >= quota:
                with lock:
                    counter[0] += 1
                    succ = f"g{counter[0]}"
                assert esg.add_readers([succ], name)
                crew.start(reader, succ, start + len(seq), seed + 7)
                handed_over = True
                if rng.random() < 0.6:
                    assert esg.remove_readers([name])
                    return

    def controller():
        for i in range(30):
            esg.add_next(("ctrl", i))
            time.sleep(0.002)  # control tuples spread over the run

    def monitor():
        while not done.is_set():
            spreads.append(esg.stats()["spread"])
            time.sleep(0.0005)  # the sampling period

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    for i, s in enumerate(srcs):
        crew.start(produce, esg, s, 0, 3000, 50 + i, added)
    crew.start(controller)
    for i in range(3):
        crew.start(reader, f"g{i}", 0, 200 + i)
    try:
        crew.join()
    finally:
        done.set()
        mon.join(JOIN_S)
    assert spreads and max(spreads) <= spread
    full = _stitched(slices, max(start + len(seq) for start, seq in slices.values()))
    check_common_sequence([t for t in full if t[1] in srcs], added)
    assert esg.stats()["spread_waits"] > 0
