"""Column expressions (stretchflow.expr): one meaning on one payload (the row form, the tuple
path) and on a whole Arrow table (the kernels a batch runs).

The property: for random tables and random expression trees, where the Arrow form gives a
result it is the row form's, value for value and type for type (an int is not a float: a
sink writes ``1`` and ``1.0`` differently); where the row form fails on some row the Arrow
form fails too (the batch then goes tuple at a time, and the tuple path raises the error
naming the tuple). The Arrow form may refuse where the row form succeeds (an int64 overflow,
values the kernels read differently): the batch goes tuple at a time, whose results are the
truth, so the outputs still agree.
"""

import math
import pickle

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from stretchflow.expr import Expr, MissingColumn, col, lit, when

I64 = 2**63
SCHEMA = pa.schema([("i", pa.int64()), ("j", pa.int64()), ("f", pa.float64()),
                    ("s", pa.string()), ("b", pa.bool_())])

big_ints = st.one_of(st.integers(-(I64), I64 - 1),
                     st.integers(-5, 5),
                     st.sampled_from([I64 - 1, -I64, I64 - 2, -I64 + 1, 2**53, 2**53 + 1,
                                      -(2**53) - 1, 2**62]))
small_ints = st.integers(-4, 4)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 0.5, -1.5, 1e16, 2.0**63, 1e-7]))
texts = st.one_of(st.text(max_size=6),
                  st.sampled_from(["", "12", "-3", "007", "+1", " 5", "1_0", "1.5", "-2e3",
                                   ".5", "1.", "nan", "inf", "1e400", "abc", "ab", "é", "٣"]))


def _nullable(s):
    return st.one_of(st.none(), s)


rows_st = st.lists(st.fixed_dictionaries({
    "i": _nullable(big_ints), "j": _nullable(small_ints), "f": _nullable(floats),
    "s": _nullable(texts), "b": _nullable(st.booleans())}), max_size=8)

leaves = st.one_of(
    st.sampled_from([col("i"), col("j"), col("f"), col("s"), col("b")]),
    st.builds(lit, st.one_of(st.none(), st.booleans(), big_ints, small_ints, floats, texts)),
)


def _extend(children):
    binary = st.sampled_from(["add", "sub", "mul", "truediv", "floordiv", "mod", "eq", "ne",
                              "lt", "le", "gt", "ge", "and", "or"])
    return st.one_of(
        st.builds(lambda op, x, y: Expr(op, x, y), binary, children, children),
        st.builds(lambda op, x: Expr(op, x), st.sampled_from(["not", "neg", "abs", "is_null",
                                                              "not_null"]), children),
        st.builds(lambda x, vs: x.is_in(vs), children,
                  st.lists(st.one_of(st.none(), small_ints, floats, texts, st.booleans()),
                           max_size=3)),
        st.builds(lambda x, t: x.cast(t), children,
                  st.sampled_from(["int64", "float64", "string", "bool"])),
        st.builds(lambda x, y: x.fill_null(y), children, children),
        st.builds(lambda x, p: x.str.starts_with(p), children, texts),
        st.builds(lambda x, p: x.str.ends_with(p), children, texts),
        st.builds(lambda x, p: x.str.contains(p), children, texts),
        st.builds(lambda x: x.str.len(), children),
        st.builds(lambda c, a, b: when(c).then(a).otherwise(b), children, children, children),
        st.builds(lambda c, a, c2, a2: when(c).then(a).when(c2).then(a2),
                  children, children, children, children),
        st.builds(lambda x: x.alias("out"), children),
    )


exprs = st.recursive(leaves, _extend, max_leaves=6)


num_leaves = st.one_of(st.sampled_from([col("i"), col("j"), col("f")]),
                       st.builds(lit, st.one_of(big_ints, small_ints, floats)))
numeric = st.recursive(num_leaves, lambda c: st.one_of(
    st.builds(lambda op, x, y: Expr(op, x, y), st.sampled_from(
        ["add", "sub", "mul", "truediv", "floordiv", "mod"]), c, c),
    st.builds(lambda op, x: Expr(op, x), st.sampled_from(["neg", "abs"]), c),
    st.builds(lambda x, t: x.cast(t), c, st.sampled_from(["int64", "float64"]))),
    max_leaves=5)
