"""Sinks: files (JSON Lines, CSV, Parquet), a Python callback, an in-memory collector, stdout.

An output tuple ``(ts, payload)`` becomes a record with ``ts`` first: a dict payload's fields
follow (a ``ts`` field of the payload is replaced by the tuple's event time), any other payload
is written as ``{"ts": ts, "value": payload}``.

Output is a transaction: a file sink writes a hidden temporary file beside its target
(``.out.jsonl.stretchflow-<pid>-<random>.tmp``) and :meth:`Sink.commit` renames it onto the
target; :meth:`Sink.abort` removes it, leaving the previous target as it was (the temporary
file, fsync and rename: :class:`stretchflow.io.atomic.FileTxn`). Executors go through
:func:`stretchflow.runtime.sink_session`, which commits every sink of a run that succeeded and
aborts them all otherwise.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from ..batch import Batch, arrow_ints
from ..errors import StretchflowError
from .atomic import FileTxn


def to_record(ts: int, payload: Any) -> dict:
    """The record a sink writes for an output tuple."""
    if type(payload) is dict:
        rec = {"ts": ts, **payload}
        # the output's timestamp, first, whatever a payload's own "ts" said (one store
        # keeps the key's place: half the time of rebuilding the dict without it)
        rec["ts"] = ts
        return rec
    return {"ts": ts, "value": payload}


class Sink:
    """Receives output tuples in timestamp order, in batches.

    Life cycle: ``open()``, ``write``/``write_batch`` calls, then exactly one ending:
    ``commit()`` when the run succeeded (the output becomes visible under the sink's name) or
    ``abort()`` when it failed (the output is discarded; what was there before stays). Both are
    idempotent; ``abort()`` after ``commit()`` changes nothing. ``prepare()`` is commit's first
    half (everything that can fail: flushing, closing, syncing) so that a run with several sinks
    publishes none of them when one cannot be written. ``close()`` is kept for callers written
    before transactions: it commits.

    A sink subclass written for ``open``/``close`` only keeps working: by default ``commit()``
    and ``abort()`` both call ``close()``, as the executors used to in every case.
    """

    name = "sink"

    def open(self) -> None:
        self.count = 0

    def write(self, items: list[tuple[int, Any]]) -> None:
        raise NotImplementedError

    def write_batch(self, batch: Batch) -> None:
        """Receives a whole :class:`~stretchflow.batch.Batch`; by default tuple by tuple."""
        self.write(batch.items())

    def prepare(self) -> None:
        """Makes the output ready to publish (nothing left that can fail but the publishing)."""

    def commit(self) -> None:
        """Publishes the output; idempotent."""
        self.close()

    def abort(self) -> None:
        """Discards the output; idempotent, and a no-op after :meth:`commit`."""
        self.close()

    def close(self) -> None:
        pass


def _commit_or_abort(sink: Sink) -> None:
    # close() for callers written before commit/abort: a file that cannot be committed is
    # removed rather than left behind under its temporary name
    try:
        sink.commit()
    except BaseException:
        sink.abort()
        raise


class Collector(Sink):
    """Keeps every output tuple in memory: ``items`` (``(ts, payload)``) and ``records()``.

    ``commit()`` and ``abort()`` do nothing: after a failed run ``items`` still holds what
    reached the sink before the failure (there is no previous output to protect, and a test or
    a debugger wants to see how far the run got); the next ``open()`` clears it.
    """

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
    """Calls ``fn(ts, payload)`` for every output tuple (as they come: ``commit()`` and
    ``abort()`` do nothing, the calls cannot be taken back)."""

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
            f.write(b"".join([dumps(to_record(ts, p)) + b"\n" for ts, p in items]))
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
            self._dump(f, zip(batch.ts_list(), batch.payloads, strict=True))
        elif len(data):
            f.write(data)


class JsonLinesSink(_JsonWriter):
    """Writes one JSON object per line (to a temporary file, renamed onto ``path`` on commit)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(self.path)
        self._txn: FileTxn | None = None

    def open(self) -> None:
        self.count = 0
        self._txn = FileTxn(self.name, self.path)
        self._f = self._txn.begin()

    def write(self, items: list[tuple[int, Any]]) -> None:
        self._dump(self._f, items)
        self.count += len(items)

    def write_batch(self, batch: Batch) -> None:
        self._dump_batch(self._f, batch)
        self.count += len(batch)

    def prepare(self) -> None:
        if self._txn is not None:
            self._txn.prepare()

    def commit(self) -> None:
        if self._txn is not None:
            self._txn.commit()

    def abort(self) -> None:
        if self._txn is not None:
            self._txn.abort()

    def close(self) -> None:
        _commit_or_abort(self)


class Stdout(_JsonWriter):
    """JSON Lines on standard output (written as they come: ``commit()`` and ``abort()`` do
    nothing)."""

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
        self._txn: FileTxn | None = None

    def open(self) -> None:
        self.count = 0
        self._buf: list[dict] = []
        self._writer: Any = None
        self._txn = FileTxn(self.name, self.path)
        self._txn.begin()

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

    def prepare(self) -> None:
        txn = self._txn
        if txn is None or txn.state != "open":
            return
        self._flush()
        if self._writer is not None:  # (no output: the temporary file stays empty)
            writer, self._writer = self._writer, None
            writer.close()
        txn.prepare()

    def commit(self) -> None:
        if self._txn is not None:
            self.prepare()
            self._txn.commit()

    def abort(self) -> None:
        if self._txn is None:
            return
        writer, self._writer = self._writer, None
        if writer is not None and self._txn.state == "open":
            try:  # releases pyarrow's own handle on the file before it is removed
                writer.close()
            except Exception:  # noqa: BLE001, S110  # the file is discarded either way
                pass
        self._buf = []
        self._txn.abort()

    def close(self) -> None:
        _commit_or_abort(self)

    def _new_writer(self, schema: Any) -> Any:
        raise NotImplementedError


class CsvSink(_TableSink):
    def _new_writer(self, schema: Any) -> Any:
        import pyarrow.csv as pcsv

        assert self._txn is not None
        return pcsv.CSVWriter(str(self._txn.write_path), schema)


class ParquetSink(_TableSink):
    def _new_writer(self, schema: Any) -> Any:
        import pyarrow.parquet as pq

        assert self._txn is not None
        return pq.ParquetWriter(str(self._txn.write_path), schema)


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


class ObjectSink(Sink):
    """A file sink whose target is an object store URL (``s3://bucket/out.jsonl``): the sink
    of its format writes a local temporary file, published at commit as one object
    (:func:`stretchflow.io.objectstore.publish`: temporary key, then a copy onto the target);
    a failed run leaves the previous object as it was."""

    def __init__(self, url: str):
        self.path = self.name = url
        ext = Path(url.split("?", 1)[0]).suffix.lower()
        self._cls = {".jsonl": JsonLinesSink, ".json": JsonLinesSink, ".ndjson": JsonLinesSink,
                     ".csv": CsvSink, ".parquet": ParquetSink}.get(ext)
        if self._cls is None:
            raise ValueError(f"{url}: unknown output format {ext!r}; use .jsonl, .csv or "
                             f".parquet")
        self._inner: Sink | None = None
        self._dir: str | None = None
        self.state = "new"

    def open(self) -> None:
        from .objectstore import check_writable

        self.count = 0
        check_writable(self.path, self.name)  # before the run: an unreachable bucket costs nothing
        self._dir = tempfile.mkdtemp(prefix="stretchflow-object-")
        self._inner = self._cls(Path(self._dir) / ("out" + Path(self.path).suffix.lower()))
        self._inner.open()
        self.state = "open"

    def write(self, items: list[tuple[int, Any]]) -> None:
        self._inner.write(items)
        self.count = self._inner.count

    def write_batch(self, batch: Batch) -> None:
        self._inner.write_batch(batch)
        self.count = self._inner.count

    def prepare(self) -> None:
        if self.state == "open":
            self._inner.prepare()

    def commit(self) -> None:
        from .objectstore import publish

        if self.state != "open":
            return
        try:
            self._inner.commit()  # the complete local file, then one upload
            publish(self._inner.path, self.path, self.name)
        finally:
            self._cleanup("committed")

    def abort(self) -> None:
        if self.state == "open":
            try:
                self._inner.abort()
            finally:
                self._cleanup("aborted")

    def _cleanup(self, state: str) -> None:
        import shutil

        self.state = state
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        _commit_or_abort(self)


def open_sink(path: str | os.PathLike) -> Sink:
    """A file sink chosen by extension: .jsonl/.json/.ndjson, .csv or .parquet; ``-`` is stdout;
    a URL (``s3://``) an :class:`ObjectSink`, ``file://`` the local file. Message buses:
    :func:`stretchflow.io.endpoints.open_output`."""
    if str(path) == "-":
        return Stdout()
    from .files import is_url, local_path

    path = local_path(path)
    if is_url(path):
        return ObjectSink(str(path))
    p = Path(path)
    ext = p.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return JsonLinesSink(p)
    if ext == ".csv":
        return CsvSink(p)
    if ext == ".parquet":
        return ParquetSink(p)
    raise ValueError(f"{p}: unknown output format {ext!r}; use .jsonl, .csv, .parquet or -")
