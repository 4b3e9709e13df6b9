"""Stateless operators (journal §2.1): Map, FlatMap and Filter keep each tuple's timestamp.

A Map or Filter may also carry a columnar form, ``batch_fn`` (issue #16): a function over a
whole batch's payloads as a pyarrow Table (:class:`~stretchflow.batch.Batch`). Executors that
run batches call it; every other executor calls ``fn``, the same function on a one-row table,
so every engine runs every flow. :func:`map_batches` and :func:`arrow_filter` build them.

Column expressions (issue #31, :mod:`stretchflow.expr`) make both forms from one declaration:
:func:`expr_filter` (``stream.filter(sf.col("price") > 10)``) and :func:`project`
(``select``/``with_columns``). Their expressions stay readable on the operator — ``Filter.expr``,
``Map.exprs``, ``Map.keep_input`` — for a compiler that has its own columns (Spark's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..expr import Expr, MissingColumn, arrow_scalar, col


@dataclass(frozen=True)
class Map:
    """t_out = ⟨t_in.τ, fn(t_in.φ)⟩."""

    fn: Callable[[Any], Any]
    name: str = "map"
    #: columnar form: ``Table -> Table`` of as many rows, row r from input row r (optional)
    batch_fn: Callable[[Any], Any] | None = None
    #: a map declared by column expressions (``select``/``with_columns``): ``(output name,
    #: expression)`` pairs in output order, ``fn`` and ``batch_fn`` computing exactly them;
    #: None for a map given as a function
    exprs: tuple[tuple[str, Expr], ...] | None = None
    #: with ``exprs``: True for ``with_columns`` (the input payload's fields in their order,
    #: each of ``exprs`` replacing the field of its name or appended after them, all computed
    #: from the input payload), False for ``select`` (exactly ``exprs``' fields, in order)
    keep_input: bool = False


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
    #: a filter declared by a column expression: a tuple is kept where it is True (False
    #: and None drop it); ``fn`` and ``batch_fn`` compute exactly that. None otherwise
    expr: Expr | None = None


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


def apply_rows(op: Map | FlatMap | Filter, batch: Any) -> tuple[Any, BaseException | None]:
    """``op``'s function over a :class:`~stretchflow.batch.Batch`'s payloads in one tight loop
    (issue #32's batch-at-a-time path for a function the engine cannot see into): ``(out,
    error)``, ``out`` the outputs as a payloads-only batch, each with its input's timestamp.
    When ``fn`` raises, ``out`` holds what the tuples before the failing one gave (and what
    a FlatMap's failing tuple gave before it raised: tuple at a time, those left too) and
    ``error`` is the :class:`~stretchflow.errors.OperatorError` naming the tuple; the caller
    hands ``out`` on, then raises it, so an error downstream on an earlier tuple still wins.
    Each function is called once per tuple, as tuple at a time."""
    from itertools import compress

    import numpy as np

    from ..batch import Batch

    fn, kind, ts, ps = op.fn, type(op), batch.ts, batch.payloads
    out: list[Any] = []
    err: BaseException | None = None
    try:
        if kind is Map:
            out.extend(map(fn, ps))  # list.extend keeps what came before a failure
        elif kind is Filter:
            out.extend(map(fn, ps))
        else:
            ends: list[int] = []
            extend, mark = out.extend, ends.append
            for p in ps:
                try:
                    extend(fn(p))
                finally:
                    mark(len(out))
    except StretchflowError:
        raise
    except Exception as e:  # noqa: BLE001 - returned with the outputs before it
        r = len(out) if kind is not FlatMap else len(ends) - 1
        err = OperatorError(op.name, int(ts[r]), ps[r], e)
        err.__cause__ = e
    if kind is Map:
        return Batch(ts[:len(out)], payloads=out), err
    if kind is Filter:
        try:
            rows = list(compress(range(len(out)), out))
        except Exception:  # noqa: BLE001 - a result whose truth fails: name its tuple
            for r, keep in enumerate(out):
                try:
                    bool(keep)
                except Exception as e:  # noqa: BLE001
                    err = OperatorError(op.name, int(ts[r]), ps[r], e)
                    err.__cause__ = e
                    rows = list(compress(range(r), out[:r]))
                    break
        return Batch(ts[rows], payloads=[ps[r] for r in rows]), err
    counts = np.diff(np.asarray(ends, dtype=np.int64), prepend=0)
    return Batch(np.repeat(ts[:len(ends)], counts), payloads=out), err


def over_batch(op: Map | FlatMap | Filter, batch: Any) -> tuple[Any, BaseException | None]:
    """``op`` over a whole :class:`~stretchflow.batch.Batch`: ``(out, error)`` — its columnar
    form where it has one (:func:`through_batch`, which raises a failure itself), else its
    function over the batch's rows (:func:`apply_rows`, whose failure comes back as
    ``error`` after the outputs before it). What every executor that runs batches calls."""
    if getattr(op, "batch_fn", None) is not None:
        return through_batch(op, batch), None
    return apply_rows(op, batch)


def through_batch(op: Map | FlatMap | Filter, batch: Any) -> Any:
    """``op`` over a :class:`~stretchflow.batch.Batch`, a batch out: its table through the
    columnar form (``batch_fn``: a Map's rows, a Filter's kept rows, timestamps kept), else
    tuple by tuple (:func:`apply_batch`). A batch the columnar form fails on is redone tuple by
    tuple, so an error names the tuple ``fn`` fails on; if every tuple passes alone (the
    columnar form was stricter, about types mixed across rows, say), their outputs stand:
    both forms are row-wise."""
    from ..batch import Batch

    fn = getattr(op, "batch_fn", None)
    table = batch.table if fn is not None else None
    if table is not None:
        try:
            if type(op) is Map:
                return Batch(batch.ts, table=fn(table))
            rows, kept = fn(table)
            return Batch(batch.ts[rows], table=kept)
        except Exception:  # noqa: BLE001 - redone tuple by tuple, which names the tuple
            pass
    out = apply_batch(op, batch.items())
    return Batch([t for t, _ in out], payloads=[p for _, p in out])


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


# -- column expressions (issue #31) -------------------------------------------------------------
class _Compiled:
    """An expression's row form compiled on first use: :meth:`Expr.row_fn` makes closures,
    which do not pickle (an SN process channel pickles its operators); this pickles as its
    expressions and compiles again where it lands."""

    def __init__(self, exprs: tuple[tuple[str, Expr], ...]):
        self.exprs = exprs
        self._fns: list[tuple[str, Callable[[Any], Any]]] | None = None

    def fns(self) -> list[tuple[str, Callable[[Any], Any]]]:
        if self._fns is None:
            self._fns = [(name, e.row_fn()) for name, e in self.exprs]
        return self._fns

    def __getstate__(self) -> dict[str, Any]:
        return {"exprs": self.exprs, "_fns": None}


def _payload(what: str, p: Any) -> Any:
    if type(p) is not dict:
        raise TypeError(f"{what} needs dict payloads, got {type(p).__name__}")
    return p


class _ExprFilterRow(_Compiled):
    """A column-expression filter on one payload: True keeps it, False or None drops it."""

    def __call__(self, payload: Any) -> bool:
        keep = self.fns()[0][1](_payload("a column-expression filter", payload))
        if keep is True:
            return True
        if keep is False or keep is None:
            return False
        raise TypeError(f"the filter expression {self.exprs[0][1]!r} gave "
                        f"{type(keep).__name__} {keep!r}, not a bool")


class _ExprFilterBatch:
    """A column-expression filter on a table: the kept rows' indices and the kept rows."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr):
        self.expr = expr

    def __call__(self, table: Any) -> tuple[Any, Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from ..batch import int_numpy

        mask = self.expr.arrow(table)
        if pa.types.is_null(mask.type):  # None everywhere: nothing kept
            return np.zeros(0, np.int64), table.slice(0, 0)
        if not pa.types.is_boolean(mask.type):
            raise TypeError(f"the filter expression gives {mask.type}, not booleans")
        if mask.null_count == 0 and mask.false_count == 0:
            return np.arange(table.num_rows), table  # all kept: no copy
        return int_numpy(pc.indices_nonzero(mask.fill_null(arrow_scalar(False)))), \
            table.filter(mask, null_selection_behavior="drop")


class _ProjectRow(_Compiled):
    """``select``/``with_columns`` on one payload: every expression computed from the input
    payload; ``keep_input`` keeps its fields (a computed one replaces its field in place)."""

    def __init__(self, exprs: tuple[tuple[str, Expr], ...], keep_input: bool):
        super().__init__(exprs)
        self.keep_input = keep_input

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "keep_input": self.keep_input}

    def __call__(self, payload: Any) -> dict:
        p = _payload("select and with_columns", payload)
        fns = self.fns()
        if not self.keep_input:
            return {name: f(p) for name, f in fns}
        values = [(name, f(p)) for name, f in fns]  # all from the input, then assigned
        out = dict(p)
        out.update(values)
        return out