conditions = st.recursive(
    st.builds(lambda op, x, y: Expr(op, x, y),
              st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge"]), numeric, numeric)
    | st.sampled_from([col("b"), col("s").str.contains("a"), col("i").is_null()]),
    lambda c: st.one_of(st.builds(lambda op, x, y: Expr(op, x, y),
                                  st.sampled_from(["and", "or"]), c, c),
                        st.builds(lambda x: ~x, c)),
    max_leaves=4)
#: typed trees: operations that mostly apply, so the kernels' results are compared, not
#: only their refusals (random trees mix types and are refused half the time)
typed = st.one_of(numeric, conditions,
                  st.builds(lambda c, x, y: when(c).then(x).otherwise(y), conditions, numeric,
                            numeric),
                  st.builds(lambda x, t: x.cast(t), numeric, st.sampled_from(["string",
                                                                              "bool"])))


def same(x, y) -> bool:
    """Equal values of one type (a float by its repr: NaN is NaN, -0.0 is not 0.0)."""
    if type(x) is not type(y):
        return False
    if type(x) is float:
        return repr(x) == repr(y)
    return x == y


def check(e: Expr, table: pa.Table) -> None:
    rows = table.to_pylist()
    try:
        got = e.arrow(table)
    except Exception as err:  # noqa: BLE001 - a refusal: the batch goes tuple at a time
        got, refused = None, err
    else:
        refused = None
    fn = e.row_fn()
    want, failed = [], None
    for r in rows:
        try:
            want.append(fn(r))
        except Exception as err:  # noqa: BLE001
            failed = err
            break
    if failed is not None:
        assert refused is not None, (
            f"{e!r}: the row form fails ({failed!r}) where the Arrow form gives "
            f"{got.to_pylist()}")
    if refused is None:
        assert isinstance(got, pa.Array) and len(got) == table.num_rows, e
        values = got.to_pylist()
        assert all(same(a, b) for a, b in zip(values, want, strict=True)), (
            f"{e!r}: Arrow {values} != rows {want}")


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows_st, exprs)
@example([{"i": I64 - 1, "j": 1, "f": None, "s": None, "b": None}], col("i") + col("j"))
@example([{"i": -I64, "j": -1, "f": None, "s": None, "b": None}], col("i") // col("j"))
@example([{"i": -I64, "j": -1, "f": None, "s": None, "b": None}], col("i") % col("j"))
@example([{"i": 2**53 + 1, "j": 3, "f": 1.0, "s": None, "b": None}], col("i") / col("j"))
@example([{"i": 2**53 + 1, "j": 3, "f": 9007199254740992.0, "s": None, "b": None}],
         col("i") > col("f"))
@example([{"i": 1, "j": 0, "f": float("nan"), "s": "1.5", "b": True}], col("f").cast("int64"))
@example([{"i": 1, "j": 0, "f": -2.7, "s": "1.5", "b": True}], col("f").cast("int64"))
@example([{"i": 1, "j": 0, "f": 1.0, "s": "+1", "b": True}], col("s").cast("int64"))
@example([{"i": 1, "j": 0, "f": 1e16, "s": "1e400", "b": True}], col("s").cast("float64"))
@example([{"i": 1, "j": 0, "f": 1e16, "s": "x", "b": True}], col("f").cast("string"))
@example([{"i": 1, "j": 0, "f": float("nan"), "s": "x", "b": True}],
         col("f").is_in([float("nan")]))
@example([{"i": 1, "j": 0, "f": 0.5, "s": "x", "b": True}],
         when(col("b")).then(col("i")).otherwise(col("f")))
def test_the_arrow_form_gives_the_row_forms_values_or_refuses(rows, e):
    check(e, pa.Table.from_pylist(rows, schema=SCHEMA))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows_st, typed)
def test_typed_trees_the_arrow_form_gives_the_row_forms_values_or_refuses(rows, e):
    check(e, pa.Table.from_pylist(rows, schema=SCHEMA))


