"""Sinks: files (JSON Lines, CSV, Parquet), a Python callback, an in-memory collector, stdout.

An output tuple ``(ts, payload)`` becomes a record with ``ts`` first: a dict payload's fields
follow (a ``ts`` field of the payload is replaced by the tuple's event time), any other payload
is written as ``{"ts": ts, "value": payload}``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from ..batch import Batch, arrow_ints
from ..errors import StretchflowError


def to_record(ts: int, payload: Any) -> dict:
    """The record a sink writes for an output tuple."""
    if type(payload) is dict:
        if "ts" in payload:
            rec = {"ts": ts}
            rec.update((k, v) for k, v in payload.items() if k != "ts")
            return rec
        return {"ts": ts, **payload}
    return {"ts": ts, "value": payload}


class Sink:
    """Receives output tuples in timestamp order, in batches."""

    name = "sink"

    def open(self) -> None:
        self.count = 0

    def write(self, items: list[tuple[int, Any]]) -> None:
        raise NotImplementedError

    def write_batch(self, batch: Batch) -> None:
        """Receives a whole :class:`~stretchflow.batch.Batch`; by default tuple by tuple."""
        self.write(batch.items())

    def close(self) -> None:
        pass


class Collector(Sink):
    """Keeps every output tuple in memory: ``items`` (``(ts, payload)``) and ``records()``."""

    name = "collect"

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []

    def open(self) -> None:
        self.count = 0
        self.items = []

    def write(self, items: list[tuple[int, Any]]) -> None:
        self.items.extend(items)
        self.count += len(items)

    def write_batch(self, batch: Batch) -> None:
        # the collector's contract is Python tuples, whatever form the batch travels in
        self.items.extend(batch.items())
        self.count += len(batch)

    def records(self) -> list[dict]:
        return [to_record(ts, p) for ts, p in self.items]


class Callback(Sink):
    """Calls ``fn(ts, payload)`` for every output tuple."""

    def __init__(self, fn: Callable[[int, Any], None], name: str = "callback"):
        self.fn = fn
        self.name = name

    def write(self, items: list[tuple[int, Any]]) -> None:
        fn = self.fn
        for ts, p in items:
            fn(ts, p)
        self.count += len(items)


class _JsonWriter(Sink):
    def _dump(self, f: Any, items: Iterable[tuple[int, Any]]) -> None:
        dumps = orjson.dumps
        try:
            f.write(b"".join(dumps(to_record(ts, p)) + b"\n" for ts, p in items))
        except TypeError as e:
            raise StretchflowError(f"sink {self.name!r}: cannot write output as JSON: {e}") \
                from e

    def _dump_batch(self, f: Any, batch: Batch) -> None:
        """The batch's lines in one write: built by Arrow from its table when it has one and
        every column can be written byte-identically (json_columns), else by orjson."""
        data = None
        if batch.has_table:  # never build a table from Python payloads just to write it
            from .json_columns import jsonl_bytes

            try:
                data = jsonl_bytes(batch.ts, batch.table)
            except ValueError as e:
                raise StretchflowError(f"sink {self.name!r}: cannot write batch: {e}") from e
        if data is None:
            self._dump(f, batch.items())
        elif len(data):
            f.write(data)


class JsonLinesSink(_JsonWriter):
    """Writes one JSON object per line."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(self.path)

    def open(self) -> None:
        self.count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")  # noqa: SIM115

    def write(self, items: list[tuple[int, Any]]) -> None:
        self._dump(self._f, items)
        self.count += len(items)

    def write_batch(self, batch: Batch) -> None:
        self._dump_batch(self._f, batch)
        self.count += len(batch)

    def close(self) -> None:
        self._f.close()


class Stdout(_JsonWriter):
    """JSON Lines on standard output."""

    name = "stdout"

    def write(self, items: list[tuple[int, Any]]) -> None:
        out = sys.stdout
        out.flush()
        self._dump(out.buffer, items)
        out.buffer.flush()
        self.count += len(items)

    def write_batch(self, batch: Batch) -> None:
        out = sys.stdout
        out.flush()  # text already written through sys.stdout goes out first
        self._dump_batch(out.buffer, batch)
        out.buffer.flush()
        self.count += len(batch)


