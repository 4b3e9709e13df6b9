"""JSON Lines dealt unparsed to SN process channels, which parse them (issue #32).

On the rows path (:mod:`.sn_rows`) the parent's dealer would parse every line (orjson) and
pickle every record to the channel it deals the batch to, which unpickles it: measured on
hot items with lambdas over 1 000 000 bids at 2 process channels, the parent spent 2.2 s of
CPU (the reference engine's whole run: 2.5 s), parsing 0.77 s of it and pickling 0.22 s, and
bounded the run. Here the dealer reads the file's chunks of whole lines as
:func:`~stretchflow.io.batches.jsonl_row_batches` cuts them and parses two lines of each,
the first and the last: their timestamps give the pulse's watermark and the order check
across chunks. The chunk travels as bytes and the channel it is dealt to parses it with the
same code as the batch reader (:func:`~stretchflow.io.batches.chunk_rows`: the bulk parse,
else the tuple path's per-record code), so a bad record is named as the reference names it
(the source, the line number, the reason) after the rows before it.

A chunk whose first or last line the dealer cannot read so (a blank line, a parse error, a
timestamp that is not an int64 integer, a timestamp before the previous chunk's) is parsed
by the dealer as the batch reader does, and dealt as rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import orjson

from ..batch import Batch
from ..errors import SourceError
from ..io.batches import CHUNK_BYTES, _line_chunks, chunk_rows

__all__ = ["RawLines", "parse", "raw_lines"]

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class RawLines:
    """``n`` whole lines of a JSON Lines file, unparsed; ``line`` the number of the first,
    ``first`` and ``last`` the timestamps of the first and last line."""

    __slots__ = ("chunk", "n", "line", "first", "last")

    def __init__(self, chunk: bytes, n: int, line: int, first: int, last: int):
        self.chunk, self.n, self.line, self.first, self.last = chunk, n, line, first, last

    def __len__(self) -> int:
        return self.n


def raw_lines(src: Any, rows: int) -> Iterator[RawLines | Batch] | None:
    """The chunks of a sorted, unpaced JSON Lines source (``src.batches`` would give rows)
    as :class:`RawLines`, or as a parsed batch where the first or last line says to; None
    for any other source."""
    from ..io.sources import JsonLines

    if not isinstance(src, JsonLines) or src.watermark_field is not None or \
            not src._batchable(rows):
        return None
    return _chunks(src, rows, min(src.batch_bytes, CHUNK_BYTES))


def _chunks(src: Any, rows: int, max_bytes: int) -> Iterator[RawLines | Batch]:
    loads, ts_f = orjson.loads, src.ts_field
    prev: float = -math.inf
    line = 1  # number of the chunk's first line
    with src._open() as f:
        for chunk, ends in _line_chunks(f, rows, max_bytes):
            n = len(ends)
            raw = _ends(chunk, ends, ts_f, prev, line)
            if raw is not None:
                prev = raw.last
                yield raw
            else:  # as jsonl_row_batches reads a chunk
                prev = yield from chunk_rows(src, chunk, n, line, prev, loads)
            line += n
            src.read = line - 1


def _ends(chunk: bytes, ends: Any, ts_f: str, prev: float, line: int) -> RawLines | None:
    """The chunk unparsed, if its first and last lines are JSON objects with int64 integer
    timestamps in order from ``prev`` and it holds no blank line (which the parse would skip:
    the chunk's tuples would not be its lines)."""
    n = len(ends)
    if b"\n\n" in chunk:
        return None
    try:
        first = orjson.loads(chunk[:int(ends[0]) + 1])[ts_f]
        last = orjson.loads(chunk[int(ends[-2]) + 1:])[ts_f] if n > 1 else first
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
        return None
    if type(first) is not int or type(last) is not int or not \
            (prev <= first <= last and _I64_MIN <= first and last <= _I64_MAX):
        return None
    return RawLines(chunk, n, line, first, last)


def parse(src: Any, raw: RawLines) -> tuple[Batch | None, SourceError | None]:
    """The chunk's records (in the channel): ``(batch, error)``, the error (the source's,
    naming the line) after the records before it, as the batch reader raises it."""
    out: list[Batch] = []
    try:
        out.extend(chunk_rows(src, raw.chunk, raw.n, raw.line, raw.first, orjson.loads))
    except SourceError as e:
        return (out[0] if out else None), e
    return (out[0] if out else None), None