def test_arrow_form_of_a_table_whose_columns_come_in_several_chunks():
    schema = pa.schema([("x", pa.int64()), ("y", pa.string())])
    t = pa.concat_tables([pa.Table.from_pylist([{"x": 1, "y": "a"}], schema=schema),
                          pa.Table.from_pylist([{"x": None, "y": "b"}], schema=schema)])
    e = (col("x") * 2 + 1).alias("z")
    out = e.arrow(t)
    assert isinstance(out, pa.Array) and out.to_pylist() == [3, None]
    assert lit(5).arrow(t).to_pylist() == [5, 5]


@pytest.mark.parametrize("typ,value,want", [
    (pa.int32(), 2**31 - 1, 2**32 - 2),  # an int32 column sums as Python's ints do
    (pa.float32(), 0.1, 2 * float(pa.scalar(0.1, pa.float32()).as_py())),
    (pa.uint8(), 200, 400),
])
def test_narrow_number_columns_compute_as_their_python_values(typ, value, want):
    t = pa.table({"x": pa.array([value], typ)})
    e = col("x") + col("x")
    assert e.arrow(t).to_pylist() == [want] == [e.row_fn()(r) for r in t.to_pylist()]


def test_three_valued_logic_and_null_propagation():
    rows = [{"a": a, "b": b} for a in (True, False, None) for b in (True, False, None)]
    t = pa.Table.from_pylist(rows)
    for e, py in [(col("a") & col("b"), lambda a, b: False if False in (a, b) else
                   None if None in (a, b) else True),
                  (col("a") | col("b"), lambda a, b: True if True in (a, b) else
                   None if None in (a, b) else False)]:
        want = [py(r["a"], r["b"]) for r in rows]
        assert e.arrow(t).to_pylist() == want == [e.row_fn()(r) for r in rows]
    assert (col("x") + 1).row_fn()({"x": None}) is None
    assert (col("x") == None).row_fn()({"x": None}) is None  # noqa: E711 - SQL: unknown
    assert col("x").is_null().row_fn()({"x": None}) is True


