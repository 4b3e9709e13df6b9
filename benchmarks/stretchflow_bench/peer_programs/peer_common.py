"""What the peer programs share: their command line, paircount's pairs, counting output rows.

A program runs as ``python PROGRAM ...`` in its peer's virtualenv, so this sits beside it
(its directory is ``sys.path[0]``) and, like them, never imports stretchflow. PyFlink's
program keeps its own copies: its functions are pickled by value into Flink's Python
workers, which cannot import a module from this directory.
"""

from __future__ import annotations


def parse_args(argv: list[str], program: str,
               **extras: str) -> tuple[str, str, str, int, int, int | None, dict[str, str]]:
    """``QUERY INPUT OUTPUT size=MS slide=MS [distance=N|inf] [NAME=VALUE ...]``: (query,
    input, output, size, slide, distance, the ``extras`` given or their defaults); an unknown
    parameter exits naming ``program``."""
    query, inp, outp, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    size, slide = int(kw.pop("size")), int(kw.pop("slide"))
    raw = kw.pop("distance", "3")
    distance = None if raw == "inf" else int(raw)
    given = {k: kw.pop(k, v) for k, v in extras.items()}
    if kw:
        raise SystemExit(f"{program}: unknown parameters {sorted(kw)}")
    return query, inp, outp, size, slide, distance, given


def pairs(text: str, distance: int | None) -> list[tuple[str, str]]:
    """Token pairs (W[i], W[j]), 1 <= j - i <= distance (None: unbounded), as stretchflow's
    paircount forms them."""
    w = text.split()
    n = len(w)
    span = n if distance is None else distance
    return [(w[i], w[j]) for i in range(n) for j in range(i + 1, min(n, i + span + 1))]


def count_lines(path: str) -> int:
    """The rows a program wrote (one per line)."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)
