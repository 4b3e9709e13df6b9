"""SN channels run a flow of Python functions on batches of rows (issue #32, executors/sn_rows.py).

The parent deals whole source batches (JSON Lines unparsed: sn_raw_lines.py) round robin to
the channels; the dealt channel runs the stateless operators and f_MK, and sends every channel
the rows of the keys it owns; each channel runs the A+'s own instance over its parts in pulse
order; the parent merges the answers and runs what follows the first A+. The output equals the
reference's per timestamp for the user flows of the userflows bench (lambdas) at 1-3 process
and thread channels and for random windows, keys and batch cuts; f_MK runs once per tuple; a
failing function is named on the reference's tuple (the earliest failure of the input wins);
a bad line gives the reference's error; nothing is left running after a failure.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from columnar_cases import bounded
from conformance.contract import multiset
from stretchflow.errors import OperatorError, SourceError
from stretchflow.executors import sn_raw_lines
from stretchflow_bench.userflow_lambdas import ON_BIDS
from test_expr_aggregates import bids, write_jsonl

PROC = {"channels": "processes"}
THREADS = {"channels": "threads"}


@pytest.fixture(autouse=True, params=["dealt", "mixed"])
def dealing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # many pulses per run: windows close at batch boundaries, parts of several pulses in flight
    monkeypatch.setattr("stretchflow.executors.sn_rows.ROWS_BATCH", 301)
    # a small input is dealt before the channel processes start, and the parent explodes a
    # pulse whose channel has not started: here every pulse is dealt to its channel, or those
    # of channel 1 are exploded by the parent (both kinds in one run)
    dealt = request.param == "dealt"
    monkeypatch.setattr("stretchflow.executors.sn_columnar._Run._channel_ready",
                        lambda self, j: dealt or j != 1)
    return request.param


@pytest.fixture(scope="module")
def bids_rows() -> list[dict]:
    rows = bids(6000, 5)
    for r in rows:
        r["ts"] *= 10  # ~60 s of bids: many windows of every flow
    return rows


@pytest.fixture(scope="module")
def bids_file(bids_rows: list[dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("rows") / "bids.jsonl", bids_rows)


@pytest.fixture(scope="module")
def bids_parquet(bids_rows: list[dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "bids.parquet"
    pq.write_table(pa.Table.from_pylist(bids_rows), path, row_group_size=700)
    return path


def _run(path: Path, make: Any, engine: str, **opts: Any) -> tuple[Any, Counter]:
    flow = sf.Flow("rows")
    col = make(flow.source(sf.io.open_source(str(path)))).collect()
    res = flow.run(engine, **opts)
    return res, multiset(col.items)


_WANT: dict[tuple, Counter] = {}


def _want(path: Path, name: str, make: Any) -> Counter:
    if (path, name) not in _WANT:
        _WANT[(path, name)] = _run(path, make, "reference", columnar="off")[1]
    return _WANT[(path, name)]


# -- the userflows' lambda flows equal the reference -------------------------------------------
@pytest.mark.parametrize("name", sorted(ON_BIDS))
@pytest.mark.parametrize("opts", [PROC, THREADS], ids=["processes", "threads"])
def test_userflows_equal_the_reference(name: str, opts: dict, bids_file: Path,
                                       dealing: str) -> None:
    want = _want(bids_file, name, ON_BIDS[name])
    for p in (1, 2, 3):
        res, got = _run(bids_file, ON_BIDS[name], "sn", parallelism=p, **opts)
        assert got == want, (name, p)
        if name in ("currency", "selection"):  # no O+: the tuple path's taps
            continue
        assert set(res.extra["paths"].values()) == {"rows"}, res.extra.get("columnar_fallback")
        rows = res.extra["rows"]
        assert rows["entries"] == 6000 and rows["batches"] == 20  # one key a bid
        assert res.extra["parallelism"][next(iter(res.extra["paths"]))] == p
        # process channels get the lines unparsed (the bytes counted), thread channels rows
        by_parent = sum((seq - 1) % p == 1 for seq in range(1, 21)) \
            if dealing == "mixed" else 0
        assert rows["batches_exploded_in_parent"] == by_parent
        assert (rows["ipc_bytes_to_channels"] > 0) == (opts is PROC), rows


@pytest.mark.parametrize("name", ["hot_items", "mean_price"])
def test_parquet_batches_reach_the_channels_as_arrow(name: str, bids_parquet: Path,
                                                    bids_file: Path) -> None:
    """A Parquet file's batches hold their Arrow table: they go to a channel as IPC, and
    the channel makes the rows."""
    want = _want(bids_file, name, ON_BIDS[name])
    res, got = _run(bids_parquet, ON_BIDS[name], "sn", parallelism=2, **PROC)
    assert got == want and res.extra["paths"]["aggregate"] == "rows"
    rows = res.extra["rows"]
    dealt = rows["batches"] - rows["batches_exploded_in_parent"]
    assert (rows["ipc_bytes_to_channels"] > 0) == (dealt > 0), rows


# -- random windows, keys, batch cuts ----------------------------------------------------------
def _keys_of(kind: str) -> Any:
    if kind == "one":
        return lambda t: t["auction"]
    if kind == "set":  # several keys a tuple: f_U once per key
        return lambda t: {t["auction"], f"b{t['bidder'] % 4}"}
    if kind == "dict":  # a value per key
        return lambda t: {t["category"]: t["price"], "all": 1} if t["bidder"] % 3 else {}
    return lambda t: (t["category"], t["bidder"] % 2)  # a tuple: one key


def _random_flow(rng: random.Random) -> Any:
    wa = rng.choice([100, 300, 1000, 2500])
    ws = wa * rng.choice([1, 2, 3, 5])
    kind = rng.choice(["one", "set", "dict", "tuple"])
    keys = _keys_of(kind)
    # f_U not commutative: the order of a key's tuples shows in the output
    first = rng.random() < 0.5

    def make(s: sf.Stream) -> sf.Stream:
        if first:
            s = s.filter(lambda t: t["price"] % 7 != 0, name="f")
        a = s.aggregate(size=ws, slide=wa, keys=keys, init=lambda: (),
                        update=lambda acc, v: (acc + (v if not isinstance(v, dict)
                                                      else v["ts"],))[-4:],
                        output=lambda k, acc: {"k": str(k), "last": list(acc)}, name="agg")
        return a.map(lambda t: {**t, "n": len(t["last"])}, name="m")

    return make, (wa, ws, kind, first)


@pytest.mark.parametrize("seed", range(6))
def test_random_windows_keys_and_cuts(seed: int, bids_file: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    make, what = _random_flow(rng)
    want = _run(bids_file, make, "reference", columnar="off")[1]
    monkeypatch.setattr("stretchflow.executors.sn_rows.ROWS_BATCH", rng.choice([1, 17, 256,
                                                                                5000]))
    opts = PROC if seed % 3 == 0 else THREADS
    p = rng.choice([2, 3])
    res, got = _run(bids_file, make, "sn", parallelism=p, key_groups=rng.choice([1, 7, 128]),
                    **opts)
    assert got == want, (what, p, opts)
    assert res.extra["paths"]["agg"] == "rows"


def test_keys_called_once_per_tuple(bids_file: Path, bids_rows: list[dict]) -> None:
    lock, calls = threading.Lock(), Counter()

    def keys(t: dict) -> Any:
        with lock:
            calls[t["ts"], t["bidder"], t["auction"], t["price"]] += 1
        return {t["auction"], t["category"]}

    def make(s: sf.Stream) -> sf.Stream:
        return s.aggregate(size="5s", slide="1s", keys=keys, **sf.count(), name="count")

    want = _run(bids_file, make, "reference", columnar="off")[1]
    for p in (1, 2, 3):
        calls.clear()
        res, got = _run(bids_file, make, "sn", parallelism=p, **THREADS)
        assert got == want
        assert res.extra["paths"] == {"count": "rows"}
        assert sum(calls.values()) == len(bids_rows)
        assert calls == Counter((r["ts"], r["bidder"], r["auction"], r["price"])
                                for r in bids_rows)


# -- failures ----------------------------------------------------------------------------------
def _failing(where: dict[str, int]) -> Any:
    """hot items' count whose f_MK raises at the tuple with ts ``where["keys"]`` and f_U at
    ``where["update"]`` (either may be missing)."""
    def keys(t: dict) -> Any:
        if t["ts"] == where.get("keys"):
            raise KeyError("no keys here")
        return t["auction"]

    def update(a: int, t: dict) -> int:
        if t["ts"] == where.get("update"):
            raise ZeroDivisionError("boom")
        return a + 1

    def make(s: sf.Stream) -> sf.Stream:
        return s.aggregate(size="10s", slide="2s", keys=keys, init=int, update=update,
                           name="count")
    return make


def _error_of(path: Path, make: Any, engine: str, **opts: Any) -> BaseException:
    box = bounded(lambda: _run(path, make, engine, **opts))
    assert "error" in box, box
    return box["error"]


@pytest.mark.parametrize("opts", [PROC, THREADS], ids=["processes", "threads"])
def test_the_earliest_failure_wins(opts: dict, bids_file: Path, bids_rows: list[dict]) -> None:
    """f_MK fails in a later pulse than f_U (dealt to another channel, which may explode it
    first), f_U in an earlier one or the same: the reference's tuple is named."""
    n = 301  # rows a pulse
    # a timestamp several bids of other auctions share: f_U fails on each, in several
    # channels, and the first row of the input is named
    tie = next(a["ts"] for a, b, c in zip(bids_rows[3 * n:], bids_rows[3 * n + 1:],
                                          bids_rows[3 * n + 2:], strict=False)
               if a["ts"] == b["ts"] == c["ts"] and len({a["auction"], b["auction"],
                                                         c["auction"]}) == 3)
    cases = [
        {"update": tie},
        {"keys": tie, "update": tie},
        {"keys": bids_rows[5 * n + 10]["ts"], "update": bids_rows[2 * n + 50]["ts"]},
        {"keys": bids_rows[2 * n + 40]["ts"], "update": bids_rows[6 * n + 3]["ts"]},
        {"update": bids_rows[3 * n + 200]["ts"]},
        {"keys": bids_rows[4 * n]["ts"]},
    ]
    for where in cases:
        want = _error_of(bids_file, _failing(where), "reference", columnar="off")
        assert isinstance(want, OperatorError)
        for p in (2, 3):
            got = _error_of(bids_file, _failing(where), "sn", parallelism=p, **opts)
            assert type(got) is type(want), (where, p, got)
            assert (got.operator, got.ts, got.payload) == (want.operator, want.ts,
                                                           want.payload), (where, p)
            assert type(got.__cause__) is type(want.__cause__)
            assert str(got) == str(want)
    assert not [c for c in mp.active_children() if c.name.startswith("sn-channel")]
    assert not [t for t in threading.enumerate() if t.name.startswith("sn-")]


