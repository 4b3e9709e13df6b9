"""JSON Lines of a whole Arrow table at once, byte for byte what the tuple path writes.

The tuple path writes ``orjson.dumps(to_record(ts, payload)) + b"\\n"`` per output tuple. For a
batch whose payloads are a table (``payload = table.to_pylist()[r]``) the same bytes come out of
Arrow compute: every column is turned into its JSON text once (integers and booleans by a cast,
strings by escaping their bytes, floats by orjson itself over the whole column), and one
``binary_join_element_wise`` glues ``{"ts":``, the keys and the values into lines. No Python
runs per row.

Only column types whose JSON text comes out exactly as orjson writes each value are taken:
integers of any width, strings and large strings, booleans, all-null columns and floats.
Floats are not Arrow's to print (orjson writes the shortest round-trip form, ``1.0`` for an
integral value and ``null`` for NaN and the infinities; Arrow's cast does not always): one
``orjson.dumps`` of the column as a numpy float64 array writes every value with the code
that writes a Python float, and the text is split at its commas (tests/test_sink_batches.py
checks the bytes against per-value dumps over random doubles). Anything else (lists,
structs, binary, temporal types, dictionaries...) makes :func:`jsonl_bytes` return None and
the caller writes the batch through orjson. A fast path that is not byte-identical would be a
bug, so the types are an allow-list.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import arrow_ints, arrow_strings, float_numpy

# orjson's escapes inside a JSON string: the two-character forms for \b \t \n \f \r, every other
# control character as \u00XX with lowercase hex (orjson 3.x: b'"\\u000b"' for "\x0b").
_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPES = {c: _SHORT.get(c, f"\\u{c:04x}") for c in range(0x20)}

_OUT = pa.large_string()  # 64-bit offsets: a batch's text may pass 2 GiB where its columns do not


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def supported(t: pa.DataType) -> bool:
    """Whether a column of this type goes through the vectorized path."""
    return (_is_int(t) or _is_str(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or pa.types.is_floating(t))


def _float_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A float column's values as orjson writes them, ``null`` for nulls, NaN and infinities.

    ``to_pylist`` gives a float16 or float32 value as the Python float of the same value, so
    the column is widened to float64 first (exact) and written as doubles. orjson writes a
    numpy float64 array (``OPT_SERIALIZE_NUMPY``) with the same formatter as a Python float
    and NaN as ``null``, as it writes None, so a null slot is made NaN. A float's text holds
    no comma: the commas of ``[v0,v1,...]`` are exactly the separators."""
    out = []
    for c in col.chunks:
        n = len(c)
        if n == 0:
            continue
        vals, valid = float_numpy(c)
        if valid is not None:
            vals = np.where(valid, vals, np.nan)
        body = np.frombuffer(orjson.dumps(vals, option=orjson.OPT_SERIALIZE_NUMPY),
                             np.uint8)[1:-1]
        commas = np.flatnonzero(body == 44)
        if len(commas) != n - 1:  # guard the invariant: one value between two commas
            raise AssertionError(f"orjson wrote {len(commas) + 1} floats for {n}")
        data = body[body != 44]
        offsets = np.empty(n + 1, np.int64)
        offsets[0], offsets[n] = 0, len(data)
        offsets[1:n] = commas - np.arange(n - 1)  # the bytes before comma i, less i commas
        out.append(pa.Array.from_buffers(_OUT, n, [None, pa.py_buffer(offsets),
                                                   pa.py_buffer(data)]))
    return pa.chunked_array(out, _OUT)


def _value_bytes(chunk: pa.Array) -> np.ndarray:
    """The UTF-8 bytes of a string chunk's values (its slice only), as a uint8 view."""
    _, offsets_buf, data_buf = chunk.buffers()
    n = len(chunk)
    if data_buf is None or n == 0:
        return np.empty(0, dtype=np.uint8)
    odt = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=odt)[chunk.offset: chunk.offset + n + 1]
    return np.frombuffer(data_buf, dtype=np.uint8)[int(offsets[0]): int(offsets[-1])]


def _present_specials(col: pa.ChunkedArray) -> list[int]:
    """The bytes that need escaping which occur in the column, in the order they must be
    replaced: backslash first (the other escapes put backslashes in), then quote, then control
    characters. UTF-8 multi-byte sequences use only bytes >= 0x80, so counting bytes is exact."""
    counts = np.zeros(256, dtype=np.int64)
    for chunk in col.chunks:
        b = _value_bytes(chunk)
        if len(b):
            counts += np.bincount(b, minlength=256)
    order = [0x5C, 0x22, *range(0x20)]
    return [c for c in order if counts[c]]


