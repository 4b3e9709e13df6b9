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

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buf:
            return
        table = pa.Table.from_pylist(self._buf)
        self._buf = []
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