class _TableSink(Sink):
    """Buffers records and writes them through pyarrow (CSV, Parquet) in batches."""

    BATCH = 65536

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(self.path)

    def open(self) -> None:
        self.count = 0
        self._buf: list[dict] = []
        self._writer: Any = None
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, items: list[tuple[int, Any]]) -> None:
        self._buf.extend(to_record(ts, p) for ts, p in items)
        self.count += len(items)
        if len(self._buf) >= self.BATCH:
            self._flush()

    def write_batch(self, batch: Batch) -> None:
        table = _records_table(batch) if batch.has_table and len(batch) else None
        if table is None:
            self.write(batch.items())
            return
        self._flush()  # records buffered by write() come first
        self.count += len(batch)
        self._write_table(table)

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buf:
            return
        table = pa.Table.from_pylist(self._buf)
        self._buf = []
        self._write_table(table)

    def _write_table(self, table: Any) -> None:
        if self._writer is None:
            self._writer = self._new_writer(table.schema)
        self._writer.write_table(table.cast(self._writer.schema) if hasattr(
            self._writer, "schema") else table)

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        else:
            self.path.write_bytes(b"")

    def _new_writer(self, schema: Any) -> Any:
        raise NotImplementedError


class CsvSink(_TableSink):
    def _new_writer(self, schema: Any) -> Any:
        import pyarrow.csv as pcsv

        return pcsv.CSVWriter(str(self.path), schema)


class ParquetSink(_TableSink):
    def _new_writer(self, schema: Any) -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetWriter(str(self.path), schema)


def _records_table(batch: Batch) -> Any:
    """The batch's records as the table ``pa.Table.from_pylist`` makes of the tuple path's
    records (``ts`` first as int64, the payload's other columns in order, each with the type
    inference gives its Python values), or None when some column's type would differ."""
    import pyarrow as pa

    table = batch.table
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    names = table.column_names
    if len(set(names)) != len(names):
        return None
    if table.num_rows != len(batch):
        raise StretchflowError(f"batch of {len(batch)} tuples has a table of {table.num_rows} "
                               "rows")
    out_names, cols = ["ts"], [pa.chunked_array([arrow_ints(batch.ts)])]
    for name, col in zip(names, table.columns, strict=True):
        if name == "ts":
            continue  # to_record replaces a payload's ts by the tuple's
        col = _inferred_form(col)
        if col is None:
            return None
        out_names.append(name)
        cols.append(col)
    return pa.table(cols, names=out_names)


def _inferred_form(col: Any) -> Any:
    """A column cast to the type inference gives its Python values (all None: null; ints:
    int64; floats: double; str: string; bool: bool), or None for other types or a cast that
    would not be lossless."""
    import pyarrow as pa

    t = col.type
    if len(col) and col.null_count == len(col):
        return pa.chunked_array([pa.nulls(len(col))])
    if pa.types.is_integer(t):
        target = pa.int64()
    elif pa.types.is_float32(t) or pa.types.is_float64(t):
        target = pa.float64()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        target = pa.string()
    elif pa.types.is_boolean(t) or pa.types.is_null(t):
        return col
    else:
        return None
    try:
        return col.cast(target)  # safe cast: a uint64 past int64's range is refused
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def open_sink(path: str | os.PathLike) -> Sink:
    """A file sink chosen by extension: .jsonl/.json/.ndjson, .csv or .parquet; ``-`` is stdout."""
    if str(path) == "-":
        return Stdout()
    p = Path(path)
    ext = p.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return JsonLinesSink(p)
    if ext == ".csv":
        return CsvSink(p)
    if ext == ".parquet":
        return ParquetSink(p)
    raise ValueError(f"{p}: unknown output format {ext!r}; use .jsonl, .csv, .parquet or -")
