"""``Source.batches()`` (issue #16): the file sources' columnar batches deliver exactly what
``items()`` delivers — same tuples, same payloads, the same error at the same tuple — for
random JSON Lines, CSV and Parquet files with every kind of bad record, cut into batches at
every boundary."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from stretchflow.errors import SourceError
from stretchflow.eventtime import Watermark
from stretchflow.io.batches import _line_chunks
from stretchflow.io.generators import tweets, write_table
from stretchflow.io.sources import (
    Csv,
    Generated,
    IterableSource,
    JsonLines,
    Parquet,
    RateSource,
    open_source,
)

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # the seeded random tests still run
    given = None


# -- comparing the two paths -------------------------------------------------------------------
def _drain(it):
    """Everything an iterator yields before it stops, and the error it stops with."""
    out = []
    try:
        for x in it:
            out.append(x)
    except SourceError as e:
        return out, e
    return out, None


def _same(src, rows, **attrs):
    """Asserts that src.batches(rows) delivers what src.items() does; returns the batches."""
    want, want_err = _drain(src.items())
    read_items = src.read
    for k, v in attrs.items():
        setattr(src, k, v)
    batches, err = _drain(src.batches(rows))
    got = [it for b in batches for it in b.items()]
    # repr tells 1 from 1.0 and True, and shows key order
    assert repr(got) == repr(want)
    assert type(err) is type(want_err) and str(err) == str(want_err)
    if err is None:
        assert src.read == read_items
    for b in batches:
        assert 0 < len(b) <= rows
        assert b.ts.dtype == np.int64 and (np.diff(b.ts) >= 0).all()
        if b.has_table:
            assert b.table.num_rows == len(b)
        _faithful(b)
    return batches


def _faithful(b):
    """A batch's table, the reader's or one built from its payloads, says what its payloads
    say: same keys in the same order, ints as ints (what a columnar operator writes comes
    from the table)."""
    if b.table is not None:
        assert repr(b.table.to_pylist()) == repr(list(b.payloads))


# -- random JSON Lines -------------------------------------------------------------------------
_WORDS = ["a", "é", "日本", "tab\there", 'quo"te', "back\\slash", "nl\nx", "\u2028", "😀",
          "2020-01-01", "2021-03-04T05:06:07Z", "NaNa", "x" * 40, ""]


def _value(rnd, depth=0):
    k = rnd.randrange(9 if depth < 2 else 6)
    if k == 0:
        return rnd.randint(-1000, 1000)
    if k == 1:
        return rnd.choice(_WORDS) + rnd.choice(_WORDS)
    if k == 2:
        return rnd.random() * 100
    if k == 3:
        return rnd.choice([True, False, None])
    if k == 4:
        return rnd.choice([2**63 + 5, -(2**63) - 3, 2**70, 2**62])  # big ints
    if k == 5:
        return rnd.choice(["x", 1, 1.5])  # a field whose type varies from record to record
    if k == 6:
        return {rnd.choice("abc"): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 2))}
    if k == 7:
        return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    return rnd.choice(_WORDS)


def _record_line(rnd, ts):
    rec = {"ts": ts}
    for name in rnd.sample(["user", "text", "n", "x", "obj"], rnd.randint(0, 5)):
        rec[name] = _value(rnd)
    if rnd.random() < 0.2:
        rec = dict(reversed(list(rec.items())))  # "ts" last
    try:
        if rnd.random() < 0.5:
            return orjson.dumps(rec)
    except TypeError:  # orjson writes no int beyond 64 bits; json does
        pass
    return json.dumps(rec, ensure_ascii=rnd.random() < 0.5).encode()


_FAULTS = [
    b'{"ts": 1}',  # goes back (the stream is far above 1 by then)
    b'{"ts": null, "a": 1}', b'{"a": 1}', b'{"ts": 5.0}', b'{"ts": "7"}', b'{"ts": true}',
    b'{"ts": 1e3}', b'{"ts": 12', b'{"ts": 10, "a": NaN}', b'{"ts": 10, "a": Infinity}',
    b"null", b"[1, 2]", b"42", b'"str"', b'{"ts": 10} {"ts": 11}', b'{"ts": 10, "ts": 10}',
    b'{"ts": 10, "a": "\xff"}', b'{"ts": 10, "a": "\xed\xa0\x80"}', b"\xef\xbb\xbf{\"ts\": 10}",
    b'{"ts": 10, "a": "\\ud800"}', b"{'ts': 10}", b'{"ts": 10,}', b'{"ts": 01}',
    b'{"ts": 10, "a": ' + b"[" * 1100 + b"]" * 1100 + b"}",
]


def _jsonl_bytes(rnd, n_lines):
    """A random JSON Lines file; its timestamps rise from 1000 (ties too), with blank lines
    and, in about half the files, one bad record somewhere."""
    lines = []
    ts = 1000
    fault_at = rnd.randrange(n_lines) if n_lines and rnd.random() < 0.5 else -1
    for i in range(n_lines):
        if i == fault_at:
            lines.append(rnd.choice(_FAULTS))
        elif rnd.random() < 0.08:
            lines.append(rnd.choice([b"", b"  ", b"\t", b"\r"]))
        else:
            ts += rnd.choice([0, 0, 1, 3, 1000])
            line = _record_line(rnd, ts)
            lines.append(line + (b"\r" if rnd.random() < 0.05 else b""))
    data = b"\n".join(lines)
    return data if rnd.random() < 0.2 else data + b"\n"  # sometimes no final newline


@pytest.mark.parametrize("seed", range(12))
def test_random_jsonl_batches_equal_items(tmp_path, seed):
    rnd = random.Random(seed)
    for k in range(25):
        path = tmp_path / f"f{k}.jsonl"
        path.write_bytes(_jsonl_bytes(rnd, rnd.choice([0, 1, 2, 5, 20, 60])))
        src = JsonLines(path)
        _same(src, rnd.choice([1, 2, 3, 7, 64]), batch_bytes=rnd.choice([1, 40, 200, 1 << 20]))


def test_jsonl_every_fault_at_every_boundary(tmp_path):
    """Each bad record, placed at each line of a small file, read in batches of 1–4 lines:
    the error is the tuple path's, after the same tuples."""
    good = [b'{"ts": %d, "a": "x"}' % (100 + i) for i in range(6)]
    for k, fault in enumerate(_FAULTS + [b"", b"  ", b'{"ts": 99}']):
        for at in range(len(good)):
            path = tmp_path / f"f{k}_{at}.jsonl"
            path.write_bytes(b"\n".join(good[:at] + [fault] + good[at:]) + b"\n")
            for rows in (1, 2, 4):
                _same(JsonLines(path), rows)


