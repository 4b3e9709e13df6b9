"""The built-in queries against brute-force computations of their contract (DESIGN.md).

The brute force below is written from the contract alone:

* windows: instances cover ``[l, l+size)`` with ``l`` a multiple of ``slide``; a tuple with
  timestamp ``t`` falls in every instance with ``l <= t < l+size``; an instance's output
  carries ``ts = l + size``;
* ``wordcount``: occurrences of each ``text.split()`` token per instance;
* ``paircount``: occurrences of ``(W[i], W[j])`` with ``1 <= j-i <= distance`` per instance;
* ``longest-hashtag``: per token starting with ``#``, ``len(text)`` of the longest text
  containing it, per instance;
* ``scalejoin``: every (left, right) pair with ``|x-a| <= band``, ``|y-b| <= band`` and
  ``|tsL-tsR| <= window``, output at ``max(tsL, tsR) + 1``;
* ``forward``: every input tuple with ``ts + 1``.

Outputs are compared as per-timestamp multisets; the stream must be ts non-decreasing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import diff, multiset
from stretchflow.queries import QUERIES, build_query

# ------------------------------------------------------------------ brute force


def instances(t: int, size: int, slide: int) -> list[int]:
    """Left boundaries ``l`` (multiples of ``slide``) with ``l <= t < l + size``."""
    out = []
    l = (t // slide) * slide  # the largest multiple of slide <= t
    while l + size > t:
        out.append(l)
        l -= slide
    return out


def bf_wordcount(records: Iterable[dict], size: int, slide: int) -> list[dict]:
    counts: Counter = Counter()
    for r in records:
        for l in instances(r["ts"], size, slide):
            for w in r["text"].split():
                counts[(l + size, w)] += 1
    return [{"ts": ts, "word": w, "count": c} for (ts, w), c in counts.items() if c > 0]


def bf_paircount(records: Iterable[dict], size: int, slide: int,
                 distance: int | None) -> list[dict]:
    counts: Counter = Counter()
    for r in records:
        words = r["text"].split()
        pairs = [(words[i], words[j])
                 for i in range(len(words)) for j in range(i + 1, len(words))
                 if distance is None or j - i <= distance]
        for l in instances(r["ts"], size, slide):
            for a, b in pairs:
                counts[(l + size, a, b)] += 1
    return [{"ts": ts, "first": a, "second": b, "count": c}
            for (ts, a, b), c in counts.items() if c > 0]


def bf_longest_hashtag(records: Iterable[dict], size: int, slide: int) -> list[dict]:
    best: dict[tuple[int, str], int] = {}
    for r in records:
        text = r["text"]
        tags = {w for w in text.split() if w.startswith("#")}
        for l in instances(r["ts"], size, slide):
            for h in tags:
                key = (l + size, h)
                best[key] = max(best.get(key, -1), len(text))
    return [{"ts": ts, "hashtag": h, "chars": n} for (ts, h), n in best.items()]


def bf_scalejoin(left: list[dict], right: list[dict], window: int, band: int) -> list[dict]:
    out = []
    for lr in left:
        for rr in right:
            if (abs(lr["x"] - rr["a"]) <= band and abs(lr["y"] - rr["b"]) <= band
                    and abs(lr["ts"] - rr["ts"]) <= window):
                out.append({"ts": max(lr["ts"], rr["ts"]) + 1,
                            "left": lr["id"], "right": rr["id"]})
    return out


def bf_forward(*inputs: list[dict]) -> list[dict]:
    return [{**r, "ts": r["ts"] + 1} for inp in inputs for r in inp]


def bruteforce(query: str, inputs: list[list[dict]], **params) -> list[dict]:
    if query == "wordcount":
        return bf_wordcount(inputs[0], params["size"], params["slide"])
    if query == "paircount":
        return bf_paircount(inputs[0], params["size"], params["slide"], params["distance"])
    if query == "longest-hashtag":
        return bf_longest_hashtag(inputs[0], params["size"], params["slide"])
    if query == "scalejoin":
        return bf_scalejoin(inputs[0], inputs[1], params["window"], params["band"])
    if query == "forward":
        return bf_forward(*inputs)
    raise AssertionError(query)


# ------------------------------------------------------------------ running and comparing


def run_query(query: str, inputs: list[list[dict]], **params) -> list[dict]:
    flow = sf.Flow(f"test-{query}")
    streams = [flow.source(sf.io.iterable(list(inp))) for inp in inputs]
    col = build_query(query, streams, **params).collect()
    flow.run()
    return col.records()


def records_multiset(records: Iterable[dict]) -> dict[int, Counter]:
    """The contract's per-timestamp multiset of records that carry their ``ts``."""
    return multiset((r["ts"], r) for r in records)


