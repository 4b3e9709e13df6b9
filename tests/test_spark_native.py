"""Native Spark plans (stretchflow.spark.native, .exprs) against Python's meaning.

Expressions: every translated expression gives on every row what ``Expr.row_fn()`` gives (value
and type), or the Spark job stops with an escape or ANSI error (the plan then re-runs in
Python), or a guard flags the rows where Python raises. Many rows and expressions go into one
DataFrame per hypothesis example: a Spark job costs a second.

One session for the module (spark_fixtures.spark); every test is marked slow.
"""

import math
import operator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spark_fixtures
import stretchflow as sf
from stretchflow.spark.exprs import ESCAPE, NotNative, Translator

pytestmark = pytest.mark.slow
# the shared fixture (tests/spark_fixtures.py): pytest finds it by name in this module
spark = spark_fixtures.spark

# -- expressions -----------------------------------------------------------------------------------
_BIG = [0, 1, -1, 2, -3, 7, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, 2**63 - 1, -(2**63)]
INTS = st.one_of(st.none(), st.sampled_from(_BIG), st.integers(-20, 20),
                 st.integers(-(2**63), 2**63 - 1))
FLOATS = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -2.5, 0.1, 1e300, 2.0**53,
                                               2.0**63, -(2.0**63), math.inf, -math.inf,
                                               float("nan")]),
                   st.floats(-1e6, 1e6))
STRS = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "😀", "Z"]))
BOOLS = st.one_of(st.none(), st.booleans())
# (a row's NaN is never the literal's NaN object: ``nan in {nan}`` is an identity test)
#: column -> (kind, Spark type, values)
COLUMNS = {"a": ("int", "long", INTS), "b": ("int", "long", INTS),
           "x": ("float", "double", FLOATS), "y": ("float", "double", FLOATS),
           "s": ("str", "string", STRS), "t": ("str", "string", STRS),
           "p": ("bool", "boolean", BOOLS), "q": ("bool", "boolean", BOOLS)}
SCHEMA = ", ".join(f"{n} {t}" for n, (_, t, _) in COLUMNS.items())

LITERALS = st.one_of(st.none(), st.booleans(), st.sampled_from(_BIG + [0.5, -0.0, 3.0, math.nan]),
                     st.integers(-5, 5), st.sampled_from(["a", "", "é"]))
NUM_LEAF = st.one_of(st.sampled_from(["a", "b", "x", "y", "p"]).map(sf.col),
                     st.one_of(st.integers(-5, 5), st.sampled_from([0.5, -0.0, 2**53 + 1,
                                                                    2**62, 3.0])).map(sf.lit))
ARITH = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
         operator.mod]
COMPARE = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


def _num(children):
    return st.one_of(
        st.tuples(st.sampled_from(ARITH), children, children).map(lambda t: t[0](t[1], t[2])),
        children.map(operator.neg), children.map(abs))


NUMERIC = st.recursive(NUM_LEAF, _num, max_leaves=4)
ANY_LEAF = st.one_of(st.sampled_from(list(COLUMNS)).map(sf.col), LITERALS.map(sf.lit))


def _bool(children):
    return st.one_of(
        st.tuples(st.sampled_from([operator.and_, operator.or_]), children, children)
        .map(lambda t: t[0](t[1], t[2])),
        children.map(operator.invert))


COMPARISON = st.one_of(
    st.tuples(st.sampled_from(COMPARE), NUMERIC, NUMERIC),
    st.tuples(st.sampled_from(COMPARE), ANY_LEAF, ANY_LEAF),
).map(lambda t: t[0](t[1], t[2]))
BOOL_LEAF = st.one_of(
    COMPARISON,
    st.sampled_from(["p", "q"]).map(sf.col),
    st.tuples(st.one_of(NUMERIC, ANY_LEAF), st.lists(LITERALS, max_size=4))
    .map(lambda t: t[0].is_in(t[1])),
    st.one_of(NUMERIC, ANY_LEAF).map(lambda e: e.is_null()),
    st.one_of(NUMERIC, ANY_LEAF).map(lambda e: e.is_not_null()),
)
BOOLEAN = st.recursive(BOOL_LEAF, _bool, max_leaves=4)
STR_LEAF = st.one_of(st.sampled_from(["s", "t"]).map(sf.col),
                    st.sampled_from(["", "a", "é"]).map(sf.lit))
