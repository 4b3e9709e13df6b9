"""The run's Python threads on one CPU while they take turns at the GIL (runtime/gil_core.py,
issues #32 and #33): which threads a run measures, when it pins them and lets them go, that
they really run there, and that everything else is left to the scheduler."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

import stretchflow as sf
from stretchflow.runtime import gil_core
from stretchflow.runtime.gil_core import BUSY, SERIAL, PythonCore, judge, python_core
from stretchflow.runtime.result import gil_serializes_threads

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
PINS = (gil_serializes_threads() and len(CPUS) > 1 and hasattr(os, "sched_setaffinity")
        and gil_core.thread_cpu_s(threading.get_native_id()) is not None)
needs_pins = pytest.mark.skipif(not PINS, reason="one CPU, no per-thread affinity or "
                                "schedstat, or no GIL")
#: rows a source yields at most while it waits for the measurements (never reached when they
#: are made: a bound, so that a broken controller fails the test instead of hanging it)
CAP = 3_000_000


def _in_thread(fn):
    """``fn()`` on a new thread (affinity set there stays there), its result."""
    got = []
    t = threading.Thread(target=lambda: got.append(fn()))
    t.start()
    t.join()
    return got[0]


def test_off_pins_nothing():
    assert python_core(False) is None


@needs_pins
def test_the_core_is_the_last_cpu_allowed_and_none_when_one_is():
    assert python_core(True) == CPUS[-1]

    def one_cpu():
        os.sched_setaffinity(0, {CPUS[0]})  # this thread only
        return python_core(True)

    assert _in_thread(one_cpu) is None
    assert sorted(os.sched_getaffinity(0)) == CPUS  # the caller's affinity is untouched


def test_the_judgement():
    # more than SERIAL cores: their work ran in parallel, so they go free, whatever before
    assert judge(True, SERIAL + 0.01) is False and judge(False, 1.9) is False
    # busy on one core's worth: taking turns
    assert judge(False, BUSY) is True and judge(False, SERIAL) is True
    # idle says nothing: the state stays
    assert judge(True, BUSY - 0.01) is True and judge(False, 0.0) is False


class _Cores:
    """Fake per-thread CPU readings: the candidates together use ``cores`` cores of the wall
    time, shared evenly (what /proc would say of threads that do so)."""

    def __init__(self, core: PythonCore, cores: float):
        self.core, self.cores = core, cores
        self.cpu: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.lock = threading.Lock()

    def __call__(self, tid: int) -> float:
        with self.lock:
            now = time.perf_counter()
            n = max(1, len(self.core._tids))
            ran = (now - self.last.get(tid, now)) * self.cores / n
            self.cpu[tid] = self.cpu.get(tid, 0.0) + ran
            self.last[tid] = now
            return self.cpu[tid]


def _wait(cond, what: str, limit: float = 30.0) -> None:
    """Waits (in small blocking steps) until ``cond()``; fails naming ``what`` after ``limit``
    s (a bound for a broken controller, not a timing the test relies on)."""
    end = time.monotonic() + limit
    ev = threading.Event()
    while not cond():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        ev.wait(0.005)


@needs_pins
def test_pinned_while_taking_turns_let_go_when_parallel_and_probed_while_pinned(monkeypatch):
    monkeypatch.setattr(gil_core, "REPROBE", 3)
    core = PythonCore(CPUS[-1], period=0.01)
    fake = _Cores(core, cores=1.0)
    monkeypatch.setattr(gil_core, "thread_cpu_s", fake)
    release = threading.Event()
    ts = [threading.Thread(target=core.wrap(lambda: release.wait(60), f"t{i}"))
          for i in range(2)]
    for t in ts:
        t.start()
    _wait(lambda: len(core._tids) == 2, "the candidates to start")
    core.start()
    try:
        _wait(lambda: core.n_changes == 1, "a pin")
        assert core.changes[0][1:] == ("pin", 1.0)
        assert all(os.sched_getaffinity(t.native_id) == {CPUS[-1]} for t in ts)
        # a candidate started while the run is pinned pins itself
        seen = []
        late = threading.Thread(target=core.wrap(
            lambda: seen.append(os.sched_getaffinity(0)), "late"))
        late.start()
        late.join()
        assert seen == [{CPUS[-1]}]
        # pinned, they show no more than one core: only the probe (a free period every
        # REPROBE) sees them use two, and then they stay free
        fake.cores = 1.9
        _wait(lambda: core.n_changes == 2, "the probe to let them go")
        assert core.changes[1][1] == "free" and core.changes[1][2] > SERIAL
        assert all(os.sched_getaffinity(t.native_id) == set(CPUS) for t in ts)
        p = core.periods
        _wait(lambda: core.periods >= p + 4, "more periods")
        assert core.n_changes == 2  # free stays free while they use two cores
        # idle says nothing: the state stays
        fake.cores = 0.1
        p = core.periods
        _wait(lambda: core.periods >= p + 4, "idle periods")
        assert core.n_changes == 2
    finally:
        release.set()
        core.stop()
        for t in ts:
            t.join()
    assert core.pinned_s > 0 and core.report()["threads"] == ["t0", "t1", "late"]


@pytest.fixture
def made(monkeypatch):
    """The PythonCore objects the runs make, measuring every 10 ms."""
    got: list[PythonCore] = []
    init = PythonCore.__init__

    def record(self, cpu, period=0.01):
        init(self, cpu, 0.01)
        got.append(self)

    monkeypatch.setattr(PythonCore, "__init__", record)
    return got


def _lambda_flow(seen: list, until) -> tuple[sf.Flow, Any]:
    """An aggregate whose f_MK records the affinity of each thread calling it, and its sink;
    its source yields rows until ``until(i)`` for the row count ``i`` (at most CAP)."""

    def rows():
        i = 0
        while i < CAP and not until(i):
            yield {"ts": i * 100, "user": f"u{i % 7}"}
            i += 1

    def keys(t):
        seen.append((threading.current_thread().name, frozenset(os.sched_getaffinity(0))))
        return t["user"]

    flow = sf.Flow("pins")
    sink = sf.io.collect()
    flow.source(sf.io.iterable(rows)).aggregate(
        size="10s", keys=keys, init=int, update=lambda c, t: c + 1,
        output=lambda k, c: {"user": k, "c": c}).sink(sink)
    return flow, sink


@needs_pins
@pytest.mark.parametrize("engine", ["vsn", "ordered", "slack"])
def test_threads_calling_python_functions_are_measured_taking_turns_and_pinned(engine, made):
    # the real measurements: Python functions tuple by tuple use one core at most, so the run
    # pins them, and its later calls run on the core
    seen: list = []

    def pinned_a_while(i):
        return bool(made) and made[-1].n_changes >= 1 and made[-1].periods >= 5
    flow, sink = _lambda_flow(seen, pinned_a_while)
    r = flow.run(engine=engine, parallelism=2)
    core = r.extra["gil_core"]
    assert core["cpu"] == CPUS[-1] and core["threads"]
    assert core["changes"][0][1] == "pin" and BUSY <= core["changes"][0][2] <= SERIAL
    assert core["pinned_s"] > 0
    assert {name for name, _ in seen} <= set(core["threads"])
    assert frozenset({CPUS[-1]}) in {cpus for _, cpus in seen}, "no call on the core"
    assert f"they shared CPU {CPUS[-1]}" in r.summary()
    assert sink.items
    seen.clear()
    flow, sink = _lambda_flow(seen, lambda i: i >= 3000)
    off = flow.run(engine=engine, parallelism=2, gil_core=False)
    assert "gil_core" not in off.extra and "shared CPU" not in off.summary()
    assert seen and all(cpus == frozenset(CPUS) for _, cpus in seen)
    assert len(sink.items) == 7 * 30


@needs_pins
def test_threads_running_in_parallel_stay_free(monkeypatch, made):
    # the same flow, its candidates measured (fake readings) using 1.9 cores together: a user
    # function that releases the GIL (numpy); before #33 they were pinned all the same
    monkeypatch.setattr(gil_core, "thread_cpu_s",
                        lambda tid: made[-1].fake(tid) if made else 0.0)
    real = PythonCore.__init__

    def with_fake(self, cpu, period=0.01):
        real(self, cpu, period)
        self.fake = _Cores(self, cores=1.9)

    monkeypatch.setattr(PythonCore, "__init__", with_fake)
    seen: list = []
    flow, sink = _lambda_flow(seen, lambda i: bool(made) and made[-1].periods >= 8)
    r = flow.run(engine="vsn", parallelism=2)
    core = r.extra["gil_core"]
    assert made[-1].periods >= 8 and core["threads"]
    assert core["pinned_s"] == 0 and core["changes"] == []
    assert seen and all(cpus == frozenset(CPUS) for _, cpus in seen)
    assert "shared CPU" not in r.summary() and sink.items


@needs_pins
def test_columnar_operators_and_sources_arrow_parses_are_left_to_the_scheduler(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # (a columnar O+ reading JSON Lines that Arrow parses pins nothing: test_gil_note's
    # test_no_gil_line_on_the_columnar_path)
    # lambdas reading Parquet (Arrow decodes it): the instances only
    bids = tmp_path / "bids.parquet"
    pq.write_table(pa.table({"ts": [i * 100 for i in range(2000)],
                             "auction": [i % 13 for i in range(2000)]}), bids)
    flow = sf.Flow("parquet")
    flow.source(sf.io.parquet(bids)).aggregate(
        size="10s", keys=lambda t: t["auction"], init=int, update=lambda c, t: c + 1,
        output=lambda k, c: {"auction": k, "c": c}).sink(sf.io.collect())
    r = flow.run(engine="vsn", parallelism=2)
    assert not any(name.startswith("source") for name in r.extra["gil_core"]["threads"])
    assert {name for name in r.extra["gil_core"]["threads"]} == {"aggregate[0]", "aggregate[1]"}
    r = flow.run(engine="ordered", parallelism=2)
    assert "gil_core" not in r.extra  # its workers read the Parquet source too


@needs_pins
def test_ordered_leaves_a_line_with_column_expressions_to_the_scheduler(tmp_path):
    # a Map of column expressions runs Arrow's kernels on the workers (the GIL released):
    # pinned, they took 1.44 times as long (currency, 1 M bids)
    bids = tmp_path / "bids.jsonl"
    bids.write_text("".join(f'{{"ts": {i * 10}, "price": {i % 97}}}\n' for i in range(3000)))
    flow = sf.Flow("exprs")
    sink = sf.io.collect()
    flow.source(sf.io.jsonl(bids)).with_columns(eur=sf.col("price") * 0.9).sink(sink)
    r = flow.run(engine="ordered", parallelism=2)
    assert "gil_core" not in r.extra and len(sink.items) == 3000
