"""Unit and model-based tests of the Elastic ScaleGate (buffers/esg.py)."""

from __future__ import annotations

import doctest
import math
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from stretchflow.buffers import esg as esg_module
from stretchflow.buffers.esg import END, ElasticScaleGate
from threadutil import wait_blocked

JOIN_S = 10.0


def drain(esg: ElasticScaleGate, reader) -> tuple[list, bool]:
    """Everything ready for ``reader`` now, without blocking; and whether END was reached."""
    out: list = []
    while True:
        got = esg.get_batch(reader, 1000, timeout=0)
        if got is END:
            return out, True
        if got is None:
            return out, False
        out.extend(got)


def run_thread(fn, *args) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # reported by the test
            box["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th, box


def test_docstring_examples_run():
    result = doctest.testmod(esg_module)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- readiness


def test_single_source_tuple_is_ready_at_once():
    esg = ElasticScaleGate(["a"], ["r"])
    assert esg.watermark("r") is None
    esg.add((7, "x"), "a")
    assert esg.get("r", timeout=0) == (7, "x")
    assert esg.watermark("r") == 7


def test_ready_is_ts_at_most_min_of_latest_per_source():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add_batch([(1, "a1"), (2, "a2"), (3, "a3")], "a")
    assert esg.get("r", timeout=0) is None
    esg.add((2, "b2"), "b")
    assert drain(esg, "r") == ([(1, "a1"), (2, "a2"), (2, "b2")], False)
    esg.add((3, "b3"), "b")
    # a3 and b3 become ready in the same step: source rank breaks the tie, not arrival.
    assert drain(esg, "r") == ([(3, "a3"), (3, "b3")], False)


def test_tie_rank_follows_registration_order():
    esg = ElasticScaleGate(["b", "a"], ["r"])
    esg.add((3, "a3"), "a")
    esg.add((3, "b3"), "b")
    assert drain(esg, "r")[0] == [(3, "b3"), (3, "a3")]


def test_ties_across_steps_follow_readiness_order():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((5, "a5"), "a")
    esg.add((5, "b5"), "b")
    # W == 5 now, so more tuples at ts 5 are ready as they arrive, after the earlier ones.
    esg.add((5, "b5x"), "b")
    esg.add((5, "a5x"), "a")
    assert drain(esg, "r")[0] == [(5, "a5"), (5, "b5"), (5, "b5x"), (5, "a5x")]


def test_last_tuple_ready_when_others_pass_it():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((10, "a10"), "a")
    esg.add((5, "b5"), "b")
    assert drain(esg, "r")[0] == [(5, "b5")]
    esg.add((9, "b9"), "b")
    assert drain(esg, "r")[0] == [(9, "b9")]
    esg.add((10, "b10"), "b")  # b reaches a's last ts: a10 is ready without a adding more
    assert drain(esg, "r")[0] == [(10, "a10"), (10, "b10")]


def test_last_tuple_ready_when_other_source_closes():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((10, "a10"), "a")
    esg.add((5, "b5"), "b")
    assert drain(esg, "r")[0] == [(5, "b5")]
    assert esg.close_source("b")
    assert drain(esg, "r")[0] == [(10, "a10")]


def test_source_that_added_nothing_holds_readiness_back():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add_batch([(1, "a1"), (2, "a2")], "a")
    assert esg.get("r", timeout=0) is None
    assert esg.stats()["frontier"] == -math.inf
    assert esg.remove_sources(["b"])
    assert drain(esg, "r")[0] == [(1, "a1"), (2, "a2")]


def test_end_after_all_sources_closed_and_consumed():
    esg = ElasticScaleGate(["a", "b"], ["r", "q"])
    esg.add((1, "a1"), "a")
    esg.add((4, "b4"), "b")
    assert esg.close_source("a")
    assert esg.get("r", timeout=0) == (1, "a1")
    assert esg.close_source("b")
    assert esg.get("r") == (4, "b4")
    assert esg.get("r") is END
    assert esg.get("r", timeout=0) is END
    assert esg.get_batch("r", 5) is END
    assert esg.get_batch("q", 5) == [(1, "a1"), (4, "b4")]
    assert esg.get_batch("q", 5) is END
    assert repr(END) == "END"


def test_no_sources_is_end_at_once():
    esg = ElasticScaleGate([], ["r"])
    assert esg.get("r") is END
    assert esg.stats()["frontier"] == math.inf


def test_timeout_returns_none():
    esg = ElasticScaleGate(["a"], ["r"])
    t0 = time.monotonic()
    assert esg.get("r", timeout=0.05) is None
    assert esg.get_batch("r", 3, timeout=0.05) is None
    assert time.monotonic() - t0 >= 0.09
    assert esg.get("r", timeout=0) is None
    st_ = esg.stats()
    assert st_["reader_waits"] >= 2 and st_["reader_wait_s"] > 0.05


def test_blocked_get_wakes_on_add_and_on_close():
    esg = ElasticScaleGate(["a"], ["r"])
    th, box = run_thread(esg.get, "r")
    wait_blocked(th)
    esg.add((3, "x"), "a")
    th.join(JOIN_S)
    assert box == {"result": (3, "x")}
    assert esg.stats()["reader_waits"] == 1  # it did wait: the add woke it
    th, box = run_thread(esg.get_batch, "r", 10)
    wait_blocked(th)
    esg.close_source("a")
    th.join(JOIN_S)
    assert box["result"] is END
    assert esg.stats()["reader_waits"] == 2


# ---------------------------------------------------------------- errors


def test_unknown_source_and_reader():
    esg = ElasticScaleGate(["a"], ["r"])
    with pytest.raises(ValueError, match="unknown source 'zz'"):
        esg.add((1, None), "zz")
    with pytest.raises(ValueError, match="unknown source 'zz'"):
        esg.add_batch([(1, None)], "zz")
    for call in (lambda: esg.get("q"), lambda: esg.get_batch("q", 1), lambda: esg.watermark("q")):
        with pytest.raises(ValueError, match="unknown reader 'q'"):
            call()
    esg.close_source("a")
    with pytest.raises(ValueError, match="unknown source 'a'"):
        esg.add((2, None), "a")


def test_timestamp_going_back_is_rejected_with_names():
    esg = ElasticScaleGate(["src-A"], ["r"])
    esg.add((10, "x"), "src-A")
    with pytest.raises(ValueError, match=r"'src-A'.*9.*previous timestamp 10"):
        esg.add((9, "y"), "src-A")
    with pytest.raises(ValueError, match=r"'src-A'.*8.*previous timestamp 10"):
        esg.add_batch([(8, "y"), (12, "z")], "src-A")
    with pytest.raises(ValueError, match=r"'src-A'.*position 2: 11 after 13"):
        esg.add_batch([(12, "y"), (13, "z"), (11, "w")], "src-A")
    assert esg.stats()["added"] == 1  # a rejected run adds nothing
    assert drain(esg, "r")[0] == [(10, "x")]


def test_bad_arguments():
    with pytest.raises(ValueError):
        ElasticScaleGate(["a"], ["r"], capacity=0)
    with pytest.raises(ValueError, match="duplicate source"):
        ElasticScaleGate(["a", "a"], ["r"])
    with pytest.raises(ValueError, match="duplicate reader"):
        ElasticScaleGate(["a"], ["r", "r"])
    esg = ElasticScaleGate(["a"], ["r"])
    with pytest.raises(ValueError):
        esg.get_batch("r", 0)
    with pytest.raises(TypeError):
        esg.add_readers("r2", "r")
    with pytest.raises(TypeError):
        esg.remove_sources("a")


# ---------------------------------------------------------------- epoch switch (Alg. 5)


def test_epoch_switch_control_tuples_at_common_ts_are_ready_at_once():
    """Alg. 5: every source adds a control tuple stamped with its own latest ts. When all
    sources are at the same ts, the control tuples must be deliverable without more data."""
    srcs = ["u0", "u1", "u2"]
    esg = ElasticScaleGate(srcs, ["o0", "o1"])
    for i, s in enumerate(srcs):
        esg.add_batch([(5, f"d{i}"), (10, f"e{i}")], s)
    for i, s in enumerate(srcs):
        esg.add((10, "control", i), s)  # addSTRETCH: ts = T[i], the latest of source i
    seqs = [drain(esg, o)[0] for o in ("o0", "o1")]
    assert seqs[0] == seqs[1]
    assert [t for t in seqs[0] if t[1] == "control"] == [(10, "control", i) for i in range(3)]
    assert esg.stats()["pending"] == 0


def test_epoch_switch_with_sources_at_different_ts():
    esg = ElasticScaleGate(["u0", "u1"], ["o0", "o1"])
    esg.add((10, "d"), "u0")
    esg.add((20, "d"), "u1")
    # Alg. 5 L2-L5: each control tuple carries its source's latest ts.
    esg.add((10, "control"), "u0")
    esg.add((20, "control"), "u1")
    # The control of the lagging source is ready at once; the other one waits for u0.
    assert drain(esg, "o0")[0] == [(10, "d"), (10, "control")]
    esg.add((25, "d"), "u0")  # addSTRETCH then adds the next data tuple
    assert drain(esg, "o0")[0] == [(20, "d"), (20, "control")]
    assert drain(esg, "o1")[0] == [(10, "d"), (10, "control"), (20, "d"), (20, "control")]


def test_add_next_goes_right_after_the_furthest_reader():
    esg = ElasticScaleGate(["a"], ["r1", "r2"])
    esg.add_batch([(t, f"d{t}") for t in range(1, 11)], "a")
    assert esg.get_batch("r1", 6)[-1] == (6, "d6")
    assert esg.get_batch("r2", 2)[-1] == (2, "d2")
    assert esg.add_next("c1") == 6  # the ts of the tuple before it
    assert esg.add_next("c2") == 6  # after c1, which nobody has read: request order
    assert esg.get_batch("r1", 3) == [(6, "c1"), (6, "c2"), (7, "d7")]
    assert esg.add_next("c3") == 7
    seq = drain(esg, "r2")[0]
    assert seq[3:8] == [(6, "d6"), (6, "c1"), (6, "c2"), (7, "d7"), (7, "c3")]
    assert [t for t, _ in seq] == sorted(t for t, _ in seq)


def test_add_next_before_anything_is_ready_and_after_the_end():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((5, "a5"), "a")
    assert esg.add_next("c") == -math.inf  # b added nothing: nothing is ready yet
    esg.add((3, "b3"), "b")
    assert esg.get_batch("r", 9) == [(-math.inf, "c"), (3, "b3")]
    esg.close_source("a")
    assert esg.add_next("late") == 3  # the reader has not got a5 yet: it will get this
    esg.close_source("b")
    assert drain(esg, "r")[0] == [(3, "late"), (5, "a5")]
    assert esg.add_next("too late") is None  # every source gone and every tuple read
    assert ElasticScaleGate(["a"], []).add_next("c") is None  # nobody could read it


def test_add_next_wakes_a_blocked_reader():
    esg = ElasticScaleGate(["a"], ["r"])
    t, res = run_thread(esg.get, "r")
    wait_blocked(t)
    esg.add_next("c")
    t.join(5)
    assert res["result"] == (-math.inf, "c")
    assert esg.stats()["reader_waits"] == 1


# ---------------------------------------------------------------- membership


def test_add_readers_mid_stream_start_where_j_is():
    esg = ElasticScaleGate(["a"], ["r1"])
    esg.add_batch([(i, i) for i in range(5)], "a")
    assert esg.get_batch("r1", 2) == [(0, 0), (1, 1)]
    assert esg.add_readers(["r2", "r3"], "r1")
    assert esg.watermark("r2") == esg.watermark("r1") == 1
    assert esg.get("r2") == (2, 2)
    assert esg.get_batch("r1", 10) == [(2, 2), (3, 3), (4, 4)]
    assert esg.get_batch("r3", 10) == [(2, 2), (3, 3), (4, 4)]
    assert not esg.add_readers(["r2"], "r1")  # already a reader
    assert not esg.add_readers(["r4", "r2"], "r1")  # all-or-nothing
    assert "r4" not in esg.readers()
    assert not esg.add_readers(["r4"], "nobody")
    assert esg.add_readers([], "r1")
    assert sorted(esg.readers()) == ["r1", "r2", "r3"]


def test_new_reader_of_fresh_reader_starts_at_the_beginning():
    esg = ElasticScaleGate(["a"], ["r1"])
    esg.add((1, "x"), "a")
    assert esg.add_readers(["r2"], "r1")
    assert esg.watermark("r2") is None
    assert esg.get("r2") == (1, "x")


def test_remove_readers():
    esg = ElasticScaleGate(["a"], ["r1", "r2", "r3"])
    esg.add((1, "x"), "a")
    assert not esg.remove_readers(["r2", "nobody"])
    assert sorted(esg.readers()) == ["r1", "r2", "r3"]
    assert esg.remove_readers(["r2"])
    assert esg.get("r2") is END  # a removed reader is told to stop
    assert not esg.remove_readers(["r2"])
    # A removed reader blocked in get returns END.
    assert esg.get("r3") == (1, "x")
    th, box = run_thread(esg.get, "r3")
    wait_blocked(th)
    assert esg.remove_readers(["r3"])
    th.join(JOIN_S)
    assert box["result"] is END
    # A removed name can come back as a new reader.
    assert esg.add_readers(["r2"], "r1")
    assert esg.get("r2") == (1, "x")


def test_removing_the_slowest_reader_frees_memory():
    esg = ElasticScaleGate(["a"], ["fast", "slow"])
    esg.add_batch([(i, i) for i in range(100)], "a")
    assert len(drain(esg, "fast")[0]) == 100
    assert esg.stats()["buffered"] == 100
    assert esg.remove_readers(["slow"])
    st_ = esg.stats()
    assert st_["buffered"] == 0 and st_["log_len"] == 0


def test_no_reader_means_ready_tuples_are_released():
    esg = ElasticScaleGate(["a", "b"], [])
    esg.add_batch([(i, i) for i in range(10)], "a")
    assert esg.stats()["buffered"] == 10  # pending: b holds readiness back
    esg.add((9, "b"), "b")
    st_ = esg.stats()
    assert st_["buffered"] == 0 and st_["log_len"] == 0 and st_["added"] == 11


def test_add_sources_dummy_does_not_block_and_is_never_delivered():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((10, "a10"), "a")
    esg.add((20, "b20"), "b")
    assert drain(esg, "r")[0] == [(10, "a10")]
    assert esg.add_sources(["c"], "b")  # c's dummy sits at b's latest ts, 20
    assert esg.stats()["frontier"] == 10
    esg.add((25, "a25"), "a")
    # c added nothing, yet b20 is ready: the dummy is a lower bound (Lemma 3).
    assert drain(esg, "r")[0] == [(20, "b20")]
    with pytest.raises(ValueError, match=r"'c'.*19.*previous timestamp 20"):
        esg.add((19, "c19"), "c")
    esg.add((30, "c30"), "c")
    esg.add((30, "b30"), "b")
    assert drain(esg, "r")[0] == [(25, "a25")]
    for s in ("a", "b", "c"):
        esg.close_source(s)
    rest, ended = drain(esg, "r")
    assert ended and rest == [(30, "b30"), (30, "c30")]  # ties by rank: c was added last
    st_ = esg.stats()
    assert st_["added"] == st_["delivered"] == 5


def test_add_sources_copying_a_source_that_added_nothing():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    assert esg.add_sources(["c"], "a")
    esg.add((1, "a"), "a")
    esg.add((1, "b"), "b")
    assert esg.get("r", timeout=0) is None  # c, like a was, holds readiness back
    esg.add((0, "c"), "c")  # and may start anywhere, nothing was delivered
    assert drain(esg, "r")[0] == [(0, "c")]


def test_add_sources_failures_change_nothing():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    assert not esg.add_sources(["c", "b"], "a")
    assert not esg.add_sources(["c"], "nobody")
    assert esg.sources() == ["a", "b"]


def test_remove_sources_flush_makes_earlier_tuples_ready():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add_batch([(1, "a1"), (4, "a4")], "a")
    esg.add((2, "b2"), "b")
    assert drain(esg, "r")[0] == [(1, "a1"), (2, "b2")]
    assert esg.remove_sources(["b"])
    assert drain(esg, "r")[0] == [(4, "a4")]
    assert not esg.remove_sources(["b"])
    assert not esg.remove_sources(["a", "b"])
    assert esg.sources() == ["a"]


def test_removed_source_tuples_stay_until_others_pass_them():
    esg = ElasticScaleGate(["a", "b"], ["r"])
    esg.add((1, "a1"), "a")
    esg.add_batch([(5, "b5"), (9, "b9")], "b")
    assert drain(esg, "r")[0] == [(1, "a1")]
    assert esg.remove_sources(["b"])
    assert esg.get("r", timeout=0) is None  # a still bounds readiness at 1
    esg.add((6, "a6"), "a")
    assert drain(esg, "r")[0] == [(5, "b5"), (6, "a6")]
    esg.add((9, "a9"), "a")
    assert drain(esg, "r")[0] == [(9, "a9"), (9, "b9")]
    assert esg.stats()["pending"] == 0


@pytest.mark.parametrize(
    "method", ["add_readers", "remove_readers", "add_sources", "remove_sources"]
)
def test_exactly_one_concurrent_membership_call_wins(method):
    n = 8
    names = [f"m{i}" for i in range(n)]
    esg = ElasticScaleGate(names + ["victim"], names + ["victim"])
    for _ in range(20):
        barrier = threading.Barrier(n)
        results: list = [None] * n

        def call(i, barrier=barrier, results=results):
            barrier.wait()
            if method == "add_readers":
                results[i] = esg.add_readers(["new"], names[i])
            elif method == "remove_readers":
                results[i] = esg.remove_readers(["victim"])
            elif method == "add_sources":
                results[i] = esg.add_sources(["new"], names[i])
            else:
                results[i] = esg.remove_sources(["victim"])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(JOIN_S)
        assert results.count(True) == 1 and results.count(False) == n - 1
        # Restore for the next round.
        if method == "add_readers":
            assert esg.remove_readers(["new"])
        elif method == "remove_readers":
            assert esg.add_readers(["victim"], "m0")
        elif method == "add_sources":
            assert esg.remove_sources(["new"])
        else:
            assert esg.add_sources(["victim"], "m0")


# ---------------------------------------------------------------- memory and flow control


def test_garbage_collection_after_all_readers_consumed():
    esg = ElasticScaleGate(["a", "b"], ["r1", "r2"])
    for i in range(0, 10_000, 100):
        esg.add_batch([(k, "a") for k in range(i, i + 100)], "a")
        esg.add_batch([(k, "b") for k in range(i, i + 100)], "b")
    r1 = drain(esg, "r1")[0]
    assert len(r1) == 20_000
    assert esg.stats()["log_len"] == 20_000  # r2 has not read yet
    assert drain(esg, "r2")[0] == r1
    st_ = esg.stats()
    assert st_["log_len"] == 0 and st_["buffered"] == 0 and st_["pending"] == 0


def test_log_stays_bounded_while_streaming():
    esg = ElasticScaleGate(["a"], ["r"])
    worst = 0
    for i in range(0, 50_000, 50):
        esg.add_batch([(k, k) for k in range(i, i + 50)], "a")
        esg.get_batch("r", 40)
        st_ = esg.stats()
        worst = max(worst, st_["log_len"] - 2 * st_["backlog"])
    assert worst <= 100  # released in bulk: at most about twice the backlog is kept


def test_full_buffer_blocks_the_source_ahead_not_the_lagging_one():
    esg = ElasticScaleGate(["fast", "slow"], ["r"], capacity=4)
    esg.add_batch([(100 + i, "f") for i in range(4)], "fast")  # pending: slow added nothing
    th, box = run_thread(esg.add, (200, "f"), "fast")
    wait_blocked(th)  # fast waits for room
    assert esg.stats()["source_waits"] == 1
    esg.add((0, "s0"), "slow")  # over capacity, but slow holds the frontier
    assert esg.get("r", timeout=0) == (0, "s0")
    esg.add((150, "s150"), "slow")  # the backlog is empty again: admitted
    assert drain(esg, "r")[0] == [(100 + i, "f") for i in range(4)]
    th.join(JOIN_S)
    assert box == {"result": None}
    st_ = esg.stats()
    assert st_["max_buffered"] <= 4 + 2
    assert st_["source_waits"] >= 1


def test_lagging_source_waits_while_ready_tuples_await_a_reader():
    esg = ElasticScaleGate(["a"], ["r"], capacity=3)
    esg.add_batch([(1, 1), (2, 2), (3, 3)], "a")
    th, box = run_thread(esg.add, (4, 4), "a")
    wait_blocked(th)  # the backlog is the reader's to drain: memory stays bounded
    assert esg.stats()["source_waits"] == 1
    assert esg.get("r") == (1, 1)
    th.join(JOIN_S)
    assert not th.is_alive() and esg.stats()["buffered"] == 3


def test_removed_source_blocked_in_add_gets_an_error():
    esg = ElasticScaleGate(["a", "b"], ["r"], capacity=2)
    esg.add_batch([(5, 5), (6, 6)], "a")
    th, box = run_thread(esg.add, (7, 7), "a")
    wait_blocked(th)
    assert esg.remove_sources(["a"])
    th.join(JOIN_S)
    assert isinstance(box.get("error"), ValueError)


def test_stats_counts():
    esg = ElasticScaleGate(["a"], ["r1", "r2"])
    esg.add_batch([(i, i) for i in range(10)], "a")
    esg.get_batch("r1", 4)
    esg.get("r2")
    st_ = esg.stats()
    assert st_["added"] == 10 and st_["delivered"] == 5
    assert st_["buffered"] == 9 and st_["backlog"] == 9 and st_["pending"] == 0
    assert st_["sources"] == 1 and st_["readers"] == 2 and st_["capacity"] == 65536
    esg.remove_readers(["r1"])
    assert esg.stats()["delivered"] == 5


# ---------------------------------------------------------------- model-based test


class ESGModel(RuleBasedStateMachine):
    """Single-threaded model: readiness is ts <= min over current sources of their latest
    ts; the ready sequence is extended, at each operation, by the newly ready tuples in
    (ts, source rank, per-source order)."""

    def __init__(self) -> None:
        super().__init__()
        self.esg = ElasticScaleGate(["s0", "s1"], ["r0"], capacity=10**6)
        self.src: dict[str, list] = {"s0": [0, -math.inf], "s1": [1, -math.inf]}  # rank, last
        self.next_rank = 2
        self.pending: list[tuple] = []  # (ts, rank, seq, tuple)
        self.log: list[tuple] = []
        self.pos: dict[str, int] = {"r0": 0}
        self.wm: dict[str, object] = {"r0": None}
        self.seq = 0
        self.fresh = 0
        self.marker_end = 0  # just after the latest add_next tuple

    def frontier(self) -> float:
        return min(v[1] for v in self.src.values()) if self.src else math.inf

    def settle(self) -> None:
        w = self.frontier()
        ready = sorted((p for p in self.pending if p[0] <= w), key=lambda p: p[:3])
        self.pending = [p for p in self.pending if p[0] > w]
        self.log.extend(p[3] for p in ready)

    def name(self, prefix: str) -> str:
        self.fresh += 1
        return f"{prefix}{self.fresh}"

    @precondition(lambda self: self.src)
    @rule(
        data=st.data(),
        gaps=st.lists(st.integers(0, 3), min_size=1, max_size=4),
        batch=st.booleans(),
    )
    def add(self, data, gaps, batch):
        s = data.draw(st.sampled_from(sorted(self.src)))
        rank, last = self.src[s]
        ts = 0 if last == -math.inf else last
        tuples = []
        for g in gaps:
            ts += g
            self.seq += 1
            tuples.append((ts, s, self.seq))
        # One call is one readiness step (the tie rule), so add() settles per tuple.
        if batch:
            self.esg.add_batch(tuples, s)
            self.pending.extend((t[0], rank, t[2], t) for t in tuples)
            self.src[s][1] = ts
            self.settle()
        else:
            for t in tuples:
                self.esg.add(t, s)
                self.pending.append((t[0], rank, t[2], t))
                self.src[s][1] = t[0]
                self.settle()

    @precondition(lambda self: any(v[1] > 0 for v in self.src.values()))
    @rule(data=st.data())
    def add_going_back_fails(self, data):
        s = data.draw(st.sampled_from(sorted(k for k, v in self.src.items() if v[1] > 0)))
        with pytest.raises(ValueError):
            self.esg.add((self.src[s][1] - 1, s, -1), s)

    @rule(data=st.data(), k=st.integers(1, 5))
    def get(self, data, k):
        r = data.draw(st.sampled_from(sorted(self.pos)))
        p = self.pos[r]
        expected = self.log[p : p + k]
        got = self.esg.get(r, timeout=0) if k == 1 else self.esg.get_batch(r, k, timeout=0)
        if not expected:
            assert got is (END if not self.src else None)
            return
        if k == 1:
            assert got == expected[0]
        else:
            assert got == expected
        self.pos[r] = p + len(expected)
        self.wm[r] = expected[-1][0]

    @rule()
    def add_next(self):
        q = max(max(self.pos.values()), self.marker_end)
        if q >= len(self.log) and not self.src:
            assert self.esg.add_next("late") is None
            return
        ts = self.log[q - 1][0] if q else (self.log[0][0] if self.log else self.frontier())
        self.seq += 1
        t = (ts, "next", self.seq)
        assert self.esg.add_next(t[1:]) == ts
        self.log.insert(q, t[:1] + (t[1:],))
        self.marker_end = q + 1

    @rule(data=st.data())
    def add_reader(self, data):
        j = data.draw(st.sampled_from(sorted(self.pos)))
        new = self.name("nr")
        assert self.esg.add_readers([new], j)
        assert not self.esg.add_readers([new], j)
        self.pos[new] = self.pos[j]
        self.wm[new] = self.wm[j]

    @precondition(lambda self: len(self.pos) > 1)
    @rule(data=st.data())
    def remove_reader(self, data):
        r = data.draw(st.sampled_from(sorted(self.pos)))
        assert self.esg.remove_readers([r])
        assert not self.esg.remove_readers([r])
        del self.pos[r], self.wm[r]

    @precondition(lambda self: self.src)
    @rule(data=st.data(), count=st.integers(1, 2))
    def add_sources(self, data, count):
        j = data.draw(st.sampled_from(sorted(self.src)))
        new = [self.name("ns") for _ in range(count)]
        assert self.esg.add_sources(new, j)
        for s in new:
            self.src[s] = [self.next_rank, self.src[j][1]]
            self.next_rank += 1
        self.settle()

    @precondition(lambda self: self.src)
    @rule(data=st.data())
    def remove_source(self, data):
        s = data.draw(st.sampled_from(sorted(self.src)))
        assert self.esg.close_source(s)
        assert not self.esg.close_source(s)
        del self.src[s]
        self.settle()

    @invariant()
    def buffer_matches_model(self):
        st_ = self.esg.stats()
        backlog = len(self.log) - min(self.pos.values())
        assert st_["pending"] == len(self.pending)
        assert st_["buffered"] == len(self.pending) + backlog
        assert st_["frontier"] == self.frontier()
        assert st_["log_len"] <= 2 * backlog + 1
        for r, w in self.wm.items():
            assert self.esg.watermark(r) == w

    def teardown(self) -> None:
        # Closing every source makes every added tuple deliverable, in the model's order.
        for s in list(self.src):
            self.esg.close_source(s)
        self.src.clear()
        self.settle()
        assert not self.pending
        for r, p in self.pos.items():
            rest, ended = drain(self.esg, r)
            assert ended and rest == self.log[p:]


TestESGModel = ESGModel.TestCase
TestESGModel.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_abort_wakes_blocked_readers_and_sources():
    import threading

    from stretchflow.buffers.esg import Aborted

    esg = ElasticScaleGate(sources=["a", "b"], readers=["r"], capacity=2)
    esg.add_batch([(1, "x"), (2, "y")], "a")  # not ready: "b" added nothing
    errors = []

    def blocked(fn):
        try:
            fn()
        except Aborted as e:
            errors.append(e)

    threads = [threading.Thread(target=blocked, args=(lambda: esg.get("r"),)),
               threading.Thread(target=blocked, args=(lambda: esg.add((3, "z"), "a"),))]
    for t in threads:
        t.start()
    cause = ValueError("boom")
    esg.abort(cause)
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 2 and all(e.__cause__ is cause for e in errors)
    with pytest.raises(Aborted):
        esg.get_batch("r", 5)


# ---------------------------------------------------------------- the spread bound


def test_max_spread_holds_a_reader_back_until_the_slowest_moves():
    esg = ElasticScaleGate(["a"], ["fast", "slow"], max_spread=3)
    esg.add_batch([(i, i) for i in range(10)], "a")
    assert esg.get_batch("fast", 10) == [(0, 0), (1, 1), (2, 2)]  # 3 ahead, no more
    assert esg.get_batch("fast", 10, timeout=0.02) is None
    assert esg.stats()["spread"] == 3 and esg.stats()["spread_waits"] == 1
    esg.get_batch("slow", 2)
    assert esg.get_batch("fast", 10) == [(3, 3), (4, 4)]
    # the slowest reader is never held back: it may take max_spread at once
    assert esg.get_batch("slow", 10) == [(2, 2), (3, 3), (4, 4)]
    assert esg.get_batch("slow", 10) == [(5, 5), (6, 6), (7, 7)]


def test_a_single_reader_is_bounded_only_by_batch_size():
    esg = ElasticScaleGate(["a"], ["r"], max_spread=4)
    esg.add_batch([(i, i) for i in range(10)], "a")
    assert len(esg.get_batch("r", 10)) == 4  # a batch never exceeds the spread
    assert len(esg.get_batch("r", 10)) == 4
    assert len(esg.get_batch("r", 10)) == 2


def test_held_back_reader_wakes_when_the_slowest_reads_or_leaves():
    esg = ElasticScaleGate(["a"], ["fast", "slow", "slower"], max_spread=2)
    esg.add_batch([(i, i) for i in range(10)], "a")
    esg.get_batch("fast", 2)
    esg.get_batch("slow", 1)
    th, box = run_thread(lambda: esg.get_batch("fast", 5))
    wait_blocked(th)  # 2 ahead of 'slower': must wait
    assert esg.remove_readers(["slower"])  # now 'slow' (1) is the slowest: 1 more for 'fast'
    th.join(JOIN_S)
    assert box["result"] == [(2, 2)]
    th, box = run_thread(lambda: esg.get_batch("fast", 5))
    wait_blocked(th)
    esg.get_batch("slow", 2)
    th.join(JOIN_S)
    assert box["result"] == [(3, 3), (4, 4)]
    assert esg.stats()["spread_waits"] == 2  # both waits were the spread bound's


def test_held_back_reader_is_woken_by_abort_removal_and_a_looser_bound():
    from stretchflow.buffers.esg import Aborted

    esg = ElasticScaleGate(["a"], ["fast", "slow"], max_spread=1)
    esg.add_batch([(i, i) for i in range(5)], "a")
    esg.get("fast")
    th, box = run_thread(lambda: esg.get("fast"))
    wait_blocked(th)
    esg.set_max_spread(None)  # unbounded: the waiting reader goes on
    th.join(JOIN_S)
    assert box["result"] == (1, 1)
    esg.set_max_spread(1)
    th, box = run_thread(lambda: esg.get("fast"))
    wait_blocked(th)
    assert esg.remove_readers(["fast"])  # a removed reader gets END, not a hang
    th.join(JOIN_S)
    assert box["result"] is END
    assert esg.add_readers(["f2"], "slow") and esg.get("slow") == (0, 0)
    th, box = run_thread(lambda: esg.get_batch("slow", 3))  # 1 ahead of f2: waits
    wait_blocked(th)
    esg.abort(ValueError("stop"))
    th.join(JOIN_S)
    assert isinstance(box.get("error"), Aborted)


def test_add_next_with_a_spread_bound_goes_after_the_furthest_reader():
    esg = ElasticScaleGate(["a"], ["r1", "r2"], max_spread=2)
    esg.add_batch([(i, i) for i in range(6)], "a")
    esg.get_batch("r1", 9)
    assert esg.add_next("ctrl") == 1
    assert esg.get_batch("r2", 9) == [(0, 0), (1, 1)]
    assert esg.get_batch("r1", 9) == [(1, "ctrl"), (2, 2)]
    assert esg.get_batch("r2", 9) == [(1, "ctrl"), (2, 2)]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_bad_max_spread(bad):
    with pytest.raises(ValueError, match="max_spread"):
        ElasticScaleGate(["a"], ["r"], max_spread=bad)