STRING = st.one_of(STR_LEAF, st.tuples(STR_LEAF, STR_LEAF).map(lambda t: t[0] + t[1]))
_PATTERNS = st.sampled_from(["", "a", "b", "é", "ab"])
ANY = st.one_of(NUMERIC, BOOLEAN, STRING, ANY_LEAF)
MISC = st.one_of(
    st.tuples(ANY, ANY).map(lambda t: t[0].fill_null(t[1])),
    st.tuples(ANY, st.sampled_from(["int64", "float64", "string", "bool"]))
    .map(lambda t: t[0].cast(t[1])),
    st.tuples(st.one_of(STRING, ANY_LEAF), _PATTERNS).map(lambda t: t[0].str.starts_with(t[1])),
    st.tuples(st.one_of(STRING, ANY_LEAF), _PATTERNS).map(lambda t: t[0].str.ends_with(t[1])),
    st.tuples(st.one_of(STRING, ANY_LEAF), _PATTERNS).map(lambda t: t[0].str.contains(t[1])),
    st.one_of(STRING, ANY_LEAF).map(lambda e: e.str.len()),
    st.tuples(BOOLEAN, ANY, BOOLEAN, ANY, ANY).map(
        lambda t: sf.when(t[0]).then(t[1]).when(t[2]).then(t[3]).otherwise(t[4])),
    st.tuples(BOOLEAN, ANY).map(lambda t: sf.when(t[0]).then(t[1])),
)
#: typed trees (mostly native) and untyped ones (mostly refused: checks the refusals)
EXPRS = st.one_of(NUMERIC, BOOLEAN, MISC, st.recursive(ANY_LEAF, lambda c: st.one_of(
    _num(c), _bool(c), st.tuples(st.sampled_from(COMPARE), c, c).map(lambda t: t[0](t[1], t[2]))),
    max_leaves=3))
ROWS = st.lists(st.fixed_dictionaries({n: v for n, (_, _, v) in COLUMNS.items()}),
                min_size=1, max_size=40)