def check_output(got: list[dict], expected: list[dict], fields: tuple[str, ...] | None):
    """Same multiset of records; ``ts`` first and non-decreasing; the expected fields."""
    for r in got:
        assert isinstance(r, dict), r
        assert next(iter(r)) == "ts", f"ts is not the first field: {r}"
        assert type(r["ts"]) is int, f"ts is not an int: {r}"
        if fields is not None:
            assert tuple(r) == fields, f"fields {tuple(r)} != {fields}"
    tss = [r["ts"] for r in got]
    bad = [(a, b) for a, b in zip(tss, tss[1:], strict=False) if b < a]
    assert not bad, f"output ts decreases: {bad[:5]}"
    g, e = records_multiset(got), records_multiset(expected)
    assert g == e, f"output differs from brute force: {diff(g, e)}"


def check(query: str, inputs: list[list[dict]], fields: tuple[str, ...] | None = None,
          **params) -> list[dict]:
    got = run_query(query, inputs, **params)
    check_output(got, bruteforce(query, inputs, **params), fields)
    return got


WC_FIELDS = ("ts", "word", "count")
PC_FIELDS = ("ts", "first", "second", "count")
LH_FIELDS = ("ts", "hashtag", "chars")
SJ_FIELDS = ("ts", "left", "right")


# ------------------------------------------------------------------ the brute force itself


def test_instances_helper():
    assert instances(0, 10, 5) == [0, -5]
    assert instances(4, 10, 5) == [0, -5]
    assert instances(5, 10, 5) == [5, 0]
    assert instances(7, 10, 3) == [6, 3, 0]
    assert instances(9, 10, 3) == [9, 6, 3, 0]
    assert instances(3, 4, 4) == [0]
    assert instances(4, 4, 4) == [4]
    assert instances(0, 1, 1) == [0]


def test_registry_defaults():
    assert set(QUERIES) >= {"wordcount", "paircount", "longest-hashtag", "scalejoin",
                            "forward"}
    assert QUERIES["wordcount"].params == {"size": 120000, "slide": 60000}
    assert QUERIES["paircount"].params == {"size": 120000, "slide": 60000, "distance": 3}
    assert QUERIES["longest-hashtag"].params == {"size": 3600000, "slide": 1800000}
    # keys: Op. 10's 1000 storage keys (DESIGN), a tuning knob that never changes the output
    assert QUERIES["scalejoin"].params == {"window": 300000, "band": 10, "keys": 1000}


# ------------------------------------------------------------------ hand-computed examples

TWEETS3 = [
    {"ts": 1, "user": "u1", "text": "a b a"},
    {"ts": 6, "user": "u2", "text": "b c"},
    {"ts": 12, "user": "u1", "text": "a"},
]


def test_wordcount_hand_example():
    got = run_query("wordcount", [TWEETS3], size=10, slide=5)
    expected = [
        {"ts": 5, "word": "a", "count": 2},
        {"ts": 5, "word": "b", "count": 1},
        {"ts": 10, "word": "a", "count": 2},
        {"ts": 10, "word": "b", "count": 2},
        {"ts": 10, "word": "c", "count": 1},
        {"ts": 15, "word": "a", "count": 1},
        {"ts": 15, "word": "b", "count": 1},
        {"ts": 15, "word": "c", "count": 1},
        {"ts": 20, "word": "a", "count": 1},
    ]
    check_output(got, expected, WC_FIELDS)
    check_output(got, bf_wordcount(TWEETS3, 10, 5), WC_FIELDS)


