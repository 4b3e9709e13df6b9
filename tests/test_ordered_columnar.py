"""The ordered engine on whole Arrow batches (issue #16, executors/ordered_columnar.py): a file
source -> A+ with columnar forms -> sinks hands batches from the source stage to the O+ stage,
whose p instances share one columnar σ; the output is the reference's (its tuple path, as
oracle: same per-timestamp multiset, timestamps never going back) at parallelism 1-3, under
every scheduler, queue and reorder buffer, for wordcount, paircount and a tumbling window, for
batches the columnar f_MK refuses; f_MK and f_U errors name the reference's tuple; the runs the
path does not cover take tuples and say why."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from columnar_cases import (
    QUERIES,
    WORDS,
    failing_tuple_case,
    fallback_matches_reference,
    tweets,
    words_file,
)
from columnar_cases import bounded as _bounded
from columnar_cases import flow_of as _flow
from columnar_cases import marked as _marked
from columnar_cases import picky as _picky
from columnar_cases import reference_multiset as _reference
from columnar_cases import write_rows as _write
from conformance.contract import checked_multiset, diff
from stretchflow.batch import Batch
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.executors import ordered
from stretchflow.io.sinks import Collector
from stretchflow.io.sources import JsonLines
from stretchflow.operators.aggregate import Aggregate
from stretchflow.queries.wordcount import wordcount

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
MODES = [{"scheduler": "qst"},
         {"scheduler": "lp", "reorder": "lock", "queue": "partitioned"},
         {"scheduler": "et", "max_batch": 16},
         {"scheduler": "ct", "queue": "partitioned", "capacity": 64}]


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    # many source batches per example, so windows close at and between batch boundaries
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 37)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 37)


@SETTINGS
@given(rows=tweets(), query=st.sampled_from(sorted(QUERIES)), p=st.integers(1, 3),
       groups=st.sampled_from([None, 1, 5, 64]), mode=st.sampled_from(MODES))
def test_same_output_as_the_reference(tmp_path, rows, query, p, groups, mode):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, QUERIES[query])
    flow, col = _flow(path, QUERIES[query]())
    box = _bounded(lambda: flow.run("ordered", parallelism=p, key_groups=groups, **mode))
    res = box["result"]
    assert res.extra["paths"] == {flow.nodes[1].name: "columnar"}
    assert "columnar_fallback" not in res.extra
    assert res.total_in == len(rows)
    assert res.tuples_out[col.name] == sum(sum(c.values()) for c in want.values())
    got = checked_multiset(col)
    assert got == want, diff(got, want)


@SETTINGS
@given(rows=tweets(), p=st.integers(1, 3), groups=st.sampled_from([None, 1, 64]))
def test_batches_the_columnar_form_refuses(tmp_path, rows, p, groups):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, _picky)
    flow, col = _flow(path, _picky())
    res = flow.run("ordered", parallelism=p, key_groups=groups)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    got = checked_multiset(col)
    assert got == want, diff(got, want)


def test_windows_leave_as_batches_and_the_sinks_take_them(tmp_path):
    """What the sinks are handed: whole windows (write_batch), never one tuple per write;
    two sinks on the A+ both get every window."""
    rows = [{"ts": t * 11, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(4))}
            for t in range(600)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)

    class Batches(Collector):
        def __init__(self):
            super().__init__()
            self.batches = 0

        def write_batch(self, batch: Batch) -> None:
            self.batches += 1
            super().write_batch(batch)

    a, b = Batches(), Batches()
    flow = sf.Flow()
    counts = flow.source(JsonLines(path)).oplus(QUERIES["paircount"]())
    counts.sink(a)
    counts.sink(b)
    res = flow.run("ordered", parallelism=2)
    assert res.extra["paths"] == {"paircount": "columnar"}
    want = _reference(path, QUERIES["paircount"])
    assert checked_multiset(a) == want and checked_multiset(b) == want
    assert 0 < a.batches < len(a.items)


def test_a_failing_tuple_is_named_as_tuple_at_a_time(tmp_path):
    path, want = failing_tuple_case(tmp_path)
    for p in (1, 2, 3):
        flow, _ = _flow(path, QUERIES["wordcount"]())
        box = _bounded(lambda flow=flow, p=p: flow.run("ordered", parallelism=p))
        got = box.get("error")
        assert isinstance(got, OperatorError), box
        assert (got.operator, got.ts, got.payload) == (want.operator, want.ts, want.payload)


def test_an_f_u_error_names_the_reference_s_tuple(tmp_path):
    rows = [{"ts": t, "text": "a b c"} for t in range(0, 3000, 3)]
    rows[600] = {"ts": rows[600]["ts"], "text": "q q q q q q q", "mark": 1}
    rows[700] = {"ts": rows[700]["ts"], "text": "q q q q q q q", "mark": 2}
    path = tmp_path / "in.jsonl"
    _write(path, rows)

    def update(a, n):
        if n == 7:  # seven "q" in one tuple: only the marked ones
            raise ZeroDivisionError("boom")
        return a + n

    flow, _ = _flow(path, _marked(update))
    with pytest.raises(OperatorError) as want:
        flow.run("reference", columnar="off")
    assert want.value.payload["mark"] == 1
    for p in (1, 3):
        flow, _ = _flow(path, _marked(update))
        box = _bounded(lambda flow=flow, p=p: flow.run("ordered", parallelism=p))
        err = box.get("error")
        assert isinstance(err, OperatorError), box
        assert (err.operator, err.ts, err.payload) == \
            ("marked", want.value.ts, want.value.payload)
        assert isinstance(err.__cause__, ZeroDivisionError)


@pytest.mark.parametrize(("opts", "reason"), [
    ({"columnar": "off"}, "columnar='off'"),
    ({"checkpoint": "CK"}, "checkpointed"),
])
def test_runs_the_path_does_not_cover_take_tuples_and_say_why(tmp_path, opts, reason):
    fallback_matches_reference(tmp_path, "ordered", reason, **opts)


def test_other_sources_and_shapes_take_tuples(tmp_path):
    rows = [{"ts": t * 5, "text": "a b"} for t in range(300)]
    flow = sf.Flow()
    flow.source(sf.io.iterable(rows)).oplus(QUERIES["wordcount"]()).collect()
    res = flow.run("ordered", parallelism=2)
    assert "no batches" in res.extra["columnar_fallback"]["wordcount"]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, QUERIES["wordcount"])
    # a lambda operator after the A+ or before it: the line stays on batches, the lambda
    # runs tuple by tuple on each (issue #31), the same output
    flow = sf.Flow()
    col = flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]()).map(lambda p: p).collect()
    res = flow.run("ordered", parallelism=2)
    assert res.extra["paths"] == {"wordcount": "columnar", "map": "tuple"}
    assert checked_multiset(col) == want
    flow = sf.Flow()
    col = flow.source(JsonLines(path)).map(lambda p: p).oplus(QUERIES["wordcount"]()).collect()
    res = flow.run("ordered", parallelism=2)
    assert res.extra["paths"] == {"wordcount": "columnar", "map": "tuple"}
    assert checked_multiset(col) == want
    flow = sf.Flow()  # not a line (the A+ read twice): tuples
    counted = flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]())
    col = counted.collect()
    counted.map(lambda p: p).collect()
    res = flow.run("ordered", parallelism=2)
    assert "one line" in res.extra["columnar_fallback"]["wordcount"]
    assert checked_multiset(col) == want
    # an A+ without columnar forms: nothing to fall back from
    flow = sf.Flow()
    op = Aggregate(size=100, slide=50, keys=lambda t: t["text"].split(), init=int,
                   update=lambda a, v: a + 1, output=lambda k, n: {"w": k, "n": n}, name="plain")
    flow.source(JsonLines(path)).oplus(op).collect()
    res = flow.run("ordered", parallelism=2)
    assert res.extra["paths"]["plain"] != "columnar"
    assert "columnar_fallback" not in res.extra
    with pytest.raises(FlowDefinitionError, match="columnar"):
        ordered.run(flow, columnar="maybe")


def test_empty_input_and_a_bad_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"")
    flow, col = _flow(path, QUERIES["wordcount"]())
    res = flow.run("ordered", parallelism=2)
    assert res.extra["paths"] == {"wordcount": "columnar"} and col.items == []
    rows = [{"ts": t, "text": "a b"} for t in range(0, 900, 3)]
    lines = [orjson.dumps(r) for r in rows]
    lines[200] = b'{"ts": 600, "text": '  # cut short: the source names the line
    path.write_bytes(b"\n".join(lines) + b"\n")
    flow, _ = _flow(path, QUERIES["wordcount"]())
    with pytest.raises(Exception) as want:
        flow.run("reference", columnar="off")
    flow, _ = _flow(path, QUERIES["wordcount"]())
    box = _bounded(lambda: flow.run("ordered", parallelism=2))
    assert type(box.get("error")) is type(want.value), box
    assert str(box["error"]) == str(want.value)


def test_latency_markers_on_batches(tmp_path):
    path = words_file(tmp_path, 2000)
    flow, col = _flow(path, QUERIES["wordcount"]())
    res = flow.run("ordered", parallelism=2, marker_every=100)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    # 2000 tuples in batches of 37: a marker after each batch that crosses a multiple of 100
    assert 15 <= res.extra["marker_latency_ms"]["samples"] <= 2000 // 37 + 1
    assert checked_multiset(col) == _reference(path, QUERIES["wordcount"])


@pytest.mark.parametrize("p", [1, 2, 3])
def test_the_source_reads_a_bounded_number_of_batches_ahead(tmp_path, p):
    """Flow control counts a batch as many tuples and follows the slowest instance: with
    capacity C the O+ holds about max(4, C // COLUMNAR_BATCH) batches not yet processed by
    every instance, not C of them (nor a reorder ring's worth behind a lagging instance)."""
    path = words_file(tmp_path, 37 * 200)
    read = [0]
    ahead: list[int] = []

    class Counted(JsonLines):
        def batches(self, rows=65536):
            it = super().batches(rows)
            if it is None:
                return None

            def counted():
                for b in it:
                    read[0] += 1
                    yield b
            return counted()

    class Watch(Collector):
        def write_batch(self, batch: Batch) -> None:
            # batches read minus the batch holding the window's right boundary (5 ms apart)
            ahead.append(read[0] - (int(batch.ts[-1]) // 5) // 37)
            super().write_batch(batch)

    flow = sf.Flow()
    sink = Watch()
    flow.source(Counted(path)).oplus(wordcount(size=200, slide=100)).sink(sink)
    # capacity 64 < COLUMNAR_BATCH (37) * 4: four batches in the O+ (64 entries without the
    # weight: 32 batches); the rest of the margin is the source's slice (up to max_batch =
    # 256 tuples, 7 batches) and windows of a flush that closed a batch back
    res = flow.run("ordered", parallelism=p, capacity=64)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    assert ahead and max(ahead) <= 12, max(ahead)
    assert checked_multiset(sink) == _reference(path, lambda: wordcount(size=200, slide=100))


@pytest.mark.parametrize("p", [1, 2])
def test_the_source_stage_explodes_every_batch_before_the_o_plus_stage_sums_it(
        tmp_path, monkeypatch, p):
    """f_MK's columnar form runs in the source stage's slices (explode_ahead): every batch the
    O+ stage's instances sum arrives with its columns computed, each batch exploded once
    and in batch order; the output is the reference's."""
    from columnar_cases import recording, words_file
    from stretchflow.operators import columnar_shared
    from stretchflow.operators.columnar import Exploded

    seen: list = []
    partials = columnar_shared.ColumnarShared._partials

    def spy(self, batch, hits):
        seen.append(type(batch.ahead) is Exploded)
        return partials(self, batch, hits)

    monkeypatch.setattr(columnar_shared.ColumnarShared, "_partials", spy)
    path = words_file(tmp_path, n=400)
    calls: list = []
    flow, col = _flow(path, recording(calls))
    res = flow.run("ordered", parallelism=p)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    assert checked_multiset(col) == _reference(path, lambda: wordcount(size=2000, slide=500))
    assert len(seen) == len(calls) >= 8 and all(seen)
    firsts = [ts for _, ts in calls]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
