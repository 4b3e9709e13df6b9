"""Bytewax 0.21: NEXMark Q0–Q8 as stretchflow defines them (docs/nexmark.md), with
Bytewax's own operators, on 2 workers; what it measures is the dataflow's run, from the
start of execution (imports and flow construction done) to the output file closed.

``python nx_bytewax.py QUERY DATA_DIR OUTPUT [format=jsonl] [workers=2] [window=MS]
[slide=MS] [mode=processes|threads]``

**Workers.** ``mode=processes`` (the default, the faster here) starts ``workers`` processes
of one worker each, connected as a Bytewax cluster (``cluster_main``, what ``python -m
bytewax.testing -p 2`` does): Python runs in parallel, and the items a keyed step routes to
the other worker are pickled over TCP. ``mode=threads`` runs ``workers`` worker threads in
this process (``-w 2``): no pickling, but the workers share one GIL. Each worker writes its
own part file (a ``DynamicSink``); the parts are concatenated into OUTPUT at the end, inside
the measured time. ``elapsed_s`` starts just before the first worker begins executing.
The epoch (``epoch_interval``) is a day: with its default of 10 s Bytewax deep-copies the
state of every key a step touched at each epoch's end, recovery on or off (half of Q7's
time at 1 M events); nothing here recovers.

**Input.** Each of ``nx-persons.jsonl``, ``nx-auctions.jsonl`` and ``nx-bids.jsonl`` is a
``FixedPartitionedSource`` of ``workers`` partitions, byte ranges of the file cut at line
starts; Bytewax gives each partition to one worker (in the order of their names, ``p0`` to
worker 0 and ``p1`` to worker 1), which reads it in 1 MiB chunks and parses each line with
orjson: a connector yielding dicts, as Bytewax's own ``FileSource`` yields lines.

**Event time.** Every window step uses an ``EventClock`` on the tuple's own timestamp and
windowers aligned to the epoch (window ``k`` is ``[k·W, (k+1)·W)`` ms). A byte range of a
file sorted by ``ts`` is a range of event time, so partition 1 starts half the file's span
ahead of partition 0, and Bytewax's clock is per key: the watermark of a key is the largest
timestamp it has seen minus ``wait_for_system_duration``, plus the system time since. No
wait shorter than the inputs' event-time span is safe, so the wait is that span plus one
day (a bound on the run's system time): no tuple is ever late (the late streams are counted
and reported, 0), and every window closes at the end of input, where the results are
complete and exact. ``to_system_utc`` returns None so that Bytewax does not schedule a
wake-up for each open window (their close times, in 2018, would all be "due" at once).
Every window step runs ``ordered=False`` — its fold does not depend on arrival order — since
the ordered mode would hold every tuple in a queue until the watermark passes it (here: the
end of input) and then sort it.

**Queries.** Rows are ``orjson`` lines with the query's fields plus ``ts``.

* q0, q1, q2: ``map`` (and ``filter``) of the parsed bids.
* q3: persons of OR, ID, CA keyed by id and category-10 auctions keyed by seller,
  ``join_window`` (tumbling W, ``insert_mode="product"``, ``emit_mode="final"``); the pairs
  with both sides present, at the window's end.
* q8: persons keyed by id and auctions keyed by seller, ``join_window`` with
  ``insert_mode="first"`` on both sides: one row per person and window however many
  auctions, at window start + 2W.
* q4, q6: the winning bid per auction and window is a ``fold_window`` (tumbling W) over the
  merged auctions (those whose ``expires`` is before their window's end) and bids keyed by
  auction id: its accumulator keeps the auction and the highest bid in ``[date_time,
  expires]``, and the bids that arrive before their auction (the other partition may be
  ahead) until it does. q4 then averages per category with a second ``fold_window`` keyed by
  category on the window start (ts = window start + 3W). q6 collects each seller's closed
  auctions with ``fold_final`` (keyed by seller; Bytewax has no per-key state over time that
  also sees the end of its windows in order, and with the wait above every window closes
  at the end of input anyway) and a ``flat_map`` walks them in closing order (window,
  expires, id) emitting the mean of the last 10 winning bids (ts = window start + 2W + 1).
* q5: a count per auction, ``fold_window`` with a ``SlidingWindower`` (``window`` every
  ``slide``); then, keyed by the sliding window's id, a ``fold_window`` (tumbling ``slide``
  on the window's start: one window per key) keeping the max count and its auctions, at
  window end + slide.
* q7: a ``fold_window`` (tumbling W) per bucket of auctions (``auction % 32``, so both
  workers share the work of a window) keeping the highest price and the bids at it; then
  keyed by window id a second ``fold_window`` merging the buckets' best, at the window's end.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
import orjson
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.operators.windowing import (
    EventClock,
    SlidingWindower,
    TumblingWindower,
    fold_window,
    join_window,
)
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import cluster_main

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CHUNK = 1 << 20  # bytes a partition reads per batch
#: Bytewax deep-copies the state of every key a stateful step touched at the end of each
#: epoch (10 s of system time by default) even with recovery off; nothing here recovers, so
#: the epoch lasts the whole run
EPOCH_INTERVAL = timedelta(days=1)
BUCKETS = 32  # q7's first-level groups of auctions
Q3_STATES = frozenset(("OR", "ID", "CA"))


# ---------------------------------------------------------------------------- input


def _line_start_at_or_after(path: str, pos: int) -> int:
    """The offset of the first line that starts at or after ``pos``."""
    if pos <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(pos - 1)
        f.readline()  # the rest of the line that holds byte pos - 1
        return f.tell()


class _JsonlPart(StatefulSourcePartition):
    """One byte range of a JSON Lines file, read in chunks, one parsed dict per line."""

    def __init__(self, path: str, start: int, end: int):
        self._f = open(path, "rb")  # noqa: SIM115 (closed in close())
        self._f.seek(start)
        self._left = end - start
        self._carry = b""

    def next_batch(self) -> list:
        if self._left <= 0:
            if self._carry:
                tail, self._carry = self._carry, b""
                return [orjson.loads(tail)]
            raise StopIteration
        data = self._f.read(min(CHUNK, self._left))
        self._left -= len(data)
        lines = (self._carry + data).split(b"\n")
        self._carry = lines.pop()  # an unfinished line, or b"" after the last newline
        loads = orjson.loads
        return [loads(line) for line in lines if line]

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        self._f.close()


class JsonlSource(FixedPartitionedSource):
    """A JSON Lines file as ``parts`` byte ranges cut at line starts; partition ``i`` is
    named ``p{i}``, so that Bytewax gives it to worker ``i``."""

    def __init__(self, path: str, parts: int, names: list[str]):
        size = os.path.getsize(path)
        cuts = [_line_start_at_or_after(path, size * i // parts) for i in range(parts)]
        self._ranges = dict(zip(names, zip(cuts, [*cuts[1:], size], strict=True),
                                strict=True))
        self._path = path

    def list_parts(self) -> list[str]:
        return list(self._ranges)

    def build_part(self, step_id, for_part, resume_state):
        start, end = self._ranges[for_part]
        return _JsonlPart(self._path, start, end)


def _span_ms(paths: list[str]) -> int:
    """The event-time span of sorted JSON Lines files: last ts minus first ts."""
    first, last = [], []
    for p in paths:
        with open(p, "rb") as f:
            first.append(orjson.loads(f.readline())["ts"])
            size = os.path.getsize(p)
            f.seek(max(0, size - 65536))
            last.append(orjson.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])["ts"])
    return max(last) - min(first)


# ---------------------------------------------------------------------------- output


class _Part(StatelessSinkPartition):
    """Appends each batch of rows (bytes lines) to this worker's part file. Bytewax's
    FileSink fsyncs every batch; no other system measured does, so this does not."""

    def __init__(self, path: str, counts: list[int]):
        self._f = open(path, "wb")  # noqa: SIM115 (closed in close())
        self._counts = counts

    def write_batch(self, items):
        self._f.write(b"".join(items))
        self._counts[0] += len(items)

    def close(self):
        self._f.close()


class PartSink(DynamicSink):
    def __init__(self, output: str, counts: list[int]):
        self._output = output
        self._counts = counts

    def build(self, step_id, worker_index, worker_count):
        return _Part(f"{self._output}.part{worker_index}", self._counts)


# ---------------------------------------------------------------------------- queries


def _never(_t):
    return None


def _ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def build(query: str, data_dir: str, output: str, workers: int, window: int, slide: int,
          counts: list[int], late: list[int], names: list[str]) -> Dataflow:
    reads = {"q3": ("persons", "auctions"), "q8": ("persons", "auctions"),
             "q4": ("auctions", "bids"), "q6": ("auctions", "bids")}.get(query, ("bids",))
    paths = {s: os.path.join(data_dir, f"nx-{s}.jsonl") for s in reads}
    # see the module docstring: no tuple is late and every window closes at end of input
    wait = timedelta(milliseconds=_span_ms(list(paths.values())), days=1)

    def clock(ts_ms):
        return EventClock(lambda v: _ms(ts_ms(v)), wait_for_system_duration=wait,
                          to_system_utc=_never)

    W = window  # noqa: N806
    tumbling = TumblingWindower(length=timedelta(milliseconds=W), align_to=EPOCH)
    flow = Dataflow(f"nexmark-{query}")
    src = {s: op.input(s, flow, JsonlSource(p, workers, names)) for s, p in paths.items()}

    def count_late(stream):
        def one(_step, _item):
            late[0] += 1
        op.inspect(f"late-{len(flow.substeps)}", stream, one)

    dumps = orjson.dumps
    if query in ("q0", "q1"):
        def row(b):
            del b["channel"], b["url"]  # the rest is ts, auction, bidder, price, ...
            if query == "q1":
                b["price"] = b["price"] * 0.908
            return dumps(b) + b"\n"
        rows = op.map("rows", src["bids"], row)
    elif query == "q2":
        picked = op.filter("auction%123", src["bids"], lambda b: b["auction"] % 123 == 0)
        rows = op.map("rows", picked, lambda b: dumps(
            {"ts": b["ts"], "auction": b["auction"], "price": b["price"]}) + b"\n")
    elif query in ("q3", "q8"):
        if query == "q3":
            persons = op.filter("states", src["persons"], lambda p: p["state"] in Q3_STATES)
            auctions = op.filter("category", src["auctions"], lambda a: a["category"] == 10)
            mode = "product"
        else:
            persons, auctions, mode = src["persons"], src["auctions"], "first"
        pk = op.map("person-by-id", persons, lambda p: (str(p["id"]), p))
        ak = op.map("auction-by-seller", auctions, lambda a: (str(a["seller"]), a))
        joined = join_window("join", clock(lambda v: v["ts"]), tumbling, pk, ak,
                             insert_mode=mode, emit_mode="final", ordered=False)
        count_late(joined.late)
        if query == "q3":
            def row3(kv):
                wid, (p, a) = kv[1]
                if p is None or a is None:
                    return None
                return dumps({"ts": (wid + 1) * W, "name": p["name"], "city": p["city"],
                              "state": p["state"], "id": a["id"]}) + b"\n"
            rows = op.filter_map("rows", joined.down, row3)
        else:
            def row8(kv):
                wid, (p, a) = kv[1]
                if p is None or a is None:
                    return None
                return dumps({"ts": wid * W + 2 * W, "id": p["id"], "name": p["name"],
                              "starttime": wid * W}) + b"\n"
            rows = op.filter_map("rows", joined.down, row8)
    elif query in ("q4", "q6"):
        # auctions that close in the window they open in: (ts, expires, category, seller,
        # id); bids: (ts, price); both keyed by auction id
        closing = op.filter_map(
            "closing", src["auctions"],
            lambda a: (str(a["id"]), (a["date_time"], a["expires"], a["category"],
                                      a["seller"], a["id"]))
            if a["expires"] < (a["date_time"] // W + 1) * W else None)
        bids = op.map("bid-by-auction", src["bids"],
                      lambda b: (str(b["auction"]), (b["date_time"], b["price"])))

        def fold(acc, v):
            # acc: [auction or None, bids seen before the auction, winning price or None]
            if len(v) == 2:
                a = acc[0]
                if a is None:
                    acc[1].append(v)
                elif a[0] <= v[0] <= a[1] and (acc[2] is None or v[1] > acc[2]):
                    acc[2] = v[1]
            else:
                acc[0] = v
                early, acc[1] = acc[1], []
                for b in early:
                    if v[0] <= b[0] <= v[1] and (acc[2] is None or b[1] > acc[2]):
                        acc[2] = b[1]
            return acc

        def merge(x, y):  # tumbling windows never merge
            raise AssertionError("tumbling windows do not merge")

        won = fold_window("winning", op.merge("both", closing, bids),
                          clock(lambda v: v[0]), tumbling, lambda: [None, [], None], fold,
                          merge, ordered=False)
        count_late(won.late)
        if query == "q4":
            finals = op.filter_map(
                "by-category", won.down,
                lambda kv: (str(kv[1][1][0][2]), (kv[1][0] * W, kv[1][1][2]))
                if kv[1][1][0] is not None and kv[1][1][2] is not None else None)

            def add(acc, v):
                acc[0] += v[1]
                acc[1] += 1
                return acc

            avg = fold_window("average", finals, clock(lambda v: v[0]), tumbling,
                              lambda: [0, 0], add, merge, ordered=False)
            count_late(avg.late)
            rows = op.map("rows", avg.down, lambda kv: dumps(
                {"ts": kv[1][0] * W + 3 * W, "category": int(kv[0]),
                 "avg": kv[1][1][0] / kv[1][1][1]}) + b"\n")
        else:
            closed = op.filter_map(
                "by-seller", won.down,
                lambda kv: (str(kv[1][1][0][3]), (kv[1][0], kv[1][1][0][1], kv[1][1][0][4],
                                                   kv[1][1][2]))
                if kv[1][1][0] is not None and kv[1][1][2] is not None else None)

            def collect(acc, v):
                acc.append(v)
                return acc

            per_seller = op.fold_final("per-seller", closed, list, collect)

            def averages(kv):
                seller, done = int(kv[0]), sorted(kv[1])  # closing order: wid, expires, id
                last, out = [], []
                for wid, _expires, _id, final in done:
                    last.append(final)
                    if len(last) > 10:
                        del last[0]
                    out.append(dumps({"ts": wid * W + 2 * W + 1, "seller": seller,
                                      "avg": sum(last) / len(last)}) + b"\n")
                return out
            rows = op.flat_map("rows", per_seller, averages)
    elif query == "q5":
        sliding = SlidingWindower(length=timedelta(milliseconds=W),
                                  offset=timedelta(milliseconds=slide), align_to=EPOCH)
        keyed = op.map("by-auction", src["bids"], lambda b: (str(b["auction"]), b["ts"]))
        counts_w = fold_window("count", keyed, clock(lambda ts: ts), sliding, int,
                               lambda n, _ts: n + 1, lambda x, y: x + y, ordered=False)
        count_late(counts_w.late)
        # one key per sliding window (its id), the window's start as its timestamp
        by_window = op.map("by-window", counts_w.down,
                           lambda kv: (str(kv[1][0]), (kv[1][0] * slide, int(kv[0]), kv[1][1])))

        def top(acc, v):
            if v[2] > acc[0]:
                acc[0], acc[1] = v[2], [v[1]]
            elif v[2] == acc[0]:
                acc[1].append(v[1])
            return acc

        best = fold_window("max", by_window, clock(lambda v: v[0]),
                           TumblingWindower(length=timedelta(milliseconds=slide),
                                            align_to=EPOCH),
                           lambda: [0, []], top, lambda x, y: x, ordered=False)
        count_late(best.late)

        def rows5(kv):
            wid = int(kv[0])  # the sliding window's id: [wid·slide, wid·slide + W)
            n, auctions = kv[1][1]
            at = wid * slide + W + slide
            return [dumps({"ts": at, "auction": a, "num": n}) + b"\n" for a in auctions]
        rows = op.flat_map("rows", best.down, rows5)
    elif query == "q7":
        def slim(b):
            del b["channel"], b["url"]
            return (str(b["auction"] % BUCKETS), b)
        keyed = op.map("by-bucket", src["bids"], slim)

        def top(acc, b):
            if b["price"] > acc[0]:
                acc[0], acc[1] = b["price"], [b]
            elif b["price"] == acc[0]:
                acc[1].append(b)
            return acc

        def top_of(acc, v):
            if v[1] > acc[0]:
                acc[0], acc[1] = v[1], list(v[2])
            elif v[1] == acc[0]:
                acc[1].extend(v[2])
            return acc

        part = fold_window("bucket-max", keyed, clock(lambda b: b["ts"]), tumbling,
                           lambda: [-1, []], top, lambda x, y: x, ordered=False)
        count_late(part.late)
        by_window = op.map("by-window", part.down,
                           lambda kv: (str(kv[1][0]), (kv[1][0] * W, kv[1][1][0], kv[1][1][1])))
        best = fold_window("max", by_window, clock(lambda v: v[0]), tumbling,
                           lambda: [-1, []], top_of, lambda x, y: x, ordered=False)
        count_late(best.late)

        def rows7(kv):
            at = (kv[1][0] + 1) * W
            out = []
            for b in kv[1][1][1]:
                b["ts"] = at
                out.append(dumps(b) + b"\n")
            return out
        rows = op.flat_map("rows", best.down, rows7)
    else:
        raise SystemExit(f"nx_bytewax: unknown query {query!r}")
    op.output("out", rows, PartSink(output, counts))
    return flow


# ---------------------------------------------------------------------------- running


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run_cluster(query, data_dir, output, workers, window, slide, names, addresses,
                 proc_id, per_proc) -> dict:
    counts, late = [0], [0]
    flow = build(query, data_dir, output, workers, window, slide, counts, late, names)
    t0 = time.time()
    cluster_main(flow, addresses, proc_id, worker_count_per_proc=per_proc,
                 epoch_interval=EPOCH_INTERVAL)
    return {"t0": t0, "rows": counts[0], "late": late[0]}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--proc":  # a child process of mode=processes
        proc_id, addresses, names = int(argv[1]), argv[2].split(";"), argv[3].split(",")
        query, data_dir, output, workers, window, slide = argv[4:10]
        out = _run_cluster(query, data_dir, output, int(workers), int(window), int(slide),
                           names, addresses, proc_id, 1)
        print(json.dumps(out))
        return 0

    query, data_dir, output, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    fmt = kw.pop("format", "jsonl")
    workers = int(kw.pop("workers", "2"))
    window, slide = int(kw.pop("window", "10000")), int(kw.pop("slide", "2000"))
    mode = kw.pop("mode", "processes")
    if kw:
        raise SystemExit(f"nx_bytewax: unknown parameters {sorted(kw)}")
    if fmt != "jsonl":
        print(json.dumps({"unsupported": f"format={fmt}: this program reads JSON Lines"}))
        return 3
    # Bytewax hands the partitions to the workers in the order of their names (checked
    # on 0.21.1 with 2 workers, threads and processes): p0 to worker 0, p1 to worker 1
    names = [f"p{i}" for i in range(workers)]

    if mode == "threads":
        res = [_run_cluster(query, data_dir, output, workers, window, slide, names, [], 0,
                            workers)]
    elif mode == "processes":
        addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(workers))
        children = [subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--proc", str(i), addresses,
             ",".join(names), query, data_dir, output, str(workers), str(window), str(slide)],
            stdout=subprocess.PIPE) for i in range(workers)]
        res = []
        for c in children:
            out, _ = c.communicate()
            if c.returncode != 0:
                raise SystemExit(f"nx_bytewax: worker process exited {c.returncode}")
            res.append(json.loads(out.decode().strip().splitlines()[-1]))
    else:
        raise SystemExit(f"nx_bytewax: mode is threads or processes, not {mode!r}")
    with open(output, "wb") as f:
        for i in range(workers):
            part = f"{output}.part{i}"
            if os.path.exists(part):
                with open(part, "rb") as p:
                    shutil.copyfileobj(p, f, 16 << 20)
                os.remove(part)
    elapsed = time.time() - min(r["t0"] for r in res)
    rows_out = sum(r["rows"] for r in res)
    late = sum(r["late"] for r in res)
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows_out, "late_items": late,
                      "settings": {"workers": workers, "mode": mode, "format": fmt,
                                   "window": window, "slide": slide,
                                   "partitions": names,
                                   "wait_for_system_duration": "input span + 1 day"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
