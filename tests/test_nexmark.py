"""NEXMark (issue #33): the generator (stretchflow.workloads.nexmark) follows NEXMark's model
and is deterministic by seed; every query of stretchflow.queries.nexmark gives, on every
local engine, what a brute force written from the query's definition gives."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from conformance.contract import checked_multiset, diff, multiset
from stretchflow.io.generators import DEFAULT_START, generate
from stretchflow.queries import nexmark as nq
from stretchflow.workloads.nexmark import STREAMS, nexmark

# -- the generator -----------------------------------------------------------------------------


def _kinds(rows: int) -> np.ndarray:
    """NEXMark's kind of event n: 0 person, 1 auction, 2 bid (1:3:46 per 50 events)."""
    r = np.arange(rows) % 50
    return np.where(r < 1, 0, np.where(r < 4, 1, 2))


def test_deterministic_by_seed():
    a, b, c = nexmark(7_000, seed=4), nexmark(7_000, seed=4), nexmark(7_000, seed=5)
    for x, y in zip(a, b, strict=True):
        assert x.equals(y)
    assert not a[2].equals(c[2]) and not a[1].equals(c[1]) and not a[0].equals(c[0])
    # the event times and ids do not depend on the seed, only the draws do
    for x, z in zip(a, c, strict=True):
        assert x["ts"].equals(z["ts"])


@pytest.mark.parametrize("rows", [0, 1, 4, 49, 50, 51, 12_345])
def test_proportions_ids_and_times(rows):
    persons, auctions, bids = nexmark(rows, seed=1, rate=2_000.0)
    kinds = _kinds(rows)
    assert (persons.num_rows, auctions.num_rows, bids.num_rows) == tuple(
        int((kinds == k).sum()) for k in range(3))
    assert persons["id"].to_pylist() == list(range(1000, 1000 + persons.num_rows))
    assert auctions["id"].to_pylist() == list(range(1000, 1000 + auctions.num_rows))
    # event n at start + floor(n * 1e6 / rate) µs, in ms: 0.5 ms apart at 2 000 events/s
    want = DEFAULT_START + np.arange(rows) // 2
    for k, table in enumerate((persons, auctions, bids)):
        ts = table["ts"].to_numpy()
        assert np.array_equal(ts, want[kinds == k])
        assert np.array_equal(table["date_time"].to_numpy(), ts)
    assert [t.column_names for t in (persons, auctions, bids)] == [
        ["ts", "id", "name", "email_address", "credit_card", "city", "state", "date_time",
         "extra"],
        ["ts", "id", "item_name", "description", "initial_bid", "reserve", "date_time",
         "expires", "seller", "category", "extra"],
        ["ts", "auction", "bidder", "price", "channel", "url", "date_time", "extra"]]


