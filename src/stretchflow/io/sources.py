"""Sources: files (JSON Lines, CSV, Parquet), Python iterables and the built-in generators.

Every source says whether it is timestamp-sorted. A sorted source's tuples are implicit
watermarks (journal §2.3, Definition 3) and a record whose timestamp goes back raises a
:class:`~stretchflow.errors.SourceError` naming the source, the record and both timestamps.
An unsorted source may carry explicit watermarks (records holding only a watermark field, or
:class:`~stretchflow.eventtime.Watermark` objects in an iterable); its tuples are held back and
released in timestamp order once a watermark covers them, and a tuple that arrives behind a
watermark it promised to respect is an error, never silently dropped. Without watermarks an
unsorted source is sorted when its input ends (bounded inputs only).

``Source.items()`` yields ``(ts, payload)`` tuples in timestamp order, with explicit watermarks
as ``(w, WATERMARK)``; the engine never copies payloads.

``Source.batches()`` delivers the same tuples as :class:`~stretchflow.batch.Batch` es (columns),
or None when the source cannot: sorted JSON Lines, CSV and Parquet files can, read by Arrow
(:mod:`stretchflow.io.batches`) so that columnar operators never build Python objects; each
chunk Arrow cannot take as it is goes through the tuple path's own per-record code, so the
tuples and any error are those of ``items()``.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import SourceError
from ..eventtime import WATERMARK, Watermark

if TYPE_CHECKING:
    from ..batch import Batch

Item = tuple[int, Any]


class Source:
    """Base class: a named stream of records with an integer timestamp field."""

    def __init__(self, name: str, ts: str = "ts", sorted: bool = True,  # noqa: A002
                 watermark: str | None = None):
        self.name = name
        self.ts_field = ts
        self.sorted = sorted
        self.watermark_field = watermark
        self.read = 0  # records read so far, updated every few thousand (for progress bars)

    #: replay speed in tuples per second of wall-clock time (None: as fast as possible)
    rate: float | None = None
    #: replay in event time: ms of event time per ms of wall-clock time (None: no pacing)
    speed: float | None = None

    def items(self) -> Iterator[Item]:
        """The source's tuples in timestamp order (explicit watermarks included)."""
        raw = self._raw()
        out = _check_sorted(self, raw) if self.sorted else _reorder(self, raw)
        if self.speed:
            return _replayed(out, self.speed)
        return _paced(out, self.rate) if self.rate else out

    def batches(self, rows: int = 65536) -> Iterator[Batch] | None:
        """The tuples of :meth:`items` as batches of about ``rows`` tuples, or None when this
        source cannot deliver batches (then the executor uses :meth:`items`). Only sorted,
        unpaced file sources can: a batch is a run in timestamp order, and pacing is per tuple.
        """
        return None

    def _batchable(self, rows: int) -> bool:
        """Whether :meth:`batches` may read batches: sorted and unpaced (and a sane ``rows``)."""
        if type(rows) is not int or rows < 1:
            raise ValueError(f"batches: rows must be a positive integer, got {rows!r}")
        return self.sorted and not self.rate and not self.speed

    def _checked(self, raw: Iterator[tuple[Any, Any, Any]], prev: float = -math.inf
                 ) -> Iterator[Item]:
        """``raw`` checked for order as :meth:`items` checks it, the previous timestamp being
        ``prev`` (so a batch reader can check a chunk the way the tuple path would)."""
        return _check_sorted(self, raw, prev)

    def replay(self, speed: float = 1.0) -> Source:
        """Replays this source in event time: a tuple comes (ts − first ts) / speed ms after
        the first, so several sources stay aligned in event time as live sources would."""
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = speed
        return self

    def at_rate(self, rate: float) -> Source:
        """Replays this source at ``rate`` tuples per second (a load generator for
        benchmarks: the engine then runs below its capacity, as in STRETCH's Q4)."""
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        return self

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        """``(ts_or_None, payload_or_WATERMARK, where)`` triples in arrival order; ``where``
        locates the record for error messages (a line number or a row index)."""
        raise NotImplementedError

    def describe_where(self, where: Any) -> str:
        return f"record {where}"

    def _error(self, where: Any, reason: str, record: Any = None) -> SourceError:
        return SourceError(self.name, self.describe_where(where), reason, record)

    def _ts_of(self, rec: Any, where: Any) -> int:
        """The timestamp of a record, or a clear error (missing, not an integer)."""
        try:
            ts = rec[self.ts_field]
        except (KeyError, TypeError, IndexError):
            if not isinstance(rec, dict):
                raise self._error(where, "record is not an object", rec) from None
            raise self._error(where, f"missing timestamp field {self.ts_field!r}", rec) from None
        if type(ts) is not int:
            raise self._error(
                where, f"timestamp {self.ts_field!r} must be an integer (ms), got {ts!r}", rec
            )
        return ts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, sorted={self.sorted})"


