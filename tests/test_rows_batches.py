"""Batch-at-a-time for flows of Python functions (issue #32): an A+ instance's
``process_rows``, the stateless operators' ``apply_rows``, JSON Lines' rows-only batches and
the reference executor running a lambda flow on batches of rows — each against the tuple path
it must equal (same σ, same outputs in the same order, the same error at the same tuple)."""

from __future__ import annotations

import random

import pytest

import stretchflow as sf
from stretchflow.batch import Batch
from stretchflow.errors import OperatorError, RunTupleError, SourceError, StretchflowError
from stretchflow.operators.aggregate import Aggregate
from stretchflow.operators.stateless import Filter, FlatMap, Map, apply_batch, apply_rows


def _keys(kind: str):
    def keys(t):
        if kind == "multi":  # several keys (a list), or per-key values (a dict)
            return [t["k"], t["k"] + 1] if t["k"] % 3 else {t["k"]: 2}
        if kind == "none" and t["k"] == 0:
            return None  # no key: the tuple updates nothing
        return t["k"]
    return keys


@pytest.mark.parametrize("seed", range(6))
def test_process_rows_equals_process(seed):
    """Random windows (tumbling: the plain instance; sliding: the sliced one), keys of every
    form, input cut into random batches: the same outputs, in the same order, and the same
    watermark as tuple at a time."""
    rng = random.Random(seed)
    for _ in range(40):
        size = rng.choice([3, 5, 10])
        slide = min(size, rng.choice([1, 2, size]))
        kind = rng.choice(["one", "sum", "multi", "none"])
        agg = sf.sum_of(lambda t: t["x"]) if kind == "sum" else sf.count()
        n = rng.randint(0, 150)
        ts = sorted(rng.randint(0, 60) for _ in range(n))
        rows = [{"k": rng.randint(0, 4), "x": rng.randint(-5, 5)} for _ in range(n)]

        def make(agg=agg, size=size, slide=slide, kind=kind):
            return Aggregate(size=size, slide=slide, keys=_keys(kind), **agg).instance()

        a, b = make(), make()
        out_a, out_b = [], []
        for t, r in zip(ts, rows, strict=True):
            a.process(t, r)
        i = 0
        while i < n:
            j = rng.randint(i + 1, n)
            b.process_rows(ts[i:j], rows[i:j])
            out_b += b.take()
            i = j
        out_a += a.take()
        a.finish()
        b.finish()
        assert out_a + a.take() == out_b + b.take()
        assert (a.W, a._last_l) == (b.W, b._last_l)


def test_process_rows_names_the_failing_tuple():
    calls = []

    def keys(t):
        calls.append(t["i"])
        if t["i"] == 7:
            raise ValueError("bad tuple")
        return t["i"] % 2

    for slide in ("2s", "4s"):  # sliced and plain
        calls.clear()
        inst = Aggregate(size="4s", slide=slide, keys=keys, **sf.count()).instance()
        rows = [{"i": i} for i in range(10)]
        with pytest.raises(RunTupleError) as e:
            inst.process_rows(list(range(0, 10_000, 1000)), rows)
        assert (e.value.ts, e.value.payload) == (7000, {"i": 7})
        assert calls == list(range(8))  # the rows after it were not read


def test_process_rows_with_shared_state_takes_the_general_path():
    """Instances sharing σ (an assignment of key groups) process a batch as tuple at a time."""
    from stretchflow.operators.oplus import SharedState

    op = Aggregate(size="4s", slide="2s", keys=lambda t: t["k"], **sf.count())
    ts = list(range(0, 20_000, 500))
    rows = [{"k": i % 5} for i in range(len(ts))]
    sigma, assign = SharedState(4), [0, 1, 0, 1]
    by_rows = [op.instance(sigma, j, assign) for j in range(2)]
    for inst in by_rows:
        inst.process_rows(ts, rows)
        inst.finish()
    sigma2 = SharedState(4)
    by_tuple = [op.instance(sigma2, j, assign) for j in range(2)]
    for inst in by_tuple:
        for t, r in zip(ts, rows, strict=True):
            inst.process(t, r)
        inst.finish()
    assert [i.take() for i in by_rows] == [i.take() for i in by_tuple]


# -- stateless operators --------------------------------------------------------------------
def _batch(n: int) -> Batch:
    return Batch(list(range(n)), payloads=[{"i": i} for i in range(n)])


@pytest.mark.parametrize("op", [
    Map(lambda t: {"j": t["i"] * 2}),
    Filter(lambda t: t["i"] % 3),
    FlatMap(lambda t: [t] * (t["i"] % 3)),
], ids=["map", "filter", "flat_map"])
def test_apply_rows_equals_apply_batch(op):
    b = _batch(50)
    out, err = apply_rows(op, b)
    assert err is None
    assert out.items() == apply_batch(op, b.items())


