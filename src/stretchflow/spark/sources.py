"""Inputs and generated data for the Spark engine.

* :func:`open_input`: a file as for the local engines; a directory of JSON Lines files is a
  growing stream (the streaming path); ``rate:R[:N]`` is Spark's rate source (streaming); a
  directory of Parquet part files (what Spark writes, e.g. ``generate --engine spark``) is a
  bounded input read part by part in name order.
* :func:`generate_with_spark`: a built-in generator's table written as Parquet by Spark,
  sorted by ts across the part files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SourceError
from ..io.sources import Parquet, Source, open_source


class ParquetDir(Parquet):
    """A directory of Parquet part files, read in file-name order as one sorted source."""

    def _parts(self) -> list[Path]:
        parts = sorted(p for p in self.path.glob("*.parquet") if not p.name.startswith("."))
        if not parts:
            raise SourceError(self.name, str(self.path), "no .parquet files in the directory")
        return parts

    def _batches(self, rows: int) -> Iterator[Any]:
        import pyarrow.parquet as pq

        for part in self._parts():
            yield from pq.ParquetFile(str(part)).iter_batches(batch_size=rows)


def open_input(path: str | os.PathLike) -> Source:
    """A source for ``--input PATH`` on the spark engine (see the module docstring);
    ``rate:R[:N]`` is Spark's rate source, R rows per second, N rows (unbounded without),
    tweet payloads (:func:`~stretchflow.io.sources.rate_tweet`)."""
    from ..io.sources import JsonLines, RateSource

    if isinstance(path, str) and path.startswith("rate:"):
        parts = path.split(":")[1:]
        try:
            if not 1 <= len(parts) <= 2:
                raise ValueError
            rps, rows = int(parts[0]), (int(parts[1]) if len(parts) == 2 else None)
        except ValueError:
            raise ValueError(f"--input {path!r}: the rate source is rate:ROWS_PER_SECOND or "
                             f"rate:ROWS_PER_SECOND:ROWS") from None
        return RateSource(rps, rows=rows, payload="tweet")
    p = Path(path)
    if p.is_dir():
        if any(p.glob("*.parquet")):
            return ParquetDir(p, name=p.name)
        return JsonLines(p, name=p.name)  # a growing stream of files, in name order
    return open_source(p)


def generate_with_spark(kind: str, rows: int, seed: int, out: str | os.PathLike,
                        master: str | None = None, **params: Any) -> list[Path]:
    """Generates ``kind`` and writes it through Spark as Parquet directories (``out`` must end
    in .parquet; a generator of several streams writes ``<stem>-<stream>.parquet`` for each,
    e.g. bandjoin ``<stem>-left.parquet`` and ``<stem>-right.parquet``)."""
    from ..io.generators import generator, outputs
    from .session import get_session

    out = Path(out)
    if out.suffix.lower() != ".parquet":
        raise ValueError(f"generate --engine spark writes Parquet: {out} must end in .parquet")
    tables = outputs(kind, generator(kind)(rows, seed=seed, **params), out)
    spark = get_session(master)
    for table, path in tables:
        # range-partitioned by ts, part files numbered in ts order: read in name order,
        # the directory is one ts-sorted stream
        (spark.createDataFrame(table).orderBy("ts").write.mode("overwrite")
         .parquet(str(path.resolve())))
    return [p for _, p in tables]
