"""Columnar forms of an A+: f_MK, f_U, combine and f_O on whole Arrow batches (issues #16, #31).

A form says how the columnar instances (:mod:`.columnar`, :mod:`.columnar_shared`) turn a batch
into *partials* and partials into a window's output table. A partial is an Arrow table of key
columns ``k0 .. k{m-1}`` and one state column ``v``, one row per (key, accumulated run) — the
state of the tuple path's accumulator for those rows, as columns:

==========  ==================================================================================
count, sum  ``v`` the count / sum (int64, or float64 for float values)
min, max    ``v`` the least / greatest value (int64 or float64)
mean        ``v`` a struct ``{s: sum, n: count}``
top_k       ``v`` a struct ``{x: value, r: the row's own columns}``; a partial keeps every row
            of rank <= k of its key (not one row per key)
==========  ==================================================================================

``explode(batch)`` (f_MK's columnar form) gives each row's keys and raw state, or None to
refuse the batch (the caller then runs it tuple at a time, which names the tuple if it
fails); ``fold(keys, v, slices)`` groups rows by (slice, key) *in row order* and combines their
states (Hazelcast Jet's accumulate and combine steps, on columns); ``output`` is f_O's columnar
form. Every form folds any concatenation of partials in time order to the partial of the whole
run, so a slice may be folded per batch, per 16 batches or once at its window, with the same
result — except float sums and means, whose additions depend on the order: their rows stay
raw (``pregroup`` False) until a fold over all of a slice's rows in time order, which adds
exactly as the tuple path's sequential fold (``0 + x1 + x2 ...``; numpy's ``bincount``
adds its weights in row order).

:class:`SumForm` is the hand-written one (wordcount, paircount: ``Aggregate.columns``,
``output_columns``, int64 sums); :class:`DeclForm` is derived from a declarative aggregate's
key expressions and :class:`~.column_agg.ColumnAgg`.

Where the columnar path could differ from the tuple path it refuses the batch. The tuple path
sees each tuple's payload as its source parsed it; a batch's table may say less: a JSON Lines
table has null both for a null and a missing field (the tuple path fails on a missing one), and
float64 for a column mixing ints and floats (``3`` and ``3.5``: the tuple path sums ``3`` as an
int). So unless the payloads are the table's own rows (Parquet, an O+'s output table), a batch
whose key or value columns hold nulls has its null rows checked against the payloads, float
columns feeding sum, min, max or top_k have their payloads' types checked, and top_k (whose
output is the rows) checks every column so and takes only scalar ones. Float keys are
refused (Python's dict merges 0.0 with -0.0 and keeps NaNs apart, Arrow does the opposite), so
are NaN and -0.0 values of min, max and top_k (numpy's minimum keeps the second of two equal
values, Python's ``min`` the first), non-numeric values, and a key or value type that differs
from the first batch's. Integer sums never wrap: a batch or window whose sum may exceed int64
goes tuple at a time, with Python's integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..batch import arrow_ints, int_numpy
from ..expr import Expr
from .columnar_kernels import (
    decode,
    encode,
    group_extreme,
    group_index,
    group_sums,
    sum_by,
    top_rows,
)

if TYPE_CHECKING:
    from ..batch import Batch
    from .aggregate import Aggregate


def form_of(op: Any) -> SumForm | DeclForm | None:
    """The columnar form of ``op``, or None when it has none: a declarative aggregate with key
    expressions (:class:`DeclForm`), or one with hand-written ``columns``, ``output_columns``
    and ``combine`` (:class:`SumForm`); WT multi either way."""
    if getattr(op, "WT", None) != "multi":
        return None
    agg = getattr(op, "column_agg", None)
    if agg is not None and getattr(op, "key_exprs", None) is not None:
        return DeclForm(op)
    if (getattr(op, "columns", None) is not None and getattr(op, "output_columns", None)
            is not None and getattr(op, "combine", None) is not None):
        return SumForm(op)
    return None


def order_free(op: Any) -> bool:
    """Whether ``op``'s output is the same multiset whatever the order of its input's rows
    within a timestamp: a declarative count, min, max or top_k (ties included), not a sum
    or mean (floats add in row order) nor a hand-written form."""
    form = form_of(op)
    return isinstance(form, DeclForm) and form.kind in ("count", "min", "max", "top_k")


class Refused(Exception):
    """The columnar form cannot take this batch exactly: it goes tuple at a time."""


# -- numpy <-> Arrow without pandas (pa.array and to_numpy import it on first use) ------------
def num_numpy(arr: Any) -> Any:
    """A numeric Arrow array without nulls as numpy int64 or float64."""
    import numpy as np
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_floating(t):
        if t != pa.float64():
            arr = arr.cast(pa.float64())
        if not len(arr):
            return np.zeros(0, np.float64)
        return np.frombuffer(arr.buffers()[1], np.float64, len(arr), arr.offset * 8)
    return int_numpy(arr)


def arrow_num(values: Any) -> Any:
    """A numpy int64 or float64 array as an Arrow array sharing its memory."""
    import numpy as np
    import pyarrow as pa

    if values.dtype.kind == "f":
        a = np.ascontiguousarray(values, dtype=np.float64)
        return pa.Array.from_buffers(pa.float64(), len(a), [None, pa.py_buffer(a)])
    return arrow_ints(values)


def partial(keys: Sequence[Any], v: Any) -> Any:
    """A partial table: key columns ``k0 ..`` and the state ``v``."""
    import pyarrow as pa

    return pa.Table.from_arrays([*keys, v], names=[*(f"k{i}" for i in range(len(keys))), "v"])


def key_cols(part: Any) -> list[Any]:
    """A partial's key columns (all but the last, ``v``), each one plain array."""
    return [plain_column(c) for c in part.columns[:-1]]


