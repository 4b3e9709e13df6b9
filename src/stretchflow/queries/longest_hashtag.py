"""Longest tweet per hashtag: the A+ of Op. 9 (journal Appendix D, the running example)."""

from __future__ import annotations

from ..operators.aggregate import Aggregate


def hashtags_of(t: dict) -> dict:
    """f_MK: each hashtag (a token starting with '#') mapped to the tweet's length in chars."""
    text = t["text"]
    return dict.fromkeys((w for w in text.split() if w[0] == "#"), len(text))


def longest_hashtag(size: int | str = 3_600_000, slide: int | str = 1_800_000) -> Aggregate:
    """Per hashtag and window, the length in characters of the longest text:
    ``{hashtag, chars}``."""
    return Aggregate(
        size=size,
        slide=slide,
        keys=hashtags_of,
        init=int,
        update=max,
        output=lambda tag, chars: {"hashtag": tag, "chars": chars},
        name="longest-hashtag",
        combine=max,  # the longest of two runs; 0 (init) is its identity: slices
    )
