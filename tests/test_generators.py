import collections
import doctest
import re

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from stretchflow.io import generators as g
from stretchflow.io.generators import (
    DEFAULT_START,
    GENERATORS,
    bandjoin,
    generate,
    trades,
    tweets,
    write_table,
)


@pytest.fixture(scope="module")
def tw():
    return tweets(60_000, seed=11)


@pytest.fixture(scope="module")
def tr():
    # Short phases so a modest row count still spans many of them.
    return trades(200_000, seed=5, max_rate=4000.0, min_phase_s=1.0, max_phase_s=4.0)


def _ts(table):
    return table["ts"].to_numpy()


# ------------------------------------------------------------------ common properties


@pytest.mark.parametrize(
    "make",
    [
        lambda seed, **kw: tweets(5000, seed=seed, **kw),
        lambda seed, **kw: bandjoin(5000, seed=seed, **kw)[0],
        lambda seed, **kw: bandjoin(5000, seed=seed, **kw)[1],
        lambda seed, **kw: trades(5000, seed=seed, **kw),
    ],
    ids=["tweets", "bandjoin-left", "bandjoin-right", "trades"],
)
def test_determinism_order_and_start(make):
    a, b, c = make(3), make(3), make(4)
    assert a.equals(b)
    assert not a.equals(c)
    assert a.num_rows == 5000
    ts = _ts(a)
    assert a.schema.field("ts").type == pa.int64()
    assert ts[0] == DEFAULT_START
    assert np.all(np.diff(ts) >= 0)
    shifted = make(3, start=1000)
    assert _ts(shifted)[0] == 1000
    assert np.array_equal(_ts(shifted) - 1000, ts - DEFAULT_START)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_zero_rows(name):
    out = GENERATORS[name](0)
    for table in out if isinstance(out, tuple) else (out,):
        assert table.num_rows == 0
        assert table.column_names[0] == "ts"


def test_equal_timestamps_at_high_rate():
    ts = _ts(tweets(5000, rate=10_000.0, gap_prob=0.0))
    assert np.sum(np.diff(ts) == 0) > 1000