def test_hot_auctions_bidders_and_sellers():
    rows = 100_000
    persons, auctions, bids = nexmark(rows, seed=2)
    n = np.arange(rows)[_kinds(rows) == 2]
    # the latest auction and person (base 0) when each bid is made
    last_auction = n // 50 * 3 + 2
    last_person = n // 50
    auction = bids["auction"].to_numpy() - 1000
    bidder = bids["bidder"].to_numpy() - 1000
    # an auction among the last 100 or up to 10 ahead; a bidder among the last 1000 or up
    # to 10 ahead
    assert np.all(auction <= last_auction + 10)
    assert np.all(auction >= np.maximum(last_auction - 100, 0))
    assert np.all(bidder <= last_person + 10)
    assert np.all(bidder >= np.maximum(last_person + 1 - 1000, 0))
    hot_auction = np.mean(auction == last_auction // 100 * 100)
    hot_bidder = np.mean(bidder == last_person // 100 * 100 + 1)
    # hot with probability 1/2 and 3/4, plus the cold draws that land on the hot one
    assert 0.49 < hot_auction < 0.52, hot_auction
    assert 0.74 < hot_bidder < 0.77, hot_bidder
    seller = auctions["seller"].to_numpy() - 1000
    sold_at = np.arange(rows)[_kinds(rows) == 1] // 50
    assert np.all(seller <= sold_at + 10)
    assert 0.72 < np.mean(seller == sold_at // 100 * 100) < 0.78
    cats = auctions["category"].to_numpy()
    assert set(np.unique(cats)) == {10, 11, 12, 13, 14}
    assert np.all(auctions["reserve"].to_numpy() > auctions["initial_bid"].to_numpy())
    price = bids["price"].to_numpy()
    assert price.min() >= 100 and price.max() <= 100_000_000
    # log-uniform over six decades: the median near 10**3 dollars
    assert 50_000 < np.median(price) < 200_000
    expires = auctions["expires"].to_numpy() - auctions["ts"].to_numpy()
    # 1 + uniform[0, 2h) with h = 1666 events = 166 ms at 10 000 events/s
    assert expires.min() >= 1 and expires.max() <= 333
    assert 150 < expires.mean() < 183
    assert set(persons["state"].to_pylist()) == {"AZ", "CA", "ID", "OR", "WA", "WY"}
    channel = bids["channel"].to_numpy(zero_copy_only=False)
    hot = np.isin(channel, ["Google", "Facebook", "Baidu", "Apple"])
    assert 0.49 < hot.mean() < 0.51  # half the bids on the four hot channels
    cold = channel[~hot].astype(str)
    assert np.all(np.char.startswith(cold, "channel-"))
    assert len(set(cold)) > 9_000  # of 10 000


def _lengths(table, *columns):
    return sum(np.array([len(v) for v in table[c].to_pylist()]) for c in columns)


def test_extra_pads_to_nexmark_sizes():
    # NEXMark's event sizes: each int 8 bytes, each string its length, extra the rest of an
    # average of 200, 500 and 100 bytes (the Flink port's channel and url not counted)
    persons, auctions, bids = nexmark(50_000, seed=3)
    sizes = {200: 8 + _lengths(persons, "name", "email_address", "credit_card", "city",
                               "state", "extra"),
             500: 48 + _lengths(auctions, "item_name", "description", "extra"),
             100: 32 + _lengths(bids, "extra")}
    for want, got in sizes.items():
        assert abs(got.mean() - want) < want * 0.01, (want, got.mean())
        assert got.min() >= want * 0.75 and got.max() <= want * 1.25


def test_generate_writes_three_streams(tmp_path):
    paths = generate("nexmark", 3_000, 7, tmp_path / "nx.jsonl", rate=500.0)
    assert paths == [tmp_path / f"nx-{s}.jsonl" for s in STREAMS]
    for path, table in zip(paths, nexmark(3_000, seed=7, rate=500.0), strict=True):
        assert [orjson.loads(x) for x in path.read_bytes().splitlines()] == table.to_pylist()


def test_cli_generate_and_generated_source(tmp_path):
    out = tmp_path / "nx.parquet"
    subprocess.run([sys.executable, "-m", "stretchflow", "generate", "nexmark", "--rows",
                    "2000", "--seed", "3", "--out", str(out), "--param",
                    "hot_auction_ratio=3", "-q"], check=True)
    tables = nexmark(2_000, seed=3, hot_auction_ratio=3)
    for stream, table in zip(STREAMS, tables, strict=True):
        assert pq.read_table(tmp_path / f"nx-{stream}.parquet").equals(table)
        flow = sf.Flow("g")
        col = flow.source(sf.io.generated("nexmark", rows=2_000, seed=3, stream=stream,
                                          hot_auction_ratio=3)).collect()
        flow.run()
        assert [p for _, p in col.items] == table.to_pylist()
    with pytest.raises(ValueError, match="streams: persons, auctions, bids"):
        sf.io.generated("nexmark", rows=10)
    with pytest.raises(ValueError, match="hot_auction_ratio must be a positive integer"):
        nexmark(10, hot_auction_ratio=0)


# -- the queries against a brute force ---------------------------------------------------------
# Each brute force is plain Python over the generated rows, written from the query's
# definition (docs/nexmark.md): which rows, which window (tumbling windows [l, l + W) with l a
# multiple of W; sliding ones every slide), and the output's ts (the window's end, plus one
# window per further windowed step of the chain).

ROWS, SEED = 20_000, 5  # 2 s of event time at 10 000 events/s
W, SIZE, SLIDE = 500, 500, 100  # the windows, scaled to 2 s as Flink's 10 s are to 100 s
PARAMS = {"q3": {"window": W}, "q4": {"window": W}, "q5": {"window": SIZE, "slide": SLIDE},
          "q6": {"window": W}, "q7": {"window": W}, "q8": {"window": W}}
BID_FIELDS = ("auction", "bidder", "price", "date_time", "extra")


def _pick(row: dict, fields: tuple[str, ...]) -> dict:
    return {f: row[f] for f in fields}


def bf_q0(d):
    return [(b["ts"], _pick(b, BID_FIELDS)) for b in d["bids"]]


def bf_q1(d):
    return [(b["ts"], {**_pick(b, BID_FIELDS), "price": b["price"] * 0.908}) for b in d["bids"]]


def bf_q2(d):
    return [(b["ts"], {"auction": b["auction"], "price": b["price"]}) for b in d["bids"]
            if b["auction"] % 123 == 0]


def bf_q3(d):
    out = []
    for p in d["persons"]:
        if p["state"] not in ("OR", "ID", "CA"):
            continue
        for a in d["auctions"]:
            if a["category"] == 10 and a["seller"] == p["id"] and a["ts"] // W == p["ts"] // W:
                out.append((p["ts"] // W * W + W, {"name": p["name"], "city": p["city"],
                                                   "state": p["state"], "id": a["id"]}))
    return out


def _closed_auctions(d):
    """The auctions that open and close in one window and have a bid from their opening to
    their expiry: (window start, auction, winning price)."""
    bids_of = defaultdict(list)
    for b in d["bids"]:
        bids_of[b["auction"]].append(b)
    for a in d["auctions"]:
        start = a["date_time"] // W * W
        if a["expires"] >= start + W:
            continue  # it does not close in the window it opens in
        prices = [b["price"] for b in bids_of[a["id"]]
                  if a["date_time"] <= b["date_time"] <= a["expires"]]
        if prices:
            yield start, a, max(prices)


def bf_q4(d):
    finals = defaultdict(list)  # (window start, category) -> the winning bids
    for start, a, final in _closed_auctions(d):
        finals[start, a["category"]].append(final)
    return [(start + 3 * W, {"category": c, "avg": sum(f) / len(f)})
            for (start, c), f in finals.items()]


def bf_q6(d):
    # each seller's closed auctions in closing order: window, expiry, id
    closed = sorted(_closed_auctions(d), key=lambda x: (x[0], x[1]["expires"], x[1]["id"]))
    history = defaultdict(list)
    out = []
    for start, a, final in closed:
        last = history[a["seller"]]
        last.append(final)
        ten = last[-10:]
        out.append((start + 2 * W + 1, {"seller": a["seller"], "avg": sum(ten) / len(ten)}))
    return out


def bf_q5(d):
    out = []
    ts = [b["ts"] for b in d["bids"]]
    first = min(ts) // SLIDE * SLIDE - SIZE + SLIDE
    for start in range(first, max(ts) + 1, SLIDE):
        counts = Counter(b["auction"] for b in d["bids"] if start <= b["ts"] < start + SIZE)
        if counts:
            most = max(counts.values())
            out += [(start + SIZE + SLIDE, {"auction": a, "num": n})
                    for a, n in counts.items() if n == most]
    return out


def bf_q7(d):
    windows = defaultdict(list)
    for b in d["bids"]:
        windows[b["ts"] // W * W].append(b)
    out = []
    for start, bids in windows.items():
        best = max(b["price"] for b in bids)
        out += [(start + W, _pick(b, BID_FIELDS)) for b in bids if b["price"] == best]
    return out


def bf_q8(d):
    out = []
    for p in d["persons"]:
        start = p["ts"] // W * W
        if any(a["seller"] == p["id"] and a["ts"] // W * W == start for a in d["auctions"]):
            out.append((start + 2 * W, {"id": p["id"], "name": p["name"], "starttime": start}))
    return out


BRUTE_FORCE = {"q0": bf_q0, "q1": bf_q1, "q2": bf_q2, "q3": bf_q3, "q4": bf_q4, "q5": bf_q5,
               "q6": bf_q6, "q7": bf_q7, "q8": bf_q8}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The generated rows by stream, and the same as Parquet files."""
    tables = dict(zip(STREAMS, nexmark(ROWS, seed=SEED), strict=True))
    d = tmp_path_factory.mktemp("nexmark")
    files = {}
    for name, table in tables.items():
        files[name] = d / f"{name}.parquet"
        pq.write_table(table, files[name])
    return {"rows": {k: t.to_pylist() for k, t in tables.items()}, "files": files}


@pytest.fixture(scope="module")
def expected(data):
    return {q: multiset(bf(data["rows"])) for q, bf in BRUTE_FORCE.items()}


def test_every_query_has_a_brute_force_with_outputs(expected):
    assert set(BRUTE_FORCE) == set(nq.QUERIES)
    # every query finds something on these inputs, in several windows
    for q, want in expected.items():
        assert sum(sum(c.values()) for c in want.values()) >= 4, q
        assert len(want) >= 3, q


ENGINES = [("reference", {}), ("vsn", {"parallelism": 2}),
           ("sn", {"parallelism": 2, "channels": "threads"}), ("ordered", {"parallelism": 2}),
           ("slack", {"parallelism": 2})]
#: in-memory rows on every engine (tuple at a time); Parquet files where an engine runs
#: Arrow batches (the columnar forms of the filters, selects and aggregates)
CASES = [(e, o, "rows") for e, o in ENGINES] + [
    (e, o, "parquet") for e, o in ENGINES if e in ("reference", "vsn", "ordered")]


@pytest.mark.parametrize("query", list(nq.QUERIES))
@pytest.mark.parametrize("engine,options,form", CASES,
                         ids=[f"{e}-{f}" for e, _, f in CASES])
def test_query_matches_brute_force(query, engine, options, form, data, expected):
    flow = sf.Flow(query)
    if form == "rows":
        sources = {k: sf.io.iterable(v) for k, v in data["rows"].items()}
    else:
        sources = {k: sf.io.parquet(p) for k, p in data["files"].items()}
    col = nq.build(flow, query, sources, **PARAMS.get(query, {})).collect()
    flow.run(engine, **options)
    got = checked_multiset(col)
    assert got == expected[query], diff(got, expected[query])


def test_build_errors():
    flow = sf.Flow("x")
    with pytest.raises(ValueError, match="no NEXMark query 'q9'; queries: q0, q1, q2, q3, q4, "
                                         "q5, q6, q7, q8"):
        nq.build(flow, "q9", {})
    with pytest.raises(ValueError, match="q3 reads persons, auctions; no source for auctions"):
        nq.build(flow, "q3", {"persons": sf.io.iterable([])})


def test_docstring_examples():
    import doctest

    from stretchflow.workloads import nexmark as generator_module

    for module in (generator_module, nq):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


@pytest.mark.parametrize("q", sorted(nq.QUERIES))
def test_registered_as_builtin_query(q):
    """``stretchflow run nexmark-qN``: the registry's query reads the streams in the query
    function's order and gives the same output as :func:`stretchflow.queries.nexmark.build`."""
    from stretchflow.queries import QUERIES, build_query

    fn, streams = nq.QUERIES[q]
    entry = QUERIES[f"nexmark-{q}"]
    assert (entry.min_inputs, entry.max_inputs, entry.data) == (len(streams), len(streams),
                                                                "nexmark")
    outs = []
    for how in ("registry", "build"):
        flow = sf.Flow(how)
        srcs = {s: sf.io.generated("nexmark", rows=6000, seed=3, stream=s) for s in streams}
        if how == "registry":
            out = build_query(f"nexmark-{q}", [flow.source(srcs[s]) for s in streams])
        else:
            out = nq.build(flow, q, srcs)
        c = out.collect()
        flow.run()
        outs.append(c.items)
    assert outs[0] == outs[1]
    assert all(set(p) == set(entry.output_fields) - {"ts"} for _, p in outs[0])
