"""The executor runtime: run control, latency recording, the source pump, metrics."""

from __future__ import annotations

import math
import queue
import random
import threading

import pytest

import stretchflow as sf
from stretchflow.errors import OperatorError, RunTupleError, SourceError
from stretchflow.eventtime import WATERMARK
from stretchflow.runtime import (
    IngestClock,
    LatencyRecorder,
    MetricsLog,
    MetricsSampler,
    ReconfigureSchedule,
    RunControl,
    RunResult,
    SourcePump,
    Stopped,
    is_live,
    percentiles,
    user_error,
)


# -- run control -----------------------------------------------------------------------------
def test_first_error_wins_and_hooks_run_once():
    rc = RunControl()
    calls = []
    rc.on_abort(lambda e: calls.append(("a", str(e))))
    rc.fail(ValueError("first"))
    rc.fail(ValueError("second"))
    assert calls == [("a", "first")]
    assert str(rc.error) == "first"
    late = []
    rc.on_abort(lambda e: late.append(str(e)))  # registered after the failure: runs at once
    assert late == ["first"]
    with pytest.raises(ValueError, match="first"):
        rc.raise_error()


def test_a_failing_hook_does_not_keep_the_others_from_running():
    rc = RunControl()
    ran = []

    def bad(_e):
        raise RuntimeError("hook broke")

    rc.on_abort(bad)
    rc.on_abort(lambda _e: ran.append(1))
    rc.fail(KeyError("x"))
    assert ran == [1]
    assert isinstance(rc.error, KeyError)


def test_record_keeps_the_error_without_stopping():
    rc = RunControl()
    assert rc.record(ValueError("a"))
    assert not rc.stopped
    assert not rc.record(ValueError("b"))
    rc.fail(ValueError("c"))
    assert str(rc.error) == "a"


def test_stopped_is_never_the_runs_error():
    rc = RunControl()
    t = rc.thread(lambda: (_ for _ in ()).throw(Stopped()), name="quiet")
    t.start()
    t.join()
    assert rc.error is None and not rc.stopped


def test_blocked_put_get_and_barrier_give_up_when_the_run_stops():
    rc = RunControl()
    full: queue.Queue = queue.Queue(maxsize=1)
    full.put(0)
    empty: queue.Queue = queue.Queue()
    barrier = rc.track(threading.Barrier(2))
    outcomes = []

    def blocked(fn):
        try:
            fn()
        except Stopped:
            outcomes.append("stopped")

    threads = [threading.Thread(target=blocked, args=(f,)) for f in
               (lambda: rc.put(full, 1), lambda: rc.get(empty), lambda: rc.wait(barrier))]
    for t in threads:
        t.start()
    rc.fail(RuntimeError("boom"))
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert outcomes == ["stopped"] * 3


def test_many_threads_failing_at_once_keep_exactly_one_error():
    """Stress: 16 threads fail together, repeatedly; one error is kept, hooks run once."""
    for round_ in range(50):
        rc = RunControl()
        hook_calls = []
        lock = threading.Lock()

        def hook(_e, hook_calls=hook_calls, lock=lock):
            with lock:
                hook_calls.append(1)

        for _ in range(4):
            rc.on_abort(hook)
        start = threading.Barrier(16)
        errors = [ValueError(f"{round_}-{k}") for k in range(16)]

        def worker(e, start=start, rc=rc):
            start.wait()
            rc.fail(e)

        threads = [threading.Thread(target=worker, args=(e,)) for e in errors]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rc.error in errors
        assert len(hook_calls) == 4


def test_user_error_wraps_user_exceptions_only():
    e = ValueError("bad")
    wrapped = user_error("agg", 5, {"x": 1}, e)
    assert isinstance(wrapped, OperatorError)
    assert "'agg'" in str(wrapped) and "ts=5" in str(wrapped) and "ValueError: bad" in str(wrapped)
    own = SourceError("src", "line 3", "no ts")
    assert user_error("agg", 5, None, own) is own
    run_err = user_error("agg", 1, "first", RunTupleError(7, "seventh", KeyError("k")))
    assert isinstance(run_err, OperatorError) and run_err.ts == 7 and run_err.payload == "seventh"
    end = user_error("agg", None, None, ZeroDivisionError("z"))
    assert "<end of input>" in str(end)