def test_wordcount_hand_tumbling_gap_and_empty():
    recs = [
        {"ts": 0, "user": "u", "text": ""},
        {"ts": 0, "user": "u", "text": "x  x\tx"},
        {"ts": 3, "user": "u", "text": "   "},
        {"ts": 4, "user": "u", "text": "y"},
        {"ts": 100, "user": "u", "text": "x"},  # a gap of many windows
    ]
    got = run_query("wordcount", [recs], size=4, slide=4)
    expected = [
        {"ts": 4, "word": "x", "count": 3},
        {"ts": 8, "word": "y", "count": 1},
        {"ts": 104, "word": "x", "count": 1},
    ]
    check_output(got, expected, WC_FIELDS)


def test_wordcount_defaults():
    recs = [{"ts": 0, "user": "u", "text": "a"}, {"ts": 60000, "user": "u", "text": "a"}]
    got = run_query("wordcount", [recs])
    expected = [
        {"ts": 60000, "word": "a", "count": 1},
        {"ts": 120000, "word": "a", "count": 2},
        {"ts": 180000, "word": "a", "count": 1},
    ]
    check_output(got, expected, WC_FIELDS)


@pytest.mark.parametrize(
    ("distance", "pairs"),
    [
        (1, {("a", "b"): 1, ("b", "c"): 1, ("c", "a"): 1}),
        (2, {("a", "b"): 1, ("b", "c"): 1, ("c", "a"): 1, ("a", "c"): 1, ("b", "a"): 1}),
        (3, {("a", "b"): 1, ("b", "c"): 1, ("c", "a"): 1, ("a", "c"): 1, ("b", "a"): 1,
             ("a", "a"): 1}),
        (None, {("a", "b"): 1, ("b", "c"): 1, ("c", "a"): 1, ("a", "c"): 1, ("b", "a"): 1,
                ("a", "a"): 1}),
    ],
)
def test_paircount_hand_example(distance, pairs):
    recs = [{"ts": 3, "user": "u", "text": "a b c a"}, {"ts": 4, "user": "u", "text": "z"}]
    got = run_query("paircount", [recs], size=10, slide=10, distance=distance)
    expected = [{"ts": 10, "first": a, "second": b, "count": c} for (a, b), c in pairs.items()]
    check_output(got, expected, PC_FIELDS)


def test_paircount_hand_repeats_and_windows():
    recs = [
        {"ts": 2, "user": "u", "text": "a a a"},
        {"ts": 7, "user": "u", "text": "a a"},
    ]
    got = run_query("paircount", [recs], size=10, slide=5, distance=3)
    expected = [
        {"ts": 5, "first": "a", "second": "a", "count": 3},
        {"ts": 10, "first": "a", "second": "a", "count": 4},
        {"ts": 15, "first": "a", "second": "a", "count": 1},
    ]
    check_output(got, expected, PC_FIELDS)


def test_longest_hashtag_hand_example():
    recs = [
        {"ts": 2, "user": "u", "text": "#x hi #y"},  # 8 chars
        {"ts": 4, "user": "u", "text": "#x #x"},  # 5 chars
        {"ts": 7, "user": "u", "text": "#y longer text"},  # 14 chars
        {"ts": 8, "user": "u", "text": "no tags at all, none"},  # 20 chars
    ]
    got = run_query("longest-hashtag", [recs], size=10, slide=5)
    expected = [
        {"ts": 5, "hashtag": "#x", "chars": 8},
        {"ts": 5, "hashtag": "#y", "chars": 8},
        {"ts": 10, "hashtag": "#x", "chars": 8},
        {"ts": 10, "hashtag": "#y", "chars": 14},
        {"ts": 15, "hashtag": "#y", "chars": 14},
    ]
    check_output(got, expected, LH_FIELDS)


