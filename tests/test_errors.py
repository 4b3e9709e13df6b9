"""Bad input gets a clear error naming the source, the record and the reason."""

import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

import stretchflow as sf
from stretchflow.errors import OperatorError, SourceError
from stretchflow.queries import build_query


def run_wordcount(src):
    flow = sf.Flow()
    build_query("wordcount", [flow.source(src)], size=10, slide=5).collect()
    return flow.run()


def jsonl(tmp_path, text, name="in.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_malformed_json_names_file_line_and_record(tmp_path):
    p = jsonl(tmp_path, '{"ts": 1, "text": "a"}\n{"ts": 2, "text": \n')
    with pytest.raises(SourceError) as e:
        run_wordcount(sf.io.jsonl(p))
    msg = str(e.value)
    assert "in.jsonl:2" in msg and "malformed JSON" in msg and '{"ts": 2, "text":' in msg
    assert e.value.source == "in.jsonl"


def test_blank_lines_are_skipped(tmp_path):
    p = jsonl(tmp_path, '{"ts": 1, "text": "a"}\n\n   \n{"ts": 2, "text": "b"}\n')
    assert run_wordcount(sf.io.jsonl(p)).total_in == 2


def test_missing_timestamp(tmp_path):
    p = jsonl(tmp_path, '{"ts": 1, "text": "a"}\n{"time": 2, "text": "b"}\n')
    with pytest.raises(SourceError, match=r"in.jsonl:2: missing timestamp field 'ts'.*'time'"):
        run_wordcount(sf.io.jsonl(p))


def test_non_integer_timestamp(tmp_path):
    p = jsonl(tmp_path, '{"ts": "noon", "text": "a"}\n')
    with pytest.raises(SourceError, match="must be an integer"):
        run_wordcount(sf.io.jsonl(p))


def test_record_not_an_object(tmp_path):
    p = jsonl(tmp_path, "[1, 2]\n")
    with pytest.raises(SourceError, match="in.jsonl:1: record is not an object"):
        run_wordcount(sf.io.jsonl(p))


def test_time_going_back_on_sorted_source(tmp_path):
    p = jsonl(tmp_path, "".join(json.dumps({"ts": t, "text": "x"}) + "\n" for t in (1, 5, 3)))
    with pytest.raises(SourceError, match=r"in.jsonl:3: timestamp goes back from 5 to 3") as e:
        run_wordcount(sf.io.jsonl(p))
    assert e.value.record == {"ts": 3, "text": "x"}


def test_time_going_back_in_iterable_names_the_source():
    src = sf.io.iterable([{"ts": 2, "text": "a"}, {"ts": 1, "text": "b"}], name="my-tweets")
    with pytest.raises(SourceError, match="source 'my-tweets', record 2: timestamp goes back"):
        run_wordcount(src)


def test_csv_without_ts_column(tmp_path):
    p = tmp_path / "in.csv"
    pcsv.write_csv(pa.Table.from_pylist([{"time": 1, "text": "a"}]), p)
    with pytest.raises(SourceError, match="in.csv row 1: missing timestamp column 'ts'"):
        run_wordcount(sf.io.csv(p))


def test_csv_with_null_ts(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("ts,text\n1,a\n,b\n")
    with pytest.raises(SourceError, match="in.csv row 2: missing timestamp"):
        run_wordcount(sf.io.csv(p))


def test_missing_file(tmp_path):
    with pytest.raises(SourceError, match="cannot open"):
        run_wordcount(sf.io.jsonl(tmp_path / "nope.jsonl"))


def test_user_function_raising_names_operator_and_tuple(tmp_path):
    p = jsonl(tmp_path, '{"ts": 1, "text": "a"}\n{"ts": 2, "text": 7}\n')
    with pytest.raises(OperatorError) as e:
        run_wordcount(sf.io.jsonl(p))
    assert e.value.operator == "wordcount"
    assert e.value.ts == 2 and e.value.payload == {"ts": 2, "text": 7}
    assert "AttributeError" in str(e.value)
    assert isinstance(e.value.__cause__, AttributeError)


def test_map_raising_names_operator():
    flow = sf.Flow()
    flow.source(sf.io.iterable([{"ts": 1}])).map(lambda t: t["nope"], name="extract").collect()
    with pytest.raises(OperatorError, match=r"'extract' failed on tuple ts=1.*KeyError"):
        flow.run()


def test_flow_without_sink():
    flow = sf.Flow()
    flow.source(sf.io.iterable([]))
    with pytest.raises(sf.FlowDefinitionError, match="no sink"):
        flow.run()


def test_spark_without_java_and_unknown_engine_are_refused(monkeypatch):
    import stretchflow.spark.session as session

    flow = sf.Flow()
    flow.source(sf.io.iterable([])).collect()
    monkeypatch.setattr(session, "_session", None)  # as in a fresh process
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(sf.EngineUnavailableError, match="needs a Java runtime"):
        flow.run(engine="spark")
    with pytest.raises(sf.EngineUnavailableError, match="unknown engine"):
        flow.run(engine="flink")
