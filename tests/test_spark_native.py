"""Native Spark plans (stretchflow.spark.native, .exprs) against Python's meaning.

Expressions: every translated expression gives on every row what ``Expr.row_fn()`` gives (value
and type), or the Spark job stops with an escape or ANSI error (the plan then re-runs in
Python), or a guard flags the rows where Python raises. Many rows and expressions go into one
DataFrame per hypothesis example: a Spark job costs a second.

One session for the module (spark_fixtures.spark); every test is marked slow.
"""

import math
import operator
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spark_fixtures
import stretchflow as sf
from conformance.contract import assert_same_as_reference, multiset
from stretchflow.errors import OperatorError, SourceError
from stretchflow.spark import native
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


# -- flows -----------------------------------------------------------------------------------------
def write_bids(path, n, seed, start=0, nulls=False):
    """NEXMark-shaped bids ``{"ts", "auction", "bidder", "price", "category"}`` sorted by ts
    (a few auctions popular), as JSON Lines; with ``nulls`` a few prices and categories are
    null (the field is there, as JSON null)."""
    rng = random.Random(seed)
    ts = start
    with open(path, "wb") as f:
        for _ in range(n):
            ts += rng.choice((0, 0, 1, 7, 40))
            a = min(int(rng.paretovariate(1.2)), 60)
            rec = {"ts": ts, "auction": a, "bidder": rng.randrange(200),
                   "price": rng.randrange(100, 100_000), "category": 10 + a % 5}
            if nulls and rng.random() < 0.03:
                rec["price"] = None
            if nulls and rng.random() < 0.02:
                rec["category"] = None
            f.write(orjson.dumps(rec) + b"\n")
    return path


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    """Bids from a negative ts on, with JSON nulls; a Parquet copy of them."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("bids")
    path = write_bids(d / "bids.jsonl", 4000, seed=5, start=-3000, nulls=True)
    pq.write_table(pj.read_json(str(path)), d / "bids.parquet")
    return path, d / "bids.parquet"


def executed_plans(session):
    """The physical plans of the SQL executions the session ran so far, by id."""
    it = session._jsparkSession.sharedState().statusStore().executionsList().iterator()
    out = {}
    while it.hasNext():
        e = it.next()
        out[e.executionId()] = e.physicalPlanDescription()
    return out


#: physical operators that run Python workers
PYTHON_OPERATORS = ("MapInArrow", "MapInPandas", "ArrowEvalPython", "BatchEvalPython",
                    "FlatMapGroupsInPandas", "PythonUDF", "AggregateInPandas", "WindowInPandas")


def run_checked(session, build, **options):
    """``build`` on the reference and natively on Spark, outputs compared; asserts that every
    operator ran natively and no executed plan held a Python operator. Returns the result."""
    before = set(executed_plans(session))
    res = assert_same_as_reference(build, "spark", check_counts=True, **options)
    assert set(res.extra["spark_native"].values()) == {"native"}, res.extra["spark_native"]
    plans = {i: p for i, p in executed_plans(session).items() if i not in before}
    assert plans  # the run's jobs are there to look at
    for p in plans.values():
        assert not any(op in p for op in PYTHON_OPERATORS), p
    return res


def every_kind(source, made):
    """One flow, one sink per case: each accumulator, key forms, windows that tumble, slide
    with WA dividing WS or not, expressions before, float sums in the reference's order.
    ``made`` gets each build's sinks."""

    def build():
        flow = sf.Flow("kinds")
        b = flow.source(source())
        hot = b.aggregate(size="10s", slide="2s", keys="auction", **sf.count())
        sinks = {
            "count": hot.collect(),
            "arg_max": hot.aggregate(size="2s", keys=None, **sf.arg_max("count"),
                                     name="top").collect(),
            "mean": b.aggregate(size="10s", keys="category", **sf.mean_of("price"),
                                name="m").collect(),
            "sum2": b.aggregate(size=7000, slide=3000, name="s2",
                                keys=("category", (sf.col("bidder") % 3).alias("b3")),
                                **sf.sum_of("price")).collect(),
            "minmax": b.aggregate(size=5000, slide=2500, keys=None, **sf.min_of("price"),
                                  name="mn").collect(),
            "max": b.aggregate(size=4000, keys=(sf.col("price") // 10_000).alias("bucket"),
                               **sf.max_of(sf.col("bidder") * 2), name="mx").collect(),
            "fmean": b.aggregate(size="6s", slide="2s", keys="category", name="fm",
                                 **sf.mean_of(sf.col("price") * 0.9, name="eur")).collect(),
            "fsum": b.aggregate(size=7000, slide=3000, keys="auction", name="fs",
                                **sf.sum_of(sf.col("price") / 7, name="s")).collect(),
            "top3": b.aggregate(size=7000, slide=3000, keys="category", name="t3",
                                **sf.top_k("price", 3)).collect(),
            "low": b.aggregate(size=5000, keys=None, **sf.arg_min("bidder"), name="lo").collect(),
            "nulls": b.select("auction", z=sf.lit(None), c=sf.col("category").fill_null(-1),
                              p=sf.col("price").is_null()).collect(),
            "chain": (b.filter((sf.col("price") > 20_000) & sf.col("category").is_in([10, 12]))
                      .with_columns(eur=sf.col("price") * 0.9, auction=sf.col("auction") + 1)
                      .select("auction", "eur", cat=sf.col("category").cast(str))
                      .aggregate(size="3s", keys=("cat", "auction"), **sf.count("n"), name="ch")
                      .collect()),
        }
        made.append(sinks)
        return flow, sinks
    return build


def test_every_kind_matches_reference(spark, bids):
    path, parquet = bids
    made = []
    res = run_checked(spark, every_kind(lambda: sf.io.jsonl(path), made), parallelism=2)
    assert "spark plan: native aggregate, top, m, s2" in res.summary()
    assert all(c.items for c in made[-1].values())  # every case has output to compare
    run_checked(spark, every_kind(lambda: sf.io.parquet(parquet), made), parallelism=3)


ACCUMULATORS = {
    "count": lambda of: sf.count(), "sum": lambda of: sf.sum_of(of),
    "min": lambda of: sf.min_of(of), "max": lambda of: sf.max_of(of),
    "mean": lambda of: sf.mean_of(of),
    "top2": lambda of: sf.top_k(of, 2), "low": lambda of: sf.top_k(of, 1, largest=False)}


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 6).flatmap(lambda wa: st.tuples(st.just(wa * 50),
                                                       st.integers(1, 5).map(lambda m: m * 50)
                                                       .map(lambda x: x + wa * 50))),
       st.sampled_from(list(ACCUMULATORS)),
       st.sampled_from(["i", "f", sf.col("i") * 3 - sf.col("f")]),
       st.sampled_from(["k", ("k", "j"), None, (sf.col("i") % 4).alias("m")]),
       st.integers(-500, 500), st.integers(0, 1000))