def state_of(part: Any) -> Any:
    """A partial's state column ``v`` (its last), one plain array."""
    return plain_column(part.column(part.num_columns - 1))


def plain_column(col: Any) -> Any:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


# -- the hand-written form: int64 sums --------------------------------------------------------
def columns_of(op: Aggregate, batch: Batch) -> tuple[Any, Any, Any] | None:
    """f_MK's columnar form (``op.columns``) over ``batch``'s table (or its payloads), None if
    it refuses the batch or gives no (rows, keys, values) triple (the tuple path then names
    the tuple it fails on)."""
    src: Any = batch.table if batch.has_table else None
    try:
        rows, keys, values = op.columns(src if src is not None else batch.payloads)
    except Exception:  # noqa: BLE001 - the tuple path reports the tuple it fails on
        return None
    return rows, keys, values


def key_arrays(keys: Any) -> list[Any]:
    """f_MK's columnar keys as a list of Arrow arrays: one, or one per component of tuple
    keys (paircount's), each a plain (not chunked) array."""
    import pyarrow as pa

    if isinstance(keys, tuple) or (isinstance(keys, list) and keys and all(
            isinstance(a, pa.Array | pa.ChunkedArray) for a in keys)):
        arrays = list(keys)  # one array per key column (a columnar form's list of them)
    else:
        arrays = [keys]
    arrays = [a if isinstance(a, pa.Array | pa.ChunkedArray) else pa.array(a) for a in arrays]
    return [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]



class SumForm:
    """``Aggregate.columns`` (rows, keys, int64 values that f_U adds) and ``output_columns``:
    the wordcount and paircount form of issue #16."""

    kind = "sum"

    def __init__(self, op: Aggregate):
        self.op = op

    def explode(self, batch: Batch) -> tuple[Any, list[Any], Any] | None:
        cols = columns_of(self.op, batch)
        if cols is None:
            return None
        rows, keys, values = cols
        import numpy as np

        return (np.asarray(rows, dtype=np.int64), key_arrays(keys),
                arrow_ints(np.asarray(values, dtype=np.int64)))

    def pregroup(self, v: Any) -> bool:
        return True

    def fold(self, keys: list[Any], v: Any, slices: Any = None) -> tuple[Any, list[Any], Any]:
        sl, ks, sums = sum_by(keys, int_numpy(v), slices)
        return sl, ks, arrow_ints(sums)

    def from_accs(self, accs: list[Any], like: Any = None) -> Any:
        if any(type(a) is not int for a in accs):
            raise TypeError("not int64 accumulators")
        import numpy as np

        return arrow_ints(np.array(accs, dtype=np.int64))

    def to_accs(self, v: Any) -> list[Any]:
        return v.to_pylist()

    def output(self, keys: list[Any], v: Any) -> Any:
        return self.output_part(partial(keys, v))

    def output_part(self, part: Any) -> Any:
        """f_O's columnar form of a folded partial (``output_columns`` naming its columns)."""
        return self.op.output_table([c for c in part.column_names if c != "v"], part)


