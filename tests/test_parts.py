"""Part directories (stretchflow.io.parts): idempotent commits by epoch id, reading in id
order, temporary and uncommitted files ignored, crashes leaving the previous state readable,
and the output-path rule (a plain file is never replaced)."""

import json
import os

import pytest

from stretchflow.cli import main as cli_main
from stretchflow.errors import SourceError, StretchflowError
from stretchflow.io import parts
from stretchflow.io.parts import (
    EpochOutputs,
    PartWriter,
    committed_parts,
    read_parts,
)
from stretchflow.io.sinks import Collector, JsonLinesSink
from stretchflow.io.sources import PartDirectory, open_source


def items(*ts, tag="x"):
    return [(t, {"k": tag, "n": t}) for t in ts]


def test_commit_reads_in_id_order_whatever_the_commit_order(tmp_path):
    w = PartWriter(tmp_path / "out.jsonl")
    w.commit(5, items(50, 51))
    w.commit(1, items(10))
    w.commit(3, items(30, 31, 32))
    w.close()
    assert [i for i, _ in committed_parts(tmp_path / "out.jsonl")] == [1, 3, 5]
    assert [r["ts"] for r in read_parts(tmp_path / "out.jsonl")] == [10, 30, 31, 32, 50, 51]


def test_recommitting_an_id_replaces_its_part(tmp_path):
    d = tmp_path / "out.jsonl"
    w = PartWriter(d)
    w.commit(0, items(1, 2))
    w.commit(1, items(3, tag="first"))
    w.commit(1, items(3, 4, tag="replayed"))  # a replayed epoch
    w.commit(2, items(5))
    w.close()
    recs = list(read_parts(d))
    assert [(r["ts"], r["k"]) for r in recs] == [(1, "x"), (2, "x"), (3, "replayed"),
                                                 (4, "replayed"), (5, "x")]
    assert sorted(p.name for p in d.iterdir() if p.name.startswith("part-")) == [
        "part-00000000.jsonl", "part-00000001.jsonl", "part-00000002.jsonl"]
    assert json.loads((d / parts.MANIFEST).read_text())["parts"] == {"0": 2, "1": 2, "2": 1}


def test_an_empty_epoch_writes_nothing_and_empties_a_replayed_part(tmp_path):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    assert w.commit(0, []) == 0
    assert not (d / "part-00000000.jsonl").exists()
    w.commit(1, items(1))
    w.commit(1, [])
    assert list(read_parts(d)) == [] and not (d / "part-00000001.jsonl").exists()
    w.close()


def test_temporary_and_uncommitted_files_are_not_read(tmp_path):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    w.commit(0, items(1))
    w.close()
    (d / ".part-00000001.jsonl.tmp-999").write_text('{"ts": 99, "half": ')  # crashed writer
    (d / "part-00000002.jsonl").write_text('{"ts": 77}\n')  # renamed, manifest not updated
    assert [r["ts"] for r in read_parts(d)] == [1]
    assert [ts for ts, _ in open_source(d).items()] == [1]
    w = PartWriter(d)  # the next writer removes the dead writer's temporary file
    assert not (d / ".part-00000001.jsonl.tmp-999").exists()
    w.commit(2, items(20))  # and the uncommitted part is replaced when its epoch is replayed
    w.close()
    assert [r["ts"] for r in read_parts(d)] == [1, 20]