def _check_sorted(src: Source, raw: Iterator[tuple[Any, Any, Any]], prev: float = -math.inf
                  ) -> Iterator[Item]:
    for ts, payload, where in raw:
        if ts < prev:
            raise src._error(
                where,
                f"timestamp goes back from {prev} to {ts} on a source declared sorted "
                f"(declare it sorted=False with explicit watermarks, or sort the input)",
                None if payload is WATERMARK else payload,
            )
        prev = ts
        yield ts, payload


def _paced(items: Iterator[Item], rate: float) -> Iterator[Item]:
    """Yields item n no earlier than n / ``rate`` seconds after the first."""
    import time

    clock, sleep = time.perf_counter, time.sleep
    t0 = clock()
    for n, item in enumerate(items):
        ahead = n / rate - (clock() - t0)
        if ahead > 0:
            sleep(ahead)
        yield item


def _replayed(items: Iterator[Item], speed: float) -> Iterator[Item]:
    import time

    clock, sleep = time.perf_counter, time.sleep
    t0 = first = None
    for item in items:
        if first is None:
            t0, first = clock(), item[0]
        ahead = (item[0] - first) / speed / 1000 - (clock() - t0)
        if ahead > 0:
            sleep(ahead)
        yield item


def _reorder(src: Source, raw: Iterator[tuple[Any, Any, Any]]) -> Iterator[Item]:
    """Hold tuples until an explicit watermark covers them, then release them sorted (ties
    in arrival order)."""
    heap: list[tuple[int, int, Any]] = []
    seq = 0
    wm = -math.inf
    for ts, payload, where in raw:
        if payload is WATERMARK:
            if ts <= wm:
                continue  # watermarks only move forward; a repeated one says nothing new
            wm = ts
            while heap and heap[0][0] <= wm:
                t, _, p = heapq.heappop(heap)
                yield t, p
            yield wm, WATERMARK
        else:
            if ts < wm:
                raise src._error(
                    where, f"late tuple: timestamp {ts} is behind the watermark {wm}", payload
                )
            seq += 1
            heapq.heappush(heap, (ts, seq, payload))
    while heap:
        t, _, p = heapq.heappop(heap)
        yield t, p


