"""The kill-and-resume recorder (``stretchflow_bench.kills``): its output comparison, its
leftover checks (files, processes of the run's session) and, in ``make bench-smoke``, the quick
mode end to end (reference 3 cycles, Spark streaming 1 cycle)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stretchflow_bench import BENCHMARKS, CROSS_ENGINE, kills


def _rec(ts: int, word: str, count: int = 1) -> tuple[int, bytes]:
    return ts, json.dumps({"count": count, "ts": ts, "word": word}).encode()


def test_same_output_is_per_timestamp_multisets_in_ts_order():
    want = [_rec(1, "a"), _rec(1, "b"), _rec(2, "a")]
    assert kills.same_output([_rec(1, "b"), _rec(1, "a"), _rec(2, "a")], want)
    assert not kills.same_output([_rec(1, "a"), _rec(2, "b"), _rec(2, "a")], want)  # moved
    assert not kills.same_output(want + [_rec(2, "a")], want)  # a duplicate, as a replay
    assert not kills.same_output(want[:2], want)  # a lost record
    assert not kills.same_output([_rec(2, "a"), _rec(1, "a"), _rec(1, "b")], want)  # unsorted


def test_records_reads_files_and_part_directories_alike(tmp_path):
    from stretchflow.io.parts import PartWriter

    lines = [{"ts": 1, "word": "a", "count": 2}, {"ts": 3, "word": "b", "count": 1}]
    f = tmp_path / "o.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in lines))
    d = tmp_path / "parts.jsonl"
    w = PartWriter(d)
    w.claim("q", fresh=True)
    w.commit(0, [(1, lines[0])])
    w.commit(4, [(3, lines[1])])
    w.close()
    assert kills.records(f) == kills.records(d) and len(kills.records(d)) == 2
    f.write_text('{"word": "a"}\n')
    with pytest.raises(ValueError, match=r"o.jsonl, record 1: no integer ts"):
        kills.records(f)


def test_leftover_files_finds_temp_files_checkpoints_and_temp_dirs(tmp_path):
    out_dir, ck, tmpdir = tmp_path / "out", tmp_path / "ck", tmp_path / "tmp"
    for d in (out_dir, ck / "commits", tmpdir):
        d.mkdir(parents=True)
    out = out_dir / "o.jsonl"
    out.write_text("")
    (ck / "commits" / "0").write_text("v1")  # a committed batch: not a leftover
    (tmpdir / "stretchflow-spark-1.log").write_text("")  # the kept log: a file, not a dir
    assert kills.leftover_files("spark", out, ck, tmpdir) == []
    (out_dir / ".o.jsonl.tmp-123").write_text("half")
    (ck / "commits" / ".1.0f3a.tmp").write_text("")
    (tmpdir / "stretchflow-ckpt-99-x").mkdir()
    (ck / kills.MANIFEST).write_text("{}")
    got = kills.leftover_files("reference", out, ck, tmpdir)
    assert got == ["temp file beside the output: .o.jsonl.tmp-123",
                   "temp file in the checkpoint: commits/.1.0f3a.tmp",
                   "checkpoint not cleared after the completed run",
                   "temp directory in TMPDIR: stretchflow-ckpt-99-x"]
    # Spark keeps its checkpoint after a completed run (to continue with new files)
    assert "checkpoint not cleared after the completed run" not in \
        kills.leftover_files("spark", out, ck, tmpdir)


ESCAPER = r"""
import os, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)  # its own process group, as PySpark's worker daemon: killpg misses it
    print("ready", flush=True)  # only now: a kill before the setpgid would take it along
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_settle_reports_and_ends_a_process_that_outlived_the_group_kill(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr(kills, "SETTLE_S", 1.0)
    p = subprocess.Popen([sys.executable, "-c", ESCAPER], stdout=subprocess.PIPE,
                         start_new_session=True)
    try:
        assert p.stdout.readline() == b"ready\n"
        assert len(kills.session_members(p.pid)) == 2
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        left = kills.settle(p.pid)
        assert len(left) == 1 and "alive 1 s after its run ended" in left[0]
        deadline = time.monotonic() + 10
        while kills.session_members(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kills.session_members(p.pid) == []  # settle ended it
        assert kills.settle(p.pid) == []
    finally:
        p.stdout.close()
        for pid, _, _ in kills.session_members(p.pid):
            os.kill(pid, signal.SIGKILL)


def test_registered_and_refuses_unknown_engines(tmp_path):
    assert "kills" in BENCHMARKS and "kills" in CROSS_ENGINE
    with pytest.raises(ValueError, match=r"unknown engine\(s\) \['flink'\]"):
        kills.run(engines=("flink",), out_dir=str(tmp_path))


@pytest.mark.bench
def test_quick_mode_cycles_are_identical_and_leave_nothing(tmp_path):
    path = kills.run(quick=True, out_dir=str(tmp_path))
    doc = json.loads(Path(path).read_text())
    assert doc["benchmark"] == "kills" and doc["plot"] == "kills.png"
    assert (tmp_path / "kills.png").exists() and doc["outputs_identical"] is True
    m = doc["metrics"]
    assert set(m) == {"reference", "spark"}
    for engine, cycles in (("reference", 3), ("spark", 1)):
        e = m[engine]
        assert e["cycles"] == cycles == len(e["per_cycle"]) == e["identical_cycles"]
        assert e["identical"] is True and e["leftovers"] == []
        assert e["output_records"] > 0
        assert e["restarts"] == e["kills"] == sum(c["kills"] for c in e["per_cycle"])
        assert all("load_before" in c["probe"] for c in e["per_cycle"])
        # every cycle is a kill and a resume: its first kill landed while the run was going
        assert e["cycles_with_kill"] == cycles and all(c["kills"] >= 1 for c in e["per_cycle"])
        assert e["missed_draws"] == sum(c["draws"] - 1 for c in e["per_cycle"])


def test_a_run_that_ends_before_its_kill_is_no_cycle(tmp_path, monkeypatch):
    """run_until_done with a command that ends at once: no kill lands, nothing is counted
    (run_engine then draws the cycle again); one that outlives the delay is killed once."""
    import random

    quick = [sys.executable, "-c", "pass"]
    stats = {"kills": 0, "kills_with_checkpoint": 0, "kills_with_jvm": 0, "restarts": 0,
             "leftovers": []}
    monkeypatch.setattr(kills, "FIRST_KILL", (5.0, 5.0))  # far beyond its run
    kills.run_until_done(quick, dict(os.environ), "reference", tmp_path / "ck",
                         tmp_path / "log", 2.0, 0.0, random.Random(1), stats)
    assert stats["kills"] == 0 and stats["restarts"] == 0
    # a run still going at its kill: killed (then the same command, which ends this time)
    script = tmp_path / "slow.py"
    script.write_text("import os, sys, time\n"
                      "m = sys.argv[1]\n"
                      "if not os.path.exists(m):\n"
                      "    open(m, 'w').close()\n"
                      "    time.sleep(60)\n")
    monkeypatch.setattr(kills, "FIRST_KILL", (0.5, 0.5))
    kills.run_until_done([sys.executable, str(script), str(tmp_path / "mark")],
                         dict(os.environ), "reference", tmp_path / "ck", tmp_path / "log",
                         2.0, 30.0, random.Random(1), stats)
    assert stats["kills"] == 1 and stats["restarts"] == 1


def test_sweep_spark_temps_removes_a_killed_drivers_temp_files_only(tmp_path):
    """What bench kills found in a Spark checkpoint after a SIGKILL (cycle 4 of the first
    run): the half-written changelog and offset files, which no later run removed."""
    from stretchflow.io.parts import sweep_spark_temps

    ck = tmp_path / "ck"
    keep = [ck / "commits" / "0", ck / "commits" / ".0.crc", ck / "state" / "0" / "0" /
            "1.changelog", ck / "state" / "0" / "0" / ".1.changelog.crc"]
    gone = [ck / "state" / "0" / "0" / ".2.changelog.26ae915f-c13e.TID6.tmp",
            ck / "state" / "0" / "0" / "..2.changelog.26ae915f-c13e.TID6.tmp.crc",
            ck / "offsets" / ".1.db98effd-555b.tmp"]
    for f in keep + gone:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
    assert sorted(sweep_spark_temps(ck)) == sorted(gone)
    assert all(f.exists() for f in keep) and not any(f.exists() for f in gone)
    assert sweep_spark_temps(tmp_path / "nowhere") == []


def test_a_run_keeps_the_complete_entries_of_the_engines_it_does_not_run(tmp_path: Path):
    """Spark's cycles take hours and run apart: a spark-only run keeps the local engines'
    entries of the existing kills.json (each with its own commit), never a quick doc's, an
    incomplete entry, or one made with another seed."""
    doc = {"commit": "abc", "time": "t0", "parameters": {"quick": False, "seed": 1},
           "metrics": {"vsn": {"cycles": 100, "complete": True, "rows": 8000},
                       "sn": {"cycles": 40, "cycles_planned": 100, "complete": False},
                       "spark": {"cycles": 100, "rows": 2000},
                       "reference": {"cycles": 100, "rows": 8000}}}  # before "complete"
    (tmp_path / "kills.json").write_text(json.dumps(doc))
    kept = kills._previous(tmp_path, 1, ("spark",))
    assert sorted(kept) == ["reference", "vsn"]
    assert kept["vsn"]["commit"] == "abc" and kept["vsn"]["rows"] == 8000
    assert kills._previous(tmp_path, 2, ("spark",)) == {}
    doc["parameters"]["quick"] = True
    (tmp_path / "kills.json").write_text(json.dumps(doc))
    assert kills._previous(tmp_path, 1, ("spark",)) == {}
    assert kills._previous(tmp_path / "none", 1, ("spark",)) == {}