# -- the declarative form ---------------------------------------------------------------------
class DeclForm:
    """The columnar form of a declarative aggregate (``Aggregate.column_agg`` with key
    expressions): see the module doc."""

    def __init__(self, op: Aggregate):
        agg = op.column_agg
        assert agg is not None and op.key_exprs is not None
        self.op, self.agg = op, agg
        self.kind = agg.kind
        self.key_exprs: tuple[Expr, ...] = op.key_exprs
        self.names = op.key_names

    # -- f_MK: a batch into keys and raw states -------------------------------------------------
    def explode(self, batch: Batch) -> tuple[Any, list[Any], Any] | None:
        """(rows kept — None: all — , key arrays, raw state ``v`` of the kept rows) of
        ``batch``, or None to refuse it (see the module doc)."""
        import pyarrow as pa

        table = batch.table
        if table is None or not table.num_rows:
            return None
        try:
            return self._explode(batch, table)
        except (Refused, pa.ArrowException, ArithmeticError, TypeError, ValueError,
                KeyError):
            return None

    def _explode(self, batch: Batch, table: Any) -> tuple[Any, list[Any], Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n, agg, kind = table.num_rows, self.agg, self.kind
        rows_table = table
        if any(pa.types.is_null(t) for t in table.schema.types):
            # a column null in every row of this batch has Arrow's null type, which numeric
            # kernels refuse: as int64 nulls it gives the nulls the tuple path's None gives
            table = pa.Table.from_arrays(
                [pa.nulls(n, pa.int64()) if pa.types.is_null(c.type) else c
                 for c in table.columns], names=table.column_names)
        keys = [e.arrow(table) for e in self.key_exprs] if self.key_exprs \
            else [arrow_ints(np.zeros(n, np.int64))]  # keys=None: the one key 0
        for k in keys:
            t = k.type
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                    or pa.types.is_boolean(t) or pa.types.is_null(t)):
                raise Refused(f"key type {t}")
        x = agg.of.arrow(table) if agg.of is not None else None
        if x is not None:
            t = x.type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):
                raise Refused(f"value type {t}")
        faithful = _faithful(batch)
        cols = [*keys] + ([x] if x is not None else [])
        rows = None
        if any(c.null_count for c in cols):
            valid = pc.is_valid(cols[0])
            for c in cols[1:]:
                valid = pc.and_(valid, pc.is_valid(c))
            mask = _bools(valid)
            if not faithful:
                _check_present(batch, table, self._source_columns(), ~mask)
            rows = np.flatnonzero(mask)
            keys = [k.take(arrow_ints(rows)) for k in keys]
            if x is not None:
                x = x.take(arrow_ints(rows))
        if x is not None and pa.types.is_floating(x.type):
            if kind in ("min", "max", "top_k"):
                xs = num_numpy(x)
                if np.isnan(xs).any() or (np.signbit(xs) & (xs == 0)).any():
                    raise Refused("NaN or -0.0")
            if not faithful and kind in ("sum", "min", "max", "top_k") and \
                    not surely_float(agg.of):  # type: ignore[arg-type]
                _check_floats(batch, table, agg.of.columns(), rows)  # type: ignore[union-attr]
        m = n if rows is None else len(rows)
        if kind == "count":
            v = arrow_ints(np.ones(m, np.int64))
        elif kind in ("sum", "min", "max"):
            v = _num(x)
        elif kind == "mean":
            v = pa.StructArray.from_arrays([_num(x), arrow_ints(np.ones(m, np.int64))],
                                           names=["s", "n"])
        else:  # top_k: the rows themselves travel with their values
            if not faithful:
                _check_rows(batch, rows_table)
            rt = rows_table if rows is None else rows_table.take(arrow_ints(rows))
            r = pa.StructArray.from_arrays([c.combine_chunks() for c in rt.columns],
                                           names=rt.column_names)
            v = pa.StructArray.from_arrays([_num(x), r], names=["x", "r"])
        keys = [_plain_key(k) for k in keys]
        return rows, keys, v

    def _source_columns(self) -> set[str]:
        out: set[str] = set()
        for e in self.key_exprs:
            out |= e.columns()
        if self.agg.of is not None:
            out |= self.agg.of.columns()
        return out

    # -- f_U and combine: fold rows by (slice, key) ----------------------------------------------
    def pregroup(self, v: Any) -> bool:
        """Whether a run's rows may be folded before the rest of their slice is in: always but
        for float sums and means (additions in the tuple path's order, module doc)."""
        import pyarrow as pa

        if self.kind in ("sum", "mean"):
            t = v.type.field("s").type if self.kind == "mean" else v.type
            return not pa.types.is_floating(t)
        return True

    def fold(self, keys: list[Any], v: Any, slices: Any = None) -> tuple[Any, list[Any], Any]:
        """Rows grouped by (slice, key), ascending, states combined in row order; top_k keeps
        the rows of rank <= k per group instead (in row order)."""
        import pyarrow as pa

        n = len(v)
        if n == 0:
            return (None if slices is None else slices[:0]), [k.slice(0, 0) for k in keys], v
        enc = encode(keys, n, slices)
        kind = self.kind
        if kind == "top_k":
            _, inv = group_index(enc.code, enc.bins)
            rows = top_rows(inv, num_numpy(v.field("x")), self.agg.k, self.agg.largest)
            take = arrow_ints(rows)
            return (None if slices is None else slices[rows]), [k.take(take) for k in keys], \
                v.take(take)
        if kind in ("count", "sum"):
            first, out = group_sums(enc.code, num_numpy(v), enc.bins)
            state = arrow_num(out)
        elif kind in ("min", "max"):
            first, out = group_extreme(enc.code, num_numpy(v), enc.bins, kind == "max")
            state = arrow_num(out)
        else:  # mean
            first, s = group_sums(enc.code, num_numpy(v.field("s")), enc.bins)
            _, c = group_sums(enc.code, int_numpy(v.field("n")), enc.bins)
            state = pa.StructArray.from_arrays([arrow_num(s), arrow_ints(c)], names=["s", "n"])
        sl, ks = decode(enc, first, slices is not None)
        return sl, [k if k.type == o.type else k.cast(o.type) for k, o in zip(ks, keys,
                                                                            strict=True)], state

    # -- the tuple path's accumulators <-> states -----------------------------------------------
    def from_accs(self, accs: list[Any], like: Any = None) -> Any:
        """States of the tuple path's accumulators (a dict slice's), typed as ``like`` (a
        state array of this run) when given; TypeError when they do not fit exactly (then the
        window is combined in Python)."""
        import pyarrow as pa

        kind = self.kind
        if kind == "top_k":
            raise TypeError("top_k rows of the tuple path stay Python objects")
        if kind == "mean":
            s = _exact_array([a[0] for a in accs], None if like is None else
                             like.type.field("s").type)
            c = _exact_array([a[1] for a in accs], pa.int64())
            return pa.StructArray.from_arrays([s, c], names=["s", "n"])
        return _exact_array(accs, None if like is None else like.type)

    def to_accs(self, v: Any) -> list[Any]:
        """The tuple path's accumulators of states ``v`` (one per row)."""
        kind = self.kind
        if kind == "mean":
            return list(zip(v.field("s").to_pylist(), v.field("n").to_pylist(), strict=True))
        if kind == "top_k":
            return [[c] for c in zip(v.field("x").to_pylist(), v.field("r").to_pylist(),
                                     strict=True)]
        return v.to_pylist()

    # -- f_O ------------------------------------------------------------------------------------
    def output_part(self, part: Any) -> Any:
        return self.output(key_cols(part), state_of(part))

    def output(self, keys: list[Any], v: Any) -> Any:
        """A window's output table from its folded partial: ``{key names..., name: value}``
        (keys=None: ``{name: value}``); top_k: the rows kept, their own columns."""
        import numpy as np
        import pyarrow as pa

        kind = self.kind
        if kind == "top_k":
            return pa.Table.from_struct_array(v.field("r"))
        if kind == "mean":
            s, c = v.field("s"), v.field("n")
            sn, cn = num_numpy(s), int_numpy(c)
            if sn.dtype.kind == "f":
                val = arrow_num(sn / cn)
            elif len(sn) and np.abs(sn).max() >= 2**53:  # int / int as Python rounds it
                val = pa.array([a / b for a, b in zip(sn.tolist(), cn.tolist(), strict=True)],
                               pa.float64())
            else:
                val = arrow_num(sn.astype(np.float64) / cn)
        else:
            val = v
        names = list(self.names)
        cols = keys if names else []
        return pa.Table.from_arrays([*cols, val], names=[*names, self.agg.name])


