"""The columnar path's memory is bounded under a fast source, counted in bytes and tuples, not
in time or RSS (issue #16; docs/columnar.md, "Memory").

* The JSON Lines chunker reads about one chunk ahead, whatever byte bound the source allows:
  what it has read and not yet handed out stays under ``2 * (max_bytes + min_read)`` bytes,
  and, when the row bound cuts first, near ``rows`` lines (before, it read ``max_bytes``,
  8 MiB, at a time).
* A batch holds at most :data:`~stretchflow.io.batches.CHUNK_BYTES` bytes of lines, or
  :data:`~stretchflow.io.batches.WIDE_CHUNK_BYTES` when asked for a wide batch (a flow of
  column expressions).
* A local Parquet file is read in Arrow memory of about a row group, whatever its length.
* Through the reference engine, the tuples read from the file and not yet aggregated stay
  under a few batches' worth however fast the file is read.
"""

from __future__ import annotations

import io
import random

import orjson
import pytest

import stretchflow as sf
from stretchflow.io import batches
from stretchflow.io.batches import _line_chunks
from stretchflow.io.sources import JsonLines
from stretchflow.operators.columnar import ColumnarSlicedInstance
from stretchflow.queries import build_query


class _Counting:
    """A file that counts the bytes and lines handed out by ``read`` (the reader's intake)."""

    def __init__(self, data: bytes):
        self._f = io.BytesIO(data)
        self.bytes = self.lines = 0
        self.reads: list[int] = []

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *_: object) -> None:
        self._f.close()

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self.reads.append(n)
        self.bytes += len(b)
        self.lines += b.count(b"\n")
        return b


def _lines(rnd: random.Random, n: int, lo: int, hi: int) -> bytes:
    """``n`` JSON lines of ``lo``..``hi`` bytes each (newline included)."""
    out = []
    for i in range(n):
        head = orjson.dumps({"ts": i, "text": ""})
        pad = rnd.randint(lo, hi) - len(head) - 1
        out.append(orjson.dumps({"ts": i, "text": "w" * max(0, pad)}))
    return b"\n".join(out) + b"\n"


def _read_ahead(f: _Counting, rows: int, max_bytes: int, min_read: int) -> tuple[int, list]:
    """The most bytes the chunker had read and not handed out yet, over a whole file."""
    worst, out, chunks = 0, 0, []
    for chunk, ends in _line_chunks(f, rows, max_bytes, min_read):
        out += len(chunk)
        worst = max(worst, f.bytes - out)
        chunks.append((chunk, ends.tolist()))
    return worst, chunks


def test_chunker_reads_about_one_row_bound_chunk_ahead_not_max_bytes():
    rnd = random.Random(1)
    data = _lines(rnd, 3000, 30, 200)
    rows, max_bytes, min_read = 50, 1 << 20, 256
    worst, chunks = _read_ahead(_Counting(data), rows, max_bytes, min_read)
    assert b"".join(c for c, _ in chunks) == data
    assert [len(e) for _, e in chunks] == [rows] * 60
    # 50 lines are at most 10 000 bytes: reading max_bytes (1 MiB, the whole file) at a time
    # would hold everything; the estimate from the lines seen reads about one chunk
    assert worst <= 2 * (rows * 200 + min_read)


def test_chunker_read_ahead_is_bounded_by_the_byte_bound():
    rnd = random.Random(2)
    data = _lines(rnd, 4000, 40, 120)
    for max_bytes in (300, 4000, 20_000):
        f = _Counting(data)
        worst, chunks = _read_ahead(f, 10**6, max_bytes, 64 << 10)
        assert b"".join(c for c, _ in chunks) == data
        assert all(len(c) <= max_bytes for c, _ in chunks)
        # min_read is clamped to max_bytes: a small bound reads no more than one chunk ahead
        assert worst <= 2 * (max_bytes + min(64 << 10, max_bytes))
        assert max(f.reads) <= 2 * (max_bytes + min(64 << 10, max_bytes))


def test_a_line_longer_than_everything_is_read_in_growing_reads():
    """One 2 MB line among short ones: read with doubling, so the number of reads grows with
    the logarithm of the line's length, not linearly (no quadratic copying)."""
    data = b'{"ts":1}\n' + b'{"ts":2,"t":"' + b"x" * 2_000_000 + b'"}\n' + b'{"ts":3}\n'
    f = _Counting(data)
    chunks = list(_line_chunks(f, 4, 1000, 256))
    assert b"".join(c for c, _ in chunks) == data
    assert len(f.reads) < 40


