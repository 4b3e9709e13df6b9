"""Hand-written single-thread loops of the userflows (``bench userflows``' baseline "loop"):
the fastest plain Python we can write for each query, no engine, no dataframe library.

``python PATH/userflow_loops.py FLOW OUTPUT INPUT [INPUT2]`` runs one (the join takes the
persons, then the auctions) and prints ``{"elapsed_s", "tuples_in", "rows_out"}`` as JSON, the
time from opening the input to closing the output. The module imports the standard library,
orjson and, for Parquet, pyarrow; run as a script it pays for nothing of stretchflow.

How they read. JSON Lines: a few MiB of lines parsed by one orjson call (as
:mod:`stretchflow_bench.onethread`), giving dicts. Parquet: ``iter_batches`` of only the
columns a query needs, each batch turned into Python lists by ``to_pydict`` — about ten times
faster than ``to_pylist`` (one dict per row: 0.09 s against 0.98 s for 1 M bids here), and a
loop over columns is what a user who cares writes. Queries then work on column lists (a
JSON Lines chunk's dicts are turned into the lists it needs by ``map(itemgetter)``), except
currency conversion, which writes every field of every bid and so keeps rows.

How they compute (windows as docs/semantics.md defines them: ``[l, l + WS)``, ``l`` a multiple
of WA, output at ``ts = l + WS``; every window holding a tuple is output, at the end of input
too): a tumbling window's tuples are a run of the sorted timestamps, found by bisection;
hot items' sliding counts are *panes* of width gcd(WS, WA), each counted by one C-level
``Counter``, and a window's counts are kept by adding the pane that enters and subtracting
the one that leaves (not re-summed from its panes). The output is JSON Lines written by
orjson; rows of one timestamp may come in another order than the engine's (the benchmark
compares per-timestamp multisets).

:func:`hot_items_calls` is not a baseline of the comparison but the other half of the
engine's own cost per tuple (issue #32): hot items computed tuple by tuple by calling the
lambda flow's own functions (:data:`stretchflow_bench.userflow_lambdas.HOT_ITEMS`) as the
engine's sliced path calls them — f_MK and f_U per tuple into a pane, combine per pane and
key for each window, f_O per window and key, then the second stage's functions per row.
:func:`hot_items_costly` is the baseline of the flow of that name, whose key function costs
about 5 us: a loop must call it once per bid too, so it is the calls loop with those functions
(its output also carries ``keys_us_per_call``, that function's cost measured in the run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import compress
from math import gcd
from operator import itemgetter
from typing import Any, BinaryIO

import orjson

_CHUNK_BYTES = 4 << 20  # JSON Lines bytes parsed per orjson call: few calls, bounded memory
_BATCH_ROWS = 65_536    # Parquet rows per batch
#: the flows' windows, as in userflow_lambdas.py / userflow_exprs.py (ms)
HOT_SIZE, HOT_SLIDE = 10_000, 2_000
TUMBLE = 10_000
#: currency conversion's rate and selection's modulus
EUR = 0.908
MODULUS = 123


# -- reading --------------------------------------------------------------------------------
def _jsonl_records(path: str | os.PathLike) -> Iterator[list[dict[str, Any]]]:
    """The records of a JSON Lines file, a few MiB of lines per orjson call (as one JSON
    array; a chunk with a blank line is parsed line by line instead)."""
    loads = orjson.loads
    with open(path, "rb") as f:
        while lines := f.readlines(_CHUNK_BYTES):
            try:
                yield loads(b"[" + b",".join(lines) + b"]")
            except orjson.JSONDecodeError:
                yield [loads(line) for line in lines if line.strip()]


def _is_parquet(path: str | os.PathLike) -> bool:
    return os.fspath(path).endswith(".parquet")


#: the bids' fields in the files' order (nexmark.py writes them so)
BID_FIELDS = ("ts", "auction", "bidder", "price", "category")


def rows(path: str | os.PathLike) -> Iterator[list[dict[str, Any]]]:
    """The input as lists of dicts. Parquet: the columns as lists (``to_pydict``) zipped
    into one dict per row, a dict display where the columns are the bids' (what a loop that
    knows its input writes), else ``dict(zip(...))``: the same dicts as ``to_pylist``, in
    1.0 s for 1 M bids here against its 1.2 s (3 alternating runs; ``to_pydict`` alone
    0.3 s)."""
    if not _is_parquet(path):
        yield from _jsonl_records(path)
        return
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS):
        cols = batch.to_pydict()
        if tuple(cols) == BID_FIELDS:
            yield [{"ts": t, "auction": a, "bidder": b, "price": p, "category": c}
                   for t, a, b, p, c in zip(*cols.values(), strict=True)]
        else:
            names = tuple(cols)
            yield [dict(zip(names, r, strict=True)) for r in zip(*cols.values(), strict=True)]


def columns(path: str | os.PathLike, names: tuple[str, ...]) -> Iterator[dict[str, list]]:
    """The input as ``{name: list}`` chunks of the columns ``names`` (Parquet: only those
    columns are read, ``to_pydict`` per batch)."""
    if not _is_parquet(path):
        for recs in _jsonl_records(path):
            yield {n: list(map(itemgetter(n), recs)) for n in names}
        return
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS, columns=list(names)):
        yield batch.to_pydict()


def _runs(ts: list[int], width: int) -> Iterator[tuple[int, int, int]]:
    """``(start, i, j)``: ``ts[i:j]`` are the timestamps in ``[start, start + width)``, for
    each such run of the sorted ``ts``, in order."""
    i, n = 0, len(ts)
    while i < n:
        start = ts[i] // width * width
        j = bisect_left(ts, start + width, i)
        yield start, i, j
        i = j


#: between two rows in orjson's array of them; a string's quotes are escaped, so this occurs
#: nowhere else when every row's first key is "ts" (ten times faster than one dumps per row)
_BETWEEN = b'},{"ts":'


def _write(out: BinaryIO, out_rows: list[dict[str, Any]]) -> int:
    """Writes ``out_rows`` (dicts whose first key is ``ts``) as JSON Lines."""
    if out_rows:
        out.write(orjson.dumps(out_rows)[1:-1].replace(_BETWEEN, b'}\n{"ts":') + b"\n")
    return len(out_rows)


# -- the flows ------------------------------------------------------------------------------
# each takes the input path(s) and the open output file and returns (tuples in, rows out)

def currency(path: str, out: BinaryIO) -> tuple[int, int]:
    """Every bid with ``price_eur = price * 0.908`` beside its fields."""
    n_in = n_out = 0
    for recs in rows(path):
        for r in recs:  # the input's records have "ts" first
            r["price_eur"] = r["price"] * EUR
        n_in += len(recs)
        n_out += _write(out, recs)
    return n_in, n_out


def selection(path: str, out: BinaryIO) -> tuple[int, int]:
    """The bids with ``auction % 123 == 0``: ``ts``, auction and price."""
    n_in = n_out = 0
    for c in columns(path, ("ts", "auction", "price")):
        n_in += len(c["ts"])
        n_out += _write(out, [{"ts": t, "auction": a, "price": p}
                              for t, a, p in zip(c["ts"], c["auction"], c["price"],
                                                 strict=True) if a % MODULUS == 0])
    return n_in, n_out


def _window_lefts(pane: int, size: int, slide: int) -> range:
    """The lefts of the windows holding the pane that starts at ``pane``."""
    return range(((pane - size) // slide + 1) * slide, pane // slide * slide + 1, slide)


def sliding_panes(panes: Iterator[tuple[int, Counter]], size: int, slide: int
                  ) -> Iterator[tuple[int, Counter]]:
    """``(right, counts)`` of each window holding a tuple, in order, from the non-empty
    panes ``(start, counts)`` in order (width gcd(size, slide)). The window's counts are
    kept by adding each entering pane and subtracting each leaving one; ``counts`` is
    live (read it before the next step) and keeps keys at zero."""
    window: Counter = Counter()
    held: list[tuple[int, Counter]] = []  # panes of the current window and after, in order
    left: int | None = None               # the current window's left
    total = 0                             # tuples in the current window

    def advance(until: int | None) -> Iterator[tuple[int, Counter]]:
        """Emits every window whose right is <= ``until`` (None: all) with a tuple."""
        nonlocal left, total
        while held and left is not None and (until is None or left + size <= until):
            # the panes of [left, left + size) are in `window`; emit, then slide
            if total:
                yield left + size, window
            nxt = left + slide
            k = 0
            while k < len(held) and held[k][0] < nxt:  # leaving panes
                s, c = held[k]
                if s < left + size:  # it was counted in
                    window.subtract(c)
                    total -= sum(c.values())
                k += 1
            del held[:k]
            if not held:
                left = None
                return
            if total == 0:  # jump over windows without a tuple
                nxt = max(nxt, _window_lefts(held[0][0], size, slide)[0])
            for s, c in held:  # entering panes
                if s >= nxt + size:
                    break
                if s >= left + size or s < nxt:  # not counted yet
                    window.update(c)
                    total += sum(c.values())
            left = nxt

    for start, c in panes:
        yield from advance(start)  # windows ending at or before this pane are complete
        held.append((start, c))
        if left is None:
            left = _window_lefts(start, size, slide)[0]
            window.clear()
            total = 0
        if start < left + size:
            window.update(c)
            total += sum(c.values())
    yield from advance(None)


def _auction_panes(path: str, width: int, counter: list[int]) -> Iterator[tuple[int, Counter]]:
    """Bids per auction per pane of ``width``, in order; ``counter[0]`` counts the bids."""
    cur: int | None = None
    acc: Counter = Counter()
    for c in columns(path, ("ts", "auction")):
        ts, auction = c["ts"], c["auction"]
        counter[0] += len(ts)
        for start, i, j in _runs(ts, width):
            if start != cur:
                if cur is not None:
                    yield cur, acc
                cur, acc = start, Counter()
            acc.update(auction[i:j])  # C-level counting of a list
    if cur is not None:
        yield cur, acc


def hot_items(path: str, out: BinaryIO) -> tuple[int, int]:
    """Bids per auction in windows of 10 s every 2 s; per window, the auction(s) with the
    most bids, at ``ts = window end + 2 s`` (the second, tumbling 2 s stage's end)."""
    n_in = [0]
    n_out = 0
    panes = _auction_panes(path, gcd(HOT_SIZE, HOT_SLIDE), n_in)
    for right, counts in sliding_panes(panes, HOT_SIZE, HOT_SLIDE):
        m = max(counts.values())
        ts = right + HOT_SLIDE
        n_out += _write(out, [{"ts": ts, "auction": a, "count": m}
                              for a in compress(counts, map(m.__eq__, counts.values()))])
    return n_in[0], n_out


_BID = ("ts", "auction", "bidder", "price", "category")


def highest_bid(path: str, out: BinaryIO) -> tuple[int, int]:
    """Per tumbling 10 s window, the bid(s) with the highest price, at the window's end."""
    n_in = n_out = 0
    cur: int | None = None
    best = -1
    top: list[dict[str, Any]] = []
    for c in columns(path, _BID):
        ts, price = c["ts"], c["price"]
        n_in += len(ts)
        for start, i, j in _runs(ts, TUMBLE):
            if start != cur:
                if cur is not None:
                    n_out += _write(out, top)
                cur, best, top = start, -1, []
            m = max(price[i:j])
            if m < best:
                continue
            if m > best:
                best, top = m, []
            k = price.index(m, i, j)
            while True:  # every row at the maximum: list.index, a C-level scan
                top.append({**{f: c[f][k] for f in _BID}, "ts": start + TUMBLE})
                try:
                    k = price.index(m, k + 1, j)
                except ValueError:
                    break
    if cur is not None:
        n_out += _write(out, top)
    return n_in, n_out


def mean_price(path: str, out: BinaryIO) -> tuple[int, int]:
    """The mean price per category per tumbling 10 s window, at the window's end."""
    n_in = n_out = 0
    cur: int | None = None
    sums: dict[int, int] = {}
    counts: dict[int, int] = {}

    def flush() -> int:
        right = cur + TUMBLE  # type: ignore[operator]
        return _write(out, [{"ts": right, "category": k, "mean": s / counts[k]}
                            for k, s in sums.items()])

    for c in columns(path, ("ts", "category", "price")):
        ts, cat, price = c["ts"], c["category"], c["price"]
        n_in += len(ts)
        for start, i, j in _runs(ts, TUMBLE):
            if start != cur:
                if cur is not None:
                    n_out += flush()
                cur, sums, counts = start, {}, {}
            for k, p in zip(cat[i:j], price[i:j], strict=True):
                if k in sums:
                    sums[k] += p
                    counts[k] += 1
                else:
                    sums[k] = p
                    counts[k] = 1
    if cur is not None:
        n_out += flush()
    return n_in, n_out


def _windows(path: str, names: tuple[str, ...], counter: list[int]
             ) -> Iterator[tuple[int, dict[str, list]]]:
    """``(start, columns)`` of each tumbling window holding a tuple, in order."""
    cur: int | None = None
    acc: dict[str, list] = {}
    for c in columns(path, names):
        ts = c["ts"]
        counter[0] += len(ts)
        for start, i, j in _runs(ts, TUMBLE):
            if start != cur:
                if cur is not None:
                    yield cur, acc
                cur, acc = start, {n: [] for n in names}
            for n in names:
                acc[n] += c[n][i:j]
    if cur is not None:
        yield cur, acc


def join(persons: str, auctions: str, out: BinaryIO) -> tuple[int, int]:
    """Per tumbling 10 s window, each auction with the person who sells it, when both are in
    the window: ``{ts, id, name, auction}``."""
    n_in = [0]
    n_out = 0
    pw = _windows(persons, ("ts", "id", "name"), n_in)
    aw = _windows(auctions, ("ts", "id", "seller"), n_in)
    p, a = next(pw, None), next(aw, None)
    while p is not None and a is not None:
        if p[0] < a[0]:
            p = next(pw, None)
        elif a[0] < p[0]:
            a = next(aw, None)
        else:
            right = p[0] + TUMBLE
            names: dict[int, list[str]] = {}
            for i, name in zip(p[1]["id"], p[1]["name"], strict=True):
                names.setdefault(i, []).append(name)
            n_out += _write(out, [{"ts": right, "id": s, "name": name, "auction": aid}
                                  for aid, s in zip(a[1]["id"], a[1]["seller"], strict=True)
                                  if s in names for name in names[s]])
            p, a = next(pw, None), next(aw, None)
    for _ in pw:  # read to the end, as the engine does
        pass
    for _ in aw:
        pass
    return n_in[0], n_out


def hot_items_calls(path: str, out: BinaryIO, fns: dict[str, Any] | None = None
                    ) -> tuple[int, int]:
    """Hot items by calling the lambda flow's own functions (module docstring): ``fns``,
    by default :data:`~stretchflow_bench.userflow_lambdas.HOT_ITEMS`."""
    fns = fns or _lambda_functions()
    keys, init, update = fns["keys"], fns["count"]["init"], fns["count"]["update"]
    combine, output = fns["count"]["combine"], fns["output"]
    top_keys, top_init, top_update = fns["top_keys"], fns["top_init"], fns["top_update"]
    top_output, flat = fns["top_output"], fns["rows"]
    size, slide = HOT_SIZE, HOT_SLIDE
    width = gcd(size, slide)
    panes: list[tuple[int, dict]] = []  # (start, {key: acc}) of the panes still needed
    n_in = n_out = 0
    next_left: int | None = None  # the left of the next window to emit

    def emit(until: int | None) -> int:
        """Windows ending at or before ``until`` (None: all), first stage then second."""
        nonlocal next_left
        written = 0
        while panes:
            left = _window_lefts(panes[0][0], size, slide)[0]
            if next_left is not None and left < next_left:
                left = next_left
            if until is not None and left + size > until:
                break
            accs: dict = {}
            for s, pane in panes:
                if s >= left + size:
                    break
                for k, a in pane.items():
                    accs[k] = combine(accs[k], a) if k in accs else a
            groups: dict = {}  # the second stage: one tumbling window per first-stage window
            for k, a in accs.items():
                row = output(k, a)
                g = top_keys(row)
                groups[g] = top_update(groups[g] if g in groups else top_init(), row)
            ts = left + size + slide
            for g, a in groups.items():
                written += _write(out, [{"ts": ts, **r} for r in flat(top_output(g, a))])
            next_left = left + slide
            while panes and panes[0][0] < next_left:
                del panes[0]
        return written

    for recs in rows(path):
        n_in += len(recs)
        cur_start = panes[-1][0] if panes else None
        pane = panes[-1][1] if panes else None
        for t in recs:
            start = t["ts"] // width * width
            if start != cur_start:
                n_out += emit(t["ts"])
                pane = {}
                panes.append((start, pane))
                cur_start = start
            k = keys(t)
            pane[k] = update(pane[k] if k in pane else init(), t)  # type: ignore[index]
    n_out += emit(None)
    return n_in, n_out


def hot_items_costly(path: str, out: BinaryIO) -> tuple[int, int]:
    """Hot items whose key function costs about 5 us: the strongest loop calls it once per
    bid as any program must, so it is :func:`hot_items_calls` with those functions."""
    return hot_items_calls(path, out, _lambda_functions("HOT_ITEMS_COSTLY"))


def _lambda_functions(name: str = "HOT_ITEMS") -> dict[str, Any]:
    """:data:`~stretchflow_bench.userflow_lambdas.HOT_ITEMS` (or another dict of it by
    ``name``), loaded from the flow file beside this one (importing it imports stretchflow:
    the cost is outside the timed run)."""
    import importlib.util

    mod = sys.modules.get("userflow_lambdas")
    if mod is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "userflow_lambdas.py")
        spec = importlib.util.spec_from_file_location("userflow_lambdas", path)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        sys.modules["userflow_lambdas"] = mod
    return getattr(mod, name)