def test_longest_hashtag_counts_characters_not_bytes():
    recs = [{"ts": 0, "user": "u", "text": "#é ééé"}]  # 6 characters, 10 UTF-8 bytes
    got = run_query("longest-hashtag", [recs], size=5, slide=5)
    check_output(got, [{"ts": 5, "hashtag": "#é", "chars": 6}], LH_FIELDS)


def test_longest_hashtag_bare_hash_is_a_hashtag():
    # "#" is a token starting with "#": the contract makes it a hashtag.
    recs = [{"ts": 0, "user": "u", "text": "# a"}]
    got = run_query("longest-hashtag", [recs], size=5, slide=5)
    check_output(got, [{"ts": 5, "hashtag": "#", "chars": 3}], LH_FIELDS)


def test_scalejoin_hand_example():
    left = [
        {"ts": 0, "id": 1, "x": 10, "y": 10},
        {"ts": 4, "id": 2, "x": 20, "y": 20},
    ]
    right = [
        {"ts": 0, "id": 100, "a": 11, "b": 9, "c": 0, "d": 0},
        {"ts": 5, "id": 101, "a": 21, "b": 22, "c": 0, "d": 0},
        {"ts": 5, "id": 103, "a": 10, "b": 10, "c": 0, "d": 0},  # |dt| == window: matches
        {"ts": 10, "id": 102, "a": 10, "b": 10, "c": 0, "d": 0},  # too late for id 1
    ]
    got = run_query("scalejoin", [left, right], window=5, band=2)
    expected = [
        {"ts": 1, "left": 1, "right": 100},
        {"ts": 6, "left": 2, "right": 101},
        {"ts": 6, "left": 1, "right": 103},
    ]
    check_output(got, expected, SJ_FIELDS)


def test_scalejoin_hand_left_after_right():
    left = [{"ts": 7, "id": "L", "x": 0, "y": 0}]
    right = [
        {"ts": 1, "id": "R1", "a": 0, "b": 0, "c": 1, "d": 2},  # dt = 6 > window
        {"ts": 2, "id": "R2", "a": 1, "b": -1, "c": 1, "d": 2},  # dt = 5, band 1
        {"ts": 7, "id": "R3", "a": 2, "b": 0, "c": 1, "d": 2},  # |x-a| = 2 > band
    ]
    got = run_query("scalejoin", [left, right], window=5, band=1)
    check_output(got, [{"ts": 8, "left": "L", "right": "R2"}], SJ_FIELDS)


def test_forward_hand_example():
    a = [{"ts": 0, "v": "a"}, {"ts": 2, "v": "b"}]
    b = [{"ts": 1, "v": "c"}, {"ts": 2, "v": "d"}]
    got = run_query("forward", [a, b])
    expected = [{"ts": 1, "v": "a"}, {"ts": 2, "v": "c"}, {"ts": 3, "v": "b"},
                {"ts": 3, "v": "d"}]
    check_output(got, expected, None)
    assert [r["ts"] for r in got] == [1, 2, 3, 3]


# ------------------------------------------------------------------ strategies

WORDS = ["a", "b", "c", "aa", "B", "é"]
TAG_WORDS = ["#a", "#b", "#", "#é", "x", "yy", "ab#"]
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "\xa0"]


@st.composite
def texts(draw, vocab=WORDS, max_words=6):
    n = draw(st.integers(0, max_words))
    words = [draw(st.sampled_from(vocab)) for _ in range(n)]
    lead = draw(st.sampled_from(["", "", "", " ", "\t "]))
    trail = draw(st.sampled_from(["", "", "", " ", "\n"]))
    parts = [lead]
    for i, w in enumerate(words):
        if i:
            parts.append(draw(st.sampled_from(SEPARATORS)))
        parts.append(w)
    parts.append(trail)
    return "".join(parts)


