"""Hand-written single-thread baselines ("1T"): the fastest plain-Python loops we can write for
wordcount and paircount without an engine, the bar of issue #16.

They are *pane loops* — the slicing of Scotty (general stream slicing, Traub et al., EDBT 2019)
written by hand: time is cut into panes of width gcd(WS, WA), so every window instance
``[l, l+WS)`` (``l`` a multiple of WA, docs/semantics.md) is a union of whole panes. A pane's
texts are buffered and counted by one C-level ``Counter`` call when the pane closes; a window is
the sum of its non-empty panes when the watermark (the next tuple's ``ts``) reaches its right
boundary. Every other step also stays out of per-token Python: input is parsed a few MiB at a
time by one ``orjson`` call, pane boundaries are found by bisection over the sorted
timestamps, and the rows of a window are serialized once per pane contents and stamped with
each window's ``ts`` by one ``bytes.replace``.

The output is the engine's JSON Lines sink byte for byte per row (``ts`` first, then the
query's fields, :func:`stretchflow.io.sinks.to_record` + ``orjson``); rows of one timestamp may
come in another order (the determinism contract compares per-timestamp multisets).

``python PATH/onethread.py QUERY INPUT OUTPUT [NAME=VALUE ...]`` (or ``python -m
stretchflow_bench.onethread ...``) runs one loop and prints ``{"elapsed_s", "tuples_in",
"rows_out"}`` as JSON, the elapsed time from opening the input to closing the output (what
``bench speed`` compares with the CLI summary's time). The module imports only the standard
library and orjson, so that run as a script (as ``bench speed`` runs it) it pays for nothing
of the engine's package.
"""

from __future__ import annotations

import json
import os
import sys
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from math import gcd
from operator import itemgetter
from typing import Any

import orjson

_TS, _TEXT = itemgetter("ts"), itemgetter("text")
_CHUNK_BYTES = 4 << 20  # input bytes parsed per orjson call: few calls, bounded memory


def _chunks(path: str | os.PathLike) -> Iterator[tuple[list[int], list[str]]]:
    """(timestamps, texts) of the tweets in ``path``, a few MiB of lines at a time. The lines
    are parsed as one JSON array (one C call); a chunk with a blank line, which the engine's
    source skips and the array form cannot hold, is parsed line by line instead."""
    loads = orjson.loads
    with open(path, "rb") as f:
        while lines := f.readlines(_CHUNK_BYTES):
            try:
                recs = loads(b"[" + b",".join(lines) + b"]")
            except orjson.JSONDecodeError:
                recs = [loads(line) for line in lines if line.strip()]
            yield list(map(_TS, recs)), list(map(_TEXT, recs))


def _merge(panes: list[dict[Any, int]]) -> dict[Any, int]:
    """The sum of per-pane counts (Jet's *combine*): a C-level copy of the first pane, then one
    dict update per key of the others."""
    acc = dict(panes[0])
    get = acc.get
    for other in panes[1:]:
        for k, v in other.items():
            acc[k] = get(k, 0) + v
    return acc