def test_windows_and_accumulators_match_reference(spark, slide_size, acc, of, keys, start,
                                                  seed):
    """Random windows (slide dividing size or not), accumulators, keys and values over a small
    iterable source with nulls, negative timestamps and ties."""
    slide, size = slide_size
    rng = random.Random(seed)
    recs, ts = [], start
    for _ in range(150):
        ts += rng.choice((0, 1, 13, 60))
        recs.append({"ts": ts, "k": rng.choice([1, 2, 3, None]), "j": rng.choice("xy"),
                     "i": rng.choice([rng.randrange(-50, 50), None]),
                     "f": rng.choice([rng.randrange(-400, 400) / 8, 0.1, None])})

    def build():
        flow = sf.Flow("rand")
        b = flow.source(sf.io.iterable(recs, name="in"))
        return flow, [b.aggregate(size=size, slide=slide, keys=keys, **ACCUMULATORS[acc](of),
                                  name="agg").collect()]

    run_checked(spark, build)


# -- what does not map, and falls back -------------------------------------------------------------
def test_reasons_name_what_is_not_native():
    """Decided from the flow alone (no Spark): each operator that cannot be native says why."""
    flow = sf.Flow("why")
    b = flow.source(sf.io.iterable([{"ts": 1, "a": 1}], name="in"))
    b.flat_map(lambda p: [p]).sink(sf.io.Collector())
    b.map(lambda p: p, name="m").sink(sf.io.Collector())
    b.aggregate(size=10, keys="a", window_type="single", **sf.count(), name="single").collect()
    b.aggregate(size=10, keys=lambda p: p["a"], **sf.count(), name="lam").collect()
    b.aggregate(size=10, keys="a", init=int, update=lambda n, p: n + 1, name="own").collect()
    b.join(b, size=10, keys=lambda p: p["a"], name="j").collect()
    b.filter(sf.col("a") > 0, name="f").collect()
    got = {n.name: r for n, r in native.reasons(flow).items()}
    assert got == {"in": None, "flat_map": "flat_map (a Python function)",
                   "m": "map by a Python function", "single": "window type single",
                   "lam": "keys is a Python function",
                   "own": "its init/update/output are Python functions",
                   "j": "a Join (a Python O+)", "f": None}


