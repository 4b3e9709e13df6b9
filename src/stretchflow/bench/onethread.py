"""Hand-written single-thread baselines ("1T"): the plain Python loop a user would write
without an engine, run on the same input in the same invocation as the engine."""

from __future__ import annotations

import os
from collections import deque

import orjson


def wordcount_1t(path: str | os.PathLike, out_path: str | os.PathLike,
                 size: int = 120_000, slide: int = 60_000) -> tuple[int, int]:
    """Sliding-window word occurrences over a JSON Lines file of tweets, written as JSON Lines
    like the engine's sink. Returns (input tuples, output rows)."""
    loads, dumps = orjson.loads, orjson.dumps
    windows: dict[int, dict[str, int]] = {}
    open_ls: deque[int] = deque()  # left boundaries in creation order (ts is sorted)
    n_in = n_out = 0
    with open(path, "rb") as f, open(out_path, "wb") as out:
        buf: list[bytes] = []
        for line in f:
            rec = loads(line)
            ts = rec["ts"]
            n_in += 1
            while open_ls and open_ls[0] + size <= ts:
                left = open_ls.popleft()
                right = left + size
                for word, count in windows.pop(left).items():
                    buf.append(dumps({"ts": right, "word": word, "count": count}))
            words = rec["text"].split()
            if not words:
                continue
            first = ((ts - size) // slide + 1) * slide
            for left in range(first, ts // slide * slide + 1, slide):
                d = windows.get(left)
                if d is None:
                    d = windows[left] = {}
                    open_ls.append(left)
                for w in words:
                    d[w] = d.get(w, 0) + 1
            if len(buf) > 8192:
                out.write(b"\n".join(buf) + b"\n")
                n_out += len(buf)
                buf = []
        for left in open_ls:
            for word, count in windows.pop(left).items():
                buf.append(dumps({"ts": left + size, "word": word, "count": count}))
        if buf:
            out.write(b"\n".join(buf) + b"\n")
            n_out += len(buf)
    return n_in, n_out
