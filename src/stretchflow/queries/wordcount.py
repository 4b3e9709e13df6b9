"""wordcount and paircount: STRETCH's A+ of Op. 14 (journal Appendix D, §8.1).

f_MK returns a ``Counter`` of the tuple's tokens (or token pairs), so the key set is the set of
distinct tokens and f_U adds each token's number of occurrences: the counts are occurrences,
as the Map of Alg. 11/13 plus the A of Op. 12 compute them, not tweets containing the token.
"""

from __future__ import annotations

from collections import Counter

from ..operators.aggregate import Aggregate


def tokens_of(text: str) -> Counter:
    """Whitespace tokens of ``text`` with their number of occurrences."""
    return Counter(text.split())


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
    )


def _add(acc: int, n: int) -> int:
    return acc + n
