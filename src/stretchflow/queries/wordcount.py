"""wordcount and paircount: STRETCH's A+ of Op. 14 (journal Appendix D, §8.1).

f_MK returns a ``Counter`` of the tuple's tokens (or token pairs), so the key set is the set of
distinct tokens and f_U adds each token's number of occurrences: the counts are occurrences,
as the Map of Alg. 11/13 plus the A of Op. 12 compute them, not tweets containing the token.
Counts of consecutive runs of tuples add up, so both give ``combine`` and slice their sliding
windows (:mod:`stretchflow.operators.slicing`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..batch import arrow_ints, arrow_mask, arrow_strings, int_numpy
from ..operators.aggregate import Aggregate


def tokens_of(text: str) -> Counter:
    """Whitespace tokens of ``text`` with their number of occurrences."""
    return Counter(text.split())


def _tokens(payloads: Any) -> tuple[Any, Any]:
    """(row of each whitespace token, the tokens as an Arrow string array) of many tweets'
    texts, tokens of a row in order. ``payloads`` is a list of payloads or an Arrow table
    with a ``text`` column (a batch's columns, issue #16). Arrow's ``utf8_split_whitespace``
    splits on exactly the code points ``str.split()`` does (tests/test_spark_columnar.py checks
    every code point); the empty tokens it adds at the ends are dropped. Raises on a payload
    ``tokens_of`` would reject (missing or non-string text), so that the caller falls back to
    the tuple-at-a-time path, which names the tuple."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(payloads, pa.Table | pa.RecordBatch):
        arr = payloads.column("text")  # KeyError without one: the tuple path names the tuple
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
            raise TypeError(f"text is {arr.type}, not a string")
        n = len(arr)
        arr = pa.concat_arrays([arr.cast(pa.string()), arrow_strings(["x"])])
    else:
        texts = [t["text"] for t in payloads]
        n = len(texts)
        texts.append("x")
        arr = pa.array(texts, pa.string())  # raises on non-strings and unencodable surrogates
    # the sentinel last string "x": Arrow 26's utf8_split_whitespace sometimes leaves the final
    # whitespace code point on the last token of the array's *last* string
    if arr.null_count:
        raise TypeError("text is None")
    lists = (pc.ascii_split_whitespace if _plain_ascii(arr) else pc.utf8_split_whitespace)(arr)
    tokens = pc.list_flatten(lists)
    rows = pc.list_parent_indices(lists)
    # Arrow keeps an empty token before leading and after trailing whitespace (and for "");
    # str.split() never yields one. The mask is computed in numpy: a Python scalar handed to
    # an Arrow kernel makes pyarrow import pandas (see stretchflow.batch.int_numpy)
    rows = int_numpy(rows)
    # the sentinel's tokens are the last ones (rows ascend): cut off, not filtered out, so a
    # batch without empty tokens (nearly every one) needs no filter, a copy of every token
    m = int(np.searchsorted(rows, n))
    rows, tokens = rows[:m], tokens.slice(0, m)
    keep = int_numpy(pc.binary_length(tokens)) > 0
    if keep.all():
        return rows, tokens
    return rows[keep], tokens.filter(arrow_mask(keep))


def _plain_ascii(arr: Any) -> bool:
    """Whether Arrow's ASCII whitespace split equals ``str.split()`` on every string of
    ``arr`` (a string array without nulls): only ASCII bytes, none of U+001C..U+001F, which
    ``str.split()`` treats as whitespace and Arrow's ASCII kernel does not (the tests check
    every ASCII code point). The ASCII kernel took two thirds of the UTF-8 one's time on
    200 000 generated tweets (40 against 60 ms, warm; about 3% of wordcount's whole run)."""
    import numpy as np

    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    return not ((data >= 0x80).any() or ((data - np.uint8(0x1C)) < 4).any())


def token_columns(payloads: Any) -> tuple[Any, Any, Any]:
    """f_MK of wordcount over many tweets at once (``Aggregate.columns``): (row of each token,
    the tokens as an Arrow string array, a count of 1 each); see :func:`_tokens`."""
    import numpy as np

    rows, tokens = _tokens(payloads)
    return rows, tokens, np.ones(len(tokens), dtype=np.int64)


def pair_columns(distance: int | None) -> Any:
    """f_MK of paircount over many tweets at once: (row, (first, second) as two Arrow string
    arrays, a count of 1 each) for the pairs W[i], W[i+d] of each tweet's tokens W, 1 <= d <=
    ``distance`` (None: every d) — :func:`pairs_of`'s pairs, by one vectorized step per d."""

    def columns(payloads: Any) -> tuple[Any, Any, Any]:
        import numpy as np

        rows, tokens = _tokens(payloads)
        n = len(rows)
        firsts, seconds, rs = [], [], []
        d = 1
        while d < n and (distance is None or d <= distance):
            i = np.flatnonzero(rows[:-d] == rows[d:])  # W[i] and W[i+d] of the same tweet
            if not len(i):
                break  # no tweet has more than d tokens: none has more than d + 1 either
            firsts.append(i), seconds.append(i + d), rs.append(rows[i])
            d += 1
        if not rs:
            empty = arrow_strings([])
            return np.zeros(0, np.int64), (empty, empty), np.zeros(0, np.int64)
        first = tokens.take(arrow_ints(np.concatenate(firsts)))
        second = tokens.take(arrow_ints(np.concatenate(seconds)))
        r = np.concatenate(rs)
        return r, (first, second), np.ones(len(r), dtype=np.int64)

    return columns


def pairs_of(text: str, distance: int | None) -> Counter:
    """Token pairs (W[i], W[j]) with 1 <= j - i <= distance (``None``: unbounded), Alg. 13."""
    w = text.split()
    n = len(w)
    span = n if distance is None else distance
    return Counter((w[i], w[j]) for i in range(n) for j in range(i + 1, min(n, i + span + 1)))


def wordcount(size: int | str = 120_000, slide: int | str = 60_000) -> Aggregate:
    """Occurrences of each whitespace token of ``text`` per window: ``{word, count}``."""
    return Aggregate(
        size=size,
        slide=slide,
        keys=lambda t: tokens_of(t["text"]),
        init=int,
        update=_add,
        output=lambda word, n: {"word": word, "count": n},
        name="wordcount",
        columns=token_columns,
        combine=_add,  # counts of two runs add up: slices (operators/slicing.py)
        output_columns=("word", "count"),  # f_O's columnar form: windows out as tables
    )


def paircount(size: int | str = 120_000, slide: int | str = 60_000,
              distance: int | None = 3) -> Aggregate:
    """Occurrences of token pairs at distance 1..``distance`` per window:
    ``{first, second, count}``."""
    if distance is not None and distance < 1:
        raise ValueError(f"paircount: distance must be >= 1 or unbounded, got {distance}")
    return Aggregate(
        size=size,
        slide=slide,
        keys=lambda t: pairs_of(t["text"], distance),
        init=int,
        update=_add,
        output=lambda pair, n: {"first": pair[0], "second": pair[1], "count": n},
        name="paircount",
        combine=_add,
        columns=pair_columns(distance),
        output_columns=("first", "second", "count"),
    )


def _add(acc: int, n: int) -> int:
    return acc + n