def test_an_unhashable_key_is_named_on_its_tuple(bids_file: Path, bids_rows: list[dict]) -> None:
    bad = bids_rows[2500]["ts"]

    def make(s: sf.Stream) -> sf.Stream:
        return s.aggregate(size="5s", keys=lambda t: (t["auction"], [1]) if t["ts"] == bad
                           else t["auction"], init=int, update=lambda a, t: a + 1, name="c")

    want = _error_of(bids_file, make, "reference", columnar="off")
    assert isinstance(want, OperatorError) and want.ts == bad
    for opts in (PROC, THREADS):
        got = _error_of(bids_file, make, "sn", parallelism=2, **opts)
        assert type(got) is type(want) and str(got) == str(want), opts


def test_a_failing_map_before_the_aggregate(bids_file: Path, bids_rows: list[dict]) -> None:
    bad = bids_rows[1000]["ts"]

    def make(s: sf.Stream) -> sf.Stream:
        s = s.map(lambda t: t if t["ts"] != bad else 1 // 0, name="m")
        return s.aggregate(size="5s", keys=lambda t: t["auction"], **sf.count(), name="c")

    want = _error_of(bids_file, make, "reference", columnar="off")
    for opts in (PROC, THREADS):
        got = _error_of(bids_file, make, "sn", parallelism=2, **opts)
        assert str(got) == str(want) and got.operator == "m"


@pytest.mark.parametrize(("line", "at"), [
    (b'{"ts": 600, "auction": ', 0), (b'{"ts": 600, "auction": ', 1000),
    (b'{"ts": 600, "auction": ', 1203), (b"[1, 2]", 903), (b"[1, 2]", 5999),
    (b'{"auction": 3}', 1100), (b'{"ts": 1, "auction": 3}', 1000),
])
def test_a_bad_line_is_named_as_on_the_reference(line: bytes, at: int, tmp_path: Path,
                                                 bids_file: Path) -> None:
    """A bad record anywhere in a chunk of 301 lines (a chunk's first line, the middle, its
    last, the file's last): the reference's error, after the rows before it (a user's
    failure there wins)."""
    lines = bids_file.read_bytes().splitlines()
    lines[at] = line
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    make = ON_BIDS["hot_items"]
    want = _error_of(path, make, "reference", columnar="off")
    assert isinstance(want, SourceError)
    for opts in (PROC, THREADS):
        got = _error_of(path, make, "sn", parallelism=2, **opts)
        assert type(got) is type(want) and str(got) == str(want), opts
    # the rows before it go first: a user's failure on one of them is the error
    if at > 5:
        fail = _failing({"update": int(orjson_ts(lines[at - 3]))})
        want = _error_of(path, fail, "reference", columnar="off")
        got = _error_of(path, fail, "sn", parallelism=2, **PROC)
        assert isinstance(want, OperatorError) and str(got) == str(want)


def orjson_ts(line: bytes) -> int:
    import orjson

    return orjson.loads(line)["ts"]


def test_blank_lines_and_an_empty_file(tmp_path: Path, bids_file: Path) -> None:
    lines = bids_file.read_bytes().splitlines()
    for at in (0, 300, 301, 2000):
        lines.insert(at, b"")
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    make = ON_BIDS["hot_items"]
    want = _run(path, make, "reference", columnar="off")[1]
    res, got = _run(path, make, "sn", parallelism=2, **PROC)
    assert got == want and sum(res.tuples_in.values()) == 6000
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    res, got = _run(empty, make, "sn", parallelism=2, **PROC)
    assert got == Counter() and set(res.extra["paths"].values()) == {"rows"}


def test_raw_lines_are_the_batch_readers_records(bids_file: Path) -> None:
    src = sf.io.open_source(str(bids_file))
    raw = list(sn_raw_lines.raw_lines(src, 97))
    assert all(type(r) is sn_raw_lines.RawLines for r in raw)
    got = list(itertools.chain.from_iterable(
        sn_raw_lines.parse(src, r)[0].items() for r in raw))
    assert got == list(sf.io.open_source(str(bids_file)).items())
    assert [r.line for r in raw[:3]] == [1, 98, 195]


# -- runs the path does not take ---------------------------------------------------------------
@pytest.mark.parametrize(("opts", "reason"), [
    ({"reconfigure": [(1000, 3)], **PROC}, "reconfiguring"),
    ({"reconfigure": [(1000, 3)], **THREADS}, "reconfiguring"),
    ({"columnar": "off", **PROC}, "columnar='off'"),
])
def test_runs_the_path_does_not_cover_take_tuples(opts: dict, reason: str,
                                                  bids_file: Path) -> None:
    make = ON_BIDS["hot_items"]
    want = _want(bids_file, "hot_items", make)
    res, got = _run(bids_file, make, "sn", parallelism=2, **opts)
    assert got == want
    assert reason in res.extra["columnar_fallback"]["aggregate"]
    assert res.extra["paths"]["aggregate"] == "sliced"
