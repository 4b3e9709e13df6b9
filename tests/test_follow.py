"""Following live JSON Lines input (issue #19): a growing file and a directory in name order,
the end conditions, watermarks when the input goes quiet, live outputs on the reference engine,
and kill-and-resume of a followed run with a checkpoint. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import stretchflow as sf
from stretchflow.errors import SourceError
from stretchflow.eventtime import WATERMARK
from stretchflow.io.follow import follow, parse_until
from stretchflow.queries import QUERIES
from stretchflow.spark.streaming import end_marker
from threadutil import wait_until, within

#: the bound of every wait in this file (a hang fails the test, never stalls it)
BOUND_S = 60.0


def _lines(n: int, start: int = 0) -> list[bytes]:
    """``n`` tweet-like records, 10 per second of event time, a few words each."""
    return [json.dumps({"ts": i * 100, "text": f"w{i % 7} w{i % 3} w{i % 11}"}).encode() + b"\n"
            for i in range(start, start + n)]


def _wordcount(src: sf.io.Source, sink: sf.io.Sink, engine: str = "reference",
               **opts: object) -> None:
    flow = sf.Flow("wc")
    QUERIES["wordcount"].build([flow.source(src)], size=2000, slide=1000).sink(sink)
    flow.run(engine, **opts)


def _collected(src: sf.io.Source, engine: str = "reference", **opts: object) -> list[dict]:
    c = sf.io.Collector()
    _wordcount(src, c, engine, **opts)
    return c.records()


def _in_thread(fn: Callable[[], None]) -> threading.Thread:
    """``fn`` in a daemon thread whose error fails the test at :func:`_join`."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.errors = errors  # type: ignore[attr-defined]
    t.start()
    return t


def _join(t: threading.Thread) -> None:
    t.join(BOUND_S)
    assert not t.is_alive(), "the writer thread did not finish"
    if t.errors:  # type: ignore[attr-defined]
        raise t.errors[0]  # type: ignore[attr-defined]


def _items(src: sf.io.Source) -> list:
    """The source's items, read in a thread with a bound (a source that never ends fails)."""
    out: list = []
    t = _in_thread(lambda: out.extend(src.items()))
    _join(t)
    return out


def _reap(p: subprocess.Popen) -> None:
    """Kills a child still running (an assertion failed before it ended), within the bound,
    and closes its stderr pipe."""
    if p.poll() is None:
        p.kill()
        p.wait(BOUND_S)
    if p.stderr:
        p.stderr.close()


# -- the end conditions -------------------------------------------------------------------------
def test_until_forms() -> None:
    assert parse_until("marker") == ("marker", 0.0)
    assert parse_until("idle:0.5") == ("idle", 0.5)
    assert parse_until("idle:2s") == ("idle", 2.0)
    assert parse_until(None) == ("never", 0.0)
    for bad in ("idle:", "idle:-1", "idle:x", "soon", 3):
        with pytest.raises(ValueError, match="until must be"):
            parse_until(bad)
    with pytest.raises(ValueError, match="poll"):
        follow("x.jsonl", poll=0)


def test_idle_ends_and_takes_a_last_line_without_newline(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"".join(_lines(3)) + b'{"ts": 300, "text": "last"}')  # no newline
    items = _items(follow(p, until="idle:0.5", poll=0.01))
    data = [(ts, v["text"]) for ts, v in items if v is not WATERMARK]
    assert [ts for ts, _ in data] == [0, 100, 200, 300]
    assert data[-1][1] == "last"


