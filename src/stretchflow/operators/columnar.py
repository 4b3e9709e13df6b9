"""The columnar sliced A+: whole batches through Arrow kernels, windows out as tables (issues #16,
#31).

For an :class:`~.aggregate.Aggregate` with a columnar form (:mod:`.column_forms`: a declarative
aggregate's, or the hand-written ``columns``/``output_columns``/``combine`` of wordcount and
paircount), a batch of tuples (:class:`~stretchflow.batch.Batch`) is processed without a Python
step per tuple, key or output row:

1. f_MK's columnar form explodes the batch into each row's key columns and state (a count of
   one, the value, (value, 1) for a mean, the value and the row for top_k);
2. every row falls in one slice of width gcd(WS, WA) (general stream slicing: Scotty, Traub et
   al., EDBT 2019, §4; :mod:`.slicing`), so the batch is folded per (slice, key) by one
   grouping (:mod:`.columnar_kernels`: dense group codes, numpy) and the result kept as a
   *partial* of each slice — Hazelcast Jet's accumulate step, on columns. Float sums and
   means keep their rows unfolded until the slice is complete, then fold them in time order:
   the additions of the tuple path, in its order, so the same float to the last bit;
3. when the watermark reaches a window's right boundary (Alg. 2's updateW: ρ + WS <= W) each
   of the window's slices is folded once (later windows reuse it), their partials are
   combined per key by one more grouping in time order (Jet's combine) and f_O's columnar
   form turns the result into the window's output table.

Arrow's kernels run with the GIL released. The tuple-at-a-time path of the sliced instance
stays: a batch the columnar form refuses (a payload it cannot read exactly, a sum that may
leave int64, a value of another type than the first batch's; :mod:`.column_forms`) goes
through :meth:`process` tuple by tuple, which names the offending tuple, and its slices are
Python dicts in σ as before; a window combines both kinds of slice, in Arrow where the dict
slices convert exactly, else in Python (f_O per key), so mixing the paths gives the same
accumulators. (Float sums of a window that mixes both paths may then differ from the tuple
path's in the last bits: the dict slice adds after the slice's Arrow rows.) The bookkeeping
of which slices and windows are open is the sliced instance's (σ_g's slice entries and NEXT,
the expiry heap, its expiry loop): a columnar partial also creates its slice's (possibly
empty) entry in σ_g, so expiry visits exactly the windows that hold a tuple, and this
instance only says how a window is emitted and what dropping a slice frees.

Only for one instance owning every key group (the reference executor at parallelism 1, an SN
process channel): the partials are this instance's, not σ's, so they cannot be handed to
another instance (:mod:`.columnar_shared` is the shared form).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RunTupleError, StretchflowError
from .column_forms import (
    Refused,
    cast_keys,
    columns_of,  # noqa: F401 - issue #16's f_MK protocol: SN's channels import it from here
    form_of,
    key_arrays,
    partial,
    pinned_key_types,
    pinned_state_type,
    plain_column,
    state_of,
)
from .slicing import NEXT, SlicedAggregateInstance

if TYPE_CHECKING:
    from ..batch import Batch
    from .aggregate import Aggregate

#: what makes the columnar path hand a batch or a window to the tuple path (exactly, in
#: Python) instead of failing: a refusal, a sum that may leave int64, types that differ
#: from the first batch's
FALLBACK = (Refused, OverflowError, TypeError, ValueError, UnicodeError)


def applies(op: Any) -> bool:
    """Whether ``op`` can run as a :class:`ColumnarSlicedInstance`: it has a columnar form
    (:func:`.column_forms.form_of`)."""
    return form_of(op) is not None


class ColumnarSlicedInstance(SlicedAggregateInstance):
    """A sliced A+ instance that also takes whole batches; see the module doc."""

    op: Aggregate
    path = "columnar"

    def __init__(self, op: Aggregate) -> None:
        super().__init__(op)
        if form_of(op) is None:
            raise ValueError(f"{op.name}: no columnar form")
        self._parts: dict[int, list[Any]] = {}  # slice start -> partials, in time order
        self._raw: set[int] = set()  # slices with rows not folded yet (float sums, means)
        self._tables: list[tuple[int, Any]] = []  # (window right boundary, output table)
        self._key_types: list[Any] | None = None  # one Arrow type per key column
        self._v_type: Any = None  # the state column's type, from the first batch
        #: batches taken through the kernels and tuple at a time (the run summary, tests)
        self.batch_counts = {"columnar": 0, "tuple": 0}

    @property
    def form(self) -> Any:
        """The operator's columnar form (made on use: a checkpoint's snapshot of this
        instance's attributes must not hold the operator)."""
        return form_of(self.op)

    # -- accumulate: a batch into per-slice partials --------------------------------------------
    def process_batch(self, batch: Batch) -> None:
        """``process(ts, payload)`` for every tuple of ``batch`` (timestamps non-decreasing,
        not below the watermark), through f_MK's columnar form and one grouping per batch;
        tuple at a time when the columnar form refuses the batch."""
        import pyarrow as pa

        n = len(batch)
        if not n:
            return
        first, last = batch.first, batch.last
        if first < self.W:
            raise ValueError(f"{self.op.name}: a batch starting at {first} is behind the "
                             f"watermark {self.W}")
        cols = self._columns(batch)
        parts = None
        if cols is not None:
            try:
                parts = self._partials(batch.ts, *cols)
            except (*FALLBACK, pa.ArrowInvalid, pa.ArrowTypeError,
                    pa.ArrowNotImplementedError):
                parts = None
            except (RunTupleError, StretchflowError):
                raise
            except Exception as e:
                raise RunTupleError(first, batch.payloads[0], e) from e
        if parts is None:
            self.batch_counts["tuple"] += 1
            self._tuple_at_a_time(batch)
            return
        self.batch_counts["columnar"] += 1
        if first > self.W:
            self._update_w(first)  # updateW before the batch's first tuple (Alg. 2 L25-L29)
        sg = self.groups[0]
        for s, part, raw in parts:
            self._add_part(sg, s, part, raw)
        if last > self.W:
            self._update_w(last)

    def _columns(self, batch: Batch) -> tuple[Any, Any, Any] | None:
        """f_MK's columnar form over the batch, None if it refuses; taken from
        :func:`explode_ahead` when a reader thread computed it already."""
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

    def _partials(self, ts: Any, rows: Any, keys: list[Any], v: Any
                  ) -> list[tuple[int, Any, bool]]:
        """The batch's partials, ``(slice start, table, raw)`` in slice order: its rows
        grouped per (slice, key) by one fold, or, where the fold must wait for the rest of
        the slice (``pregroup`` False), the rows as they are."""
        import numpy as np

        form = self.form
        if not len(v):  # no row has a key and a value (all null): nothing to add
            return []
        cols = list(self._key_columns(keys).values())
        self._state_type(v)
        width = self._width
        ts = np.asarray(ts)
        t = ts - ts % width  # each tuple's slice, then each row's (a tuple has many rows:
        if rows is not None:  # one gather, no modulo per row)
            t = t[rows]
        raw = not form.pregroup(v)
        if raw:
            sl, ks, vs = t, cols, v  # rows come in time order: slices ascending
        else:
            # one grouping by (slice, key) for the whole batch (rows need not come in time
            # order: paircount's come per distance), then a partial per slice
            sl, ks, vs = form.fold(cols, v, t)
        if not len(sl):
            return []
        cut = np.flatnonzero(sl[1:] != sl[:-1]) + 1
        return [(int(sl[a]), partial([k.slice(a, b - a) for k in ks], vs.slice(a, b - a)), raw)
                for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(sl)].tolist(),
                                strict=True)]

    def _key_columns(self, keys: Any) -> dict[str, Any]:
        """f_MK's key column(s) as ``{"k0": ..., "k1": ...}``: one Arrow array, or a tuple
        of them when a key is a tuple (paircount's (first, second)); each cast to the type
        its column had first, so every partial concatenates."""
        arrays = key_arrays(keys)
        self._key_types = pinned_key_types(self._key_types, arrays, self.op.name)
        return {f"k{i}": a for i, a in enumerate(cast_keys(arrays, self._key_types))}

    def _state_type(self, v: Any) -> None:
        """Pins the state column's type to the first batch's (:func:`.column_forms.
        pinned_state_type`)."""
        self._v_type = pinned_state_type(self._v_type, v)

    def _add_part(self, sg: dict, s: int, part: Any, raw: bool = False) -> None:
        self._entry(sg, s, 0)  # σ_g's slice entry: the expiry bookkeeping is the sliced one's
        ps = self._parts.setdefault(s, [])
        ps.append(part)
        if raw:
            self._raw.add(s)
        if len(ps) >= _COMPACT:  # a long slice: keep its memory near its distinct keys'
            self._compact(s, ps)

    def _compact(self, s: int, ps: list[Any]) -> None:
        """The slice's partials folded into one (in time order); left as they are if the
        fold cannot be exact (a sum beyond int64: the window combines in Python)."""
        try:
            folded = fold_parts(self.form, ps)
        except (OverflowError, TypeError, ValueError):
            return
        ps[:] = [folded]
        self._raw.discard(s)

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
        self._raw.discard(s)

    def _window(self, sg: dict, ss: Sequence[int]) -> Any:
        """Window output combined from slices ``ss``: each slice's partials folded (once: later
        windows reuse it), then the slices' partials and any tuple-path dict slices folded in
        time order, then f_O's columnar form — a table; or, where that cannot be exact (dict
        slices Arrow cannot hold, types that differ, a sum beyond int64), the same combine in
        Python and f_O per key — a list of payloads."""
        import pyarrow as pa

        parts = []
        for s in ss:
            ps = self._parts.get(s)
            if ps:
                if len(ps) > 1 or s in self._raw:
                    self._compact(s, ps)
                    if len(ps) > 1 or s in self._raw:
                        return self._window_in_python(sg, ss)
                parts.append(ps[0])
            d = sg.get(s)
            if d:
                try:
                    parts.append(self._dict_part(d))
                except (*FALLBACK, pa.ArrowException):
                    return self._window_in_python(sg, ss)
        if not parts:
            return None
        try:
            total = parts[0] if len(parts) == 1 else fold_parts(self.form, parts)
        except (*FALLBACK, pa.ArrowInvalid, pa.ArrowTypeError):
            return self._window_in_python(sg, ss)
        return self.form.output_part(total)

    def _window_in_python(self, sg: dict, ss: Sequence[int]) -> list[Any]:
        """The window combined in Python (:func:`combine_in_python`): per slice its
        partials' rows, then its dict slice."""
        to_accs = self.form.to_accs
        return combine_in_python(self.op, [
            [*((k, a) for part in self._parts.get(s, ())
               for k, a in zip(_keys_of(part), to_accs(state_of(part)), strict=True)),
             *(sg.get(s) or {}).items()]
            for s in ss])

    def _dict_part(self, d: dict) -> Any:
        """A dict slice (tuple-path accumulators) as a partial, typed as the columnar ones;
        TypeError (or Arrow's error) where it does not fit them exactly."""
        import pyarrow as pa

        ks = list(d)
        types = self._key_types
        if types is None:
            raise TypeError("no columnar partial to type the keys by")
        if len(types) > 1:
            cols = [exact_keys([k[i] for k in ks], t) for i, t in enumerate(types)]
        else:
            cols = [exact_keys(ks, types[0])]
        like = None if self._v_type is None else pa.array([], self._v_type)
        v = self.form.from_accs(list(d.values()), like)
        return partial(cols, v)

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