def test_a_python_function_falls_back_with_its_reason(spark, bids):
    path, _ = bids

    def build():
        flow = sf.Flow("lam")
        b = flow.source(sf.io.jsonl(path)).filter(sf.col("price") > 50_000)
        return flow, [b.aggregate(size="5s", keys=lambda t: t["auction"], **sf.count()).collect()]

    res = assert_same_as_reference(build, "spark")
    assert res.extra["spark_native"] == {
        "filter": "python: with the rest of the flow (oplus 'aggregate': keys is a Python "
                  "function)",
        "aggregate": "python: keys is a Python function"}
    assert "spark plan: python filter (with the rest" in res.summary()


def test_a_flow_of_python_functions_says_nothing(spark):
    """No operator declarative: nothing to report (no extra, no summary line), as before."""
    recs = [{"ts": t, "k": t % 3} for t in range(20)]

    def build():
        flow = sf.Flow("lam")
        b = flow.source(sf.io.iterable(recs, name="in")).map(lambda p: p)
        return flow, [b.aggregate(size=10, keys=lambda p: p["k"], init=int,
                                  update=lambda n, p: n + 1).collect()]

    res = assert_same_as_reference(build, "spark")
    assert "spark_native" not in res.extra and "spark plan" not in res.summary()


def iterable_flow(recs, agg, **kw):
    def build():
        flow = sf.Flow("it")
        b = flow.source(sf.io.iterable(recs, name="in"))
        return flow, [b.aggregate(size=10, keys="k", **agg, name="agg", **kw).collect()]
    return build


def test_overflow_and_escapes_rerun_on_the_python_path(spark):
    """A sum beyond int64 (Spark: an ANSI overflow; Python: a big int) and a mean of ints whose
    sum is beyond 2**53 (Spark's doubles would round twice) re-run in Python: the reference's
    output, and the reason in the summary."""
    big = [{"ts": t, "k": t % 2, "v": 2**62 + t} for t in range(8)]
    res = assert_same_as_reference(iterable_flow(big, sf.sum_of("v")), "spark")
    assert res.extra["spark_native"] == {
        "agg": "python: re-ran on the Python path ([ARITHMETIC_OVERFLOW] overflow)"}
    big = [{"ts": t, "k": t % 2, "v": 2**52 + t} for t in range(8)]
    res = assert_same_as_reference(iterable_flow(big, sf.mean_of("v")), "spark")
    assert "a mean of ints whose sum is beyond 2**53" in res.extra["spark_native"]["agg"]
    nan = [{"ts": t, "k": 1, "v": float("nan") if t == 3 else t / 2} for t in range(8)]
    res = assert_same_as_reference(iterable_flow(nan, sf.max_of("v")), "spark")
    assert "NaN or -0.0" in res.extra["spark_native"]["agg"]