def test_clean_jsonl_is_columnar_and_payloads_are_the_tuple_paths(tmp_path):
    rnd = random.Random(3)
    path = tmp_path / "clean.jsonl"
    words = [w for w in _WORDS if "NaN" not in w]  # "NaN" in a line sends it to the exact path
    lines = [orjson.dumps({"ts": 10 + i // 3, "user": f"u{i % 7}", "text": rnd.choice(words),
                           "day": "2020-01-02", "o": {"d": "2020-01-03", "k": [i]}})
             for i in range(500)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    batches = _same(JsonLines(path), 64)
    assert [len(b) for b in batches] == [64] * 7 + [52]
    fresh = JsonLines(path).batches(64)
    for b in fresh:
        assert b.has_table
        assert b.table.schema.field("day").type == pa.string()  # not a date Arrow made up
        assert b.table.schema.field("o").type.field("d").type == pa.string()
        assert b.table.column("user").to_pylist() == [p["user"] for p in b.payloads]


# -- Arrow's table says what each line says (issue #31) ------------------------------------
# chunks where Arrow's one schema per chunk would misstate a line: each must not become a
# table batch holding the misstatement (it is read line by line instead)
_MISSTATED = {
    "missing key": [b'{"ts":1,"x":1}', b'{"ts":2}'],
    "missing key, spaced": [b'{"ts": 1, "x": "a"}', b'{"ts": 2}'],
    "missing nested key": [b'{"ts":1,"o":{"a":1,"b":2}}', b'{"ts":2,"o":{"a":3}}'],
    "key order": [b'{"ts":1,"a":1,"b":2}', b'{"ts":2,"b":3,"a":4}'],
    # a '":' that ends no key, where a string opens with ':' (a value, or the name ":s"),
    # standing where a missing key's end would be and holding the byte that tells that
    # key's name apart (":" before the value's quote, "1" before the name's): only the byte
    # before its quote (' ', ','; either may precede an opening quote) shows it is no key's
    # end, so that the lines are short of keys
    "keys missing, strings opening with ':'": [b'{"ts":0,"2s":0,"1s": ":"}',
                                                b'{"ts":1,"2s":1,":s":5}'],
    # names alike in their last bytes: told apart only by their whole text
    "key order, alike names": [b'{"ts":1,"x_id":1,"y_id":2}', b'{"ts":2,"y_id":3,"x_id":4}'],
    "nested key order": [b'{"ts":1,"o":{"a":1,"b":2}}', b'{"ts":2,"o":{"b":3,"a":4}}'],
    "int among floats": [b'{"ts":1,"x":1}', b'{"ts":2,"x":2.5}'],
    "int among floats, nested": [b'{"ts":1,"o":{"x":2.5}}', b'{"ts":2,"o":{"x":-3}}'],
    "int among floats, in a list": [b'{"ts":1,"l":[1,2.5]}'],
    "int beyond the doubles' precision": [b'{"ts":1,"x":9007199254740993}',
                                          b'{"ts":2,"x":0.5}'],
    "leading null in a list": [b'{"ts":1,"l":[null,10]}', b'{"ts":2,"l":[3]}'],
    "leading null in a nested list": [b'{"ts":1,"o":{"l":[[null,"x"]]}}'],
    "float literal beyond the doubles": [b'{"ts":1,"x":0.5}',
                                         b'{"ts":2,"x":1.7976931348623159e308}'],
}


@pytest.mark.parametrize("name", list(_MISSTATED))
def test_chunks_arrow_would_misstate_are_not_table_batches(tmp_path, name):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\n".join(_MISSTATED[name]) + b"\n")
    for rows in (1, 2, 64):
        _same(JsonLines(path), rows)  # _faithful: no batch's table misstates its payloads


# chunks Arrow reads faithfully stay table batches: floats written as floats (integral ones
# too), other spacing, nested objects, ints beside floats in other fields, keys with
# characters of every kind the proof allows
_FAITHFUL = {
    "integral floats": [b'{"ts":1,"x":1.0,"y":-0.0}', b'{"ts":2,"x":1e3,"y":2.5E-1}',
                        b'{"ts":3,"x":7.0,"y":3}'.replace(b"3}", b"3.5}")],
    "spaced, as json.dumps writes": [b'{"ts": 1, "a": 2, "b": "x"}',
                                     b'{"ts": 2, "a": 3, "b": "y"}'],
    "nested floats": [b'{"ts":1,"o":{"x":2.0,"l":[0.5]},"n":1}',
                      b'{"ts":2,"o":{"x":4.0,"l":[]},"n":2}'],
    "odd keys": [b'{"ts":1,"k\xc3\xa9 y":1,"a-b.c":2,"_":null,"\xe6\x97\xa5\xe6\x9c\xac":0}',
                 b'{"ts":2,"k\xc3\xa9 y":3,"a-b.c":4,"_":5,"\xe6\x97\xa5\xe6\x9c\xac":1}'],
    "strings holding '\":'": [b'{"ts":1,"s":":)","t":"say \\"x\\": y"}',
                              b'{"ts":2,"s":"\\":","t":"[\\":"}'],
    "alike names": [b'{"ts":1,"x_id":1,"y_id":2}', b'{"ts":2,"x_id":3,"y_id":4}'],
    "strings with backslashes": [b'{"ts":1,"s":"a\\\\"}', b'{"ts":2,"s":"\\\\\\"q:"}'],
}


@pytest.mark.parametrize("name", list(_FAITHFUL))
def test_chunks_arrow_reads_faithfully_stay_table_batches(tmp_path, name):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"\n".join(_FAITHFUL[name]) + b"\n")
    _same(JsonLines(path), 64)
    # read afresh: _same asks each batch for a table, which builds one from the payloads
    assert [b.has_table for b in JsonLines(path).batches(64)] == [True]