@pytest.mark.parametrize("seed", range(4))
def test_where_chunks_are_cut_does_not_depend_on_the_read_sizes(seed):
    rnd = random.Random(seed)
    data = _lines(rnd, 700, 20, 400)
    rows, max_bytes = rnd.choice([1, 7, 100]), rnd.choice([500, 3000, 1 << 20])
    cuts = [_read_ahead(_Counting(data), rows, max_bytes, m)[1] for m in (1, 97, 4096, 1 << 20)]
    assert cuts[0] == cuts[1] == cuts[2] == cuts[3]


@pytest.mark.parametrize("rows,cap", [(batches.WIDE_ROWS - 1, 5000),
                                      (batches.WIDE_ROWS, 20_000), (10**6, 20_000)])
def test_batches_hold_at_most_chunk_bytes(rows, cap, tmp_path, monkeypatch):
    """CHUNK_BYTES bounds a batch of fewer than WIDE_ROWS rows, WIDE_CHUNK_BYTES a wide one."""
    monkeypatch.setattr(batches, "CHUNK_BYTES", 5000)
    monkeypatch.setattr(batches, "WIDE_CHUNK_BYTES", 20_000)
    path = tmp_path / "t.jsonl"
    path.write_bytes(_lines(random.Random(3), 8000, 40, 90))
    sizes = [sum(len(orjson.dumps(p)) + 1 for p in b.payloads)
             for b in JsonLines(path).batches(rows)]
    assert len(sizes) > 20 and cap * 0.8 < max(sizes) <= cap


def test_reference_engine_keeps_few_batches_in_flight_under_a_fast_source(tmp_path,
                                                                          monkeypatch):
    """Lines read from the file minus tuples the columnar A+ has taken, at every batch it
    takes: at most the batch itself, the batches read ahead of it (a queue of one and the
    one being parsed) and the chunker's buffer — a count of tuples, whatever the speed."""
    line, per_chunk = 100, 40
    cap = line * per_chunk
    monkeypatch.setattr(batches, "CHUNK_BYTES", cap)
    lines = []
    for i in range(5000):  # every line exactly `line` bytes: tuples per chunk are exact
        head = orjson.dumps({"ts": i * 50, "text": ""})
        lines.append(orjson.dumps({"ts": i * 50, "text": "w" * (line - 1 - len(head))}))
    data = b"\n".join(lines) + b"\n"
    assert len(data) == 5000 * line
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    src = JsonLines(path)
    counting = _Counting(data)
    monkeypatch.setattr(src, "_open", lambda: counting)
    taken = [0]
    worst = [0]
    process = ColumnarSlicedInstance.process_batch

    def watched(self, batch):
        worst[0] = max(worst[0], counting.lines - taken[0])
        taken[0] += len(batch)
        return process(self, batch)

    monkeypatch.setattr(ColumnarSlicedInstance, "process_batch", watched)
    flow = sf.Flow("wc")
    build_query("wordcount", [flow.source(src)], size=10_000, slide=5_000).collect()
    res = flow.run(engine="reference")
    assert res.extra["paths"] == {"wordcount": "columnar"}
    assert taken[0] == 5000 and counting.lines == 5000
    chunker = 2 * (cap + cap) // line  # min_read is clamped to the byte bound
    assert worst[0] <= 3 * per_chunk + chunker  # 280 of the file's 5000


def test_a_parquet_file_is_read_in_memory_that_does_not_grow_with_the_file(tmp_path):
    """Arrow's allocated bytes while a local Parquet source's batches are read stay those of
    about one row group, whatever the file's length (pre-buffering kept every row group's
    ranges allocated until the end: 185 MB after 20 M bids)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stretchflow.io.sources import Parquet

    def most_allocated(groups: int) -> int:
        n = 20_000
        path = tmp_path / f"b{groups}.parquet"
        with pq.ParquetWriter(path, pa.schema([("ts", pa.int64()), ("x", pa.int64())])) as w:
            for g in range(groups):
                ts = np.arange(g * n, (g + 1) * n, dtype=np.int64)
                w.write_table(pa.table({"ts": ts, "x": ts * 7}), row_group_size=n)
        most = 0
        rows = 0
        for b in Parquet(path).batches(4096):
            rows += len(b)
            most = max(most, pa.total_allocated_bytes())
        assert rows == groups * n
        return most

    small, large = most_allocated(2), most_allocated(40)
    assert large < 2 * small, (small, large)
