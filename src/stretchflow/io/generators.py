"""Deterministic synthetic data generators for benchmarks and tests.

Every generator returns timestamp-sorted :class:`pyarrow.Table` objects whose ``ts`` column
is an ``int64`` number of milliseconds. The first row of every stream is at ``start``
(default :data:`DEFAULT_START`, 2018-10-01T00:00:00Z); equal timestamps are allowed and
appear naturally at high rates.

All randomness comes from ``numpy.random.default_rng(seed)``, so the same arguments give
the same table (for a given NumPy version: NumPy reserves the right to change the
distribution algorithms between releases). Independent aspects of a stream (timing, users,
text, ...) draw from separate child generators spawned from that root, so changing e.g.
``hashtag_prob`` does not reshuffle the timestamps.

Generators:

* :func:`tweets` -- word streams with Zipf-distributed words, users and hashtags;
* :func:`bandjoin` -- the two ScaleJoin band-join benchmark streams;
* :func:`trades` -- bursty stock trades for the STRETCH hedge self-join;
* :func:`~stretchflow.workloads.nexmark.nexmark` -- NEXMark's persons, auctions and bids.

:func:`write_table` writes a table as JSON Lines, CSV or Parquet, and :func:`generate`
combines both for command-line use.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..workloads.nexmark import STREAMS as NEXMARK_STREAMS
from ..workloads.nexmark import nexmark
from .generator_args import DEFAULT_START
from .generator_args import check as _check
from .generator_args import check_prob as _check_prob
from .generator_args import check_rows as _check_rows

try:
    import pandas  # noqa: F401 - see below
except ImportError:  # a core install: pandas is the spark extra; pyarrow then never imports it
    pass

# pandas: pyarrow imports it at its first conversion of Python objects (pa.array of a list),
# which for a generated source would happen inside the running flow — 37 000 new objects that
# every full collection of the run then traverses (Flow.run freezes only the heap it starts
# with, runtime/gc_hold.py). Imported with this module, it belongs to that heap.

__all__ = [
    "DEFAULT_START",
    "GENERATORS",
    "STREAMS",
    "bandjoin",
    "generate",
    "trades",
    "tweets",
    "write_table",
]


# Text is built in fixed-size chunks so memory stays bounded for huge row counts and
# no single string array overflows 32-bit offsets. The size must stay constant: the
# random draws are made per chunk, so changing it would change the output for a seed.
_TEXT_CHUNK = 1 << 18

# The vocabularies depend only on their size, never on ``seed``: word number k is the
# same pseudo-word in every stream, which makes outputs comparable across seeds.
_VOCAB_SEED = 0x5EED_70C4
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
# Every syllable is exactly one consonant plus one vowel, so a concatenation splits back
# into syllables in only one way and distinct syllable sequences give distinct words.
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]

_TICKERS = (
    "AAPL", "MSFT", "GOOG", "AMZN", "META", "NVDA", "TSLA", "IBM", "ORCL", "INTC",
    "CSCO", "ADBE", "CRM", "NFLX", "AMD", "QCOM", "TXN", "AVGO", "PYPL", "SAP",
    "ASML", "SONY", "UBER", "SHOP", "SPOT", "ABNB", "JPM", "GS", "KO", "PEP",
)  # fmt: skip

_JSON_EXTENSIONS = (".jsonl", ".json", ".ndjson")
_EXTENSIONS = (*_JSON_EXTENSIONS, ".csv", ".parquet")
_JSON_BATCH_ROWS = 65_536


# --------------------------------------------------------------------------- helpers


def _zipf_cdf(n: int, exponent: float) -> np.ndarray:
    """Cumulative distribution of a Zipf law truncated to ranks 1..n."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -float(exponent)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def _zipf_sample(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """Draw 0-based ranks; ``numpy``'s own zipf is unbounded and needs exponent > 1."""
    idx = np.searchsorted(cdf, rng.random(size), side="right")
    # cdf[-1] can round to slightly below 1.0, so a draw could land one past the end.
    return np.minimum(idx, len(cdf) - 1)


