"""Runs of tuples (issue #16): ``OPlusInstance.process_run`` and the executors that hand an O+
its input in runs give the outputs of processing each tuple alone, and a failure inside a run
names the tuple it came from.

Three operators cover process_run's three paths: ScaleJoin (``update_many``, a numba kernel),
wordcount (f_MK's columnar form: Arrow split and group-by, then f_U once per (window, key))
and a plain O+ (f_U and f_O that emit, no kernel: tuple at a time). The thresholds that keep
short runs off the kernels (``min_run``, ``columnar_min_run``) are set to 1 here, so that
even a run of one tuple takes the kernel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.errors import OperatorError
from stretchflow.eventtime import Watermark
from stretchflow.operators.oplus import OPlus, WindowSet
from stretchflow.queries.scalejoin import ScaleJoin
from stretchflow.queries.wordcount import wordcount

WORDS = ["a", "b", "c", "dd", "é", "#x"]
SEPS = [" ", "  ", "\t", "\n", " \u3000 "]


# -- operators --------------------------------------------------------------------------------
def _plain() -> OPlus:
    """A multi-window O+ whose f_U emits (into a later-closing window) and whose f_O emits:
    no kernel, so process_run takes it tuple at a time."""
    def update(ws: WindowSet, ts: int, t: dict, i: int) -> list | None:
        ws.states[0].append(t["id"])
        return [{"k": ws.key, "first": t["id"]}] if len(ws.states[0]) == 1 else None

    return OPlus(size=30, slide=10, keys=lambda t, i: {t["k"]}, init=list, update=update,
                 output=lambda ws: [{"k": ws.key, "ids": list(ws.states[0])}], name="plain")


def _wordcount(columnar: bool) -> OPlus:
    op = wordcount(size=40, slide=10)
    op.columnar_min_run = 1 if columnar else None
    return op


def _scalejoin(batched: bool) -> OPlus:
    op = ScaleJoin(window=25, band=3, n_keys=3)
    if batched:
        op.min_run = 1
    else:
        op.update_many = None  # not batchable: every engine takes it tuple at a time
    return op


def _make(kind: str, runs: bool) -> OPlus:
    if kind == "scalejoin":
        return _scalejoin(runs)
    if kind == "wordcount":
        return _wordcount(runs)
    return _plain()


# -- inputs -----------------------------------------------------------------------------------
@st.composite
def records(draw: Any, kind: str, n_max: int = 60) -> list[Any]:
    """(ts, payload, input) data tuples in timestamp order, with Watermark objects between
    them (as ``(w, None, -1)``), for operator ``kind``."""
    n = draw(st.integers(0, n_max))
    ts = 0
    out: list[Any] = []
    for k in range(n):
        ts += draw(st.sampled_from([0, 0, 1, 3, 7, 19]))
        if draw(st.integers(0, 9)) == 0:
            out.append((ts, None, -1))  # a watermark at the next tuple's timestamp
        if kind == "scalejoin":
            i = draw(st.integers(0, 1))
            a, b = draw(st.integers(0, 8)), draw(st.integers(0, 8))
            rec = {"ts": ts, "id": k, "x": a, "y": b} if i == 0 else \
                {"ts": ts, "id": k, "a": a, "b": b}
        elif kind == "wordcount":
            i = 0
            words = draw(st.lists(st.sampled_from(WORDS), max_size=5))
            seps = draw(st.lists(st.sampled_from(SEPS), min_size=len(words) + 1,
                                 max_size=len(words) + 1))
            rec = {"ts": ts, "text": "".join(s + w for s, w in zip(seps, words + [""],
                                                                    strict=True))}
        else:
            i = 0
            rec = {"ts": ts, "id": k, "k": draw(st.integers(0, 2))}
        out.append((ts, rec, i))
    return out


def _canon(items: list[tuple[int, Any]]) -> list[tuple[int, str]]:
    """Outputs as a timestamp-ordered check and a per-timestamp multiset (sorted reprs)."""
    tss = [ts for ts, _ in items]
    assert tss == sorted(tss), "outputs go back in time"
    return sorted((ts, repr(sorted(p.items()) if isinstance(p, dict) else p))
                  for ts, p in items)


# -- process_run against process, on one instance ---------------------------------------------
@pytest.mark.parametrize("kind", ["scalejoin", "wordcount", "plain"])
@settings(deadline=None, max_examples=40,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), cuts=st.lists(st.integers(1, 20), min_size=1, max_size=6))
def test_process_run_equals_tuple_at_a_time(kind: str, data: Any, cuts: list[int]) -> None:
    """Runs cut at watermarks and at drawn lengths (1 included) give, after every run and
    every watermark, the outputs released by processing each tuple alone, and the same ones
    at the end of input."""
    items = data.draw(records(kind), label="items")
    one, many = _make(kind, False).instance(), _make(kind, True).instance()
    got: list[tuple[int, Any]] = []
    want: list[tuple[int, Any]] = []
    run: list[tuple[int, Any, int]] = []
    c = 0

    def flush() -> None:
        nonlocal run
        if run:
            many.process_run(run)
            run = []
        got.extend(many.take())
        want.extend(one.take())
        assert _canon(got) == _canon(want)

    for ts, p, i in items:
        if i < 0:  # a watermark cuts the run
            flush()
            one.advance(ts)
            many.advance(ts)
            flush()
            continue
        one.process(ts, p, i)
        run.append((ts, p, i))
        if len(run) >= cuts[c % len(cuts)]:
            c += 1
            flush()
    flush()
    one.finish()
    many.finish()
    flush()


def test_takes_runs_only_with_a_kernel() -> None:
    """Executors gather runs only for an operator with a run path, so the general
    tuple-at-a-time path pays nothing for them."""
    assert _scalejoin(True).instance().takes_runs
    assert _wordcount(True).instance().takes_runs
    assert not _wordcount(False).instance().takes_runs
    assert not _plain().instance().takes_runs


# -- the engines: runs against tuple at a time ------------------------------------------------
ENGINES = [
    ("reference", {}),
    ("reference", {"parallelism": 2}),
    ("vsn", {"parallelism": 1}),
    ("vsn", {"parallelism": 2, "max_parallelism": 3, "reconfigure": [(40, 3), (90, 1)]}),
    ("sn", {"parallelism": 2, "channels": "threads"}),
    ("ordered", {"parallelism": 2}),
]


def _flow(kind: str, runs: bool, items: list[Any]) -> tuple[sf.Flow, Any]:
    flow = sf.Flow(f"runs-{kind}")
    ins = [[], []] if kind == "scalejoin" else [[]]
    for ts, p, i in items:
        if i < 0:
            for lst in ins:
                lst.append(Watermark(ts))
        else:
            ins[i].append(p)
    streams = [flow.source(sf.io.iterable(lst, name=f"in{n}")) for n, lst in enumerate(ins)]
    return flow, flow.oplus(_make(kind, runs), *streams).collect()


def _generated(kind: str, n: int) -> list[Any]:
    """A fixed input of ``n`` tuples with a watermark every 37 (long runs and cut ones)."""
    import random

    rnd = random.Random(7)
    out: list[Any] = []
    ts = 0
    for k in range(n):
        ts += rnd.choice([0, 1, 2, 5])
        if k and k % 37 == 0:
            out.append((ts, None, -1))
        if kind == "scalejoin":
            i = rnd.randint(0, 1)
            a, b = rnd.randint(0, 8), rnd.randint(0, 8)
            rec = {"ts": ts, "id": k, "x": a, "y": b} if i == 0 else \
                {"ts": ts, "id": k, "a": a, "b": b}
        else:
            i = 0
            rec = {"ts": ts, "text": " ".join(rnd.choices(WORDS, k=rnd.randint(0, 6)))}
        out.append((ts, rec, i))
    return out


@pytest.mark.parametrize(("engine", "options"), ENGINES,
                         ids=[f"{e}-{'-'.join(map(str, o.values()))}" for e, o in ENGINES])
@pytest.mark.parametrize("kind", ["scalejoin", "wordcount"])
def test_engines_in_runs_equal_reference_tuple_at_a_time(kind: str, engine: str,
                                                         options: dict) -> None:
    """Every local engine with the kernels on runs gives the per-timestamp multiset of the
    reference engine taking each tuple alone."""
    items = _generated(kind, 300)
    ref_flow, ref = _flow(kind, False, items)
    ref_flow.run("reference")
    flow, col = _flow(kind, True, items)
    flow.run(engine, **options)
    assert ref.items, "the input gives outputs"
    tss = [ts for ts, _ in col.items]
    assert tss == sorted(tss)
    assert _canon(col.items) == _canon(ref.items)


# -- a failure inside a run names its tuple ---------------------------------------------------
def _bad_flow(kind: str, bad_at: int, map_fails_at: int | None = None) -> sf.Flow:
    items = [it for it in _generated(kind, 200) if it[2] >= 0]
    ts, rec, i = items[bad_at]
    bad = dict(rec)
    if kind == "scalejoin":
        bad.pop("x" if i == 0 else "a")
    elif kind == "wordcount":
        bad["text"] = None  # columns refuses the run, tuple at a time fails on this one
    items[bad_at] = (ts, bad, i)
    flow = sf.Flow(f"bad-{kind}")
    ins: list[list[Any]] = [[], []] if kind == "scalejoin" else [[]]
    for _, p, i in items:
        ins[i].append(p)
    streams = [flow.source(sf.io.iterable(lst, name=f"in{n}")) for n, lst in enumerate(ins)]
    if map_fails_at is not None:
        fail_ts = items[map_fails_at][0]

        def check(t: dict) -> dict:
            if t["ts"] == fail_ts:
                raise ZeroDivisionError("upstream map failed")
            return t

        streams = [s.map(check, name="bad-map") for s in streams]
    flow.oplus(_make(kind, True), *streams).collect()
    flow.bad = (ts, bad)  # type: ignore[attr-defined]
    return flow


@pytest.mark.parametrize(("engine", "options"), ENGINES[:1] + ENGINES[2:],
                         ids=[e for e, _ in ENGINES[:1] + ENGINES[2:]])
@pytest.mark.parametrize("kind", ["scalejoin", "wordcount"])
def test_error_in_a_run_names_the_failing_tuple(kind: str, engine: str,
                                                options: dict) -> None:
    flow = _bad_flow(kind, 77)
    ts, bad = flow.bad  # type: ignore[attr-defined]
    with pytest.raises(OperatorError) as info:
        flow.run(engine, **options)
    err = info.value
    assert err.operator == flow.nodes[-1].name
    assert (err.ts, err.payload) == (ts, bad)
    assert isinstance(err.__cause__, KeyError | AttributeError)


def test_plain_run_names_the_failing_tuple() -> None:
    """The tuple-at-a-time path of process_run names the tuple whose f_U raised, not the
    run's first."""
    from stretchflow.errors import RunTupleError

    def update(ws: WindowSet, ts: int, t: dict, i: int) -> None:
        if t["id"] == 5:
            raise ValueError("f_U failed")

    op = OPlus(size=10, keys=lambda t, i: {0}, init=list, update=update)
    run = [(k, {"id": k}, 0) for k in range(10)]
    with pytest.raises(RunTupleError) as info:
        op.instance().process_run(run)
    assert (info.value.ts, info.value.payload) == (5, {"id": 5})
    assert isinstance(info.value.cause, ValueError)


