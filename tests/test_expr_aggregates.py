"""Declarative aggregates (issue #31): keys and accumulators by column name or expression.

Every accumulator (count, sum, min, max, mean, top_k, arg_max, arg_min) with every keys form (a
name, a tuple of names, a named expression, a mix, None) over tumbling and sliding windows, on
random inputs with nulls: the columnar path (Arrow batches) gives what the tuple path gives
(``columnar="off"``) and what the same flow written with lambdas gives — and does take the
columnar path (a spy counts the batches that went tuple at a time). Then what must not be
silently different: an int64 overflow (tuple at a time, exact), a missing column (one error
line naming it), float sums (bit-identical, also on vsn summing batches ahead on two
threads), and the two flows of the issue (hot items, mean price per category) on every local
engine against the reference's tuple path.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.operators import columnar, columnar_shared
from stretchflow.operators.aggregate import Aggregate

arg_max, arg_min, count, max_of = sf.arg_max, sf.arg_min, sf.count, sf.max_of
mean_of, min_of, sum_of, top_k = sf.mean_of, sf.min_of, sf.sum_of, sf.top_k

SETTINGS = settings(max_examples=6, deadline=None,
                    suppress_health_check=list(HealthCheck))


# -- inputs ----------------------------------------------------------------------------------------
def bids(n: int, seed: int, nulls: float = 0.0, floats: bool = False) -> list[dict]:
    """NEXMark-shaped bids (``ts``, ``auction``, ``bidder``, ``price``, ``category``), sorted,
    auctions skewed; ``nulls``: the share of auction, category and price fields that are
    null; ``floats``: prices are floats."""
    rng = random.Random(seed)
    ts, out = 0, []
    for _ in range(n):
        ts += rng.choice((0, 0, 1, 3, 7))
        a = 1000 + min(int(rng.paretovariate(1.2)), 40)
        price: Any = rng.randrange(100, 10_000)
        if floats:
            price = price / rng.choice((3, 7, 10))
        rec = {"ts": ts, "auction": a, "bidder": rng.randrange(20), "price": price,
               "category": 10 + a % 5}
        for f in ("auction", "category", "price"):
            if rng.random() < nulls:
                rec[f] = None
        out.append(rec)
    return out


@st.composite
def inputs(draw: Any) -> list[dict]:
    return bids(draw(st.integers(0, 400)), draw(st.integers(0, 10**6)),
                nulls=draw(st.sampled_from((0.0, 0.0, 0.1, 0.5))),
                floats=draw(st.booleans()))


def write_jsonl(path: Any, rows: list[dict]) -> Any:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


# -- the forms under test -------------------------------------------------------------------------
ACCUMULATORS = {
    "count": count, "sum": lambda: sum_of("price"), "min": lambda: min_of("price"),
    "max": lambda: max_of("price"), "mean": lambda: mean_of("price"),
    "top_k": lambda: top_k("price", 2), "arg_max": lambda: arg_max("price"),
    "arg_min": lambda: arg_min("price"),
}
KEYS: dict[str, Any] = {
    "name": "auction",
    "names": ("category", "bidder"),
    "expr": (sf.col("bidder") % 3).alias("b3"),
    "mixed": ("category", (sf.col("price") // 1000).alias("thousands")),
    "none": None,
}
SHAPES = {"tumbling": (40, None), "sliding": (40, 10)}


def _expr_flow(rows: Any, keys: Any, acc: str, shape: str) -> tuple[sf.Flow, Any]:
    size, slide = SHAPES[shape]
    flow = sf.Flow("expr")
    src = sf.io.jsonl(str(rows)) if not isinstance(rows, list) else \
        sf.io.iterable(rows, name="bids")
    out = flow.source(src).aggregate(size=size, slide=slide, keys=keys,
                                     **ACCUMULATORS[acc](), name="agg")
    return flow, out.collect()


def _lambda_flow(rows: list[dict], keys: Any, acc: str, shape: str) -> tuple[sf.Flow, Any]:
    """The same aggregate written with lambdas, as before issue #31 (names keys only)."""
    size, slide = SHAPES[shape]
    names = () if keys is None else (keys,) if isinstance(keys, str) else keys
    name = {"top_k": None, "arg_max": None, "arg_min": None}.get(acc, acc)

    def key_of(t: dict) -> Any:
        k = tuple(t[n] for n in names)
        if None in k or (acc != "count" and t["price"] is None):
            return None
        return k[0] if len(k) == 1 else k if k else 0

    def out(k: Any, v: Any) -> dict:
        ks = (k,) if len(names) == 1 else k if names else ()
        return {**dict(zip(names, ks, strict=True)), name: v}

    flow = sf.Flow("lambdas")
    s = flow.source(sf.io.iterable(rows, name="bids"))
    if acc == "count":
        agg = dict(init=int, update=lambda n, t: n + 1, combine=lambda a, b: a + b, output=out)
    elif acc == "sum":
        agg = dict(init=int, update=lambda n, t: n + t["price"], combine=lambda a, b: a + b,
                   output=out)
    elif acc in ("min", "max"):
        pick = min if acc == "min" else max
        agg = dict(init=lambda: None,
                   update=lambda m, t: t["price"] if m is None else pick(m, t["price"]),
                   combine=lambda a, b: b if a is None else a if b is None else pick(a, b),
                   output=out)
    elif acc == "mean":
        agg = dict(init=lambda: (0, 0), update=lambda a, t: (a[0] + t["price"], a[1] + 1),
                   combine=lambda a, b: (a[0] + b[0], a[1] + b[1]),
                   output=lambda k, a: out(k, a[0] / a[1]))
    else:
        k = 2 if acc == "top_k" else 1
        best = min if acc == "arg_min" else max

        def ranked(rows: list) -> list:  # rank = 1 + rows strictly better, ties kept
            vals = [t["price"] for t in rows]
            return [t for t in rows
                    if 1 + sum((w < t["price"]) if best is min else (w > t["price"])
                               for w in vals) <= k]

        agg = dict(init=list, update=lambda a, t: [*a, t], output=lambda _k, a: ranked(a))
    op = s.aggregate(size=size, slide=slide, keys=key_of, name="agg", **agg)
    if acc in ("top_k", "arg_max", "arg_min"):
        op = op.flat_map(lambda rows: rows, name="rows")
    return flow, op.collect()


