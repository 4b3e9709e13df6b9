"""SSG run-time membership (as the ESG's Table II): add/remove readers and writers while the
SSG is in use; exactly-once per reader from its start position, merge_ts never goes back
(an added writer starts at j's latest ts, the ESG's dummy), conflicting calls linearized;
a Hypothesis state machine and a threaded stress test with membership changes under load."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stretchflow.buffers.ssg import END, SlackScaleGate
from test_ssg import drain
from threadutil import join_all, start, wait_blocked


def test_new_reader_starts_where_j_is_with_its_late_queue():
    ssg = SlackScaleGate(["a", "b"], ["r"], slt=0)
    ssg.insert_batch([(10, "a10"), (11, "a11"), (12, "a12")], "a")
    assert [t for t, _ in drain(ssg, "r")] == [(10, "a10"), (11, "a11")]  # slack-ready
    ssg.insert((5, "b5"), "b")  # behind r: its late queue
    assert ssg.add_readers(["x", "y"], "r")
    assert set(ssg.readers) == {"r", "x", "y"}
    ssg.close_writer("a")
    ssg.close_writer("b")
    for reader in ("r", "x", "y"):  # each gets exactly what r gets next
        assert drain(ssg, reader) == [((5, "b5"), False), ((12, "a12"), False)]
        assert ssg.get(reader, timeout=0) is END
    assert ssg.stats()["copied_late"] == 2


def test_membership_calls_that_conflict_change_nothing():
    ssg = SlackScaleGate(["a", "b"], ["r"])
    assert not ssg.add_readers(["x"], "nobody")
    assert not ssg.add_readers(["x", "r"], "r")  # r is already a reader
    assert not ssg.remove_readers(["r", "x"])  # x is not
    assert not ssg.add_writers(["c"], "z")
    assert not ssg.add_writers(["c", "a"], "a")
    assert not ssg.remove_writers(["a", "c"])
    assert ssg.readers == ["r"] and ssg.writers == ["a", "b"]
    with pytest.raises(TypeError, match="single name"):
        ssg.add_readers("xy", "r")


def test_removed_reader_gets_end_also_when_blocked():
    ssg = SlackScaleGate(["a"], ["r", "s"])
    got = []
    t = start(lambda: got.append(ssg.get("r")))
    wait_blocked(t)
    assert ssg.remove_readers(["r"])
    join_all([t], 10)
    assert got == [END]
    assert ssg.get("r", timeout=0) is END
    assert ssg.get_head("r") is None
    with pytest.raises(ValueError, match="'q' is not a reader"):
        ssg.get("q")
    ssg.insert((1, 1), "a")
    assert ssg.get("s", timeout=0) == ((1, 1), False)


def test_removing_the_slowest_reader_frees_its_tuples():
    ssg = SlackScaleGate(["a"], ["fast", "slow"], slt=0, capacity=100)
    ssg.insert_batch([(i, i) for i in range(20)], "a")
    drain(ssg, "fast")
    assert ssg.stats()["held"] == 20  # slow has read nothing
    assert ssg.remove_readers(["slow"])
    st_ = ssg.stats()
    assert st_["held"] == 0 and st_["buffered"] == 0
    assert st_["removed_readers"] == {"ready": 0, "slack_ready": 0, "late": 0}


def test_removing_every_reader_drops_tuples_and_blocked_writers_go_on():
    ssg = SlackScaleGate(["a"], ["r"], capacity=2)
    ssg.insert_batch([(0, 0), (1, 1)], "a")
    t = start(lambda: ssg.insert_batch([(2, 2), (3, 3), (4, 4)], "a"))
    t.join(0.2)
    assert t.is_alive()
    assert ssg.remove_readers(["r"])
    join_all([t], 10)
    assert ssg.stats()["held"] == 0  # nobody can ever read them (new readers need a j)
    assert not ssg.add_readers(["x"], "r")


def test_added_writer_starts_at_j_and_does_not_unready_returned_tuples():
    ssg = SlackScaleGate(["a", "b"], ["r"])
    ssg.insert((5, "a5"), "a")
    ssg.insert((8, "b8"), "b")
    assert drain(ssg, "r") == [((5, "a5"), False)]
    assert ssg.merge_ts() == 5
    assert ssg.add_writers(["c"], "a")  # c's hidden dummy at a's latest ts, 5
    assert ssg.merge_ts() == 5 and ssg.max_ts() == 8  # nothing moved
    assert ssg.max_writer_ts["c"] == 5
    with pytest.raises(ValueError, match=r"writer 'c' went back in time from 5 to 4"):
        ssg.insert((4, "c4"), "c")
    ssg.insert((5, "c5"), "c")  # ts equal to the dummy's: allowed, and ready at once
    assert drain(ssg, "r") == [((5, "c5"), False)]
    ssg.insert((9, "a9"), "a")
    assert drain(ssg, "r") == []  # c (at 5) now holds merge_ts back
    ssg.insert((9, "c9"), "c")
    assert drain(ssg, "r") == [((8, "b8"), False)]
    for w in ("a", "b", "c"):
        ssg.close_writer(w)
    assert [t for t, _ in drain(ssg, "r")] == [(9, "a9"), (9, "c9")]
    assert ssg.get("r", timeout=0) is END


def test_writer_copying_one_that_added_nothing_holds_everything_back():
    ssg = SlackScaleGate(["a", "b"], ["r"])
    assert ssg.add_writers(["c"], "b")
    ssg.insert((1, 1), "a")
    ssg.insert((1, 1), "b")
    assert ssg.get("r", timeout=0) is None  # c counts as -inf
    assert ssg.remove_writers(["c"])  # its flush
    assert len(drain(ssg, "r")) == 2


def test_removed_writer_no_longer_holds_merge_ts_and_its_tuples_stay():
    ssg = SlackScaleGate(["a", "b"], ["r"])
    ssg.insert_batch([(1, "a1"), (7, "a7")], "a")
    ssg.insert((3, "b3"), "b")
    assert [t for t, _ in drain(ssg, "r")] == [(1, "a1"), (3, "b3")]
    assert ssg.remove_writers(["b"])
    assert ssg.merge_ts() == 7 and ssg.writers == ["a"]
    assert drain(ssg, "r") == [((7, "a7"), False)]
    with pytest.raises(ValueError, match="writer 'b' is closed"):
        ssg.insert((9, "b9"), "b")
    assert not ssg.close_writer("b")
    assert ssg.add_writers(["b"], "a")  # a removed name may join again, at a's ts
    ssg.insert((9, "b9"), "b")
    ssg.close_writer("a")
    ssg.close_writer("b")
    assert drain(ssg, "r") == [((9, "b9"), False)]
    assert ssg.get("r", timeout=0) is END
    assert not ssg.add_writers(["c"], "a")  # no writer left: none can join


@pytest.mark.parametrize("method", ["add_readers", "remove_readers", "add_writers",
                                    "remove_writers"])
def test_exactly_one_of_concurrent_conflicting_calls_wins(method, frequent_switches):
    for _ in range(20):
        ssg = SlackScaleGate(["a", "b"], ["r"])
        if method == "remove_readers":
            ssg.add_readers(["x"], "r")
        args = {"add_readers": (["x"], "r"), "remove_readers": (["x"],),
                "add_writers": (["c"], "a"), "remove_writers": (["a"],)}[method]
        results: list[bool] = []
        barrier = threading.Barrier(8)

        def call(ssg=ssg, args=args, barrier=barrier, results=results):
            barrier.wait()
            results.append(getattr(ssg, method)(*args))

        join_all([start(call) for _ in range(8)], 10)
        assert sorted(results) == [False] * 7 + [True]


# -- model-based: inserts, reads, SLT changes and membership in any order ---------------------


class Membership(RuleBasedStateMachine):
    """Model: every current reader is *owed* a multiset of tuples (everything inserted since
    it joined, the tuples its j was owed when it joined); a get must return an owed tuple
    with the right flag, and at the end everyone gets exactly what it is owed."""

    def __init__(self) -> None:
        super().__init__()
        self.ssg = SlackScaleGate(["w0", "w1"], ["r0", "r1"], slt=math.inf, capacity=None)
        self.owed = {"r0": Counter(), "r1": Counter()}
        self.sorted_ok = {"r0": True, "r1": True}  # no slack read (also by its j): ts-sorted
        self.last_ts = {"r0": -math.inf, "r1": -math.inf}
        self.latest = {"w0": 0, "w1": 0}
        self.names = 2
        self.seq = 0
        self.merge = -math.inf

    @rule(w=st.integers(0, 5), step=st.integers(0, 4))
    def insert(self, w, step):
        ws = sorted(self.latest)
        name = ws[w % len(ws)]
        ts = self.latest[name] + step
        self.latest[name] = ts
        self.seq += 1
        t = (ts, name, self.seq)
        self.ssg.insert(t, name)
        for r in self.owed:
            self.owed[r][t] += 1

    @rule(r=st.integers(0, 5), n=st.integers(1, 4))
    def get(self, r, n):
        rs = sorted(self.owed)
        if not rs:
            return
        name = rs[r % len(rs)]
        res = self.ssg.get_batch(name, n, timeout=0)
        if res is END:
            assert not self.owed[name] and not self.latest
            return
        for t, slack in res:
            assert self.owed[name][t] > 0, f"{name} got {t} twice or never owed"
            self.owed[name][t] -= 1
            assert slack == (not t[0] <= self.ssg.merge_ts())  # Alg. 3 flags
            if slack:
                self.sorted_ok[name] = False
            elif self.sorted_ok[name]:
                assert t[0] >= self.last_ts[name], "ready tuples out of ts order"
            self.last_ts[name] = max(self.last_ts[name], t[0])

    @rule(slt=st.sampled_from([0, 1, 3, 10, math.inf]))
    def set_slt(self, slt):
        self.ssg.set_slt(slt)

    @rule(j=st.integers(0, 5), k=st.integers(1, 2))
    def add_readers(self, j, k):
        rs = sorted(self.owed)
        jn = rs[j % len(rs)] if rs else "nobody"
        new = [f"r{self.names + i}" for i in range(k)]
        ok = self.ssg.add_readers(new, jn)
        assert ok == bool(rs)
        if ok:
            self.names += k
            for x in new:
                self.owed[x] = Counter(self.owed[jn])
                self.sorted_ok[x] = self.sorted_ok[jn]
                self.last_ts[x] = self.last_ts[jn]

    @precondition(lambda self: len(self.owed) > 1)
    @rule(r=st.integers(0, 5))
    def remove_reader(self, r):
        name = sorted(self.owed)[r % len(self.owed)]
        assert self.ssg.remove_readers([name])
        del self.owed[name]
        assert self.ssg.get(name, timeout=0) is END
        assert not self.ssg.remove_readers([name])

    @precondition(lambda self: self.latest)
    @rule(j=st.integers(0, 5))
    def add_writer(self, j):
        ws = sorted(self.latest)
        jn = ws[j % len(ws)]
        new = f"w{self.names}"
        self.names += 1
        assert self.ssg.add_writers([new], jn)
        self.latest[new] = self.latest[jn]

    @precondition(lambda self: len(self.latest) > 1)
    @rule(w=st.integers(0, 5))
    def remove_writer(self, w):
        name = sorted(self.latest)[w % len(self.latest)]
        assert self.ssg.remove_writers([name])
        del self.latest[name]

    @invariant()
    def merge_ts_never_goes_back(self):
        m = self.ssg.merge_ts()
        assert m >= self.merge
        self.merge = m
        assert self.ssg.max_ts() >= m or not self.latest

    def teardown(self):
        for w in list(self.latest):
            assert self.ssg.close_writer(w)
        self.latest.clear()
        for r, owed in self.owed.items():
            for t, slack in drain(self.ssg, r):
                assert owed[t] > 0, f"{r} got {t} twice or never owed"
                owed[t] -= 1
                assert not slack  # everything is ready once every writer is closed
            assert self.ssg.get(r, timeout=0) is END
            assert not +owed, f"{r} never got {+owed}"


Membership.TestCase.settings = settings(max_examples=150, stateful_step_count=60,
                                        deadline=None)
TestMembership = Membership.TestCase


# -- threaded: membership changes under load, small capacity ----------------------------------


def membership_stress(seed: int, slts: list[float], capacity: int, per_writer: int) -> None:
    rng = random.Random(seed)
    ssg = SlackScaleGate(["w0", "w1", "w2"], ["anchor", "r1", "r2"], slt=slts[0],
                         capacity=capacity)
    lock = threading.Lock()
    inserted: Counter = Counter()
    got: dict[str, list] = {}
    expected_for: dict[str, Counter] = {}  # readers added from the anchor: their start
    removed: set[str] = set()
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    max_readers = [3]

    def write(w: str, n: int, removable: bool) -> None:
        try:
            r = random.Random(f"{w}{seed}")
            ts = ssg.max_writer_ts[w]
            ts = 0 if ts == -math.inf else ts
            k = 0
            while k < n:
                if removable:  # single inserts: an error means exactly this tuple is out
                    ts += r.randint(0, 3)
                    t = (ts, w, k)
                    try:
                        ssg.insert(t, w)
                    except ValueError as e:
                        assert "removed" in str(e) or "closed" in str(e)
                        return
                    with lock:
                        inserted[t] += 1
                    k += 1
                else:
                    run = []
                    for _ in range(min(r.randint(1, 6), n - k)):
                        ts += r.randint(0, 3)
                        run.append((ts, w, k))
                        k += 1
                    ssg.insert_batch(run, w)
                    with lock:
                        inserted.update(run)
                if r.random() < 0.01:
                    time.sleep(0.001)  # a writer lagging now and then
            ssg.close_writer(w)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def read(name: str) -> None:
        rr = random.Random(f"{name}{seed}")
        out = got[name]
        try:
            while True:
                res = ssg.get_batch(name, rr.randint(1, 8), timeout=20)
                if res is END:
                    return
                assert res, f"reader {name} timed out (deadlock?)"
                out.extend(t for t, _ in res)
                if rr.random() < 0.02:
                    time.sleep(0.001)  # a slow reader now and then: writers must block
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def spawn(fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        threads.append(t)
        t.start()

    for r in ("r1", "r2"):
        got[r] = []
        spawn(read, r)
    spawn(write, "w0", per_writer, False)
    spawn(write, "w1", per_writer, False)
    spawn(write, "w2", per_writer, True)
    # the controller reads the anchor itself, so it knows exactly what a reader added from
    # the anchor is owed: everything minus what the anchor already got
    got["anchor"] = anchor = []
    names = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            res = ssg.get_batch("anchor", rng.randint(1, 16), timeout=0.002)
            if res is END:
                break
            anchor.extend(t for t, _ in res)
            x = rng.random()
            if x < 0.03 and len(expected_for) < 6:  # a bounded number of changes
                names += 1
                new = f"n{names}"
                with lock:  # no insert completes meanwhile: 'inserted' is exact
                    got[new] = []
                    assert ssg.add_readers([new], "anchor")
                    expected_for[new] = Counter(anchor)
                max_readers[0] = max(max_readers[0], len(ssg.readers))
                spawn(read, new)
            elif x < 0.04:
                victims = [n for n in expected_for if n not in removed]
                if victims and len(removed) < 3:  # the others must get everything owed
                    v = rng.choice(victims)
                    assert ssg.remove_readers([v])
                    removed.add(v)
            elif x < 0.05 and names < 12:
                ws = ssg.writers
                if ws:
                    names += 1
                    new = f"v{names}"
                    if ssg.add_writers([new], rng.choice(ws)):
                        spawn(write, new, per_writer // 4, rng.random() < 0.5)
            elif x < 0.055 and "w2" in ssg.writers:
                ssg.remove_writers(["w2"])  # under load: w2 may be blocked in insert
            elif x < 0.1:
                ssg.set_slt(rng.choice(slts))
        else:
            raise AssertionError(
                f"the anchor reader never got END (deadlock?): {ssg.stats()}, "
                f"writers {ssg.max_writer_ts}, merge {ssg.merge_ts()}, max {ssg.max_ts()}, "
                f"heads {[(r, ssg.get_head(r)) for r in ssg.readers]}, "
                f"alive {[t.name for t in threads if t.is_alive()]}")
        join_all(threads, 60)
    finally:
        stop.set()
    assert not errors, errors[0]
    for name, items in got.items():
        c = Counter(items)
        assert max(c.values(), default=1) == 1, f"{name} got a tuple twice"
        if name in removed:
            assert not c - (inserted - expected_for[name]), f"{name} got an unowed tuple"
        elif name in expected_for:
            assert c == inserted - expected_for[name], f"{name} lost or duplicated"
        else:
            assert c == inserted, f"{name} lost or duplicated"
        if all(s == math.inf for s in slts) and name not in removed:
            assert [t[0] for t in items] == sorted(t[0] for t in items)
    st_ = ssg.stats()
    print(f"readers added {len(expected_for)}, removed {len(removed)}, writers "
          f"{st_['writers_ever']}, w2 removed {'w2' not in ssg.writers}, {st_}")
    # membership changed, added readers survived to the end, writers blocked
    assert len(expected_for) > len(removed) and st_["writer_waits"] > 0
    bound = capacity + st_["writers_ever"] * max_readers[0] + st_["copied_late"]
    assert st_["max_held"] <= bound, st_
    assert st_["max_size"] <= bound + st_["gc_every"] - 1, st_


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("slts", [[math.inf], [0, 2, 10, math.inf]], ids=["inf", "finite"])
def test_membership_under_load(seed, slts, frequent_switches):
    membership_stress(seed, slts, capacity=12, per_writer=500)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 6))
def test_membership_under_load_long(seed, frequent_switches):
    membership_stress(seed, [0, 1, 5, 30, math.inf], capacity=24, per_writer=2000)
