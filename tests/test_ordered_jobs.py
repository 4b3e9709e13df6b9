"""runtime/ordered_jobs.OrderedJobs, the one thread behind the reference engine's write-behind and
its checkpoint committer: order, the first error on the owner's thread (later jobs discarded,
each discard callback exactly once), the depth bound, the bounded and signal-aware ends, and no
thread left behind."""

from __future__ import annotations

import _thread
import threading
import traceback
from collections import Counter
from functools import partial

import pytest

from stretchflow.errors import StretchflowError
from stretchflow.executors.reference_overlap import WriteBehind
from stretchflow.runtime.checkpoint_drain import Committer
from stretchflow.runtime.ordered_jobs import JobsTimeout, OrderedJobs
from test_lazy_queries import _gone, _named  # threading.enumerate(): threads named so
from threadutil import join_all, start, wait_blocked, wait_until


class Ledger:
    """What happened to each job, counted under a lock (the jobs' thread and the producers)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[object] = []
        self.discarded: Counter[object] = Counter()

    def run(self, key: object):
        def fn() -> None:
            with self.lock:
                self.ran.append(key)
        return fn

    def discard(self, key: object):
        def fn() -> None:
            with self.lock:
                self.discarded[key] += 1
        return fn


def test_jobs_run_in_order_and_the_thread_ends():
    led = Ledger()
    jobs = OrderedJobs("t-oj-order")
    assert [t.daemon for t in _named("t-oj-order")] == [True]
    for i in range(200):
        jobs.submit(led.run(i), led.discard(i))
    jobs.finish(timeout=30)
    assert led.ran == list(range(200)) and not led.discarded
    assert _gone("t-oj-order") and not jobs.alive


@pytest.mark.parametrize("depth", [None, 1, 3])
def test_many_producers_each_keep_their_order(depth):
    led = Ledger()
    jobs = OrderedJobs(f"t-oj-many-{depth}", depth=depth)

    def produce(p: int) -> None:
        for i in range(300):
            jobs.submit(led.run((p, i)), led.discard((p, i)))

    join_all([start(lambda p=p: produce(p)) for p in range(4)])
    jobs.finish(timeout=30)
    assert len(led.ran) == 1200 and not led.discarded
    for p in range(4):
        assert [i for q, i in led.ran if q == p] == list(range(300))
    assert _gone(f"t-oj-many-{depth}")


def test_first_error_raised_on_the_owner_later_jobs_discarded_once():
    led = Ledger()
    jobs = OrderedJobs("t-oj-err")
    boom = OSError(28, "No space left on device")

    def failing_job() -> None:
        raise boom

    for i in range(5):
        jobs.submit(led.run(i), led.discard(i))
    jobs.submit(failing_job, led.discard("failed"))
    for i in range(5, 40):
        jobs.submit(led.run(i), led.discard(i))
    with pytest.raises(OSError, match="No space left") as info:
        jobs.finish(timeout=30)
    assert info.value is boom  # the job's own exception: same type, message, attributes
    # its traceback still holds the job's frame, the owner's frames in front of it
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert names[0] == "test_first_error_raised_on_the_owner_later_jobs_discarded_once"
    assert "failing_job" in names and "finish" in names
    assert led.ran == list(range(5))
    # the failed job's discard once (what it had taken over), each later job's once
    assert led.discarded == Counter({"failed": 1, **{i: 1 for i in range(5, 40)}})
    # after the end: the same error again, nothing new taken, nothing left running
    with pytest.raises(OSError) as again:
        jobs.finish(timeout=30)
    assert again.value is boom
    with pytest.raises(OSError):
        jobs.submit(led.run("late"), led.discard("late"))
    jobs.abort()  # raises nothing: the owner is failing already
    assert "late" not in led.discarded and _gone("t-oj-err")


def test_stress_error_in_the_middle_with_producers_and_a_bound():
    """4 producers, a depth of 3, the 200th job run fails: every job taken ends exactly one
    way (run, or discarded), the producers see the error, the thread ends."""
    led = Ledger()
    jobs = OrderedJobs("t-oj-stress", depth=3)
    count = {"n": 0}
    accepted: list[tuple[int, int]] = []
    refused: list[BaseException] = []
    lock = threading.Lock()

    def job(key: tuple[int, int]):
        def fn() -> None:
            count["n"] += 1  # the jobs' thread only
            if count["n"] == 200:
                raise ValueError(f"job {key} failed")
            led.run(key)()
        return fn

    def produce(p: int) -> None:
        for i in range(500):
            try:
                jobs.submit(job((p, i)), led.discard((p, i)))
            except ValueError as e:  # the job refused is still ours: not run, not discarded
                refused.append(e)
                return
            with lock:
                accepted.append((p, i))

    join_all([start(lambda p=p: produce(p)) for p in range(4)])
    with pytest.raises(ValueError, match="failed"):
        jobs.finish(timeout=30)
    assert _gone("t-oj-stress")
    assert len(led.ran) == 199
    assert set(led.ran).isdisjoint(led.discarded)
    # every job taken ran or was discarded (the failed one too), each discard exactly once
    assert set(led.ran) | set(led.discarded) == set(accepted)
    assert all(n == 1 for n in led.discarded.values())
    # at most 200 jobs run or failed, so no producer got to its 500th: each saw the error
    assert len(refused) == 4


def test_a_bounded_submit_blocks_until_a_job_ends():
    gate, first = threading.Event(), threading.Event()
    handed: list[int] = []
    jobs = OrderedJobs("t-oj-bound", depth=2)

    def slow() -> None:
        first.set()
        assert gate.wait(10)

    def produce() -> None:
        jobs.submit(slow)
        for i in range(1, 6):
            jobs.submit(lambda: None)
            handed.append(i)

    t = start(produce)
    assert first.wait(5)
    wait_until(lambda: handed, 5, "the second job is handed over")
    wait_blocked(t)
    assert handed == [1]  # the slow job and one more in flight: the third waits
    gate.set()
    join_all([t])
    assert handed == [1, 2, 3, 4, 5]
    jobs.finish(timeout=30)
    assert _gone("t-oj-bound")


@pytest.mark.parametrize("failure", [RuntimeError("compute failed"), KeyboardInterrupt()])
def test_abort_discards_what_is_not_started_and_the_thread_ends(failure):
    led = Ledger()
    gate, started = threading.Event(), threading.Event()

    def under_way() -> None:
        started.set()
        assert gate.wait(10)
        led.run("under way")()

    with pytest.raises(type(failure)):
        with OrderedJobs("t-oj-abort", depth=10) as jobs:
            jobs.submit(under_way, led.discard("under way"))
            for i in range(5):
                jobs.submit(led.run(i), led.discard(i))
            assert started.wait(5)
            raise failure  # on the owner's side, while a job is under way
    gate.set()  # the job under way ends; the queued ones are discarded, the thread ends
    assert _gone("t-oj-abort")
    assert led.ran == ["under way"]
    assert led.discarded == Counter({i: 1 for i in range(5)})


def test_a_signal_while_finishing_drops_the_rest_and_the_thread_ends():
    """KeyboardInterrupt on the owner's thread during the end's wait: it is seen within a
    TICK (``interrupt_main`` wakes no lock: only the waits' timeouts let it through)."""
    led = Ledger()
    gate, started = threading.Event(), threading.Event()

    def under_way() -> None:
        started.set()
        assert gate.wait(10)

    jobs = OrderedJobs("t-oj-sigint")
    jobs.submit(under_way)
    for i in range(3):
        jobs.submit(led.run(i), led.discard(i))
    assert started.wait(5)
    timer = threading.Timer(0.1, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            jobs.close()  # would wait for ever for ``under_way``
    finally:
        timer.join(5)
        gate.set()
    assert _gone("t-oj-sigint")
    # seen while ``under_way`` still waited (a wait without a bound would have seen it only
    # once the job's own wait failed, which would be the jobs' error)
    assert jobs.error is None
    assert led.ran == [] and led.discarded == Counter({0: 1, 1: 1, 2: 1})


def stalled_fsync(gate: threading.Event) -> None:
    assert gate.wait(10)


def test_finish_timeout_names_the_job_under_way_and_can_wait_again():
    gate = threading.Event()
    jobs = OrderedJobs("t-oj-timeout")
    jobs.submit(partial(stalled_fsync, gate))  # named by the function it calls
    jobs.submit(lambda: None)
    with pytest.raises(JobsTimeout, match=r"t-oj-timeout: .* within 0.3 s .*stalled_fsync"):
        jobs.finish(timeout=0.3)
    gate.set()
    jobs.finish(timeout=30)  # the thread went on: a second wait sees the end
    assert _gone("t-oj-timeout")


def test_committer_timeout_keeps_its_message_and_names_the_job():
    gate = threading.Event()
    c = Committer("t-oj-committer")
    c.submit(partial(stalled_fsync, gate))
    with pytest.raises(StretchflowError, match="writing the checkpoint did not finish within "
                                               "0 s .is the disk") as info:
        c.finish(timeout=0.2)
    assert isinstance(info.value.__cause__, JobsTimeout)
    assert "stalled_fsync" in str(info.value.__cause__)
    gate.set()
    c.finish()
    assert _gone("t-oj-committer")


def test_a_failing_discard_is_the_error_when_there_was_none():
    jobs = OrderedJobs("t-oj-discard", depth=4)
    gate, started = threading.Event(), threading.Event()

    def bad_discard() -> None:
        raise OSError("unlink failed")

    def wait() -> None:
        started.set()
        assert gate.wait(10)

    jobs.submit(wait)
    jobs.submit(lambda: None, bad_discard)
    assert started.wait(5)
    gate.set()
    jobs.abort()
    assert _gone("t-oj-discard")
    assert isinstance(jobs.error, OSError) and str(jobs.error) == "unlink failed"


def test_misuse_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="t-oj-bad: .* at least 1, not 0"):
        OrderedJobs("t-oj-bad", depth=0)
    jobs = OrderedJobs("t-oj-after")
    jobs.finish(timeout=30)
    with pytest.raises(RuntimeError, match="t-oj-after: a job was submitted after the end"):
        jobs.submit(lambda: None)
    w = WriteBehind(print, print, "t-oj-wb")
    with pytest.raises(RuntimeError, match="t-oj-wb: a write before the write-behind"):
        w.write([1])
    assert not _named("t-oj-wb")  # never entered: no thread was started
    assert _gone("t-oj-after")
