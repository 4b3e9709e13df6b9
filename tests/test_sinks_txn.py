"""Output is a transaction (issue #17): a file sink writes a hidden temporary file beside its
target and renames it into place only when the run commits; a failed, interrupted or killed
run leaves the previous target byte-identical and no partial output under its name."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from stretchflow.cli import main
from stretchflow.errors import OperatorError, StretchflowError
from stretchflow.io.sinks import Collector, JsonLinesSink, Sink, open_sink
from stretchflow.runtime import sink_session
from threadutil import wait_until

PREVIOUS = b'{"previous":"output","kept":true}\n'
N = 1000


def _records(n: int = N) -> list[dict]:
    return [{"ts": i, "v": i % 7} for i in range(n)]


def _flow(out: str | Sink, fail_at: int | None = None, n: int = N) -> sf.Flow:
    """map (raising on the tuple with ts == fail_at) -> tumbling count per key -> out. Ten
    outputs per tuple (windows of 1, ten keys each), so that output reaches the sink (past the
    engines' 4096-tuple batches) long before the failure."""

    def check(t: dict) -> dict:
        if t["ts"] == fail_at:
            raise ValueError(f"bad tuple {t['ts']}")
        return t

    flow = sf.Flow("txn")
    (flow.source(sf.io.iterable(_records(n)))
     .map(check)
     .aggregate(size=1, keys=lambda t: {(t["v"] + j) % 16 for j in range(10)}, init=int,
                update=lambda a, t: a + 1,
                output=lambda k, a: {"k": k, "n": a})
     .sink(out))
    return flow


def _leftovers(d: Path, keep: str) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name != keep)


