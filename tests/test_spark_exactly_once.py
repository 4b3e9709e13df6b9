"""Spark streaming output exactly once (io.parts through the foreachBatch sink): a query
stopped and resumed on the same checkpoint continues its output directory, a batch Spark
replays rewrites its own part, a driver killed while writing a part leaves no half line and
no duplicate after the restart; input counters count records; a temporary checkpoint is
removed. Every test compares the concatenated parts with the reference executor (the
determinism contract: per-timestamp multisets, ts-sorted).

One Spark session for the module (starting one costs 20+ s): every test here is slow."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import spark_fixtures
import stretchflow as sf
from conformance.contract import multiset
from spark_fixtures import PARAMS, flow_to, output
from stretchflow.errors import SourceError, StretchflowError
from stretchflow.io.generators import tweets
from stretchflow.io.parts import committed_parts, read_parts
from stretchflow.queries import build_query
from stretchflow.spark.streaming import StreamRun, end_marker, run_stream

pytestmark = pytest.mark.slow
# the shared fixtures (tests/spark_fixtures.py): pytest finds them by name in this module
spark = spark_fixtures.spark
reference = spark_fixtures.reference


@pytest.fixture(scope="module")
def recs():
    return tweets(600, seed=7, rate=200, vocabulary=30).to_pylist()


BASE = time.time() - 10_000


def write_files(d: Path, recs, files: int, start: int = 0, end: bool = True) -> int:
    """Files f-N.jsonl with increasing mtimes (the file source orders by mtime), a blank line
    in each (not a record); the end-of-input marker last when ``end``. Returns the next N."""
    d.mkdir(parents=True, exist_ok=True)
    step = -(-len(recs) // files)
    k = start
    chunks = [recs[j:j + step] for j in range(0, len(recs), step)]
    texts = ["".join(json.dumps(r) + "\n" for r in c) + "\n" for c in chunks]
    if end:
        texts.append(end_marker(recs[-1]["ts"]))
    for text in texts:
        p = d / f"f-{k:05d}.jsonl"
        p.write_text(text)
        os.utime(p, (BASE + k, BASE + k))
        k += 1
    return k


def test_resume_continues_the_output_directory(spark, tmp_path, recs, reference):
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    half = len(recs) // 2
    k = write_files(inp, recs[:half], 2, end=False)
    first = run_stream(flow_to(inp, out), spark, ckpt, 6)
    assert first["tuples_in"] == {"in0": half}  # records: not the blank lines
    after_first = output(out)
    assert after_first
    write_files(inp, recs[half:], 2, start=k)
    second = run_stream(flow_to(inp, out), spark, ckpt, 6)
    assert second["tuples_in"] == {"in0": len(recs) - half}  # nor the end marker
    got = output(out)
    assert got[:len(after_first)] == after_first  # the first run's output is kept
    assert multiset(got) == reference


def test_rescale_recipe_keeps_earlier_output(spark, tmp_path, recs, reference):
    """docs/spark.md's recipe: run, stop, rescale the checkpoint, add files, resume."""
    from stretchflow.spark.rescale import rescale, state_partitions

    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    half = len(recs) // 2
    k = write_files(inp, recs[:half], 2, end=False)
    run_stream(flow_to(inp, out), spark, ckpt, 6)
    before = output(out)
    assert before and state_partitions(ckpt) == 2
    rescale(spark, ckpt, 1)
    write_files(inp, recs[half:], 2, start=k)
    run_stream(flow_to(inp, out), spark, ckpt, 6)
    got = output(out)
    assert got[:len(before)] == before
    assert multiset(got) == reference


def test_replayed_batch_rewrites_its_part(spark, tmp_path, recs, reference):
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    write_files(inp, recs, 3)
    run_stream(flow_to(inp, out), spark, ckpt, 6)
    assert multiset(output(out)) == reference
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert last in dict(committed_parts(out))  # the end-of-input batch flushed windows
    # as if the driver died before logging the batch's commit (Hadoop's checksum file too)
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run = StreamRun(flow_to(inp, out), spark, ckpt, 6).start()
    run.await_end()
    run.stop()
    run.close_sinks()
    assert [b["batch"] for b in run.batches] == [last]  # Spark replayed that batch only
    assert multiset(output(out)) == reference  # ... and its part was replaced, not added


