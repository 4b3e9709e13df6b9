"""The columnar sliced A+ (issue #16): whole batches through Arrow kernels, windows out as
tables, give exactly the tuple-at-a-time outputs — for any windows (sliding, tumbling, a size
that is no multiple of the slide), any cut of the input into batches, tuples mixed with
batches, explicit watermarks, payloads the columnar f_MK refuses — and errors name the same
tuple; through the reference executor the run summary reports the path."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.batch import Batch
from stretchflow.errors import OperatorError
from stretchflow.operators.columnar import ColumnarSlicedInstance
from stretchflow.queries.wordcount import wordcount
from test_slicing import windows  # (WS, WA): multiples, gcd slices, tumbling

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
WORDS = ["a", "b", "c", "é", "x\ty", "", "  a  ", "b\u3000c", "d\u2028e"]


@st.composite
def tweets(draw, max_size=60):
    ts = draw(st.integers(-30, 30))
    items = []
    for _ in range(draw(st.integers(0, max_size))):
        ts += draw(st.one_of(st.just(0), st.integers(1, 4), st.integers(20, 80)))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
        items.append((ts, {"ts": ts, "text": text}))
    return items


def _tuple_outputs(op, items, marks=()):
    inst = op.instance()
    for ts, p in items:
        for w in [m for m in marks if m[0] == ts and m[1] == "before"]:
            inst.advance(w[2])
        inst.process(ts, p)
    inst.finish()
    return inst.take()


def _batch_outputs(op, items, cuts, as_table):
    inst = op.columnar_instance()
    assert isinstance(inst, ColumnarSlicedInstance)
    out = []
    bounds = sorted({0, len(items), *[c % (len(items) + 1) for c in cuts]})
    for a, b in zip(bounds, bounds[1:], strict=False):
        part = items[a:b]
        if not part:
            continue
        batch = Batch.of_items(part)
        if as_table:
            batch = Batch(batch.ts, table=pa.Table.from_pylist([p for _, p in part]))
        inst.process_batch(batch)
        got = inst.take_batch()
        if got is not None:
            assert list(got.ts) == sorted(got.ts)  # windows leave in timestamp order
            assert got.last <= part[-1][0]  # and only once the watermark passed them
            out += got.items()
    inst.finish()
    got = inst.take_batch()
    if got is not None:
        out += got.items()
    assert inst.take() == []  # every window went out as a table
    return out


@SETTINGS
@given(windows(), tweets(), st.lists(st.integers(0, 80), max_size=6), st.booleans())
def test_batches_give_the_tuple_path_outputs(w, items, cuts, as_table):
    ws, wa = w
    op = wordcount(size=ws, slide=wa)
    assert multiset(_batch_outputs(op, items, cuts, as_table)) == \
        multiset(_tuple_outputs(op, items))


@SETTINGS
@given(windows(), tweets(), st.lists(st.integers(0, 80), max_size=6))
def test_refused_payloads_go_tuple_at_a_time_and_mix_with_columnar_slices(w, items, cuts):
    # a lone surrogate makes the columnar f_MK refuse the batch holding it (Arrow cannot
    # encode it; str.split can): those batches go tuple at a time into dict slices
    ws, wa = w
    op = wordcount(size=ws, slide=wa)
    mixed = [(ts, p if k % 3 else {"ts": ts, "text": p["text"] + " \udc80z"})
             for k, (ts, p) in enumerate(items)]
    assert multiset(_batch_outputs(op, mixed, cuts, False)) == \
        multiset(_tuple_outputs(op, mixed))


def test_a_refused_batch_falls_back_and_windows_combine_both_kinds_of_slice():
    op = wordcount(size=4, slide=2)
    inst = op.columnar_instance()
    inst.process_batch(Batch.of_items([(0, {"text": "a b"}), (1, {"text": "a"})]))
    # a lone surrogate: str.split takes it, Arrow cannot encode it, so this batch goes tuple
    # at a time into a dict slice, and the window holding it is combined in Python
    inst.process_batch(Batch.of_items([(1, {"text": "a c"})]))
    inst.process_batch(Batch.of_items([(1, {"text": "a \ud800"}), (2, {"text": "c"})]))
    assert inst.groups[0][0]  # a dict slice holds the tuple path's counts
    inst.process_batch(Batch.of_items([(5, {"text": "c"})]))
    inst.finish()
    got = multiset(inst.take_batch().items())
    want = multiset(_tuple_outputs(op, [(0, {"text": "a b"}), (1, {"text": "a"}),
                                        (1, {"text": "a c"}), (1, {"text": "a \ud800"}),
                                        (2, {"text": "c"}), (5, {"text": "c"})]))
    assert got == want


def test_errors_name_the_tuple_as_tuple_at_a_time():
    flow = sf.Flow("bad")
    data = [{"ts": 1, "text": "a"}, {"ts": 2, "text": None}, {"ts": 3, "text": "b"}]
    sf.queries.build_query("wordcount", [flow.source(sf.io.iterable(data))]).collect()
    with pytest.raises(OperatorError) as e:
        flow.run(engine="reference")
    assert e.value.ts == 2 and e.value.payload == data[1]


def test_the_reference_engine_takes_the_columnar_path_and_reports_it(tmp_path):
    data = [{"ts": t * 7_000, "text": f"w{t % 5} w{t % 3}"} for t in range(400)]
    outs = {}
    for engine, kw in (("reference", {}), ("reference", {"parallelism": 2})):
        flow = sf.Flow("wc")
        sf.queries.build_query("wordcount", [flow.source(sf.io.iterable(data))]).collect()
        res = flow.run(engine=engine, **kw)
        outs[kw.get("parallelism", 1)] = multiset(flow.sinks[0][1].items)
        # at P = 2 the two instances share one columnar σ (issue #31)
        assert res.extra["paths"] == {"wordcount": "columnar"}
        assert f"paths: wordcount {res.extra['paths']['wordcount']}" in res.summary()
    assert outs[1] == outs[2] and outs[1]


def test_output_columns_must_be_two_names():
    with pytest.raises(ValueError, match="two or more different field names"):
        sf.operators.aggregate.Aggregate(size=2, keys=lambda t: t, init=int,
                                         update=lambda a, v: a + v, output_columns=("k", "k"))


@SETTINGS
@given(windows(), tweets(), st.lists(st.integers(0, 80), max_size=6), st.booleans(),
       st.sampled_from([1, 2, 3, None]))
def test_paircount_batches_give_the_tuple_path_outputs(w, items, cuts, as_table, distance):
    from stretchflow.queries.wordcount import paircount

    ws, wa = w
    op = paircount(size=ws, slide=wa, distance=distance)
    assert multiset(_batch_outputs(op, items, cuts, as_table)) == \
        multiset(_tuple_outputs(op, items))


def _stateless_flow(kind, data, engine, **kw):
    import pyarrow.compute as pc

    flow = sf.Flow("stateless")
    s = flow.source(sf.io.iterable(data))
    if kind == "map":
        s = s.map_batches(lambda t: t.append_column(
            "n", pc.add(t.column("v"), 1)).drop_columns(["v"]))
    elif kind == "pandas":
        s = s.map_batches(lambda df: df.assign(n=df["v"] * 2), format="pandas")
    else:
        s = s.filter(pc.field("v") > 2)
    s.collect()
    flow.run(engine=engine, **kw)
    return multiset(flow.sinks[0][1].items)


@pytest.mark.parametrize("kind", ["map", "pandas", "filter"])
def test_columnar_map_and_filter_give_the_same_tuples_on_every_engine(kind, tmp_path):
    data = [{"ts": t, "v": t % 5, "w": f"x{t}"} for t in range(300)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(__import__("json").dumps(d) + "\n" for d in data))
    ref = _stateless_flow(kind, data, "reference")
    assert ref and sum(ref[t].total() for t in ref) == (300 if kind != "filter" else 120)
    for engine, kw in (("vsn", {"parallelism": 2}), ("sn", {"parallelism": 2})):
        assert _stateless_flow(kind, data, engine, **kw) == ref, engine
    if kind == "pandas":
        return
    # through a file source, the reference engine runs the columnar forms on whole batches
    import unittest.mock

    import pyarrow.compute as pc

    from stretchflow.operators import stateless

    flow = sf.Flow("stateless-file")
    s = flow.source(sf.io.jsonl(path))
    s = s.filter(pc.field("v") > 2) if kind == "filter" else s.map_batches(
        lambda t: t.append_column("n", pc.add(t.column("v"), 1)).drop_columns(["v"]))
    s.collect()
    cls = stateless._ExprBatch if kind == "filter" else stateless._MapBatch
    rows: list[int] = []
    real = cls.__call__

    def spy(self, table):
        rows.append(table.num_rows)
        return real(self, table)

    with unittest.mock.patch.object(cls, "__call__", spy):
        flow.run(engine="reference")
    assert rows == [300]  # one batch: the whole file
    assert multiset(flow.sinks[0][1].items) == ref


def test_a_map_batches_that_changes_the_row_count_is_an_error_naming_the_operator():
    flow = sf.Flow("bad")
    flow.source(sf.io.iterable([{"ts": 1, "v": 1}])).map_batches(
        lambda t: t.slice(0, 0), name="shrink").collect()
    with pytest.raises(OperatorError) as e:
        flow.run(engine="reference")
    assert e.value.operator == "shrink" and "row r to row r" in str(e.value)


def test_tokens_of_ascii_batches_split_like_str_split_on_every_ascii_code_point():
    # a batch of ASCII text takes Arrow's ASCII whitespace kernel, unless it holds one of
    # U+001C..U+001F (whitespace to str.split, not to that kernel): each code point alone
    from stretchflow.queries.wordcount import _plain_ascii, token_columns

    for c in range(128):
        texts = [f"a{chr(c)}b", chr(c), f" {chr(c)}x ", "", "  q  r "]
        arr = pa.array(texts)
        assert _plain_ascii(arr) == (not 0x1C <= c <= 0x1F)
        rows, keys, _ = token_columns(pa.table({"text": texts}))
        want = [(r, k) for r, t in enumerate(texts) for k in t.split()]
        assert list(zip(rows.tolist(), keys.to_pylist(), strict=True)) == want, c
    assert not _plain_ascii(pa.array(["é"])) and _plain_ascii(pa.array(["x y"]).slice(0, 1))


def test_vsn_reports_each_operators_path():
    data = [{"ts": t * 7_000, "text": f"w{t % 5} w{t % 3}"} for t in range(300)]
    flow = sf.Flow("wc")
    sf.queries.build_query("wordcount", [flow.source(sf.io.iterable(data))]).collect()
    res = flow.run(engine="vsn", parallelism=2)
    assert res.extra["paths"] == {"wordcount": "sliced"}
    assert "paths: wordcount sliced" in res.summary()


def test_the_reference_explodes_each_batch_once_in_order_on_the_reading_thread(tmp_path):
    """A columnar O+ that is its source's one reader: f_MK's columnar form of the next batch
    runs on the read-ahead thread (explode_ahead), once per batch and in batch order, and the
    output is the tuple path's."""
    from columnar_cases import flow_of, recording, reference_multiset, words_file
    from stretchflow.executors.reference import BATCH
    from stretchflow.io.sources import JsonLines

    path = words_file(tmp_path, n=3 * BATCH + 5)
    calls: list = []
    flow, col = flow_of(path, recording(calls))
    res = flow.run("reference")
    assert res.extra["paths"] == {"wordcount": "columnar"}
    assert multiset(col) == reference_multiset(path, lambda: wordcount(size=2000, slide=500))
    n_batches = sum(1 for _ in JsonLines(path).batches(BATCH))
    assert n_batches >= 4 and len(calls) == n_batches
    assert {name for name, _ in calls} == {"stretchflow-read"}
    firsts = [ts for _, ts in calls]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)


def test_a_source_read_by_two_columnar_operators_is_exploded_by_each_on_the_run_thread(
        tmp_path):
    """Two readers of one source: each A+ explodes the batches itself (no f_MK computed ahead
    for one of them only), and both outputs are the tuple path's."""
    from columnar_cases import recording, reference_multiset, words_file
    from stretchflow.io.sources import JsonLines

    path = words_file(tmp_path, n=600)
    calls: list = []
    flow = sf.Flow()
    src = flow.source(JsonLines(path))
    cols = [src.oplus(recording(calls)).collect() for _ in range(2)]
    flow.run("reference")
    want = reference_multiset(path, lambda: wordcount(size=2000, slide=500))
    assert all(multiset(c) == want for c in cols)
    assert calls and "stretchflow-read" not in {name for name, _ in calls}
