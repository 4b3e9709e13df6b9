"""``stretchflow bench run live``: how soon a window's output reaches the sink once the
watermark of a followed file passes it (issue #19: "a flow reading a growing file ... emits its
first window within 1 s of the watermark passing it, measured on the vsn and reference
engines"), for a followed file and for a Redis stream.

Setup, per repeat and engine: a writer *process* appends generated tweets to a JSON Lines file
at a steady ``rate`` (tuples per second of wall-clock time; event time advances one second per
``rate`` tuples, so windows close at the pace of the wall clock), ``TICK_S`` at a time, and
ends it with the end-of-input marker. The flow (wordcount, ``size``/``slide`` ms) reads it
with :func:`stretchflow.io.follow.follow` (``poll`` s) on the engine, in this process, into a
:class:`~stretchflow.io.sinks.Callback` sink that notes the wall-clock time of each output.

The delay of a window, precisely: a window ``[E - size, E)`` leaves as outputs with ts ``E``;
the input is timestamp-sorted with no ``max_delay``, so its watermark is its latest timestamp
and passes ``E`` with the first record whose ts >= ``E``. ``passed(E)`` is the wall-clock time
(``time.time()``) at which the writer's write holding that record returned (the writer notes
it after each write and flush); ``reached(E)`` is the wall-clock time the sink received the
first output with ts ``E``. The delay is ``reached(E) - passed(E)``; windows closed only by
the end of input (after the last record) are not counted. Both clocks are the same machine's.

Variants in the same run, alternating per repeat: ``reference``, ``vsn`` and ``handwritten``
(the baseline: a loop in this process that follows the file with the same poll, parses each
complete line with orjson and keeps the counts of the open windows in dicts, emitting a window
as soon as a record passes its end — the floor set by polling and parsing, no engine), and
``reference-redis``, ``vsn-redis``: the same records through a Redis stream instead of a file
(a writer process appends each tick's records with ``XADD``; the flow reads them with
:class:`~stretchflow.io.redis_streams.RedisStream`, ``XREAD BLOCK`` of ``poll`` s), against a
redis-server the bench starts (:mod:`stretchflow.io.redis_server`). Reported per variant: the
delays' min / median / p99 / max over all windows of all repeats,
the first window's delay per repeat, and whether <= 1 s was met (every repeat's first window,
and the p99 of all windows). Each repeat records the 1-minute load average
(:func:`~stretchflow_bench.common.repeat_probe`).
"""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from .common import repeat_probe, rotation, summarize, write_result

NAME = "live"
VARIANTS = ("reference", "vsn", "handwritten", "reference-redis", "vsn-redis")
#: the writer appends what is due every this many seconds
TICK_S = 0.01
#: the issue's bound on a window's delay
TARGET_S = 1.0
#: a run's bound beyond its input's own duration (start-up, the end of input)
SLACK_S = 60.0

#: the writer process: ``SRC RATE LOG TICK file DST`` or ``SRC RATE LOG TICK redis URL KEY``.
#: One pacing loop, two ways to write: every ``TICK`` s it writes what is due at ``RATE``
#: lines/s (a file: the lines in one write and a flush; Redis: one pipelined batch of ``XADD``,
#: field ``data``: the line), then the end-of-input marker; it notes ``[last line index
#: written, time.time() after the write]`` per write and puts them in LOG at the end (kept in
#: memory while it writes: no I/O of its own between the writes)
WRITER = """
import sys, time
src, rate, log, tick, kind = sys.argv[1], float(sys.argv[2]), sys.argv[3], \\
    float(sys.argv[4]), sys.argv[5]
if kind not in ("file", "redis"):
    sys.exit(f"bench live writer: unknown target {kind!r} (file DST or redis URL KEY)")
END = b'{"ts": 0, "__end__": true}'
data = open(src, "rb").read()
if kind == "file":
    lines = data.splitlines(keepends=True)
    out = open(sys.argv[6], "ab")

    def write(batch):
        out.write(b"".join(batch))
        out.flush()

    def finish():
        write([END + b"\\n"])
        out.close()
else:
    import redis
    lines = data.splitlines()
    r, key = redis.Redis.from_url(sys.argv[6]), sys.argv[7]

    def write(batch):
        pipe = r.pipeline(transaction=False)
        for line in batch:
            pipe.xadd(key, {"data": line})
        pipe.execute()

    def finish():
        r.xadd(key, {"data": END})
marks = []
done = 0
t0 = time.perf_counter()
while done < len(lines):
    due = min(len(lines), int((time.perf_counter() - t0) * rate) + 1)
    if due > done:
        write(lines[done:due])
        marks.append((due - 1, time.time()))
        done = due
    time.sleep(tick)
finish()
with open(log, "w") as f:
    f.write(repr(marks))
"""


