"""Batch readers of the file sources (issue #16): JSON Lines, CSV and Parquet as columns.

``Source.batches()`` hands these out. They read a file chunk by chunk into Arrow tables (JSON
Lines with ``pyarrow.json.read_json``, which parses in several threads with the GIL released;
CSV and Parquet in pyarrow's own record batches), so a columnar operator downstream never
builds a Python object per tuple. Payloads as Python objects are built only when someone asks
(:attr:`Batch.payloads`), by the tuple path's own code, so they are identical to ``items()``.

Arrow is not the tuple path's parser: it accepts a few things orjson refuses (``NaN``, two
objects on one line, invalid UTF-8, a BOM, nesting deeper than orjson's limit), skips blank
lines, and refuses others the tuple path takes (mixed types, duplicate keys, ints beyond
int64), and its one schema per chunk misstates lines (a key missing from a line reads null,
keys come in the order of their first appearance, an int among floats reads 1.0). So a chunk
becomes a columnar batch only when cheap vectorized checks show both parsers agree
(:mod:`.json_layout`: every line holds the table's keys in its order, floats were written as
floats) and the timestamps are valid (an integer column, no nulls, non-decreasing within the
chunk and after the previous one). Any other chunk runs through the tuple path's
per-record code (``JsonLines._lines`` / ``_Arrow._rows`` and the order check), which raises
the very error ``items()`` raises at the same record, after yielding the records before it;
if that code accepts the chunk (Arrow was just stricter) it becomes a payloads-only batch.
Hence ``[it for b in src.batches() for it in b.items()] == list(src.items())`` for any file.
"""

from __future__ import annotations

import functools
import io
import math
import os
from collections.abc import Generator, Iterator
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from ..batch import WIDE, Batch
from ..errors import SourceError
from .json_layout import lines_agree

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_LBRACE = ord("{")
#: orjson refuses documents nested deeper than 1024 levels, Arrow does not; a table nested
#: deeper than this goes to the exact path (real data is far shallower, and the type walks
#: below then stay clear of Python's recursion limit)
_MAX_DEPTH = 64


# -- JSON Lines ---------------------------------------------------------------------------------
#: the most bytes of lines a batch holds, whatever larger bound the source asks for (unless
#: one line is longer). A columnar run's working set grows with the batch: the chunk, its
#: table, the tokens and their grouping arrays are alive at once (about 1.5 KB of peak RSS per
#: tweet of a wordcount batch here). Peak RSS of 1 000 000 tweets of wordcount on the reference
#: engine by this bound (otherwise 16 384-tweet batches, 1.5 MB): 124 MB without it, 113 at
#: 1 MiB, 106 at 768 KiB, 100 at 512 KiB, 92 at 256 KiB. Smaller batches cost CPU (fixed costs
#: per batch): the 200 000-tweet run's whole-process CPU time against the reader before this
#: bound and the chunker's adaptive reads was 1.03x at 1 MiB (wall 1.00x; both within the noise
#: of 12 alternating pairs), 1.05x at 768 KiB
#: (docs/columnar.md, "Memory")
CHUNK_BYTES = 1 << 20
#: the bound instead of CHUNK_BYTES for a batch asked for at least :data:`WIDE_ROWS` rows: a
#: flow of column expressions (``executors/plan.columnar_batch``), whose stages keep at most
#: one row per tuple, so a line's working set is a few columns, not wordcount's tokens. Mean
#: price per category as expressions, 10 M bids, reference engine, wall time (5 alternating
#: pairs each): 8 MiB batches against 1 MiB 0.82x, 4 MiB against 8 MiB 0.95x; peak RSS 130 MB
#: at 1 MiB, 187 at 4, 200 at 8
WIDE_CHUNK_BYTES = 1 << 22
#: rows from which a batch is wide (the wide batch of :data:`~stretchflow.batch.WIDE`)
WIDE_ROWS = WIDE


def chunk_bytes(rows: int) -> int:
    """The most bytes of lines a batch of at most ``rows`` lines holds (unless one line is
    longer): :data:`CHUNK_BYTES`, or :data:`WIDE_CHUNK_BYTES` for a wide batch."""
    return WIDE_CHUNK_BYTES if rows >= WIDE_ROWS else CHUNK_BYTES