@pytest.mark.parametrize("kind", ["map", "filter", "flat_map"])
def test_apply_rows_failure_keeps_what_came_before(kind):
    calls = []

    def fn(t):
        calls.append(t["i"])
        if t["i"] == 20:
            raise KeyError("boom")
        return {"i": t["i"]} if kind == "map" else (t["i"] % 2 if kind == "filter" else [t, t])

    op = {"map": Map, "filter": Filter, "flat_map": FlatMap}[kind](fn)
    b = _batch(40)
    out, err = apply_rows(op, b)
    assert isinstance(err, OperatorError)
    assert "20" in str(err) and isinstance(err.__cause__, KeyError)
    assert calls == list(range(21))  # each tuple once, none after the failing one
    expected = apply_batch(op, b.items()[:20])
    assert out.items() == expected


def test_apply_rows_flat_map_partial_outputs_of_the_failing_tuple():
    def fn(t):
        yield t
        if t["i"] == 3:
            raise ValueError("midway")
        yield t

    out, err = apply_rows(FlatMap(fn), _batch(6))
    assert err is not None
    # two outputs per tuple before it, then the one the failing tuple gave before raising
    assert [ts for ts, _ in out.items()] == [0, 0, 1, 1, 2, 2, 3]


# -- JSON Lines rows-only batches -----------------------------------------------------------
_CASES = {
    "plain": "".join(f'{{"ts": {i}, "a": {i % 7}}}\n' for i in range(300)),
    "blank and iso": '{"ts":1,"a":2}\n\n{"ts":2}\n{"ts":"1970-01-01T00:00:00.003Z"}\n'
                     '{"ts":3,"b":[1]}\n',
    "bool and float ts": '{"ts":1}\n{"ts":2.0}\n{"ts":true}\n',
    "non-object": '{"ts":1}\n[1,2]\n',
    "goes back": '{"ts":5}\n{"ts":6}\n{"ts":4}\n',
    "malformed": '{"ts":1}\n{"ts":2,\n',
    "huge ts": '{"ts":1}\n{"ts":99999999999999999999}\n',
    "no newline at end": '{"ts":1}\n{"ts":2}',
    # one parse per chunk (a JSON array of its lines) must still see a line as the tuple
    # path does: two values on a line, a whitespace-only line, CR LF endings, a string value
    # holding an escaped line break
    "two objects on a line": '{"ts":1}\n{"ts":2},{"ts":3}\n{"ts":4}\n',
    "two numbers on a line": '{"ts":1}\n1, 2\n{"ts":4}\n',
    "whitespace line": '{"ts":1}\n   \n{"ts":4}\n',
    "crlf": '{"ts":1,"a":"x"}\r\n{"ts":2}\r\n',
    "escaped newline": '{"ts":1,"s":"a\\nb"}\n{"ts":2,"s":"c,d"}\n',
}


def _outcome(it):
    got = []
    try:
        for x in it:
            got.append(x)
    except (SourceError, ValueError) as e:
        return got, str(e)
    return got, None


@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.parametrize("rows", [1, 2, 64])
def test_jsonl_row_batches_equal_items(tmp_path, case, rows):
    """The same tuples as ``items()``, and the same error after the same tuples."""
    p = tmp_path / "in.jsonl"
    p.write_text(_CASES[case])
    want = _outcome(sf.io.jsonl(p).items())
    bs = sf.io.jsonl(p).batches(rows, tables=False)
    got = _outcome(it for b in bs for it in b.items())
    assert got == want
    for b in sf.io.jsonl(p).batches(rows, tables=False) if want[1] is None else ():
        assert not b.has_table  # rows only: no Arrow table was built


# -- the reference executor -----------------------------------------------------------------
def _bids(path, n=3000, seed=5):
    rng = random.Random(seed)
    ts = 0
    with open(path, "w") as f:
        for _ in range(n):
            ts += rng.randint(0, 40)
            f.write(f'{{"ts": {ts}, "auction": {rng.randint(1, 30)}, '
                    f'"price": {rng.randint(1, 500)}}}\n')


def _flow(path, out, fail_map_at=None, fail_agg_at=None):
    flow = sf.Flow("rows")

    def price(t):
        if t["price"] == fail_map_at:
            raise ValueError("map fails")
        return {**t, "eur": t["price"] * 0.9}

    def keys(t):
        if t["price"] == fail_agg_at:
            raise ValueError("aggregate fails")
        return t["auction"]

    s = flow.source(sf.io.jsonl(path)).filter(lambda t: t["price"] > 20).map(price)
    counts = s.aggregate(size="2s", slide="500ms", keys=keys, **sf.count(),
                         output=lambda k, n: {"auction": k, "n": n})
    top = counts.aggregate(size="500ms", keys=lambda t: 0, init=list,
                           update=lambda a, t: a + [t["n"]], output=lambda k, a: {"top": max(a)})
    top.flat_map(lambda t: [t, {"again": t["top"]}]).sink(out)
    return flow