def _records(rows: int, rate: int, seed: int) -> list[dict[str, Any]]:
    """Generated tweets, re-timed at ``rate`` per second of event time from 0."""
    from stretchflow.io.generators import tweets

    recs = tweets(rows, seed=seed).to_pylist()
    for i, r in enumerate(recs):
        r["ts"] = i * 1000 // rate
    return recs


def passed_times(ts: list[int], marks: list[tuple[int, float]], size: int, slide: int
                 ) -> dict[int, float]:
    """``passed(E)`` (module docstring) for every window end ``E`` passed by the input:
    ``ts`` the records' timestamps in file order, ``marks`` the writer's ``(last index
    written, wall time)`` per write."""
    out: dict[int, float] = {}
    k = 0
    # window ends are multiples of slide; the first one after the first record
    end = (ts[0] // slide + 1) * slide
    for i, t in enumerate(ts):
        while t >= end:
            while marks[k][0] < i:
                k += 1
            out[end] = marks[k][1]
            end += slide
    return out


def _engine_run(engine: str, source: Any, size: int, slide: int) -> dict[int, float]:
    """The wall-clock time the first output of each window end reached the sink."""
    import stretchflow as sf
    from stretchflow.queries import QUERIES

    reached: dict[int, float] = {}

    def note(ts: int, _rec: Any) -> None:
        if ts not in reached:
            reached[ts] = time.time()

    flow = sf.Flow("wordcount")
    QUERIES["wordcount"].build([flow.source(source)], size=size,
                               slide=slide).sink(sf.io.Callback(note))
    flow.run(engine)
    return reached


def _handwritten(path: Path, size: int, slide: int, poll: float) -> dict[int, float]:
    """The baseline (module docstring): follow, parse, count per window, emit on passing."""
    reached: dict[int, float] = {}
    counts: dict[int, dict[str, int]] = {}  # window end -> word -> count
    loads = orjson.loads
    pending = b""
    nxt: float | None = None  # the next window end to emit
    with open(path, "rb") as f:
        while True:
            data = f.read(1 << 20)
            if not data:
                time.sleep(poll)
                continue
            buf = pending + data
            cut = buf.rfind(b"\n") + 1
            pending = buf[cut:]
            for line in buf[:cut].splitlines():
                rec = loads(line)
                if rec.get("__end__"):
                    for e in sorted(counts):
                        reached.setdefault(e, time.time())
                    return reached
                ts = rec["ts"]
                if nxt is None:
                    nxt = (ts // slide + 1) * slide
                while ts >= nxt:
                    win = counts.pop(nxt, None)
                    if win:
                        reached[int(nxt)] = time.time()
                    nxt += slide
                first = (ts // slide + 1) * slide  # the window ends covering ts
                words = rec["text"].split()
                for e in range(first, first + size, slide):
                    c = counts.setdefault(e, {})
                    for w in words:
                        c[w] = c.get(w, 0) + 1


def _one(variant: str, recs_path: Path, ts: list[int], tmp: Path, rate: int, size: int,
         slide: int, poll: float, redis_url: str | None) -> dict[str, Any]:
    from stretchflow.io.follow import follow
    from stretchflow.io.redis_streams import RedisStream

    live = tmp / f"live-{variant}.jsonl"
    live.write_bytes(b"")
    log = tmp / f"marks-{variant}.txt"
    bound = len(ts) / rate + SLACK_S
    engine, _, transport = variant.partition("-")
    pacing = [sys.executable, "-c", WRITER, str(recs_path), str(rate), str(log), str(TICK_S)]
    if transport == "redis":  # a stream of its own per run: each run reads from its start
        key = f"{live.stem}-{time.monotonic_ns()}"
        writer = subprocess.Popen([*pacing, "redis", str(redis_url), key])
        source = RedisStream(key, url=str(redis_url), until="marker",
                             block_ms=max(1, int(poll * 1000)))
    else:
        writer = subprocess.Popen([*pacing, "file", str(live)])
        source = follow(live, poll=poll)
    try:
        with repeat_probe() as probe:
            if variant == "handwritten":
                reached = _handwritten(live, size, slide, poll)
            else:
                reached = _engine_run(engine, source, size, slide)
        writer.wait(bound)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(SLACK_S)
    if writer.returncode != 0:
        raise RuntimeError(f"bench live: the writer failed (exit {writer.returncode})")

    marks = ast.literal_eval(log.read_text())
    passed = passed_times(ts, marks, size, slide)
    delays = sorted((reached[e] - passed[e], e) for e in passed if e in reached)
    missing = [e for e in passed if e not in reached]
    return {"delays_s": [d for d, _ in sorted(delays, key=lambda x: x[1])],
            "first_window_s": min(delays, key=lambda x: x[1])[0] if delays else None,
            "windows": len(delays), "windows_without_output": len(missing), "probe": probe}


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        rate: int | None = None, seconds: float | None = None, repeats: int | None = None,
        size: int = 2000, slide: int = 1000, poll: float = 0.05) -> Path:
    """Measures and writes ``live.json``; returns its path (module docstring). Quick: 500
    tuples/s for 6 s, one repeat (under a minute with start-ups)."""
    rate = rate if rate is not None else (500 if quick else 2000)
    seconds = seconds if seconds is not None else (6.0 if quick else 30.0)
    repeats = repeats if repeats is not None else (1 if quick else 3)
    rows = int(rate * seconds)
    if rows < 10 or repeats < 1 or slide < 1 or size < slide:
        raise ValueError(f"bench live: needs rate*seconds >= 10, repeats >= 1 and size >= "
                         f"slide >= 1, got {rows} rows, {repeats} repeats, size {size}, "
                         f"slide {slide}")
    from stretchflow.io.redis_server import redis_server

    per: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="sf-bench-live-") as tmp_s, \
            redis_server(tmp_s) as redis_url:
        tmp = Path(tmp_s)
        recs = _records(rows, rate, seed)
        src = tmp / "records.jsonl"
        src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
        ts = [r["ts"] for r in recs]
        for r in range(repeats):
            order = rotation(VARIANTS, r)
            for v in order:
                per[v].append(_one(v, src, ts, tmp, rate, size, slide, poll, redis_url))
    metrics: dict[str, Any] = {}
    for v, reps in per.items():
        delays = [d for rep in reps for d in rep["delays_s"]]
        firsts = [rep["first_window_s"] for rep in reps]
        m: dict[str, Any] = {"repeats": reps, "windows": len(delays),
                             "first_window_s": firsts}
        if delays:
            m["delay_s"] = {**summarize(delays), "p99": _p99(delays)}
            m["met"] = {"first_window_le_1s": all(f is not None and f <= TARGET_S
                                                  for f in firsts),
                        "p99_le_1s": m["delay_s"]["p99"] <= TARGET_S}
        metrics[v] = m
    base = metrics["handwritten"].get("delay_s", {}).get("median")
    for v in VARIANTS[:2] + VARIANTS[3:]:
        med = metrics[v].get("delay_s", {}).get("median")
        metrics[v]["median_vs_handwritten"] = med / base if med and base else None
    params = {"quick": quick, "rate_tuples_per_s": rate, "seconds": seconds, "rows": rows,
              "repeats": repeats, "seed": seed, "query": "wordcount", "size": size,
              "slide": slide, "poll_s": poll, "writer_tick_s": TICK_S,
              "delay": "wall time the first output of window end E reached the sink minus "
                       "wall time the writer's write holding the first record with ts >= E "
                       "returned (sorted input, no max_delay)",
              "transports": {"": "a followed JSON Lines file (io.follow)",
                             "-redis": "a Redis stream (io.redis_streams, XREAD BLOCK poll_s; "
                                       "the writer XADDs each tick's lines in one pipeline)"},
              "order": f"variants rotate: repeat r starts with variant r mod {len(VARIANTS)}"}
    return write_result(NAME, params, metrics, out_dir)


if __name__ == "__main__":  # a quick look: python -m stretchflow_bench.live [OUT_DIR]
    print(run(quick=True, out_dir=sys.argv[1] if len(sys.argv) > 1 else None))
