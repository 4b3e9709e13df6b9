"""Flows of column-expression operators (issue #31): ``filter(expr)``, ``select``,
``with_columns``. The reference engine runs their columnar forms on a file source's batches;
with ``columnar="off"``, and on every other engine, their row forms run tuple by tuple: both
give the same output, on JSON Lines and on Parquet."""

import collections
import json
import pickle
import random
import subprocess
import sys
import unittest.mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.operators import stateless
from stretchflow.operators.stateless import Filter, Map


def _bids(n: int = 3000, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append({"ts": i // 3, "auction": rng.randrange(50), "bidder": rng.randrange(400),
                    "price": rng.randrange(1, 100_000), "category": rng.randrange(10, 16),
                    "channel": rng.choice(["web", "app", "apple", "Web"]),
                    # a field that is null on some rows (present on every line)
                    "extra": rng.choice([None, rng.randrange(-5, 5)])})
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bids")
    rows = _bids()
    jsonl = d / "bids.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = d / "bids.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    return {"jsonl": jsonl, "parquet": parquet}


def _q_filter(s):
    return s.filter(sf.col("price") > 50_000)


def _q_documented(s):  # the example of docs/api.md
    return (s.filter((sf.col("price") > 50_000) & (sf.col("category") != 12))
             .with_columns(price_eur=sf.col("price") * 0.908)
             .select("ts", "auction", "price_eur", cat=sf.col("category").cast(str)))


def _q_replace(s):
    return s.with_columns(
        (sf.col("price") // 100).alias("price"),  # replaced in place
        tier=sf.when(sf.col("price") > 80_000).then("high")
               .when(sf.col("price") > 20_000).then("mid").otherwise("low"),
        web=sf.col("channel").str.starts_with("web"),
        has_p=sf.col("channel").str.contains("p"),
        n=sf.col("channel").str.len() + sf.col("extra").fill_null(0),
        even=(sf.col("ts") % 2 == 0),  # the payload's ts field, on both paths
    )


def _q_nulls(s):
    # comparisons with a null are None: those rows are dropped, as False ones are
    return (s.filter(sf.col("extra") > 0)
             .select(sf.col("ts"), "bidder", e="extra", half=sf.col("extra") / 2))


QUERIES = {"filter": _q_filter, "documented": _q_documented, "replace": _q_replace,
           "nulls": _q_nulls}


def _run_to_file(path, query, out, **kw):
    flow = sf.Flow("q")
    query(flow.source(sf.io.open_source(path), name="bids")).sink(out)
    flow.run(**kw)
    return out.read_bytes()


def _run_collect(path, query, engine, **kw):
    flow = sf.Flow("q")
    out = query(flow.source(sf.io.open_source(path), name="bids")).collect()
    flow.run(engine=engine, **kw)
    return out.items


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("q", list(QUERIES))
def test_columnar_and_tuple_paths_write_the_same_bytes(files, fmt, q, tmp_path):
    on = _run_to_file(files[fmt], QUERIES[q], tmp_path / "on.jsonl")
    off = _run_to_file(files[fmt], QUERIES[q], tmp_path / "off.jsonl", columnar="off")
    assert on == off
    lines = on.splitlines()
    assert 0 < len(lines) < 3000 or q == "replace"
    if q == "documented":
        first = json.loads(lines[0])
        assert list(first) == ["ts", "auction", "price_eur", "cat"]
        assert isinstance(first["price_eur"], float) and isinstance(first["cat"], str)
    if q == "replace":
        rec = json.loads(lines[0])
        assert list(rec)[:7] == ["ts", "auction", "bidder", "price", "category", "channel",
                                 "extra"]
        assert list(rec)[7:] == ["tier", "web", "has_p", "n", "even"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_json_lines_and_parquet_give_the_same_records(files, fmt, tmp_path):
    # the same rows, so the same outputs whatever the format
    a = _run_to_file(files["jsonl"], _q_documented, tmp_path / "a.jsonl")
    b = _run_to_file(files[fmt], _q_documented, tmp_path / "b.jsonl")
    assert a == b


@pytest.mark.parametrize("q", ["documented", "replace", "nulls"])
@pytest.mark.parametrize("engine", ["vsn", "sn", "ordered"])
def test_every_engine_gives_the_reference_output(files, q, engine):
    ref = collections.Counter(map(repr, _run_collect(files["jsonl"], QUERIES[q],
                                                     "reference")))
    got = collections.Counter(map(repr, _run_collect(files["jsonl"], QUERIES[q], engine,
                                                     parallelism=2)))
    assert got == ref and sum(ref.values()) > 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_reference_runs_the_batch_forms_and_never_the_row_forms(files, fmt):
    calls = collections.Counter()

    def spy(cls, kind):
        real = cls.__call__

        def call(self, x):
            calls[kind] += 1
            return real(self, x)
        return unittest.mock.patch.object(cls, "__call__", call)

    with spy(stateless._ExprFilterBatch, "filter batch"), \
            spy(stateless._ProjectBatch, "project batch"), \
            spy(stateless._ExprFilterRow, "filter row"), \
            spy(stateless._ProjectRow, "project row"):
        items = _run_collect(files[fmt], _q_documented, "reference")
    assert items
    assert calls["filter batch"] >= 1 and calls["project batch"] >= 2  # with_columns, select
    assert calls["filter row"] == 0 and calls["project row"] == 0


def test_a_batch_the_kernels_refuse_goes_tuple_at_a_time_with_pythons_values(files):
    def q(s):  # int64 overflows: Python's ints do not
        return s.with_columns(big=sf.col("price") * (2 ** 62))
    on = _run_collect(files["jsonl"], q, "reference")
    off = _run_collect(files["jsonl"], q, "reference", columnar="off")
    assert on == off and on[0][1]["big"] == on[0][1]["price"] * 2 ** 62 > 2 ** 63


def test_a_row_error_is_one_operator_error_naming_the_tuple(tmp_path):
    rows = [{"ts": 1, "x": 5}, {"ts": 2, "x": 0}, {"ts": 3, "x": 1}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flow = sf.Flow("q")
    flow.source(sf.io.jsonl(path)).with_columns(r=100 // sf.col("x"), name="ratio").collect()
    with pytest.raises(OperatorError) as e:
        flow.run()
    assert e.value.operator == "ratio" and e.value.ts == 2
    assert "ZeroDivisionError" in str(e.value)


def _typo_flow(src, out):
    flow = sf.Flow("typo")
    bids = flow.source(sf.io.open_source(src), name="bids")
    bids.filter(sf.col("pricee") > 50_000).with_columns(eur=sf.col("price") * 0.9) \
        .sink(out)
    return flow


def test_a_missing_column_on_json_lines_names_operator_tuple_and_columns(files, tmp_path):
    out = tmp_path / "out.jsonl"
    with pytest.raises(OperatorError) as e:
        _typo_flow(files["jsonl"], out).run()
    msg = str(e.value)
    assert msg.startswith("operator 'filter' failed on tuple ts=0 payload={'ts': 0, ")
    assert msg.endswith("MissingColumn: no column 'pricee' (columns: ts, auction, bidder, "
                        "price, category, channel, extra)")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_missing_column_on_parquet_is_an_error_before_the_run(files, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("keep\n")
    flow = _typo_flow(files["parquet"], out)
    with unittest.mock.patch.object(sf.io.parquet(files["parquet"]).__class__, "_batches",
                                    side_effect=AssertionError("the file was read")):
        with pytest.raises(FlowDefinitionError) as e:
            flow.run()
    assert str(e.value) == (
        "filter 'filter': no column 'pricee' in its input (columns: ts, auction, bidder, "
        f"price, category, channel, extra; source 'bids', {files['parquet']})")
    assert out.read_text() == "keep\n"


def test_columns_a_select_made_are_known_before_the_run_whatever_the_source():
    flow = sf.Flow("q")
    s = flow.source(sf.io.iterable([{"ts": 1, "a": 1, "b": 2}]))
    s.select("a", two=sf.col("b") * 2).with_columns(c=sf.col("two") + 1) \
        .filter(sf.col("b") > 0, name="late").collect()
    with pytest.raises(FlowDefinitionError, match=r"^filter 'late': no column 'b' in its "
                       r"input \(columns: a, two, c; made by with_columns 'with_columns'\)$"):
        flow.run()


def test_the_cli_reports_a_missing_column_in_one_line_and_keeps_the_output(files, tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import os\nimport stretchflow as sf\n"
        "flow = sf.Flow('typo')\n"
        "s = flow.source(sf.io.open_source(os.environ['SRC']), name='bids')\n"
        "s.filter(sf.col('pricee') > 50_000).sink(os.environ['OUT'])\n")
    out = tmp_path / "keep.jsonl"
    for fmt, want in (("jsonl", "error: operator 'filter' failed on tuple ts=0 payload="),
                      ("parquet", "error: filter 'filter': no column 'pricee' in its input")):
        out.write_text("keep\n")
        r = subprocess.run([sys.executable, "-m", "stretchflow", "run", str(app)],
                           env={**__import__("os").environ, "SRC": str(files[fmt]),
                                "OUT": str(out)},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(want), r.stderr
        assert "no column 'pricee'" in lines[0] and "Traceback" not in r.stderr
        assert out.read_text() == "keep\n"


def test_definition_errors_are_one_line_naming_the_operator():
    flow = sf.Flow("q")
    s = flow.source(sf.io.iterable([{"ts": 1, "a": 1}]))
    with pytest.raises(FlowDefinitionError, match=r"^select 'select': the expression "
                       r"\(col\('a'\) \+ lit\(1\)\) has no name; give it one with "
                       r"\.alias\('name'\) or as name=expression$"):
        s.select(sf.col("a") + 1)
    with pytest.raises(FlowDefinitionError, match="with_columns 'wc': the column 'b' is given "
                                                  "twice"):
        s.with_columns(sf.col("a").alias("b"), b=sf.col("a"), name="wc")
    with pytest.raises(FlowDefinitionError, match=r"^map 'map': takes a function of the "
                       r"payload; for column expressions use with_columns"):
        s.map(sf.col("a") * 2)
    with pytest.raises(FlowDefinitionError, match=r"^filter 'f': takes a function of the "
                       r"payload, a column expression .* got int 5$"):
        s.filter(5, name="f")
    with pytest.raises(FlowDefinitionError, match=r"^flat_map 'flat_map': takes a function "
                       r"of the payload, got str 'a'$"):
        s.flat_map("a")
    with pytest.raises(FlowDefinitionError, match="x= takes a column expression or a column "
                                                  "name, got int 3"):
        s.select(x=3)


def test_the_operators_carry_their_expressions_for_other_compilers():
    flow = sf.Flow("q")
    s = flow.source(sf.io.iterable([{"ts": 1, "a": 1}]))
    f = s.filter(sf.col("a") > 0)
    sel = f.select("a", (sf.col("a") * 2).alias("b"), c="a")
    wc = sel.with_columns(d=sf.col("b") + 1)
    assert type(f.node.spec) is Filter and f.node.spec.expr.same(sf.col("a") > 0)
    m = sel.node.spec
    assert type(m) is Map and m.keep_input is False
    assert [n for n, _ in m.exprs] == ["a", "b", "c"]
    assert m.exprs[1][1].same((sf.col("a") * 2).alias("b")) and m.exprs[2][1].same(
        sf.col("a"))
    assert wc.node.spec.keep_input is True and wc.node.spec.exprs[0][0] == "d"
    plain = s.map(lambda t: t).node.spec
    assert plain.exprs is None and plain.keep_input is False
    assert s.filter(lambda t: True).node.spec.expr is None


def test_the_operators_pickle_and_compute_the_same_after():
    # an SN process channel pickles its operators
    flow = sf.Flow("q")
    s = flow.source(sf.io.iterable([{"ts": 1, "a": 1}]))
    for op in (s.filter(sf.col("a") > 0).node.spec,
               s.with_columns(b=sf.col("a").cast(str)).node.spec):
        p = {"ts": 1, "a": 3}
        op.fn(p)  # compiled before pickling: what travels is the expressions
        back = pickle.loads(pickle.dumps(op))
        assert back.fn(p) == op.fn(p)
        t = pa.Table.from_pylist([p])
        if type(op) is Filter:
            rows, kept = back.batch_fn(t)
            assert list(rows) == [0] and kept.to_pylist() == [p]
        else:
            assert back.batch_fn(t).to_pylist() == [op.fn(p)] == [{"ts": 1, "a": 3, "b": "3"}]


def test_a_filter_expression_that_is_not_boolean_is_an_error_naming_the_tuple():
    flow = sf.Flow("q")
    flow.source(sf.io.iterable([{"ts": 1, "a": 1}])).filter(sf.col("a"), name="f").collect()
    with pytest.raises(OperatorError, match=r"operator 'f' failed on tuple ts=1 .*TypeError: "
                       r"the filter expression col\('a'\) gave int 1, not a bool"):
        flow.run()


@pytest.mark.parametrize("lines", [['{"ts":1,"x":1}', '{"ts":2}'],
                                   ['{"ts":1,"x":1}', '{"ts":2,"x":2.5}']])
def test_known_gap_json_fields_missing_or_mixing_ints_and_floats(lines, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")

    def q(s):
        return s.filter(sf.col("ts") > 0)
    on = _run_to_file(path, q, tmp_path / "on.jsonl")
    off = _run_to_file(path, q, tmp_path / "off.jsonl", columnar="off")
    assert on == off


def test_an_expression_flow_does_not_import_pandas(files, tmp_path):
    # pa.scalar, pa.array and to_numpy import pandas on first use (~0.25 s of start-up)
    code = (
        "import sys, stretchflow as sf\n"
        "f = sf.Flow('q')\n"
        "s = f.source(sf.io.open_source(sys.argv[1]))\n"
        "s.filter((sf.col('price') > 50_000) & sf.col('auction').is_in([1, 2, 3]))"
        ".with_columns(eur=sf.col('price') * 0.908, d=sf.col('price') // 7,"
        " m=sf.col('extra').fill_null(0) % 3, c=sf.col('category').cast(str),"
        " t=sf.when(sf.col('price') > 9).then('a').otherwise(None))"
        ".sink(sys.argv[2])\n"
        "f.run()\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n")
    for fmt in ("jsonl", "parquet"):
        r = subprocess.run([sys.executable, "-c", code, str(files[fmt]),
                            str(tmp_path / "o.jsonl")], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "o.jsonl").stat().st_size > 0


def _ts_k_x(path, n: int) -> None:
    """A Parquet file of ``n`` tuples ``{"ts", "k", "x"}``, one a millisecond."""
    pq.write_table(pa.table({"ts": list(range(n)), "k": [i % 7 for i in range(n)],
                             "x": [i % 13 for i in range(n)]}), path)


def _sum_by_k(size: str) -> dict:
    """The same sum per key, as column expressions and with a lambda map before its O+."""
    return {
        "expressions": lambda s: s.filter(sf.col("x") >= 0)
        .aggregate(size=size, keys="k", **sf.sum_of("x")),
        "a lambda map": lambda s: s.map(lambda t: t)
        .aggregate(size=size, keys="k", **sf.sum_of("x")),
    }


def test_the_reference_reads_wide_batches_only_where_no_stage_multiplies_rows(tmp_path):
    """A flow of column expressions (one row per tuple at most) reads Parquet 65 536 rows a
    batch; one with a lambda before its O+ 8 192 (a batch's rows times what
    each makes downstream is its memory: executors/plan.one_row_each)."""
    from conformance.contract import multiset
    from stretchflow.executors import reference
    from stretchflow.operators.columnar import ColumnarSlicedInstance

    n = 100_000
    path = tmp_path / "t.parquet"
    _ts_k_x(path, n)
    seen: list[int] = []
    real = ColumnarSlicedInstance.process_batch

    def spy(self, batch):
        seen.append(len(batch))
        return real(self, batch)

    shapes = _sum_by_k("10s")
    sizes, outs = {}, []
    with unittest.mock.patch.object(ColumnarSlicedInstance, "process_batch", spy):
        for name, make in shapes.items():
            seen.clear()
            flow = sf.Flow()
            col = make(flow.source(sf.io.parquet(str(path)))).collect()
            flow.run("reference")
            outs.append(multiset(col))
            sizes[name] = list(seen)
    assert outs[0] and outs[0] == outs[1]  # the same windows whatever the batches
    assert sizes["expressions"] == [reference.WIDE_BATCH, n - reference.WIDE_BATCH]
    assert sum(sizes["a lambda map"]) == n and max(sizes["a lambda map"]) == reference.BATCH


@pytest.mark.parametrize("engine", ["vsn", "ordered", "sn"])
def test_threaded_engines_read_wide_batches_only_where_no_stage_multiplies_rows(
        engine, tmp_path, monkeypatch):
    """vsn, ordered and sn's channels read a flow of column expressions in batches of
    pump.WIDE_COLUMNAR_BATCH tuples and a flow with a lambda before its O+ in batches of
    pump.COLUMNAR_BATCH (executors/plan.columnar_batch), with the reference's windows."""
    from conformance.contract import multiset
    from stretchflow.io.sources import _Arrow
    from stretchflow.runtime import pump

    monkeypatch.setattr(pump, "COLUMNAR_BATCH", 300)
    monkeypatch.setattr(pump, "WIDE_COLUMNAR_BATCH", 2_000)
    n = 10_000
    path = tmp_path / "t.parquet"
    _ts_k_x(path, n)
    asked: list[int] = []
    real = _Arrow.batches

    def spy(self, rows=65536, tables=True):
        asked.append(rows)
        return real(self, rows, tables)

    shapes = _sum_by_k("1s")
    monkeypatch.setattr(_Arrow, "batches", spy)
    for name, make in shapes.items():
        want_flow = sf.Flow()
        want = make(want_flow.source(sf.io.parquet(str(path)))).collect()
        want_flow.run("reference", columnar="off")
        asked.clear()
        flow = sf.Flow()
        got = make(flow.source(sf.io.parquet(str(path)))).collect()
        kw = {"channels": "threads"} if engine == "sn" else {}
        res = flow.run(engine, parallelism=2, **kw)
        assert multiset(got) == multiset(want) and len(multiset(want)) > 5
        assert asked == [2_000 if name == "expressions" else 300], (name, asked, res.extra)


def test_vsn_sink_of_source_batches_holds_capacity_tuples_not_64th_entries(tmp_path, monkeypatch):
    """The ESG of a sink fed a source's batches through stateless operators holds about
    ``capacity`` tuples of them (at least four batches); counted as an O+'s output entries (a
    64th of capacity), it held 1 024 wide batches: a whole 10 M-event file in flight (vsn's
    currency flow on Parquet peaked at 2.1 GB). A sink fed an O+'s windows keeps those."""
    from stretchflow.executors.vsn_batches import BatchAwareInlets, plan_batches
    from stretchflow.runtime import pump

    monkeypatch.setattr(pump, "WIDE_COLUMNAR_BATCH", 1_000)
    path = tmp_path / "t.parquet"
    _ts_k_x(path, 100)
    flow = sf.Flow()
    s = flow.source(sf.io.parquet(str(path)))
    s.with_columns(y=sf.col("x") * 2).sink(str(tmp_path / "o.jsonl"))
    plan = plan_batches(flow, {}, 4, True)
    inlets = BatchAwareInlets(flow, {}, plan)
    esg = inlets(("sink", 0), "sink o", ["src"], [("sink", 0)], 65_536, 1).esg
    assert esg._capacity == 65  # 65 536 tuples in batches of 1 000
    assert inlets(("sink", 0), "sink o", ["src"], [("sink", 0)], 2_000, 1).esg._capacity == 4
