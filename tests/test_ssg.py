"""The Slack ScaleGate (determinism-latency Alg. 1–3): readiness, slack-ready flags, late
queues, exactly-once delivery under concurrency, and equality with the ESG when SLT is large."""

from __future__ import annotations

import math
import random
import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.buffers.esg import ElasticScaleGate
from stretchflow.buffers.ssg import END, SlackScaleGate


def drain(ssg, reader):
    out = []
    while True:
        got = ssg.get(reader, timeout=0)
        if got is None or got is END:
            return out
        out.append(got)


def test_ready_slack_and_late_flags():
    ssg = SlackScaleGate(["a", "b"], ["r1", "r2"], slt=10)
    ssg.insert((0, "a0"), "a")
    assert ssg.get("r1", timeout=0) is None  # b added nothing: nothing ready
    assert ssg.get_head("r1") == (0, "a0")  # getHead does not consume
    assert ssg.get_head("r1") == (0, "a0")
    ssg.insert((11, "a11"), "a")  # max_ts - 0 = 11 > SLT: slack-ready
    assert ssg.get("r1", timeout=0) == ((0, "a0"), True)
    assert ssg.get("r1", timeout=0) is None  # max_ts - 11 = 0: wait
    ssg.insert((30, "a30"), "a")
    assert ssg.get("r1", timeout=0) == ((11, "a11"), True)  # r1 is now at 11
    ssg.insert((3, "b3"), "b")  # behind r1 (late queue), ahead of r2 (ScaleGate)
    # merge_ts = 3: b3 is ready for both, but r1 gets it from its late queue
    assert ssg.get("r1", timeout=0) == ((3, "b3"), False)
    assert ssg.stats()["late"] == {"r1": 1, "r2": 0}
    assert drain(ssg, "r2") == [((0, "a0"), False), ((3, "b3"), False), ((11, "a11"), True)]
    ssg.insert((4, "b4"), "b")  # behind both readers
    ssg.insert((8, "b8"), "b")
    for r in ("r1", "r2"):
        assert drain(ssg, r) == [((4, "b4"), False), ((8, "b8"), False)]
    assert ssg.stats()["late"] == {"r1": 3, "r2": 2}
    ssg.close_writer("b")
    ssg.close_writer("a")
    for r in ("r1", "r2"):
        assert ssg.get(r, timeout=0) == ((30, "a30"), False)
        assert ssg.get(r, timeout=0) is END


def test_late_tuple_still_slack_when_not_ready():
    ssg = SlackScaleGate(["a", "b", "c"], ["r"], slt=5)
    ssg.insert((0, "c0"), "c")
    ssg.insert((20, "a20"), "a")
    ssg.insert((1, "b1"), "b")
    assert drain(ssg, "r") == [((0, "c0"), False), ((1, "b1"), True)]
    ssg.insert((2, "c2"), "c")  # c is behind: merge_ts = min(20, 1, 2) = 1 < 2
    assert ssg.get("r", timeout=0) == ((2, "c2"), True)  # ScaleGate head, slack-ready
    ssg.insert((0 + 1, "b1bis"), "b")  # behind r (at 2): late queue, ready (1 <= merge)
    assert ssg.get("r", timeout=0) == ((1, "b1bis"), False)


def test_set_slt_wakes_a_waiting_reader():
    ssg = SlackScaleGate(["a", "b"], ["r"])  # SLT = inf: ready tuples only
    ssg.insert((0, "a0"), "a")
    ssg.insert((100, "a100"), "a")
    got = []
    t = threading.Thread(target=lambda: got.append(ssg.get("r", timeout=10)))
    t.start()
    ssg.set_slt(50)  # 100 - 0 > 50: a0 becomes slack-ready
    t.join(10)
    assert got == [((0, "a0"), True)]
    with pytest.raises(ValueError, match="SLT must be"):
        ssg.set_slt(-1)


def test_bad_input_is_named():
    ssg = SlackScaleGate(["a"], ["r"])
    ssg.insert((5, "x"), "a")
    with pytest.raises(ValueError, match=r"writer 'a' went back in time from 5 to 4"):
        ssg.insert((4, "y"), "a")
    with pytest.raises(ValueError, match="'z' is not a writer"):
        ssg.insert((6, "y"), "z")
    with pytest.raises(ValueError, match="'q' is not a reader"):
        ssg.get("q")
    ssg.close_writer("a")
    with pytest.raises(ValueError, match="writer 'a' is closed"):
        ssg.insert((9, "y"), "a")


# -- model-based: any interleaving of inserts, reads and SLT changes --------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("ins"), st.integers(0, 2), st.integers(0, 7)),
        st.tuples(st.just("get"), st.integers(0, 2)),
        st.tuples(st.just("slt"), st.sampled_from([0, 1, 3, 10, math.inf])),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.sampled_from([0, 2, 10, math.inf]))