def test_docstring_examples():
    result = doctest.testmod(g, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5
    assert result.failed == 0


# ------------------------------------------------------------------ tweets


def test_tweets_schema_and_rate(tw):
    assert tw.column_names == ["ts", "user", "text"]
    assert tw.schema.field("user").type == pa.string()
    assert tw.schema.field("text").type == pa.string()
    ts = _ts(tw)
    gaps = np.diff(ts)
    normal = gaps[gaps < 60_000]
    assert 0.9 < normal.mean() < 1.1  # 1000 tweets/s
    assert all(re.fullmatch(r"u\d+", u) for u in tw["user"].to_pylist())


def test_tweets_long_gaps(tw):
    gaps = np.diff(_ts(tw))
    long = gaps[gaps >= 300_000]
    assert 20 < len(long) < 120  # 0.001 * 60 000 expected
    assert long.max() <= 900_000 + 100
    assert np.all(np.diff(_ts(tweets(20_000, seed=1, gap_prob=0.0))) < 60_000)


def test_tweets_words_zipf_and_shape(tw):
    texts = tw["text"].to_pylist()
    counts = collections.Counter()
    lengths = []
    repeats = 0
    for text in texts:
        if not text:
            continue
        tokens = text.split(" ")
        words = [t for t in tokens if not t.startswith("#")]
        lengths.append(len(words))
        counts.update(words)
        repeats += len(set(words)) < len(words)
    assert min(lengths) == 3 and max(lengths) == 20
    assert all(re.fullmatch(r"[a-z]+", w) for w in counts)
    assert len(counts) <= 10000
    freqs = sorted(counts.values(), reverse=True)
    assert freqs[0] > 100 * freqs[len(freqs) // 2]
    # Top ranks roughly follow 1/k^1.1: rank 10 about 12x rarer than rank 1.
    assert 6 < freqs[0] / freqs[9] < 25
    assert repeats > len(texts) // 10


def test_tweets_empty_texts(tw):
    empty = sum(1 for t in tw["text"].to_pylist() if t == "")
    assert 150 < empty < 450  # 0.005 * 60 000 = 300
    assert tw["text"].null_count == 0
    none = tweets(5000, seed=2, empty_prob=0.0)
    assert "" not in none["text"].to_pylist()


def test_tweets_hashtags(tw):
    with_tags = 0
    positions = collections.Counter()
    for text in tw["text"].to_pylist():
        tokens = text.split(" ") if text else []
        tags = [i for i, t in enumerate(tokens) if "#" in t]
        for i in tags:
            assert tokens[i].startswith("#")
            assert re.fullmatch(r"#[a-z]+", tokens[i])
        assert len(tags) <= 3
        if tags:
            with_tags += 1
            positions["first" if tags[0] == 0 else "later"] += 1
            positions["last" if tags[-1] == len(tokens) - 1 else "inner"] += 1
    assert 0.27 < with_tags / tw.num_rows < 0.33
    # Hashtags go anywhere, not only at the ends.
    assert positions["later"] > positions["first"] and positions["inner"] > positions["last"]
    assert positions["first"] > 0 and positions["last"] > 0
    none = tweets(3000, seed=1, hashtag_prob=0.0)
    assert not any("#" in t for t in none["text"].to_pylist())


def test_tweets_users_zipf(tw):
    counts = sorted(collections.Counter(tw["user"].to_pylist()).values(), reverse=True)
    assert counts[0] > 50 * counts[len(counts) // 2]


def test_tweets_parameters_change_only_their_aspect():
    base = tweets(2000, seed=9)
    other = tweets(2000, seed=9, hashtag_prob=0.9)
    assert base["ts"].equals(other["ts"])
    assert base["user"].equals(other["user"])
    assert not base["text"].equals(other["text"])


def test_pseudo_words_distinct_and_readable():
    words = g._pseudo_words(6000)
    assert len(set(words)) == 6000
    assert all(re.fullmatch(r"[a-z]+", w) for w in words)
    assert [len(w) for w in words] == sorted(len(w) for w in words)
    assert g._pseudo_words(100) == words[:100]


def test_tweets_invalid_arguments():
    with pytest.raises(ValueError, match="rate"):
        tweets(10, rate=0)
    with pytest.raises(ValueError, match="min_words"):
        tweets(10, min_words=5, max_words=4)
    with pytest.raises(ValueError, match="hashtag_prob"):
        tweets(10, hashtag_prob=1.5)


# ------------------------------------------------------------------ bandjoin


def test_bandjoin_schema_and_ranges():
    left, right = bandjoin(50_000, seed=2)
    assert left.column_names == ["ts", "id", "x", "y"]
    assert right.column_names == ["ts", "id", "a", "b", "c", "d"]
    assert right.schema.field("c").type == pa.float64()
    assert right.schema.field("d").type == pa.bool_()
    for table in (left, right):
        assert np.array_equal(table["id"].to_numpy(), np.arange(50_000))
        mean_gap = np.diff(_ts(table)).mean()
        assert 0.95 < mean_gap < 1.05
    for table, cols in ((left, "xy"), (right, "ab")):
        for col in cols:
            values = table[col].to_numpy()
            assert values.min() == 1 and values.max() == 10_000
    c = right["c"].to_numpy()
    assert 0 <= c.min() and c.max() < 1
    assert 0.45 < right["d"].to_numpy().mean() < 0.55
    assert not np.array_equal(_ts(left), _ts(right))


def test_bandjoin_match_rate():
    left, right = bandjoin(3000, seed=0)
    x, y = left["x"].to_numpy(), left["y"].to_numpy()
    a, b = right["a"].to_numpy(), right["b"].to_numpy()
    matches = np.count_nonzero(
        (np.abs(x[:, None] - a[None, :]) <= 10) & (np.abs(y[:, None] - b[None, :]) <= 10)
    )
    expected = 3000 * 3000 / 227_000  # about 40
    assert expected / 2 < matches < expected * 2


# ------------------------------------------------------------------ trades


def test_trades_schema_and_companies(tr):
    assert tr.column_names == ["ts", "id", "price", "avg_price"]
    assert tr.schema.field("id").type == pa.string()
    counts = collections.Counter(tr["id"].to_pylist())
    assert len(counts) == 10
    assert counts["AAPL"] == max(counts.values())
    assert counts.most_common()[0][1] > 4 * counts.most_common()[-1][1]
    many = trades(2000, seed=1, companies=40)
    symbols = set(many["id"].to_pylist())
    assert len(symbols) > 30 and all(re.fullmatch(r"[A-Z]{2,4}", s) for s in symbols)
    assert len(set(g._symbols(40))) == 40


def test_trades_bursty(tr):
    ts = _ts(tr)
    per_second = np.bincount((ts - ts[0]) // 1000)[:-1]  # drop the partial last second
    assert per_second.max() <= 4000 * 1.1
    assert per_second.max() > 2000
    assert per_second.std() > 0.4 * per_second.mean()
    assert np.quantile(per_second, 0.9) > 3 * np.quantile(per_second, 0.1)


def test_trades_gaps_from_idle_phases():
    ts = _ts(trades(20_000, seed=0, max_rate=50.0, min_phase_s=5.0, max_phase_s=10.0))
    assert np.diff(ts).max() > 2000


def test_trades_prices(tr):
    price = tr["price"].to_numpy()
    avg = tr["avg_price"].to_numpy()
    assert np.all(price > 0) and np.all(avg > 0)
    rel = (price - avg) / avg
    assert np.abs(rel).max() < 0.2
    assert (rel > 0).mean() > 0.3 and (rel < 0).mean() > 0.3


def test_trades_avg_is_per_company_ema():
    alpha = 0.05
    table = trades(3000, seed=4, ema_alpha=alpha)
    last = {}
    for row in table.to_pylist():
        prev = last.get(row["id"], row["price"])
        expected = alpha * row["price"] + (1 - alpha) * prev
        assert row["avg_price"] == pytest.approx(expected, rel=1e-9)
        last[row["id"]] = expected


def test_ema_long_series_matches_loop():
    rng = np.random.default_rng(0)
    x = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, 20_000)))
    out = g._ema(x, 0.003)
    avg = x[0]
    ref = np.empty_like(x)
    for i, v in enumerate(x):
        avg = 0.003 * v + 0.997 * avg
        ref[i] = avg
    np.testing.assert_allclose(out, ref, rtol=1e-9)


# ------------------------------------------------------------------ writing


def _sample_tables():
    left, right = bandjoin(300, seed=1)
    return [tweets(2000, seed=1), left, right, trades(2000, seed=1)]


@pytest.mark.parametrize("ext", [".jsonl", ".json", ".ndjson"])
def test_write_jsonl_round_trip(tmp_path, ext):
    for i, table in enumerate(_sample_tables()):
        path = tmp_path / f"t{i}{ext}"
        write_table(table, path)
        lines = path.read_bytes().splitlines()
        assert len(lines) == table.num_rows
        records = [orjson.loads(line) for line in lines]
        assert records == table.to_pylist()
        assert list(records[0]) == table.column_names


def test_write_jsonl_many_batches(tmp_path):
    table = bandjoin(150_000, seed=3)[0]
    path = tmp_path / "big.jsonl"
    write_table(table, path)
    data = path.read_bytes()
    assert data.count(b"\n") == 150_000 and data.endswith(b"}\n")
    assert orjson.loads(data.splitlines()[-1]) == table.slice(149_999).to_pylist()[0]


def test_write_csv_round_trip(tmp_path):
    for i, table in enumerate(_sample_tables()):
        path = tmp_path / f"t{i}.csv"
        write_table(table, path)
        back = pacsv.read_csv(path)
        assert back.schema == table.schema
        assert back.to_pylist() == table.to_pylist()


def test_write_parquet_round_trip(tmp_path):
    for i, table in enumerate(_sample_tables()):
        path = tmp_path / "nested" / "dir" / f"t{i}.parquet"
        write_table(table, path)
        assert pq.read_table(path).equals(table)


def test_write_unknown_extension(tmp_path):
    path = tmp_path / "out.xlsx"
    with pytest.raises(ValueError) as err:
        write_table(tweets(3), path)
    assert str(path) in str(err.value)
    for ext in (".jsonl", ".csv", ".parquet"):
        assert ext in str(err.value)
    assert not path.exists()


# ------------------------------------------------------------------ generate


def test_generators_registry():
    assert set(GENERATORS) == {"tweets", "bandjoin", "trades", "nexmark"}
    assert GENERATORS["tweets"] is tweets


def test_generate_single_stream(tmp_path):
    out = tmp_path / "data" / "tw.parquet"
    paths = generate("tweets", 500, 3, str(out), rate=200.0, hashtag_prob=0.5)
    assert paths == [out]
    assert pq.read_table(out).equals(tweets(500, seed=3, rate=200.0, hashtag_prob=0.5))


def test_generate_bandjoin_two_files(tmp_path):
    paths = generate("bandjoin", 100, 8, tmp_path / "bj.jsonl")
    assert paths == [tmp_path / "bj-left.jsonl", tmp_path / "bj-right.jsonl"]
    left, right = bandjoin(100, seed=8)
    for path, table in zip(paths, (left, right), strict=True):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        assert records == table.to_pylist()


def test_generate_errors(tmp_path):
    with pytest.raises(ValueError, match="bandjoin, nexmark, trades, tweets"):
        generate("nope", 10, 0, str(tmp_path / "x.jsonl"))
    with pytest.raises(ValueError, match="bogus"):
        generate("trades", 10, 0, str(tmp_path / "x.jsonl"), bogus=1)
    with pytest.raises(ValueError, match="accepted"):
        generate("trades", 10, 0, str(tmp_path / "x.txt"))
    assert list(tmp_path.iterdir()) == []
