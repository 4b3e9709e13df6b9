"""VSN instances on whole batches (issue #16): a columnar A+ reading a JSON Lines file takes
batches through the shared columnar σ (operators/columnar_shared.py) and gives the reference's
output — the tuple path's, as oracle — at any parallelism, number of key groups and
reconfiguration schedule (a step due inside a batch cuts it), for payloads the columnar f_MK
refuses (tuple-path partials in the same σ), and names the same failing tuple."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from columnar_cases import (
    QUERIES,
    WORDS,
    failing_tuple_case,
    tweets,
)
from columnar_cases import flow_of as _flow
from columnar_cases import picky as _picky
from columnar_cases import reference_collector as _reference
from columnar_cases import write_rows as _write
from conformance.contract import checked_multiset, diff, multiset, schedules
from stretchflow.batch import Batch
from stretchflow.errors import OperatorError
from stretchflow.executors import vsn
from stretchflow.io.sinks import Collector
from stretchflow.io.sources import JsonLines
from stretchflow.operators.columnar_kernels import key_groups

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    # many batches per example, so steps, watermarks and helpers meet batch boundaries
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 37)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 37)


@SETTINGS
@given(rows=tweets(max_size=400), query=st.sampled_from(sorted(QUERIES)), p=st.integers(1, 3),
       groups=st.sampled_from([None, 1, 5, 64]), steps=schedules(400, 4, 4))
def test_same_output_as_the_tuple_path(tmp_path, rows, query, p, groups, steps):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = multiset(_reference(path, QUERIES[query]))
    flow, col = _flow(path, QUERIES[query]())
    res = flow.run("vsn", parallelism=p, max_parallelism=4, key_groups=groups,
                   reconfigure=steps)
    assert res.extra["paths"] == {flow.nodes[1].name: "columnar"}
    got = checked_multiset(col)
    assert got == want, diff(got, want)


@SETTINGS
@given(rows=tweets(max_size=400), p=st.integers(1, 3), groups=st.sampled_from([None, 1, 64]),
       steps=schedules(400, 4, 3))
def test_batches_the_columnar_form_refuses_go_tuple_at_a_time(tmp_path, rows, p, groups,
                                                                steps):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = multiset(_reference(path, _picky))
    flow, col = _flow(path, _picky())
    flow.run("vsn", parallelism=p, max_parallelism=4, key_groups=groups, reconfigure=steps)
    got = checked_multiset(col)
    assert got == want, diff(got, want)


def test_a_failing_tuple_is_named_as_tuple_at_a_time(tmp_path):
    path, want = failing_tuple_case(tmp_path)
    for p in (1, 2, 3):
        flow, _ = _flow(path, QUERIES["wordcount"]())
        with pytest.raises(OperatorError) as got:
            flow.run("vsn", parallelism=p)
        assert (got.value.ts, got.value.payload) == (want.ts, want.payload)


def test_reconfigurations_while_it_runs(tmp_path):
    """Reconfigurations requested from another thread at any moment (1 <-> 4 instances,
    balanced f_μ too) while instances sum batches ahead of each other."""
    rows = [{"ts": t * 3, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(4))}
            for t in range(6000)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = multiset(_reference(path, QUERIES["wordcount"]))
    for seed in range(3):
        stop = threading.Event()

        def churn(ex, seed=seed, stop=stop):
            def go():
                k = seed
                while not stop.is_set():
                    k += 1
                    ex.reconfigure(1 + k % 4, "balanced" if k % 3 == 0 else None, wait=True)
            threading.Thread(target=go, daemon=True).start()

        flow, col = _flow(path, QUERIES["wordcount"]())
        try:
            res = flow.run("vsn", parallelism=2, max_parallelism=4, key_groups=16,
                           on_start=churn)
        finally:
            stop.set()
        applied = [r for r in res.extra["reconfigurations"] if r["applied"]]
        assert applied, "no reconfiguration was applied while the input ran"
        assert checked_multiset(col) == want


def test_columnar_off_takes_tuples(tmp_path):
    path = tmp_path / "in.jsonl"
    _write(path, [{"ts": t, "text": "a"} for t in range(100)])
    flow, _ = _flow(path, QUERIES["wordcount"]())
    assert flow.run("vsn", columnar="off").extra["paths"] != {"wordcount": "columnar"}
    with pytest.raises(Exception, match="columnar"):
        flow.run("vsn", columnar="maybe")


def test_a_consumer_that_takes_tuples_gets_tuples(tmp_path):
    path = tmp_path / "in.jsonl"
    rows = [{"ts": t * 50, "text": "a b a"} for t in range(200)]
    _write(path, rows)
    outs = []
    for engine, opts in (("reference", {"columnar": "off"}), ("vsn", {"parallelism": 2})):
        flow = sf.Flow()
        counts = flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]())
        col = counts.map(lambda p: {**p, "n": p["count"] * 2}).collect()
        flow.run(engine, **opts)
        assert all(type(p) is not Batch for _, p in col.items)
        outs.append(checked_multiset(col))
    assert outs[0] == outs[1]


def test_key_groups_are_a_function_of_the_key():
    import pyarrow as pa

    words = pa.array(["a", "bb", "a", "", "é" * 40, "bb"])
    g = key_groups([words], 7).tolist()
    assert g[0] == g[2] and g[1] == g[5]
    assert g[:3] == key_groups([words.slice(0, 3)], 7).tolist()  # offsets are honoured
    many = key_groups([pa.array([f"w{i}" for i in range(7000)])], 7)
    assert set(many.tolist()) == set(range(7))
    pairs = key_groups([words, words], 7).tolist()
    assert pairs[0] == pairs[2]
    assert key_groups([pa.array([3, 4, 3])], 5).tolist()[0] == \
        key_groups([pa.array([3, 4, 3])], 5).tolist()[2]


def test_memory_of_slices_is_freed(tmp_path):
    """Slices every instance has emitted go: σ holds only the open windows' slices."""
    path = tmp_path / "in.jsonl"
    _write(path, [{"ts": t * 100, "text": f"w{t % 50}"} for t in range(5000)])
    flow, _ = _flow(path, QUERIES["wordcount"]())
    seen = []

    def spy(ex):
        vop = next(iter(ex.ops.values()))
        seen.append(vop.columnar_state)

    flow.run("vsn", parallelism=2, on_start=spy)
    assert seen[0] is not None and seen[0].parts == {}
    assert seen[0].pending == type(seen[0].pending)()