@pytest.mark.parametrize("crash_at", ["part", "manifest"])
def test_a_crash_during_commit_leaves_the_previous_state(tmp_path, monkeypatch, crash_at):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    w.commit(0, items(1, 2))
    w.commit(1, items(3))
    before = list(read_parts(d))
    real = os.replace

    def crash(src, dst):
        target = parts.MANIFEST if crash_at == "manifest" else "part-00000002.jsonl"
        if os.path.basename(dst) == target:
            raise KeyboardInterrupt("killed")  # the process dies here
        return real(src, dst)

    monkeypatch.setattr(parts.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        w.commit(2, items(4, 5))
    monkeypatch.setattr(parts.os, "replace", real)
    w.close()
    assert list(read_parts(d)) == before
    w = PartWriter(d)  # the restart replays epoch 2
    w.commit(2, items(4, 5))
    w.close()
    assert [r["ts"] for r in read_parts(d)] == [1, 2, 3, 4, 5]
    assert not [p for p in d.iterdir() if ".tmp" in p.name]


def test_a_plain_file_at_the_output_path_is_never_replaced(tmp_path):
    f = tmp_path / "out.jsonl"
    f.write_text('{"ts": 1}\n')
    with pytest.raises(StretchflowError, match="move or delete it"):
        EpochOutputs([JsonLinesSink(tmp_path / "ok.jsonl"), JsonLinesSink(f)])
    assert f.read_text() == '{"ts": 1}\n'
    PartWriter(tmp_path / "ok.jsonl").close()  # the failed run released the other's lock
    other = tmp_path / "notparts"
    other.mkdir()
    (other / "x.txt").write_text("keep")
    with pytest.raises(StretchflowError, match="not a stretchflow part directory"):
        PartWriter(other)
    assert (other / "x.txt").read_text() == "keep"


def test_a_directory_a_killed_run_was_creating_opens_as_new(tmp_path):
    # killed before its first manifest: the lock and a temp file, nothing committed
    d = tmp_path / "o.jsonl"
    d.mkdir()
    (d / "_lock").write_text("")
    (d / ".part-00000000.jsonl.tmp-99999").write_text('{"ts": 1, "half')
    w = PartWriter(d)
    w.commit(0, [(5, {"a": 1})])
    w.close()
    assert [r["ts"] for r in read_parts(d)] == [5]


def test_one_writer_at_a_time(tmp_path):
    w = PartWriter(tmp_path / "o.jsonl")
    with pytest.raises(StretchflowError, match="another run is writing"):
        PartWriter(tmp_path / "o.jsonl")
    w.close()
    PartWriter(tmp_path / "o.jsonl").close()


def test_owner_continues_its_directory_and_a_new_query_starts_it_over(tmp_path):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    w.claim("q1", fresh=True)
    w.commit(0, items(1))
    w.close()
    w = PartWriter(d)
    w.claim("q1", fresh=False)  # resumed: continues
    w.commit(1, items(2))
    w.close()
    assert [r["ts"] for r in read_parts(d)] == [1, 2]
    w = PartWriter(d)
    with pytest.raises(StretchflowError, match="another query"):
        w.claim("q2", fresh=False)  # resumed from another checkpoint: would mix outputs
    assert [r["ts"] for r in read_parts(d)] == [1, 2]
    w.claim("q2", fresh=True)  # a new query recomputes everything: starts over
    assert list(read_parts(d)) == [] and not list(d.glob("part-*"))
    w.close()


def test_epoch_outputs_write_each_epoch_once(tmp_path):
    col, f = Collector(), JsonLinesSink(tmp_path / "o.jsonl")
    out = EpochOutputs([col, f])
    out.bind(lambda: "q")
    out.commit(0, [items(1), items(1)])
    out.commit(1, [items(2, 3), items(2, 3)])
    out.commit(1, [items(2, 3), items(2, 3)])  # replayed in the same process
    out.close()
    assert [ts for ts, _ in col.items] == [1, 2, 3]
    assert f.count == 3 and [r["ts"] for r in read_parts(f.path)] == [1, 2, 3]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_other_part_formats_round_trip(tmp_path, suffix, capsys):
    d = tmp_path / f"o{suffix}"
    w = PartWriter(d)
    w.commit(1, items(3, 4))
    w.commit(0, items(1))
    w.close()
    assert [p.name for _, p in committed_parts(d)] == [f"part-00000000{suffix}",
                                                        f"part-00000001{suffix}"]
    assert [(r["ts"], r["n"]) for r in read_parts(d)] == [(1, 1), (3, 3), (4, 4)]
    assert cli_main(["cat", str(d)]) == 0
    assert [json.loads(x)["ts"] for x in capsys.readouterr().out.splitlines()] == [1, 3, 4]


def test_cat_prints_the_parts_as_one_stream(tmp_path, capsys):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    w.commit(7, items(9))
    w.commit(2, items(4, 5))
    w.close()
    assert cli_main(["cat", str(d)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [(d / "part-00000002.jsonl").read_text().splitlines()[0],
                     (d / "part-00000002.jsonl").read_text().splitlines()[1],
                     (d / "part-00000007.jsonl").read_text().strip()]
    assert [json.loads(x)["ts"] for x in lines] == [4, 5, 9]
    assert cli_main(["cat", str(tmp_path / "missing")]) == 2
    assert "missing: no such file" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert cli_main(["cat", str(tmp_path / "plain")]) == 2
    assert "cannot read the part manifest" in capsys.readouterr().err


def test_part_directory_source_names_the_part_of_a_bad_record(tmp_path):
    d = tmp_path / "o.jsonl"
    w = PartWriter(d)
    w.commit(0, items(1))
    w.commit(1, items(2))
    w.close()
    src = open_source(d)
    assert isinstance(src, PartDirectory)
    assert [(ts, p["n"]) for ts, p in src.items()] == [(1, 1), (2, 2)]
    (d / "part-00000001.jsonl").write_text('{"ts": 2}\n{"ts": \n')
    with pytest.raises(SourceError, match=r"part-00000001\.jsonl:2: malformed JSON"):
        list(open_source(d).items())
    (d / "part-00000001.jsonl").unlink()
    with pytest.raises(SourceError, match="committed part is missing"):
        list(read_parts(d))
