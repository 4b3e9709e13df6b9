"""Flows of Python functions on the ordered engine take batches of rows (issue #32).

A chain fed by a file source carries :class:`~stretchflow.batch.Batch` items of rows through
the ordered engine's line (executors/ordered_rows.py): the source stage reads row batches,
a stateless stage maps over a batch's rows at once, an O+'s p entries of a hand-over share
each batch so an A+ computes f_MK once per tuple for its p instances. The output equals the
reference's per timestamp (the user flows of the bench, at parallelism 1, 2 and 3, both
reorder buffers and both queues), in the order the ordered engine promises (a run's output
equals its own tuple path's, byte for byte); a failing user function or bad input is named
on the tuple the reference names, the earliest error first; a checkpointed lambda flow that
fails inside a batch resumes byte for byte. Spies show the batches were taken, so a silent
fallback to tuples fails these tests.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.errors import SourceError, StretchflowError
from stretchflow.executors import ordered, ordered_rows
from stretchflow.operators import aggregate_instance
from stretchflow.runtime import pump
from stretchflow.runtime.checkpoint import MANIFEST
from stretchflow_bench import userflow_lambdas as lambdas
from test_expr_aggregates import bids, write_jsonl

N = 9_000
FLOWS = dict(lambdas.ON_BIDS)


@pytest.fixture(scope="module")
def bids_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = bids(N, 13)
    for r in rows:
        r["ts"] *= 100  # ~300 s of bids: many 10 s windows, several per source batch
        r["auction"] = 984 + (r["auction"] - 1000) * 41  # every third one 123 k (selection)
    return write_jsonl(tmp_path_factory.mktemp("rows") / "bids.jsonl", rows)


def _run(path: Path, make: Any, engine: str, **opts: Any) -> tuple[Any, Any]:
    flow = sf.Flow()
    col = make(flow.source(sf.io.jsonl(str(path)))).collect()
    res = flow.run(engine, **opts)
    return col, res


@functools.cache
def _want(path: Path, name: str) -> Any:
    col, _ = _run(path, FLOWS[name], "reference", columnar="off")
    return multiset(col)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Batches each A+ instance took whole (``process_shared``), batches through a stateless
    stage (``over_batch``) and tuples through one (``apply_batch``, the tuple path)."""
    seen: Counter = Counter()
    lock = threading.Lock()
    orig = aggregate_instance.AggregateInstance.process_shared

    def process_shared(self: Any, batch: Any, lk: Any) -> None:
        with lock:
            seen["shared"] += 1
        orig(self, batch, lk)

    monkeypatch.setattr(aggregate_instance.AggregateInstance, "process_shared",
                        process_shared)
    orig_over = ordered_rows.over_batch

    def over_batch(op: Any, b: Any) -> Any:
        with lock:
            seen["rows through " + op.name] += len(b)
        return orig_over(op, b)

    monkeypatch.setattr(ordered_rows, "over_batch", over_batch)
    orig_apply = ordered.apply_batch

    def apply_batch(op: Any, items: Any, *a: Any) -> Any:
        with lock:
            seen["tuples"] += sum(1 for _, q in items if type(q) is dict)
        return orig_apply(op, items, *a)

    monkeypatch.setattr(ordered, "apply_batch", apply_batch)
    return seen


MODES = [{"reorder": r, "queue": q} for r in ordered.REORDERS for q in ordered.QUEUES]