def _poisson_ts(
    rng: np.random.Generator,
    rows: int,
    rate: float,
    start: int,
    gap_prob: float = 0.0,
    gap_ms: tuple[int, int] = (0, 0),
) -> np.ndarray:
    """Timestamps of a Poisson process at ``rate`` events/s, first event at ``start``.

    Integer milliseconds come from flooring the cumulative sum of real-valued gaps rather
    than rounding each gap, so rounding errors do not accumulate and order is preserved.
    """
    if rows == 0:
        return np.empty(0, dtype=np.int64)
    gaps = rng.exponential(1000.0 / rate, rows)
    if gap_prob > 0:
        long_gap = rng.random(rows) < gap_prob
        gaps[long_gap] += rng.integers(gap_ms[0], gap_ms[1] + 1, int(long_gap.sum()))
    gaps[0] = 0.0
    return start + np.floor(np.cumsum(gaps)).astype(np.int64)


def _pseudo_words(n: int, min_syllables: int = 1, salt: int = 0) -> list[str]:
    """``n`` distinct lowercase pseudo-words, shortest first (frequent words are short).

    The list for ``n`` is a prefix of the list for any larger ``n``, so word rank k is the
    same word whatever the vocabulary size.
    """
    rng = np.random.default_rng([_VOCAB_SEED, salt])
    syllables = np.array(_SYLLABLES)
    base = len(_SYLLABLES)
    words: list[str] = []
    length = min_syllables
    while len(words) < n:
        space = base**length
        need = min(n - len(words), space)
        # The whole class is shuffled, not just the part needed, to keep the prefix
        # property; beyond three syllables that would be too big, so an affine bijection
        # modulo the class size (multiplier coprime to 2, 5 and 7) scrambles it instead.
        if space <= 1 << 22:
            codes = rng.permutation(space)[:need]
        else:
            codes = (np.arange(need, dtype=np.int64) * 2_654_435_761 + 12_345) % space
        parts = [syllables[(codes // base**p) % base] for p in range(length)]
        joined = parts[0]
        for part in parts[1:]:
            joined = np.char.add(joined, part)
        words.extend(joined.tolist())
        length += 1
    return words


def _symbols(n: int) -> list[str]:
    """Ticker symbols: well-known ones first, then made-up four-letter ones."""
    out = list(_TICKERS[:n])
    taken = set(out)
    rng = np.random.default_rng([_VOCAB_SEED, 2])
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    while len(out) < n:
        symbol = "".join(rng.choice(letters, 4))
        if symbol not in taken:
            taken.add(symbol)
            out.append(symbol)
    return out


def _ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average ``a[i] = alpha*x[i] + (1-alpha)*a[i-1]``, ``a[0] = x[0]``.

    The recurrence is solved in closed form over blocks, which keeps it vectorised; blocks
    are short enough that ``(1-alpha)**-len`` stays far from overflow and precision loss.
    """
    n = len(x)
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    if alpha >= 1.0:
        out[:] = x
        return out
    beta = 1.0 - alpha
    block = int(min(n, 1 << 20, max(1, math.floor(12 * math.log(10) / -math.log(beta)))))
    j = np.arange(block, dtype=np.float64)
    pw = beta**j
    ipw = beta**-j
    prev = float(x[0])
    for s in range(0, n, block):
        seg = x[s : s + block]
        m = len(seg)
        out[s : s + m] = pw[:m] * (beta * prev + alpha * np.cumsum(seg * ipw[:m]))
        prev = float(out[s + m - 1])
    return out


# --------------------------------------------------------------------------- tweets


def _hashtag_mask(
    rng: np.random.Generator, tokens: np.ndarray, tags: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """Mark ``tags[i]`` distinct uniformly random slots among the ``tokens[i]`` of tweet i."""
    n = len(tokens)
    mask = np.zeros(int(offsets[-1]), dtype=bool)
    chosen: list[np.ndarray] = []
    for j in range(int(tags.max(initial=0))):
        has = tags > j
        # Draw among the slots still free, then shift past the taken ones (in increasing
        # order) so the result is uniform over the remaining positions.
        pos = (rng.random(n) * np.maximum(tokens - j, 1)).astype(np.int64)
        for taken in np.sort(np.stack(chosen), axis=0) if chosen else ():
            pos += pos >= taken
        chosen.append(pos)
        mask[offsets[:-1][has] + pos[has]] = True
    return mask


def tweets(
    rows: int,
    seed: int = 0,
    rate: float = 1000.0,
    start: int = DEFAULT_START,
    vocabulary: int = 10000,
    zipf: float = 1.1,
    users: int = 10000,
    hashtags: int = 1000,
    hashtag_prob: float = 0.3,
    min_words: int = 3,
    max_words: int = 20,
    empty_prob: float = 0.005,
    gap_prob: float = 0.001,
    gap_ms: tuple[int, int] = (300_000, 900_000),
) -> pa.Table:
    """A stream of synthetic tweets with columns ``ts`` (int64), ``user``, ``text``.

    * Arrivals are a Poisson process at ``rate`` tweets/s (exponential inter-arrival
      times, mean ``1000/rate`` ms); with probability ``gap_prob`` a tweet comes after an
      extra pause drawn uniformly from ``gap_ms`` (default 5-15 minutes) so that time
      windows fully expire.
    * ``text`` has ``min_words``..``max_words`` words (uniform) drawn independently from a
      Zipf law with exponent ``zipf`` over ``vocabulary`` pseudo-words, so a word may occur
      several times in one tweet. With probability ``hashtag_prob`` the tweet also holds
      1-3 hashtags (``#`` + a word of a separate ``hashtags``-sized Zipf vocabulary) at
      random positions. Tokens are separated by single spaces.
    * With probability ``empty_prob`` the text is ``""``.
    * ``user`` is ``"u<k>"`` with ``k`` in ``[0, users)``, Zipf-distributed (the most
      active user differs between seeds).

    The pseudo-words (lowercase, built from consonant-vowel syllables, frequent ones
    shortest) depend only on the vocabulary size, not on ``seed``.

    >>> t = tweets(1000, seed=7)
    >>> t.column_names
    ['ts', 'user', 'text']
    >>> t["ts"][0].as_py() == DEFAULT_START
    True
    >>> tweets(1000, seed=7).equals(t)
    True
    """
    _check_rows(rows)
    _check(rate > 0, f"rate must be positive, got {rate!r}")
    _check(vocabulary >= 1 and users >= 1 and hashtags >= 1,
           "vocabulary, users and hashtags must be at least 1")  # fmt: skip
    _check(zipf >= 0, f"zipf must be non-negative, got {zipf!r}")
    _check(0 <= min_words <= max_words,
           f"need 0 <= min_words <= max_words, got {min_words!r}, {max_words!r}")  # fmt: skip
    _check(0 <= gap_ms[0] <= gap_ms[1], f"gap_ms must be an ordered pair, got {gap_ms!r}")
    for name, value in (("hashtag_prob", hashtag_prob), ("empty_prob", empty_prob),
                        ("gap_prob", gap_prob)):  # fmt: skip
        _check_prob(name, value)
    rows = int(rows)

    time_rng, user_rng, text_rng = np.random.default_rng(seed).spawn(3)
    ts = _poisson_ts(time_rng, rows, rate, start, gap_prob, gap_ms)

    names = pa.array([f"u{k}" for k in user_rng.permutation(users)], pa.string())
    user = names.take(pa.array(_zipf_sample(user_rng, _zipf_cdf(users, zipf), rows)))

    # One lexicon holds both words and hashtags, so a token is a single index into it.
    lexicon = pa.array(
        _pseudo_words(vocabulary, 1, salt=0)
        + ["#" + w for w in _pseudo_words(hashtags, 2, salt=1)],
        pa.string(),
    )
    word_cdf = _zipf_cdf(vocabulary, zipf)
    tag_cdf = _zipf_cdf(hashtags, zipf)
    chunks = []
    for lo in range(0, rows, _TEXT_CHUNK):
        n = min(_TEXT_CHUNK, rows - lo)
        words = text_rng.integers(min_words, max_words + 1, n)
        tags = np.where(text_rng.random(n) < hashtag_prob, text_rng.integers(1, 4, n), 0)
        empty = text_rng.random(n) < empty_prob
        words[empty] = 0
        tags[empty] = 0
        tokens = words + tags
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(tokens, out=offsets[1:])
        ids = _zipf_sample(text_rng, word_cdf, int(offsets[-1]))
        is_tag = _hashtag_mask(text_rng, tokens, tags, offsets)
        ids[is_tag] = vocabulary + _zipf_sample(text_rng, tag_cdf, int(is_tag.sum()))
        lists = pa.LargeListArray.from_arrays(pa.array(offsets), lexicon.take(pa.array(ids)))
        chunks.append(pc.binary_join(lists, " "))
    text = pa.chunked_array(chunks, pa.string())

    return pa.table({"ts": pa.array(ts, pa.int64()), "user": user, "text": text})


# --------------------------------------------------------------------------- bandjoin


def bandjoin(
    rows: int,
    seed: int = 0,
    rate: float = 1000.0,
    start: int = DEFAULT_START,
) -> tuple[pa.Table, pa.Table]:
    """The two input streams of the ScaleJoin band-join benchmark, as ``(left, right)``.

    * left: ``ts, id, x, y`` with ``x, y`` uniform integers on ``[1, 10000]``;
    * right: ``ts, id, a, b, c, d`` with ``a, b`` uniform integers on ``[1, 10000]``,
      ``c`` a float uniform on ``[0, 1)`` and ``d`` a bool.

    Each stream has ``rows`` rows, ``id`` ``0..rows-1`` (int64, unique within the stream)
    and its own Poisson arrivals at ``rate`` tuples/s, both starting at ``start``.

    The benchmark predicate is ``|x - a| <= 10 and |y - b| <= 10`` (band 10). Each
    difference falls in the band with probability about 21/10000, so a left/right pair
    matches with probability about ``(21/10000)**2``, i.e. once per ~227 000 comparisons.

    >>> left, right = bandjoin(100, seed=1)
    >>> left.column_names, right.column_names
    (['ts', 'id', 'x', 'y'], ['ts', 'id', 'a', 'b', 'c', 'd'])
    >>> 1 <= pc.min(left["x"]).as_py() <= pc.max(left["x"]).as_py() <= 10000
    True
    """
    _check_rows(rows)
    _check(rate > 0, f"rate must be positive, got {rate!r}")
    rows = int(rows)
    left_rng, right_rng = np.random.default_rng(seed).spawn(2)
    ids = pa.array(np.arange(rows, dtype=np.int64))
    left = pa.table(
        {
            "ts": _poisson_ts(left_rng, rows, rate, start),
            "id": ids,
            "x": left_rng.integers(1, 10_001, rows, dtype=np.int64),
            "y": left_rng.integers(1, 10_001, rows, dtype=np.int64),
        }
    )
    right = pa.table(
        {
            "ts": _poisson_ts(right_rng, rows, rate, start),
            "id": ids,
            "a": right_rng.integers(1, 10_001, rows, dtype=np.int64),
            "b": right_rng.integers(1, 10_001, rows, dtype=np.int64),
            "c": right_rng.random(rows),
            "d": right_rng.random(rows) < 0.5,
        }
    )
    return left, right


# --------------------------------------------------------------------------- trades


def _phase_times(
    rng: np.random.Generator,
    rows: int,
    max_rate: float,
    min_phase_s: float,
    max_phase_s: float,
) -> np.ndarray:
    """Sorted times in seconds of the first ``rows`` events of the bursty process."""
    if rows == 0:
        return np.empty(0, dtype=np.float64)
    mean_phase = (min_phase_s + max_phase_s) / 2
    per_phase = max(max_rate / 2 * mean_phase, 1e-9)
    lengths: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    total = 0
    while total < rows:
        # Draw phases in batches sized for the expected need, for speed; the sequence of
        # draws is still a pure function of the arguments.
        batch = int(min(1 << 20, math.ceil((rows - total) / per_phase * 1.25) + 8))
        length = rng.uniform(min_phase_s, max_phase_s, batch)
        rate = rng.uniform(0.0, max_rate, batch)
        count = rng.poisson(rate * length)
        lengths.append(length)
        counts.append(count)
        total += int(count.sum())
    length = np.concatenate(lengths)
    count = np.concatenate(counts)
    used = int(np.searchsorted(np.cumsum(count), rows)) + 1
    length, count = length[:used], count[:used]
    begin = np.concatenate(([0.0], np.cumsum(length)[:-1]))
    # Given its count, the events of a Poisson phase are uniform order statistics, which
    # is the same process as exponential inter-arrivals cut at the phase boundary. Phases
    # do not overlap, so one global sort orders everything.
    phase = np.repeat(np.arange(used), count)
    times = np.sort(begin[phase] + rng.random(len(phase)) * length[phase])
    return times[:rows]


def trades(
    rows: int,
    seed: int = 0,
    start: int = DEFAULT_START,
    companies: int = 10,
    max_rate: float = 8000.0,
    min_phase_s: float = 5.0,
    max_phase_s: float = 30.0,
    volatility: float = 0.0005,
    ema_alpha: float = 0.01,
) -> pa.Table:
    """Stock trades for the hedge self-join (STRETCH journal, section 8.6).

    Columns: ``ts`` (int64), ``id`` (ticker symbol, string), ``price`` and ``avg_price``
    (float64), i.e. the paper's schema <tau, id, TradePrice, AveragePrice>.

    * Bursty arrivals: time is cut into consecutive phases whose length is uniform in
      ``[min_phase_s, max_phase_s]`` seconds and whose rate is uniform in ``[0, max_rate]``
      trades/s; inside a phase arrivals are Poisson (exponential inter-arrivals). A phase
      with a rate near 0 shows up as a gap without trades. The stream is shifted so its
      first trade is at ``start``.
    * ``id`` is one of ``companies`` distinct symbols (``"AAPL"``, ``"MSFT"``, ... then
      made-up four-letter ones beyond 30), picked per trade with Zipf weights ``1/k``, so
      the first symbols trade most.
    * ``price`` follows a per-company geometric random walk (log-return per trade normal
      with standard deviation ``volatility``) from a start price in [20, 400).
    * ``avg_price`` is that company's exponential moving average of its price over its own
      trades, ``avg = ema_alpha * price + (1 - ema_alpha) * previous avg``, starting at the
      first price; ``(price - avg_price) / avg_price`` is thus a small signed number.

    >>> t = trades(5000, seed=3)
    >>> t.column_names
    ['ts', 'id', 'price', 'avg_price']
    >>> sorted(set(t["id"].to_pylist()))[:3]
    ['AAPL', 'AMZN', 'GOOG']
    """
    _check_rows(rows)
    _check(companies >= 1, f"companies must be at least 1, got {companies!r}")
    _check(max_rate > 0, f"max_rate must be positive, got {max_rate!r}")
    _check(
        0 < min_phase_s <= max_phase_s,
        f"need 0 < min_phase_s <= max_phase_s, got {min_phase_s!r}, {max_phase_s!r}",
    )
    _check(volatility >= 0, f"volatility must be non-negative, got {volatility!r}")
    _check(0 < ema_alpha <= 1, f"ema_alpha must be in (0, 1], got {ema_alpha!r}")
    rows = int(rows)

    time_rng, company_rng, price_rng = np.random.default_rng(seed).spawn(3)
    ms = np.floor(_phase_times(time_rng, rows, max_rate, min_phase_s, max_phase_s) * 1000)
    ts = start + (ms - (ms[0] if rows else 0)).astype(np.int64)

    weights = 1.0 / np.arange(1, companies + 1)
    company = company_rng.choice(companies, rows, p=weights / weights.sum())

    initial = price_rng.uniform(20.0, 400.0, companies)
    steps = price_rng.normal(0.0, volatility, rows)
    # Work company by company on a stable sort, which keeps each company's trades in time
    # order, then scatter back.
    order = np.argsort(company, kind="stable")
    per_company = np.bincount(company, minlength=companies)
    bounds = np.concatenate(([0], np.cumsum(per_company)))
    price = np.empty(rows, dtype=np.float64)
    avg = np.empty(rows, dtype=np.float64)
    for c in range(companies):
        idx = order[bounds[c] : bounds[c + 1]]
        walk = initial[c] * np.exp(np.cumsum(steps[idx]))
        price[idx] = walk
        avg[idx] = _ema(walk, ema_alpha)

    return pa.table(
        {
            "ts": pa.array(ts, pa.int64()),
            "id": pa.array(_symbols(companies), pa.string()).take(pa.array(company)),
            "price": price,
            "avg_price": avg,
        }
    )


# --------------------------------------------------------------------------- output


def _check_extension(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in _EXTENSIONS:
        raise ValueError(
            f"cannot write {str(path)!r}: unknown extension {path.suffix!r}; "
            f"accepted: {', '.join(_EXTENSIONS)}"
        )
    return ext


def write_table(table: pa.Table, path: str | os.PathLike) -> None:
    """Write ``table`` to ``path`` in the format given by its extension.

    ``.jsonl``/``.json``/``.ndjson``: JSON Lines, one object per row with keys in column
    order; ``.csv``: CSV with a header; ``.parquet``: Parquet. Parent directories are
    created. Any other extension raises :class:`ValueError` before anything is written.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "sub" / "t.jsonl"
    >>> write_table(tweets(3), out)
    >>> len(out.read_text().splitlines())
    3
    """
    path = Path(path)
    ext = _check_extension(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if ext in _JSON_EXTENSIONS:
        with open(path, "wb") as f:
            # Batch by batch, so a large table never becomes one giant string.
            for batch in table.to_batches(max_chunksize=_JSON_BATCH_ROWS):
                records = batch.to_pylist()
                if records:
                    f.write(b"\n".join(orjson.dumps(r) for r in records))
                    f.write(b"\n")
    elif ext == ".csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)


# --------------------------------------------------------------------------- registry

GENERATORS: dict[str, Callable[..., pa.Table | tuple[pa.Table, ...]]] = {
    "tweets": tweets,
    "bandjoin": bandjoin,
    "trades": trades,
    "nexmark": nexmark,
}
"""Generator functions by name; each takes ``(rows, seed=..., **params)``."""

STREAMS: dict[str, tuple[str, ...]] = {"bandjoin": ("left", "right"),
                                       "nexmark": NEXMARK_STREAMS}
"""The names of the tables of the generators that return several, in order."""


def generator(name: str) -> Callable[..., pa.Table | tuple[pa.Table, ...]]:
    """The generator function called ``name``; ValueError naming the valid ones if none is."""
    if name not in GENERATORS:
        raise ValueError(
            f"unknown generator {name!r}; valid names: {', '.join(sorted(GENERATORS))}"
        )
    return GENERATORS[name]


def stream_index(name: str, stream: str | None) -> int | None:
    """Which table of generator ``name``'s result is the one called ``stream``
    (:data:`STREAMS`); None for a generator of one table, which takes ``stream=None``.
    ``bandjoin`` takes None for ``left``, as it always did; ``nexmark`` needs a name.
    ValueError naming the valid ones otherwise."""
    names = STREAMS.get(name, ())
    if stream is None and name == "bandjoin":
        stream = "left"
    if stream is None and not names:
        return None
    if stream not in names:
        valid = ", ".join(names) if names else "none (it makes one table)"
        raise ValueError(f"generator {name!r}: no stream {stream!r}; streams: {valid}")
    return names.index(stream)


def outputs(name: str, result: pa.Table | tuple[pa.Table, ...],
            out: str | os.PathLike) -> list[tuple[pa.Table, Path]]:
    """Each table of generator ``name``'s ``result`` with the path it is written to: ``out``
    for one table, ``<stem>-<stream><ext>`` next to ``out`` for each of several."""
    out = Path(out)
    if not isinstance(result, tuple):
        return [(result, out)]
    return [(table, out.with_name(f"{out.stem}-{stream}{out.suffix}"))
            for table, stream in zip(result, STREAMS[name], strict=True)]


def generate(name: str, rows: int, seed: int, out: str | os.PathLike, **params) -> list[Path]:
    """Run generator ``name`` and write its output, returning the paths written.

    Single-stream generators write to ``out``. Those of several streams write one file per
    stream, ``<stem>-<stream><ext>`` next to ``out`` (:data:`STREAMS`): ``bandjoin`` with
    ``out="data/bj.jsonl"`` writes ``data/bj-left.jsonl`` and ``data/bj-right.jsonl``;
    ``nexmark`` with ``out="nx.parquet"`` writes ``nx-persons.parquet``,
    ``nx-auctions.parquet`` and ``nx-bids.parquet``.
    ``params`` are passed to the generator as they are: convert CLI strings first.
    Unknown names, unknown parameters and unknown extensions raise :class:`ValueError`
    before any data is generated.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> [p.name for p in generate("bandjoin", 10, 0, d / "bj.csv", rate=50.0)]
    ['bj-left.csv', 'bj-right.csv']
    """
    func = generator(name)
    accepted = [p for p in inspect.signature(func).parameters if p not in ("rows", "seed")]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) for {name!r}: {', '.join(unknown)}; "
            f"accepted: {', '.join(accepted)}"
        )
    out = Path(out)
    _check_extension(out)
    targets = outputs(name, func(rows, seed=seed, **params), out)
    for table, path in targets:
        write_table(table, path)
    return [path for _, path in targets]