def test_python_meaning_of_division_and_modulo():
    rows = [{"x": x, "y": y} for x in (7, -7, 7.5) for y in (2, -2, 0.5)]
    t = pa.Table.from_pylist(rows)
    for e in (col("x") / col("y"), col("x") // col("y"), col("x") % col("y")):
        assert [e.row_fn()(r) for r in rows] == e.arrow(t).to_pylist()
    with pytest.raises(ZeroDivisionError):
        (col("x") // 0).row_fn()({"x": 1})
    with pytest.raises(ZeroDivisionError):
        (col("x") // 0).arrow(pa.table({"x": [1]}))


def test_casts_are_pythons():
    f = pa.table({"f": [-2.7, 2.7, None, 1.0]})
    assert col("f").cast("int64").arrow(f).to_pylist() == [-2, 2, None, 1]
    assert col("f").cast(str).arrow(f).to_pylist() == ["-2.7", "2.7", None, "1.0"]
    assert col("f").cast("int").row_fn()({"f": -2.7}) == -2
    s = pa.table({"s": ["", "x", "False"]})
    assert col("s").cast(bool).arrow(s).to_pylist() == [False, True, True]
    b = pa.table({"b": [True, False]})
    assert col("b").cast("string").arrow(b).to_pylist() == ["True", "False"]
    with pytest.raises(TypeError, match="cast: the type is one of"):
        col("x").cast("decimal")


def test_when_then_otherwise():
    e = when(col("x") > 0).then(lit("pos")).when(col("x") < 0).then("neg").otherwise("zero")
    t = pa.table({"x": [3, -1, 0, None]})
    assert e.arrow(t).to_pylist() == ["pos", "neg", "zero", "zero"]
    assert [e.row_fn()(r) for r in t.to_pylist()] == ["pos", "neg", "zero", "zero"]
    no_default = when(col("x") > 0).then(col("x"))
    assert no_default.arrow(t).to_pylist() == [3, None, None, None]
    # the row form evaluates only the value it picks; the Arrow form refuses, the batch
    # goes tuple at a time and gets the same values
    safe = when(col("x") != 0).then(10 // col("x")).otherwise(0)
    assert [safe.row_fn()(r) for r in t.to_pylist()] == [3, -10, 0, 0]
    with pytest.raises(ZeroDivisionError):
        safe.arrow(t)
    with pytest.raises(TypeError, match="boolean condition"):
        when(col("x")).then(1).row_fn()({"x": 3})


def test_string_operations():
    t = pa.table({"s": ["alpha", "beta", None, "é!"]})
    for e, want in [(col("s").str.starts_with("al"), [True, False, None, False]),
                    (col("s").str.ends_with("!"), [False, False, None, True]),
                    (col("s").str.contains("et"), [False, True, None, False]),
                    (col("s").str.contains("."), [False, False, None, False]),  # literal
                    (col("s").str.len(), [5, 4, None, 2]),
                    (col("s") + "-x", ["alpha-x", "beta-x", None, "é!-x"])]:
        assert e.arrow(t).to_pylist() == want == [e.row_fn()(r) for r in t.to_pylist()], e
    with pytest.raises(TypeError, match=r"str.len\(\) needs str values, got int"):
        col("s").str.len().row_fn()({"s": 3})
    with pytest.raises(TypeError, match="takes a str literal"):
        col("s").str.contains(3)


def test_missing_column_names_the_column_and_the_fields_there_are():
    with pytest.raises(MissingColumn) as e:
        (col("pricee") > 1).row_fn()({"ts": 1, "price": 3})
    assert str(e.value) == "no column 'pricee' (columns: ts, price)"
    with pytest.raises(MissingColumn, match="no column 'pricee' \\(columns: ts, price\\)"):
        (col("pricee") > 1).arrow(pa.table({"ts": [1], "price": [3]}))
    with pytest.raises(TypeError, match="needs dict payloads, got int"):
        col("x").row_fn()(5)
    # a user's mistake in a function, not stretchflow's own error: executors wrap it in an
    # OperatorError naming the operator and the tuple
    assert not isinstance(e.value, sf.StretchflowError)


def test_an_expression_has_no_truth_value_and_compares_structurally():
    with pytest.raises(TypeError, match="no truth value"):
        bool(col("x") > 1)
    assert (col("x") + 1).same(col("x") + 1) and not (col("x") + 1).same(col("x") + 1.0)
    assert (col("a") * 2).alias("b").output_name == "b" and col("a").output_name == "a"
    assert (col("a") + col("b")).output_name is None
    assert (col("a") + col("b") * 2).columns() == {"a", "b"}
    assert when(col("c")).then(col("a")).otherwise(col("b")).columns() == {"a", "b", "c"}


def test_expressions_pickle_and_keep_their_meaning():
    # an SN process channel pickles its operators, and with them their expressions
    e = when(col("x").cast("float64") > 1.5).then(col("s").str.len()).otherwise(-1)
    back = pickle.loads(pickle.dumps(e))
    assert back.same(e)
    row = {"x": 3, "s": "abc"}
    assert back.row_fn()(row) == e.row_fn()(row) == 3


def test_repr_reads_as_the_expression():
    assert repr((col("a") + 1).alias("b")) == "(col('a') + lit(1)).alias('b')"
    assert repr(col("s").str.starts_with("x")) == "col('s').str.starts_with('x')"
    assert repr(col("a").cast("int64")) == "col('a').cast('int64')"
    assert math.isnan(lit(float("nan")).row_fn()({}))


def test_true_division_of_strings_refuses_as_python_does():
    # a cast to float64 would parse "1.5": Python raises, so the Arrow form must refuse
    import pyarrow as pa

    t = pa.table({"s": ["1.5", "2"]})
    e = col("s") / col("s")
    with pytest.raises(TypeError):
        e.row_fn()({"s": "1.5"})
    with pytest.raises(TypeError):
        e.arrow(t)


def test_floor_division_reads_a_sliced_column_at_its_offset():
    import pyarrow as pa

    t = pa.table({"a": pa.array([10, 20, 30, 40], pa.int64())}).slice(2)
    assert (col("a") // 10).arrow(t).to_pylist() == [3, 4]
    assert (col("a") % 7).arrow(t).to_pylist() == [30 % 7, 40 % 7]