class JsonLines(Source):
    """One JSON object per line. Blank lines are skipped; anything else that is not a JSON
    object with an integer timestamp is an error naming the file and line."""

    def __init__(self, path: str | os.PathLike, *, ts: str = "ts", sorted: bool = True,  # noqa: A002
                 watermark: str | None = None, name: str | None = None):
        self.path = Path(path)
        super().__init__(name or self.path.name, ts, sorted, watermark)

    #: a batch holds at most about this many bytes of lines (unless one line is longer)
    batch_bytes = 8 << 20

    def describe_where(self, where: Any) -> str:
        return f"{self.path}:{where}"

    def batches(self, rows: int = 65536) -> Iterator[Batch] | None:
        """Batches read by Arrow's multithreaded JSON parser; None with a watermark field
        (explicit watermarks are per record) or when :meth:`Source.batches` says so."""
        if not self._batchable(rows) or self.watermark_field is not None:
            return None
        from .batches import jsonl_batches

        return jsonl_batches(self, rows, self.batch_bytes)

    def _open(self) -> Any:
        try:
            return open(self.path, "rb")  # noqa: SIM115
        except OSError as e:
            raise SourceError(self.name, str(self.path), f"cannot open: {e.strerror}") from e

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        f = self._open()
        with f:
            yield from self._lines(f, 1)

    def _lines(self, lines: Iterable[bytes], first: int) -> Iterator[tuple[Any, Any, Any]]:
        """The per-record reading of :meth:`_raw` over ``lines``, the first being line number
        ``first`` (a batch reader runs it over a chunk Arrow could not take)."""
        loads, ts_f, wm_f = orjson.loads, self.ts_field, self.watermark_field
        n = first - 1
        for n, line in enumerate(lines, first):  # noqa: B007
            try:
                rec = loads(line)
            except orjson.JSONDecodeError as e:
                if not line.strip():
                    continue
                raise self._error(n, f"malformed JSON ({e})", _text(line)) from None
            if wm_f is not None and type(rec) is dict and wm_f in rec and len(rec) == 1:
                w = rec[wm_f]
                if type(w) is not int:
                    raise self._error(n, f"watermark must be an integer, got {w!r}", rec)
                yield w, WATERMARK, n
                continue
            try:
                ts = rec[ts_f]
            except (KeyError, TypeError):
                ts = self._ts_of(rec, n)  # raises the precise error
            if type(ts) is not int:
                ts = self._ts_of(rec, n)
            if not n & 4095:
                self.read = n
            yield ts, rec, n
        self.read = n


class _Arrow(Source):
    """Files pyarrow reads in record batches (CSV, Parquet); rows are dicts."""

    def __init__(self, path: str | os.PathLike, *, ts: str = "ts", sorted: bool = True,  # noqa: A002
                 name: str | None = None):
        self.path = Path(path)
        super().__init__(name or self.path.name, ts, sorted, None)

    def describe_where(self, where: Any) -> str:
        return f"{self.path} row {where}"

    def _batches(self) -> Iterator[Any]:
        raise NotImplementedError

    def batches(self, rows: int = 65536) -> Iterator[Batch] | None:
        """One batch per Arrow record batch (cut to at most ``rows`` tuples), or None when
        :meth:`Source.batches` says so."""
        if not self._batchable(rows):
            return None
        from .batches import arrow_batches

        return arrow_batches(self, rows)

    def _record_batches(self) -> Iterator[tuple[int, Any]]:
        """``(rows before it, record batch)`` pairs, with the tuple path's errors for a missing
        file, a missing timestamp column and a file pyarrow cannot read (shared by
        :meth:`_raw` and the batch reader, so both fail alike)."""
        if not self.path.exists():
            raise SourceError(self.name, str(self.path), "cannot open: no such file")
        ts_f = self.ts_field
        row = 0
        try:
            for batch in self._batches():
                if ts_f not in batch.schema.names:
                    raise self._error(row + 1, f"missing timestamp column {ts_f!r}")
                yield row, batch
                row += batch.num_rows
        except SourceError:
            raise
        except Exception as e:  # pyarrow's parse errors carry the reason; name the file
            raise self._error(row + 1, f"cannot read: {e}") from e

    def _pylist(self, batch: Any, row: int) -> list[Any]:
        """The rows of a record batch as dicts; ``row``: rows before it (for the error)."""
        try:
            return batch.to_pylist()
        except Exception as e:
            raise self._error(row + 1, f"cannot read: {e}") from e

    def _rows(self, batch: Any, row: int) -> Iterator[tuple[Any, Any, Any]]:
        """The per-record reading of a record batch whose first row is number ``row + 1``."""
        ts_f = self.ts_field
        for rec in self._pylist(batch, row):
            row += 1
            ts = rec[ts_f]
            if type(ts) is not int:
                ts = self._ts_of(rec, row) if ts is not None else self._null_ts(row, rec)
            yield ts, rec, row

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        for row, batch in self._record_batches():
            yield from self._rows(batch, row)
            self.read = row + batch.num_rows

    def _null_ts(self, row: int, rec: Any) -> int:
        raise self._error(row, f"missing timestamp field {self.ts_field!r}", rec)


