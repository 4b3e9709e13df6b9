"""The run summary's GIL line: said when a flow's Python functions are asked to run on several
threads of one CPython process with the GIL, and only then (issue #32)."""

from __future__ import annotations

import sys

import pytest

import stretchflow as sf
from stretchflow.cli import query_flow
from stretchflow.runtime.result import RunResult, gil_serializes_threads

GIL = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()


def _lambda_flow() -> sf.Flow:
    flow = sf.Flow("lambdas")
    rows = [{"ts": i * 1000, "user": f"u{i % 7}"} for i in range(400)]
    src = flow.source(sf.io.iterable(rows)).map(lambda t: {**t, "n": 1})
    src.aggregate(size="10s", keys=lambda t: t["user"], init=int,
                  update=lambda c, t: c + t["n"], output=lambda k, c: {"user": k, "c": c}
                  ).sink(sf.io.collect())
    return flow


def _gil_line(result: RunResult) -> list[str]:
    return [ln for ln in result.summary().splitlines() if ln.startswith("GIL: ")]


def test_gil_detection_matches_the_interpreter():
    assert gil_serializes_threads() is GIL


@pytest.mark.skipif(not GIL, reason="a free-threaded interpreter: no line to show")
@pytest.mark.parametrize("engine, options", [
    ("vsn", {}), ("slack", {}), ("ordered", {}), ("sn", {"channels": "threads"})])
def test_threads_on_lambdas_say_the_gil_serializes_them(engine, options):
    r = _lambda_flow().run(engine=engine, parallelism=2, **options)
    [line] = _gil_line(r)
    v = sys.version_info
    assert "the Python functions of " in line and "aggregate" in line
    assert f"run on 2 threads, but CPython {v.major}.{v.minor} runs one thread's Python" in line
    assert "column expressions" in line and "channels='processes'" in line


@pytest.mark.parametrize("engine, options", [
    ("vsn", {"parallelism": 1}), ("ordered", {"parallelism": 1}),
    ("reference", {"parallelism": 2}), ("sn", {"parallelism": 2, "channels": "processes"})])
def test_no_gil_line_without_threads_sharing_python(engine, options):
    assert _gil_line(_lambda_flow().run(engine=engine, **options)) == []


def test_no_gil_line_on_the_columnar_path(tmp_path):
    tweets = tmp_path / "tweets.jsonl"
    tweets.write_text("".join(f'{{"ts": {i * 1000}, "text": "a b #c{i % 3}"}}\n'
                              for i in range(300)))
    r = query_flow("wordcount", [str(tweets)], str(tmp_path / "wc.jsonl"), {}, "vsn"
                   ).run(engine="vsn", parallelism=2)
    assert r.extra["paths"] == {"wordcount": "columnar"}
    assert _gil_line(r) == []
    # nor a thread on the GIL's core (runtime/gil_core.py): Arrow's kernels and its parse of
    # the source, on threads the source's thread starts, release the GIL
    assert "gil_core" not in r.extra


def _result(engine: str, **extra) -> RunResult:
    return RunResult(engine, 1.0, {"src": 10}, {"out": 5}, extra)


@pytest.mark.skipif(not GIL, reason="a free-threaded interpreter: no line to show")
def test_gil_line_from_what_the_run_reports():
    # scaled to 3 during the run and back to 1: it did ask three threads for a while
    scaled = _result("vsn", parallelism={"agg": 1}, parallelism_series={"agg": [(0, 1), (1, 3)]},
                     paths={"agg": "runs"})
    assert "run on 3 threads" in scaled.gil_note()
    # the ordered engine's workers are the threads, whatever each stage's degree
    assert _result("ordered", parallelism={"agg": 1}, workers=2, paths={"agg": "sliced"}
                   ).gil_note()
    assert _result("sn", parallelism={"agg": 2}, channels="threads").gil_note()
    assert _result("sn", parallelism={"agg": 2}, channels="processes").gil_note() is None
    assert _result("vsn", parallelism={"agg": 2}, paths={"agg": "columnar"}).gil_note() is None
    assert _result("spark", parallelism={"agg": 4}).gil_note() is None


def test_no_gil_line_on_a_free_threaded_build(monkeypatch):
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert not gil_serializes_threads()
    assert _result("vsn", parallelism={"agg": 2}, paths={"agg": "tuple"}).gil_note() is None