def test_a_key_inside_a_string_value_is_not_taken_for_a_key(tmp_path):
    # the text '"x":' inside a value (escaped) and a string starting with ':' next to a
    # line missing "x": never a table batch saying x is null
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"ts":1,"x":1,"s":"a"}\n{"ts":2,"s":"\\"x\\":"}\n'
                     b'{"ts":3,"s":":x","x":2}\n{"ts":4,"x":3,"s":"\\"x\\":1"}\n')
    _same(JsonLines(path), 64)


def test_tables_built_from_payloads_state_them_exactly():
    from stretchflow.batch import Batch

    for payloads in ([{"x": 1}, {"y": 2}], [{"x": 1}, {"x": 2.5}], [{"x": 1}, {}],
                     [{"a": 1, "b": 2}, {"b": 3, "a": 4}], [{"o": {"a": 1}}, {"o": {"b": 1}}],
                     [{"l": [1, 2.5]}]):
        assert Batch([1] * len(payloads), payloads=payloads).table is None, payloads
    for payloads in ([{"x": 1.0}, {"x": None}], [{"a": 1, "s": "t"}, {"a": None, "s": "u"}]):
        b = Batch([1] * len(payloads), payloads=payloads)
        assert repr(b.table.to_pylist()) == repr(payloads)


