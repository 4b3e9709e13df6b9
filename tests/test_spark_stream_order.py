"""Spark directory streams in file-name order, the end of input (``until``) and the warning of
a run that ends with windows open (issue #19 item 4, spark/stream_files.py).

The staging tests run without Spark; the others share one Spark session (slow) and compare
the output with the reference executor on the same records (per-timestamp multisets)."""

import json
import logging
import os
import time
from pathlib import Path

import pytest

import spark_fixtures
from conformance.contract import multiset
from spark_fixtures import flow_to, output
from stretchflow.engines import get_spec
from stretchflow.errors import FlowDefinitionError, SourceError
from stretchflow.io.generators import tweets
from stretchflow.spark.stream_files import (
    IDLE_END,
    LiveInputs,
    Stager,
    original_name,
    staged_name,
    warn_open,
)
from stretchflow.spark.streaming import StreamRun, end_marker

BASE = time.time() - 10_000


def write_reversed(d: Path, recs, files: int, start: int = 0, end: bool = True) -> int:
    """Files f-N.jsonl whose modification times run *against* name order (as a copy of
    many files can leave them), the end-of-input marker last by name when ``end``."""
    d.mkdir(parents=True, exist_ok=True)
    step = -(-len(recs) // files)
    texts = ["".join(json.dumps(r) + "\n" for r in recs[j:j + step])
             for j in range(0, len(recs), step)]
    if end:
        texts.append(end_marker(recs[-1]["ts"]))
    k = start
    for text in texts:
        p = d / f"f-{k:05d}.jsonl"
        p.write_text(text)
        t = BASE - 100 * k  # later name, earlier mtime
        os.utime(p, (t, t))
        k += 1
    return k


# -- staging, no Spark ---------------------------------------------------------------------

def test_staged_names_round_trip():
    assert original_name(staged_name(12, "f-3.jsonl")) == "f-3.jsonl"
    assert original_name("f-3.jsonl") == "f-3.jsonl"  # not a staged name: as it is


def test_stager_stages_in_name_order_with_increasing_mtimes(tmp_path):
    src = tmp_path / "in"
    recs = [{"ts": t, "text": "a"} for t in range(10)]
    write_reversed(src, recs, 3, end=False)
    (src / ".hidden.jsonl").write_text("not read\n")
    (src / "notes.txt").write_text("not read\n")
    st = Stager(src, tmp_path / "stage", "in")
    assert st.stage_new() == 3
    staged = sorted((tmp_path / "stage").iterdir(), key=lambda p: p.stat().st_mtime)
    assert [original_name(p.name) for p in staged] == ["f-00000.jsonl", "f-00001.jsonl",
                                                       "f-00002.jsonl"]
    assert len({p.stat().st_mtime for p in staged}) == 3  # no ties
    assert st.last_ts == 9 and not st.ended
    assert st.stage_new() == 0  # nothing new


def test_stager_refuses_a_file_named_before_one_read(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "b.jsonl").write_text('{"ts": 5}\n')
    st = Stager(src, tmp_path / "stage", "in")
    st.stage_new()
    (src / "a.jsonl").write_text('{"ts": 1}\n')
    with pytest.raises(SourceError, match=r"a\.jsonl.*appeared after 'b\.jsonl'"):
        st.stage_new()


def test_stager_resumes_from_its_staging_directory(tmp_path):
    src, stage = tmp_path / "in", tmp_path / "stage"
    src.mkdir()
    (src / "a.jsonl").write_text('{"ts": 1}\n{"ts": 4}\n')
    Stager(src, stage, "in").stage_new()
    (stage / ".00000009-x.jsonl.jsonl.tmp").write_text("half")  # a killed staging
    (src / "b.jsonl").write_text('{"ts": 7}\n')
    again = Stager(src, stage, "in")  # a new run on the same checkpoint
    assert again.last == "a.jsonl" and again.last_ts == 4
    assert again.stage_new() == 1
    assert sorted(p.name for p in stage.iterdir()) == [staged_name(0, "a.jsonl"),
                                                       staged_name(1, "b.jsonl")]


def test_nothing_staged_after_the_end_marker(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"ts": 3}\n' + end_marker(3))
    (src / "b.jsonl").write_text('{"ts": 9}\n')
    st = Stager(src, tmp_path / "stage", "in")
    assert st.stage_new() == 1 and st.ended


def test_idle_stages_an_end_marker_at_the_latest_ts(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"ts": 3}\n{"ts": 8}\n\n')
    st = Stager(src, tmp_path / "stage", "in")
    live = LiveInputs([st], "idle:0.05")
    live.poll()
    live.watch(None, {"isDataAvailable": True, "isTriggerActive": False})
    assert not live.idle_ended  # Spark still has data: not idle
    time.sleep(0.06)  # the idle time under test (idle:0.05) passes
    live.watch(None, {"isDataAvailable": False, "isTriggerActive": False})
    assert live.idle_ended and st.ended
    end = tmp_path / "stage" / staged_name(1, IDLE_END)
    assert json.loads(end.read_text()) == {"ts": 8, "__end__": True}


def test_until_never_drops_end_markers(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"ts": 3}\n' + end_marker(3))
    (src / "b.jsonl").write_text('{"ts": 9}\n')
    st = Stager(src, tmp_path / "stage", "in", skip_end=True)
    assert st.stage_new() == 2 and not st.ended
    assert (tmp_path / "stage" / staged_name(0, "a.jsonl")).read_text() == '{"ts": 3}\n'


def test_until_option_is_checked():
    spec = get_spec("spark")
    assert spec.check({"until": "idle:2"}) == {"until": "idle:2"}
    with pytest.raises(FlowDefinitionError, match="until must be"):
        spec.check({"until": "idle:soon"})


def test_open_counts_reads_both_state_layouts():
    from types import SimpleNamespace

    from stretchflow.spark.stream_files import open_counts

    inst = SimpleNamespace(groups=[{0: {"a": 1, "b": 2}, 4: {"a": 3}},  # {l: {key: ..}}
                                   {"next": 0, 8: {"c": 1}}])  # sliced: {s: ..., NEXT: l}
    assert open_counts(inst) == (4, 3)


def test_open_windows_warning_is_one_line(caplog):
    with caplog.at_level(logging.WARNING):
        assert warn_open(0, 0) is None
        line = warn_open(12, 5)
    assert [r.getMessage() for r in caplog.records] == [line]
    assert "still open" in line
    assert "5 key(s) in 12 (key, window) state(s)" in line and "--until idle:SECONDS" in line


# -- on Spark --------------------------------------------------------------------------------

# the shared fixtures (tests/spark_fixtures.py): pytest finds them by name in this module
spark = spark_fixtures.spark
reference = spark_fixtures.reference


@pytest.fixture(scope="module")
def recs():
    return tweets(400, seed=11, rate=200, vocabulary=25).to_pylist()


@pytest.mark.slow
def test_reverse_mtimes_give_the_sorted_concatenation(spark, tmp_path, recs, reference):
    from stretchflow.spark.streaming import run_stream

    inp, out = tmp_path / "in", tmp_path / "out.jsonl"
    write_reversed(inp, recs, 4)
    info = run_stream(flow_to(inp, out), spark, None, 6)
    assert info["tuples_in"] == {"in0": len(recs)}
    assert multiset(output(out)) == reference
    assert info["open_windows"] == [0, 0]  # the marker closed every window


@pytest.mark.slow
def test_until_idle_ends_without_a_marker(spark, tmp_path, recs, reference, caplog):
    from stretchflow.spark.streaming import run_stream

    inp, out = tmp_path / "in", tmp_path / "out.jsonl"
    write_reversed(inp, recs, 3, end=False)
    with caplog.at_level(logging.WARNING, logger="stretchflow"):
        info = run_stream(flow_to(inp, out), spark, None, 6, until="idle:2", timeout=300)
    assert multiset(output(out)) == reference
    assert info["open_windows"] == [0, 0]
    assert not [r for r in caplog.records if "still open" in r.getMessage()]


@pytest.mark.slow
def test_run_ending_with_windows_open_warns_then_resume_continues_in_name_order(
        spark, tmp_path, recs, reference, caplog):
    """No marker: the bounded run (the files present) ends with windows open and says so in
    one line; more files, mtimes older than the first ones', resume in name order; a file
    named before one already read is an error naming it."""
    from stretchflow.spark.streaming import run_stream

    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    half = len(recs) // 2
    k = write_reversed(inp, recs[:half], 2, start=1, end=False)
    with caplog.at_level(logging.WARNING, logger="stretchflow"):
        first = run_stream(flow_to(inp, out), spark, ckpt, 6)
    warned = [r.getMessage() for r in caplog.records if "still open" in r.getMessage()]
    windows, keys = first["open_windows"]
    assert windows > 0 and keys > 0
    assert len(warned) == 1
    assert f"open, {keys} key(s) in {windows} (key, window) state(s)" in warned[0]
    before = output(out)
    stray = inp / "f-00000.jsonl"  # named before f-00001, read already
    stray.write_text(json.dumps(recs[-1]) + "\n")
    with pytest.raises(SourceError, match="f-00000.jsonl.*appeared after 'f-00002.jsonl'"):
        run_stream(flow_to(inp, out), spark, ckpt, 6)
    stray.unlink()
    assert output(out) == before  # the refused run wrote nothing
    for p in inp.iterdir():  # the next files are older on disk than the first ones
        os.utime(p, (BASE + 1000, BASE + 1000))
    write_reversed(inp, recs[half:], 2, start=k)
    second = run_stream(flow_to(inp, out), spark, ckpt, 6)
    assert second["tuples_in"] == {"in0": len(recs) - half}
    got = output(out)
    assert got[:len(before)] == before
    assert multiset(got) == reference


@pytest.mark.slow
def test_until_never_stages_files_while_it_runs_then_resumes(spark, tmp_path, recs,
                                                             reference):
    """until="never": the query does not end by itself, stages files that come while it runs
    (a marker among them is dropped), stops at a batch boundary when told to (what SIGINT does
    through run_stream's finally); resumed with until="idle:2" it completes the output."""
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    half = len(recs) // 2
    k = write_reversed(inp, recs[:half], 2, end=False)
    run = StreamRun(flow_to(inp, out), spark, ckpt, 6, until="never").start()
    try:
        deadline = time.monotonic() + 240
        while run.records_in()["in0"] < half:
            assert not run.await_end(timeout=1)
            assert time.monotonic() < deadline, run.records_in()
        write_reversed(inp, recs[half:], 2, start=k)  # with a marker: dropped under never
        while run.records_in()["in0"] < len(recs):
            assert not run.await_end(timeout=1)
            assert time.monotonic() < deadline, run.records_in()
        assert not run.await_end(timeout=3)  # the marker did not end it
        assert run.open_windows()[0] > 0
    finally:
        run.stop()
        run.close_sinks()
    before = output(out)
    info = run_stream_idle(inp, out, ckpt, spark)
    assert info["tuples_in"] == {"in0": 0}  # everything was read before the stop
    got = output(out)
    assert got[:len(before)] == before
    assert multiset(got) == reference


def run_stream_idle(inp, out, ckpt, spark):
    from stretchflow.spark.streaming import run_stream

    return run_stream(flow_to(inp, out), spark, ckpt, 6, until="idle:2", timeout=300)
