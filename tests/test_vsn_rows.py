"""Flows of Python functions on vsn take batches of rows (issue #32).

A source read in batches reaches a one-input O+ of lambdas (and the Maps, Filters and FlatMaps
of lambdas before it) as whole batches: each instance takes a batch at once, f_MK runs once
per row for all the instances sharing σ (operators/row_keys.py), each instance updates its own
key groups. The output equals the reference's tuple path per timestamp at parallelism 1, 2 and
4, across reconfigurations and a checkpointed run resumed after a crash, and a user function
that fails is named on the same tuple. Spies show the batches were taken (and that f_MK ran
once per tuple, not once per instance), so a silent fallback to tuples fails these tests.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.errors import OperatorError
from stretchflow.eventtime import WATERMARK
from stretchflow.operators import aggregate_instance, stateless
from stretchflow.operators.aggregate import count, mean_of
from stretchflow.operators.row_keys import HIT_SAMPLE, RowKeys
from stretchflow.runtime.checkpoint import MANIFEST
from test_checkpoint_reference import Crash, _crash
from test_expr_aggregates import bids, write_jsonl

N = 12_000


@pytest.fixture(scope="module")
def bids_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = bids(N, 11)
    for r in rows:
        r["ts"] *= 10  # ~120 s of bids: many windows, several per source batch
        r["name"] = f"u{r['bidder']}"
    return write_jsonl(tmp_path_factory.mktemp("rows") / "bids.jsonl", rows)


# -- the flows, as a user writes them (lambdas only) ----------------------------------------------
def sliding_count(s: sf.Stream) -> sf.Stream:
    """Bids per auction, windows of 5 s every 1 s (a count: the sliced instance)."""
    return s.aggregate(size="5s", slide="1s", keys=lambda t: t["auction"], **count(),
                       output=lambda k, n: {"auction": k, "n": n}, name="count")


def tumbling_mean(s: sf.Stream) -> sf.Stream:
    """Mean price per category, tumbling 10 s."""
    return s.aggregate(size="10s", keys=lambda t: t["category"],
                       **mean_of(lambda t: t["price"],
                                 output=lambda k, m: {"category": k, "mean": m}), name="mean")


def sliding_max(s: sf.Stream) -> sf.Stream:
    """Highest price per bidder name, windows of 4 s every 2 s, f_U without a combine (the
    unsliced instance: a row falls in two windows)."""
    return s.aggregate(size="4s", slide="2s", keys=lambda t: t["name"], init=lambda: 0,
                       update=lambda a, t: max(a, t["price"]),
                       output=lambda k, m: {"name": k, "max": m}, name="max")


def chain(s: sf.Stream) -> sf.Stream:
    """Filter, map and flat_map of lambdas, then an aggregate whose f_MK gives several keys
    (a list) per tuple."""
    s = s.filter(lambda t: t["price"] % 3 != 0, name="f").map(
        lambda t: {**t, "half": t["price"] // 2}, name="m")
    s = s.flat_map(lambda t: [t, {**t, "auction": t["auction"] + 1}] if t["bidder"] < 5
                   else [t], name="fm")
    return s.aggregate(size="3s", keys=lambda t: [t["auction"], f"c{t['category']}"],
                       init=lambda: 0, update=lambda a, t: a + t["half"], name="sum")


def hot_items(s: sf.Stream) -> sf.Stream:
    """NEXMark Q5's shape: bids per auction (10 s every 2 s), then per window the auctions
    with the most bids, then their rows."""
    def top(acc: tuple[Any, list], t: dict) -> tuple[Any, list]:
        best, rows = acc
        if best is None or t["n"] > best:
            return (t["n"], [t])
        if t["n"] == best:
            rows.append(t)
        return acc

    counts = s.aggregate(size="10s", slide="2s", keys=lambda t: t["auction"], **count(),
                         output=lambda k, n: {"auction": k, "n": n}, name="counts")
    tops = counts.aggregate(size="2s", keys=lambda t: 0, init=lambda: (None, []),
                            update=top, output=lambda k, acc: {"rows": acc[1]}, name="top")
    return tops.flat_map(lambda t: t["rows"], name="rows")


FLOWS = {"sliding_count": sliding_count, "tumbling_mean": tumbling_mean,
         "sliding_max": sliding_max, "chain": chain, "hot_items": hot_items}


def _run(path: Path, make: Any, engine: str, **opts: Any) -> tuple[Any, Any]:
    flow = sf.Flow()
    col = make(flow.source(sf.io.jsonl(str(path)))).collect()
    res = flow.run(engine, **opts)
    return multiset(col), res


@functools.cache
def _want(path: Path, name: str) -> Any:
    got, _ = _run(path, FLOWS[name], "reference", columnar="off")
    return got


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Batches each A+ instance took whole (``process_shared``), and tuples that went
    through a fused stateless operator one at a time (``apply_batch``): a fallback to
    tuples shows in these."""
    seen: Counter = Counter()
    orig = aggregate_instance.AggregateInstance.process_shared

    def process_shared(self: Any, batch: Any, lock: Any) -> None:
        with lock:
            seen[self.op.name] += 1
        orig(self, batch, lock)

    monkeypatch.setattr(aggregate_instance.AggregateInstance, "process_shared",
                        process_shared)
    orig_apply = stateless.apply_batch

    def apply_batch(op: Any, batch: Any, *a: Any) -> Any:
        n = sum(1 for _, p in batch if p is not WATERMARK)
        if n:
            seen["tuples through " + op.name] += n
        return orig_apply(op, batch, *a)

    import stretchflow.executors.plan as plan
    monkeypatch.setattr(plan, "apply_batch", apply_batch)
    return seen