class _ProjectBatch:
    """``select``/``with_columns`` on a table: each output column an expression's Arrow
    array (a bare column passed through as it is), no Python step per row."""

    __slots__ = ("exprs", "keep_input")

    def __init__(self, exprs: tuple[tuple[str, Expr], ...], keep_input: bool):
        self.exprs, self.keep_input = exprs, keep_input

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        computed = []
        for name, e in self.exprs:
            inner = e.args[0] if e.op == "alias" else e
            if inner.op == "col":  # passed through in its own type, no kernel, no copy
                if inner.args[0] not in table.column_names:
                    raise MissingColumn(inner.args[0], table.column_names)
                computed.append((name, table.column(inner.args[0])))
            else:
                computed.append((name, e.arrow(table)))
        if self.keep_input:
            names, cols = list(table.column_names), list(table.columns)
            where = {n: i for i, n in enumerate(names)}
            for name, c in computed:
                if name in where:
                    cols[where[name]] = c
                else:
                    names.append(name)
                    cols.append(c)
        else:
            names, cols = [n for n, _ in computed], [c for _, c in computed]
        return pa.Table.from_arrays(cols, names=names)


def expr_filter(expr: Expr, name: str = "filter") -> Filter:
    """A Filter given as a column expression (``sf.col("price") > 10``): a tuple is kept where
    the expression is True; None (a null in the comparison) or False drops it."""
    return Filter(_ExprFilterRow((("", expr),)), name, _ExprFilterBatch(expr), expr)