KILLED_DRIVER = r"""
import os, signal, sys
from pathlib import Path
import stretchflow as sf
from stretchflow.io import parts
from stretchflow.queries import build_query
from stretchflow.spark.session import get_session
from stretchflow.spark.streaming import run_stream

inp, out, ckpt = map(Path, sys.argv[1:4])
real = parts.PartWriter.commit

def commit(self, part_id, items):
    if items and self.manifest["parts"]:  # the second batch with output: die mid-write
        tmp = self.path / f".{parts.part_name(part_id, self.suffix)}.tmp-{os.getpid()}"
        tmp.write_bytes(b'{"ts": 1, "word": "ha')
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, part_id, items)

parts.PartWriter.commit = commit
spark = get_session("local[2]", {"spark.sql.shuffle.partitions": "2"})
flow = sf.Flow("wordcount")
build_query("wordcount", [flow.source(sf.io.jsonl(inp, name="in0"))],
            size=int(sys.argv[4]), slide=int(sys.argv[5])).sink(str(out))
run_stream(flow, spark, ckpt, 6)
"""


def test_driver_killed_while_writing_a_part(spark, tmp_path, recs, reference):
    """A driver process SIGKILLed in the middle of a part's write (a half line in its temporary
    file); the restart on the same checkpoint replays that batch: the output equals the
    reference, no half line, no duplicate."""
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    write_files(inp, recs, 4)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_DRIVER, str(inp), str(out), str(ckpt),
         str(PARAMS["size"]), str(PARAMS["slide"])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env=dict(os.environ, SPARK_MASTER="local[2]"))
    try:
        log, _ = proc.communicate(timeout=240)
    finally:
        try:  # the driver's JVM, if it outlived it (the process group is the one we started)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL, log.decode()[-3000:]
    assert list(out.glob(".*.tmp-*"))  # it did die mid-write
    committed = dict(committed_parts(out))
    assert len(committed) == 1
    run_stream(flow_to(inp, out), spark, ckpt, 6)
    assert not list(out.glob(".*.tmp-*"))
    assert multiset(output(out)) == reference


def test_rerun_with_a_new_checkpoint_starts_the_output_over(spark, tmp_path, recs,
                                                            reference):
    inp, out = tmp_path / "in", tmp_path / "out.jsonl"
    write_files(inp, recs, 2)
    run_stream(flow_to(inp, out), spark, tmp_path / "ckpt1", 6)
    run_stream(flow_to(inp, out), spark, tmp_path / "ckpt2", 6)  # recomputes everything
    assert multiset(output(out)) == reference


def test_plain_file_at_the_output_is_kept(spark, tmp_path, recs):
    inp, out = tmp_path / "in", tmp_path / "out.jsonl"
    write_files(inp, recs[:50], 1)
    out.write_text('{"ts": 1, "from": "a batch run"}\n')
    with pytest.raises(StretchflowError, match="move or delete it"):
        run_stream(flow_to(inp, out), spark, tmp_path / "ckpt", 6)
    assert out.read_text() == '{"ts": 1, "from": "a batch run"}\n'


def test_temporary_checkpoint_removed_and_empty_input_counts_zero(spark, tmp_path,
                                                                  monkeypatch, recs):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    empty, out = tmp_path / "empty", tmp_path / "o.jsonl"
    empty.mkdir()
    info = run_stream(flow_to(empty, out), spark, None, 6)
    assert info["tuples_in"] == {"in0": 0} and info["checkpoint"] is None
    assert list(read_parts(out)) == []
    assert not list(tmp.glob("stretchflow-ckpt-*"))
    bad = tmp_path / "bad"
    write_files(bad, recs[:20], 1, end=False)
    (bad / "f-00009.jsonl").write_text('{"ts": 1, "text": \n')
    os.utime(bad / "f-00009.jsonl", (BASE + 9, BASE + 9))
    with pytest.raises(SourceError, match="malformed JSON"):
        run_stream(flow_to(bad, tmp_path / "o2.jsonl"), spark, None, 6)
    assert not list(tmp.glob("stretchflow-ckpt-*"))  # removed on the error path too


def test_rate_source_counts_its_rows(spark, tmp_path):
    """The rate source's counter: the rows of the bounded input, not the rows Spark generated
    past them (they are dropped)."""
    flow = sf.Flow("wordcount")
    src = sf.io.rate(1000, rows=1500, payload="tweet")
    build_query("wordcount", [flow.source(src)], **PARAMS).sink(str(tmp_path / "o.jsonl"))
    info = run_stream(flow, spark, tmp_path / "ckpt", 6)
    assert info["tuples_in"] == {"rate": 1500}
    assert list(read_parts(tmp_path / "o.jsonl"))