def _read(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if path.suffix == ".csv":
        return pcsv.read_csv(path).to_pylist()
    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_success_renames_and_writes_everything(tmp_path, ext):
    target = tmp_path / f"out.{ext}"
    target.write_bytes(PREVIOUS)
    col = Collector()
    _flow(col).run()
    seen: list[list[str]] = []

    sink = open_sink(target)
    write = sink.write

    def spy(items):  # while the run writes, the target still holds the previous output
        seen.append(_leftovers(tmp_path, target.name))
        assert target.read_bytes() == PREVIOUS
        write(items)

    sink.write = spy  # type: ignore[method-assign]
    result = _flow(sink).run()
    assert seen and all(len(names) == 1 for names in seen)
    tmp_name = seen[0][0]
    assert tmp_name.startswith(f".out.{ext}.stretchflow-{os.getpid()}-")
    assert tmp_name.endswith(".tmp")
    assert _leftovers(tmp_path, target.name) == []
    assert result.tuples_out == {str(target): len(col.items)}
    assert _read(target) == col.records()


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_user_error_midway_keeps_previous_target(tmp_path, ext):
    target = tmp_path / f"out.{ext}"
    target.write_bytes(PREVIOUS)
    with pytest.raises(OperatorError, match="bad tuple 500"):
        _flow(str(target), fail_at=500).run()
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == []


ENGINES = [("reference", {}), ("vsn", {"parallelism": 2}),
           ("sn", {"parallelism": 2, "channels": "threads"}), ("ordered", {"parallelism": 2}),
           ("slack", {"parallelism": 2})]


@pytest.mark.parametrize("engine,opts", ENGINES, ids=[e for e, _ in ENGINES])
def test_every_engine_aborts_on_a_user_error(tmp_path, engine, opts):
    target = tmp_path / "out.jsonl"
    target.write_bytes(PREVIOUS)
    written = []

    class Spy(JsonLinesSink):  # proves output had reached the temporary file before the error
        def write(self, items):
            written.extend(items)
            super().write(items)

        def write_batch(self, batch):
            written.extend(batch.items())
            super().write_batch(batch)

    with pytest.raises(OperatorError, match="bad tuple 500"):
        _flow(Spy(target), fail_at=500).run(engine, **opts)
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == []
    if engine == "reference":  # sequential: the 5000 outputs before tuple 500 were written
        assert len(written) >= 4096


@pytest.mark.parametrize("engine,opts", ENGINES, ids=[e for e, _ in ENGINES])
def test_every_engine_commits(tmp_path, engine, opts):
    target = tmp_path / "out.jsonl"
    target.write_bytes(PREVIOUS)
    col = Collector()
    _flow(col).run()
    _flow(str(target)).run(engine, **opts)
    assert sorted(map(json.dumps, _read(target))) == sorted(map(json.dumps, col.records()))
    assert _leftovers(tmp_path, target.name) == []


def test_missing_input_leaves_target(tmp_path, capsys):
    target = tmp_path / "keep.jsonl"
    target.write_bytes(PREVIOUS)
    rc = main(["run", "wordcount", "--input", str(tmp_path / "missing.jsonl"),
               "--output", str(target), "-q"])
    assert rc == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == []


def _kill_midway(tmp_path: Path, sig: int) -> tuple[subprocess.Popen, Path, Path]:
    """Runs the CLI on 200k tweets in a child and sends ``sig`` once output has reached the
    temporary file (a run half written); returns the child (ended), the target and the
    temporary file's path."""
    inp, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    assert main(["generate", "tweets", "--rows", "200000", "--seed", "1", "--out", str(inp),
                 "-q"]) == 0
    target.write_bytes(PREVIOUS)
    child = subprocess.Popen(
        [sys.executable, "-m", "stretchflow.cli", "run", "wordcount", "--input", str(inp),
         "--output", str(target), "--columnar", "off", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    def written() -> list[Path]:
        tmp = [p for p in tmp_path.iterdir() if p.name.startswith(".out.jsonl.")]
        return tmp if tmp and tmp[0].stat().st_size > 0 else []

    try:
        tmp = wait_until(lambda: written() or child.poll() is not None, 120,
                         "output reaches the temporary file", poll=0.005)
        assert child.poll() is None, f"the run ended before it could be killed: " \
                                     f"{child.stderr.read().decode()}"
        child.send_signal(sig)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    return child, target, tmp[0]


def test_sigkill_midway_leaves_previous_target_and_only_the_temp_file(tmp_path):
    child, target, tmp = _kill_midway(tmp_path, signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == sorted(["in.jsonl", tmp.name])
    assert tmp.name.startswith(f".out.jsonl.stretchflow-{child.pid}-")
    # the next run writing the target removes the dead run's temporary file, not a live
    # process's (the parent of this test stands for a run still writing)
    live = tmp_path / f".out.jsonl.stretchflow-{os.getppid()}-live.tmp"
    live.write_bytes(b"")
    with sink_session([JsonLinesSink(target)]) as session:
        session.sinks[0].write([(1, {"a": 1})])
    assert target.read_bytes() == b'{"ts":1,"a":1}\n'
    assert _leftovers(tmp_path, target.name) == sorted(["in.jsonl", live.name])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_aborts_its_sinks(tmp_path, sig):
    """SIGINT (KeyboardInterrupt) and SIGTERM (which the CLI turns into an exception too) abort
    the sinks: the previous target stays and the temporary file is removed."""
    child, target, _ = _kill_midway(tmp_path, sig)
    assert child.returncode == 128 + sig
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == ["in.jsonl"]


def test_new_file_gets_umask_mode_existing_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        new = tmp_path / "new.jsonl"
        _flow(str(new)).run()
        assert stat.S_IMODE(new.stat().st_mode) == 0o640  # not mkstemp's 0600
        os.umask(0o022)
        _flow(str(new)).run()  # existing: keeps 0640, not the umask's 0644
        assert stat.S_IMODE(new.stat().st_mode) == 0o640
        shared = tmp_path / "shared.csv"
        shared.write_bytes(b"")
        shared.chmod(0o664)
        _flow(str(shared)).run()
        assert stat.S_IMODE(shared.stat().st_mode) == 0o664
        fresh = tmp_path / "fresh.parquet"
        _flow(str(fresh)).run()
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_unwritable_directory_is_one_clear_error(tmp_path, monkeypatch, capsys):
    import tempfile

    target = tmp_path / "out.jsonl"
    target.write_bytes(PREVIOUS)

    def denied(*a, **kw):  # what mkstemp raises in a directory the user may not write
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"ts": 1, "text": "a b"}\n')
    rc = main(["run", "wordcount", "--input", str(inp), "--output", str(target), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert f"sink '{target}'" in err and "temporary file" in err
    assert "Permission denied" in err
    assert target.read_bytes() == PREVIOUS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX permissions")
def test_unwritable_directory_for_real():
    """The same error from the file system, as an unprivileged user: root writes anywhere, so
    as root the run is a forked child that became nobody."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="stretchflow-txn-"))  # under /tmp: nobody may enter
    try:
        base.chmod(0o755)
        d = base / "ro"
        d.mkdir()
        target = d / "out.jsonl"
        target.write_bytes(PREVIOUS)
        target.chmod(0o666)  # writable in place: only the directory refuses
        d.chmod(0o555)
        _flow(Collector(), n=5).run()  # imports done here: nobody may not read them all
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the error on the pipe, never return into pytest
            msg = "no error"
            try:
                os.close(r)
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                _flow(str(target), n=5).run()
            except StretchflowError as e:
                msg = str(e)
            except BaseException as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {e}"
            finally:
                os.write(w, msg.encode())
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            msg = f.read().decode()
        os.waitpid(pid, 0)
        assert f"sink '{target}': cannot create a temporary file in {d}/" in msg, msg
        assert "Permission denied" in msg and "\n" not in msg
        assert target.read_bytes() == PREVIOUS
        assert _leftovers(d, target.name) == []
    finally:
        (base / "ro").chmod(0o755)
        shutil.rmtree(base)


# -- the session and the sinks' contract ------------------------------------------------------
class Recorder(Sink):
    def __init__(self, log: list, name: str, fail: str = ""):
        self.log, self.name, self.fail = log, name, fail

    def write(self, items):
        pass

    def open(self):
        self.log.append(("open", self.name))
        if self.fail == "open":
            raise OSError("cannot open")

    def prepare(self):
        self.log.append(("prepare", self.name))
        if self.fail == "prepare":
            raise OSError("disk full")

    def commit(self):
        self.log.append(("commit", self.name))

    def abort(self):
        self.log.append(("abort", self.name))


@pytest.mark.parametrize("exc", [ValueError("x"), KeyboardInterrupt(), SystemExit(3)])
def test_session_aborts_every_sink_on_any_exception(exc):
    log: list = []
    with pytest.raises(type(exc)), sink_session([Recorder(log, "a"), Recorder(log, "b")]):
        raise exc
    assert log == [("open", "a"), ("open", "b"), ("abort", "a"), ("abort", "b")]


def test_session_commits_in_two_phases_and_asks_failed():
    log: list = []
    with sink_session([Recorder(log, "a"), Recorder(log, "b")]):
        pass
    assert log == [("open", "a"), ("open", "b"), ("prepare", "a"), ("prepare", "b"),
                   ("commit", "a"), ("commit", "b")]
    log.clear()
    with sink_session([Recorder(log, "a")], failed=lambda: True):
        pass  # a thread's error recorded in a RunControl: no exception here, still a failure
    assert log == [("open", "a"), ("abort", "a")]


def test_one_sink_failing_to_prepare_publishes_none(tmp_path):
    log: list = []
    good = tmp_path / "good.jsonl"
    good.write_bytes(PREVIOUS)
    sinks = [JsonLinesSink(good), Recorder(log, "bad", fail="prepare")]
    with pytest.raises(OSError, match="disk full"), sink_session(sinks) as s:
        sinks[0].write([(1, {"v": 1})])
        assert s.sinks == sinks
    assert good.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, good.name) == []
    assert ("abort", "bad") in log and ("commit", "bad") not in log


def test_open_failure_aborts_the_sinks_already_open(tmp_path):
    log: list = []
    first = tmp_path / "first.jsonl"
    with pytest.raises(OSError, match="cannot open"):
        with sink_session([JsonLinesSink(first), Recorder(log, "bad", fail="open")]):
            pytest.fail("the block must not run")
    assert list(tmp_path.iterdir()) == []  # no target created, no temporary file left
    assert log == [("open", "bad"), ("abort", "bad")]


def test_commit_and_abort_are_idempotent(tmp_path):
    target = tmp_path / "out.jsonl"
    sink = JsonLinesSink(target)
    sink.open()
    sink.write([(1, {"a": 1})])
    sink.commit()
    sink.commit()
    sink.abort()  # after a commit: changes nothing
    assert target.read_bytes() == b'{"ts":1,"a":1}\n'
    sink.open()
    sink.write([(2, {"a": 2})])
    tmp = next(p for p in tmp_path.iterdir() if p.name != "out.jsonl")
    tmp.unlink()  # someone removed it: abort must not raise
    sink.abort()
    sink.abort()
    with pytest.raises(StretchflowError, match="commit after abort"):
        sink.commit()
    assert target.read_bytes() == b'{"ts":1,"a":1}\n'


def test_close_still_publishes_for_old_callers(tmp_path):
    """close() = commit(): callers written for open/write/close get the file they did."""
    target = tmp_path / "out.csv"
    sink = open_sink(target)
    sink.open()
    sink.write([(1, {"a": 1}), (2, {"a": 2})])
    sink.close()
    assert _read(target) == [{"ts": 1, "a": 1}, {"ts": 2, "a": 2}]
    assert _leftovers(tmp_path, target.name) == []


def test_a_failed_rename_is_one_error_and_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "out.parquet"
    target.write_bytes(PREVIOUS)
    sink = open_sink(target)
    sink.open()
    sink.write([(1, {"a": 1})])

    def refused(src, dst):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(StretchflowError, match=r"sink '.*out.parquet': cannot rename "
                                               r"\.out\.parquet\.stretchflow-.*: Device or"):
        sink.close()  # an old caller's close: the temporary file is removed all the same
    assert target.read_bytes() == PREVIOUS
    assert _leftovers(tmp_path, target.name) == []


def test_a_sink_written_for_open_close_ends_with_close():
    closed = []

    class Old(Sink):
        def write(self, items):
            pass

        def close(self):
            closed.append(True)

    with pytest.raises(ValueError), sink_session([Old()]):
        raise ValueError
    with sink_session([Old()]):
        pass
    assert closed == [True, True]


def test_collector_keeps_its_rows_on_abort():
    col = Collector()
    with pytest.raises(OperatorError):
        _flow(col, fail_at=500).run()
    assert col.items and all(ts <= 500 for ts, _ in col.items)


def test_symlink_target_stays_a_link(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_bytes(PREVIOUS)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    _flow(str(link)).run()
    assert link.is_symlink() and link.resolve() == real
    assert real.read_bytes() != PREVIOUS and _read(real)


def test_special_file_target_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        _flow(str(fifo), n=30).run()
        out = reader.communicate(timeout=30)[0]
    finally:
        if reader.poll() is None:
            reader.kill()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # not replaced by a regular file
    assert [json.loads(line)["k"] for line in out.splitlines()][:1] == [0]
    assert _leftovers(tmp_path, fifo.name) == []


def test_longest_file_name_still_gets_a_temporary_file(tmp_path):
    target = tmp_path / ("é" * 121 + ".jsonl")  # 248 bytes: the temporary name is cut
    _flow(str(target), n=20).run()
    assert _read(target) and _leftovers(tmp_path, target.name) == []


def test_directory_target_is_an_error(tmp_path):
    (tmp_path / "out.jsonl").mkdir()
    with pytest.raises(StretchflowError, match="is a directory"):
        _flow(str(tmp_path / "out.jsonl")).run()