# -- the columns protocol of issue #16 for a declarative count or int sum -------------------------
class DeclColumns:
    """``Aggregate.columns`` of a declarative count or integer sum (what SN's process channels
    and Spark call): ``payloads -> (rows, keys, int64 values)``; raises on whatever it cannot
    take exactly from the table alone (nulls, floats, a sum that might overflow)."""

    def __init__(self, op: Aggregate):
        self.op = op

    def __call__(self, payloads: Any) -> tuple[Any, Any, Any]:
        import numpy as np
        import pyarrow as pa

        from ..batch import Batch

        table = payloads if isinstance(payloads, pa.Table) else None
        if table is None:
            from ..batch import _table_of

            table = _table_of(payloads)
            if table is False:
                raise TypeError("payloads are not dicts of one schema")
        form = DeclForm(self.op)
        n = table.num_rows
        batch = Batch(np.zeros(n, np.int64), table=table)  # its payloads are the table's
        for name in form._source_columns():
            if name in table.column_names and table.column(name).null_count:
                raise Refused("nulls: a missing field would read as one")
        out = form._explode(batch, table)
        rows, keys, v = out
        if form.kind == "sum" and pa.types.is_floating(v.type):
            raise Refused("float values")
        values = int_numpy(v)
        if len(values) and max(int(values.max()), -int(values.min())) * len(values) >= 2**63:
            raise OverflowError("a sum of this batch may exceed int64")
        rows = np.arange(n, dtype=np.int64) if rows is None else rows
        return rows, (keys[0] if len(keys) == 1 else tuple(keys)), values