def jsonl_batches(src: Any, rows: int, max_bytes: int) -> Iterator[Batch]:
    """The batches of a sorted :class:`~stretchflow.io.sources.JsonLines` source: chunks of
    at most ``rows`` lines and about ``min(max_bytes, chunk_bytes(rows))`` bytes, never the whole
    file at once. A thread reads the next chunks and has them parsed on
    :mod:`.parse_ahead`'s pool (pyarrow's parser releases the GIL: one chunk per core at
    once) while this one is checked and handed out; they come out in the file's order."""
    from ..executors.reference_overlap import read_ahead

    loads = orjson.loads
    max_bytes = min(max_bytes, chunk_bytes(rows))
    prev: float = -math.inf
    first = 1  # line number of the chunk's first line
    for chunk, ends, table in read_ahead(_parsed(src, rows, max_bytes), "stretchflow-parse"):
        n = len(ends)
        batch = None if table is None else _jsonl_batch(src, chunk, ends, table, prev, first,
                                                        loads)
        if batch is not None:
            prev = int(batch.ts[-1])
            yield batch
        else:
            # io.BytesIO splits exactly as iterating the file does (at b"\n", kept), so
            # orjson's error positions and the quoted line are the tuple path's
            raw = src._lines(io.BytesIO(chunk), first)
            prev = yield from _exact(src, raw, prev)
        first += n
        src.read = first - 1


def jsonl_row_batches(src: Any, rows: int, max_bytes: int) -> Iterator[Batch]:
    """The batches of a sorted JSON Lines source for readers that take rows only (issue #32:
    a flow of Python functions): the chunks of :func:`jsonl_batches`, each parsed by one
    ``orjson.loads`` call into the values the tuple path's per-line calls give (:func:`_row_batch`
    says why they are the same), the timestamps checked in bulk (:func:`_row_batch`)
    and no Arrow table built. A chunk the bulk checks do not pass runs through the tuple
    path's per-record code (:func:`_exact`), as in :func:`jsonl_batches`."""
    loads = orjson.loads
    max_bytes = min(max_bytes, CHUNK_BYTES)
    prev: float = -math.inf
    first = 1  # line number of the chunk's first line
    with src._open() as f:
        for chunk, ends in _line_chunks(f, rows, max_bytes):
            n = len(ends)
            prev = yield from chunk_rows(src, chunk, n, first, prev, loads)
            first += n
            src.read = first - 1


def chunk_rows(src: Any, chunk: bytes, n: int, first: int, prev: float, loads: Any
               ) -> Generator[Batch, None, float]:
    """One chunk of :func:`jsonl_row_batches` (``n`` lines, the first numbered ``first``,
    timestamps from ``prev`` on) as a batch of rows: :func:`_row_batch`, else the tuple
    path's per-record code (:func:`_exact`, which raises its error after the rows before
    it). Returns the last timestamp. (The SN engine's channels parse chunks with it too.)"""
    batch = _row_batch(chunk, n, src.ts_field, prev, loads)
    if batch is not None:
        yield batch
        return int(batch.ts[-1])
    return (yield from _exact(src, src._lines(io.BytesIO(chunk), first), prev))


def _row_batch(chunk: bytes, n: int, ts_f: str, prev: float, loads: Any) -> Batch | None:
    """The chunk's ``n`` lines as a payloads-only batch when each is one JSON object holding
    an int64 integer timestamp ``ts_f`` and the timestamps do not go back (from ``prev`` on);
    None otherwise (a blank line, a parse error, a timestamp of another type, which the tuple
    path may still take or must name)."""
    try:
        # One parse of the chunk as a JSON array, its line breaks made commas (the last
        # newline, if any, stays: whitespace to orjson): a fifth cheaper than a call per line.
        # It gives exactly the per-line parses when it gives one value per line: a line
        # holding no value (blank) or two (`1, 2`) fails, or changes the count, and no JSON
        # value spans a line break (a string cannot hold one), so each value is its line's.
        recs = loads(b"[" + chunk.replace(b"\n", b",", n - 1) + b"]")
        if len(recs) != n:
            return None
        tss = list(map(itemgetter(ts_f), recs))
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
        return None
    if set(map(type, tss)) != {int}:  # not a bool, a float, an ISO string
        return None
    try:
        ts = np.array(tss, dtype=np.int64)
    except OverflowError:
        return None
    if ts[0] < prev or (n > 1 and not (ts[1:] >= ts[:-1]).all()):
        return None
    return Batch(ts, payloads=recs, ts_list=tss)


