"""Kernels of the columnar sliced A+ (:mod:`.columnar`): sums of int64 values per key, or per
(slice, key), over Arrow key columns — Arrow's hash dictionary for the keys, numpy for the
grouping, no Python step per row.

Why not ``Table.group_by``: it runs through ``pyarrow.acero``, whose import pulls in
``pyarrow.dataset`` and pandas — 0.35–0.6 s and ~60 MB of RSS on this machine (pyarrow 26),
most of a 200 000-tweet wordcount's whole run. ``dictionary_encode`` is a plain compute
kernel; the grouping is an argsort of int64 codes and ``np.add.reduceat`` (exact int64 sums;
integer addition does not depend on the order, so the sort need not be stable: numpy's
default sort took 1.6 ms against the stable one's 8.9 ms on 160 000 codes here).
"""

from __future__ import annotations

from typing import Any

from ..batch import arrow_ints, int_numpy


def sum_by(keys: list[Any], values: Any, slices: Any = None) -> tuple[Any, list[Any], Any]:
    """Groups rows by (slice, key) — key the tuple of the ``keys`` columns' values — and sums
    ``values`` per group. Returns ``(slice of each group or None, key columns of the groups,
    sums)``, groups in ascending slice order. ``keys``: Arrow arrays of equal length (no
    nulls); ``values``: numpy int64; ``slices``: numpy int64 or None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    if n == 0:
        return (None if slices is None else slices[:0]), [k.slice(0, 0) for k in keys], values
    code = np.zeros(n, np.int64)
    dicts = []
    for k in keys:  # the codes of the key columns, mixed radix over their dictionaries
        enc = pc.dictionary_encode(k)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.unify_dictionaries().combine_chunks() if enc.num_chunks > 1 \
                else enc.chunk(0)
        d = enc.dictionary
        code *= len(d)
        code += int_numpy(enc.indices)
        dicts.append((d, len(d)))
    radix = 1
    for _, m in dicts:
        radix *= m
    if slices is not None:
        s0 = int(slices.min())
        sid = slices - s0
        width = int(np.gcd.reduce(sid)) if sid.any() else 1
        code += (sid // width) * radix  # fits int64: slices per batch x distinct keys
    order = np.argsort(code)
    sc = code[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    sums = np.add.reduceat(np.asarray(values, np.int64)[order], starts)
    first = sc[starts]
    out_slices = None
    if slices is not None:
        out_slices = first // radix * width + s0
        first = first % radix
    cols = []
    for d, m in reversed(dicts):  # undo the mixed radix, last column first
        cols.append(d.take(arrow_ints(first % m)))
        first = first // m
    cols.reverse()
    return out_slices, cols, sums