class Csv(_Arrow):
    """CSV with a header line, read with pyarrow (column types inferred)."""

    def _batches(self) -> Iterator[Any]:
        import pyarrow.csv as pcsv

        return iter(pcsv.open_csv(str(self.path)))


class Parquet(_Arrow):
    """A Parquet file, read batch by batch."""

    def _batches(self) -> Iterator[Any]:
        import pyarrow.parquet as pq

        return pq.ParquetFile(str(self.path)).iter_batches(batch_size=8192)


class IterableSource(Source):
    """Records from a Python iterable (or a zero-argument callable returning one, so the flow
    can run more than once). Records are dicts with a timestamp field, or anything when ``ts``
    is a function of the record; :class:`Watermark` objects are explicit watermarks."""

    def __init__(self, data: Iterable[Any] | Callable[[], Iterable[Any]], *,
                 ts: str | Callable[[Any], int] = "ts", sorted: bool = True,  # noqa: A002
                 name: str = "iterable"):
        self.data = data
        self.ts_fn = ts if callable(ts) else None
        super().__init__(name, ts if isinstance(ts, str) else "<ts function>", sorted, None)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        data = iter(self.data() if callable(self.data) else self.data)
        ts_fn = self.ts_fn
        n = 0
        while True:
            try:
                rec = next(data)
            except StopIteration:
                break
            except Exception as e:
                raise self._error(n + 1, f"the iterable raised {type(e).__name__}: {e}") from e
            n += 1
            if not n & 4095:  # progress for the live view and progress bars, as files do
                self.read = n
            if type(rec) is Watermark:
                yield rec.ts, WATERMARK, n
                continue
            if ts_fn is not None:
                try:
                    ts = ts_fn(rec)
                except Exception as e:
                    raise self._error(n, f"timestamp function failed: {e!r}", rec) from e
                if type(ts) is not int:
                    raise self._error(n, f"timestamp must be an integer (ms), got {ts!r}", rec)
            else:
                ts = self._ts_of(rec, n)
            yield ts, rec, n
        self.read = n


class Generated(Source):
    """A built-in data generator (``tweets``, ``bandjoin``, ``trades``) as a source.

    For ``bandjoin`` pick the stream with ``stream="left"`` or ``"right"``.
    """

    def __init__(self, generator: str, *, rows: int, seed: int = 0, stream: str | None = None,
                 name: str | None = None, **params: Any):
        # imported here, not at the first tuple: its libraries (pyarrow) then load before
        # the run, whose collections skip the heap it started with (Flow.run, gc_hold.py)
        from .generators import generator as check

        self._make = check(generator)
        self.generator = generator
        self.rows = rows
        self.seed = seed
        self.stream = stream
        self.params = params
        super().__init__(name or generator + (f"-{stream}" if stream else ""), "ts", True)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        table = self._make(rows=self.rows, seed=self.seed, **self.params)
        if isinstance(table, tuple):
            table = table[0 if self.stream in (None, "left") else 1]
        row = 0
        for batch in table.to_batches(max_chunksize=8192):
            for rec in batch.to_pylist():
                row += 1
                yield rec["ts"], rec, row
            self.read = row