def same_value(a, b) -> bool:
    """Equal with the type: 1 is not 1.0 nor True; NaN equals NaN; 0.0 is not -0.0."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def python_values(e, rows):
    """Per row: ``("ok", value)`` or ``("raise", exception type name)``."""
    fn = e.row_fn()
    out = []
    for r in rows:
        try:
            out.append(("ok", fn(r)))
        except Exception as ex:  # the oracle's own error: the native side must not hide it
            out.append(("raise", type(ex).__name__))
    return out


def allowed_failure(err: Exception) -> bool:
    """A failure the native plan answers by re-running on the Python path."""
    text = str(err)
    return ESCAPE in text or type(err).__name__ == "ArithmeticException" or \
        "ARITHMETIC_OVERFLOW" in text or "DIVIDE_BY_ZERO" in text


def check_expressions(session, exprs, rows):
    """Checks each expression of ``exprs`` on ``rows`` (one Spark job when none fails);
    returns how many were translated."""
    from pyspark.sql import functions as F

    df = session.createDataFrame([tuple(r[n] for n in COLUMNS) for r in rows], SCHEMA)
    kinds = {n: k for n, (k, _, _) in COLUMNS.items()}
    pairs, checks = {}, []
    for i, e in enumerate(exprs):
        tr = Translator(kinds, "test")
        try:
            c, _ = tr.column(e)
        except NotNative:
            continue
        guard = F.lit(False)
        for g in tr.guards:
            guard = guard | F.coalesce(g, F.lit(False))
        pairs[i] = [c.alias(f"e{i}"), guard.alias(f"g{i}")]
        checks.append((i, e))
    if not checks:
        return 0
    try:
        res = df.select(*[c for i, _ in checks for c in pairs[i]]).collect()
        got = {i: [(r[f"e{i}"], r[f"g{i}"]) for r in res] for i, _ in checks}
    except Exception:
        got = {}
        for i, _ in checks:  # which one failed: each alone
            try:
                got[i] = [(r[0], r[1]) for r in df.select(*pairs[i]).collect()]
            except Exception as err:
                assert allowed_failure(err), f"{exprs[i]!r}: {err}"
                got[i] = None
    for i, e in checks:
        want = python_values(e, rows)
        raised = [k for k, (how, _) in enumerate(want) if how == "raise"]
        if got[i] is None:
            continue  # re-run in Python: whatever Python does is the result
        guarded = [k for k, (_, g) in enumerate(got[i]) if g]
        assert guarded == [k for k in raised if want[k][1] == "ZeroDivisionError"], \
            f"{e!r}: guards {guarded}, Python raised at {raised} ({want})"
        assert not [k for k in raised if want[k][1] != "ZeroDivisionError"], \
            f"{e!r}: Python raised {want} where Spark did not"
        for k, ((how, v), (sv, _)) in enumerate(zip(want, got[i], strict=True)):
            if how == "ok":
                assert same_value(v, sv), f"{e!r} on {rows[k]}: Python {v!r}, Spark {sv!r}"
    return len(checks)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(EXPRS, min_size=6, max_size=6), ROWS)
def test_expressions_match_row_fn(spark, exprs, rows):
    check_expressions(spark, exprs, rows)


def test_expression_cases(spark):
    """The forms that need a rewrite, on rows chosen to tell the rewrite from Spark's own
    meaning (each of these would differ without it)."""
    c, lit = sf.col, sf.lit
    rows = [{"a": 7, "b": -2, "x": 1.5, "y": float("nan"), "s": "a", "t": "é", "p": True,
             "q": None},
            {"a": -7, "b": 2, "x": -0.0, "y": 0.0, "s": "b", "t": "😀", "p": None, "q": False},
            {"a": None, "b": 3, "x": 2.0, "y": 1.0, "s": None, "t": "", "p": False, "q": True},
            {"a": 2**53 + 1, "b": 5, "x": 2.0**53, "y": float(2**53), "s": "é", "t": "Z",
             "p": True, "q": True},
            {"a": -(2**63), "b": 3, "x": math.inf, "y": -1.5, "s": "", "t": "a", "p": False,
             "q": None}]
    exprs = [c("a") // c("b"), c("a") % c("b"), c("a") // -3, c("a") % -3,
             c("a") == c("x"), c("a") < c("x"), c("a") >= c("x"), c("a") != c("x"),
             c("x") == c("y"), c("x") < c("y"), c("y") != c("y"), c("y") >= lit(0.0),
             c("s") == c("a"), c("s") != c("p"),
             c("a").is_in([7, 2.0, True, "7"]), c("x").is_in([2**53 + 1, 1.5, math.nan]),
             c("y").is_in([math.nan]), c("p").is_in([1]), c("s").is_in(["é", 1, None]),
             c("p") + c("a"), -c("p"), (c("a") > 0) & c("p"), ~c("q"), c("p") | c("q"),
             -c("x"), abs(c("b")), c("b") / c("b") + c("x") / c("b"), c("t") < c("s"),
             c("a").is_null(), lit(None) + c("a"), c("a") / lit(None),
             c("s") + c("t"), c("t").str.len(), c("t").str.starts_with("é"),
             c("s").str.contains(""), c("a").fill_null(c("b") // 0),
             c("x").cast("int64"), c("a").cast("float64"), c("p").cast(str), c("b").cast(str),
             c("t").cast(bool), c("y").cast(bool),
             sf.when(c("b") > 0).then(c("a") // c("b")).when(c("p")).then(lit(1))
             .otherwise(c("b") % 0)]
    assert check_expressions(spark, exprs, rows) == len(exprs)


@pytest.mark.parametrize("expr", [
    sf.col("x") // 2, sf.col("x") % sf.col("a"), sf.col("s") * sf.col("a"),
    sf.col("s") < sf.col("a"), sf.col("a") & sf.col("p"), ~sf.col("a"), -sf.col("s"),
    sf.col("nope"), sf.lit(2**64) + sf.col("a"), sf.col("s").cast(int),
    sf.col("x").cast(str), sf.col("a").str.len(), sf.col("a").fill_null(sf.col("x")),
    sf.when(sf.col("a")).then(1), sf.when(sf.col("p")).then(1).otherwise("one")])
def test_refused_forms(expr):
    """Forms whose Spark meaning differs from Python's and have no rewrite are refused while
    planning (the flow runs on the Python path), with a reason."""
    kinds = {n: k for n, (k, _, _) in COLUMNS.items()}
    with pytest.raises(NotNative, match="test"):
        Translator(kinds, "test").column(expr)