@pytest.mark.parametrize("name", list(FLOWS))
@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{m['reorder']}-{m['queue']}")
def test_lambda_flows_equal_the_reference(name: str, p: int, mode: dict, bids_file: Path,
                                          taken: Counter) -> None:
    want = _want(bids_file, name)
    assert sum(sum(c.values()) for c in want.values()) > 2
    col, res = _run(bids_file, FLOWS[name], "ordered", parallelism=p, **mode)
    assert multiset(col) == want
    assert taken["tuples"] == 0, taken  # no stateless stage took tuples
    stateless = [n for n in res.extra["operators"] if n["name"] in ("map", "filter",
                                                                    "flat_map")]
    for op in stateless:  # the source's batches through the first, whole
        assert taken["rows through " + op["name"]] > 0, taken
    if name in ("hot_items", "highest_bid", "mean_price"):
        # each instance took each source batch whole (N / 4096 of them, at least)
        assert taken["shared"] >= p * (N // 4096), taken


@pytest.mark.parametrize("p", [2, 3])
def test_output_order_equals_the_tuple_path(p: int, bids_file: Path, tmp_path: Path) -> None:
    """The ordered engine's promise: its output is the sequential one, byte for byte
    (batches of rows or tuples alike)."""
    outs = []
    for columnar in ("on", "off"):
        out = tmp_path / f"{columnar}.jsonl"
        flow = sf.Flow()
        lambdas.hot_items(flow.source(sf.io.jsonl(str(bids_file)))).sink(str(out))
        flow.run("ordered", parallelism=p, columnar=columnar)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and outs[0].count(b"\n") > 5


@pytest.mark.parametrize("p", [2, 3])
def test_keys_called_once_per_tuple(p: int, bids_file: Path) -> None:
    """f_MK runs once per input tuple at any parallelism (the p instances share a batch's
    keys); with columnar='off' every instance calls it on every tuple (the tuple path)."""
    calls = [0]
    lock = threading.Lock()

    def keys(t: dict) -> Any:
        with lock:
            calls[0] += 1
        return t["auction"]

    def make(s: sf.Stream) -> sf.Stream:
        return s.aggregate(size="10s", slide="2s", keys=keys, **sf.count())

    want = multiset(_run(bids_file, make, "reference", columnar="off")[0])
    calls[0] = 0
    col, _ = _run(bids_file, make, "ordered", parallelism=p)
    assert multiset(col) == want and calls[0] == N
    calls[0] = 0
    _run(bids_file, make, "ordered", parallelism=p, columnar="off")
    assert calls[0] == p * N


def test_the_line_falls_back_to_tuples_where_batches_do_not_fit(bids_file: Path,
                                                                 taken: Counter) -> None:
    """columnar='off' and a flow other than a chain (two sinks) take tuples."""
    _run(bids_file, lambdas.currency, "ordered", parallelism=2, columnar="off")
    assert taken["tuples"] == N and not taken["rows through map"]
    taken.clear()
    flow = sf.Flow()
    s = flow.source(sf.io.jsonl(str(bids_file))).map(lambda t: {**t, "x": 1}, name="m")
    a, b = s.collect(), s.filter(lambda t: t["price"] > 5000).collect()
    flow.run("ordered", parallelism=2)
    assert len(a.items) == N and 0 < len(b.items) < N
    assert not [k for k in taken if k.startswith("rows through")], taken


# -- errors ----------------------------------------------------------------------------------------
def _failing(value: int, what: str):
    def fn(t: dict) -> Any:
        if t["price"] == value:
            raise ValueError(f"{what} fails on {value}")
        return t
    return fn


def _flow(path: Path, map_at: int | None = None, keys_at: int | None = None,
          update_at: tuple[int, ...] = ()) -> sf.Flow:
    """filter -> map -> an A+ (sliding) -> a second A+: each may fail on a price."""
    flow = sf.Flow("errors")
    bad_map = _failing(map_at, "map") if map_at else (lambda t: t)
    bad_keys = _failing(keys_at, "keys") if keys_at else (lambda t: t)

    def update(n: int, t: dict) -> int:
        if t["price"] in update_at:
            raise ValueError(f"update fails on {t['price']}")
        return n + 1

    s = flow.source(sf.io.jsonl(str(path))).filter(lambda t: t["price"] > 500).map(bad_map)
    counts = s.aggregate(size="10s", slide="2s", keys=lambda t: bad_keys(t)["auction"],
                         init=lambda: 0, update=update,
                         output=lambda k, n: {"auction": k, "n": n}, name="counts")
    counts.aggregate(size="2s", keys=lambda t: 0, init=list,
                     update=lambda a, t: a + [t["n"]],
                     output=lambda k, a: {"top": max(a)}, name="top").collect()
    return flow


def _messages(path: Path, p: int, **kw: Any) -> list[str]:
    msgs = []
    for engine, opts in (("reference", {"columnar": "off"}), ("reference", {}),
                         ("ordered", {"parallelism": p})):
        with pytest.raises(StretchflowError) as e:
            _flow(path, **kw).run(engine, **opts)
        msgs.append(f"{type(e.value).__name__}: {e.value}")
    return msgs


def _priced(tmp_path: Path, at: dict[int, int]) -> tuple[Path, list[dict]]:
    """Bids whose prices are unique at the given rows (row -> price), and nowhere else."""
    rows = bids(6_000, 3)
    for r in rows:
        r["ts"] *= 50
        if r["price"] in at.values():
            r["price"] += 20_000
    for i, price in at.items():
        rows[i]["price"] = price
    return write_jsonl(tmp_path / "in.jsonl", rows), rows


@pytest.mark.parametrize("where", ["map", "keys", "update"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_a_failing_function_names_the_reference_tuple(where: str, p: int,
                                                      tmp_path: Path) -> None:
    path, _ = _priced(tmp_path, {5_000: 4242})
    kw = {"map": {"map_at": 4242}, "keys": {"keys_at": 4242},
          "update": {"update_at": (4242,)}}[where]
    msgs = _messages(path, p, **kw)
    assert msgs[0] == msgs[1] == msgs[2] and "4242" in msgs[0], msgs
    assert msgs[0].startswith("OperatorError")


@pytest.mark.parametrize("p", [1, 2])
def test_the_earliest_error_wins(p: int, tmp_path: Path) -> None:
    """In one source batch: the A+'s f_MK failing on an earlier tuple wins over the map's
    on a later one, and the other way round; f_U failing on two tuples whose keys two
    instances own (at p = 2: auctions of both parities) names the earlier tuple."""
    rows = bids(6_000, 3)
    late = next(i for i in range(3_001, 4_000)
                if rows[i]["auction"] % 2 != rows[1_000]["auction"] % 2)
    path, rows = _priced(tmp_path, {1_000: 4241, 3_000: 4243, late: 4244})
    for kw, want in (({"map_at": 4243, "keys_at": 4241}, "keys fails on 4241"),
                     ({"map_at": 4241, "keys_at": 4243}, "map fails on 4241"),
                     ({"update_at": (4244, 4241)}, "update fails on 4241"),
                     ({"update_at": (4244, 4243)}, "update fails on 4243")):
        msgs = _messages(path, p, **kw)
        assert msgs[0] == msgs[1] == msgs[2] and want in msgs[0], (kw, msgs)


def test_bad_input_gives_the_reference_error(tmp_path: Path) -> None:
    """A malformed line in the middle of a batch: the same one-line SourceError."""
    path, _ = _priced(tmp_path, {})
    lines = path.read_bytes().splitlines(keepends=True)
    lines[4_500] = b'{"ts": 1, "auction": \n'
    path.write_bytes(b"".join(lines))
    msgs = []
    for engine, opts in (("reference", {}), ("ordered", {"parallelism": 2})):
        flow = sf.Flow()
        lambdas.hot_items(flow.source(sf.io.jsonl(str(path)))).collect()
        with pytest.raises(SourceError) as e:
            flow.run(engine, **opts)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and "\n" not in msgs[0]


# -- checkpoints -----------------------------------------------------------------------------------
class _Crash(StretchflowError):  # passes through operators unchanged, as a kill would stop
    pass


def _crashing_batches(batches: Any, after: int, rows: int, **kw: Any) -> Any:
    """The source's batches, failing once ``after`` tuples were read (inside the source's
    stream of batches: the batches before it are in flight)."""
    n = 0
    for b in batches(rows, **kw):
        if n >= after:
            raise _Crash(f"after {after}")
        n += len(b)
        yield b


def _hot_items_to(path: Path, out: Path, keys: Any = None) -> sf.Flow:
    flow = sf.Flow("hot")
    s = flow.source(sf.io.jsonl(str(path))).map(lambda t: {**t, "eur": t["price"] * 0.9})
    f = lambdas.HOT_ITEMS
    counts = s.aggregate(size="10s", slide="2s", keys=keys or f["keys"], **f["count"],
                         output=f["output"])
    top = counts.aggregate(size="2s", keys=f["top_keys"], init=f["top_init"],
                           update=f["top_update"], output=f["top_output"])
    top.flat_map(f["rows"]).sink(str(out))
    return flow


@pytest.mark.parametrize(("where", "first", "then"), [
    ("source", {"parallelism": 2}, {"parallelism": 2}),
    ("keys", {"parallelism": 2, "reorder": "lock", "queue": "partitioned"},
     {"parallelism": 2, "reorder": "lock", "queue": "partitioned"}),
    ("keys", {"parallelism": 3}, {"parallelism": 1}),
    ("source", {"parallelism": 1}, {"parallelism": 3}),
])
def test_checkpointed_lambda_flow_failing_mid_batch_resumes_exactly(
        where: str, first: dict, then: dict, bids_file: Path, tmp_path: Path,
        taken: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hot items of lambdas, batches of 1 000 rows, checkpoints every 1 500 tuples, failing
    inside the source's batches (after 6 000 tuples) or in f_MK at its 4 500th call (in the
    middle of a batch), then resumed (at another parallelism too): the uninterrupted run's
    output, byte for byte, on batches all along."""
    monkeypatch.setattr(pump, "COLUMNAR_BATCH", 1_000)
    monkeypatch.setattr(pump, "WIDE_COLUMNAR_BATCH", 1_000)
    plain = tmp_path / "plain.jsonl"
    _hot_items_to(bids_file, plain).run("ordered", **then)
    assert plain.read_bytes().count(b"\n") > 5
    ck, out = tmp_path / "ck", tmp_path / "resumed.jsonl"
    calls = [0]

    def keys(t: dict) -> Any:
        calls[0] += 1
        if calls[0] == 4_500:
            raise _Crash("killed in f_MK")
        return t["auction"]

    flow = _hot_items_to(bids_file, out, keys if where == "keys" else None)
    if where == "source":
        src = next(n.spec for n in flow.nodes if n.kind == "source")
        src.batches = functools.partial(_crashing_batches, src.batches, 6_000)
    with pytest.raises(_Crash):
        flow.run("ordered", checkpoint=str(ck), checkpoint_every="1500", **first)
    man = json.loads((ck / MANIFEST).read_text())
    assert man["epoch"] >= 2 and man["cut"] > 0 and not out.exists()
    taken.clear()
    res = _hot_items_to(bids_file, out).run("ordered", checkpoint=str(ck),
                                             checkpoint_every="1500", **then)
    assert res.extra["checkpoints"] >= 1 and not (ck / MANIFEST).exists()
    if first == then:
        assert out.read_bytes() == plain.read_bytes()
    else:  # ties of one timestamp interleave by instance: the same lines
        assert Counter(out.read_bytes().splitlines()) == Counter(
            plain.read_bytes().splitlines())
    assert taken["tuples"] == 0 and taken["rows through map"] > 0, taken


@pytest.mark.slow  # CLI runs SIGKILLed at random and resumed (about 10 s)
def test_sigkill_with_batches_in_flight_resumes(bids_file: Path, tmp_path: Path) -> None:
    """Hot items of lambdas from the bench's flow file on the CLI, ordered with 2 workers
    on batches of rows, checkpointed, SIGKILLed at random moments and re-run until it
    completes: the uninterrupted run's lines, nothing left behind."""
    import random
    import subprocess

    from test_checkpoint_reference import (
        CLI,
        assert_no_leftovers,
        kill_once_checkpointed,
        kill_until_done,
    )

    out, ck, ref = tmp_path / "out.jsonl", tmp_path / "ck", tmp_path / "ref.jsonl"
    cmd = CLI + ["run", str(Path(lambdas.__file__)), "--param", "flow=hot_items",
                 "--param", f"input={bids_file}", "-q", "--engine", "ordered",
                 "--parallelism", "2"]
    t0 = time.perf_counter()
    subprocess.run(cmd + ["--param", f"output={ref}"], check=True)
    full = time.perf_counter() - t0
    run = cmd + ["--param", f"output={out}", "--checkpoint", str(ck),
                 "--checkpoint-every", "1000"]
    rng = random.Random(7)
    stats = {"kills": 0, "resumed_from_checkpoint": 0, "restarts": 0}
    for cycle in range(6):
        out.unlink(missing_ok=True)
        if cycle == 0:  # once killed with a checkpoint on disk for certain, not by chance
            man = kill_once_checkpointed(run, ck, out, stats)
            assert man["cut"] > 0, man  # the resumed run skips the input read before
        kill_until_done(run, rng, full, full, ck, stats)
        assert Counter(out.read_bytes().splitlines()) == Counter(ref.read_bytes().splitlines())
        assert_no_leftovers(out, ck)
    assert ref.read_bytes().count(b"\n") > 5
