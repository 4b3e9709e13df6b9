"""Kernels of the columnar sliced A+ (:mod:`.columnar`): sums of int64 values per key, or per
(slice, key), over Arrow key columns — Arrow's hash dictionary for the keys, numpy for the
grouping, no Python step per row.

Why not ``Table.group_by``: it runs through ``pyarrow.acero``, whose import pulls in
``pyarrow.dataset`` and pandas — 0.35–0.6 s and ~60 MB of RSS on this machine (pyarrow 26),
most of a 200 000-tweet wordcount's whole run. ``dictionary_encode`` is a plain compute
kernel; the grouping (:func:`_group_sums`) counts dense codes with ``np.bincount`` and sorts
sparse ones (exact int64 sums; integer addition does not depend on the order, so a sort need
not be stable: numpy's default sort took 1.6 ms against the stable one's 8.9 ms on 160 000
codes here). Counting instead of an argsort cut sum_by's time by about a third over the 13
batches of 200 000 generated tweets (``tweets(200_000, seed=1)``, size 120 s, slide 60 s:
85 against 125 ms of thread CPU time, median of 7).
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
        code += _indices(enc.indices)
        dicts.append((d, len(d)))
    radix = 1
    for _, m in dicts:
        radix *= m
    bins = radix
    if slices is not None:
        s0 = int(slices.min())
        sid = slices - s0
        width = int(np.gcd.reduce(sid)) if sid.any() else 1
        if width > 1:
            sid //= width
        code += sid * radix  # fits int64: slices per batch x distinct keys
        bins = radix * (int(sid.max()) + 1)
    first, sums = _group_sums(code, values, bins)
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


def _indices(arr: Any) -> Any:
    """Dictionary indices (int8..int64, no nulls) as a numpy view of their buffer: numpy adds
    an int32 view to int64 codes as is, where :func:`int_numpy` would cast it first."""
    import numpy as np
    import pyarrow as pa

    if arr.null_count or not pa.types.is_signed_integer(arr.type):
        return int_numpy(arr)
    dt = np.dtype(f"int{arr.type.bit_width}")
    return np.frombuffer(arr.buffers()[1], dt, len(arr), arr.offset * dt.itemsize)


def _group_sums(code: Any, values: Any, bins: int) -> tuple[Any, Any]:
    """(the distinct values of ``code`` ascending, the sum of ``values`` for each): codes in
    ``0 .. bins - 1``. Dense codes (``bins`` not far over the rows: a batch's slices times its
    distinct keys, 162 000 bins for 199 000 tokens of a wordcount batch) are counted by
    ``np.bincount``, no sort; sparse ones sorted. f_MK's values are mostly counts of one, whose
    sums are the group sizes: no values to gather. Other values are summed by ``bincount``'s
    float64 weights only while every partial sum is exact in float64 (below 2**53), else in
    int64 after an argsort (as wrapping int64 sums, what ``np.add.reduceat`` gives)."""
    import numpy as np

    n = len(code)
    values = np.asarray(values, np.int64)
    ones = bool((values == 1).all())
    exact = ones or max(int(values.max()), -int(values.min())) * n < 2**53
    if bins <= 2 * n + 4096 and exact:
        counts = np.bincount(code, minlength=bins)
        first = np.flatnonzero(counts)
        if ones:
            return first, counts[first]
        sums = np.bincount(code, weights=values, minlength=bins)[first]
        return first, sums.astype(np.int64)
    if ones:
        sc = np.sort(code)  # a plain sort is ~3x an argsort's speed, and nothing to gather
        starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        return sc[starts], np.diff(np.r_[starts, n])
    order = np.argsort(code)
    sc = code[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    return sc[starts], np.add.reduceat(values[order], starts)


#: per-position multipliers of :func:`key_groups`' string hash (fixed, so a key's group is the
#: same in every process and run — what a process channel or a restored checkpoint needs)
_MULTIPLIERS = None


def _multipliers() -> Any:
    global _MULTIPLIERS
    if _MULTIPLIERS is None:
        import numpy as np

        _MULTIPLIERS = np.random.default_rng(0x5EED).integers(
            1, 2**63 - 1, size=64, dtype=np.uint64) | np.uint64(1)
    return _MULTIPLIERS


def key_groups(keys: list[Any], n_groups: int) -> Any:
    """The key group (``0 .. n_groups - 1``) of every row of the key columns ``keys`` (Arrow
    string/binary or integer arrays without nulls, equal length), computed in numpy with no
    Python step per row: a multiplicative hash of each string's bytes (position-dependent
    odd multipliers, mixed), of each integer, combined across columns. A pure function of the
    key's value, the same in every process, unlike Python's salted ``hash`` — the columnar
    VSN state (:mod:`.columnar_shared`) assigns key groups with it on every path."""
    import numpy as np
    import pyarrow as pa

    n = len(keys[0]) if keys else 0
    h = np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        for k in keys:
            if isinstance(k, pa.ChunkedArray):
                k = k.combine_chunks()
            h = h * np.uint64(0x9E3779B97F4A7C15) + _hash_column(k)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(29)
    return (h % np.uint64(n_groups)).astype(np.int64)


def _hash_column(k: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    t = k.type
    if pa.types.is_integer(t):
        return int_numpy(k).astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        k = k.cast(pa.binary() if pa.types.is_large_binary(t) else pa.string())
    elif not (pa.types.is_string(t) or pa.types.is_binary(t)):
        raise TypeError(f"key_groups: no hash for Arrow type {t}")
    n = len(k)
    offsets = np.frombuffer(k.buffers()[1], np.int32, n + 1, k.offset * 4).astype(np.int64)
    lengths = np.diff(offsets)
    base = offsets[0]
    data = np.frombuffer(k.buffers()[2], np.uint8)[base:offsets[-1]].astype(np.uint64)
    out = lengths.astype(np.uint64) * np.uint64(0x94D049BB133111EB)
    if len(data):
        starts = offsets[:-1] - base
        pos = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
        terms = data * _multipliers()[pos % 64] + (pos // 64).astype(np.uint64)
        nz = lengths > 0
        # reduceat sums each non-empty string's bytes (an empty one keeps its length term)
        out[nz] += np.add.reduceat(terms, starts[nz])
    return out
