"""A user function's error raised in a Spark worker reaches the driver as an OperatorError
with the same message and the same operator, timestamp and payload (read back from the text
Spark carries across)."""

from __future__ import annotations

import pytest

from stretchflow.errors import OperatorError, SourceError
from stretchflow.spark.plan import RemoteOperatorError, RemoteSourceError, translate


def _through_spark(e: Exception) -> BaseException:
    # what the driver sees: the worker's traceback text inside Spark's own exception
    return translate(RuntimeError(f"Traceback ...\n  File x\n{type(e).__module__}."
                                  f"{type(e).__name__}: {e}\n\tat org.apache.spark..."))


@pytest.mark.parametrize("payload", [
    {"ts": 14, "text": "a: b", "id": "poison-7"},  # ": " inside the payload
    (1, "x"), 42, "plain", None, "x" * 400,  # the last is shortened in the message
])
def test_operator_error_fields_cross_from_the_worker(payload):
    e = OperatorError("bad-map", 14, payload, ValueError("boom: with a colon"))
    got = _through_spark(e)
    assert isinstance(got, RemoteOperatorError) and isinstance(got, OperatorError)
    assert str(got) == str(e)
    assert got.operator == "bad-map" and got.ts == 14
    if payload == "x" * 400:
        assert got.payload.startswith("'xxx") and got.payload.endswith("...")
    else:
        assert got.payload == payload


def test_end_of_input_and_source_errors():
    e = OperatorError("agg", None, "<end of input>", ZeroDivisionError("z"))
    got = _through_spark(e)
    assert (got.operator, got.ts, got.payload) == ("agg", None, "<end of input>")
    s = SourceError("tweets", "line 3", "no ts field", {"x": 1})
    got_s = _through_spark(s)
    assert isinstance(got_s, RemoteSourceError) and str(got_s) == str(s)


def test_other_errors_pass_unchanged():
    e = RuntimeError("java.lang.OutOfMemoryError")
    assert translate(e) is e