def pane_loop(path: str | os.PathLike, out_path: str | os.PathLike, size: int, slide: int,
              count: Callable[[list[str]], dict[Any, int]],
              body: Callable[[dict[Any, int]], bytes], first_field: str) -> tuple[int, int]:
    """The generic pane loop: ``count(texts)`` is one pane's counts, ``body(counts)`` their rows
    without ``ts`` as one JSON array of objects whose first field is ``first_field``. Returns
    (input tuples, output rows)."""
    if not 0 < slide <= size:
        raise ValueError(f"need 0 < slide <= size, got size={size}, slide={slide}")
    g = gcd(size, slide)
    # the only place an unescaped quote follows "{" in orjson's output is an object's first key,
    # so this marker splits the array into rows even if a token holds "},{"
    marker = b'},{"' + first_field.encode() + b'":'
    panes: dict[int, dict[Any, int]] = {}  # start -> counts of the non-empty panes still needed
    starts: list[int] = []                  # their starts, ascending
    bodies: dict[int, bytes] = {}           # start -> body of a pane that is a whole window
    open_ls: list[int] = []                 # lefts of windows holding a pane, not yet written
    n_in = n_out = 0

    def close(start: int, texts: list[str]) -> None:
        counts = count(texts)
        if not counts:  # only empty texts: no key, so no window instance (as in the engine)
            return
        panes[start] = counts
        starts.append(start)
        last = open_ls[-1] if open_ls else None
        for left in range(((start - size) // slide + 1) * slide, start // slide * slide + 1,
                          slide):
            if last is None or left > last:
                open_ls.append(left)

    def emit(watermark: int | None, out: Any) -> int:
        """Writes every window with right boundary <= watermark; drops the panes no later
        window needs; ``None`` is the end of input. Returns the rows written."""
        rows = 0
        k = 0
        while k < len(open_ls) and (watermark is None or open_ls[k] + size <= watermark):
            left = open_ls[k]
            right = left + size
            i, j = bisect_left(starts, left), bisect_left(starts, right)
            if j - i == 1:
                s = starts[i]
                b = bodies.get(s)
                if b is None:
                    b = bodies[s] = body(panes[s])
            else:
                b = body(_merge([panes[s] for s in starts[i:j]]))
            stamp = b'{"ts":%d,' % right
            out.write(stamp + b[2:-1].replace(marker, b"}\n" + stamp + marker[3:]) + b"\n")
            rows += b.count(marker) + 1
            k += 1
        del open_ls[:k]
        # a window still to write starts at open_ls[0] or later, one of a tuple at
        # ts >= watermark at the first multiple of WA above watermark - WS or later
        if watermark is None:
            drop = len(starts)
        else:
            keep = ((watermark - size) // slide + 1) * slide
            drop = bisect_left(starts, min(keep, open_ls[0]) if open_ls else keep)
        for s in starts[:drop]:
            del panes[s]
            bodies.pop(s, None)
        del starts[:drop]
        return rows

    cur: int | None = None  # start of the pane being buffered
    texts: list[str] = []
    with open(out_path, "wb") as out:
        for ts, tx in _chunks(path):
            n = len(ts)
            n_in += n
            i = 0
            while i < n:
                start = ts[i] // g * g
                j = bisect_left(ts, start + g, i)
                if start != cur:
                    if cur is not None:
                        close(cur, texts)
                        n_out += emit(ts[i], out)
                    cur, texts = start, []
                texts += tx[i:j]
                i = j
        if cur is not None:
            close(cur, texts)
        n_out += emit(None, out)
    return n_in, n_out


def _count_words(texts: list[str]) -> Counter:
    return Counter(" ".join(texts).split())


def _word_rows(counts: dict[str, int]) -> bytes:
    return orjson.dumps([{"word": w, "count": c} for w, c in counts.items()])


def wordcount_panes(path: str | os.PathLike, out_path: str | os.PathLike,
                    size: int = 120_000, slide: int = 60_000) -> tuple[int, int]:
    """wordcount (occurrences of each whitespace token per window, ``{ts, word, count}``):
    each pane counted by one ``Counter(" ".join(texts).split())``. Returns (tuples in, rows out)."""
    return pane_loop(path, out_path, size, slide, _count_words, _word_rows, "word")


def _pair_counter(distance: int | None) -> Callable[[list[str]], Counter]:
    def count(texts: list[str]) -> Counter:
        # a tweet's pairs (W[i], W[i+d]) for d = 1..distance come from zip over the token list
        # and its shifted copies, never crossing into the next tweet; one Counter per pane
        pairs: list[tuple[str, str]] = []
        extend = pairs.extend
        for text in texts:
            w = text.split()
            span = len(w) - 1 if distance is None else min(distance, len(w) - 1)
            for d in range(1, span + 1):
                extend(zip(w, w[d:], strict=False))  # the shifted copy is shorter
        return Counter(pairs)

    return count


def _pair_rows(counts: dict[tuple[str, str], int]) -> bytes:
    return orjson.dumps([{"first": a, "second": b, "count": c} for (a, b), c in counts.items()])


def paircount_panes(path: str | os.PathLike, out_path: str | os.PathLike,
                    size: int = 120_000, slide: int = 60_000,
                    distance: int | None = 3) -> tuple[int, int]:
    """paircount (token pairs at distance 1..``distance`` within a tweet per window,
    ``{ts, first, second, count}``). Returns (tuples in, rows out)."""
    if distance is not None and distance < 1:
        raise ValueError(f"paircount: distance must be >= 1 or unbounded, got {distance}")
    return pane_loop(path, out_path, size, slide, _pair_counter(distance), _pair_rows, "first")


#: what "1T" is in every benchmark's JSON
BASELINE = ("pane loop (stretchflow_bench.onethread): panes of gcd(WS, WA), one C-level "
            "Counter per pane, windows summed from their panes")

#: query name -> (the 1T loop, its parameter names)
LOOPS: dict[str, tuple[Callable[..., tuple[int, int]], tuple[str, ...]]] = {
    "wordcount": (wordcount_panes, ("size", "slide")),
    "paircount": (paircount_panes, ("size", "slide", "distance")),
}


def run_loop(query: str, path: str | os.PathLike, out_path: str | os.PathLike,
             **params: Any) -> dict[str, Any]:
    """Runs the 1T loop of ``query`` and times it from opening the input to closing the output."""
    if query not in LOOPS:
        raise ValueError(f"no hand-written loop for {query!r}; loops: {', '.join(LOOPS)}")
    fn, names = LOOPS[query]
    unknown = set(params) - set(names)
    if unknown:
        raise ValueError(f"{query}: unknown parameters {sorted(unknown)}; takes {names}")
    t0 = time.perf_counter()
    n_in, n_out = fn(path, out_path, **params)
    return {"elapsed_s": time.perf_counter() - t0, "tuples_in": n_in, "rows_out": n_out}


def _param(name: str, raw: str) -> Any:
    if name == "distance" and raw == "inf":
        return None
    return int(raw)


if __name__ == "__main__":
    query, inp, outp, *rest = sys.argv[1:]
    kw = {k: _param(k, v) for k, v in (a.split("=", 1) for a in rest)}
    print(json.dumps(run_loop(query, inp, outp, **kw)))