def _parsed(src: Any, rows: int, max_bytes: int) -> Iterator[tuple[bytes, np.ndarray, Any]]:
    """``(chunk, ends, table)`` for each chunk of the file, in order, ``table`` Arrow's parse
    of it or None when Arrow and the tuple path might disagree on it (the file is opened, and
    closed, by the thread that runs this; the parses run on :mod:`.parse_ahead`'s threads)."""
    from .parse_ahead import ordered_map

    with src._open() as f:
        # several chunks parsed at once (Arrow parses a one-block chunk on one thread)
        yield from ordered_map(_with_table, _line_chunks(f, rows, max_bytes))


def _with_table(chunk_ends: tuple[bytes, np.ndarray]) -> tuple[bytes, np.ndarray, Any]:
    chunk, ends = chunk_ends
    return chunk, ends, _arrow_table(chunk, ends)


#: the smallest read of the chunker (bytes): below this the syscalls and rescans cost more
#: than the memory saved
_MIN_READ = 64 << 10


def _line_chunks(f: Any, rows: int, max_bytes: int, min_read: int = _MIN_READ
                 ) -> Iterator[tuple[bytes, np.ndarray]]:
    """``(chunk, ends)``: runs of whole lines of ``f``, at most ``rows`` lines and
    ``max_bytes`` bytes each (a longer line alone); ``ends`` holds the offset of each line's
    last byte (its newline, or the last byte of a final line that has none).

    Reads only about one chunk ahead: each read asks for what the next chunk should still
    need, from the bytes per line seen so far (and doubles the buffer while a line goes on,
    so a very long line costs linear time). Reading ``max_bytes`` at a time instead held the
    block, the buffer it was joined into and their newline mask at once: 8 MiB reads for
    chunks of 16 384 tweets (1.5 MB) cost the chunker alone 48 MB of peak RSS over 1 000 000
    tweets, 8 MB now. What is read and not yet handed out stays under ``2 * (max_bytes +
    min_read)`` bytes when no line is longer than ``max_bytes`` (tests/test_columnar_memory.py).
    Where the chunks are cut does not depend on the read sizes."""
    min_read = max(1, min(min_read, max_bytes))  # small chunks: read no more than one ahead
    pending = b""
    seen_bytes = seen_lines = 0  # of the chunks cut so far: the estimate of a line's size
    stalls = 0  # reads in a row after which no chunk could be cut
    while True:
        if seen_lines:
            per_line = seen_bytes / seen_lines
        else:  # nothing cut yet: guess from the newlines of what is pending
            per_line = len(pending) / max(1, pending.count(b"\n")) if pending else 0
        # a little over the estimate, so that a chunk of `rows` lines (or one over
        # max_bytes, which is what lets it be cut at the byte bound) is usually in one read
        target = int(min(rows * per_line, max_bytes) * 1.0625) + min_read
        size = max(min_read, target - len(pending), len(pending) if stalls > 1 else 0)
        block = f.read(size)
        eof = not block
        buf = pending + block if pending else block
        del block  # the buffer holds its bytes; not both alive while the chunks are used
        if not buf:
            return
        nl = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
        if eof and buf[-1:] != b"\n":
            nl = np.append(nl, len(buf) - 1)  # the last line, without its newline
        start = i = 0  # i: index in nl of the end of the first line after start
        while i < len(nl):
            j = i + rows - 1  # the end of `rows` lines
            k = int(np.searchsorted(nl, start + max_bytes - 1, side="right")) - 1
            over = len(buf) - start > max_bytes  # what is left is more than one chunk
            if j < len(nl) and j <= k:
                end_i = j
            elif over:
                end_i = max(k, i)  # the lines that fit, or one longer line alone
            elif eof:
                end_i = len(nl) - 1  # end of file: the rest
            else:
                break  # read more before cutting
            end = int(nl[end_i]) + 1
            seen_bytes += end - start
            seen_lines += end_i + 1 - i
            yield buf[start:end], nl[i:end_i + 1] - start
            start, i = end, end_i + 1
        if eof:
            return
        stalls = stalls + 1 if start == 0 else 0
        pending = buf[start:]
        del buf, nl


