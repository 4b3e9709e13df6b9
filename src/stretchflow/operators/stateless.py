"""Stateless operators (journal §2.1): Map, FlatMap and Filter keep each tuple's timestamp.

A Map or Filter may also carry a columnar form, ``batch_fn`` (issue #16): a function over a
whole batch's payloads as a pyarrow Table (:class:`~stretchflow.batch.Batch`). Executors that
run batches call it; every other executor calls ``fn``, the same function on a one-row table,
so every engine runs every flow. :func:`map_batches` and :func:`arrow_filter` build them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import OperatorError, StretchflowError
from ..eventtime import WATERMARK


@dataclass(frozen=True)
class Map:
    """t_out = ⟨t_in.τ, fn(t_in.φ)⟩."""

    fn: Callable[[Any], Any]
    name: str = "map"
    #: columnar form: ``Table -> Table`` of as many rows, row r from input row r (optional)
    batch_fn: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class FlatMap:
    """Zero or more outputs per input, each with the input's timestamp."""

    fn: Callable[[Any], Iterable[Any]]
    name: str = "flat_map"


@dataclass(frozen=True)
class Filter:
    """Keeps the tuples for which ``fn`` is true."""

    fn: Callable[[Any], bool]
    name: str = "filter"
    #: columnar form: ``Table -> (kept rows' indices, Table of them)`` (optional)
    batch_fn: Callable[[Any], Any] | None = None


def apply_batch(op: Map | FlatMap | Filter, batch: list[tuple[int, Any]],
                markers: tuple[Any] | tuple[Any, Any] = (WATERMARK,)) -> list[tuple[int, Any]]:
    """``op`` over a batch of ``(ts, payload)`` items, keeping each timestamp; items whose
    payload is one of ``markers`` (watermarks, end markers) pass through. A user function that
    raises stops with an :class:`~stretchflow.errors.OperatorError` naming ``op`` and the tuple."""
    fn, kind, out = op.fn, type(op), []
    append = out.append
    m0, m1 = markers[0], markers[-1]  # one or two markers, compared by identity
    ts = p = None
    try:
        for ts, p in batch:
            if p is m0 or p is m1:
                append((ts, p))
            elif kind is Map:
                append((ts, fn(p)))
            elif kind is Filter:
                if fn(p):
                    append((ts, p))
            else:
                for q in fn(p):
                    append((ts, q))
    except StretchflowError:
        raise
    except Exception as e:
        raise OperatorError(op.name, ts, p, e) from e
    return out


# -- columnar forms (issue #16) -----------------------------------------------------------------
# Classes, not closures: an SN process channel pickles its operators.
class _TableFn:
    """``fn`` over a pyarrow Table (``format="arrow"``) or a pandas DataFrame (``"pandas"``),
    returning either; the result as a Table."""

    __slots__ = ("fn", "format")

    def __init__(self, fn: Callable[[Any], Any], format: str):  # noqa: A002
        if format not in ("arrow", "pandas"):
            raise ValueError(f"map_batches: format must be 'arrow' or 'pandas', got {format!r}")
        self.fn, self.format = fn, format

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        out = self.fn(table.to_pandas() if self.format == "pandas" else table)
        if isinstance(out, pa.RecordBatch):
            return pa.Table.from_batches([out])
        if isinstance(out, pa.Table):
            return out
        if type(out).__name__ == "DataFrame":
            return pa.Table.from_pandas(out, preserve_index=False)
        raise TypeError(f"map_batches: the function returned {type(out).__name__}, not a "
                        f"pyarrow Table or RecordBatch or a pandas DataFrame")

    def rows(self, table: Any) -> Any:
        """The result for ``table``, checked to have as many rows (a map keeps every tuple
        and its timestamp)."""
        out = self(table)
        if out.num_rows != table.num_rows:
            raise ValueError(f"map_batches: the function returned {out.num_rows} rows for "
                             f"{table.num_rows}; it must map row r to row r")
        return out


class _MapRow:
    """The tuple form of a columnar map: the payload as a one-row table, through ``fn``."""

    __slots__ = ("table_fn",)

    def __init__(self, table_fn: _TableFn):
        self.table_fn = table_fn

    def __call__(self, payload: Any) -> Any:
        import pyarrow as pa

        if type(payload) is not dict:
            raise TypeError(f"map_batches needs dict payloads, got {type(payload).__name__}")
        return self.table_fn.rows(pa.Table.from_pylist([payload])).to_pylist()[0]


class _MapBatch:
    __slots__ = ("table_fn",)

    def __init__(self, table_fn: _TableFn):
        self.table_fn = table_fn

    def __call__(self, table: Any) -> Any:
        return self.table_fn.rows(table)


class _ExprRow:
    """The tuple form of an Arrow-expression filter: whether the one-row table keeps its row."""

    __slots__ = ("expr",)

    def __init__(self, expr: Any):
        self.expr = expr

    def __call__(self, payload: Any) -> bool:
        import pyarrow as pa

        if type(payload) is not dict:
            raise TypeError(f"an Arrow filter needs dict payloads, got {type(payload).__name__}")
        return pa.Table.from_pylist([payload]).filter(self.expr).num_rows == 1


class _ExprBatch:
    """An Arrow-expression filter over a table: the kept rows' indices and the kept rows."""

    __slots__ = ("expr",)

    def __init__(self, expr: Any):
        self.expr = expr

    def __call__(self, table: Any) -> tuple[Any, Any]:
        import numpy as np

        from ..batch import arrow_ints, int_numpy

        row = "__stretchflow_row"  # the rows' positions ride along through the filter
        kept = table.append_column(row, arrow_ints(np.arange(table.num_rows))).filter(self.expr)
        return int_numpy(kept.column(row)), kept.drop_columns([row])


def map_batches(fn: Callable[[Any], Any], name: str = "map_batches",
                format: str = "arrow") -> Map:  # noqa: A002
    """A Map given as a function over a whole batch: a pyarrow Table (or, with
    ``format="pandas"``, a DataFrame) in, one of the same number of rows out, row r computed
    from input row r only (executors without batches call it on one-row tables)."""
    table_fn = _TableFn(fn, format)
    return Map(_MapRow(table_fn), name, _MapBatch(table_fn))


def is_arrow_expression(x: Any) -> bool:
    """Whether ``x`` is a ``pyarrow.compute.Expression`` (without importing pyarrow)."""
    return type(x).__name__ == "Expression" and type(x).__module__.startswith("pyarrow")


def arrow_filter(expr: Any, name: str = "filter") -> Filter:
    """A Filter given as an Arrow expression (e.g. ``pc.field("lang") == "en"``): a row is
    kept where it evaluates true (null or false: dropped), as ``Table.filter`` does."""
    return Filter(_ExprRow(expr), name, _ExprBatch(expr))