def test_reference_lambda_flow_on_batches_equals_tuples(tmp_path):
    src = tmp_path / "bids.jsonl"
    _bids(src)
    outs = {}
    for columnar in ("on", "off"):
        out = tmp_path / f"out-{columnar}.jsonl"
        _flow(src, out).run(engine="reference", columnar=columnar)
        outs[columnar] = out.read_bytes()
    assert outs["on"] == outs["off"] and outs["on"].count(b"\n") > 10


def test_reference_lambda_flow_error_order(tmp_path):
    """The error tuple at a time would raise: the aggregate's on an earlier tuple wins over
    the map's on a later one in the same batch, and the other way round."""
    src = tmp_path / "bids.jsonl"
    _bids(src, n=500)
    prices = [int(line.split(b'"price": ')[1].rstrip(b"}\n"))
              for line in src.read_bytes().splitlines()]
    kept = [p for p in prices if p > 20]
    early, late = kept[10], next(p for p in kept[200:] if p not in kept[:200])
    for map_at, agg_at, want in ((late, early, "aggregate fails"),
                                 (early, late, "map fails")):
        msgs = {}
        for columnar in ("on", "off"):
            with pytest.raises(OperatorError) as e:
                _flow(src, tmp_path / "o.jsonl", map_at, agg_at).run(
                    engine="reference", columnar=columnar)
            msgs[columnar] = str(e.value)
        assert msgs["on"] == msgs["off"] and want in msgs["on"]


class _Crash(StretchflowError):  # passes through operators unchanged, as a kill would stop
    pass


def test_reference_lambda_flow_killed_mid_batch_resumes_exactly(tmp_path):
    """A flow of Python functions on batches of rows, checkpointed every 400 tuples, failing
    inside a batch (f_MK raises at the 2 500th call: batches are 16 384 rows, so mid-batch),
    then resumed from its checkpoint: the output of an uninterrupted run, byte for byte."""
    src = tmp_path / "bids.jsonl"
    _bids(src, n=4000)
    calls = [0]

    def build(out, crash_at=None):
        flow = sf.Flow("resume")

        def keys(t):
            calls[0] += 1
            if calls[0] == crash_at:
                raise _Crash("killed")
            return t["auction"]

        s = flow.source(sf.io.jsonl(src)).map(lambda t: {**t, "eur": t["price"] * 0.9})
        s.aggregate(size="2s", slide="500ms", keys=keys, **sf.count(),
                    output=lambda k, n: {"auction": k, "n": n}).sink(out)
        return flow

    plain = tmp_path / "plain.jsonl"
    res = build(plain).run(engine="reference")
    assert res.extra["paths"]["aggregate"] == "sliced"
    ck, out = tmp_path / "ck", tmp_path / "resumed.jsonl"
    calls[0] = 0
    with pytest.raises(_Crash):
        build(out, crash_at=2500).run(engine="reference", checkpoint=str(ck),
                                      checkpoint_every=400)
    assert not out.exists() and any(ck.iterdir())
    build(out).run(engine="reference", checkpoint=str(ck), checkpoint_every=400)
    assert out.read_bytes() == plain.read_bytes() and plain.stat().st_size > 0


@pytest.mark.parametrize("P", [2, 3])
def test_reference_partitioned_shares_the_keys_of_a_batch(tmp_path, P):
    """At parallelism P the reference's P instances (one thread) compute a batch's keys once
    for all of them (as VSN's): f_MK called once per tuple, the output that of P = 1."""
    src = tmp_path / "bids.jsonl"
    _bids(src, n=3000)
    calls = [0]

    def keys(t):
        calls[0] += 1
        return t["auction"]

    outs = {}
    for p in (1, P):
        calls[0] = 0
        flow = sf.Flow("p")
        c = flow.source(sf.io.jsonl(src)).aggregate(size="2s", slide="500ms", keys=keys,
                                                     **sf.count()).collect()
        flow.run(engine="reference", parallelism=p)
        outs[p] = sorted(map(repr, c.items))
        assert calls[0] == 3000
    assert outs[1] == outs[P] and outs[1]


def test_a_batch_of_rows_keeps_its_timestamps_list():
    """A batch made from a list of timestamps (an O+'s outputs, a JSON Lines chunk's parse)
    gives consumers that list itself (no list -> array -> list round trip per row); the numpy
    form is made once, on demand, and equals it; made from an array, the list is made once."""
    import numpy as np

    ts = [3, 5, 5, 9]
    b = Batch.of_items([(t, {"t": t}) for t in ts])
    assert b.ts_list() == ts and b.ts_list() is b.ts_list()
    assert (len(b), b.first, b.last) == (4, 3, 9)
    assert b._ts is None  # nothing above needed the array
    assert b.ts.dtype == np.int64 and b.ts.tolist() == ts and b.ts is b.ts
    kept = Batch(np.asarray(ts), payloads=[0] * 4, ts_list=ts)
    assert kept.ts_list() is ts
    a = Batch(np.asarray(ts), payloads=[0] * 4)
    assert a.ts_list() == ts and a.ts_list() is a.ts_list()
    assert b.items() == [(t, {"t": t}) for t in ts]