# -- helpers -------------------------------------------------------------------------------------
def unify(a: Any, b: Any) -> Any:
    """The type partials of state types ``a`` and ``b`` concatenate to (Arrow's "default"
    promotion: a column null in a whole batch has the null type, which takes any other), or
    None when they differ otherwise (ints and floats: the tuple path keeps each value's
    type, so such a batch goes tuple at a time)."""
    import pyarrow as pa

    if a == b or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_struct(a) and pa.types.is_struct(b) and a.num_fields == b.num_fields:
        fields = []
        for fa, fb in zip(a, b, strict=True):
            t = unify(fa.type, fb.type) if fa.name == fb.name else None
            if t is None:
                return None
            fields.append(pa.field(fa.name, t))
        return pa.struct(fields)
    return None


def pinned_state_type(first: Any, v: Any) -> Any:
    """The state column's type once a batch's ``v`` is in: the first batch's, unified with
    this one's (:func:`unify`); another type (ints after floats) is :class:`Refused`, since
    the tuple path keeps each value's own type."""
    t = v.type if first is None else unify(first, v.type)
    if t is None:
        raise Refused(f"state {v.type}, earlier {first}")
    return t


def pinned_key_types(first: list[Any] | None, arrays: list[Any], name: str) -> list[Any]:
    """The key columns' types: the first batch's (``first`` None: these ``arrays``'); a
    batch with another number of key columns is a ValueError naming operator ``name``."""
    types = [a.type for a in arrays] if first is None else first
    if len(arrays) != len(types):
        raise ValueError(f"{name}: the columnar f_MK gave {len(arrays)} key columns, "
                         f"earlier {len(types)}")
    return types


def cast_keys(arrays: list[Any], types: list[Any]) -> list[Any]:
    """Each key column cast to its pinned type (so partials of different batches
    concatenate)."""
    return [a if a.type == t else a.cast(t) for a, t in zip(arrays, types, strict=True)]