def combine_in_python(op: Aggregate, slices: Sequence[Sequence[tuple[Any, Any]]]) -> list[Any]:
    """A window's output payloads from its slices' (key, accumulator) rows in time order, as
    the sliced instance combines them: each slice's rows folded from ``init()`` by
    ``combine``, then the slices combined in time order, then f_O per key."""
    combine, output, init, many = op.combine, op.user_output, op.user_init, op.many_outputs
    acc: dict[Any, Any] = {}
    for rows in slices:
        sacc: dict[Any, Any] = {}
        for k, a in rows:
            sacc[k] = combine(sacc[k] if k in sacc else init(), a)  # type: ignore[misc]
        for k, a in sacc.items():
            acc[k] = combine(acc[k], a) if k in acc else a  # type: ignore[misc]
    out: list[Any] = []
    for k, a in acc.items():
        r = output(k, a)
        if r is not None:
            out.extend(r) if many else out.append(r)
    return out


def fold_parts(form: Any, parts: list[Any]) -> Any:
    """Partials of one run, in time order, folded into one (``form.fold`` of their rows)."""
    import pyarrow as pa

    if len(parts) == 1:
        cols = [plain_column(c) for c in parts[0].columns]
    else:
        try:  # one copy of each column
            cols = [pa.concat_arrays([ch for p in parts for ch in p.column(i).chunks])
                    for i in range(parts[0].num_columns)]
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # a batch's column of nulls only has Arrow's null type: "default" promotes it
            table = pa.concat_tables(parts, promote_options="default")
            cols = [c.combine_chunks() for c in table.columns]
    _, ks, v = form.fold(cols[:-1], cols[-1])  # a partial's columns: keys, then v
    return partial(ks, v)