def project(columns: tuple[Any, ...], named: dict[str, Any], name: str,
            keep_input: bool) -> Map:
    """The Map of ``select(*columns, **named)`` (``keep_input`` False) or
    ``with_columns(*columns, **named)`` (True): ``columns`` are column names or expressions
    that name their output (an alias, or a bare column); ``named`` maps output names to
    expressions or column names. Raises :class:`FlowDefinitionError` for an expression
    without a name, a value that is no expression, or a name given twice."""
    what = "with_columns" if keep_input else "select"
    pairs: list[tuple[str, Expr]] = []
    for c in columns:
        e = col(c) if isinstance(c, str) else c
        if not isinstance(e, Expr):
            raise FlowDefinitionError(
                f"{what} {name!r}: takes column names and column expressions, got "
                f"{type(c).__name__} {c!r}")
        if e.output_name is None:
            raise FlowDefinitionError(
                f"{what} {name!r}: the expression {e!r} has no name; give it one with "
                f".alias('name') or as name=expression")
        pairs.append((e.output_name, e))
    for out, v in named.items():
        e = col(v) if isinstance(v, str) else v
        if not isinstance(e, Expr):
            raise FlowDefinitionError(
                f"{what} {name!r}: {out}= takes a column expression or a column name, got "
                f"{type(v).__name__} {v!r}")
        pairs.append((out, e))
    if not pairs and not keep_input:
        raise FlowDefinitionError(f"select {name!r}: names no column")
    seen: set[str] = set()
    for out, _ in pairs:
        if out in seen:
            raise FlowDefinitionError(f"{what} {name!r}: the column {out!r} is given twice")
        seen.add(out)
    exprs = tuple(pairs)
    return Map(_ProjectRow(exprs, keep_input), name, _ProjectBatch(exprs, keep_input),
               exprs, keep_input)