def test_marker_ends_and_is_no_record(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    # after the marker: never read (a bad line there would be an error if it were)
    p.write_bytes(b"".join(_lines(4)) + end_marker(300).encode() + b"not json\n")
    items = _items(follow(p, until="marker", poll=0.01))
    assert [ts for ts, v in items if v is not WATERMARK] == [0, 100, 200, 300]
    # with an idle end too, the marker ends the input (whichever comes first)
    items = _items(follow(p, until="idle:30", poll=0.01))
    assert [ts for ts, v in items if v is not WATERMARK] == [0, 100, 200, 300]
    # until=None never ends: the marker is skipped, never a record
    lines = _lines(4)
    p.write_bytes(b"".join(lines[:2]) + end_marker(100).encode() + b"".join(lines[2:]))
    it = follow(p, until=None, poll=0.01).items()
    assert [next(it) for _ in range(4)] == [(i * 100, json.loads(lines[i])) for i in range(4)]
    # a marker with no timestamp ends the input too
    p.write_bytes(b"".join(_lines(2)) + b'{"__end__": true}\n')
    assert len([v for _, v in _items(follow(p, poll=0.01)) if v is not WATERMARK]) == 2


def test_missing_file_and_bad_line_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        list(follow(tmp_path / "none.jsonl").items())
    p = tmp_path / "bad.jsonl"
    p.write_bytes(_lines(1)[0] + b"{oops\n")
    with pytest.raises(SourceError, match=r"bad.jsonl:2.*malformed JSON"):
        _items(follow(p, until="idle:0.3", poll=0.01))


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    p.write_bytes(_lines(1)[0] + b'{"ts": 100, "te')  # half a line: no JSON yet
    src = follow(p, until="marker", poll=0.01)
    got: list = []
    seen_first = threading.Event()

    def read() -> None:
        for item in src.items():
            got.append(item)
            seen_first.set()

    t = _in_thread(read)
    assert seen_first.wait(BOUND_S)
    # the half line is not read (nor an error) while it waits: the source has read to the end
    # of the file and gone quiet (its watermark at ts 0, before the completed line); the
    # writer then completes it
    wait_until(lambda: (0, WATERMARK) in got, BOUND_S, "the source goes quiet")
    assert [ts for ts, v in got if v is not WATERMARK] == [0]
    with open(p, "ab") as f:
        f.write(b'xt": "b"}\n' + end_marker(100).encode())
    _join(t)
    assert [(ts, v["text"]) for ts, v in got if v is not WATERMARK][-1] == (100, "b")
    assert got.count((0, WATERMARK)) == 1  # one per quiet spell


def test_shrinking_file_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"".join(_lines(5)))
    it = follow(p, until=None, poll=0.01).items()
    assert [next(it)[0] for _ in range(5)] == [0, 100, 200, 300, 400]
    p.write_bytes(b"")  # truncated under the reader
    with pytest.raises(SourceError, match="shrank"):
        for _ in range(1000):
            next(it)


# -- a growing file gives the finished file's output ----------------------------------------------
def _append_slowly(p: Path, chunks: list[bytes], pause: float = 0.01) -> Callable[[], None]:
    def write() -> None:
        with open(p, "ab") as f:
            for c in chunks:
                f.write(c)
                f.flush()
                time.sleep(pause)  # paced: the file grows while the source follows it
    return write


def _cut_mid_line(data: bytes, pieces: int) -> list[bytes]:
    """``data`` in ``pieces`` chunks cut at fixed offsets: most cuts fall inside a line."""
    step = -(-len(data) // pieces)
    return [data[i:i + step] for i in range(0, len(data), step)]


@pytest.mark.parametrize("engine", ["reference", "vsn"])
def test_growing_file_equals_finished_file(tmp_path: Path, engine: str) -> None:
    data = b"".join(_lines(600))
    done = tmp_path / "done.jsonl"
    done.write_bytes(data)
    opts = {"columnar": "off"} if engine == "reference" else {}
    want = _collected(sf.io.open_source(done), engine, **opts)
    grow = tmp_path / "grow.jsonl"
    grow.write_bytes(b"")
    t = _in_thread(_append_slowly(grow, _cut_mid_line(data, 40) + [end_marker(59_900).encode()]))
    got = _collected(follow(grow, poll=0.005), engine, **opts)
    _join(t)
    assert len(want) > 100
    if engine == "reference":
        assert got == want
    else:  # vsn's order within a timestamp is its own; per timestamp the same records
        assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, want))