class RateSource(Source):
    """Spark's ``rate`` source as a stretchflow input: row ``v`` (0, 1, 2, ...) becomes the
    tuple with ``ts = v * 1000 // rows_per_second`` (event time advancing at the generation
    rate) and payload ``payload(v)`` (a dict; ``{"value": v}`` by default, ``"tweet"`` for a
    tweet-like text) with ``ts`` set. ``rows``: stop after that many (None: unbounded).

    On ``--engine spark`` a flow reading it is a Structured Streaming query fed by
    ``spark.readStream.format("rate")`` — a load generator producing ``rows_per_second`` rows
    per second of wall-clock time, on the executors. The local engines generate the same tuples
    (deterministically, as fast as they can take them, or paced with :meth:`at_rate`), so a
    run on Spark can be checked against the reference executor.

    Example:
        >>> src = RateSource(1000, rows=3)
        >>> [(ts, p["value"]) for ts, p in src.items()]
        [(0, 0), (1, 1), (2, 2)]
    """

    def __init__(self, rows_per_second: int, rows: int | None = None,
                 payload: Callable[[int], dict] | str | None = None, name: str = "rate"):
        if int(rows_per_second) < 1:
            raise ValueError(f"rate source: rows_per_second must be >= 1, got {rows_per_second}")
        if rows is not None and int(rows) < 1:
            raise ValueError(f"rate source: rows must be >= 1 or None, got {rows}")
        self.rows_per_second = int(rows_per_second)
        self.rows = None if rows is None else int(rows)
        if payload == "tweet":
            payload = rate_tweet
        elif isinstance(payload, str):
            raise ValueError(f"rate source: unknown payload {payload!r} (a function or 'tweet')")
        self.payload = payload
        super().__init__(name, "ts", True)

    def record(self, v: int) -> tuple[int, dict]:
        """``(ts, payload)`` of row ``v``."""
        ts = v * 1000 // self.rows_per_second
        if self.payload is None:
            return ts, {"ts": ts, "value": v}
        rec = self.payload(v)
        if not isinstance(rec, dict):
            raise self._error(v, f"payload({v}) must return a dict, got {type(rec).__name__}",
                              rec)
        return ts, {**rec, "ts": ts}

    def describe_where(self, where: Any) -> str:
        return f"row {where}"

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        v = 0
        while self.rows is None or v < self.rows:
            ts, rec = self.record(v)
            yield ts, rec, v
            v += 1
            self.read = v


#: the vocabulary of :func:`rate_tweet`
_RATE_WORDS = [f"w{k}" for k in range(1000)]


def rate_tweet(v: int) -> dict:
    """A tweet-like record for rate row ``v``: 4–16 words from a 1 000-word vocabulary,
    skewed towards low word numbers, the same in every process (seeded by ``v``)."""
    import random

    rnd = random.Random(v)
    n = rnd.randint(4, 16)
    words = _RATE_WORDS
    return {"id": v, "text": " ".join(words[int(1000 * rnd.random() ** 2)] for _ in range(n))}


def _text(line: bytes, limit: int = 200) -> str:
    s = line.decode("utf-8", "replace").rstrip("\n")
    return s if len(s) <= limit else s[:limit] + "..."


class PartDirectory(Source):
    """The committed parts of a part directory (:mod:`stretchflow.io.parts`, what a streaming
    run writes for ``--output``) as one source, parts in id order; each part is read by the
    file source of its format, and an error names the part."""

    def __init__(self, path: str | os.PathLike, *, ts: str = "ts", sorted: bool = True,  # noqa: A002
                 name: str | None = None):
        self.path = Path(path)
        super().__init__(name or self.path.name, ts, sorted, None)

    def describe_where(self, where: Any) -> str:
        part, w = where
        return part.describe_where(w)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        from .parts import committed_parts

        for _, f in committed_parts(self.path):
            part = open_source(f, ts=self.ts_field)
            for ts, rec, w in part._raw():
                yield ts, rec, (part, w)


def open_source(path: str | os.PathLike, **kw: Any) -> Source:
    """A file source chosen by extension: .jsonl/.json/.ndjson, .csv or .parquet; a part
    directory (:mod:`stretchflow.io.parts`) whatever its name."""
    from .parts import is_part_dir

    p = Path(path)
    if is_part_dir(p):
        return PartDirectory(p, **kw)
    ext = p.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return JsonLines(p, **kw)
    if ext == ".csv":
        return Csv(p, **kw)
    if ext == ".parquet":
        return Parquet(p, **kw)
    raise ValueError(f"{p}: unknown input format {ext!r}; use .jsonl, .csv or .parquet")