# -- latency ---------------------------------------------------------------------------------
def test_percentiles_by_nearest_rank():
    assert percentiles([]) == {"p50": None, "p99": None, "max": None, "samples": 0}
    p = percentiles(list(range(100, 0, -1)))
    assert p == {"p50": 51, "p99": 100, "max": 100, "samples": 100}


def test_latency_recorder_matches_exact_percentiles_within_its_precision():
    rng = random.Random(4)
    values = [rng.lognormvariate(1.0, 1.2) for _ in range(20_000)]
    rec = LatencyRecorder(t0=0.0)
    for k, v in enumerate(values):
        rec.add(k * 0.001, v)
    got, exact = rec.summary(), percentiles(values)
    assert got["samples"] == exact["samples"] == len(values)
    assert got["max"] == exact["max"]
    for name in ("p50", "p99"):
        assert math.isclose(got[name], exact[name], rel_tol=0.011), name


def test_latency_series_covers_the_whole_run_in_bounded_memory():
    rec = LatencyRecorder(t0=0.0)
    n = 100_000
    for k in range(n):
        rec.add(k / 1000, 1.0)
    series = rec.series()
    assert len(series) <= 4000
    assert series[0][0] == 0.0
    assert series[-1][0] >= (n - 1) / 1000 * 0.99  # the end of the run is in the series


def test_ingest_clock_answers_the_first_arrival_at_or_after_a_timestamp():
    clock = IngestClock()
    for ts in (10, 10, 20, 15, 30):
        clock.record(ts)
    assert clock.ts == [10, 20, 30]
    assert clock.entered(11) == clock.wall[1]
    assert clock.entered(31) is None


# -- the source pump -------------------------------------------------------------------------
class _Recording:
    def __init__(self):
        self.batches = []

    def __call__(self, batch):
        self.batches.append(list(batch))


def test_pump_cuts_the_batch_at_the_tuple_a_step_is_due():
    recs = [{"ts": t} for t in range(10)]
    src = sf.io.iterable(recs)
    push = _Recording()
    due_after = []
    sched = ReconfigureSchedule([(3, 2), (7, 4), (7, 5), (50, 1)], sources=1)
    pump = SourcePump(src, push, RunControl(), schedule=sched,
                      on_due=lambda d: due_after.append((sum(map(len, push.batches)), d)),
                      batch=1000, delay=3600)
    pump.run()
    # due right after the 3rd and 7th tuple; the step beyond the input is due at its end
    assert due_after == [(3, [2]), (7, [4, 5]), (10, [1])]
    assert [ts for b in push.batches for ts, _ in b] == list(range(10))
    assert pump.count == 10


def test_schedule_counts_tuples_of_all_sources():
    sched = ReconfigureSchedule([(4, 2)], sources=2)
    assert sched.count() == [] and sched.count() == [] and sched.count() == []
    assert sched.count() == [2]
    assert sched.source_ended() == [] and sched.source_ended() == []


def test_pump_sends_live_sources_tuple_by_tuple():
    src = sf.io.iterable([{"ts": t} for t in range(5)])
    assert not is_live(src)
    src.live = True
    assert is_live(src)
    push = _Recording()
    SourcePump(src, push, RunControl(), batch=1000, delay=3600).run()
    assert [len(b) for b in push.batches] == [1] * 5