def test_batch_split_keeps_both_forms():
    b = Batch([1, 2, 3], payloads=[{"a": 1}, {"a": 2}, {"a": 3}])
    _ = b.table
    x, y = b.split(1)
    assert x.payloads == [{"a": 1}] and y.table.column("a").to_pylist() == [2, 3]
    assert list(y.ts) == [2, 3]


def test_collector_gets_tuples_from_batches(tmp_path):
    path = tmp_path / "in.jsonl"
    _write(path, [{"ts": t, "text": "a"} for t in range(10)])
    flow = sf.Flow()
    col = Collector()
    flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]()).sink(col)
    vsn.run(flow, parallelism=2)
    assert sum(p["count"] for _, p in col.items) == 10 * 4  # each tuple in 4 windows


@pytest.mark.parametrize("p", [1, 2])
def test_the_source_thread_explodes_each_batch_once_in_order(tmp_path, p):
    """A columnar O+ that is its source's one reader: f_MK's columnar form runs on the
    source's thread (explode_ahead), once per batch and in batch order, and the instances'
    output is the tuple path's."""
    from columnar_cases import recording, reference_multiset, words_file
    from stretchflow.runtime import pump

    size = pump.COLUMNAR_BATCH  # 37 here (the module's fixture): many batches
    path = words_file(tmp_path, n=20 * size + 7)
    calls: list = []
    flow, col = _flow(path, recording(calls))
    res = flow.run("vsn", parallelism=p)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    assert multiset(col) == reference_multiset(path, QUERIES["wordcount"])
    assert len(calls) == sum(1 for _ in JsonLines(path).batches(size)) >= 20
    assert {name for name, _ in calls} == {f"source {path.name}"}
    firsts = [ts for _, ts in calls]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
