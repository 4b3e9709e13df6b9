"""Inputs (issue #19): compressed files, standard input, Parquet/Arrow timestamp columns,
Spark output directories and file:// URLs, on the tuple and the batch path alike."""

from __future__ import annotations

import gzip
import io
import json
import sys
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from stretchflow.cli import main
from stretchflow.errors import SourceError
from stretchflow.io.generators import generate

RECS = [{"ts": 1, "text": "a b"}, {"ts": 1, "text": "b"}, {"ts": 5, "text": "c"},
        {"ts": 9, "text": "a"}]


def jsonl_bytes(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def compress(data: bytes, codec: str) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def batch_items(src):
    return [it for b in src.batches(rows=2) for it in b.items()]


@pytest.mark.parametrize("name,codec", [("in.jsonl.gz", "gzip"), ("in.jsonl.zst", "zstd"),
                                        ("in.ndjson.zstd", "zstd"), ("in.csv.gz", "gzip")])
def test_compressed_files_read_as_the_plain_file(tmp_path, name, codec):
    if name.startswith("in.csv"):
        buf = io.BytesIO()
        pcsv.write_csv(pa.Table.from_pylist(RECS), buf)
        data, plain = buf.getvalue(), tmp_path / "plain.csv"
    else:
        data, plain = jsonl_bytes(RECS), tmp_path / "plain.jsonl"
    plain.write_bytes(data)
    (tmp_path / name).write_bytes(compress(data, codec))
    want = list(sf.io.open_source(plain).items())
    assert [ts for ts, _ in want] == [1, 1, 5, 9]
    src = sf.io.open_source(tmp_path / name)
    assert list(src.items()) == want
    assert batch_items(sf.io.open_source(tmp_path / name)) == want


@pytest.mark.parametrize("path_", ["tuple", "batch"])
def test_error_in_a_compressed_file_names_its_decompressed_line(tmp_path, path_):
    data = jsonl_bytes(RECS[:2]) + b"{oops\n" + jsonl_bytes(RECS[2:])
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress(data))
    src = sf.io.open_source(tmp_path / "in.jsonl.gz")
    with pytest.raises(SourceError, match=r"in\.jsonl\.gz:3: malformed JSON"):
        list(src.items()) if path_ == "tuple" else batch_items(src)


def test_unknown_and_compressed_parquet_names_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown input format '\.txt'"):
        sf.io.open_source(tmp_path / "in.txt.gz")
    with pytest.raises(ValueError, match="Parquet file is compressed inside"):
        sf.io.open_source(tmp_path / "in.parquet.gz")


def test_missing_compressed_file_is_one_clear_error(tmp_path):
    with pytest.raises(SourceError, match="cannot open: no such file"):
        list(sf.io.open_source(tmp_path / "nope.jsonl.zst").items())


# -- standard input -----------------------------------------------------------------------------
def fake_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize("codec", [None, "gzip", "zstd"])
def test_stdin_is_json_lines_and_compression_is_sniffed(monkeypatch, codec):
    data = jsonl_bytes(RECS)
    fake_stdin(monkeypatch, compress(data, codec) if codec else data)
    src = sf.io.open_source("-")
    assert src.name == "stdin"
    assert [(ts, p["text"]) for ts, p in src.items()] == [(r["ts"], r["text"]) for r in RECS]


def test_stdin_is_one_shot(monkeypatch):
    fake_stdin(monkeypatch, jsonl_bytes(RECS))
    src = sf.io.open_source("-")
    assert len(list(src.items())) == 4
    with pytest.raises(SourceError, match="standard input was read already: it is a one-shot"):
        list(src.items())


def test_stdin_batches_and_errors_name_stdin(monkeypatch):
    fake_stdin(monkeypatch, jsonl_bytes(RECS))
    assert [ts for ts, _ in batch_items(sf.io.open_source("-"))] == [1, 1, 5, 9]
    fake_stdin(monkeypatch, jsonl_bytes(RECS[:1]) + b"[1]\n")
    with pytest.raises(SourceError, match="<stdin>:2: record is not an object"):
        list(sf.io.open_source("-").items())


def test_stdin_csv_by_format_and_parquet_refused(monkeypatch):
    buf = io.BytesIO()
    pcsv.write_csv(pa.Table.from_pylist(RECS), buf)
    fake_stdin(monkeypatch, buf.getvalue())
    assert [ts for ts, _ in sf.io.open_source("-", format="csv").items()] == [1, 1, 5, 9]
    with pytest.raises(ValueError, match="Parquet needs random access"):
        sf.io.open_source("-", format="parquet")


