"""Bytewax: sliding event-time windows with Bytewax's own ``SlidingWindower`` and
``EventClock`` (``count_window``), one worker, in this process (``run_main``).

``python bytewax_wc.py QUERY INPUT OUTPUT size=MS slide=MS [distance=N] [wait_ms=MS]``

The event clock's watermark is the largest timestamp seen minus ``wait_ms``, and it also
advances with *system* time since that item was seen. A file replays event time far faster
than real time, so with a small ``wait_ms`` a tuple whose timestamp is only slightly behind
the watermark (or equal to an earlier tuple's after system time moved) is *late*: Bytewax
drops it from its windows and sends it to the ``late`` stream. The number of late items is
printed (one per item and window it was late for), so a run that lost rows says why.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
import orjson
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource
from bytewax.operators.windowing import EventClock, SlidingWindower, count_window
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main
from peer_common import count_lines, pairs, parse_args

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Lines(StatelessSinkPartition):
    """Appends each batch of rows to the output file. Bytewax's FileSink fsyncs every batch;
    no other system here does, so this sink (Bytewax's own DynamicSink API) does not."""

    def __init__(self, f):
        self._f = f

    def write_batch(self, items):
        self._f.writelines(items)

    def close(self):
        pass


class _Sink(DynamicSink):
    def __init__(self, f):
        self._f = f

    def build(self, step_id, worker_index, worker_count):
        return _Lines(self._f)



def build(query: str, source: FixedPartitionedSource, sink: DynamicSink, size: int,
          slide: int, distance: int | None, wait_ms: int, late: list[int]) -> Dataflow:
    flow = Dataflow(f"peers-{query}")
    tweets = op.map("parse", op.input("in", flow, source), orjson.loads)
    if query == "wordcount":
        items = op.flat_map("tokens", tweets,
                            lambda t: [(w, t["ts"]) for w in t["text"].split()])
        key = lambda x: x[0]  # noqa: E731
    elif query == "paircount":
        # Bytewax keys are strings: a pair's key is its JSON array, injective whatever the
        # tokens hold (a separator character could occur inside a token)
        items = op.flat_map("pairs", tweets,
                            lambda t: [(p, t["ts"]) for p in pairs(t["text"], distance)])
        key = lambda x: json.dumps(x[0])  # noqa: E731
    else:
        raise SystemExit(f"bytewax_wc: unknown query {query!r}")
    clock = EventClock(lambda x: EPOCH + timedelta(milliseconds=x[1]),
                       wait_for_system_duration=timedelta(milliseconds=wait_ms))
    windower = SlidingWindower(length=timedelta(milliseconds=size),
                               offset=timedelta(milliseconds=slide), align_to=EPOCH)
    out = count_window("count", items, clock, windower, key)

    def late_item(_item):
        late[0] += 1

    op.inspect("late", out.late, lambda _step, item: late_item(item))

    # window id k covers [k*WA, k*WA + WS) since EPOCH (align_to): its output ts is k*WA + WS
    if query == "wordcount":
        def row(kv):
            word, (wid, n) = kv
            return orjson.dumps({"ts": wid * slide + size, "word": word, "count": n}) + b"\n"
    else:
        def row(kv):
            first, second = json.loads(kv[0])
            wid, n = kv[1]
            return orjson.dumps({"ts": wid * slide + size, "first": first, "second": second,
                                 "count": n}) + b"\n"
    op.output("out", op.map("row", out.down, row), sink)
    return flow


def main(argv: list[str]) -> None:
    from bytewax.connectors.files import FileSource

    query, inp, outp, size, slide, distance, extra = parse_args(argv, "bytewax_wc",
                                                                 wait_ms="0")
    wait_ms = int(extra["wait_ms"])
    late = [0]
    t0 = time.perf_counter()
    with open(outp, "wb") as f:
        run_main(build(query, FileSource(inp, batch_size=1000), _Sink(f), size, slide,
                       distance, wait_ms, late))
    elapsed = time.perf_counter() - t0
    print(json.dumps({"elapsed_s": elapsed, "rows_out": count_lines(outp), "late_items": late[0],
                      "settings": {"workers": 1, "wait_for_system_duration_ms": wait_ms}}))


if __name__ == "__main__":
    main(sys.argv[1:])
