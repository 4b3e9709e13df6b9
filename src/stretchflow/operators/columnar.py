"""The columnar sliced A+: whole batches through Arrow kernels, windows out as tables (issue #16).

For an :class:`~.aggregate.Aggregate` that gives a columnar f_MK (``columns``), an f_U that
adds, a ``combine`` and a columnar f_O (``output_columns``), a batch of tuples
(:class:`~stretchflow.batch.Batch`) is processed without a Python step per tuple, key or
output row:

1. f_MK's columnar form explodes the batch into (row, key, value) columns;
2. every row falls in one slice of width gcd(WS, WA) (general stream slicing: Scotty, Traub et
   al., EDBT 2019, §4; :mod:`.slicing`), so the batch is summed per (slice, key) by one
   grouping (:func:`.columnar_kernels.sum_by`: Arrow dictionary codes, numpy) and the result
   kept as a *partial* of each slice — Hazelcast Jet's accumulate step, on columns;
3. when the watermark reaches a window's right boundary (Alg. 2's updateW: ρ + WS <= W) the
   partials of the window's slices are combined per key by one more grouping (Jet's
   combine) and f_O's columnar form turns the result into the window's output table.

Arrow's kernels run with the GIL released. The tuple-at-a-time path of the sliced instance
stays: a batch f_MK's columnar form refuses (e.g. a payload without text) goes through
:meth:`process` tuple by tuple, which names the offending tuple, and its slices are Python
dicts in σ as before; a window combines both kinds of slice, so mixing the paths gives the
same accumulators. The bookkeeping of which slices and windows are open is the sliced
instance's (σ_g's slice entries and NEXT, the expiry heap, its expiry loop): a columnar
partial also creates its slice's (possibly empty) entry in σ_g, so expiry visits exactly the
windows that hold a tuple, and this instance only says how a window is emitted and what
dropping a slice frees.

Same outputs as tuple at a time: a window's sum per key is the sum of its tuples' values (f_U
adds, so the order of additions does not matter for integers), and a window closes only at a
timestamp after all of its rows (slices never straddle a window boundary). Sums are int64:
a window's count beyond 2**63 would overflow where Python's int would not.

Only for one instance owning every key group (the reference executor at parallelism 1): the
partials are this instance's, not σ's, so they cannot be handed to another instance.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..batch import arrow_ints, int_numpy
from ..errors import RunTupleError, StretchflowError
from .columnar_kernels import sum_by
from .slicing import NEXT, SlicedAggregateInstance

if TYPE_CHECKING:
    from ..batch import Batch
    from .aggregate import Aggregate


def applies(op: Any) -> bool:
    """Whether ``op`` can run as a :class:`ColumnarSlicedInstance`."""
    return (getattr(op, "columns", None) is not None
            and getattr(op, "output_columns", None) is not None
            and getattr(op, "combine", None) is not None and op.WT == "multi")


class ColumnarSlicedInstance(SlicedAggregateInstance):
    """A sliced A+ instance that also takes whole batches; see the module doc."""

    op: Aggregate
    path = "columnar"

    def __init__(self, op: Aggregate) -> None:
        super().__init__(op)
        self._parts: dict[int, list[Any]] = {}  # slice start -> Arrow tables (k, v) to add
        self._tables: list[tuple[int, Any]] = []  # (window right boundary, output table)
        self._key_types: list[Any] | None = None  # one Arrow type per key column

    # -- accumulate: a batch into per-slice partials --------------------------------------------
    def process_batch(self, batch: Batch) -> None:
        """``process(ts, payload)`` for every tuple of ``batch`` (timestamps non-decreasing,
        not below the watermark), through f_MK's columnar form and one Arrow aggregation;
        tuple at a time when the columnar form refuses the batch."""
        n = len(batch)
        if not n:
            return
        first, last = batch.first, batch.last
        if first < self.W:
            raise ValueError(f"{self.op.name}: a batch starting at {first} is behind the "
                             f"watermark {self.W}")
        cols = self._columns(batch)
        if cols is None:
            self._tuple_at_a_time(batch)
            return
        if first > self.W:
            self._update_w(first)  # updateW before the batch's first tuple (Alg. 2 L25-L29)
        rows, keys, values = cols
        if len(rows):
            try:
                self._accumulate(batch.ts, rows, keys, values)
            except (RunTupleError, StretchflowError):
                raise
            except Exception as e:
                raise RunTupleError(first, batch.payloads[0], e) from e
        if last > self.W:
            self._update_w(last)

    def _columns(self, batch: Batch) -> tuple[Any, Any, Any] | None:
        """f_MK's columnar form over the batch's table (or its payloads), None if it refuses;
        taken from :func:`explode_ahead` when a reader thread computed it already."""
        return take_columns(self.op, batch)

    def _tuple_at_a_time(self, batch: Batch) -> None:
        process = self.process
        ts = v = None
        try:
            for ts, v in batch.items():
                process(ts, v)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(ts, v, e) from e

    def _accumulate(self, ts: Any, rows: Any, keys: Any, values: Any) -> None:
        import numpy as np

        width = self._width
        ts = np.asarray(ts)
        # each tuple's slice, then each key's (a tuple has many keys: one gather, no modulo)
        t = (ts - ts % width)[np.asarray(rows, dtype=np.int64)]
        cols = self._key_columns(keys)
        # one grouping by (slice, key) for the whole batch (rows need not come in time
        # order: paircount's come per distance), then a partial per slice
        sl, ks, sums = sum_by(list(cols.values()), values, t)
        cut = np.flatnonzero(sl[1:] != sl[:-1]) + 1
        sg = self.groups[0]
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(sl)].tolist(), strict=True):
            self._add_part(sg, int(sl[a]), _table(list(cols), [k.slice(a, b - a) for k in ks],
                                                  sums[a:b]))

    def _key_columns(self, keys: Any) -> dict[str, Any]:
        """f_MK's key column(s) as ``{"k0": ..., "k1": ...}``: one Arrow array, or a tuple
        of them when a key is a tuple (paircount's (first, second)); each cast to the type
        its column had first, so every partial concatenates."""
        arrays = key_arrays(keys)
        if self._key_types is None:
            self._key_types = [a.type for a in arrays]
        elif len(arrays) != len(self._key_types):
            raise ValueError(f"{self.op.name}: the columnar f_MK gave {len(arrays)} key "
                             f"columns, earlier {len(self._key_types)}")
        return {f"k{i}": a if a.type == t else a.cast(t)
                for i, (a, t) in enumerate(zip(arrays, self._key_types, strict=True))}

    def _add_part(self, sg: dict, s: int, part: Any) -> None:
        import pyarrow as pa

        self._entry(sg, s, 0)  # σ_g's slice entry: the expiry bookkeeping is the sliced one's
        ps = self._parts.setdefault(s, [])
        ps.append(part)
        if len(ps) >= _COMPACT:  # a long slice: keep its memory near its distinct keys'
            ps[:] = [_sum_by_key(pa.concat_tables(ps))]

    # -- combine: a window's slices into its output table --------------------------------------
    def _emit_window(self, sg: dict, l: int) -> list[int]:
        """forwardAndShift of window ``l`` (the sliced instance's expiry loop calls it): its
        slices combined into one output table (:meth:`_window`), kept for :meth:`take_batch`."""
        right = l + self.op.WS
        ss = sorted(s for s in sg if s != NEXT and s < right)
        table = self._window(sg, ss)
        if table is not None and len(table):
            self._tables.append((right, table))
        return ss

    def _drop_slice(self, sg: dict, s: int) -> None:
        super()._drop_slice(sg, s)
        self._parts.pop(s, None)

    def _window(self, sg: dict, ss: Sequence[int]) -> Any:
        """Window output combined from slices ``ss``: their Arrow partials and any tuple-path
        dict slices, summed per key (combine = +), then f_O's columnar form — a table; or,
        when a dict slice holds keys Arrow cannot represent (a string with a lone surrogate,
        which only the tuple path accepts), the same combine in Python and f_O per key — a
        list of payloads."""
        import pyarrow as pa

        parts = []
        for s in ss:
            ps = self._parts.get(s)
            if ps:
                if len(ps) > 1:  # compact once: the slice is combined again by later windows
                    ps[:] = [_sum_by_key(pa.concat_tables(ps))]
                parts.append(ps[0])
            d = sg.get(s)
            if d:
                try:
                    parts.append(self._dict_part(d))
                except (pa.ArrowException, UnicodeError, OverflowError, TypeError):
                    return self._window_in_python(sg, ss)
        if not parts:
            return None
        total = parts[0] if len(parts) == 1 else _sum_by_key(pa.concat_tables(parts))
        return self.op.output_table([c for c in total.column_names if c != "v"],
                                    total)

    def _window_in_python(self, sg: dict, ss: Sequence[int]) -> list[Any]:
        combine, output = self.op.combine, self.op.user_output
        acc: dict[Any, Any] = {}
        for s in ss:  # slices in time order, as the sliced instance combines them
            for part in self._parts.get(s, ()):
                for k, v in zip(_keys_of(part), part.column("v").to_pylist(), strict=True):
                    acc[k] = combine(acc[k], v) if k in acc else v
            for k, v in (sg.get(s) or {}).items():
                acc[k] = combine(acc[k], v) if k in acc else v
        return [r for r in (output(k, a) for k, a in acc.items()) if r is not None]

    def _dict_part(self, d: dict) -> Any:
        import pyarrow as pa

        ks = list(d)
        if self._key_types is not None and len(self._key_types) > 1:
            cols = self._key_columns(tuple(pa.array([k[i] for k in ks], t)
                                           for i, t in enumerate(self._key_types)))
        elif self._key_types is not None:
            cols = self._key_columns(pa.array(ks, self._key_types[0]))
        elif ks and type(ks[0]) is tuple:
            cols = self._key_columns(tuple(pa.array(c) for c in zip(*ks, strict=True)))
        else:
            cols = self._key_columns(pa.array(ks))
        return pa.table({**cols, "v": pa.array(list(d.values()), pa.int64())})

    # -- outputs --------------------------------------------------------------------------------
    def take_batch(self) -> Batch | None:
        """The windows emitted so far as one batch in timestamp order (their right
        boundaries), or None; clears the buffer. Tuple outputs (``out``) never occur: every
        window goes out through f_O's columnar form (or, see :meth:`_window`, as payloads
        inside the batch)."""
        import numpy as np

        from ..batch import Batch

        tables, self._tables = self._tables, []
        if not tables:
            return None
        pieces = [Batch(np.full(len(t), right, dtype=np.int64), payloads=t) if type(t) is list
                  else Batch(np.full(len(t), right, dtype=np.int64), table=t)
                  for right, t in tables]
        return Batch.concat(pieces)


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


class Exploded:
    """f_MK's columnar form of one batch for one A+, computed ahead of the instance."""

    __slots__ = ("op", "cols")

    def __init__(self, op: Any, cols: tuple[Any, Any, Any] | None):
        self.op = op
        self.cols = cols


def take_columns(op: Aggregate, batch: Batch) -> tuple[Any, Any, Any] | None:
    """:func:`columns_of`, or what :func:`explode_ahead` computed for ``op`` already (then
    dropped from the batch: the columns are the caller's now, not kept twice)."""
    ahead = batch.ahead
    if type(ahead) is Exploded and ahead.op is op:
        batch.ahead = None
        return ahead.cols
    return columns_of(op, batch)


def explode_ahead(op: Aggregate, batches: Iterator[Batch]) -> Iterator[Batch]:
    """``batches`` with f_MK's columnar form of ``op`` computed on each as it passes, for the
    A+ of ``op`` that is their one reader (:func:`take_columns` takes it). Iterated by the
    thread that reads the batches (the reference executor's read-ahead thread, vsn's source
    thread, the ordered engine's source stage), so that the explode of batch k + 1 (Arrow's
    split and flatten, the GIL released) runs while batch k is summed: f_MK's columnar form
    is called once per batch and in batch order, as before, only earlier and on the reader's
    thread. A refusal is kept as None, as :func:`columns_of` gives it, and the batch then
    goes tuple at a time, naming the tuple."""
    for b in batches:
        if len(b) and b.ahead is None:
            b.ahead = Exploded(op, columns_of(op, b))
        yield b


#: partials a slice collects before they are summed into one (bounds a long slice's memory by
#: its distinct keys, not its tuples, at one extra aggregation per this many batches)
_COMPACT = 16


def key_arrays(keys: Any) -> list[Any]:
    """f_MK's columnar keys as a list of Arrow arrays: one, or one per component of tuple
    keys (paircount's), each a plain (not chunked) array."""
    import pyarrow as pa

    arrays = list(keys) if isinstance(keys, tuple) else [keys]
    arrays = [a if isinstance(a, pa.Array | pa.ChunkedArray) else pa.array(a) for a in arrays]
    return [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]


def _table(names: list[str], keys: list[Any], sums: Any) -> Any:
    import pyarrow as pa

    return pa.table({**dict(zip(names, keys, strict=True)), "v": arrow_ints(sums)})


def _sum_by_key(table: Any) -> Any:
    """A partial (key columns and ``v``) summed per key (:func:`.columnar_kernels.sum_by`)."""
    names = [c for c in table.column_names if c != "v"]
    keys = [table.column(c).combine_chunks() for c in names]
    _, ks, sums = sum_by(keys, int_numpy(table.column("v")))
    return _table(names, ks, sums)


def _keys_of(part: Any) -> list[Any]:
    """A partial's keys as the tuple path has them: values, or tuples of several columns."""
    cols = [part.column(c).to_pylist() for c in part.column_names if c != "v"]
    return cols[0] if len(cols) == 1 else list(zip(*cols, strict=True))