def _run(build: Any, *args: Any, engine: str = "reference", **opts: Any) -> Any:
    flow, col = build(*args)
    flow.run(engine, **opts)
    return multiset(col)


@pytest.fixture
def tuple_batches(monkeypatch) -> list[int]:
    """Counts the batches the columnar instances took tuple at a time (the spy that makes a
    silent fallback fail the tests that expect none)."""
    seen = [0]

    def spy(orig: Any) -> Any:
        def counted(self: Any, *a: Any) -> Any:
            seen[0] += 1
            return orig(self, *a)
        return counted

    monkeypatch.setattr(columnar.ColumnarSlicedInstance, "_tuple_at_a_time",
                        spy(columnar.ColumnarSlicedInstance._tuple_at_a_time))
    monkeypatch.setattr(columnar_shared.ColumnarShared, "_python_partials",
                        spy(columnar_shared.ColumnarShared._python_partials))
    return seen


# -- every accumulator x keys form x window shape ----------------------------------------------
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("keys", list(KEYS))
@pytest.mark.parametrize("acc", list(ACCUMULATORS))
def test_columnar_equals_tuple_path_and_lambdas(acc, keys, shape, monkeypatch, tuple_batches):
    monkeypatch.setattr("stretchflow.executors.reference.RUN", 64)  # several batches

    @SETTINGS
    @given(inputs())
    def check(rows: list[dict]) -> None:
        before = tuple_batches[0]
        col = _run(_expr_flow, rows, KEYS[keys], acc, shape)
        # float keys (price // 1000 of float prices) are refused by design (module doc of
        # operators/column_forms.py); anything else must stay columnar
        float_keys = keys == "mixed" and any(type(r["price"]) is float for r in rows)
        assert float_keys or tuple_batches[0] == before, "a batch went tuple at a time"
        assert col == _run(_expr_flow, rows, KEYS[keys], acc, shape, columnar="off")
        if keys in ("name", "names", "none"):
            assert col == _run(_lambda_flow, rows, KEYS[keys], acc, shape)

    check()


@pytest.mark.parametrize("acc", ["sum", "mean", "min", "top_k"])
def test_from_a_file_the_columnar_path_is_taken_and_exact(acc, tmp_path, monkeypatch,
                                                          tuple_batches):
    """JSON Lines batches (the reader's table, payloads parsed apart: nulls and float
    columns are checked against them) on the reference, and on vsn whose instances sum
    batches ahead on two threads: float sums in the tuple path's order, bit for bit."""
    monkeypatch.setattr("stretchflow.executors.reference.BATCH", 50)
    monkeypatch.setattr("stretchflow.executors.reference.WIDE_BATCH", 50)
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 37)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 37)
    for seed, floats in ((1, True), (2, False)):
        rows = bids(900, seed, nulls=0.05, floats=floats)
        path = write_jsonl(tmp_path / f"in{seed}.jsonl", rows)
        want = _run(_expr_flow, rows, "category", acc, "sliding", columnar="off")
        for engine, opts in (("reference", {}), ("vsn", {"parallelism": 1}),
                             ("vsn", {"parallelism": 2})):
            flow, col = _expr_flow(path, "category", acc, "sliding")
            res = flow.run(engine, **opts)
            assert res.extra["paths"] == {"agg": "columnar"}, (engine, opts)
            assert multiset(col) == want, (engine, opts, floats)
    assert tuple_batches[0] == 0