def surely_float(e: Expr) -> bool:
    """Whether ``e`` is a float on one payload whatever its columns hold (a true division, a
    float literal in the arithmetic): then a float64 column is what the tuple path sees."""
    op, a = e.op, e.args
    if op == "lit":
        return type(a[0]) is float
    if op == "truediv":
        return True
    if op in ("add", "sub", "mul", "floordiv", "mod"):
        return surely_float(a[0]) or surely_float(a[1])
    if op in ("neg", "abs", "alias"):
        return surely_float(a[0])
    return False


def _faithful(batch: Batch) -> bool:
    """Whether the batch's payloads are its table's rows (built from it on demand): then the
    table says all the tuple path sees."""
    return getattr(batch, "_payloads", None) is None and \
        getattr(batch, "_make_payloads", None) is None


def _bools(arr: Any) -> Any:
    """An Arrow boolean array without nulls as numpy bools."""
    import numpy as np
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        arr = arr.fill_null(False)
    bits = np.frombuffer(arr.buffers()[1], np.uint8)
    return np.unpackbits(bits, bitorder="little", count=arr.offset + len(arr))[
        arr.offset:].astype(bool)


def _check_present(batch: Batch, table: Any, names: set[str], null_rows: Any) -> None:
    """Refuses unless every null of a column ``names`` in the rows ``null_rows`` is a field
    the payload has (a missing one is the tuple path's error, not a null)."""
    import numpy as np

    idx = np.flatnonzero(null_rows)
    if not len(idx):
        return
    cols = [c for c in names if c in table.column_names and table.column(c).null_count]
    payloads = batch.payloads
    for i in idx.tolist():
        p = payloads[i]
        if type(p) is not dict or any(c not in p for c in cols):
            raise Refused("a field is missing, not null")


def _check_floats(batch: Batch, table: Any, names: set[str], rows: Any) -> None:
    """Refuses unless the float columns ``names`` hold floats in the payloads too (a JSON
    column mixing 3 and 3.5 is float64 in Arrow; the tuple path sums 3 as an int)."""
    import pyarrow as pa

    cols = [c for c in names if c in table.column_names
            and pa.types.is_floating(table.column(c).type)]
    if not cols:
        return
    payloads = batch.payloads
    it = payloads if rows is None else (payloads[i] for i in rows.tolist())
    for p in it:
        for c in cols:
            x = p[c]
            if type(x) is not float and x is not None:
                raise Refused("an int in a float column")


def _check_rows(batch: Batch, table: Any) -> None:
    """top_k outputs rows: refused unless every column is of a scalar type and the table's
    rows are the payloads (a null is a field the payload has, a float a float there)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    nulls = None
    for c in table.columns:
        t = c.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_boolean(t)
                or pa.types.is_null(t)):
            raise Refused(f"rows with a {t} column")
        if c.null_count:
            valid = pc.is_valid(c)
            nulls = pc.invert(valid) if nulls is None else pc.or_(nulls, pc.invert(valid))
    if nulls is not None:
        _check_present(batch, table, set(names), _bools(nulls))
    _check_floats(batch, table, set(names), None)


def _num(x: Any) -> Any:
    """A numeric value array as int64 or float64."""
    import pyarrow as pa

    if pa.types.is_null(x.type):
        return arrow_ints([])
    if pa.types.is_floating(x.type):
        return x if x.type == pa.float64() else x.cast(pa.float64())
    return x if x.type == pa.int64() else x.cast(pa.int64())


def _plain_key(k: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_null(k.type):  # every row was null: none is left
        return arrow_ints([])
    return k


def _exact_array(values: list[Any], typ: Any) -> Any:
    """Python ints or floats as an int64 or float64 array, only if every value has the type's
    Python type (no int read as a float or the reverse); TypeError otherwise."""
    import pyarrow as pa

    if typ is None:
        typ = pa.float64() if values and type(values[0]) is float else pa.int64()
    want = float if pa.types.is_floating(typ) else int
    if any(type(v) is not want for v in values):
        raise TypeError("accumulators of another type")
    return pa.array(values, typ)
