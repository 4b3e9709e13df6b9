"""Sources: files (JSON Lines, CSV, Parquet), Python iterables and the built-in generators.

Every source says whether it is timestamp-sorted. A sorted source's tuples are implicit
watermarks (journal §2.3, Definition 3) and a record whose timestamp goes back raises a
:class:`~stretchflow.errors.SourceError` naming the source, the record and both timestamps.
An unsorted source may carry explicit watermarks (records holding only a watermark field, or
:class:`~stretchflow.eventtime.Watermark` objects in an iterable); its tuples are held back and
released in timestamp order once a watermark covers them. ``max_delay`` (watermark = max ts
seen − max_delay) and ``idle_timeout`` move the same watermark, and ``late`` says what a tuple
behind it does: an error (the default), dropped and counted, or sent to a late-data stream
(:class:`LateSource`; :mod:`stretchflow.io.late`, docs/event-time.md). Without watermarks an
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

import math
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..arrow_rows import pylist
from ..batch import WIDE
from ..errors import SourceError
from ..eventtime import WATERMARK, Watermark
from .files import FileInput, arrow_stream, ms_timestamps, name_of, open_random, path_of
from .late import check_event_time, idle_marked, reorder, to_ms

if TYPE_CHECKING:
    from ..batch import Batch

Item = tuple[int, Any]


class Source:
    """Base class: a named stream of records with an integer timestamp field."""

    #: whether reading it holds the GIL for most of its work (a parser in Python or one that
    #: does not release it, orjson's): its thread then shares the run's Python core
    #: (runtime/gil_core.py). False where Arrow decodes it with the GIL released.
    gil_bound = True

    def __init__(self, name: str, ts: str | Callable[[Any], Any] = "ts",
                 sorted: bool = True, watermark: str | None = None, *,  # noqa: A002
                 max_delay: int | str | timedelta | None = None,
                 idle_timeout: int | str | timedelta | None = None, late: str | None = None):
        self.name = name
        # ts: a field (int ms, ISO-8601 string or datetime) or a function record -> timestamp
        self.ts_fn = ts if callable(ts) else None
        self.ts_field = "<ts function>" if callable(ts) else ts
        self.max_delay, self.idle_timeout, late = check_event_time(name, max_delay,
                                                                   idle_timeout, late)
        # bounded out-of-orderness means the input is not sorted (and not batch-readable)
        self.sorted = sorted and self.max_delay is None
        self.watermark_field = watermark
        #: what a tuple behind the watermark does: "error", "drop" or "side" (io/late.py);
        #: a Flow's ``late=`` default applies to sources that did not say
        self.late = late or "error"
        self.late_given = late is not None
        self.late_seen = 0  # late tuples of the last pass (dropped, or sent to the side)
        self.read = 0  # records read so far, updated every few thousand (for progress bars)

    #: whether the input can be read again (a late="side" stream re-reads it)
    rereadable = True

    #: replay speed in tuples per second of wall-clock time (None: as fast as possible)
    rate: float | None = None
    #: replay in event time: ms of event time per ms of wall-clock time (None: no pacing)
    speed: float | None = None

    def items(self) -> Iterator[Item]:
        """The source's tuples in timestamp order (explicit watermarks included), paced
        when it has a ``rate`` or a ``speed`` (:func:`pace`)."""
        return pace(self.ordered_items(), self.rate, self.speed)

    def ordered_items(self) -> Iterator[Item]:
        """:meth:`items` before pacing: the tuples in timestamp order, checked or
        reordered (an engine that paces them itself, with watermarks before its waits,
        reads this: :func:`pace` with ``marks``)."""
        raw = self._raw()
        self.late_seen = 0
        if self.sorted and self.late == "error":
            return _check_sorted(self, raw)
        return _reorder(self, raw)

    def batches(self, rows: int = WIDE, tables: bool = True) -> Iterator[Batch] | None:
        """The tuples of :meth:`items` as batches of about ``rows`` tuples, or None when this
        source cannot deliver batches (then the executor uses :meth:`items`). Only sorted,
        unpaced file sources can: a batch is a run in timestamp order, and pacing is per tuple.
        ``tables=False``: every reader takes the rows (payloads) only, so a source that would
        build an Arrow table of each batch just for them may skip it (JSON Lines does).
        """
        return None

    def _batchable(self, rows: int) -> bool:
        """Whether :meth:`batches` may read batches: sorted and unpaced (and a sane ``rows``)."""
        if type(rows) is not int or rows < 1:
            raise ValueError(f"batches: rows must be a positive integer, got {rows!r}")
        return (self.sorted and self.late == "error" and self.ts_fn is None and not self.rate
                and not self.speed)

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
        """The timestamp of a record in ms (from an int, an ISO-8601 string or a datetime:
        :func:`~stretchflow.io.late.to_ms`), or a clear error (missing, not a timestamp)."""
        if self.ts_fn is not None:
            try:
                ts = self.ts_fn(rec)
            except Exception as e:
                raise self._error(where, f"timestamp function failed: {e!r}", rec) from e
        else:
            try:
                ts = rec[self.ts_field]
            except (KeyError, TypeError, IndexError):
                if not isinstance(rec, dict):
                    raise self._error(where, "record is not an object", rec) from None
                raise self._error(where, f"missing timestamp field {self.ts_field!r}",
                                  rec) from None
        ms = to_ms(ts)
        if ms is None:
            raise self._error(
                where, f"timestamp {self.ts_field!r} must be an integer (ms), an ISO-8601 "
                f"string or a datetime, got {ts!r}", rec)
        return ms

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


#: a paced source's waits shorter than this, within this long of its last watermark, get
#: no watermark of their own (:func:`pace` with ``marks``): a fast paced source keeps its runs
#: (at most this much later)
LIVE_MARK_S = 0.01


def pace(items: Iterator[Item], rate: float | None = None, speed: float | None = None,
         marks: bool = False, before_wait: Callable[[], None] | None = None
         ) -> Iterator[Item]:
    """``items`` paced, the one pacing of every source and engine: item n no earlier than
    n / ``rate`` seconds after the first (``at_rate``), or a tuple (ts − first ts) / ``speed``
    ms after the first (``replay``, event time); unpaced (``items`` itself) with neither.

    With ``marks`` it yields ``(latest ts, WATERMARK)`` before a wait for the next tuple, so
    an engine that gathers runs (the reference's O+ and sink drain) lets out what that
    watermark closed instead of holding it for more tuples or the end of input. ``items`` is
    timestamp-ordered (sorted or reordered), so no later tuple is before the latest one read:
    the watermark is safe.

    ``before_wait`` is called before each wait: a reader that gathers the tuples into batches
    hands its batch on then, so a tuple never waits for the next one's due time, while tuples
    that are already due (a reader behind the schedule) still go in full batches."""
    if not rate and not speed:
        return items
    return _paced(items, rate, speed, marks, before_wait)


def live_items(src: Any, before_wait: Callable[[], None] | None = None
               ) -> Iterator[Item] | None:
    """A paced source's (``at_rate``, ``replay``) tuples paced by :func:`pace` with
    ``marks`` (a watermark at the latest timestamp before each wait, so a window's output
    need not wait for the next tuple) and ``before_wait``; None for a source that is not
    paced, or whose class reads its items its own way (``items`` overridden), which its
    reader takes as ``src.items()``. The reference's and the threaded engines' source pump
    read paced sources through it."""
    rate, speed = getattr(src, "rate", None), getattr(src, "speed", None)
    # a proxy (a checkpointed run's source with its barriers) has items but no class one
    if (not rate and not speed) or getattr(type(src), "items", None) is not Source.items:
        return None
    return pace(src.ordered_items(), rate, speed, marks=True, before_wait=before_wait)


def marked_items(src: Any) -> Iterator[Item]:
    """What a reader of ``src`` that needs no hook reads: :func:`live_items` for a paced
    source (a watermark before each wait, so what it closes need not wait for the next tuple
    or the end of input), else ``src.items()``."""
    items = live_items(src)
    return src.items() if items is None else items


def _paced(items: Iterator[Item], rate: float | None, speed: float | None,
           marks: bool, before_wait: Callable[[], None] | None) -> Iterator[Item]:
    import time

    clock, sleep = time.perf_counter, time.sleep
    t0 = clock()
    first: int | None = None
    last: Any = None  # the latest data timestamp yielded
    marked: Any = None  # the latest watermark yielded
    marked_at = t0
    for n, item in enumerate(items):
        if first is None:
            t0, first = clock(), item[0]
        due = n / rate if rate else (item[0] - first) / speed / 1000  # type: ignore[operator]
        now = clock()
        ahead = due - (now - t0)
        if ahead > 0:
            if marks and last is not None and (marked is None or last > marked) and (
                    ahead >= LIVE_MARK_S or now - marked_at >= LIVE_MARK_S):
                marked, marked_at = last, now
                yield last, WATERMARK
            if before_wait is not None:
                before_wait()
            sleep(ahead)  # pacing: the tuple is due then (a replay's wall-clock schedule)
        if item[1] is not WATERMARK:
            last = item[0]
        else:
            marked = item[0]
        yield item


def _reorder(src: Source, raw: Iterator[tuple[Any, Any, Any]], side: bool = False
             ) -> Iterator[Item]:
    """Hold tuples until the watermark covers them, then release them sorted (ties in arrival
    order): :func:`~stretchflow.io.late.reorder`, W from explicit watermarks, ``max_delay``
    (0 for a sorted source: it only gets here with a late policy) and the idle timeout."""
    delay = src.max_delay if src.max_delay is not None else (0 if src.sorted else None)
    if src.idle_timeout is not None and delay != 0:
        raw = idle_marked(raw, src.idle_timeout, src.name)
    return reorder(src, raw, delay=delay, side=side)


class LateSource(Source):
    """The late-data stream of a ``late="side"`` source (``flow.source(src).late()``): the
    same input read again through the same reordering, yielding only the tuples found behind
    the watermark, each as ``(W, record)`` with W that watermark, plus the watermarks. It
    needs an input that can be read again and a deterministic watermark (no idle timeout),
    so that both passes find the same late tuples; anything else is an error here."""

    def __init__(self, source: Source):
        why = ("its input cannot be read twice (a one-shot iterator or stream; give a list "
               "or a function returning a new iterator)" if not source.rereadable
               else "its idle timeout makes lateness depend on wall-clock time, so a second "
               "pass would not find the same late tuples" if source.idle_timeout is not None
               else None)
        if why:
            raise ValueError(f"source {source.name!r}: late='side' cannot be used: {why}")
        self.source = source
        super().__init__(f"{source.name}-late", "ts", True)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        return self.source._raw()

    def describe_where(self, where: Any) -> str:
        return self.source.describe_where(where)

    def items(self) -> Iterator[Item]:
        src = self.source
        return _reorder(src, src._raw(), side=True)


class JsonLines(FileInput, Source):
    """One JSON object per line. Blank lines are skipped; anything else that is not a JSON
    object with an integer timestamp is an error naming the file and line."""

    def __init__(self, path: str | os.PathLike, *, ts: str | Callable[[Any], Any] = "ts",
                 sorted: bool = True, watermark: str | None = None,  # noqa: A002
                 name: str | None = None, **event_time: Any):
        self.path, self.spec = path_of(path)  # a URL, stdin (-) or a local path
        super().__init__(name or name_of(self.spec), ts, sorted, watermark, **event_time)

    #: a batch holds at most about this many bytes of lines (unless one line is longer);
    #: :func:`.batches.chunk_bytes` caps it, for the columnar path's peak memory (1 MiB, or
    #: 4 MiB for a wide batch)
    batch_bytes = 1 << 22

    def describe_where(self, where: Any) -> str:
        return self._where(where)

    def batches(self, rows: int = WIDE, tables: bool = True) -> Iterator[Batch] | None:
        """Batches read by Arrow's multithreaded JSON parser (``tables=False``: by orjson,
        rows only); None with a watermark field (explicit watermarks are per record) or when
        :meth:`Source.batches` says so."""
        if not self._batchable(rows) or self.watermark_field is not None:
            return None
        from .batches import jsonl_batches, jsonl_row_batches

        if not tables:
            return jsonl_row_batches(self, rows, self.batch_bytes)
        return jsonl_batches(self, rows, self.batch_bytes)

    def _open(self) -> Any:
        return self._open_stream()  # decompressed; a part directory's parts one after another

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


class _Arrow(FileInput, Source):
    """Files pyarrow reads in record batches (CSV, Parquet); rows are dicts."""

    gil_bound = False  # Arrow decodes it, the GIL released, on Arrow's own thread pool

    def __init__(self, path: str | os.PathLike, *, ts: str | Callable[[Any], Any] = "ts",
                 sorted: bool = True, name: str | None = None,  # noqa: A002
                 **event_time: Any):
        self.path, self.spec = path_of(path)
        super().__init__(name or name_of(self.spec), ts, sorted, None, **event_time)

    def describe_where(self, where: Any) -> str:
        return self._where(where, row=True)

    #: rows of a record batch the tuple path reads (a list of dicts at a time)
    ROWS = 8192

    def _batches(self, rows: int) -> Iterator[Any]:
        """The file's record batches of about ``rows`` rows (a subclass reads them; CSV's
        are its blocks whatever ``rows`` is)."""
        raise NotImplementedError

    def batches(self, rows: int = WIDE, tables: bool = True) -> Iterator[Batch] | None:
        """One batch per Arrow record batch (cut to at most ``rows`` tuples), or None when
        :meth:`Source.batches` says so. The table is the record batch itself, so it is made
        whatever ``tables`` says (a reader of rows gets ``to_pylist``'s dicts)."""
        if not self._batchable(rows):
            return None
        from .batches import arrow_batches

        return arrow_batches(self, rows)

    def _record_batches(self, rows: int = ROWS) -> Iterator[tuple[int, Any]]:
        """``(rows before it, record batch)`` pairs, with the tuple path's errors for a missing
        file, a missing timestamp column and a file pyarrow cannot read (shared by
        :meth:`_raw` and the batch reader, so both fail alike); Parquet's of ``rows`` rows,
        at least :data:`ROWS` (the batch reader asks for its batches' size: 8 192-row pieces
        cost a columnar flow a third of its time at 10 M bids)."""
        ts_f = self.ts_field
        row = 0
        try:
            # never under ROWS: vsn's 4 096-tuple batches read 4 096 rows at a time made its
            # columnar flows 15-30 % slower on Parquet than cut from 8 192-row batches
            for batch in self._batches(max(rows, self.ROWS)):
                if self.ts_fn is None and ts_f not in batch.schema.names:
                    raise self._error(row + 1, f"missing timestamp column {ts_f!r}")
                # a timestamp[unit, tz] column as int64 ms here, so both paths see the same
                yield row, ms_timestamps(batch, ts_f)
                row += batch.num_rows
        except SourceError:
            raise
        except Exception as e:  # pyarrow's parse errors carry the reason; name the file
            raise self._error(row + 1, f"cannot read: {e}") from e

    def _pylist(self, batch: Any, row: int) -> list[Any]:
        """The rows of a record batch as dicts; ``row``: rows before it (for the error)."""
        try:
            return pylist(batch)
        except Exception as e:
            raise self._error(row + 1, f"cannot read: {e}") from e

    def _rows(self, batch: Any, row: int) -> Iterator[tuple[Any, Any, Any]]:
        """The per-record reading of a record batch whose first row is number ``row + 1``."""
        ts_f = self.ts_field
        for rec in self._pylist(batch, row):
            row += 1
            ts = rec.get(ts_f)
            if type(ts) is not int:
                ts = (self._ts_of(rec, row) if ts is not None or self.ts_fn is not None
                      else self._null_ts(row, rec))
            yield ts, rec, row

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        for row, batch in self._record_batches():
            yield from self._rows(batch, row)
            self.read = row + batch.num_rows

    def _null_ts(self, row: int, rec: Any) -> int:
        raise self._error(row, f"missing timestamp field {self.ts_field!r}", rec)


class Csv(_Arrow):
    """CSV with a header line, read with pyarrow (column types inferred)."""

    def _batches(self, rows: int) -> Iterator[Any]:
        import pyarrow.csv as pcsv

        return self._part_batches(lambda f: pcsv.open_csv(arrow_stream(f, self.name)))


class Parquet(_Arrow):
    """A Parquet file, read batch by batch."""

    def _batches(self, rows: int) -> Iterator[Any]:
        return self._part_batches(lambda f: self._file(f).iter_batches(batch_size=rows))

    def _file(self, f: Any) -> Any:
        """One file for reading. A local file is read without pre-buffering: pyarrow (26)
        keeps every pre-buffered range of the file allocated until the reader is closed, so
        the reader's memory grew with the file (iterating 1, 10 and 20 M bids held 107, 203
        and 287 MB; 139 MB at 20 M without it, and no slower: 1.6-1.8 s against 2.0 s). An
        object store's file keeps it (one request per column chunk otherwise; unmeasured)."""
        import pyarrow.parquet as pq

        src = open_random(f, self.name)
        return pq.ParquetFile(src, pre_buffer=not isinstance(src, str))


class IterableSource(Source):
    """Records from a Python iterable (or a zero-argument callable returning one, so the flow
    can run more than once). Records are dicts with a timestamp field, or anything when ``ts``
    is a function of the record; :class:`Watermark` objects are explicit watermarks."""

    def __init__(self, data: Iterable[Any] | Callable[[], Iterable[Any]], *,
                 ts: str | Callable[[Any], Any] = "ts", sorted: bool = True,  # noqa: A002
                 name: str = "iterable", **event_time: Any):
        self.data = data
        super().__init__(name, ts, sorted, None, **event_time)

    @property
    def rereadable(self) -> bool:  # type: ignore[override]
        """A callable or a collection can be read again; a one-shot iterator cannot."""
        return callable(self.data) or iter(self.data) is not self.data

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        data = iter(self.data() if callable(self.data) else self.data)
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
            yield self._ts_of(rec, n), rec, n
        self.read = n


class Generated(Source):
    """A built-in data generator (``tweets``, ``bandjoin``, ``trades``, ``nexmark``) as a
    source.

    For ``bandjoin`` pick the stream with ``stream="left"`` or ``"right"``, for ``nexmark``
    with ``stream="persons"``, ``"auctions"`` or ``"bids"``.
    """

    def __init__(self, generator: str, *, rows: int, seed: int = 0, stream: str | None = None,
                 name: str | None = None, **params: Any):
        # imported here, not at the first tuple: its libraries (pyarrow) then load before
        # the run, whose collections skip the heap it started with (Flow.run, gc_hold.py)
        from .generators import generator as check
        from .generators import stream_index

        self._make = check(generator)
        self._index = stream_index(generator, stream)
        self.generator = generator
        self.rows = rows
        self.seed = seed
        self.stream = stream
        self.params = params
        super().__init__(name or generator + (f"-{stream}" if stream else ""), "ts", True)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        table = self._make(rows=self.rows, seed=self.seed, **self.params)
        if self._index is not None:
            table = table[self._index]
        row = 0
        for batch in table.to_batches(max_chunksize=8192):
            for rec in pylist(batch):
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

    def __init__(self, path: str | os.PathLike, *, ts: str | Callable[[Any], Any] = "ts",
                 sorted: bool = True, name: str | None = None,  # noqa: A002
                 **event_time: Any):
        self.path = Path(path)
        super().__init__(name or self.path.name, ts, sorted, None, **event_time)

    def describe_where(self, where: Any) -> str:
        part, w = where
        return part.describe_where(w)

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        from .parts import committed_parts

        for _, f in committed_parts(self.path):
            part = open_source(f, ts=self.ts_fn or self.ts_field)
            for ts, rec, w in part._raw():
                yield ts, rec, (part, w)


def open_source(path: str | os.PathLike, *, format: str | None = None,  # noqa: A002
                **kw: Any) -> Source:
    """A file source chosen by name (:mod:`stretchflow.io.files`): .jsonl/.json/.ndjson, .csv
    or .parquet, optionally gzip/zstd compressed (.jsonl.gz, .csv.zst); ``-`` for standard
    input (JSON Lines unless ``format`` says, e.g. ``"csv"``, ``"jsonl.gz"``); an
    ``s3://`` (or other pyarrow.fs) URL; a Spark output directory (``part-*`` files and
    ``_SUCCESS``); a stretchflow part directory (:mod:`stretchflow.io.parts`). Message buses:
    :func:`stretchflow.io.endpoints.open_input`."""
    from .files import is_url, resolve
    from .parts import is_part_dir

    spec = path_of(path)[1]
    if spec != "-" and not is_url(spec) and is_part_dir(spec):
        return PartDirectory(spec, **kw)
    inp = resolve(spec, kw.get("name") or name_of(spec), format)
    cls = {".jsonl": JsonLines, ".csv": Csv, ".parquet": Parquet}[inp.fmt]
    src = cls(spec, **kw)
    src.input_format, src._inp = format, inp
    return src


def read_batches(source: Any, rows: int, tables: bool) -> Iterator[Batch] | None:
    """``source.batches(rows)``, asked for rows only (``tables=False``) when no reader needs
    Arrow tables; a source class of its own whose ``batches`` takes no ``tables`` (or that
    has no ``batches``) is asked as before. None: the source gives no batches."""
    import inspect

    batches = getattr(source, "batches", None)
    if batches is None:
        return None
    if not tables and "tables" in inspect.signature(batches).parameters:
        return batches(rows, tables=False)
    return batches(rows)
