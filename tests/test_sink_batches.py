"""Sinks take whole batches (issue #16): ``write_batch`` writes exactly what ``write`` writes
for the batch's tuples — byte for byte for JSON Lines and stdout, equal tables for CSV and
Parquet — and the Arrow fast path is really the one taken where it applies."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stretchflow.batch import Batch
from stretchflow.errors import StretchflowError
from stretchflow.io.json_columns import jsonl_bytes
from stretchflow.io.sinks import (
    Callback,
    Collector,
    CsvSink,
    JsonLinesSink,
    ParquetSink,
    Stdout,
    to_record,
)

# every character orjson treats specially, and the ones a careless escaper might: DEL, the
# JavaScript line separators, astral plane (surrogate pairs in \u escapes), the BMP's edges
ALPHABET = ([chr(c) for c in range(0x20)] + ['"', "\\", "/", "\x7f", "\u2028", "\u2029",
            "\U0001F600", "\U0010FFFF", "\ud7ff", "\ue000", "\uffff", "é", "a", "Z", " ", "0"])
I64 = (-2**63, 2**63 - 1)


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 0, 1, 3, 12])))


def _maybe(rng: random.Random, v):
    return None if rng.random() < 0.15 else v


def _ts(rng: random.Random, n: int) -> np.ndarray:
    return np.sort(np.array([rng.randrange(-2**40, 2**62) for _ in range(n)], dtype=np.int64))


def random_table(rng: random.Random, n: int, *, floats: bool = False,
                 wide_ints: bool = True) -> pa.Table:
    cols = {
        "word": pa.array([_maybe(rng, _text(rng)) for _ in range(n)], pa.string()),
        "ts": pa.array([_text(rng) for _ in range(n)], pa.string()),  # replaced by the tuple's
        "count": pa.array([_maybe(rng, rng.choice([*I64, 0, -1, rng.randrange(*I64)]))
                           for _ in range(n)], pa.int64()),
        "big": pa.array([rng.choice([_text(rng), ""]) for _ in range(n)], pa.large_string()),
        "small": pa.array([_maybe(rng, rng.randrange(-128, 128)) for _ in range(n)], pa.int8()),
        "flag": pa.array([_maybe(rng, rng.random() < 0.5) for _ in range(n)], pa.bool_()),
        "nothing": pa.nulls(n),
        'we"ird\n\u2028 kéy': pa.array([rng.randrange(2**32) for _ in range(n)], pa.uint32()),
    }
    if wide_ints:
        cols["u64"] = pa.array([rng.randrange(2**64) for _ in range(n)], pa.uint64())
    if floats:
        cols["x"] = pa.array([_maybe(rng, rng.choice([0.1, 1e16, -0.0, 1 / 3, 2.5e-308, 7.0]))
                              for _ in range(n)], pa.float64())
    return pa.table(cols)


def _tuple_lines(ts: np.ndarray, table: pa.Table) -> bytes:
    return b"".join(orjson.dumps(to_record(t, p)) + b"\n"
                    for t, p in zip(ts.tolist(), table.to_pylist(), strict=True))


def _jsonl_file(path, batch: Batch, *, as_batch: bool, forbid_orjson: bool = False,
                monkeypatch=None) -> bytes:
    sink = JsonLinesSink(path)
    if forbid_orjson:
        def no_orjson(*a):
            raise AssertionError("the batch went through the per-tuple orjson path")
        monkeypatch.setattr(sink, "_dump", no_orjson)
    sink.open()
    if as_batch:
        sink.write_batch(batch)
    else:
        sink.write(batch.items())
    sink.close()
    assert sink.count == len(batch)
    return path.read_bytes()


# -- JSON Lines --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_jsonl_batch_is_byte_identical_and_vectorized(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 7, 60, 300])
    table, ts = random_table(rng, n), _ts(rng, n)
    got = _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True,
                      forbid_orjson=True, monkeypatch=monkeypatch)
    want = _jsonl_file(tmp_path / "t.jsonl", Batch(ts, table=table), as_batch=False)
    assert got == want
    assert got.count(b"\n") == n


def test_every_special_character_in_one_batch(tmp_path, monkeypatch):
    values = ["".join(ALPHABET), *ALPHABET, "", None, "plain"]
    table = pa.table({"s": values})
    ts = np.arange(len(values), dtype=np.int64)
    got = _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True,
                      forbid_orjson=True, monkeypatch=monkeypatch)
    assert got == _tuple_lines(ts, table)
    assert b'"\\u000b"' in got and b'"\\u001f"' in got and b'"\\b"' in got  # orjson's forms
    assert "\u2028".encode() in got  # written raw, as orjson does


# doubles orjson writes in each of its forms: integral (1.0, 1e+16), shortest round-trip,
# subnormal, the extremes, negative zero, and NaN and the infinities (written null)
FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 7.0, 0.1, 1 / 3, 2.5e-308, 5e-324, -5e-324,
               2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
               1e16, 1e15, 9007199254740993.0, 123456789012345680.0, 1e-7, 2.5e-5, 1e22, 1e21,
               float("nan"), float("inf"), float("-inf"), None]


def test_float_columns_are_vectorized_and_byte_identical(tmp_path, monkeypatch):
    rng = random.Random(99)
    table, ts = random_table(rng, 50, floats=True), _ts(rng, 50)
    got = _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True,
                      forbid_orjson=True, monkeypatch=monkeypatch)
    assert got == _tuple_lines(ts, table)
    # every width, each chunk with nulls, NaN and a non-zero offset
    edges = pa.array(FLOAT_EDGES, pa.float64())
    cols = {"d": edges, "f": edges.cast(pa.float32()), "h": pa.array(
        [0.1, 65504.0, 6e-8, -0.0, 1.0, None] * 4 + [2.0], pa.float16())}
    n = len(FLOAT_EDGES)
    table = pa.concat_tables([pa.table(cols), pa.table(cols)]).slice(3, 2 * n - 5)
    ts = np.arange(2 * n - 5, dtype=np.int64)
    got = _jsonl_file(tmp_path / "e.jsonl", Batch(ts, table=table), as_batch=True,
                      forbid_orjson=True, monkeypatch=monkeypatch)
    assert got == _tuple_lines(ts, table)
    assert b'"d":1.0,' in got and b'"d":-0.0,' in got and b'"d":null,' in got
    assert b'"d":5e-324,' in got and b'"d":1e+16,' in got


@pytest.mark.parametrize("col", [
    pa.array([[1, 2], None]), pa.array([{"a": 1}, {"a": 2}]), pa.array([b"x", b"\x00"]),
    pa.array([1, 2], pa.timestamp("ms")), pa.array(["a", "b"]).dictionary_encode(),
])
def test_other_types_fall_back(tmp_path, col):
    table, ts = pa.table({"k": [1, 2], "c": col}), np.array([3, 4], dtype=np.int64)
    assert jsonl_bytes(ts, table) is None
    try:
        want = _tuple_lines(ts, table)
    except TypeError:  # orjson cannot write bytes: the batch must fail the same way
        with pytest.raises(StretchflowError, match="cannot write output as JSON"):
            _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True)
        return
    assert _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True) == want


def test_chunked_sliced_and_record_batch_tables(tmp_path, monkeypatch):
    rng = random.Random(5)
    parts = [random_table(rng, n) for n in (40, 1, 25)]
    table = pa.concat_tables(parts).slice(7, 50)  # chunk boundaries and a non-zero offset
    assert table.column("word").num_chunks > 1
    ts = _ts(rng, 50)
    want = _tuple_lines(ts, table)
    assert bytes(jsonl_bytes(ts, table)) == want
    assert bytes(jsonl_bytes(ts, table.combine_chunks().to_batches()[0])) == want
    got = _jsonl_file(tmp_path / "b.jsonl", Batch(ts, table=table), as_batch=True,
                      forbid_orjson=True, monkeypatch=monkeypatch)
    assert got == want


def test_edge_shapes(tmp_path):
    ts = np.array([1, 1, 2], dtype=np.int64)
    only_ts = pa.table({"ts": ["a", "b", "c"]})  # the payload's ts is replaced: {"ts":N}
    assert bytes(jsonl_bytes(ts, only_ts)) == b'{"ts":1}\n{"ts":1}\n{"ts":2}\n'
    assert bytes(jsonl_bytes(ts, pa.table({"a": pa.array([1, 2, 3])}).select([]))) == \
        b'{"ts":1}\n{"ts":1}\n{"ts":2}\n'
    assert jsonl_bytes(np.array([], dtype=np.int64), pa.table({"a": pa.array([], pa.int64())})) \
        == b""
    dup = pa.table([pa.array([1, 2, 3]), pa.array([4, 5, 6])], names=["a", "a"])
    assert jsonl_bytes(ts, dup) is None  # repeated names: orjson path decides
    sink = JsonLinesSink(tmp_path / "e.jsonl")
    sink.open()
    sink.write_batch(Batch(np.array([], dtype=np.int64), table=pa.table({"a": pa.array(
        [], pa.int64())})))
    sink.close()
    assert sink.count == 0 and (tmp_path / "e.jsonl").read_bytes() == b""


def test_table_of_wrong_length_is_an_error(tmp_path):
    sink = JsonLinesSink(tmp_path / "x.jsonl")
    sink.open()
    with pytest.raises(StretchflowError, match=r"x\.jsonl.*2 timestamps but its table 3 rows"):
        sink.write_batch(Batch(np.array([1, 2]), table=pa.table({"a": [1, 2, 3]})))
    sink.close()


def test_batch_without_table_takes_the_tuple_path_and_builds_none(tmp_path):
    payloads = [{"w": "a\n", "c": 1}, {"w": "b", "c": 2.5}, {"w": None, "c": 3}]
    batch = Batch([1, 2, 3], payloads=payloads)
    got = _jsonl_file(tmp_path / "b.jsonl", batch, as_batch=True)
    assert not batch.has_table  # the sink did not build a table from Python objects
    assert got == b"".join(orjson.dumps(to_record(t, p)) + b"\n"
                           for t, p in zip([1, 2, 3], payloads, strict=True))


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    given = None

if given is not None:
    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.tuples(st.one_of(st.none(), st.text()),
                              st.one_of(st.none(), st.integers(*I64)),
                              st.one_of(st.none(), st.booleans())), min_size=1, max_size=30),
           st.text(max_size=5))
    def test_jsonl_batch_property(rows, name):
        names = ["s", "i", "b"] if name in ("s", "i", "b") else ["s", name, "b"]
        table = pa.table([pa.array([r[0] for r in rows], pa.string()),
                          pa.array([r[1] for r in rows], pa.int64()),
                          pa.array([r[2] for r in rows], pa.bool_())], names=names)
        ts = np.arange(len(rows), dtype=np.int64) * 3
        assert bytes(jsonl_bytes(ts, table)) == _tuple_lines(ts, table)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.one_of(st.none(), st.floats(), st.floats(width=32),
                              st.floats(min_value=-1e-300, max_value=1e-300),
                              st.integers(-2**60, 2**60).map(float)), min_size=1, max_size=40),
           st.sampled_from([pa.float64(), pa.float32(), pa.float16()]))
    def test_jsonl_float_property(values, typ):
        # any double (subnormals, huge, tiny, integral, -0.0, NaN, infinities) written as
        # orjson writes the float to_pylist gives, per value
        arr = pa.array(values, pa.float64())
        if typ != pa.float64():
            arr = arr.cast(typ, safe=False)
        table = pa.table({"v": arr, "w": pa.array(values, pa.float64())})
        ts = np.arange(len(values), dtype=np.int64)
        assert bytes(jsonl_bytes(ts, table)) == _tuple_lines(ts, table)


# -- stdout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("floats", [False, True])
def test_stdout_batch_equals_tuples(capsysbinary, floats):
    rng = random.Random(11)
    table, ts = random_table(rng, 80, floats=floats), _ts(rng, 80)
    sink = Stdout()
    sink.open()
    sink.write_batch(Batch(ts, table=table))
    got = capsysbinary.readouterr().out
    sink.write(Batch(ts, table=table).items())
    want = capsysbinary.readouterr().out
    assert got == want == _tuple_lines(ts, table)
    assert sink.count == 160


# -- CSV and Parquet ---------------------------------------------------------------------------

def _table_file(cls, path, steps) -> None:
    """Writes ``steps`` (("batch", Batch) or ("items", list)) through a fresh sink."""
    sink = cls(path)
    sink.open()
    n = 0
    for kind, x in steps:
        if kind == "batch":
            sink.write_batch(x)
        else:
            sink.write(x)
        n += len(x)
    sink.close()
    assert sink.count == n


def _compare(cls, tmp_path, batch_steps, ts, table):
    ext = ".csv" if cls is CsvSink else ".parquet"
    _table_file(cls, tmp_path / f"b{ext}", batch_steps)
    _table_file(cls, tmp_path / f"t{ext}", [("items", Batch(ts, table=table).items())])
    if cls is CsvSink:
        assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "t.csv").read_bytes()
    else:
        got, want = pq.read_table(tmp_path / "b.parquet"), pq.read_table(tmp_path / "t.parquet")
        assert got.schema == want.schema
        assert got.equals(want)


@pytest.mark.parametrize("cls", [CsvSink, ParquetSink])
@pytest.mark.parametrize("floats", [False, True])
def test_table_sinks_batch_equals_tuples(tmp_path, cls, floats):
    rng = random.Random(21)
    table = random_table(rng, 120, floats=floats, wide_ints=False)
    table = table.append_column("f32", pa.array([rng.random() for _ in range(120)],
                                                pa.float32()))
    ts = _ts(rng, 120)
    _compare(cls, tmp_path, [("batch", Batch(ts, table=table))], ts, table)


@pytest.mark.parametrize("cls", [CsvSink, ParquetSink])
def test_table_sinks_mixed_batches_and_tuples_keep_order(tmp_path, cls):
    rng = random.Random(22)
    table, ts = random_table(rng, 90, wide_ints=False), _ts(rng, 90)
    items = Batch(ts, table=table).items()
    steps = [("items", items[:20]), ("batch", Batch(ts[20:50], table=table.slice(20, 30))),
             ("batch", Batch(ts[50:60], payloads=[p for _, p in items[50:60]])),
             ("batch", Batch(ts[60:], table=table.slice(60)))]
    _compare(cls, tmp_path, steps, ts, table)


@pytest.mark.parametrize("cls", [CsvSink, ParquetSink])
def test_table_sinks_fall_back_when_types_would_differ(tmp_path, cls):
    # timestamp[ms] comes back from Python datetimes as timestamp[us]: the tuple path writes it
    table = pa.table({"k": pa.array([1, 2, 3], pa.int16()),
                      "at": pa.array([1, 2, None], pa.timestamp("ms"))})
    ts = np.array([1, 2, 3], dtype=np.int64)
    _compare(cls, tmp_path, [("batch", Batch(ts, table=table))], ts, table)


# -- the other sinks ---------------------------------------------------------------------------

def test_collector_keeps_python_tuples():
    table = pa.table({"w": ["a", "b"], "n": [1, 2]})
    sink = Collector()
    sink.open()
    sink.write_batch(Batch(np.array([5, 6]), table=table))
    assert sink.items == [(5, {"w": "a", "n": 1}), (6, {"w": "b", "n": 2})]
    assert all(type(it) is tuple and type(it[0]) is int for it in sink.items)
    assert sink.count == 2


def test_base_sink_takes_batches_tuple_by_tuple():
    seen = []
    sink = Callback(lambda ts, p: seen.append((ts, p)))
    sink.open()
    sink.write_batch(Batch([1, 2], payloads=["x", "y"]))
    assert seen == [(1, "x"), (2, "y")] and sink.count == 2