def test_pump_hands_a_paced_source_on_before_each_wait_and_in_full_batches_when_behind(
        monkeypatch):
    """A paced source's tuples go on before each wait for the next one's due time (none
    waits for the next), and in full batches while the tuples are already due: the pump
    handed them on one at a time, and vsn kept up with a fraction of its unpaced rate. A
    fake clock (the pacer's waits advance it) makes the times exact."""
    import time

    now = [0.0]
    step = [0.0]  # what each reading of the clock advances it by (a busy pump)

    def clock():
        now[0] += step[0]
        return now[0]

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(time, "sleep", lambda s: now.__setitem__(0, now[0] + s))

    class Timed(_Recording):
        at: list[float] = []

        def __call__(self, batch):
            super().__call__(batch)
            self.at.append(now[0])

    # 40 tuples/s on an idle clock: tuple n is due at n / 40 s; each goes on alone, when it
    # is due (before the wait for the next one), not when the next arrives
    push = Timed()
    push.at = []
    slow = sf.io.iterable([{"ts": t} for t in range(8)]).at_rate(40)
    SourcePump(slow, push, RunControl(), batch=1000, delay=3600).run()
    data = [[ts for ts, p in b if p is not WATERMARK] for b in push.batches]
    sent = [(b[0], at) for b, at in zip(data, push.at, strict=True) if b]
    assert all(len(b) <= 1 for b in data)
    assert [ts for ts, _ in sent] == list(range(8))
    assert [round(at * 40, 6) for _, at in sent] == list(range(8))
    # a clock that runs ahead (each reading a second later): every tuple is already due, so
    # the batches fill up
    step[0] = 1.0
    push = _Recording()
    fast = sf.io.iterable([{"ts": t} for t in range(3000)]).at_rate(1000)
    SourcePump(fast, push, RunControl(), batch=1000, delay=1e12).run()
    assert [ts for b in push.batches for ts, p in b if p is not WATERMARK] == list(range(3000))
    assert [len(b) for b in push.batches] == [1000, 1000, 1000]


def test_pump_stops_with_the_run():
    rc = RunControl()
    src = sf.io.iterable([{"ts": t} for t in range(100)])
    push = _Recording()
    pump = SourcePump(src, lambda b: (push(b), rc.fail(RuntimeError("x"))), rc, batch=10,
                      delay=3600)
    with pytest.raises(Stopped):
        pump.run()
    assert len(push.batches) == 1


def test_pump_passes_watermarks_without_counting_them():
    src = sf.io.iterable([{"ts": 1}, sf.Watermark(5), {"ts": 6}], sorted=False)
    push = _Recording()
    pump = SourcePump(src, push, RunControl(), batch=1000, delay=3600)
    pump.run()
    items = [it for b in push.batches for it in b]
    assert [p is WATERMARK for _, p in items].count(True) >= 1
    assert pump.count == 2


# -- metrics ---------------------------------------------------------------------------------
def test_sampler_logs_one_schema_and_applies_decisions():
    from stretchflow.elastic.controller import Decision, Metrics

    class Up:
        name = "up"

        def observe(self, m):
            return Decision(m.parallelism + 1) if m.parallelism < 3 else None

    p = {"op": 1}
    applied = []
    log = MetricsLog(t0=0.0)

    def measure():
        return [("op", Metrics(time=1.0, period=1.0, parallelism=p["op"], throughput=10.0,
                               input_rate=12.0, max_parallelism=4))]

    def apply(op, d):
        applied.append((op, d.parallelism))
        p[op] = d.parallelism

    sampler = MetricsSampler(RunControl(), log, 0.01, measure, Up(), apply)
    for _ in range(4):
        sampler.tick()
    assert applied == [("op", 2), ("op", 3)]
    assert [r["parallelism"] for r in log.rows] == [1, 2, 3, 3]
    assert set(log.rows[0]) == {"operator", "time", "parallelism", "input_rate", "throughput",
                                "congestion", "loads"}
    log.parallelism_changed("op", 1, now=0.5)
    log.parallelism_changed("op", 1, now=0.6)  # no change: not recorded twice
    log.parallelism_changed("op", 2, now=0.7)
    assert log.parallelism["op"] == [(0.5, 1), (0.7, 2)]


def test_sampler_thread_stops_when_the_run_fails():
    rc = RunControl()
    ticks = threading.Event()
    sampler = MetricsSampler(rc, MetricsLog(), 0.001, lambda: (ticks.set(), [])[1])
    sampler.start()
    assert ticks.wait(10)
    rc.fail(RuntimeError("x"))
    sampler._thread.join(10)
    assert not sampler._thread.is_alive()


def test_run_result_prints_a_short_summary():
    res = RunResult("vsn", 2.0, {"s": 1000}, {"out": 10},
                    extra={"latency_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0, "samples": 9999},
                           "latency_series": [(0.1, 1.0)] * 4000,
                           "parallelism": {"agg": 2},
                           "reconfigurations": [{"applied": True}, {"applied": False}]})
    text = str(res)
    assert "1,000 tuples in, 10 out" in text and "500 tuples/s" in text
    assert "p99 2.0 ms" in text and "agg 2" in text and "1 applied of 2" in text
    assert len(repr(res)) < 300
