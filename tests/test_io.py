"""Sources, sinks and watermarks."""

import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from stretchflow.errors import SourceError
from stretchflow.eventtime import WATERMARK, Watermark

RECS = [{"ts": 1, "text": "a b"}, {"ts": 1, "text": "b"}, {"ts": 5, "text": ""},
        {"ts": 9, "text": "a"}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def items_of(src):
    return list(src.items())


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_file_sources_read_records(tmp_path, fmt):
    table = pa.Table.from_pylist(RECS)
    path = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, RECS)
    elif fmt == "csv":
        pcsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    src = sf.io.open_source(path)
    got = items_of(src)
    assert [ts for ts, _ in got] == [1, 1, 5, 9]
    assert [p["text"] or "" for _, p in got] == ["a b", "b", "", "a"]
    assert src.name == path.name


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_file_sinks_write_records_with_ts_first(tmp_path, fmt):
    flow = sf.Flow()
    s = flow.source(sf.io.iterable(RECS))
    out = tmp_path / f"out.{fmt}"
    s.map(lambda t: {"n": len(t["text"]), "ts": -1}).sink(str(out))
    flow.run()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    elif fmt == "csv":
        rows = pcsv.read_csv(out).to_pylist()
    else:
        rows = pq.read_table(out).to_pylist()
    assert rows == [{"ts": 1, "n": 3}, {"ts": 1, "n": 1}, {"ts": 5, "n": 0}, {"ts": 9, "n": 1}]
    assert list(rows[0]) == ["ts", "n"]


def test_empty_output_file_is_created(tmp_path):
    flow = sf.Flow()
    flow.source(sf.io.iterable([])).sink(str(tmp_path / "o.parquet"))
    flow.run()
    assert (tmp_path / "o.parquet").exists()


def test_callback_stdout_and_non_dict_payloads(capsys):
    seen = []
    flow = sf.Flow()
    s = flow.source(sf.io.iterable(RECS))
    s.map(lambda t: len(t["text"])).sink(sf.io.callback(lambda ts, p: seen.append((ts, p))))
    s.filter(lambda t: t["ts"] > 4).sink(sf.io.stdout())
    flow.run()
    assert seen == [(1, 3), (1, 1), (5, 0), (9, 1)]
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [{"ts": 5, "text": ""}, {"ts": 9, "text": "a"}]


def test_fan_out_and_several_sinks():
    flow = sf.Flow()
    s = flow.source(sf.io.iterable(RECS))
    a = s.map(lambda t: 1).collect()
    b = s.filter(lambda t: t["text"]).collect()
    res = flow.run()
    assert len(a.items) == 4 and len(b.items) == 3
    assert res.tuples_in == {"iterable": 4}


def test_sink_accepts_file_source_object(tmp_path):
    flow = sf.Flow()
    flow.source(sf.io.iterable(RECS)).sink(sf.io.jsonl(tmp_path / "o.jsonl"))
    flow.run()
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 4


def test_generated_source():
    flow = sf.Flow()
    col = flow.source(sf.io.generated("tweets", rows=50, seed=3)).collect()
    flow.run()
    assert len(col.items) == 50
    assert [ts for ts, _ in col.items] == sorted(ts for ts, _ in col.items)


# -- explicit watermarks -------------------------------------------------------------------------

def test_unsorted_source_with_watermarks_is_reordered():
    data = [{"ts": 5}, {"ts": 3}, Watermark(4), {"ts": 4}, {"ts": 9}, Watermark(9), {"ts": 9}]
    got = items_of(sf.io.iterable(data, sorted=False))
    assert got == [(3, {"ts": 3}), (4, WATERMARK), (4, {"ts": 4}), (5, {"ts": 5}),
                   (9, {"ts": 9}), (9, WATERMARK), (9, {"ts": 9})]


def test_late_tuple_behind_watermark_is_an_error():
    data = [{"ts": 5}, Watermark(6), {"ts": 2}]
    with pytest.raises(SourceError, match="late tuple: timestamp 2 is behind the watermark 6"):
        items_of(sf.io.iterable(data, sorted=False, name="sensor"))


def test_jsonl_watermark_records(tmp_path):
    path = write_jsonl(tmp_path / "w.jsonl", [{"ts": 3}, {"ts": 1}, {"wm": 3}, {"ts": 8}])
    got = items_of(sf.io.jsonl(path, sorted=False, watermark="wm"))
    assert got == [(1, {"ts": 1}), (3, {"ts": 3}), (3, WATERMARK), (8, {"ts": 8})]


def test_watermark_expires_windows_before_end_of_input():
    """An explicit watermark closes windows while the input is still open."""
    emitted = []

    def records():
        yield {"ts": 1, "k": "a"}
        yield Watermark(10)
        # by now the window [0, 10) must have been emitted
        assert emitted == [(10, 1)], emitted
        yield {"ts": 12, "k": "a"}

    flow = sf.Flow()
    s = flow.source(sf.io.iterable(records, sorted=False))
    s.aggregate(size=10, keys=lambda t: {t["k"]}, init=int, update=lambda a, t: a + 1,
                output=lambda k, a: a).sink(sf.io.callback(lambda ts, p: emitted.append((ts, p))))
    flow.run()
    assert emitted == [(10, 1), (20, 1)]


def test_watermarks_merge_as_minimum_over_inputs():
    """With two inputs an operator's watermark is the minimum of its inputs' progress."""
    left = [{"ts": 1, "k": 1}, Watermark(50), {"ts": 60, "k": 1}]
    right = [{"ts": 2, "k": 1}, Watermark(5), {"ts": 40, "k": 1}]
    flow = sf.Flow()
    a = flow.source(sf.io.iterable(left, sorted=False, name="l"))
    b = flow.source(sf.io.iterable(right, sorted=False, name="r"))
    col = a.join(b, size=100, keys=lambda t: {t["k"]},
                 output=lambda x, y: (x["ts"], y["ts"])).collect()
    flow.run()
    assert sorted(p for _, p in col.items) == [(1, 2), (1, 40), (60, 2), (60, 40)]


def test_iterable_factory_can_run_twice():
    src = sf.io.iterable(lambda: iter(RECS))
    assert items_of(src) == items_of(src)


def test_ts_function():
    got = items_of(sf.io.iterable([(1, "a"), (2, "b")], ts=lambda r: r[0]))
    assert got == [(1, (1, "a")), (2, (2, "b"))]


def test_replay_and_rate_pace_without_changing_items():
    import time

    recs = [{"ts": t} for t in range(0, 60, 3)]
    plain = items_of(sf.io.iterable(recs))
    t0 = time.perf_counter()
    assert items_of(sf.io.iterable(recs).replay(speed=1.0)) == plain
    assert time.perf_counter() - t0 >= 0.055  # the last tuple is 57 ms of event time later
    t0 = time.perf_counter()
    assert items_of(sf.io.iterable(recs).at_rate(400)) == plain
    assert time.perf_counter() - t0 >= 19 / 400 - 0.002
    with pytest.raises(ValueError):
        sf.io.iterable(recs).replay(speed=0)
