"""Sources and sinks; ``stretchflow.io.generators`` holds the built-in data generators."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from .endpoints import open_input, open_output
from .follow import Followed, follow
from .redis_streams import RedisStream, RedisStreamSink
from .sinks import (
    Callback,
    Collector,
    CsvSink,
    JsonLinesSink,
    ParquetSink,
    Sink,
    Stdout,
    open_sink,
    to_record,
)
from .sources import (
    Csv,
    Generated,
    IterableSource,
    JsonLines,
    LateSource,
    Parquet,
    RateSource,
    Source,
    open_source,
)


def jsonl(path: str | os.PathLike, **kw: Any) -> JsonLines:
    """A JSON Lines file source (sorted by ``ts`` unless ``sorted=False`` or ``max_delay``;
    every source takes ``max_delay``, ``idle_timeout`` and ``late``: docs/event-time.md)."""
    return JsonLines(path, **kw)


def csv(path: str | os.PathLike, **kw: Any) -> Csv:
    """A CSV file source read through pyarrow."""
    return Csv(path, **kw)


def parquet(path: str | os.PathLike, **kw: Any) -> Parquet:
    """A Parquet file source read through pyarrow."""
    return Parquet(path, **kw)


def iterable(data: Iterable[Any] | Callable[[], Iterable[Any]], **kw: Any) -> IterableSource:
    """A source over a Python iterable of records (and :class:`Watermark` objects)."""
    return IterableSource(data, **kw)


def generated(generator: str, **kw: Any) -> Generated:
    """A built-in generator (``tweets``, ``bandjoin``, ``trades``, ``nexmark``) as a source;
    ``stream=`` picks one table of bandjoin (``left``, ``right``) or nexmark (``persons``,
    ``auctions``, ``bids``)."""
    return Generated(generator, **kw)


def rate(rows_per_second: int, **kw: Any) -> RateSource:
    """Spark's rate source (a load generator; see :class:`RateSource`)."""
    return RateSource(rows_per_second, **kw)


def collect() -> Collector:
    """An in-memory sink."""
    return Collector()


def callback(fn: Callable[[int, Any], None]) -> Callback:
    """A sink calling ``fn(ts, payload)`` for each output tuple."""
    return Callback(fn)


def stdout() -> Stdout:
    """JSON Lines on standard output."""
    return Stdout()


def jsonl_sink(path: str | os.PathLike) -> JsonLinesSink:
    return JsonLinesSink(path)


__all__ = [
    "Callback", "Collector", "Csv", "CsvSink", "Generated", "IterableSource", "JsonLines",
    "JsonLinesSink", "LateSource", "Parquet", "ParquetSink", "RateSource", "Sink", "Source",
    "Stdout", "callback", "collect", "csv", "generated", "iterable", "jsonl", "jsonl_sink",
    "open_sink", "open_source", "open_input", "open_output", "follow", "Followed",
    "RedisStream", "RedisStreamSink", "parquet", "rate", "stdout", "to_record",
]