def _escaped(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string column's values escaped as orjson escapes them inside a JSON string."""
    col = col.cast(_OUT)
    for c in _present_specials(col):
        # one pass per special byte actually present: none at all for ordinary text
        col = pc.replace_substring(col, chr(c), "\\" + chr(c) if c in (0x5C, 0x22)
                                   else _ESCAPES[c])
    return col


def _json_values(col: pa.ChunkedArray) -> tuple[pa.ChunkedArray, bool]:
    """A column's values as JSON text (``null`` for nulls), and whether the text still needs
    its quotes: a string column without nulls leaves them to the caller, who folds them into
    the constant parts around it (one join fewer over the whole batch)."""
    t = col.type
    if _is_str(t):
        text = _escaped(col)
        if not col.null_count:
            return text, True
        quote = _scalar("\"")
        text = pc.binary_join_element_wise(quote, text, quote, _scalar(""))
    elif pa.types.is_floating(t):
        return _float_text(col), False
    else:
        # Arrow prints integers in plain decimal and booleans as true/false, as orjson does
        # (and a null-type column is all nulls)
        text = col.cast(_OUT)
    return (pc.fill_null(text, _scalar("null")) if text.null_count else text), False


def jsonl_lines(ts: np.ndarray, table: pa.Table | pa.RecordBatch) -> pa.ChunkedArray | None:
    """The JSON Lines text of tuples ``(ts[r], table.to_pylist()[r])`` as one string per row
    (each ending in a newline), or None when a column cannot be written byte-identically."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if table.num_rows != len(ts):
        raise ValueError(f"batch has {len(ts)} timestamps but its table {table.num_rows} rows")
    names = table.column_names
    if len(set(names)) != len(names):
        return None  # to_pylist folds repeated names into one key: leave that to orjson
    cols = [(n, c) for n, c in zip(names, table.columns, strict=True) if n != "ts"]
    if not all(supported(c.type) for _, c in cols):
        return None
    parts: list[Any] = ["{\"ts\":", arrow_ints(ts).cast(_OUT)]
    for name, col in cols:
        # keys are constant: orjson itself escapes them, once per column
        text, quotes = _json_values(col)
        parts.append("," + orjson.dumps(name).decode() + ":" + ("\"" if quotes else ""))
        parts.append(text)
        if quotes:
            parts.append("\"")
    parts.append("}\n")
    # adjacent constant parts as one
    merged: list[Any] = []
    for p in parts:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        else:
            merged.append(p)
    parts = merged
    return pc.binary_join_element_wise(*[_scalar(p) if isinstance(p, str) else p
                                         for p in parts], _scalar(""))


@functools.lru_cache(maxsize=1024)
def _scalar(text: str) -> Any:
    """``text`` as an Arrow scalar of the output type. Not ``pa.scalar``: converting a Python
    value makes pyarrow import pandas (see :func:`stretchflow.batch.int_numpy`). Made once
    per text (the keys of a table's lines are the same in every batch; making them took 12%
    of a 1 000 000-bid Parquet filter + with_columns run's CPU time, cProfile)."""
    return arrow_strings([text]).cast(_OUT)[0]


def _chunk_bytes(chunk: pa.Array) -> memoryview:
    _, offsets_buf, data_buf = chunk.buffers()
    n = len(chunk)
    if n == 0 or data_buf is None:
        return memoryview(b"")
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[chunk.offset: chunk.offset + n + 1]
    return memoryview(data_buf)[int(offsets[0]): int(offsets[-1])]


def jsonl_bytes(ts: np.ndarray, table: pa.Table | pa.RecordBatch) -> bytes | memoryview | None:
    """The JSON Lines file content for the tuples (see :func:`jsonl_lines`) as one buffer, read
    straight from the Arrow data buffer, or None when the batch must go through orjson."""
    if len(ts) == 0:
        return b""
    lines = jsonl_lines(ts, table)
    if lines is None:
        return None
    if isinstance(lines, pa.Array):
        lines = pa.chunked_array([lines])
    chunks = [c for c in lines.chunks if len(c)]
    if lines.null_count:  # every part is non-null by construction; guard the invariant
        raise AssertionError("a JSON line came out null")
    if len(chunks) == 1:
        return _chunk_bytes(chunks[0])  # zero-copy view of the joined text
    return b"".join(_chunk_bytes(c) for c in chunks)  # one copy per chunk, not per row
