"""Clean stops (issue #17): SIGINT/SIGTERM stop every local engine with exit status 130/143
and one line saying what was committed; a SIGKILLed sn run with process channels leaves no
process, no semaphore and (after the next run's sweep) no directory; a flow file that fails
to load is exit status 2 and one line.

Each run is a child ``stretchflow run`` in its own session, so that every process it starts
(the fork server, the resource tracker, channels) can be found through /proc by session id.
Timeouts are generous bounds against hanging, not speed claims.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from stretchflow.io.generators import generate
from stretchflow.runtime.signals import Interrupted, interrupt_on_signals
from stretchflow.runtime.tempdirs import sweep_stale
from threadutil import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="finds a run's processes and files through /proc")

PREVIOUS = b'{"previous": "output"}\n'
ENGINES = {
    "reference": [],
    "vsn": [],
    "sn-threads": ["--engine", "sn"],
    "sn-processes": ["--engine", "sn", "--channels", "processes", "--parallelism", "2"],
    "ordered": [],
    "slack": [],
}


@pytest.fixture(scope="module")
def tweets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # paircount over 100 000 tweets runs for seconds on every engine: a signal sent once the
    # run reads its input lands mid-run
    out = tmp_path_factory.mktemp("stops") / "tweets.jsonl"
    generate("tweets", rows=100_000, seed=1, out=str(out))
    return out


def _start(args: list[str], inp: Path | None = None, out: Path | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "stretchflow", "run", *args]
    if inp is not None:
        cmd += ["--input", str(inp), "--output", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


#: seconds between two looks at /proc (a look at every process's stat costs milliseconds)
PROC_POLL = 0.05


def _input_pos(pid: int, path: Path) -> int:
    """How far process ``pid`` has read ``path`` (0 if it has not opened it)."""
    target = str(path)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split()
                return int(info[info.index("pos:") + 1])
        except (OSError, ValueError):
            continue
    return 0


def _session(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies excluded: they hold nothing)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


def _stop(p: subprocess.Popen, sig: int, inp: Path) -> tuple[int, list[str]]:
    wait_until(lambda: _input_pos(p.pid, inp) > 0 or p.poll() is not None, 60, "the run reads",
               poll=PROC_POLL)
    assert p.poll() is None, p.communicate()[1].decode()
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err.decode().splitlines()


def _leftovers(pid: int) -> list[str]:
    tmp = Path(tempfile.gettempdir())
    return sorted(str(d) for d in tmp.glob(f"stretchflow-*-{pid}-*"))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_sigterm_stops_the_run_and_keeps_the_previous_output(engine: str, tweets: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(PREVIOUS)
    flags = ENGINES[engine] or ["--engine", engine]
    p = _start(["paircount", *flags], tweets, out)
    code, lines = _stop(p, signal.SIGTERM, tweets)
    assert code == 143, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("stopped by SIGTERM after "), lines
    assert lines[0].endswith("tuples in: nothing committed, out.jsonl unchanged"), lines
    assert out.read_bytes() == PREVIOUS
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file
    wait_until(lambda: not _session(p.pid), 10, "the run's processes are gone", poll=PROC_POLL)
    assert _leftovers(p.pid) == []


def test_sigint_is_130_and_says_no_output_was_written(tweets: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    p = _start(["paircount", "--engine", "sn", "--channels", "processes"], tweets, out)
    code, lines = _stop(p, signal.SIGINT, tweets)
    assert code == 130, lines
    assert len(lines) == 1 and lines[0].startswith("stopped by SIGINT after "), lines
    assert lines[0].endswith(": nothing committed, no out.jsonl written"), lines
    assert not out.exists()
    wait_until(lambda: not _session(p.pid), 10, "the run's processes are gone", poll=PROC_POLL)
    assert _leftovers(p.pid) == []


def _semaphores(pids: list[int]) -> set[str]:
    """The multiprocessing semaphores (files in /dev/shm) these processes have mapped."""
    sems = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        sems.update(line.split()[-1] for line in maps.splitlines() if "/sem.mp-" in line)
    return sems


@pytest.mark.parametrize("columnar", ["on", "off"])
def test_sigkill_of_the_parent_leaves_no_process_semaphore_or_directory(
        tweets: Path, tmp_path: Path, columnar: str) -> None:
    out = tmp_path / "out.jsonl"
    p = _start(["paircount", "--engine", "sn", "--channels", "processes", "--parallelism", "2",
                "--columnar", columnar], tweets, out)
    # parent, resource tracker, fork server and two channels; then the splitter reads
    wait_until(lambda: len(_session(p.pid)) >= 5 and _input_pos(p.pid, tweets) > 0, 60,
               "the channels run", poll=PROC_POLL)
    sems = _semaphores(_session(p.pid))
    assert sems  # the channel queues' locks: what the resource tracker must unlink
    dirs = _leftovers(p.pid)
    # the fork server's socket directory; the tuple path also has its migration store's
    # (the columnar path migrates nothing: docs/sn.md)
    assert any("stretchflow-mp-" in d for d in dirs), dirs
    assert any("stretchflow-sn-" in d for d in dirs) == (columnar == "off"), dirs
    p.kill()
    p.wait()
    # channels see their parent's sentinel close, the fork server its last client go, and the
    # resource tracker, last, unlinks the semaphores
    wait_until(lambda: not _session(p.pid), 10, "every child process of the killed run is gone",
               poll=PROC_POLL)
    assert [s for s in sems if os.path.exists(s)] == []
    # what a SIGKILL leaves: the directories, until the next run sweeps them
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"".join(tweets.open("rb").readlines()[:200]))
    q = _start(["wordcount", "--engine", "sn", "--channels", "processes", "-q"], small,
               tmp_path / "small-out.jsonl")
    _, err = q.communicate(timeout=60)
    assert q.returncode == 0, err.decode()
    assert _leftovers(p.pid) == []
    assert _leftovers(q.pid) == []


@pytest.mark.parametrize(("text", "expected"), [
    ('import stretchflow\n\nraise RuntimeError("no [data]")\n',
     "error: app.py: line 3: fails to load: RuntimeError: no [data]"),
    ("def build_flow(params:\n    pass\n",
     "error: app.py: line 1: fails to load: SyntaxError: "),
    ("def build_flow(params):\n    return {}['missing']\n",
     "error: app.py: line 2: build_flow failed: KeyError: 'missing'"),
])
def test_a_flow_file_that_fails_to_load_is_one_line_and_exit_2(text: str, expected: str,
                                                                tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(text)
    p = _start([str(app)])
    _, err = p.communicate(timeout=60)
    lines = err.decode().splitlines()
    assert p.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_interrupt_on_signals_raises_in_the_main_thread_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info, interrupt_on_signals() as watch:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the call the signal interrupts: the handler raises before it ends
    assert (info.value.exit_code, str(info.value), watch.received) == (
        143, "stopped by SIGTERM", signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_sweep_removes_only_directories_of_dead_processes(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f"stretchflow-sn-{dead_pid}-abc"
    live = tmp_path / f"stretchflow-sn-{os.getppid()}-def"
    mine = tmp_path / f"stretchflow-sn-{os.getpid()}-ghi"
    other_kind = tmp_path / f"stretchflow-mp-{dead_pid}-jkl"
    for d in (stale, live, mine, other_kind):
        d.mkdir()
        (d / "state.sqlite").write_bytes(b"x")
    assert sweep_stale("sn", str(tmp_path)) == [stale]
    assert sorted(d.name for d in tmp_path.iterdir()) == sorted(
        d.name for d in (live, mine, other_kind))


def _write_half_a_reply(resq) -> None:  # noqa: ANN001 - a multiprocessing queue
    # what a channel killed in the middle of a reply leaves: a length and a part of the bytes
    import struct
    os.write(resq._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
    os._exit(1)


def test_a_channel_dying_mid_reply_fails_the_run_instead_of_hanging_it() -> None:
    import multiprocessing as mp
    import queue
    import threading
    from types import SimpleNamespace

    from stretchflow.executors.sn_process import ProcessChannel, ProcessTransport
    from stretchflow.runtime import RunControl

    ctx = mp.get_context("spawn")
    transport = SimpleNamespace(ctx=ctx, blob=b"", G=1, store_path="", start_method="spawn",
                                owner=threading.get_ident(), main=ProcessTransport.main,
                                unguarded=None)
    ex = SimpleNamespace(run=RunControl(), outq=queue.Queue(), queue_size=4, assign=[0],
                         name="op")
    ch = ProcessChannel(transport, ex, 0)
    ch.proc = ctx.Process(target=_write_half_a_reply, args=(ch.resq,), daemon=True)
    ch.start()
    ch.relay.join(timeout=30)
    try:
        assert not ch.relay.is_alive()
        assert isinstance(ex.run.error, RuntimeError), ex.run.error
        assert "sn channel process 0 exited (code 1) without finishing" in str(ex.run.error)
    finally:
        ex.run.fail(RuntimeError("test over"))
        ch.close(failed=True)


def test_sigterm_to_the_whole_process_group_stops_an_sn_process_run(tweets: Path,
                                                                     tmp_path: Path) -> None:
    # what a service manager or a terminal does: every channel gets the signal too, may die
    # in the middle of a reply, and the parent must still stop, not wait for the rest of it
    out = tmp_path / "out.jsonl"
    p = _start(["paircount", "--engine", "sn", "--channels", "processes", "--parallelism", "2"],
               tweets, out)
    wait_until(lambda: len(_session(p.pid)) >= 5 and _input_pos(p.pid, tweets) > 0, 60,
               "the channels run", poll=PROC_POLL)
    os.killpg(p.pid, signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    lines = err.decode().splitlines()
    assert p.returncode == 143, lines
    assert len(lines) == 1 and lines[0].startswith("stopped by SIGTERM"), lines
    wait_until(lambda: not _session(p.pid), 10, "the run's processes are gone", poll=PROC_POLL)
    assert _leftovers(p.pid) == []


def test_an_ignored_signal_stays_ignored() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupt_on_signals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_second_signal_during_the_cleanup_exits_at_once() -> None:
    code = (
        "import os, signal, time\n"
        "from stretchflow.runtime.signals import interrupt_on_signals\n"
        "with interrupt_on_signals():\n"
        "    try:  # each sleep is the call a signal interrupts\n"
        "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
        "    finally:  # a cleanup that takes long: the user signals again\n"
        "        os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "        print('cleanup finished')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 130
    assert p.stdout == ""
    assert p.stderr == "stopped by SIGINT again: exiting without cleanup\n"


def test_a_signal_in_a_deferred_section_is_raised_when_the_section_ends() -> None:
    """A channel process's start runs with signals deferred (signals_deferred): interrupted
    between the fork server's fork and its reply, the parent would drop queues its child is
    still unpickling, and the child would print a traceback on the shared stderr."""
    from stretchflow.runtime.signals import signals_deferred

    reached = False
    with pytest.raises(Interrupted) as e, interrupt_on_signals() as watch, signals_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        # the handler has run (on the main thread, between two bytecodes): it must not raise
        wait_until(lambda: watch.received == signal.SIGTERM, 10, "the handler runs")
        reached = True
    assert reached and e.value.signum == signal.SIGTERM


def test_a_signal_the_kernel_hands_to_another_thread_still_stops_a_joining_run() -> None:
    """A process-directed SIGTERM may land on any thread; there CPython only flags its
    handler, which runs in the main thread when that thread next runs Python. A run whose
    main thread sat in a join without a timeout read on to the end of its input (seen on
    slack under load). Here the signal goes to the run's own thread: the run must stop
    through it, not when that thread ends on its own."""
    from types import SimpleNamespace

    from stretchflow.runtime.skeleton import Run

    rt = Run("test", SimpleNamespace(sinks=[]), measures=())
    seen: list[bool] = []
    done = threading.Event()

    def worker() -> None:
        main = threading.main_thread().ident

        def joining() -> bool:  # the main thread is inside Run._join's wait
            f = sys._current_frames()[main]  # noqa: SLF001
            names = []
            while f is not None:
                names.append(f.f_code.co_name)
                f = f.f_back
            return "_join" in names and names[0] in ("wait", "_wait_for_tstate_lock")

        wait_until(joining, 30, "the main thread joins this one")
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        seen.append(rt.control.stop.wait(60))  # True: the run stopped it; False: it ran out
        done.set()

    rt.thread(worker, name="worker")
    with interrupt_on_signals(), pytest.raises(Interrupted):
        rt.execute()
    # the run waited for its thread before it raised (CPython 3.11's Thread.join,
    # interrupted by the handler's exception, marks the thread it waited for stopped while
    # it still runs, so a run that joined with it returned first)
    assert done.is_set()
    assert seen == [True]
