"""Redis Streams as source and sink (issue #19), against a real redis-server started by the
test (tests/redisserver.py): the same output as the file, live outputs before the end of
input, the end conditions, clear errors, and kill-and-resume with a checkpoint that neither
loses nor repeats a message."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import stretchflow as sf
from redisserver import redis_server
from stretchflow.errors import SourceError, StretchflowError
from stretchflow.io.follow import parse_until
from stretchflow.io.generators import generate
from stretchflow.io.redis_streams import RedisStream, RedisStreamSink, from_url
from stretchflow.queries.wordcount import wordcount
from test_checkpoint_reference import assert_no_leftovers, kill_once_checkpointed, kill_until_done

redis = pytest.importorskip("redis")

CLI = [sys.executable, "-m", "stretchflow.cli"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def tweets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("in") / "tw.jsonl"
    generate("tweets", 3_000, 5, p)
    return p


def _fill(url: str, key: str, path: Path, marker: bool = True) -> int:
    r = redis.Redis.from_url(url)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    lines = path.read_bytes().splitlines()
    for line in lines:
        pipe.xadd(key, {"data": line})
    if marker:
        pipe.xadd(key, {"data": b'{"__end__": true}'})
    pipe.execute()
    r.close()
    return len(lines)


def _wordcount(src, sink) -> sf.Flow:
    flow = sf.Flow("wordcount")
    flow.source(src).oplus(wordcount(60_000, 20_000)).sink(sink)
    return flow


def _records(items) -> Counter:
    return Counter(json.dumps(sf.io.to_record(ts, p), sort_keys=True) for ts, p in items)


@pytest.mark.parametrize("engine", ["reference", "vsn"])
def test_stream_gives_the_files_output(server: str, tweets: Path, engine: str) -> None:
    n = _fill(server, "tw", tweets)
    want, got = sf.io.Collector(), sf.io.Collector()
    _wordcount(sf.io.jsonl(tweets), want).run(engine="reference")
    src = RedisStream("tw", url=server, until="marker")
    _wordcount(src, got).run(engine=engine)
    assert src.read == n
    assert want.items and _records(got.items) == _records(want.items)


def test_sink_writes_each_record_then_the_source_reads_them_back(server: str,
                                                                 tweets: Path) -> None:
    want = sf.io.Collector()
    _wordcount(sf.io.jsonl(tweets), want).run(engine="reference")
    sink = RedisStreamSink("wc-out", url=server, end_marker=True)
    _wordcount(sf.io.jsonl(tweets), sink).run(engine="vsn")
    back = sf.io.Collector()
    flow = sf.Flow("back")
    flow.source(RedisStream("wc-out", url=server, until="marker")).sink(back)
    flow.run(engine="reference")
    assert _records(back.items) == _records(want.items)
    assert redis.Redis.from_url(server).xlen("wc-out") == len(want.items) + 1  # + the marker


def test_outputs_flow_before_the_input_ends(server: str) -> None:
    """A writer appends a tweet every 2 ms of wall time for 60 s of event time; the run's
    first window is out while the writer is still writing (the stream is live)."""
    r = redis.Redis.from_url(server)
    r.delete("live")
    done = threading.Event()
    wrote_end: list[float] = []

    def writer() -> None:
        for i in range(600):
            r.xadd("live", {"data": json.dumps({"ts": i * 100, "text": f"a b{i % 7}"})})
            time.sleep(0.002)  # paced: the stream is live while the run reads it
        wrote_end.append(time.monotonic())
        r.xadd("live", {"data": b'{"__end__": true}'})
        done.set()

    first: list[float] = []
    sink = sf.io.Callback(lambda ts, p: first.append(time.monotonic()) if not first else None)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    _wordcount(RedisStream("live", url=server, until="marker", block_ms=20), sink) \
        .run(engine="vsn")
    t.join(30)
    assert done.is_set() and first, "the writer finished and some window came out"
    assert first[0] < wrote_end[0], "the first window came out before the input ended"


def test_until_idle_and_count(server: str) -> None:
    r = redis.Redis.from_url(server)
    r.delete("few")
    for i in range(10):
        r.xadd("few", {"data": json.dumps({"ts": i})})
    got = sf.io.Collector()
    flow = sf.Flow("idle")
    flow.source(RedisStream("few", url=server, until="idle:0.3", block_ms=50)).sink(got)
    flow.run(engine="reference")
    assert [ts for ts, _ in got.items] == list(range(10))
    got2 = sf.io.Collector()
    flow = sf.Flow("count")
    flow.source(RedisStream("few", url=server, until="count:4")).sink(got2)
    flow.run(engine="reference")
    assert [ts for ts, _ in got2.items] == [0, 1, 2, 3]


def test_flat_fields_and_consumer_group_position(server: str) -> None:
    r = redis.Redis.from_url(server)
    r.delete("flat")
    ids = [r.xadd("flat", {"ts": str(i * 10), "user": f"u{i % 2}"}).decode() for i in range(5)]
    src = RedisStream("flat", url=server, field=None, until="count:5", group="g1")
    got = sf.io.Collector()
    flow = sf.Flow("flat")
    flow.source(src).sink(got)
    flow.run(engine="reference")
    assert [p["user"] for _, p in got.items] == ["u0", "u1", "u0", "u1", "u0"]

    def position() -> str:
        return r.xinfo_groups("flat")[0]["last-delivered-id"].decode()

    assert position() == ids[4]  # the run committed: Flow.run acknowledged what it read
    assert src.acknowledge() is None  # nothing new since
    # a checkpoint covering the first two records of a new pass moves it there
    src._track(1, ids[0].encode())
    src._track(2, ids[1].encode())
    assert src.checkpointed(2) == ids[1]
    assert position() == ids[1]
    assert src.checkpointed(2) is None  # nothing new


def test_bad_entry_names_the_stream_and_entry(server: str) -> None:
    r = redis.Redis.from_url(server)
    r.delete("bad")
    r.xadd("bad", {"data": b'{"ts": 1}'})
    eid = r.xadd("bad", {"data": b"{not json"}).decode()
    flow = sf.Flow("bad")
    flow.source(RedisStream("bad", url=server, until="count:2")).sink(sf.io.Collector())
    with pytest.raises(SourceError) as e:
        flow.run(engine="reference")
    assert "stream 'bad'" in str(e.value) and eid in str(e.value) and "malformed" in str(e.value)


def test_unreachable_server_and_bad_options_are_one_clear_error() -> None:
    flow = sf.Flow("down")
    flow.source(RedisStream("x", url="redis://127.0.0.1:1/0")).sink(sf.io.Collector())
    with pytest.raises(StretchflowError, match="cannot reach Redis at redis://127.0.0.1:1/0"):
        flow.run(engine="reference")
    with pytest.raises(ValueError, match="until must be"):
        parse_until("idle:soon", counts=True)
    with pytest.raises(ValueError, match="names its stream"):
        from_url("redis://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="unknown option"):
        from_url("redis://127.0.0.1:6379/0?stream=a&colour=red")
    src = from_url("redis://127.0.0.1:6379/0?stream=a&until=idle:2&group=g&count=50")
    assert (src.key, src.until, src.group, src.count) == ("a", ("idle", 2.0), "g", 50)


FLOW_FILE = '''
import stretchflow as sf
from stretchflow.io.redis_streams import RedisStream
from stretchflow.queries.wordcount import wordcount

def build_flow(params):
    flow = sf.Flow("wordcount")
    src = RedisStream(params["stream"], url=params["url"], until="marker")
    flow.source(src).oplus(wordcount(60_000, 20_000)).sink(params["out"])
    return flow
'''


@pytest.mark.parametrize("engine", ["reference", "vsn"])
def test_kill_and_resume_neither_loses_nor_repeats(server: str, tweets: Path, tmp_path: Path,
                                                   engine: str) -> None:
    _fill(server, "ck", tweets)
    app = tmp_path / "app.py"
    app.write_text(FLOW_FILE)

    def cmd(out: Path, ck: Path | None) -> list[str]:
        c = CLI + ["run", str(app), "--engine", engine, "-q",
                   "--param", f"url={server}", "--param", "stream=ck", "--param", f"out={out}"]
        return c + (["--checkpoint", str(ck), "--checkpoint-every", "300"] if ck else [])

    want = tmp_path / "want.jsonl"
    t0 = time.monotonic()
    subprocess.run(cmd(want, None), check=True, timeout=300)
    full = time.monotonic() - t0  # kill delays are drawn up to 1.5x this: most cycles kill
    rng = random.Random(3)
    stats = {"kills": 0, "resumed_from_checkpoint": 0, "restarts": 0}
    for cycle in range(6):
        out, ck = tmp_path / f"out{cycle}.jsonl", tmp_path / f"ck{cycle}"
        if cycle % 5 == 0:  # killed once with a checkpoint on disk for certain
            kill_once_checkpointed(cmd(out, ck), ck, out, stats)
        kill_until_done(cmd(out, ck), rng, full, 1.3 * full, ck, stats)
        assert Counter(out.read_bytes().splitlines()) == \
            Counter(want.read_bytes().splitlines()), f"cycle {cycle}: {stats}"
        assert_no_leftovers(out, ck)
    assert stats["kills"] >= 1, stats


def test_cli_reads_and_writes_redis_urls(server: str, tweets: Path, tmp_path: Path) -> None:
    """``--input redis://…?stream=K`` and ``--output redis://…?stream=K``: the same records as
    the file run's output; a bad URL option is one error line, exit 2."""
    _fill(server, "cli-in", tweets)
    want = tmp_path / "want.jsonl"
    subprocess.run(CLI + ["run", "wordcount", "--input", str(tweets), "--output", str(want),
                          "-q"], check=True, timeout=300)
    redis.Redis.from_url(server).delete("cli-out")
    subprocess.run(CLI + ["run", "wordcount", "--engine", "vsn", "-q",
                          "--input", f"{server}?stream=cli-in&until=marker",
                          "--output", f"{server}?stream=cli-out&end_marker=1"],
                   check=True, timeout=300)
    r = redis.Redis.from_url(server)
    got = [json.loads(f[b"data"]) for _, f in r.xrange("cli-out")]
    assert got[-1] == {"__end__": True}
    assert Counter(json.dumps(x, sort_keys=True) for x in got[:-1]) == \
        Counter(json.dumps(json.loads(x), sort_keys=True) for x in want.read_text().splitlines())
    bad = subprocess.run(CLI + ["run", "wordcount", "--input", f"{server}?stream=a&colour=red",
                                "--output", str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown option(s) ['colour']" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", ["reference", "vsn"])
def test_group_position_follows_checkpoints_and_the_commit(server: str, tweets: Path,
                                                           tmp_path: Path, engine: str,
                                                           monkeypatch) -> None:
    """With a consumer group, each written checkpoint moves the group's position to the last
    entry it covers (record counts only grow), and the committed run moves it to the last
    entry read."""
    n = _fill(server, "grp", tweets)
    seen: list[int] = []
    real = RedisStream.checkpointed

    def spy(self, records):
        seen.append(records)
        return real(self, records)

    monkeypatch.setattr(RedisStream, "checkpointed", spy)
    src = RedisStream("grp", url=server, until="marker", group="g")
    _wordcount(src, str(tmp_path / "out.jsonl")).run(
        engine=engine, checkpoint=str(tmp_path / "ck"), checkpoint_every="500")
    assert seen and seen == sorted(seen) and seen[0] < n, seen
    r = redis.Redis.from_url(server)
    last = r.xrevrange("grp", count=1)[0][0].decode()  # the end marker, consumed last
    assert r.xinfo_groups("grp")[0]["last-delivered-id"].decode() == last
