"""The run's Python threads on one CPU (runtime/gil_core.py, issue #32): which threads a run
pins, that they really run there, and that everything else is left to the scheduler."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

import stretchflow as sf
from stretchflow.runtime.gil_core import pinned, python_core
from stretchflow.runtime.result import gil_serializes_threads

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
PINS = gil_serializes_threads() and len(CPUS) > 1 and hasattr(os, "sched_setaffinity")
needs_pins = pytest.mark.skipif(not PINS, reason="one CPU, no per-thread affinity or no GIL")


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


@needs_pins
def test_pinned_runs_the_function_on_that_cpu_only():
    target = pinned(lambda x: (x, os.sched_getaffinity(0)), CPUS[0])
    assert _in_thread(lambda: target(7)) == (7, {CPUS[0]})


def test_a_cpu_the_system_refuses_is_not_a_failure():
    # a CPU number no machine has: the thread runs unpinned, the function still runs
    assert _in_thread(lambda: pinned(lambda: "ran", 1 << 20)()) == "ran"


def _lambda_flow(seen: set) -> tuple[sf.Flow, Any]:
    """An aggregate whose f_MK records the affinity of each thread calling it, and its sink."""
    rows = [{"ts": i * 100, "user": f"u{i % 7}"} for i in range(3000)]

    def keys(t):
        seen.add((threading.current_thread().name, frozenset(os.sched_getaffinity(0))))
        return t["user"]

    flow = sf.Flow("pins")
    sink = sf.io.collect()
    flow.source(sf.io.iterable(rows)).aggregate(
        size="10s", keys=keys, init=int, update=lambda c, t: c + 1,
        output=lambda k, c: {"user": k, "c": c}).sink(sink)
    return flow, sink


@needs_pins
@pytest.mark.parametrize("engine", ["vsn", "ordered", "slack"])
def test_the_threads_calling_python_functions_run_on_the_core(engine):
    seen: set = set()
    flow, sink = _lambda_flow(seen)
    r = flow.run(engine=engine, parallelism=2)
    pinned_out = sorted(sink.items, key=repr)
    core = r.extra["gil_core"]
    assert core["cpu"] == CPUS[-1] and core["threads"]
    assert seen and all(cpus == {CPUS[-1]} for _, cpus in seen), seen
    assert {name for name, _ in seen} <= set(core["threads"])
    assert f"they share CPU {CPUS[-1]}" in r.summary()
    seen.clear()
    off = flow.run(engine=engine, parallelism=2, gil_core=False)
    assert "gil_core" not in off.extra and "share CPU" not in off.summary()
    assert seen and all(cpus == frozenset(CPUS) for _, cpus in seen), seen
    assert sorted(sink.items, key=repr) == pinned_out and len(pinned_out) == 7 * 30


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
