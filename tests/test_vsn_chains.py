"""Declarative flows stay columnar through chains (issue #31 items 1–2) on vsn at any
parallelism, reconfigurations included, and on the reference at parallelism P > 1.

* Expression chains: a source read in batches reaches its O+ and sinks through Maps and
  Filters with columnar forms (``filter(expr)``, ``with_columns``, ``select``), fused on the
  source's thread and applied to whole batches (executors/plan.py ``apply_batches``).
* O+ chains: an O+ with columnar forms fed by a columnar O+ takes its output tables as
  batches (hot items: counts per auction, then arg_max per window).
* The reference at P > 1 runs a columnar O+ as P instances sharing one columnar σ.

Each run's output equals the reference's tuple path (``columnar="off"``), AND every operator
took the columnar path: ``extra["paths"]`` says so, and spies count the batches that went
tuple at a time (must stay 0), the batches the second O+ took whole (must be many), and the
batches a fused operator's columnar form refused (must stay 0). A silent fallback to tuples
fails these tests.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import stretchflow as sf
import test_expr_aggregates
from conformance import flows as conf_flows
from conformance.contract import multiset
from stretchflow.batch import Batch
from stretchflow.errors import OperatorError
from stretchflow.operators import columnar, columnar_shared, stateless
from stretchflow.operators.aggregate import arg_max, count, mean_of, sum_of
from test_expr_aggregates import bids, hot_items, mean_per_category, write_jsonl

#: test_expr_aggregates' fixtures: its bids file, and its spy on batches summed tuple at a time
bids_file = test_expr_aggregates.bids_file
tuple_batches = test_expr_aggregates.tuple_batches

ENGINES = [("vsn", {"parallelism": 1}), ("vsn", {"parallelism": 2}),
           ("vsn", {"parallelism": 1, "reconfigure": "2000:2,4000:1"}),
           ("vsn", {"parallelism": 2, "reconfigure": "1500:1,3000:2,4500:1"}),
           ("reference", {"parallelism": 2}), ("reference", {"parallelism": 3})]


@pytest.fixture
def spies(monkeypatch, tuple_batches) -> dict[str, Any]:
    """``tuple_batches``: batches a columnar σ summed tuple at a time (test_expr_aggregates'
    spy); ``refused``: batches a fused operator's columnar form refused; ``taken``: batches
    each columnar O+ took whole."""
    seen: dict[str, Any] = {"refused": 0, "taken": {}}

    def taking(orig: Any) -> Any:
        def process_batch(self: Any, batch: Any) -> Any:
            seen["taken"][self.op.name] = seen["taken"].get(self.op.name, 0) + 1
            return orig(self, batch)
        return process_batch

    for cls in (columnar.ColumnarSlicedInstance, columnar_shared.ColumnarVSNInstance):
        monkeypatch.setattr(cls, "process_batch", taking(cls.process_batch))
    orig_tuples = stateless.apply_batch

    def apply_batch(op: Any, *a: Any) -> Any:  # through_batch's fallback: a refused batch
        seen["refused"] += 1
        return orig_tuples(op, *a)

    monkeypatch.setattr(stateless, "apply_batch", apply_batch)
    seen["tuple_batches"] = tuple_batches
    return seen


def expression_chain(path: Any) -> tuple[sf.Flow, list[Any]]:
    """Filter, with_columns and select in front of the hot-items chain and of a mean, with a
    sink behind the select: every operator has a columnar form."""
    flow = sf.Flow("expr-chain")
    s = flow.source(sf.io.jsonl(str(path)))
    kept = s.filter(sf.col("price") > 2000, name="dear")
    eur = kept.with_columns(eur=sf.col("price") * 0.9, name="eur")
    slim = eur.select("auction", "category", "eur", name="slim")
    counts = slim.aggregate(size="10s", slide="2s", keys="auction", **count(), name="bids")
    hot = counts.aggregate(size="2s", keys=None, **arg_max("count"), name="hot")
    mean = slim.aggregate(size="10s", keys="category", **mean_of("eur"), name="mean")
    return flow, [hot.collect(), mean.collect(), slim.collect()]


def _want(build: Any, path: Any) -> list[Any]:
    flow, cols = build(path)
    flow.run("reference", columnar="off")
    out = [multiset(c) for c in (cols if isinstance(cols, list) else [cols])]
    assert all(sum(sum(c.values()) for c in m.values()) > 20 for m in out)
    return out


@pytest.mark.parametrize("engine,opts", ENGINES, ids=str)
@pytest.mark.parametrize("build,paths", [
    (hot_items, {"bids": "columnar", "hot": "columnar"}),
    (mean_per_category, {"mean": "columnar"}),
    (expression_chain, {"bids": "columnar", "hot": "columnar", "mean": "columnar",
                        "dear": "columnar", "eur": "columnar", "slim": "columnar"}),
], ids=["hot", "mean", "expr-chain"])
def test_chains_run_columnar_and_give_the_tuple_paths_output(build, paths, engine, opts,
                                                            bids_file, spies, monkeypatch):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 512)  # many batches
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 512)
    monkeypatch.setattr("stretchflow.executors.reference.BATCH", 512)
    monkeypatch.setattr("stretchflow.executors.reference.WIDE_BATCH", 512)
    want = _want(build, bids_file)
    flow, cols = build(bids_file)
    res = flow.run(engine, **opts)
    got = [multiset(c) for c in (cols if isinstance(cols, list) else [cols])]
    assert got == want
    assert res.extra["paths"] == paths
    assert "columnar_fallback" not in res.extra
    assert spies["tuple_batches"][0] == 0 and spies["refused"] == 0
    if "hot" in paths:  # the second O+ took the first one's tables, many of them
        assert spies["taken"].get("hot", 0) > 10, spies["taken"]
    if "reconfigure" in opts:
        assert [r["applied"] for r in res.extra["reconfigurations"]
                if r["operator"] == "bids" or "bids" not in paths] == \
            [True] * opts["reconfigure"].count(":")


# (the ordered engine runs a flow with sinks on two nodes tuple at a time: not a line)
@pytest.mark.parametrize("engine,opts,second,counts_sunk", [
    ("vsn", {"parallelism": 1}, "arg_max", False), ("vsn", {"parallelism": 1}, "sum", False),
    ("vsn", {"parallelism": 1}, "arg_max", True), ("vsn", {"parallelism": 2}, "arg_max", False),
    ("vsn", {"parallelism": 2}, "sum", False), ("vsn", {"parallelism": 2}, "arg_max", True),
    ("ordered", {"parallelism": 1}, "arg_max", False),
    ("ordered", {"parallelism": 2}, "sum", False)], ids=str)
def test_an_o_plus_puts_several_windows_in_an_entry_only_for_a_columnar_reader(
        engine, opts, second, counts_sunk, bids_file, monkeypatch):
    """An O+ whose every reader is a columnar O+ (hot items' counts) emits several whole
    windows an entry, so arg_max sums many windows per call: run by one instance, runs of up
    to WIDE_COLUMNAR_BATCH rows; by several, one entry per updateW each, which the others'
    interleave with (Batch.floor), only where the reader's output is order free (arg_max,
    not a sum). The ordered engine joins the windows its merge put in timestamp order (rows
    in the same order: for any reader). Where a sink reads the counts too, an entry stays one
    window (a sink's inlet counts windows). The output is the tuple path's in every case."""
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 512)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 2048)
    p = opts["parallelism"]
    stamps: list[int] = []  # distinct timestamps of each batch the second O+ took
    floors: list[Any] = []
    orig = columnar_shared.ColumnarVSNInstance.process_batch

    def process_batch(self: Any, batch: Any) -> Any:
        if self.op.name == "second":
            stamps.append(len(set(batch.ts.tolist())))
            floors.append(batch.floor)
            if p == 1 and engine == "vsn":
                assert len(batch) <= 2048 or stamps[-1] == 1
        return orig(self, batch)

    monkeypatch.setattr(columnar_shared.ColumnarVSNInstance, "process_batch", process_batch)

    def build(path: Any) -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow("hot-items")
        counts = flow.source(sf.io.jsonl(str(path))).aggregate(
            size="10s", slide="2s", keys="auction", **count(), name="bids")
        agg = arg_max("count") if second == "arg_max" else sum_of("count")
        cols = [counts.aggregate(size="4s", keys=None, **agg, name="second").collect()]
        return flow, cols + [counts.collect()] if counts_sunk else cols

    want = _want(build, bids_file)
    flow, cols = build(bids_file)
    flow.run(engine, **opts)
    assert [multiset(c) for c in cols] == want
    assert stamps and sum(stamps) > 20
    merged = not counts_sunk and (p == 1 or second == "arg_max" or engine == "ordered")
    if merged:
        assert max(stamps) > 1 and len(stamps) < sum(stamps) / 2, stamps
    else:
        assert max(stamps) == 1
    # a floor (the watermark after an entry, below its last timestamp) only where entries
    # of several instances interleave
    assert any(f is not None for f in floors) == (merged and p > 1 and engine == "vsn")


def _two_columnar_instances() -> list:
    """Two columnar vsn instances sharing σ of a bid count (10 s windows sliding by 2 s, by
    auction), the key groups split between them."""
    flow = sf.Flow("two")
    node = flow.source(sf.io.generated("tweets", rows=1)).aggregate(
        size="10s", slide="2s", keys="auction", **count(), name="bids").node
    shared = columnar_shared.ColumnarShared(node.spec, 2)
    return [columnar_shared.ColumnarVSNInstance(node.spec, shared, j, [0, 1], True)
            for j in (0, 1)]


def test_interleaved_entries_reach_a_reader_before_any_watermark_past_their_rows():
    """Two instances sharing σ emit one entry each for the windows an updateW closed; the
    batch ended on a window's right boundary W, so each pushes its entry and a watermark at W
    (VSNInstance._emit). ESG_out orders equal timestamps by source rank: keyed by its last
    row, the second entry came after the first instance's watermark at W, and its earlier
    rows were late at the reader (windows lost; 1 run in 15 of the reconfiguring hot-items
    test above). Keyed by its first row, no watermark a reader gets before it is past any
    of its rows."""
    import numpy as np
    import pyarrow as pa

    from stretchflow.buffers.esg import ElasticScaleGate
    from stretchflow.eventtime import WATERMARK

    insts = _two_columnar_instances()
    ts = np.arange(0, 12_001, 50)  # ends on 12 000, a window's right boundary
    batch = Batch(ts, table=pa.table({"auction": ts // 50 % 16}))
    esg = ElasticScaleGate(sources=[0, 1], readers=["hot"])
    for inst in insts:
        inst.interleave = True
        inst.process_batch(batch)
        out = inst.take()
        assert out and all(b.floor is not None for _, b in out)  # interleaved entries
        esg.add_batch([*out, (inst.W, WATERMARK)], inst.j)
    w, rows = -math.inf, 0
    for t, p in esg.get_batch("hot", 99):
        if p is WATERMARK:
            w = t
        else:
            assert int(p.ts.min()) >= w, (t, int(p.ts.min()), w)  # no row late
            rows += len(p)
    assert w == 12_000 and rows == 6 * 16  # windows 2 000 … 12 000, every auction


def test_rows_behind_every_emitted_window_stop_the_run_instead_of_being_lost():
    """A batch whose rows reach σ after every connected instance emitted the windows holding
    them (what the race above did) is an error naming the slice, not a silent drop; a batch
    at or after the emitted windows still goes in."""
    import numpy as np
    import pyarrow as pa

    from stretchflow.errors import StretchflowError

    insts = _two_columnar_instances()
    shared = insts[0].shared
    ts = np.arange(0, 12_001, 50)
    for inst in insts:
        inst.process_batch(Batch(ts, table=pa.table({"auction": ts // 50 % 16})))
        assert inst.take()
    assert min(shared.next_l.values()) == 4_000  # windows up to [2 000, 12 000) emitted
    late = np.arange(1_000, 1_200, 50)  # slice 0: only in windows already emitted
    with pytest.raises(StretchflowError, match=r"bids: internal error: rows of slice 0 .*"
                                               r"before 4000"):
        insts[0].process_batch(Batch(late, table=pa.table({"auction": late % 16})))
    ok = np.arange(12_000, 12_200, 50)  # in windows still to come
    insts[1].process_batch(Batch(ok, table=pa.table({"auction": ok % 16})))


SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
CASE = next(c for c in conf_flows.FLOWS if c.name == "expression-aggregates-file")


@pytest.mark.parametrize("engine,opts", [
    ("vsn", {"parallelism": 1}), ("vsn", {"parallelism": 2}),
    ("vsn", {"parallelism": 2, "reconfigure": "10:1,25:2"}),
    ("reference", {"parallelism": 2}), ("reference", {"parallelism": 3})], ids=str)
def test_conformance_expression_flows(engine, opts, spies, monkeypatch):
    """The conformance suite's expression flow (every accumulator and keys form, and the
    hot-items chain) from a file: every O+ columnar, the reference's tuple path's output."""
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 7)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 7)
    monkeypatch.setattr("stretchflow.executors.reference.BATCH", 7)
    monkeypatch.setattr("stretchflow.executors.reference.WIDE_BATCH", 7)

    @SETTINGS
    @given(CASE.inputs)
    def check(ins: Any) -> None:
        flow, cols = CASE.build(ins)
        flow.run("reference", **CASE.reference_options)
        want = [multiset(c) for c in cols]
        flow, cols = CASE.build(ins)
        res = flow.run(engine, **opts)
        assert [multiset(c) for c in cols] == want
        if any(ins[0]):
            assert set(res.extra["paths"].values()) == {"columnar"}, res.extra["paths"]

    check()
    assert spies["tuple_batches"][0] == 0
    assert spies["taken"].get("x-hot", 0) > 0


@pytest.mark.parametrize("engine,opts", [("vsn", {"parallelism": 2}),
                                         ("reference", {"parallelism": 2})], ids=str)
def test_a_refused_batch_names_the_tuple_as_tuple_at_a_time(engine, opts, tmp_path):
    """A price that is text: the filter's columnar form refuses its batch, ``fn`` tuple by
    tuple fails on that tuple — the same one error as the tuple path, nothing written."""
    rows = bids(300, 5)
    rows[200]["price"] = "cheap"
    path = write_jsonl(tmp_path / "in.jsonl", rows)

    def build(out: Any) -> sf.Flow:
        flow = sf.Flow()
        flow.source(sf.io.jsonl(str(path))).filter(sf.col("price") > 500, name="dear") \
            .aggregate(size=50, keys="auction", **count(), name="n").sink(str(out))
        return flow

    msgs = []
    for eng, o, out in (("reference", {"columnar": "off"}, tmp_path / "a.jsonl"),
                        (engine, opts, tmp_path / "b.jsonl")):
        with pytest.raises(OperatorError) as e:
            build(out).run(eng, **o)
        msgs.append(str(e.value))
        assert not out.exists()
    assert msgs[0] == msgs[1] and "'dear'" in msgs[0] and "cheap" in msgs[0]


def test_a_lambda_between_expression_operators_gets_tuples(bids_file, spies):
    """A lambda map between two expression operators: batches become tuples for it, and the
    aggregate behind it gathers them (vsn: tuples; the output is the tuple path's)."""
    def build(path: Any) -> tuple[sf.Flow, list[Any]]:
        flow = sf.Flow()
        s = flow.source(sf.io.jsonl(str(path))).filter(sf.col("price") > 1000, name="dear")
        m = s.map(lambda t: {**t, "p2": t["price"] // 2}, name="half")
        agg = m.aggregate(size="5s", keys="category", **mean_of("p2"), name="m")
        return flow, [agg.collect()]

    want = _want(build, bids_file)
    for opts in ({"parallelism": 1}, {"parallelism": 2}):
        flow, cols = build(bids_file)
        res = flow.run("vsn", **opts)
        assert [multiset(c) for c in cols] == want
        assert res.extra["paths"]["dear"] == "columnar"
        assert "m" in res.extra["columnar_fallback"]


def _to_files(build: Any, path: Any, out: Any) -> tuple[sf.Flow, list[Any]]:
    """``build``'s flow with its collectors replaced by JSON Lines files in ``out`` (a
    checkpointed run writes files)."""
    flow, cols = build(path)
    files = []
    for k, c in enumerate(cols if isinstance(cols, list) else [cols]):
        node = next(n for n, s in flow.sinks if s is c)
        flow.sinks[:] = [(n, s) for n, s in flow.sinks if s is not c]
        f = out / f"out{k}.jsonl"
        sf.Stream(flow, node).sink(str(f))
        files.append(f)
    return flow, files


def _lines(files: list[Any]) -> list[list[bytes]]:
    return [sorted(f.read_bytes().splitlines()) for f in files]


def test_checkpointed_vsn_chain_gives_the_same_output(bids_file, tmp_path, monkeypatch):
    """Checkpoints on vsn (no kill): the same output; the first O+ reading the expression
    chain stays columnar, the O+ fed by it takes tuples and says why. A source checkpoints
    at most once per batch: batches of 512 tuples, so that the file makes several."""
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 512)
    (tmp_path / "want").mkdir()
    flow, files = _to_files(expression_chain, bids_file, tmp_path / "want")
    flow.run("reference", columnar="off")
    want = _lines(files)
    assert all(len(w) > 20 for w in want)
    for p in (1, 2):
        (tmp_path / f"got{p}").mkdir()
        flow, files = _to_files(expression_chain, bids_file, tmp_path / f"got{p}")
        res = flow.run("vsn", parallelism=p, checkpoint=str(tmp_path / f"ck{p}"),
                       checkpoint_every=1500)
        assert _lines(files) == want
        assert res.extra["checkpoints"] >= 2
        assert res.extra["paths"]["bids"] == "columnar"
        assert "O+ fed by another O+" in res.extra["columnar_fallback"]["hot"]


def test_checkpointed_reference_at_p2_falls_back_with_the_reason(bids_file, tmp_path):
    (tmp_path / "want").mkdir()
    flow, files = _to_files(hot_items, bids_file, tmp_path / "want")
    flow.run("reference", columnar="off")
    want = _lines(files)
    (tmp_path / "got").mkdir()
    flow, files = _to_files(hot_items, bids_file, tmp_path / "got")
    res = flow.run("reference", parallelism=2, checkpoint=str(tmp_path / "ck"),
                   checkpoint_every=1500)
    assert _lines(files) == want
    assert "checkpointed run at parallelism > 1" in res.extra["columnar_fallback"]["bids"]
    assert res.extra["paths"]["bids"] != "columnar"