def test_cli_input_dash_equals_the_file_run(tmp_path, monkeypatch):
    tweets = generate("tweets", rows=600, seed=3, out=tmp_path / "tw.jsonl")[0]
    assert main(["run", "wordcount", "--input", str(tweets), "--output",
                 str(tmp_path / "a.jsonl"), "-q"]) == 0
    fake_stdin(monkeypatch, gzip.compress(tweets.read_bytes()))
    assert main(["run", "wordcount", "--input", "-", "--output", str(tmp_path / "b.jsonl"),
                 "-q"]) == 0
    a = (tmp_path / "a.jsonl").read_bytes()
    assert a and a == (tmp_path / "b.jsonl").read_bytes()


# -- timestamp columns --------------------------------------------------------------------------
BASE = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STEPS = [timedelta(0), timedelta(milliseconds=1, microseconds=999), timedelta(seconds=61),
         timedelta(minutes=5, microseconds=1)]


@pytest.mark.parametrize("unit,tz", [("ms", None), ("us", "UTC"), ("ns", "Europe/Paris"),
                                     ("s", None)])
def test_parquet_timestamp_column_is_int_ms_on_both_paths(tmp_path, unit, tz):
    per = {"s": timedelta(seconds=1), "ms": timedelta(milliseconds=1),
           "us": timedelta(microseconds=1), "ns": timedelta(microseconds=1)}[unit]
    stamps = [BASE + (d // per) * per for d in STEPS]  # what the unit can hold
    values = [s if tz else s.replace(tzinfo=None) for s in stamps]
    table = pa.table({"ts": pa.array(values, pa.timestamp(unit, tz)),
                      "text": ["a", "b", "c", "d"]})
    pq.write_table(table, tmp_path / "t.parquet")
    want = [(s - EPOCH) // timedelta(milliseconds=1) for s in stamps]  # floor to the ms
    assert want[1] - want[0] == (1 if unit != "s" else 0)
    tuples = list(sf.io.open_source(tmp_path / "t.parquet").items())
    assert [ts for ts, _ in tuples] == want
    assert all(type(p["ts"]) is int for _, p in tuples)
    assert batch_items(sf.io.open_source(tmp_path / "t.parquet")) == tuples


def test_timestamps_before_the_epoch_floor_to_the_ms(tmp_path):
    col = pa.array([-1500, -1000, 1], pa.timestamp("us"))  # -1.5 ms, -1 ms, +0.001 ms
    pq.write_table(pa.table({"ts": col}), tmp_path / "t.parquet")
    assert [ts for ts, _ in sf.io.open_source(tmp_path / "t.parquet").items()] == [-2, -1, 0]


def test_null_timestamp_is_still_the_missing_field_error(tmp_path):
    col = pa.array([BASE, None], pa.timestamp("ms", "UTC"))
    pq.write_table(pa.table({"ts": col}), tmp_path / "t.parquet")
    with pytest.raises(SourceError, match="t.parquet row 2: missing timestamp field 'ts'"):
        list(sf.io.open_source(tmp_path / "t.parquet").items())


def test_wordcount_on_timestamp_parquet_equals_the_int_ms_run(tmp_path):
    tweets = generate("tweets", rows=500, seed=5, out=tmp_path / "tw.parquet")[0]
    table = pq.read_table(tweets)
    as_time = table.set_column(table.schema.get_field_index("ts"), "ts",
                               table.column("ts").cast(pa.timestamp("ms", "UTC")))
    pq.write_table(as_time, tmp_path / "tw-time.parquet")
    outs = []
    for name, engine in [("tw.parquet", "reference"), ("tw-time.parquet", "reference"),
                         ("tw-time.parquet", "vsn")]:
        out = tmp_path / f"out-{engine}-{name}.jsonl"
        assert main(["run", "wordcount", "--input", str(tmp_path / name), "--output", str(out),
                     "--engine", engine, "-q"]) == 0
        outs.append(out.read_bytes())
    assert outs[0] and outs[0] == outs[1] == outs[2]


# -- Spark output directories -------------------------------------------------------------------
def spark_dir(tmp_path, tables, success=True, fmt="parquet"):
    """A directory laid out as Spark writes one: part-NNNNN-UUID-c000.snappy.parquet (or
    .json), hidden .crc files, _SUCCESS."""
    d = tmp_path / "spark.out"
    d.mkdir()
    for i, t in enumerate(tables):
        name = f"part-{i:05d}-0f1e2d3c-c000." + ("snappy.parquet" if fmt == "parquet" else fmt)
        if fmt == "parquet":
            pq.write_table(t, d / name)
        else:
            data = jsonl_bytes(t)
            (d / name).write_bytes(data.rstrip(b"\n") if i == 0 else data)  # no last newline
        (d / f".{name}.crc").write_bytes(b"crc")
    if success:
        (d / "_SUCCESS").write_bytes(b"")
    return d


def test_spark_parquet_dir_reads_parts_in_name_order(tmp_path):
    rows = [{"ts": t, "text": f"w{t}"} for t in range(10)]
    first = pa.Table.from_pylist(rows[:4])
    parts = [first, first.slice(0, 0), pa.Table.from_pylist(rows[4:])]  # an empty part too
    d = spark_dir(tmp_path, parts)
    got = list(sf.io.open_source(d).items())
    assert [ts for ts, _ in got] == list(range(10))
    assert batch_items(sf.io.open_source(d)) == got


def test_spark_dir_errors_name_the_part_and_its_row(tmp_path):
    parts = [pa.Table.from_pylist([{"ts": 1}, {"ts": 2}]),
             pa.Table.from_pylist([{"ts": 3}, {"ts": 1}])]
    d = spark_dir(tmp_path, parts)
    with pytest.raises(SourceError, match=r"part-00001-0f1e2d3c-c000\.snappy\.parquet row 2: "
                                          r"timestamp goes back"):
        list(sf.io.open_source(d).items())


def test_spark_json_dir_and_a_part_without_final_newline(tmp_path):
    d = spark_dir(tmp_path, [RECS[:2], RECS[2:]], fmt="json")
    got = list(sf.io.open_source(d).items())
    assert [ts for ts, _ in got] == [1, 1, 5, 9]
    assert batch_items(sf.io.open_source(d)) == got
    (d / "part-00001-0f1e2d3c-c000.json").write_bytes(b'{"ts": 5}\n{bad\n')
    with pytest.raises(SourceError, match=r"part-00001-0f1e2d3c-c000\.json:2: malformed JSON"):
        list(sf.io.open_source(d).items())


def test_spark_dir_with_success_and_no_part_is_empty(tmp_path):
    d = spark_dir(tmp_path, [])
    assert list(sf.io.open_source(d).items()) == []


def test_csv_timestamps_inferred_by_arrow_become_ms(tmp_path):
    (tmp_path / "t.csv").write_text("ts,text\n2024-03-01 12:00:00,a\n2024-03-01 12:00:01,b\n")
    want = [(BASE - EPOCH) // timedelta(milliseconds=1) + k for k in (0, 1000)]
    assert [ts for ts, _ in sf.io.open_source(tmp_path / "t.csv").items()] == want
    assert [ts for ts, _ in batch_items(sf.io.open_source(tmp_path / "t.csv"))] == want


def test_spark_dir_without_success_is_refused(tmp_path):
    d = spark_dir(tmp_path, [pa.Table.from_pylist(RECS)], success=False)
    with pytest.raises(SourceError, match="no _SUCCESS marker"):
        sf.io.open_source(d)


def test_a_plain_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x")
    with pytest.raises(SourceError, match="neither a Spark output directory"):
        sf.io.open_source(tmp_path / "d")


def test_stretchflow_part_dirs_still_open_as_before(tmp_path):
    from stretchflow.io.parts import PartWriter
    from stretchflow.io.sources import PartDirectory

    w = PartWriter(tmp_path / "out.jsonl")
    w.commit(0, [(1, {"a": 1})])
    w.commit(2, [(4, {"a": 2})])
    w.close()
    src = sf.io.open_source(tmp_path / "out.jsonl")
    assert isinstance(src, PartDirectory)
    assert [ts for ts, _ in src.items()] == [1, 4]


# -- file:// URLs -------------------------------------------------------------------------------
def test_file_urls_for_input_and_output(tmp_path):
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(RECS)))
    flow = sf.Flow()
    flow.source(sf.io.open_source(f"file://{tmp_path}/in.jsonl.gz")).sink(
        f"file://{tmp_path}/out.jsonl")
    flow.run()
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(x)["ts"] for x in lines] == [1, 1, 5, 9]
