"""What the Spark streaming tests (test_spark_exactly_once, test_spark_stream_order) share: the
module's Spark session, the reference executor's output for the module's ``recs`` fixture
(the determinism contract: per-timestamp multisets), the wordcount flow they stream and the
reading of its part directory.

A test module imports the fixtures by name (pytest finds them in its namespace) and defines
its own ``recs``: each module streams records of its own size and seed. Not in conftest.py:
the root conftest holds no Spark fixture, and only these two modules use them."""

from pathlib import Path

import pytest

import stretchflow as sf
from conformance.contract import QUERY_PARAMS, multiset, run_query
from stretchflow.io.parts import read_parts
from stretchflow.io.sinks import to_record
from stretchflow.queries import build_query

PARAMS = QUERY_PARAMS["wordcount"]


@pytest.fixture(scope="module")
def spark():
    """One session per module (starting one costs 20+ s). Imported here, not at the top:
    importing this module (for a test file's Spark-free tests) starts no Spark."""
    from stretchflow.spark.session import get_session

    return get_session("local[2]", {"spark.sql.shuffle.partitions": "2"})


@pytest.fixture(scope="module")
def reference(recs):
    """The reference executor's wordcount of the module's ``recs``, as a multiset."""
    ref, _ = run_query("wordcount", [recs], PARAMS)
    return multiset((ts, to_record(ts, p)) for ts, p in ref)


def flow_to(inp: Path, out: Path) -> sf.Flow:
    """A new flow each time, as each `stretchflow run` invocation builds one."""
    flow = sf.Flow("wordcount")
    build_query("wordcount", [flow.source(sf.io.jsonl(inp, name="in0"))], **PARAMS).sink(
        str(out))
    return flow


def output(out: Path) -> list[tuple[int, dict]]:
    """The part directory's records as ``(ts, record)``, checked to be one ts-sorted stream."""
    got = [(r["ts"], r) for r in read_parts(out)]
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)  # one ts-sorted stream
    return got