@pytest.mark.parametrize(("bad_at", "map_at", "who"), [(10, 150, "op"), (150, 10, "map")])
def test_reference_gathering_a_run_keeps_the_first_error(bad_at: int, map_at: int,
                                                         who: str) -> None:
    """The reference O+ pulls a run ahead of processing it; an upstream error met while
    gathering is raised after the tuples before it are processed, so whichever failure
    comes first in the stream is the one reported, as tuple at a time."""
    flow = _bad_flow("wordcount", bad_at, map_fails_at=map_at)
    with pytest.raises(OperatorError) as info:
        flow.run("reference")
    assert info.value.operator == ("wordcount" if who == "op" else "bad-map")


def test_reference_reads_runs_up_to_a_watermark() -> None:
    """The reference O+ hands the kernel the tuples up to the next watermark: the runs (as
    batches: wordcount runs on columns, issue #16) are cut there, and are longer than one
    tuple."""
    items = _generated("wordcount", 300)
    flow, _ = _flow("wordcount", True, items)
    op = flow.nodes[-1].spec
    seen: list[int] = []
    cls = type(op.columnar_instance())
    real = cls.process_batch

    def spy(self: Any, batch: Any) -> None:
        seen.append(len(batch))
        real(self, batch)

    import unittest.mock

    with unittest.mock.patch.object(cls, "process_batch", spy):
        flow.run("reference")
    # a watermark every 37 tuples: runs of 37 (the first of 37 too, k = 1..37 less one)
    assert sum(seen) == 300
    assert max(seen) == 37 and Counter(seen)[37] >= 6