def test_reference_emits_while_the_file_grows(tmp_path: Path) -> None:
    """The first window's output reaches the sink before the writer ends the input: the
    writer waits for it (bounded) before writing the marker."""
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"".join(_lines(50)))  # ts up to 4 900: windows ending at 1 000.. close
    first = threading.Event()
    seen_before_end: list[bool] = []

    def on_output(ts: int, rec: dict) -> None:
        first.set()

    def writer() -> None:
        seen_before_end.append(first.wait(BOUND_S))
        with open(p, "ab") as f:
            f.write(end_marker(4900).encode())

    t = _in_thread(writer)
    _wordcount(follow(p, poll=0.01), sf.io.Callback(on_output))
    _join(t)
    assert seen_before_end == [True]


@pytest.mark.parametrize("engine", ["reference", "vsn", "ordered", "slack", "sn"])
def test_every_engine_emits_while_a_paced_source_runs(engine: str) -> None:
    """A paced source (``at_rate``): outputs leave as the watermark passes their window,
    not when the input ends (issue #19; the reference engine used to hold them, and ordered
    held them in its sinks' drains until SINK_BATCH tuples: issue #33's latency bench)."""
    got: list[int] = []
    seen_at: dict[int, int] = {}

    def data():  # records whether output had arrived when item i was asked for
        for i in range(200):
            seen_at[i] = len(got)
            yield {"ts": i * 100, "text": f"w{i % 5}"}

    # the engine's first run in this process imports what its path needs (pyarrow for a
    # columnar O+): a stall that would put a paced source behind its schedule, with no wait
    # (and so no watermark) until it caught up
    _collected(sf.io.iterable([{"ts": 0, "text": "w"}]), engine)
    _wordcount(sf.io.IterableSource(data).at_rate(200), sf.io.Callback(
        lambda ts, rec: got.append(ts)), engine)
    assert got, "no output at all"
    # the window ending at 1 000 is closed by item 10; item 150 is asked for 0.7 s later
    assert seen_at[150] > 0