@st.composite
def timestamps(draw, n: int, size: int):
    """``n`` sorted timestamps from 0, a small or an epoch-like start: equal ones, small
    steps, gaps longer than the window."""
    t = draw(st.sampled_from([0, 0, 0, 1, 2, 3, 7, 1_700_000_000_000]))
    out = []
    for _ in range(n):
        out.append(t)
        step = draw(st.one_of(
            st.just(0),
            st.integers(0, 3),
            st.integers(1, max(1, size)),
            st.integers(size + 1, 3 * size + 5),  # a gap longer than the window
        ))
        t += step
    return out


@st.composite
def size_slide(draw):
    size = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["tumbling", "divides", "any"]))
    if kind == "tumbling":
        slide = size
    elif kind == "divides":
        slide = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    else:
        slide = draw(st.integers(1, size))
    return size, slide


@st.composite
def tweet_streams(draw, vocab=WORDS, max_len=30):
    size, slide = draw(size_slide())
    n = draw(st.integers(0, max_len))
    tss = draw(timestamps(n, size))
    users = ["u1", "u2", "u3"]
    recs = [{"ts": t, "user": draw(st.sampled_from(users)), "text": draw(texts(vocab))}
            for t in tss]
    return recs, size, slide


FAST = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MEDIUM = settings(max_examples=80, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------ properties


@FAST
@given(tweet_streams())
def test_wordcount_matches_bruteforce(case):
    recs, size, slide = case
    check("wordcount", [recs], WC_FIELDS, size=size, slide=slide)


@MEDIUM
@given(tweet_streams(), st.sampled_from([1, 2, 3, None]))
def test_paircount_matches_bruteforce(case, distance):
    recs, size, slide = case
    check("paircount", [recs], PC_FIELDS, size=size, slide=slide, distance=distance)


@FAST
@given(tweet_streams(vocab=TAG_WORDS))
def test_longest_hashtag_matches_bruteforce(case):
    recs, size, slide = case
    check("longest-hashtag", [recs], LH_FIELDS, size=size, slide=slide)


@st.composite
def join_inputs(draw, max_per_side=40):
    window = draw(st.integers(0, 20))
    band = draw(st.integers(0, 8))
    n = draw(st.integers(0, 2 * max_per_side))
    tss = draw(timestamps(n, max(window, 1)))
    left, right = [], []
    attr = st.integers(1, 30)
    for t in tss:
        side = draw(st.booleans())
        if side and len(left) < max_per_side:
            left.append({"ts": t, "id": len(left), "x": draw(attr), "y": draw(attr)})
        elif len(right) < max_per_side:
            right.append({"ts": t, "id": 1000 + len(right), "a": draw(attr), "b": draw(attr),
                          "c": draw(st.integers(0, 3)), "d": draw(st.integers(0, 3))})
    return left, right, window, band


@SLOW
@given(join_inputs())
def test_scalejoin_matches_bruteforce(case):
    left, right, window, band = case
    check("scalejoin", [left, right], SJ_FIELDS, window=window, band=band)


@st.composite
def forward_inputs(draw):
    k = draw(st.integers(2, 3))
    inputs = []
    for i in range(k):
        n = draw(st.integers(0, 20))
        tss = draw(timestamps(n, 5))
        inputs.append([{"ts": t, "src": i, "seq": j, "v": draw(st.integers(0, 2))}
                       for j, t in enumerate(tss)])
    return inputs


@FAST
@given(forward_inputs())
def test_forward_matches_bruteforce(inputs):
    got = check("forward", inputs, None)
    assert len(got) == sum(len(i) for i in inputs)
    for r in got:
        assert tuple(r) == ("ts", "src", "seq", "v")
    # Each input's tuples keep their relative order (they are already ts-sorted and a
    # merge never reorders within an input) -- only checked up to equal timestamps.
    for i, inp in enumerate(inputs):
        mine = [r["ts"] for r in got if r["src"] == i]
        assert mine == [r["ts"] + 1 for r in inp]