def test_a_float_column_holding_ints_goes_tuple_at_a_time(tmp_path, tuple_batches):
    """JSON's 3 and 3.5 in one column are float64 to Arrow; the tuple path sums 3 as an int
    (and a sum of ints only is an int): such a batch is refused, the output is the tuple
    path's to the type."""
    rows = [{"ts": t, "k": t % 2, "x": 3 if t % 4 else 3.5} for t in range(40)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    flow = sf.Flow()
    col = flow.source(sf.io.jsonl(str(path))).aggregate(
        size=8, keys="k", **sum_of("x")).collect()
    flow.run("reference")
    assert tuple_batches[0] > 0
    sums = [p["sum"] for _, p in col.items]
    assert int in {type(s) for s in sums} and float in {type(s) for s in sums}
    flow2 = sf.Flow()
    col2 = flow2.source(sf.io.jsonl(str(path))).aggregate(
        size=8, keys="k", **sum_of("x")).collect()
    flow2.run("reference", columnar="off")
    assert multiset(col) == multiset(col2)


def test_an_int64_overflow_goes_tuple_at_a_time_exactly(tuple_batches):
    big = 2**62
    rows = [{"ts": t, "k": t % 2, "x": big} for t in range(12)]
    flow = sf.Flow()
    col = flow.source(sf.io.iterable(rows)).aggregate(size=100, keys="k",
                                                      **sum_of("x")).collect()
    flow.run("reference")
    assert tuple_batches[0] > 0
    assert sorted(p["sum"] for _, p in col.items) == [6 * big, 6 * big]  # beyond int64


def test_a_window_whose_sum_leaves_int64_is_combined_in_python(monkeypatch):
    """Each batch's sum fits int64, the window's does not: the window combines in Python."""
    monkeypatch.setattr("stretchflow.executors.reference.RUN", 2)
    big = 2**62 - 1
    rows = [{"ts": t, "k": 0, "x": big} for t in range(6)]
    flow = sf.Flow()
    col = flow.source(sf.io.iterable(rows)).aggregate(size=10, slide=5, keys="k",
                                                      **sum_of("x")).collect()
    flow.run("reference")
    assert [p["sum"] for _, p in col.items] == [5 * big, 6 * big, big]


# -- the errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [["auction"], 3, {"auction"}, ("auction", 3),
                                 sf.col("price") // 1000, ("auction", sf.col("price") + 1)])
def test_keys_of_no_kind_are_a_definition_error(bad):
    flow = sf.Flow()
    s = flow.source(sf.io.iterable([]))
    with pytest.raises(FlowDefinitionError, match="'hot'"):
        s.aggregate(size=10, keys=bad, **count(), name="hot")


@pytest.mark.parametrize("engine,opts", [("reference", {}), ("reference", {"columnar": "off"}),
                                         ("vsn", {"parallelism": 2}),
                                         ("ordered", {"parallelism": 2})])
@pytest.mark.parametrize("keys,acc", [("auctoin", count), ("auction", lambda: sum_of("prize"))])
def test_a_missing_column_is_one_error_naming_it(keys, acc, engine, opts, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", bids(50, 3))
    out = tmp_path / "out.jsonl"
    flow = sf.Flow()
    flow.source(sf.io.jsonl(str(path))).aggregate(size=10, keys=keys, **acc(),
                                                  name="per-auction").sink(str(out))
    with pytest.raises(OperatorError) as e:
        flow.run(engine, **opts)
    msg = str(e.value)
    missing = "auctoin" if keys == "auctoin" else "prize"
    assert "'per-auction'" in msg and f"no column {missing!r}" in msg
    assert "(columns: ts, auction, bidder, price, category)" in msg
    assert "ts=0" in msg and "\n" not in msg
    assert not out.exists()


def test_check_columns_before_a_run():
    s = sf.Flow().source(sf.io.iterable([]))
    have = ["ts", "auction", "price"]
    op = s.aggregate(size=10, keys="auction", **mean_of(sf.col("price") * 2),
                     name="m").node.spec
    assert op.check_columns(have) == ["auction", "mean"]
    assert s.aggregate(size=10, keys=None, **arg_max("price")).node.spec \
        .check_columns(have) == have
    bad = s.aggregate(size=10, keys=("auction", "bidder"), **count(), name="b").node.spec
    with pytest.raises(FlowDefinitionError, match=r"'b': no column 'bidder' \(columns: ts"):
        bad.check_columns(have)
    assert s.aggregate(size=10, keys=lambda t: t["auction"], **count()).node.spec \
        .check_columns(have) is None


# -- the interface other parts read ---------------------------------------------------------------
def test_attributes_say_what_the_aggregate_computes():
    op = Aggregate(size=10, keys=("bidder", (sf.col("price") // 1000).alias("bucket")),
                   **top_k(sf.col("price"), 3))
    assert [e.output_name for e in op.key_exprs] == ["bidder", "bucket"]
    assert op.key_names == ("bidder", "bucket")
    agg = op.column_agg
    assert (agg.kind, agg.k, agg.largest, agg.of.same(sf.col("price"))) == \
        ("top_k", 3, True, True)
    low = Aggregate(size=10, keys=None, **arg_min("price")).column_agg
    assert (low.kind, low.k, low.largest) == ("top_k", 1, False)
    assert Aggregate(size=10, keys=None, **count()).key_exprs == ()
    by_fn = Aggregate(size=10, keys=lambda t: t["a"], **count())
    assert by_fn.key_exprs is None and by_fn.column_agg.kind == "count"
    assert not by_fn.columnar
    own = Aggregate(size=10, keys="a", **sum_of("x"), output=lambda k, s: {"s": s})
    assert own.column_agg is None and not own.columnar
    assert Aggregate(size=10, keys="a", **mean_of("x", output=lambda k, m: m)).column_agg \
        is None
    assert Aggregate(size=10, keys="a", **mean_of("x")).columnar


def test_lambda_accumulators_keep_their_meaning():
    """``of`` a callable (or none) is the form before issue #31: no description, f_U reads
    what f_MK gives (a Counter's counts for sum_of())."""
    from collections import Counter

    rows = [{"ts": 1, "text": "a a b"}, {"ts": 2, "text": "a"}]
    flow = sf.Flow()
    s = flow.source(sf.io.iterable(rows))
    occ = s.aggregate(size=10, keys=lambda t: Counter(t["text"].split()), **sum_of()).collect()
    mean = s.aggregate(size=10, keys=lambda t: 0, **mean_of(lambda t: len(t["text"]),
                       output=lambda k, m: {"m": m})).collect()
    flow.run()
    assert sorted((p["key"], p["value"]) for _, p in occ.items) == [("a", 3), ("b", 1)]
    assert [p for _, p in mean.items] == [{"m": 3.0}]


# -- the issue's two flows on every local engine --------------------------------------------------
def hot_items(path: Any) -> tuple[sf.Flow, Any]:
    """Bids per auction in sliding windows of 10 s every 2 s, then per window the auction(s)
    with the most bids (NEXMark Q5's shape), as a user writes it with expressions."""
    flow = sf.Flow("hot-items")
    bids_ = flow.source(sf.io.jsonl(str(path)))
    counts = bids_.aggregate(size="10s", slide="2s", keys="auction", **count(), name="bids")
    return flow, counts.aggregate(size="2s", keys=None, **arg_max("count"),
                                  name="hot").collect()


def mean_per_category(path: Any) -> tuple[sf.Flow, Any]:
    flow = sf.Flow("mean-price")
    bids_ = flow.source(sf.io.jsonl(str(path)))
    return flow, bids_.aggregate(size="10s", keys="category", **mean_of("price"),
                                 name="mean").collect()


ENGINES = [("reference", {}), ("vsn", {"parallelism": 1}), ("vsn", {"parallelism": 2}),
           ("ordered", {"parallelism": 2}), ("sn", {"parallelism": 2, "channels": "threads"}),
           ("sn", {"parallelism": 2, "channels": "processes"})]


@pytest.fixture(scope="module")
def bids_file(tmp_path_factory) -> Any:
    rows = bids(6000, 7)
    for r in rows:
        r["ts"] *= 10  # ~60 s of bids: many windows
    return write_jsonl(tmp_path_factory.mktemp("bids") / "bids.jsonl", rows)


@pytest.mark.parametrize("build", [hot_items, mean_per_category], ids=["hot", "mean"])
@pytest.mark.parametrize("engine,opts", ENGINES, ids=lambda x: str(x))
def test_issue_flows_on_every_engine(build, engine, opts, bids_file):
    flow, col = build(bids_file)
    flow.run("reference", columnar="off")
    want = multiset(col)
    assert sum(sum(c.values()) for c in want.values()) > 20
    flow, col = build(bids_file)
    res = flow.run(engine, **opts)
    assert multiset(col) == want
    if engine in ("reference", "vsn") and build is mean_per_category:
        assert res.extra["paths"] == {"mean": "columnar"}


def test_hot_items_second_stage_takes_the_first_stages_tables(bids_file, monkeypatch,
                                                               tuple_batches):
    """The reference hands the first O+'s output tables to the second as batches: both run
    columnar, no batch tuple at a time."""
    taken: list[str] = []
    orig = columnar.ColumnarSlicedInstance.process_batch

    def spy(self: Any, batch: Any) -> None:
        taken.append(self.op.name)
        orig(self, batch)

    monkeypatch.setattr(columnar.ColumnarSlicedInstance, "process_batch", spy)
    monkeypatch.setattr("stretchflow.executors.reference.WIDE_BATCH", 256)  # many batches
    flow, _ = hot_items(bids_file)
    res = flow.run("reference")
    assert res.extra["paths"] == {"bids": "columnar", "hot": "columnar"}
    assert taken.count("hot") > 5 and tuple_batches[0] == 0


def test_two_columnar_aggregates_reading_one_source_on_vsn(bids_file):
    """Each O+'s shared σ keeps its own accumulate step of a batch they both read (they
    shared batch.memo before: the second O+ took the first's step as its own and lost the
    batch)."""
    def build() -> tuple[sf.Flow, list]:
        flow = sf.Flow("two")
        s = flow.source(sf.io.jsonl(str(bids_file)))
        return flow, [s.aggregate(size="10s", keys="category", **mean_of("price")).collect(),
                      s.aggregate(size="4s", keys="auction", **count()).collect()]

    flow, want = build()
    flow.run("reference", columnar="off")
    flow, got = build()
    res = flow.run("vsn", parallelism=2)
    assert set(res.extra["paths"].values()) == {"columnar"}
    assert [multiset(c) for c in got] == [multiset(c) for c in want]


@pytest.mark.parametrize("engine,opts", [("vsn", {"parallelism": 2}),
                                         ("ordered", {"parallelism": 2}),
                                         ("sn", {"parallelism": 2, "channels": "processes"})])
def test_refused_batches_mix_with_columnar_ones_on_shared_engines(engine, opts, tmp_path,
                                                                   monkeypatch):
    """Batches the columnar form refuses (sums beyond int64, floats in an int column) go
    tuple at a time into the same σ; windows mixing both kinds combine exactly (in Python
    where the tuple path's accumulators do not fit Arrow's types)."""
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 16)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 16)
    rows = [{"ts": t, "k": t % 3, "x": 2**62 if t % 6 == 1 else t} for t in range(300)]
    rows += [{"ts": 300 + t, "k": t % 3, "x": t + 0.5 if t % 40 == 3 else t}
             for t in range(300)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)

    def build() -> tuple[sf.Flow, Any]:
        flow = sf.Flow()
        s = flow.source(sf.io.jsonl(str(path)))
        return flow, [s.aggregate(size=100, slide=20, keys="k", **sum_of("x")).collect(),
                      s.aggregate(size=60, keys="k", **max_of("x"), name="m").collect()]

    flow, want = build()
    flow.run("reference", columnar="off")
    flow, got = build()
    flow.run(engine, **opts)
    assert [multiset(c) for c in got] == [multiset(c) for c in want]
    assert any(p["sum"] > 2**63 for _, p in got[0].items)


def test_the_cli_prints_one_line_and_writes_nothing(tmp_path, capsys):
    from stretchflow.cli import main

    data = write_jsonl(tmp_path / "in.jsonl", bids(30, 5))
    out = tmp_path / "out.jsonl"
    app = tmp_path / "flow.py"
    app.write_text(
        "import stretchflow as sf\n"
        "from stretchflow.operators.aggregate import count\n"
        "flow = sf.Flow('bad')\n"
        f"flow.source(sf.io.jsonl({str(data)!r})).aggregate(\n"
        "    size='10s', keys='auctoin', **count(), name='per-auction')"
        f".sink({str(out)!r})\n")
    rc = main(["run", str(app)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    first = orjson.loads(data.read_bytes().splitlines()[0])["ts"]
    assert f"operator 'per-auction' failed on tuple ts={first} " in err
    assert "no column 'auctoin' (columns: ts, auction, bidder, price, category)" in err
    assert not out.exists()