def _arrow_table(chunk: bytes, ends: np.ndarray) -> Any:
    """Arrow's table of the chunk's lines, or None when a check made before or on the parse
    shows that Arrow and the tuple path might disagree on them."""
    import pyarrow as pa
    import pyarrow.json as pj

    n = len(ends)
    # every line starts with "{": no blank line (Arrow skips those, the batch must not hold
    # them), no BOM, no top-level non-object (a leading `null` line crashes pyarrow 26)
    if chunk[:1] != b"{" or (n > 1 and not (np.frombuffer(chunk, np.uint8)[ends[:-1] + 1]
                                            == _LBRACE).all()):
        return None
    if not chunk.isascii():  # pyarrow does not validate UTF-8; orjson does (surrogates too)
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        table = pj.read_json(pa.BufferReader(chunk), read_options=_read_options(len(chunk)))
        if table.num_rows != n:  # e.g. two objects on one line: orjson refuses it
            return None
        too_deep, has_float = _walk(table.schema)
        if too_deep:
            return None
        # literals RapidJSON takes and orjson refuses (NaN, Inf, Infinity) make float fields,
        # so only a table with one needs the byte scan (a string holding these letters only
        # costs the fast path)
        if has_float and (b"NaN" in chunk or b"Inf" in chunk):
            return None
        fixed = _no_temporal(table.schema)
        try:
            # pyarrow 26 builds an invalid list column (its offsets span more values than
            # it holds) when a list's element type is inferred after a leading null, e.g.
            # [null, 10]: read as [10, <garbage>]. Read again with the types it inferred
            # given, which parses such lists right; the check then holds the new table.
            table.validate()
        except pa.ArrowInvalid:
            fixed = fixed or table.schema
        if fixed is not None:  # Arrow made dates of strings; the payloads hold the strings
            table = pj.read_json(pa.BufferReader(chunk), read_options=_read_options(len(chunk)),
                                 parse_options=pj.ParseOptions(explicit_schema=fixed))
            table.validate()
    except (pa.ArrowException, ValueError, OverflowError):
        return None
    return table


def _jsonl_batch(src: Any, chunk: bytes, ends: np.ndarray, table: Any, prev: float,
                 first: int, loads: Any) -> Batch | None:
    """The chunk as a columnar batch of Arrow's ``table`` of it, or None when the table
    misstates a line or a timestamp check fails (then the caller takes the exact path)."""
    n = len(ends)
    ts = _ts_column(table, src.ts_field, prev)
    # Arrow's table must say what each line says: the same keys in the same order, ints
    # where the line has ints (json_layout: a missing key, another key order or an int among
    # floats would reach a columnar operator's output as null / reordered / 1.0)
    if ts is None or not lines_agree(chunk, np.frombuffer(chunk, np.uint8), ends, table):
        return None

    def payloads() -> list[Any]:
        # the lines have no newline but the last, which orjson ignores like any whitespace
        try:
            return [loads(line) for line in chunk.split(b"\n", n - 1)]
        except orjson.JSONDecodeError:
            # the checks should make this impossible; should orjson still refuse a line, the
            # tuple path's own code raises its error (same line, same message), only later
            return [rec for _, rec, _ in src._lines(io.BytesIO(chunk), first)]

    return Batch(ts, table=table, make_payloads=payloads)


@functools.lru_cache(maxsize=64)
def _read_options(size: int) -> Any:
    """Blocks of at least 1 MiB (smaller ones cost more than they parallelize), about two
    per core so both threads of a 2-core box stay busy. A chunk of one block is parsed on the
    calling thread: handing it to Arrow's pool parallelizes nothing, and the pool's threads'
    own malloc arenas kept 6 MB more peak RSS over 1 000 000 tweets of wordcount (113 against
    106 MB; whole-process time of 200 000 tweets unchanged, ratio 1.02 in 12 pairs)."""
    import pyarrow.json as pj

    per = -(-size // (2 * (os.cpu_count() or 1)))
    block = max(1 << 20, per)
    return pj.ReadOptions(use_threads=size > block, block_size=block)


# the schema functions below are cached: most chunks of a file have its first chunk's schema
@functools.lru_cache(maxsize=64)
def _no_temporal(schema: Any) -> Any:
    """``schema`` with every date/time type made a string, or None when it has none."""
    import pyarrow as pa

    def fix(t: Any) -> Any:
        if pa.types.is_temporal(t):
            return pa.string()
        if pa.types.is_struct(t):
            return pa.struct([t.field(i).with_type(fix(t.field(i).type))
                              for i in range(t.num_fields)])
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(fix(t.value_type)))
        if pa.types.is_large_list(t):
            return pa.large_list(t.value_field.with_type(fix(t.value_type)))
        return t

    fixed = pa.schema([f.with_type(fix(f.type)) for f in schema])
    return None if fixed.equals(schema) else fixed


