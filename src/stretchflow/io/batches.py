"""Batch readers of the file sources (issue #16): JSON Lines, CSV and Parquet as columns.

``Source.batches()`` hands these out. They read a file chunk by chunk into Arrow tables (JSON
Lines with ``pyarrow.json.read_json``, which parses in several threads with the GIL released;
CSV and Parquet in pyarrow's own record batches), so a columnar operator downstream never
builds a Python object per tuple. Payloads as Python objects are built only when someone asks
(:attr:`Batch.payloads`), by the tuple path's own code, so they are identical to ``items()``.

Arrow is not the tuple path's parser: it accepts a few things orjson refuses (``NaN``, two
objects on one line, invalid UTF-8, a BOM, nesting deeper than orjson's limit), skips blank
lines, and refuses others the tuple path takes (mixed types, duplicate keys, ints beyond
int64). So a chunk becomes a columnar batch only when cheap vectorized checks show both
parsers agree and the timestamps are valid (an integer column, no nulls, non-decreasing within
the chunk and after the previous one). Any other chunk runs through the tuple path's
per-record code (``JsonLines._lines`` / ``_Arrow._rows`` and the order check), which raises
the very error ``items()`` raises at the same record, after yielding the records before it;
if that code accepts the chunk (Arrow was just stricter) it becomes a payloads-only batch.
Hence ``[it for b in src.batches() for it in b.items()] == list(src.items())`` for any file.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np
import orjson

from ..batch import Batch
from ..errors import SourceError

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_LBRACE = ord("{")
#: orjson refuses documents nested deeper than 1024 levels, Arrow does not; a table nested
#: deeper than this goes to the exact path (real data is far shallower, and the type walks
#: below then stay clear of Python's recursion limit)
_MAX_DEPTH = 64


# -- JSON Lines ---------------------------------------------------------------------------------
def jsonl_batches(src: Any, rows: int, max_bytes: int) -> Iterator[Batch]:
    """The batches of a sorted :class:`~stretchflow.io.sources.JsonLines` source: chunks of
    at most ``rows`` lines and about ``max_bytes`` bytes, never the whole file at once."""
    loads = orjson.loads
    prev: float = -math.inf
    first = 1  # line number of the chunk's first line
    with src._open() as f:
        for chunk, ends in _line_chunks(f, rows, max_bytes):
            n = len(ends)
            batch = _jsonl_fast(src, chunk, ends, prev, first, loads)
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


def _line_chunks(f: Any, rows: int, max_bytes: int) -> Iterator[tuple[bytes, np.ndarray]]:
    """``(chunk, ends)``: runs of whole lines of ``f``, at most ``rows`` lines and
    ``max_bytes`` bytes each (a longer line alone); ``ends`` holds the offset of each line's
    last byte (its newline, or the last byte of a final line that has none)."""
    pending = b""
    while True:
        block = f.read(max_bytes)
        buf = pending + block if pending else block
        if not buf:
            return
        nl = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
        if not block and buf[-1:] != b"\n":
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
            elif not block:
                end_i = len(nl) - 1  # end of file: the rest
            else:
                break  # read more before cutting
            end = int(nl[end_i]) + 1
            yield buf[start:end], nl[i:end_i + 1] - start
            start, i = end, end_i + 1
        if not block:
            return
        pending = buf[start:]


def _jsonl_fast(src: Any, chunk: bytes, ends: np.ndarray, prev: float, first: int,
                loads: Any) -> Batch | None:
    """The chunk as a columnar batch, or None when Arrow and the tuple path might disagree
    on it or a timestamp check fails (then the caller takes the exact path)."""
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
        if fixed is not None:  # Arrow made dates of strings; the payloads hold the strings
            table = pj.read_json(pa.BufferReader(chunk), read_options=_read_options(len(chunk)),
                                 parse_options=pj.ParseOptions(explicit_schema=fixed))
    except (pa.ArrowException, ValueError, OverflowError):
        return None
    ts = _ts_column(table, src.ts_field, prev)
    if ts is None:
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


def _read_options(size: int) -> Any:
    """Blocks of at least 1 MiB (smaller ones cost more than they parallelize), about two
    per core so both threads of a 2-core box stay busy."""
    import pyarrow.json as pj

    per = -(-size // (2 * (os.cpu_count() or 1)))
    return pj.ReadOptions(use_threads=True, block_size=max(1 << 20, per))


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
    for row, rb in src._record_batches():
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