def exact_keys(values: list[Any], typ: Any) -> Any:
    """Python keys as an Arrow array of ``typ``, only if each is of that type's Python type
    (an int key is not a float's, True is not 1): TypeError otherwise."""
    import pyarrow as pa

    want: type = str
    if pa.types.is_integer(typ):
        want = int
    elif pa.types.is_boolean(typ):
        want = bool
    elif not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        raise TypeError(f"keys of type {typ}")
    if any(type(v) is not want for v in values):
        raise TypeError("keys of another type")
    return pa.array(values, typ)


class Exploded:
    """f_MK's columnar form of one batch for one A+, computed ahead of the instance."""

    __slots__ = ("op", "cols")

    def __init__(self, op: Any, cols: tuple[Any, Any, Any] | None):
        self.op = op
        self.cols = cols


def explode_of(op: Aggregate, batch: Batch) -> tuple[Any, list[Any], Any] | None:
    """f_MK's columnar form of ``op``'s columnar form (:mod:`.column_forms`) over ``batch``:
    ``(rows or None, key arrays, state column)``, or None if it refuses the batch."""
    form = form_of(op)
    return None if form is None else form.explode(batch)


def take_columns(op: Aggregate, batch: Batch) -> tuple[Any, list[Any], Any] | None:
    """:func:`explode_of`, or what :func:`explode_ahead` computed for ``op`` already (then
    dropped from the batch: the columns are the caller's now, not kept twice)."""
    ahead = batch.ahead
    if type(ahead) is Exploded and ahead.op is op:
        batch.ahead = None
        return ahead.cols
    return explode_of(op, batch)


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
            b.ahead = Exploded(op, explode_of(op, b))
        yield b


#: partials a slice collects before they are summed into one (bounds a long slice's memory by
#: its distinct keys, not its tuples, at one extra aggregation per this many batches)
_COMPACT = 16


def _keys_of(part: Any) -> list[Any]:
    """A partial's keys as the tuple path has them: values, or tuples of several columns."""
    cols = [part.column(c).to_pylist() for c in part.column_names if c != "v"]
    return cols[0] if len(cols) == 1 else list(zip(*cols, strict=True))
