"""streamz: the sliding event-time window built from streamz's own primitives.

``python streamz_wc.py QUERY INPUT OUTPUT size=MS slide=MS [distance=N]``

streamz has no event-time windows: ``sliding_window`` counts elements, ``timed_window``
buffers by processing time, and ``streamz.dataframe``'s ``window`` is a trailing span
re-aggregated on every batch, not hopping instances. So the window is streamz's stateful
``accumulate`` (``returns_state=True``): its state is ``{l: Counter}`` of the open instances
[l, l+WS); a tuple at ts is added to every instance holding it, after the instances with
``l + WS <= ts`` (the input is timestamp-sorted, so ts is the watermark) are emitted. The
stream is ``Stream -> map(parse) -> map(keys) -> accumulate(window) -> flatten -> sink``,
fed synchronously by ``Stream.emit`` (no Tornado event loop); an end-of-input item closes
the rest.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import orjson
from peer_common import count_lines, pairs, parse_args
from streamz import Stream

_END = object()  # emitted after the last tuple: a watermark past every window



def window_step(size: int, slide: int):
    """The accumulate function: (state, (ts, keys) or _END) -> (state, rows to emit), rows
    being (window right boundary, key, count)."""

    def step(state: dict[int, Counter], item):
        out = []
        if item is _END:
            closing = sorted(state)
        else:
            ts = item[0]
            closing = sorted(l for l in state if l + size <= ts)
        for l in closing:
            out.extend((l + size, k, n) for k, n in state.pop(l).items())
        if item is not _END and item[1]:
            ts, keys = item
            # instances [l, l+WS) holding ts: l a multiple of WA from the first above ts - WS
            for l in range(((ts - size) // slide + 1) * slide, ts // slide * slide + 1, slide):
                c = state.get(l)
                if c is None:
                    c = state[l] = Counter()
                c.update(keys)
        return state, out

    return step


def build(query: str, size: int, slide: int, distance: int | None, write) -> Stream:
    source = Stream()
    tweets = source.map(lambda x: x if x is _END else orjson.loads(x))
    if query == "wordcount":
        keyed = tweets.map(lambda t: t if t is _END else (t["ts"], t["text"].split()))

        def row(r):
            return orjson.dumps({"ts": r[0], "word": r[1], "count": r[2]}) + b"\n"
    elif query == "paircount":
        keyed = tweets.map(lambda t: t if t is _END else (t["ts"], pairs(t["text"], distance)))

        def row(r):
            return orjson.dumps({"ts": r[0], "first": r[1][0], "second": r[1][1],
                                 "count": r[2]}) + b"\n"
    else:
        raise SystemExit(f"streamz_wc: unknown query {query!r}")
    windows = keyed.accumulate(window_step(size, slide), returns_state=True, start={})
    windows.flatten().map(row).sink(write)
    return source


def main(argv: list[str]) -> None:
    query, inp, outp, size, slide, distance, _ = parse_args(argv, "streamz_wc")
    t0 = time.perf_counter()
    with open(inp, "rb") as f, open(outp, "wb") as out:
        write = out.write
        source = build(query, size, slide, distance, write)
        emit = source.emit
        for line in f:
            if line.strip():
                emit(line)
        emit(_END)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"elapsed_s": elapsed, "rows_out": count_lines(outp), "settings": {}}))


if __name__ == "__main__":
    main(sys.argv[1:])