def keys_us_per_call(calls: int = 20_000) -> float:
    """What hot_items_costly's key function costs here, in us per call (a warm loop over
    ``calls`` bids shaped as the input's; reported beside the loop's time)."""
    keys = _lambda_functions("HOT_ITEMS_COSTLY")["keys"]
    rows = [{"ts": i, "auction": i % 5000} for i in range(calls)]
    t0 = time.perf_counter()
    for t in rows:
        keys(t)
    return (time.perf_counter() - t0) / calls * 1e6


#: flow name -> its loop (the join takes two inputs)
LOOPS: dict[str, Callable[..., tuple[int, int]]] = {
    "currency": currency, "selection": selection, "hot_items": hot_items,
    "highest_bid": highest_bid, "mean_price": mean_price, "join": join,
    "hot_items_calls": hot_items_calls, "hot_items_costly": hot_items_costly,
}
#: loops that call the lambda flow's functions (loaded before the timed run)
_CALLING = ("hot_items_calls", "hot_items_costly")


def run(flow: str, output: str | os.PathLike, *inputs: str) -> dict[str, Any]:
    """Runs the loop of ``flow`` and times it from opening the input to closing the output."""
    if flow not in LOOPS:
        raise ValueError(f"no loop for {flow!r}; loops: {', '.join(LOOPS)}")
    extra: dict[str, Any] = {}
    if flow in _CALLING:
        _lambda_functions()  # loaded (and stretchflow imported) before the timed run
    if flow == "hot_items_costly":
        extra["keys_us_per_call"] = keys_us_per_call()
    if any(map(_is_parquet, inputs)):
        import pyarrow.parquet  # noqa: F401  (imported before the timed run, as an engine's)
    t0 = time.perf_counter()
    with open(output, "wb") as out:
        n_in, n_out = LOOPS[flow](*inputs, out)
    return {"elapsed_s": time.perf_counter() - t0, "tuples_in": n_in, "rows_out": n_out,
            **extra}


if __name__ == "__main__":
    flow_name, out_path, *in_paths = sys.argv[1:]
    print(json.dumps(run(flow_name, out_path, *in_paths)))
