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

numba is the ``kernels`` extra. Without it the same pairs come from :func:`_pairs_numpy`, one
numpy comparison per query row: correct and in the same order, but holding the GIL between
ufuncs, so VSN instances of a ScaleJoin then compare mostly one at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np


@functools.cache
def _kernel() -> Callable[..., int]:
    try:
        from numba import njit
    except ImportError:  # the core install: no 'kernels' extra
        return _pairs_numpy
    return njit(nogil=True, cache=True)(_pairs)


def has_numba_kernel() -> bool:
    """Whether :func:`band_pairs` runs numba's compiled kernel (else the numpy fallback)."""
    return _kernel() is not _pairs_numpy


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


def _pairs_numpy(u, v, lo, hi, qu, qv, band, out_r, out_c) -> int:
    """:func:`_pairs` with numpy per query row, for installs without numba: the same count
    and, when they fit, the same pairs in the same row-major order."""
    n = 0
    cap = out_r.shape[0]
    for r in range(qu.shape[0]):
        a, b = lo[r], hi[r]
        if a >= b:
            continue
        c = np.flatnonzero((np.abs(u[a:b] - qu[r]) <= band)
                           & (np.abs(v[a:b] - qv[r]) <= band)) + a
        k = min(len(c), max(cap - n, 0))
        out_r[n:n + k] = r
        out_c[n:n + k] = c[:k]
        n += len(c)
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


__all__ = ["band_pairs", "has_numba_kernel", "warm_up"]