@functools.lru_cache(maxsize=64)
def _walk(schema: Any) -> tuple[bool, bool]:
    """Whether a type of ``schema`` nests deeper than :data:`_MAX_DEPTH`, and whether it
    holds a floating-point type (walked without recursion: a type may be a thousand levels
    deep)."""
    import pyarrow as pa

    has_float = False
    todo = [(f.type, 2) for f in schema]  # the record is level 1, its fields level 2
    while todo:
        t, level = todo.pop()
        if level > _MAX_DEPTH:
            return True, has_float
        if pa.types.is_struct(t):
            todo.extend((t.field(i).type, level + 1) for i in range(t.num_fields))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            todo.append((t.value_type, level + 1))
        elif pa.types.is_floating(t):
            has_float = True
    return False, has_float


# -- CSV and Parquet ----------------------------------------------------------------------------
def arrow_batches(src: Any, rows: int) -> Iterator[Batch]:
    """The batches of a sorted CSV or Parquet source: its own record batches (the very ones
    the tuple path reads, so read errors fall at the same row), cut to ``rows`` rows."""
    import pyarrow as pa

    prev: float = -math.inf
    for row, rb in src._record_batches(rows):
        for off in range(0, rb.num_rows, rows):
            piece = rb.slice(off, rows)
            table = pa.Table.from_batches([piece])
            ts = _ts_column(table, src.ts_field, prev)
            if ts is not None:
                prev = int(ts[-1])
                yield Batch(ts, table=table,
                            make_payloads=lambda p=piece, r=row + off: src._pylist(p, r))
            else:
                prev = yield from _exact(src, src._rows(piece, row + off), prev)
        src.read = row + rb.num_rows


# -- shared -------------------------------------------------------------------------------------
def _ts_column(table: Any, ts_f: str, prev: float) -> np.ndarray | None:
    """The timestamp column as int64 numbers when it passes the tuple path's checks, in
    bulk: it exists, is of an integer type, has no nulls, fits int64 and does not go back
    (from ``prev`` on). None otherwise, or for an empty table."""
    import pyarrow as pa

    if table.num_rows == 0 or table.schema.get_field_index(ts_f) < 0:
        return None
    col = table.column(ts_f)
    if not pa.types.is_integer(col.type) or col.null_count:
        return None
    if col.type != pa.int64():
        try:
            col = col.cast(pa.int64())  # a safe cast: a uint64 beyond int64 raises
        except (pa.ArrowException, ValueError, OverflowError):
            return None
    # read off the data buffers: pyarrow's to_numpy imports pandas (a second, once) and an
    # int64 array without nulls is its buffer anyway (a read-only view, no copy)
    chunks = [np.frombuffer(c.buffers()[1], np.int64, len(c), c.offset * 8)
              for c in col.chunks if len(c)]
    ts = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    if ts[0] < prev or (len(ts) > 1 and not (ts[1:] >= ts[:-1]).all()):
        return None
    return ts


def _exact(src: Any, raw: Iterator[tuple[Any, Any, Any]], prev: float
           ) -> Generator[Batch, None, float]:
    """The tuple path over one chunk: ``raw`` (per-record triples) checked for order from
    ``prev`` on. Yields the chunk's tuples as a payloads-only batch; on the tuple path's
    error, yields the tuples before it first, then raises it, so the error falls at the same
    tuple as in ``items()``. Returns the last timestamp."""
    where: list[Any] = [None]

    def tap() -> Iterator[tuple[Any, Any, Any]]:
        for t in raw:
            where[0] = t[2]
            yield t

    ts: list[int] = []
    recs: list[Any] = []
    try:
        for t, p in src._checked(tap(), prev):
            if not _I64_MIN <= t <= _I64_MAX:
                # the tuple path takes any Python int; a batch holds int64 timestamps
                raise src._error(where[0], f"timestamp {t} is outside the 64-bit range of "
                                 f"batch timestamps (read this source tuple by tuple)", p)
            ts.append(t)
            recs.append(p)
    except SourceError:
        if ts:
            yield Batch(ts, payloads=recs)
        raise
    if ts:
        yield Batch(ts, payloads=recs)
        return ts[-1]
    return prev
