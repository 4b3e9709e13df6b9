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


class Encoding:
    """Rows as dense group codes: ``code[r]`` in ``0 .. bins - 1`` numbers the (slice, key)
    of row ``r`` — slice-major, then the key columns in mixed radix — so ascending codes are
    ascending slices. :func:`decode` turns codes back into slices and key columns."""

    __slots__ = ("code", "bins", "radix", "parts", "s0", "width")

    def __init__(self, code: Any, bins: int, radix: int, parts: list[tuple[Any, ...]],
                 s0: int, width: int):
        self.code, self.bins, self.radix, self.parts = code, bins, radix, parts
        self.s0, self.width = s0, width


def encode(keys: list[Any], n: int, slices: Any = None) -> Encoding:
    """The group codes of ``n`` rows by (slice, key): ``keys`` Arrow arrays of length ``n``
    without nulls (none: one key), ``slices`` numpy int64 or None. An integer column whose
    values span a range not far over the rows is coded by offset (no hashing); any other by
    Arrow's dictionary encoding."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    code = np.zeros(n, np.int64)
    parts: list[tuple[Any, ...]] = []
    for k in keys:  # the codes of the key columns, mixed radix over their dictionaries
        if isinstance(k, pa.ChunkedArray):
            k = k.combine_chunks()
        if pa.types.is_integer(k.type) and n:
            v = int_numpy(k)
            lo, hi = int(v.min()), int(v.max())
            if hi - lo < 2 * n + 4096:
                m = hi - lo + 1
                code *= m
                code += v - lo
                parts.append(("range", lo, m, k.type))
                continue
        enc = pc.dictionary_encode(k)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.unify_dictionaries().combine_chunks() if enc.num_chunks > 1 \
                else enc.chunk(0)
        d = enc.dictionary
        code *= len(d)
        code += _indices(enc.indices)
        parts.append(("dict", d, len(d)))
    radix = 1
    for p in parts:
        radix *= p[2]
    bins, s0, width = radix, 0, 1
    if slices is not None and n:
        s0 = int(slices.min())
        sid = slices - s0
        width = int(np.gcd.reduce(sid)) if sid.any() else 1
        if width > 1:
            sid //= width
        code += sid * radix  # fits int64: slices per batch x distinct keys
        bins = radix * (int(sid.max()) + 1)
    return Encoding(code, max(bins, 1), max(radix, 1), parts, s0, width)


def _indices(arr: Any) -> Any:
    """Dictionary indices (int8..int64, no nulls) as a numpy view of their buffer: numpy adds
    an int32 view to int64 codes as is, where :func:`int_numpy` would cast it first."""
    import numpy as np
    import pyarrow as pa

    if arr.null_count or not pa.types.is_signed_integer(arr.type):
        return int_numpy(arr)
    dt = np.dtype(f"int{arr.type.bit_width}")
    return np.frombuffer(arr.buffers()[1], dt, len(arr), arr.offset * dt.itemsize)


def decode(enc: Encoding, first: Any, sliced: bool) -> tuple[Any, list[Any]]:
    """The slices (None unless ``sliced``) and key columns of the groups ``first`` (codes)."""
    import pyarrow as pa

    out_slices = None
    if sliced:
        out_slices = first // enc.radix * enc.width + enc.s0
        first = first % enc.radix
    cols = []
    for p in reversed(enc.parts):  # undo the mixed radix, last column first
        m = p[2]
        if p[0] == "range":
            c = arrow_ints(first % m + p[1])
            cols.append(c if p[3] == pa.int64() else c.cast(p[3]))
        else:
            cols.append(p[1].take(arrow_ints(first % m)))
        first = first // m
    cols.reverse()
    return out_slices, cols


def sum_by(keys: list[Any], values: Any, slices: Any = None) -> tuple[Any, list[Any], Any]:
    """Groups rows by (slice, key) — key the tuple of the ``keys`` columns' values — and sums
    ``values`` per group. Returns ``(slice of each group or None, key columns of the groups,
    sums)``, groups in ascending slice order. ``keys``: Arrow arrays of equal length (no
    nulls); ``values``: numpy int64 (sums exact, or OverflowError) or float64 (added in row
    order); ``slices``: numpy int64 or None."""
    n = len(values)
    if n == 0:
        return (None if slices is None else slices[:0]), [k.slice(0, 0) for k in keys], values
    enc = encode(keys, n, slices)
    first, sums = group_sums(enc.code, values, enc.bins)
    sl, cols = decode(enc, first, slices is not None)
    return sl, cols, sums


def group_sums(code: Any, values: Any, bins: int) -> tuple[Any, Any]:
    """(the distinct values of ``code`` ascending, the sum of ``values`` for each): codes in
    ``0 .. bins - 1``. Dense codes (``bins`` not far over the rows: a batch's slices times its
    distinct keys, 162 000 bins for 199 000 tokens of a wordcount batch) are counted by
    ``np.bincount``, no sort; sparse ones sorted. f_MK's values are mostly counts of one, whose
    sums are the group sizes: no values to gather.

    Float values are added in row order within each group (``bincount``'s weights add
    sequentially from 0.0; ``add.reduceat`` would add pairwise), so a group's sum is the fold
    a Python loop over the rows gives. Integer sums are exact: summed by ``bincount``'s float64
    weights while every partial sum is exact in float64 (below 2**53), else in int64, whose
    wrap-around arithmetic gives the exact sum whenever that sum is in range; a sum that may
    not be (a float64 estimate beyond 2**62) raises OverflowError, never wraps."""
    import numpy as np

    n = len(code)
    if values.dtype.kind == "f":
        if bins <= 2 * n + 4096:
            counts = np.bincount(code, minlength=bins)
            first = np.flatnonzero(counts)
            return first, np.bincount(code, weights=values, minlength=bins)[first]
        # not add.reduceat: it adds pairwise, not in row order
        first, inv = np.unique(code, return_inverse=True)
        return first, np.bincount(inv.reshape(-1), weights=values, minlength=len(first))
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
    vs = values[order]
    sums = np.add.reduceat(vs, starts)  # int64 wraps: exact if the true sum is in range
    if not exact:
        approx = np.add.reduceat(vs.astype(np.float64), starts)
        if np.abs(approx).max() >= 2.0**62:
            raise OverflowError("a sum may exceed int64")
    return sc[starts], sums


def group_extreme(code: Any, values: Any, bins: int, largest: bool) -> tuple[Any, Any]:
    """(the distinct codes ascending, each group's least — ``largest``: greatest — value):
    ``np.minimum.at``/``np.maximum.at`` over dense codes (about 100x a stable sort and
    ``reduceat`` here, 16 384 rows), compacted to the codes present. Callers keep NaN and
    -0.0 out (numpy's minimum does not keep the first of two equal values, Python's min
    does)."""
    import numpy as np

    if bins > 2 * len(code) + 4096:  # sparse codes: dense ones first
        first, inv = np.unique(code, return_inverse=True)
        _, vals = group_extreme(inv, values, len(first), largest)
        return first, vals
    counts = np.bincount(code, minlength=bins)
    first = np.flatnonzero(counts)
    if values.dtype.kind == "f":
        fill = -np.inf if largest else np.inf
    else:
        info = np.iinfo(values.dtype)
        fill = info.min if largest else info.max
    out = np.full(bins, fill, values.dtype)
    (np.maximum if largest else np.minimum).at(out, code, values)
    return first, out[first]


def group_index(code: Any, bins: int) -> tuple[Any, Any]:
    """(the distinct codes ascending, each row's group: its index among them)."""
    import numpy as np

    if bins <= 2 * len(code) + 4096:
        counts = np.bincount(code, minlength=bins)
        first = np.flatnonzero(counts)
        pos = np.zeros(bins, np.int64)
        pos[first] = np.arange(len(first))
        return first, pos[code]
    first, inv = np.unique(code, return_inverse=True)
    return first, inv.astype(np.int64)


def top_rows(group: Any, values: Any, k: int, largest: bool) -> Any:
    """The rows (ascending indices) whose value ranks among the ``k`` best of their group,
    ties included: rank = 1 + the rows of the group with a strictly better value."""
    import numpy as np

    n = len(group)
    if n == 0:
        return np.zeros(0, np.int64)
    if k == 1:  # arg_max/arg_min: the rows equal to their group's best, no sort
        _, best = group_extreme(group, values, int(group.max()) + 1, largest)
        return np.flatnonzero(values == best[group])
    if largest:  # best first: descending values, without negating int64's minimum
        key = ~values if values.dtype.kind in "iu" else -values
    else:
        key = values
    order = np.lexsort((key, group))
    g, v = group[order], key[order]
    new_group = np.r_[True, g[1:] != g[:-1]]
    new_value = new_group | np.r_[True, v[1:] != v[:-1]]
    idx = np.arange(n)
    group_start = np.maximum.accumulate(np.where(new_group, idx, 0))
    value_start = np.maximum.accumulate(np.where(new_value, idx, 0))
    rank = value_start - group_start + 1  # 1 + rows of the group before this value
    return np.sort(order[rank <= k])


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
    if pa.types.is_boolean(t):  # as 0 and 1, the ints Python's True and False equal
        k, t = k.cast(pa.int64()), pa.int64()
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