def test_jsonl_batches_respect_the_byte_bound(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [orjson.dumps({"ts": i, "text": "w" * (i % 50)}) for i in range(400)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    src = JsonLines(path)
    src.batch_bytes = 1000
    batches = _same(src, 1000)
    assert len(batches) > 10
    sizes = [sum(len(orjson.dumps(p)) + 1 for p in b.payloads) for b in batches]
    assert max(sizes) <= 1000


def test_ts_beyond_int64_is_a_clear_error_in_batches(tmp_path):
    """The tuple path takes any Python int; a batch's timestamps are int64, so the batch
    reader stops at that record with an error naming it (after the tuples before it)."""
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"ts": 1}\n{"ts": 2}\n{"ts": 9223372036854775808}\n')
    batches, err = _drain(JsonLines(path).batches(10))
    assert [it for b in batches for it in b.items()] == [(1, {"ts": 1}), (2, {"ts": 2})]
    assert isinstance(err, SourceError) and f"{path}:3" in str(err) and "64-bit" in str(err)


def test_missing_file_is_the_same_error(tmp_path):
    for src in (JsonLines(tmp_path / "no.jsonl"), Csv(tmp_path / "no.csv"),
                Parquet(tmp_path / "no.parquet")):
        _same(src, 10)


# -- line chunks -------------------------------------------------------------------------------
def test_line_chunks_cut_whole_lines_within_both_bounds():
    rnd = random.Random(7)
    for _ in range(300):
        lines = [b"x" * rnd.choice([0, 1, 5, 30]) for _ in range(rnd.randint(0, 40))]
        data = b"\n".join(lines) + (b"\n" if rnd.random() < 0.7 else b"")
        rows, cap = rnd.randint(1, 9), rnd.randint(1, 80)
        chunks = list(_line_chunks(io.BytesIO(data), rows, cap))
        assert b"".join(c for c, _ in chunks) == data
        for c, ends in chunks:
            assert 1 <= len(ends) <= rows
            assert len(c) <= cap or len(ends) == 1  # a longer line comes alone
            assert list(ends) == [k for k, ch in enumerate(c) if ch == 10] + (
                [] if c.endswith(b"\n") else [len(c) - 1])
        if data:
            assert sum(len(e) for _, e in chunks) == len(io.BytesIO(data).readlines())


# -- CSV and Parquet ---------------------------------------------------------------------------
class _SmallBlockCsv(Csv):
    """CSV read in tiny blocks: many record batches, and a type that changes after the first
    block fails the read at a later row, as it does on a large file."""

    def _batches(self, rows):
        opts = pcsv.ReadOptions(block_size=64)
        return iter(pcsv.open_csv(str(self.path), read_options=opts))


def _csv_text(rnd, n):
    rows = ["ts,user,v"]
    ts = 50
    fault_at = rnd.randrange(n) if n and rnd.random() < 0.6 else -1
    for i in range(n):
        ts += rnd.choice([0, 1, 7])
        user = rnd.choice(["ann", "bob", '"q,uoted"', "ünï", ""])
        v = rnd.choice(["1", "2.5", "", "x"]) if rnd.random() < 0.1 else str(i)
        row = f"{ts},{user},{v}"
        if i == fault_at:
            row = rnd.choice([f"{ts - 100},{user},1", f",{user},1", f"{ts}.5,{user},1",
                              f"abc,{user},1", f"{ts},{user}", "true,x,1"])
        rows.append(row)
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("cls", [Csv, _SmallBlockCsv])
def test_random_csv_batches_equal_items(tmp_path, cls):
    rnd = random.Random(11)
    for k in range(60):
        path = tmp_path / f"f{k}.csv"
        path.write_text(_csv_text(rnd, rnd.choice([0, 1, 3, 30])))
        _same(cls(path), rnd.choice([1, 2, 5, 100]))
    path = tmp_path / "nots.csv"
    path.write_text("time,v\n1,2\n")
    _same(cls(path), 4)
    path = tmp_path / "empty.csv"
    path.write_text("")
    _same(cls(path), 4)


def _parquet_table(rnd, n):
    ts = np.cumsum(np.array([rnd.choice([0, 1, 9]) for _ in range(n)], dtype=np.int64)) + 5
    cols = {"ts": pa.array(ts), "s": pa.array([rnd.choice(_WORDS) for _ in range(n)]),
            "f": pa.array([rnd.random() for _ in range(n)]),
            "l": pa.array([[i] * (i % 3) for i in range(n)])}
    fault = rnd.randrange(6) if n and rnd.random() < 0.7 else -1
    at = rnd.randrange(n) if n else 0
    if fault == 0:
        ts[at:] -= 1000  # goes back
        cols["ts"] = pa.array(ts)
    elif fault == 1:
        cols["ts"] = pa.array([None if i == at else int(t) for i, t in enumerate(ts)],
                              pa.int64())
    elif fault == 2:
        cols["ts"] = pa.array(ts.astype(np.float64))
    elif fault == 3:
        cols["ts"] = pa.array(ts.astype(np.uint32))  # another integer type: fine
    elif fault == 4:
        cols["ts"] = pa.array(ts.astype("datetime64[ms]"))
    elif fault == 5:
        cols = {"time": cols["ts"], "s": cols["s"]}
    return pa.table(cols)


def test_random_parquet_batches_equal_items(tmp_path):
    rnd = random.Random(5)
    for k in range(60):
        path = tmp_path / f"f{k}.parquet"
        pq.write_table(_parquet_table(rnd, rnd.choice([0, 1, 4, 50])), path,
                       row_group_size=rnd.choice([3, 20, 1000]))
        _same(Parquet(path), rnd.choice([1, 2, 7, 100]))


def test_parquet_uint64_beyond_int64(tmp_path):
    path = tmp_path / "u.parquet"
    pq.write_table(pa.table({"ts": pa.array([1, 2, 2**63], pa.uint64())}), path)
    batches, err = _drain(Parquet(path).batches(2))
    assert [it[0] for b in batches for it in b.items()] == [1, 2]
    assert isinstance(err, SourceError) and "row 3" in str(err) and "64-bit" in str(err)


# -- which sources batch -----------------------------------------------------------------------
def test_sources_that_cannot_batch_say_none(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"ts": 1}\n')
    assert JsonLines(path, sorted=False).batches() is None
    assert JsonLines(path, watermark="wm").batches() is None
    assert JsonLines(path).at_rate(1000).batches() is None
    assert JsonLines(path).replay(2.0).batches() is None
    assert IterableSource([{"ts": 1}, Watermark(2)]).batches() is None
    assert Generated("tweets", rows=10).batches() is None
    assert RateSource(10, rows=3).batches() is None
    csv = tmp_path / "t.csv"
    csv.write_text("ts\n1\n")
    assert Csv(csv, sorted=False).batches() is None
    assert Csv(csv).at_rate(5).batches() is None
    assert Csv(csv).batches() is not None


def test_batches_rejects_bad_rows(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"ts": 1}\n')
    for rows in (0, -3, 2.5):
        with pytest.raises(ValueError, match="rows must be a positive integer"):
            JsonLines(path).batches(rows)


# -- generated tweets --------------------------------------------------------------------------
@pytest.mark.parametrize("ext", [".jsonl", ".csv", ".parquet"])
def test_generated_tweets_are_columnar(tmp_path, ext):
    path = tmp_path / f"tweets{ext}"
    write_table(tweets(3000, seed=1), path)
    batches = _same(open_source(path), 1000)
    assert len(batches) >= 3
    for b in open_source(path).batches(1000):
        assert b.has_table and "text" in b.table.column_names
        assert b.table.column("ts").to_pylist() == b.ts.tolist()


# -- hypothesis: arbitrary lines ---------------------------------------------------------------
if given is not None:
    _line = st.one_of(
        st.builds(lambda t, rest: json.dumps({"ts": t, **rest}).encode(),  # any int size
                  st.one_of(st.integers(0, 30), st.integers(0, 30), st.none(), st.booleans(),
                            st.floats(allow_nan=False, allow_infinity=False),
                            st.text(max_size=2)),
                  st.dictionaries(st.sampled_from(["a", "b"]),
                                  st.one_of(st.integers(-2**70, 2**70), st.text(max_size=5),
                                            st.floats(allow_nan=False, allow_infinity=False),
                                            st.none(), st.booleans(),
                                            st.lists(st.integers(0, 3), max_size=2)),
                                  max_size=2)),
        st.sampled_from(_FAULTS + [b"", b" "]),
        st.binary(max_size=12),
    )

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(lines=st.lists(_line, max_size=12), rows=st.integers(1, 5),
           final_newline=st.booleans())
    def test_hypothesis_jsonl_batches_equal_items(tmp_path, lines, rows, final_newline):
        path = tmp_path / "h.jsonl"
        path.write_bytes(b"\n".join(lines) + (b"\n" if final_newline else b""))
        _same(JsonLines(path), rows)

    _scalar = st.one_of(st.integers(-2**53, 2**53), st.floats(allow_nan=False,
                        allow_infinity=False), st.integers(-99, 99).map(float), st.none(),
                        st.text(alphabet='ab":\\ {}', max_size=4))
    # names of every kind: the proof's plain ones, and ones it must decline (a quote, a
    # backslash, a colon or space at the end, a control character, non-ASCII)
    _key = st.one_of(st.sampled_from(["a", "b", "c"]),
                     st.text(alphabet='a:", \\{\x01日', min_size=0, max_size=3))
    _record = st.lists(st.tuples(_key,
                                 st.one_of(_scalar, st.dictionaries(st.sampled_from("xy"),
                                                                    _scalar, max_size=2),
                                           st.lists(_scalar, max_size=3))),
                       max_size=3, unique_by=lambda kv: kv[0])

    @settings(max_examples=200, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(records=st.lists(st.tuples(_record, st.booleans()), min_size=1, max_size=8))
    def test_hypothesis_tables_state_the_lines(tmp_path, records):
        # keys missing, reordered, ints beside floats (integral ones too), nested objects and
        # lists, written compact (orjson) or spaced (json.dumps): a batch's table, where there
        # is one, says what each line says
        lines = []
        for i, (kvs, spaced) in enumerate(records):
            rec = {"ts": i, **dict(kvs)}
            lines.append(json.dumps(rec).encode() if spaced else orjson.dumps(rec))
        path = tmp_path / "t.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        _same(JsonLines(path), 64)


def test_small_block_csv_reads_many_record_batches(tmp_path):
    """The test double above reads what the sources ask of it (a signature that no longer
    fits would fail both paths alike, and the comparison above would pass on two errors)."""
    path = tmp_path / "many.csv"
    path.write_text("ts,v\n" + "".join(f"{i},{i}\n" for i in range(200)))
    assert len(list(_SmallBlockCsv(path)._record_batches())) > 1


def test_parquet_directory_batches_equal_items(tmp_path):
    """Spark's ``--input DIR`` of Parquet parts (spark/sources.ParquetDir) in batches: the
    tuple path's items, part after part."""
    from stretchflow.spark.sources import ParquetDir

    for i in range(2):
        pq.write_table(pa.table({"ts": list(range(i * 9000, (i + 1) * 9000)),
                                 "v": [i] * 9000}), tmp_path / f"part-{i}.parquet")
    src = ParquetDir(tmp_path)
    assert sum(len(b) for b in src.batches(65536)) == 18000
    _same(ParquetDir(tmp_path), 7)