def test_exactly_once_and_correct_flags(script, slt0):
    writers, readers = ["w0", "w1", "w2"], ["r0", "r1", "r2"]
    ssg = SlackScaleGate(writers, readers, slt=slt0)
    latest = [0] * 3
    sent = []
    got = {r: [] for r in readers}
    seq = 0
    for op in script:
        if op[0] == "ins":
            _, w, step = op
            latest[w] += step
            seq += 1
            t = (latest[w], f"w{w}", seq)
            sent.append(t)
            ssg.insert(t, writers[w])
        elif op[0] == "get":
            r = readers[op[1]]
            res = ssg.get(r, timeout=0)
            if res is not None:
                t, slack = res
                # the flag is exactly "not ready at the time it was returned" (Alg. 3)
                assert slack == (not t[0] <= ssg.merge_ts())
                got[r].append(res)
        else:
            ssg.set_slt(op[1])
    for w in writers:
        ssg.close_writer(w)
    for r in readers:
        got[r].extend(drain(ssg, r))
        assert ssg.get(r, timeout=0) is END
        items = [t for t, _ in got[r]]
        assert Counter(items) == Counter(sent), "every tuple exactly once per reader"
        if not any(s for _, s in got[r]):
            # no slack-ready tuple: the reader saw the ready order, ts-sorted
            assert [t[0] for t in items] == sorted(t[0] for t in items)
    if slt0 == math.inf and not any(op[0] == "slt" for op in script):
        assert all(not s for r in readers for _, s in got[r])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5)), max_size=60))
def test_same_as_esg_with_infinite_slt(steps):
    """SLT >= max_ts - merge_ts (here inf): the SSG returns what the ESG returns."""
    ssg = SlackScaleGate(["a", "b"], ["r"])
    esg = ElasticScaleGate(["a", "b"], ["r"])
    latest = [0, 0]
    got_ssg, got_esg = [], []
    for k, (w, step) in enumerate(steps):
        latest[w] += step
        t = (latest[w], k)
        ssg.insert(t, "ab"[w])
        esg.add(t, "ab"[w])
        got_ssg.extend(t for t, slack in drain(ssg, "r") if not slack)
        while (x := esg.get("r", timeout=0)) is not None and x is not END:
            got_esg.append(x)
        assert Counter(got_ssg) == Counter(got_esg)  # same tuples ready at every step
    for w in "ab":
        ssg.close_writer(w)
        esg.close_source(w)
    got_ssg.extend(t for t, _ in drain(ssg, "r"))
    while (x := esg.get("r", timeout=0)) is not None and x is not END:
        got_esg.append(x)
    assert [t[0] for t in got_ssg] == [t[0] for t in got_esg]
    assert Counter(got_ssg) == Counter(got_esg)


# -- concurrency: the insert race of §5.1 must not lose tuples ---------------------------------


def _stress(seed: int, n_writers: int, n_readers: int, per_writer: int) -> None:
    rng = random.Random(seed)
    writers = [f"w{i}" for i in range(n_writers)]
    readers = [f"r{i}" for i in range(n_readers)]
    ssg = SlackScaleGate(writers, readers, slt=3)
    streams = {}
    for w in writers:
        ts, s = 0, []
        for k in range(per_writer):
            ts += rng.randint(0, 4)
            s.append((ts, w, k))
        streams[w] = s
    got = {r: [] for r in readers}
    errors = []
    stop = threading.Event()

    def write(w):
        try:
            s = streams[w]
            r = random.Random(hash(w) ^ seed)
            i = 0
            while i < len(s):
                n = r.randint(1, 8)
                ssg.insert_batch(s[i:i + n], w)
                i += n
            ssg.close_writer(w)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def read(r):
        while True:
            res = ssg.get_batch(r, 16, timeout=5)
            if res is END:
                return
            got[r].extend(res)

    def tune():
        r = random.Random(seed)
        while not stop.is_set():
            ssg.set_slt(r.choice([0, 1, 5, 20, math.inf]))
            stop.wait(0.0005)

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    threads += [threading.Thread(target=write, args=(w,)) for w in writers]
    tuner = threading.Thread(target=tune)
    tuner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    tuner.join()
    assert not errors
    expected = Counter(t for s in streams.values() for t in s)
    for r in readers:
        assert Counter(t for t, _ in got[r]) == expected, f"reader {r} lost or duplicated"
    st_ = ssg.stats()
    assert sum(st_["ready"].values()) + sum(st_["slack_ready"].values()) \
        == n_readers * sum(expected.values())


@pytest.mark.parametrize("seed", range(4))
def test_no_tuple_lost_under_concurrency(seed):
    _stress(seed, n_writers=3, n_readers=4, per_writer=1500)
