"""ScaleJoin's comparison kernel, compiled with numba to run without the GIL.

``band_pairs`` compares each query row r with the columns ``lo[r] <= c < hi[r]`` of a stored
window and returns the (row, column) pairs within ``band`` in both attributes. It is the hot
loop of a run of tuples (journal Op. 10, L23–L24, for many tuples at once): one call covers a
run's share of the window — milliseconds of work — with the GIL released, so VSN instances
that share a ScaleJoin's state compare in parallel on standard CPython. numpy expressions
over the same columns release the GIL only per ufunc (a few microseconds each here), and two
threads then mostly wait for each other.

The first call compiles the kernel (about a second) and caches the machine code next to this
file (``cache=True``); later processes load it. numba itself (80 MB and tens of thousands of
objects) is imported only by :func:`warm_up` or the first call, so flows without a ScaleJoin
never load it; :class:`~stretchflow.queries.scalejoin.ScaleJoin` warms up when it is built,
before any run (whose collections then skip numba's objects, ``runtime/gc_hold.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np


@functools.cache
def _kernel() -> Callable[..., int]:
    from numba import njit

    return njit(nogil=True, cache=True)(_pairs)


def warm_up() -> None:
    """Imports numba and loads (or compiles) the kernel for the types runs use, now."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    band_pairs(f, f, i, i, f, f, 0.0)


def _pairs(u, v, lo, hi, qu, qv, band, out_r, out_c):  # pragma: no cover - compiled
    n = 0
    cap = out_r.shape[0]
    for r in range(qu.shape[0]):
        a = qu[r]
        b = qv[r]
        for c in range(lo[r], hi[r]):
            if abs(u[c] - a) <= band and abs(v[c] - b) <= band:
                if n < cap:
                    out_r[n] = r
                    out_c[n] = c
                n += 1
    return n


def band_pairs(u: np.ndarray, v: np.ndarray, lo: np.ndarray, hi: np.ndarray, qu: np.ndarray,
               qv: np.ndarray, band: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the pairs with |u[c] − qu[r]| <= band and |v[c] − qv[r]| <= band,
    for ``lo[r] <= c < hi[r]``; row-major order."""
    cap = 1024
    while True:
        out_r = np.empty(cap, dtype=np.int64)
        out_c = np.empty(cap, dtype=np.int64)
        n = _kernel()(u, v, lo, hi, qu, qv, float(band), out_r, out_c)
        if n <= cap:
            return out_r[:n], out_c[:n]
        cap = n  # rare: more matches than room; the second pass has exactly enough


__all__ = ["band_pairs", "warm_up"]