def test_a_pruned_division_by_zero_is_the_reference_error(spark):
    """``with_columns(r=a / b)`` whose ``r`` nothing reads: Spark's plan never divides, Python
    does and fails on the tuple; the guard makes the run the Python path's, with its error."""
    recs = [{"ts": t, "k": t % 3, "a": t, "b": t % 4} for t in range(1, 12)]

    def build():
        flow = sf.Flow("div")
        b = flow.source(sf.io.iterable(recs, name="in"))
        s = b.with_columns(r=sf.col("a") / sf.col("b"), name="wc").select("k")
        return flow, [s.aggregate(size=10, keys="k", **sf.count()).collect()]

    errors = []
    for engine in ("reference", "spark"):
        flow, _ = build()
        with pytest.raises(OperatorError) as e:
            flow.run(engine)
        errors.append((e.value.operator, e.value.ts))
    assert errors[0] == errors[1] == ("wc", 4)


def test_records_a_table_would_change_are_not_native(spark, tmp_path):
    """JSON Lines that make no exact Arrow table: a field missing from some lines, ints among
    floats, fields in another order. The Python path runs them, with the records as they
    are (each line its own payload)."""
    why = "records that make no exact table"
    cases = {"missing": [{"ts": 1, "k": 1, "x": 5}, {"ts": 2, "k": 1}],
             "mixed": [{"ts": 1, "k": 1, "x": 5}, {"ts": 2, "k": 2, "x": 2.5}],
             "order": [{"ts": 1, "k": 1, "x": 5}, {"ts": 2, "x": 2, "k": 2}]}
    for name, recs in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))

        def build(path=path):
            flow = sf.Flow("json")
            b = flow.source(sf.io.jsonl(path)).with_columns(k2=sf.col("k") * 2)
            return flow, [b.collect()]

        ref_flow, ref = build()
        ref_flow.run("reference")
        flow, got = build()
        res = flow.run("spark")
        assert multiset(got[0]) == multiset(ref[0]) == multiset(
            (r["ts"], {**r, "k2": r["k"] * 2}) for r in recs)  # each record as it is
        assert why in res.extra["spark_native"]["with_columns"], res.extra["spark_native"]


def test_native_off(spark):
    recs = [{"ts": t, "k": t % 3} for t in range(20)]
    res = assert_same_as_reference(iterable_flow(recs, sf.count()), "spark", native="off")
    assert res.extra["spark_native"] == {"agg": "python: with the rest of the flow (native "
                                                "plans are off)"}


def test_bad_input_is_the_local_engines_error(spark, tmp_path):
    """A malformed record, or an expression naming a column no record has: the same one error
    as on the reference (the driver reads the file; a missing column is not native, and the
    Python path names the tuple), nothing written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"ts": 1, "k": 1}\n{"ts": 2, "k":\n')
    good = tmp_path / "good.jsonl"
    good.write_bytes(b'{"ts": 1, "k": 1}\n{"ts": 2, "k": 2}\n')
    for path, expr, error in ((bad, sf.col("k") > 0, SourceError),
                              (good, sf.col("kk") > 0, OperatorError)):
        said = []
        for engine in ("reference", "spark"):
            out = tmp_path / f"{engine}.jsonl"
            flow = sf.Flow("bad")
            flow.source(sf.io.jsonl(path)).filter(expr).aggregate(
                size=10, keys="k", **sf.count()).sink(str(out))
            with pytest.raises(error) as e:
                flow.run(engine)
            said.append(str(e.value))
            assert not out.exists()
        assert said[0] == said[1]


def test_a_plan_spark_refuses_runs_on_the_python_path(spark, monkeypatch):
    """Should a translation give a column Spark's analysis refuses (here, one forced to name
    no column), the flow runs on the Python path with that reason, not as a Spark failure."""
    from pyspark.sql import functions as F

    monkeypatch.setattr(native.Translator, "column", lambda self, e: (F.col("nope"), "bool"))
    recs = [{"ts": t, "k": t % 3} for t in range(20)]

    def build():
        flow = sf.Flow("refused")
        b = flow.source(sf.io.iterable(recs, name="in")).filter(sf.col("k") > 0, name="f")
        return flow, [b.collect()]

    res = assert_same_as_reference(build, "spark")
    assert "'f': Spark's analysis refused it" in res.extra["spark_native"]["f"]
