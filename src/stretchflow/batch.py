"""A batch: a run of tuples held as columns (issue #16).

A :class:`Batch` is ``n`` tuples in timestamp order — never a reordering: timestamps are
non-decreasing and tuple ``r`` of the batch is the ``r``-th tuple the tuple-at-a-time path
would deliver. It holds them in up to two forms, each built on demand from the other (or from
the reader that made the batch):

* ``table``: the payloads as a pyarrow Table, one row per tuple (what columnar kernels read:
  Arrow compute, f_MK's columnar form, a batch sink), built from the payloads on demand;
* ``payloads``: the payloads as Python objects, exactly what the tuple-at-a-time path delivers
  for these tuples (a JSON Lines source's batch parses its lines with the same ``orjson`` call
  as the tuple source, so a tuple-at-a-time operator downstream sees identical dicts).

``ts`` is a numpy int64 array. A batch travels through an executor as one item
``(batch.last, batch)``: its item timestamp is that of its last tuple, so timestamp merges and
implicit watermarks stay what they were tuple by tuple. Consumers that cannot take columns call
:meth:`items` and carry on tuple at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .arrow_rows import pylist

Item = tuple[int, Any]

#: tuples in a wide batch: what a source reads at once for a flow whose stages keep at most
#: one row per tuple (column expressions: executors/plan.one_row_each). The engines' knobs
#: (the reference's WIDE_BATCH, runtime/pump.WIDE_COLUMNAR_BATCH, which tests set apart) and
#: the JSON Lines reader's wide chunks (io/batches.WIDE_ROWS) start from it; each says why
WIDE = 65_536


class Batch:
    """``n`` tuples in timestamp order as columns; see the module doc."""

    __slots__ = ("_ts", "_ts_list", "_table", "_payloads", "_make_payloads", "memo", "ahead",
                 "floor")

    def __init__(self, ts: Any, *, table: Any = None, payloads: Sequence[Any] | None = None,
                 make_payloads: Callable[[], Sequence[Any]] | None = None,
                 ts_list: list[int] | None = None):
        # Timestamps given as a list (an O+'s outputs, or ``ts_list``: the list a reader
        # parsed them into) are kept as it: a consumer taking rows loops over the list
        # (:meth:`ts_list`) and the numpy form is made only if someone asks for it (issue
        # #32: hot items' second stage read 1.4 M rows a million bids through a list ->
        # array -> list round trip, about 0.1 us a bid)
        if type(ts) is list:
            self._ts: Any = None
            self._ts_list: list[int] | None = ts
        else:
            import numpy as np

            self._ts = np.asarray(ts, dtype=np.int64)
            self._ts_list = ts_list
        if table is None and payloads is None and make_payloads is None:
            raise ValueError("a batch needs its payloads as a table or as Python objects")
        self._table = table
        self._payloads = payloads
        self._make_payloads = make_payloads
        #: what a consumer derived from this batch, computed once for every reader of it
        #: (the VSN instances sharing an ESG read the same Batch object:
        #: :mod:`stretchflow.operators.columnar_shared`, :meth:`shared`), by consumer; a dict
        #: from the start, so readers of different operators never race to create it
        self.memo: dict[Any, Any] = {}
        #: f_MK's columnar form of this batch computed ahead of its reader, on the thread that
        #: read it (:func:`stretchflow.operators.columnar.explode_ahead`), or None
        self.ahead: Any = None
        #: the watermark a reader may take after this batch when it is below its last
        #: timestamp (None: the last): an entry of windows that other producers' entries of
        #: the same span interleave with (:mod:`stretchflow.operators.columnar_shared`)
        self.floor: float | None = None

    @property
    def ts(self) -> Any:
        """The timestamps as a numpy int64 array."""
        t = self._ts
        if t is None:  # made once; two readers making it at once make equal arrays
            import numpy as np

            t = self._ts = np.asarray(self._ts_list, dtype=np.int64)
        return t

    def ts_list(self) -> list[int]:
        """The timestamps as a list of ints (a consumer's loop over rows), made once."""
        t = self._ts_list
        if t is None:
            t = self._ts_list = self._ts.tolist()
        return t

    def shared(self, key: Any, lock: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``'s result for this batch and ``key``, computed once whichever reader
        asks first: ``lock`` (one per consumer, shared by its readers) is held while it
        computes, so the others wait for it rather than compute it again (without relying
        on the GIL; a user function inside ``compute`` runs once per tuple overall)."""
        with lock:
            got = self.memo.get(key, _UNSET)
            if got is _UNSET:
                got = self.memo[key] = compute()
        return got

    # -- the two forms ---------------------------------------------------------------------------
    @property
    def table(self) -> Any:
        """The payloads as a pyarrow Table, or None when they do not fit one schema (then
        columnar consumers fall back to :meth:`items`)."""
        if self._table is None:
            self._table = _table_of(self.payloads)
        return self._table if self._table is not False else None

    @property
    def has_table(self) -> bool:
        """Whether the table form exists already (building it from Python objects costs)."""
        return self._table is not None and self._table is not False

    @property
    def payloads(self) -> Sequence[Any]:
        """The payloads as the tuple-at-a-time path delivers them."""
        if self._payloads is None:
            if self._make_payloads is not None:
                self._payloads = self._make_payloads()
                self._make_payloads = None
            else:
                self._payloads = pylist(self._table)
        return self._payloads

    def items(self) -> list[Item]:
        """The tuples, ``(ts, payload)`` each, in order."""
        return list(zip(self.ts_list(), self.payloads, strict=True))

    def __len__(self) -> int:
        t = self._ts_list
        return len(self._ts if t is None else t)

    @property
    def first(self) -> int:
        t = self._ts_list
        return int(self._ts[0] if t is None else t[0])

    @property
    def last(self) -> int:
        t = self._ts_list
        return int(self._ts[-1] if t is None else t[-1])

    def split(self, i: int) -> tuple[Batch, Batch]:
        """The first ``i`` tuples and the rest, as two batches (e.g. to cut a batch at the
        tuple a reconfiguration is due at)."""
        # the payloads as the tuple path has them (a reader's own parse), kept beside the table
        p = self.payloads if self._payloads is not None or self._make_payloads is not None \
            else None
        t = self._table if self.has_table else None
        return (Batch(self.ts[:i], table=None if t is None else t.slice(0, i),
                      payloads=None if p is None else p[:i]),
                Batch(self.ts[i:], table=None if t is None else t.slice(i),
                      payloads=None if p is None else p[i:]))

    @classmethod
    def of_items(cls, items: Sequence[Item]) -> Batch:
        """A batch of ``(ts, payload)`` tuples (timestamps non-decreasing)."""
        return cls([t for t, _ in items], payloads=[p for _, p in items])

    @classmethod
    def concat(cls, batches: Sequence[Batch]) -> Batch:
        """One batch of several consecutive ones (their timestamps in order)."""
        import numpy as np

        if len(batches) == 1:
            return batches[0]
        ts = np.concatenate([b.ts for b in batches])
        if all(b.has_table for b in batches):
            import pyarrow as pa

            try:
                return cls(ts, table=pa.concat_tables([_as_table(b._table) for b in batches]))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        return cls(ts, payloads=[p for b in batches for p in b.payloads])

    def __repr__(self) -> str:
        span = f", ts {self.first}..{self.last}" if len(self) else ""
        return f"Batch({len(self)} tuples{span})"


_UNSET = object()


def _as_table(t: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([t]) if isinstance(t, pa.RecordBatch) else t


def _table_of(payloads: Sequence[Any]) -> Any:
    """Dict payloads as a Table, or False when they are not dicts of one schema that the
    table states exactly (its ``to_pylist`` gives them back, ints as ints, keys in order):
    every dict has the same keys in the same order (``from_pylist`` takes the first dict's
    keys and drops any other, reads a missing key as null), a float column holds only floats
    (an int among floats would come back 1.0), and no column nests objects or floats (whose
    keys and ints this does not check)."""
    import pyarrow as pa

    if not payloads or any(type(p) is not dict for p in payloads):
        return False
    keys = tuple(payloads[0])
    if any(tuple(p) != keys for p in payloads):
        return False
    try:
        table = pa.Table.from_pylist(list(payloads))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
            TypeError, ValueError):
        return False
    for name, t in zip(table.column_names, table.schema.types, strict=True):
        inner = t
        while pa.types.is_list(inner) or pa.types.is_large_list(inner):
            inner = inner.value_type
        if pa.types.is_struct(inner) or (inner is not t and pa.types.is_floating(inner)):
            return False
        if pa.types.is_floating(t) and any(type(p[name]) is not float and p[name] is not None
                                           for p in payloads):
            return False
    return table


def prefer_system_allocator() -> None:
    """Makes pyarrow allocate with the system allocator (glibc malloc) unless the user chose
    a pool (``ARROW_DEFAULT_MEMORY_POOL``). Measured on 200 000 tweets of wordcount through
    batches (issue #16): pyarrow's default mimalloc pool ran the whole process 1.5x slower
    with 1.4x the peak RSS, its time going to page faults (system time ~1 s of 1.5 s), since
    every batch allocates and frees arrays of tens of MB that mimalloc returns to the OS and
    faults in again. Called by executors when they run batches."""
    import os

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


def int_numpy(arr: Any) -> Any:
    """An Arrow integer array (or chunked array) without nulls as a numpy int64 array, read off
    its data buffer. pyarrow's own ``to_numpy`` imports pandas on first use (~60 MB of RSS and
    up to a second, measured with pyarrow 26), which a columnar run must not pay for."""
    import numpy as np
    import pyarrow as pa

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    parts = []
    for c in chunks:
        if c.null_count:
            raise ValueError("int_numpy: the array has nulls")
        if c.type != pa.int64():
            c = c.cast(pa.int64())
        if len(c):
            parts.append(np.frombuffer(c.buffers()[1], np.int64, len(c), c.offset * 8))
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def float_numpy(arr: Any) -> tuple[Any, Any]:
    """A float Arrow array (any width, one chunk) as numpy float64 values read off its data
    buffer (a narrower float widened first, exactly), and its validity as a bool array, None
    without nulls (the values at null slots are undefined). Not ``to_numpy``: see
    :func:`int_numpy`."""
    import numpy as np
    import pyarrow as pa

    if arr.type != pa.float64():
        arr = arr.cast(pa.float64())
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.float64), None
    vals = np.frombuffer(arr.buffers()[1], np.float64, n, arr.offset * 8)
    if not arr.null_count:
        return vals, None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return vals, bits[arr.offset: arr.offset + n].astype(bool)


def arrow_ints(values: Any) -> Any:
    """A numpy integer array as an Arrow int64 array sharing its memory. ``pa.array`` imports
    pandas on first use (see :func:`int_numpy`); building from the buffer does not."""
    import numpy as np
    import pyarrow as pa

    a = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def arrow_strings(values: list[str]) -> Any:
    """A short list of Python strings as an Arrow string array, without ``pa.array`` (which
    imports pandas, see :func:`arrow_ints`)."""
    import numpy as np
    import pyarrow as pa

    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def arrow_mask(mask: Any) -> Any:
    """A numpy boolean array as an Arrow boolean array (bit-packed), without ``pa.array``."""
    import numpy as np
    import pyarrow as pa

    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])