# -- a directory ---------------------------------------------------------------------------------
def test_directory_in_name_order_not_mtime(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    lines = _lines(30)
    for k, name in enumerate(["b.jsonl", "a.jsonl", "c.jsonl"]):  # mtimes b < a < c
        (d / name).write_bytes(b"".join(lines[10 * "abc".index(name[0]):][:10]))
        os.utime(d / name, (1000 + k, 1000 + k))
    (d / ".d.jsonl.tmp").write_bytes(b"junk\n")  # hidden: a writer's temp file
    (d / "_SUCCESS").write_bytes(b"")
    (d / "notes.txt").write_bytes(b"junk\n")
    items = _items(follow(d, until="idle:0.3", poll=0.01))
    assert [ts for ts, v in items if v is not WATERMARK] == [i * 100 for i in range(30)]


def test_directory_picks_up_new_files_and_refuses_late_names(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    lines = _lines(40)
    (d / "p-01.jsonl").write_bytes(b"".join(lines[:10]))

    def writer() -> None:  # the pauses: the files come while the source follows
        time.sleep(0.05)
        # the newest file without its last newline: finished once p-03 exists
        (d / "p-02.jsonl").write_bytes(b"".join(lines[10:20]).rstrip(b"\n"))
        time.sleep(0.05)
        tmp = d / ".p-03.jsonl.tmp"  # written under a hidden name, renamed into place
        tmp.write_bytes(b"".join(lines[20:40]) + end_marker(3900).encode())
        tmp.rename(d / "p-03.jsonl")

    t = _in_thread(writer)
    items = _items(follow(d, poll=0.01))
    _join(t)
    assert [ts for ts, v in items if v is not WATERMARK] == [i * 100 for i in range(40)]

    late = tmp_path / "late"
    late.mkdir()
    (late / "p-05.jsonl").write_bytes(b"".join(lines[:5]))
    (late / "p-06.jsonl").write_bytes(b"".join(lines[5:10]))
    src = follow(late, until=None, poll=0.01).items()
    assert [next(src)[0] for _ in range(10)] == [i * 100 for i in range(10)]
    (late / "p-04.jsonl").write_bytes(lines[10])
    with pytest.raises(SourceError, match=r"p-04.jsonl.*appeared after p-06.jsonl"):
        for _ in range(1000):
            next(src)


# -- kill and resume -----------------------------------------------------------------------------
CHILD = """
import sys
import stretchflow as sf
from stretchflow.io.follow import follow
from stretchflow.queries import QUERIES

src, out, ck = sys.argv[1:4]
flow = sf.Flow("wc")
QUERIES["wordcount"].build([flow.source(follow(src, poll=0.01))], size=2000,
                           slide=1000).sink(out)
flow.run("reference", columnar="off", checkpoint=ck, checkpoint_every=50)
"""


def test_kill_and_resume_followed_file(tmp_path: Path) -> None:
    """A followed run with a checkpoint, SIGKILLed while it waits for more input, resumed
    once the file is complete: the output of an uninterrupted run."""
    lines = _lines(1200)
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(lines) + end_marker(119_900).encode())
    want = tmp_path / "want.jsonl"
    _wordcount(follow(whole), sf.io.JsonLinesSink(want), columnar="off")

    grow = tmp_path / "grow.jsonl"
    grow.write_bytes(b"".join(lines[:700]))
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck"
    cmd = [sys.executable, "-c", CHILD, str(grow), str(out), str(ck)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        manifest = ck / "_checkpoint.json"
        # a checkpoint past the middle of what is there: the run is waiting for more
        within(lambda: p.poll() is not None or (
            manifest.exists() and json.loads(manifest.read_bytes())["cut"] >= 50_000),
            BOUND_S, poll=0.02)
        assert p.poll() is None, p.stderr.read().decode() if p.stderr else ""
        assert manifest.exists(), "no checkpoint within the bound"
        p.send_signal(signal.SIGKILL)
        p.wait(BOUND_S)
    finally:
        _reap(p)
    assert not out.exists()  # a checkpointed run publishes at its end only
    with open(grow, "ab") as f:  # the rest comes while the run is down
        f.write(b"".join(lines[700:]) + end_marker(119_900).encode())
    r = subprocess.run(cmd, capture_output=True, timeout=BOUND_S * 2)
    assert r.returncode == 0, r.stderr.decode()
    assert out.read_bytes() == want.read_bytes()
    assert not (ck / "_checkpoint.json").exists()  # cleared at the end


def test_event_time_options_pass_through(tmp_path: Path) -> None:
    """A followed file with bounded disorder: ``max_delay`` reorders it as for a file."""
    ts = list(range(0, 3000, 100))
    shuffled = ts[:]
    for i in range(0, len(shuffled) - 1, 2):  # neighbours swapped: 100 ms out of order
        shuffled[i], shuffled[i + 1] = shuffled[i + 1], shuffled[i]
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"".join(json.dumps({"ts": t}).encode() + b"\n" for t in shuffled))
    items = _items(follow(p, until="idle:0.3", poll=0.01, max_delay=200))
    assert [t for t, v in items if v is not WATERMARK] == ts
    with pytest.raises(SourceError, match=r"in.jsonl:2: timestamp goes back"):
        _items(follow(p, until="idle:0.3", poll=0.01))  # declared sorted: an error


NEVER_CHILD = """
import sys
from pathlib import Path
import stretchflow as sf
from stretchflow.io.follow import follow
from stretchflow.queries import QUERIES
from stretchflow.runtime.signals import Interrupted, interrupt_on_signals

src, flag = sys.argv[1:3]
flow = sf.Flow("wc")
QUERIES["wordcount"].build([flow.source(follow(src, until=None, poll=0.01))], size=2000,
                           slide=1000).sink(sf.io.Callback(lambda ts, r: Path(flag).touch()))
try:
    with interrupt_on_signals():  # as the CLI runs a flow
        flow.run("reference")
except Interrupted as e:
    sys.exit(e.exit_code)
"""


def test_until_never_stops_on_sigterm(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"".join(_lines(50)))
    flag = tmp_path / "flag"
    proc = subprocess.Popen([sys.executable, "-c", NEVER_CHILD, str(p), str(flag)],
                            stderr=subprocess.PIPE)
    try:
        within(lambda: flag.exists() or proc.poll() is not None, BOUND_S, poll=0.02)
        assert flag.exists(), "no output while following"  # live: before any end
        assert proc.poll() is None  # and still following: until=None never ends
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(BOUND_S) == 128 + signal.SIGTERM
    finally:
        _reap(proc)