@pytest.mark.parametrize("name", list(FLOWS))
@pytest.mark.parametrize("p", [1, 2, 4])
def test_lambda_flows_equal_the_reference(name: str, p: int, bids_file: Path,
                                          taken: Counter) -> None:
    want = _want(bids_file, name)
    assert sum(sum(c.values()) for c in want.values()) > 20
    got, res = _run(bids_file, FLOWS[name], "vsn", parallelism=p)
    assert got == want
    # every A+ took batches (each instance: at least one per source batch), no fused
    # operator took tuples
    for node in res.extra["instances"]:
        assert taken[node] >= p * (N // 4096), (node, taken)
    assert not [k for k in taken if k.startswith("tuples through")], taken


@pytest.mark.parametrize("name", ["sliding_count", "sliding_max", "hot_items"])
def test_reconfigurations_with_batches_in_flight(name: str, bids_file: Path) -> None:
    """--reconfigure steps inside the source's batches (the pump cuts a batch there) and
    between them: every step applied, the output the reference's."""
    steps = "1000:2,3000:4,5000:1,7100:3,9000:2,11000:4"
    got, res = _run(bids_file, FLOWS[name], "vsn", parallelism=1, max_parallelism=4,
                    reconfigure=steps)
    assert got == _want(bids_file, name)
    recs = [r for r in res.extra["reconfigurations"] if r["operator"] != "top"]
    assert sum(r["applied"] for r in recs) >= 5, recs


def test_balanced_f_mu_and_sampled_group_hits(bids_file: Path) -> None:
    """The group loads a balancing f_μ reads are sampled per batch (one entry in
    HIT_SAMPLE), by whichever instance computed a batch's keys; a reconfiguration by them
    keeps the output."""
    execs: list[Any] = []

    def start(ex: Any) -> None:
        execs.append(ex)
        ex.reconfigure(3, "balanced", wait=False)

    got, _ = _run(bids_file, sliding_count, "vsn", parallelism=2, max_parallelism=3,
                  on_start=start)
    assert got == _want(bids_file, "sliding_count")
    (vop,) = execs[0].ops.values()
    hits = sum(sum(vi.inst.group_hits) for vi in vop.instances)
    batches = -(-N // 4096) + 8  # source batches, plus the cuts of a reconfiguration
    assert N // HIT_SAMPLE <= hits <= N // HIT_SAMPLE + 3 * batches, hits


@pytest.mark.parametrize("p", [2, 4])
def test_keys_called_once_per_tuple(p: int, bids_file: Path) -> None:
    """f_MK runs once per input tuple at any parallelism (not once per instance); with
    columnar='off' every instance calls it on every tuple (the tuple path)."""
    calls = itertools.count()
    lock = threading.Lock()

    def keys(t: dict) -> Any:
        with lock:
            next(calls)
        return t["auction"]

    def make(s: sf.Stream) -> sf.Stream:
        return s.aggregate(size="5s", slide="1s", keys=keys, **count(), name="count")

    ref, _ = _run(bids_file, make, "reference", columnar="off")
    calls = itertools.count()
    got, _ = _run(bids_file, make, "vsn", parallelism=p)
    assert got == ref and next(calls) == N
    calls = itertools.count()
    _run(bids_file, make, "vsn", parallelism=p, columnar="off")
    assert next(calls) == p * N


def test_row_keys_parts_for_another_assignment() -> None:
    """RowKeys' parts, for the assignment they were made with and for another (computed from
    the same columns): every (row, key) entry once, each in the part of its group's owner,
    a key's entries in row order; several keys, none, and a key with its own value per row
    flattened as the tuple path routes them."""
    from stretchflow.batch import Batch

    rows = [{"k": i % 7, "v": i} for i in range(40)]
    rows[5] = {"k": None, "v": 5}  # no keys
    rows[9] = {"k": [1, 2, 2], "v": 9}  # two keys (duplicates count once)
    rows[12] = {"k": {3: "x", 4: "y"}, "v": 12}  # keys with their own values
    keys = lambda t: t["k"]  # noqa: E731
    want = []
    for r in rows:
        ks = keys(r)
        pairs = [] if ks is None else [(k, r) for k in dict.fromkeys(ks)] if \
            isinstance(ks, list) else list(ks.items()) if isinstance(ks, dict) else [(ks, r)]
        want.extend((r["v"], k, x) for k, x in pairs)
    G = 16
    batch = Batch([i // 3 for i in range(40)], payloads=rows)
    rk = RowKeys(keys, batch, G, [g % 2 for g in range(G)], None)
    assert rk.failed is None
    for assign in ([g % 2 for g in range(G)], [g % 3 for g in range(G)]):
        got = []
        for j in range(max(assign) + 1):
            ts, ks, xs, gs, vs = rk.part(j, assign)
            assert all(assign[g] == j and g == hash(k) % G for k, g in zip(ks, gs, strict=True))
            assert ts == [v["v"] // 3 for v in vs]
            for k in set(ks):
                order = [v["v"] for kk, v in zip(ks, vs, strict=True) if kk == k]
                assert order == sorted(order)
            got.extend((v["v"], k, x) for k, x, v in zip(ks, xs, vs, strict=True))
        assert sorted(got, key=repr) == sorted(want, key=repr)


def test_row_keys_failure_keeps_the_rows_before() -> None:
    from stretchflow.batch import Batch

    def keys(t: dict) -> Any:
        if t["v"] == 30:
            raise ValueError("no key")
        return t["v"] % 5

    rows = [{"v": i} for i in range(40)]
    rk = RowKeys(keys, Batch(list(range(40)), payloads=rows), 8, [0] * 8, None)
    assert rk.failed is not None and rk.failed[:2] == (30, {"v": 30})
    assert rk.part(0, [0] * 8)[0] == list(range(30))
    with pytest.raises(Exception) as e:
        rk.raise_failure()
    assert e.value.ts == 30 and str(e.value) == "no key"


# -- errors ----------------------------------------------------------------------------------------
def _bad_keys(t: dict) -> Any:
    if t["price"] == 4242:
        raise ValueError("no key for 4242")
    return t["auction"]


def _bad_update(a: int, t: dict) -> int:
    if t["price"] == 4242:
        raise ValueError("cannot add 4242")
    return a + 1


def _bad_map(t: dict) -> dict:
    if t["price"] == 4242:
        raise ValueError("cannot map 4242")
    return t


ERRORS = {
    "keys": lambda s: s.aggregate(size="5s", keys=_bad_keys, **count(), name="agg"),
    "update": lambda s: s.aggregate(size="5s", slide="1s", keys=lambda t: t["auction"],
                                    init=lambda: 0, update=_bad_update, name="agg"),
    "map": lambda s: s.map(_bad_map, name="m").aggregate(
        size="5s", keys=lambda t: t["auction"], **count(), name="agg"),
}


@pytest.mark.parametrize("what", list(ERRORS))
@pytest.mark.parametrize("p", [1, 2])
def test_a_failing_function_names_the_reference_tuple(what: str, p: int,
                                                      tmp_path: Path) -> None:
    rows = bids(6000, 3)
    for r in rows:
        if r["price"] == 4242:
            r["price"] = 4243
    rows[5000]["price"] = 4242
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    msgs = []
    for engine, opts in (("reference", {"columnar": "off"}), ("vsn", {"parallelism": p})):
        flow = sf.Flow()
        ERRORS[what](flow.source(sf.io.jsonl(str(path)))).collect()
        with pytest.raises(OperatorError) as e:
            flow.run(engine, **opts)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and "4242" in msgs[0]


# -- checkpoints -----------------------------------------------------------------------------------
def _crashing_batches(batches: Any, after: int, ck: Path, rows: int, **kw: Any) -> Any:
    n = 0
    for b in batches(rows, **kw):
        if n >= after:
            raise _crash(after, ck)
        n += len(b)
        yield b


def _to_file(make: Any, path: Path, out: Path) -> sf.Flow:
    flow = sf.Flow()
    make(flow.source(sf.io.jsonl(str(path)))).sink(str(out))
    return flow


def _lines(path: Path) -> Counter:
    return Counter(orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS)
                   for line in path.read_bytes().splitlines())


@pytest.mark.parametrize(("first", "then"), [
    ({"parallelism": 2}, {"parallelism": 2}),
    ({"parallelism": 1, "max_parallelism": 3, "reconfigure": "2000:3,5000:2,6500:1"},
     {"parallelism": 3}),
])
def test_checkpointed_run_resumed_after_a_crash(first: dict, then: dict, bids_file: Path,
                                                tmp_path: Path, taken: Counter) -> None:
    """Hot items with checkpoints every 1 500 tuples, the source failing after 8 000 of its
    tuples (batches in flight), resumed (at another parallelism too): the uninterrupted
    run's output, with batches taken all along."""
    (tmp_path / "plain").mkdir()
    out = tmp_path / "plain" / "out.jsonl"
    _to_file(hot_items, bids_file, out).run("reference", columnar="off")
    want = _lines(out)
    assert sum(want.values()) > 20
    ck, out = tmp_path / "ck", tmp_path / "resumed.jsonl"
    flow = _to_file(hot_items, bids_file, out)
    src = next(n.spec for n in flow.nodes if n.kind == "source")
    src.batches = functools.partial(_crashing_batches, src.batches, 8_000, ck)
    with pytest.raises(Crash):
        flow.run("vsn", checkpoint=str(ck), checkpoint_every="1500", **first)
    man = json.loads((ck / MANIFEST).read_text())
    assert man["epoch"] >= 1 and 0 < man["cut"] and not out.exists()
    res = _to_file(hot_items, bids_file, out).run("vsn", checkpoint=str(ck),
                                                  checkpoint_every="1500", **then)
    assert not (ck / MANIFEST).exists()
    assert res.extra["checkpoints"] >= 1
    assert _lines(out) == want
    assert taken["counts"] >= 2 * (N // 4096) and taken["top"] > 0, taken
    assert not [k for k in taken if k.startswith("tuples through")], taken
