"""Column expressions (issue #31): what a declarative flow says about its tuples' fields.

``sf.col("price") * 0.9``, ``sf.col("category") == 10``, ``(sf.col("a") + 1).alias("b")``:
an :class:`Expr` is a small tree of operations on the fields of a dict payload. Unlike a
lambda it tells the engine what it computes, so one expression runs three ways with the same
result:

* on a whole batch's Arrow table (:meth:`Expr.arrow`): pyarrow compute kernels, or numpy
  where Arrow has no kernel with Python's meaning (``//`` and ``%``); no Python step per row;
* on one payload (:meth:`Expr.row_fn`): a Python closure compiled once per operator, for the
  tuple-at-a-time path and every engine that does not run batches;
* on Spark (``stretchflow.spark`` translates the tree into DataFrame columns: no Python worker).

Semantics are SQL's and Polars' where Python would differ, identically on every path:

* ``None`` (a JSON null) propagates: any arithmetic or comparison with None is None;
  ``&``/``|`` follow three-valued logic (``False & None`` is False, ``True | None`` True); a
  filter keeps a row only where its expression is True.
* ``/`` is true division (a float), ``//`` floor division and ``%`` Python's modulo (the sign
  of the divisor); division or modulo by zero is an error, as in Python.
* Integer arithmetic that overflows int64 is an error on a batch, which then goes tuple at a
  time (Python's integers do not overflow); every other kernel error does the same, so the
  tuple path names the tuple that fails.

A missing field is one clear error naming the column and the fields there are
(:class:`MissingColumn`); a payload that is not a dict is a TypeError saying so.

>>> import stretchflow as sf
>>> e = (sf.col("price") * 2 + 1).alias("p2")
>>> e.output_name, sorted(e.columns())
('p2', ['price'])
>>> e.row_fn()({"price": 10})
21
>>> (sf.col("x") > 3).row_fn()({"x": None}) is None
True
>>> sf.col("x").row_fn()({"y": 1})
Traceback (most recent call last):
...
stretchflow.expr.MissingColumn: no column 'x' (columns: y)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

from .errors import StretchflowError


class MissingColumn(StretchflowError, KeyError):
    """An expression names a field its payload or table does not have."""

    def __init__(self, column: str, available: Iterable[str]):
        self.column = column
        self.available = list(available)
        super().__init__(column)

    def __str__(self) -> str:
        have = ", ".join(map(str, self.available)) or "none"
        return f"no column {self.column!r} (columns: {have})"


# Binary operators: name -> (Python operator, Arrow compute function or None for numpy)
_ARITH = {
    "add": (operator.add, "add_checked"),
    "sub": (operator.sub, "subtract_checked"),
    "mul": (operator.mul, "multiply_checked"),
    "truediv": (operator.truediv, "divide_checked"),
    "floordiv": (operator.floordiv, None),
    "mod": (operator.mod, None),
}
_COMPARE = {
    "eq": (operator.eq, "equal"),
    "ne": (operator.ne, "not_equal"),
    "lt": (operator.lt, "less"),
    "le": (operator.le, "less_equal"),
    "gt": (operator.gt, "greater"),
    "ge": (operator.ge, "greater_equal"),
}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
           "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "and": "&", "or": "|"}


class Expr:
    """A column expression: ``op`` names the operation and ``args`` its operands (Exprs, or
    plain values for ``col``'s name, ``lit``'s value, ``is_in``'s set, ``alias``'s name).

    Build them with :func:`col`, :func:`lit` and Python's operators; never compare them with
    ``==`` to test equality (that builds an expression), use :meth:`same`."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, *args: Any):
        self.op = op
        self.args = args

    # -- building -----------------------------------------------------------------------------
    def _bin(self, op: str, other: Any, swap: bool = False) -> Expr:
        other = other if isinstance(other, Expr) else lit(other)
        return Expr(op, other, self) if swap else Expr(op, self, other)

    def __add__(self, o: Any) -> Expr: return self._bin("add", o)
    def __radd__(self, o: Any) -> Expr: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> Expr: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Expr: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> Expr: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Expr: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> Expr: return self._bin("truediv", o)
    def __rtruediv__(self, o: Any) -> Expr: return self._bin("truediv", o, True)
    def __floordiv__(self, o: Any) -> Expr: return self._bin("floordiv", o)
    def __rfloordiv__(self, o: Any) -> Expr: return self._bin("floordiv", o, True)
    def __mod__(self, o: Any) -> Expr: return self._bin("mod", o)
    def __rmod__(self, o: Any) -> Expr: return self._bin("mod", o, True)
    def __eq__(self, o: Any) -> Expr: return self._bin("eq", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Expr: return self._bin("ne", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Expr: return self._bin("lt", o)
    def __le__(self, o: Any) -> Expr: return self._bin("le", o)
    def __gt__(self, o: Any) -> Expr: return self._bin("gt", o)
    def __ge__(self, o: Any) -> Expr: return self._bin("ge", o)
    def __and__(self, o: Any) -> Expr: return self._bin("and", o)
    def __rand__(self, o: Any) -> Expr: return self._bin("and", o, True)
    def __or__(self, o: Any) -> Expr: return self._bin("or", o)
    def __ror__(self, o: Any) -> Expr: return self._bin("or", o, True)
    def __invert__(self) -> Expr: return Expr("not", self)
    def __neg__(self) -> Expr: return Expr("neg", self)
    def __abs__(self) -> Expr: return Expr("abs", self)

    __hash__ = object.__hash__  # __eq__ builds an expression; identity hashing stays usable

    def __bool__(self) -> bool:
        raise TypeError("a column expression has no truth value: combine conditions with "
                        "& | ~ (not and/or/not) and compare them with .same()")

    def alias(self, name: str) -> Expr:
        """This expression under the output name ``name`` (``select``, ``with_columns``,
        an aggregate's keys)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"alias: a name is a non-empty str, got {name!r}")
        inner = self.args[0] if self.op == "alias" else self
        return Expr("alias", inner, name)

    def is_in(self, values: Iterable[Any]) -> Expr:
        """True where the value is one of ``values`` (None where it is None)."""
        vals = tuple(values)
        return Expr("is_in", self, vals)

    def is_null(self) -> Expr:
        """True where the value is None (never None itself)."""
        return Expr("is_null", self)

    def is_not_null(self) -> Expr:
        """True where the value is not None."""
        return Expr("not_null", self)

    # -- reading ------------------------------------------------------------------------------
    @property
    def output_name(self) -> str | None:
        """The field name this expression produces: an alias, or a bare column's name;
        None for a computed expression without an alias."""
        if self.op == "alias":
            return self.args[1]
        if self.op == "col":
            return self.args[0]
        return None

    def columns(self) -> set[str]:
        """The names of the fields this expression reads."""
        if self.op == "col":
            return {self.args[0]}
        out: set[str] = set()
        for a in self.args:
            if isinstance(a, Expr):
                out |= a.columns()
        return out

    def same(self, other: Any) -> bool:
        """Structural equality (``==`` builds an expression instead)."""
        if not isinstance(other, Expr) or other.op != self.op or \
                len(other.args) != len(self.args):
            return False
        for a, b in zip(self.args, other.args, strict=True):
            if isinstance(a, Expr):
                if not a.same(b):
                    return False
            elif isinstance(b, Expr) or type(a) is not type(b) or a != b:
                return False
        return True

    def __repr__(self) -> str:
        op, a = self.op, self.args
        if op == "col":
            return f"col({a[0]!r})"
        if op == "lit":
            return f"lit({a[0]!r})"
        if op == "alias":
            return f"{a[0]!r}.alias({a[1]!r})"
        if op in _SYMBOL:
            return f"({a[0]!r} {_SYMBOL[op]} {a[1]!r})"
        if op == "not":
            return f"~{a[0]!r}"
        if op == "neg":
            return f"-{a[0]!r}"
        if op == "abs":
            return f"abs({a[0]!r})"
        if op == "is_in":
            return f"{a[0]!r}.is_in({list(a[1])!r})"
        return f"{a[0]!r}.{op}()"

    # -- one payload --------------------------------------------------------------------------
    def row_fn(self) -> Callable[[Any], Any]:
        """This expression as a function of one dict payload (compiled once: closures, no
        tree walk per call)."""
        return _compile_row(self)

    # -- a whole table ------------------------------------------------------------------------
    def arrow(self, table: Any) -> Any:
        """This expression over an Arrow table: an Arrow array of ``table.num_rows`` values
        (a literal is broadcast). Raises :class:`MissingColumn` for a field the table lacks,
        and Arrow's or numpy's error where a kernel refuses (the caller then takes the
        tuple path, which names the tuple)."""
        import pyarrow as pa

        out = _arrow(self, table)
        if isinstance(out, pa.Scalar):
            out = pa.array([out.as_py()] * table.num_rows, out.type)
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return out


def col(name: str) -> Expr:
    """The payload field ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"col: a column name is a non-empty str, got {name!r}")
    return Expr("col", name)


def lit(value: Any) -> Expr:
    """A constant (None, a bool, int, float or str)."""
    if value is not None and type(value) not in (bool, int, float, str):
        raise TypeError(f"lit: a constant is None, a bool, int, float or str, got "
                        f"{type(value).__name__}")
    return Expr("lit", value)


def is_expr(x: Any) -> bool:
    return isinstance(x, Expr)


# -- the row form ---------------------------------------------------------------------------------
def _compile_row(e: Expr) -> Callable[[Any], Any]:
    op, a = e.op, e.args
    if op == "col":
        name = a[0]

        def field(r: Any) -> Any:
            try:
                return r[name]
            except KeyError:
                raise MissingColumn(name, r) from None
            except TypeError:
                if type(r) is dict:
                    raise
                raise TypeError(f"a column expression needs dict payloads, got "
                                f"{type(r).__name__}") from None
        return field
    if op == "lit":
        v = a[0]
        return lambda r: v
    if op == "alias":
        return _compile_row(a[0])
    if op in _ARITH or op in _COMPARE:
        fn = (_ARITH.get(op) or _COMPARE[op])[0]
        f, g = _compile_row(a[0]), _compile_row(a[1])

        def binary(r: Any) -> Any:
            x, y = f(r), g(r)
            return None if x is None or y is None else fn(x, y)
        return binary
    if op == "and":
        f, g = _compile_row(a[0]), _compile_row(a[1])

        def and_(r: Any) -> Any:
            x, y = f(r), g(r)
            if x is False or y is False:
                return False
            return None if x is None or y is None else bool(x and y)
        return and_
    if op == "or":
        f, g = _compile_row(a[0]), _compile_row(a[1])

        def or_(r: Any) -> Any:
            x, y = f(r), g(r)
            if x is True or y is True:
                return True
            return None if x is None or y is None else bool(x or y)
        return or_
    if op in ("not", "neg", "abs"):
        f = _compile_row(a[0])
        fn1 = {"not": operator.not_, "neg": operator.neg, "abs": abs}[op]

        def unary(r: Any) -> Any:
            x = f(r)
            return None if x is None else fn1(x)
        return unary
    if op == "is_in":
        f, vals = _compile_row(a[0]), frozenset(a[1])

        def is_in(r: Any) -> Any:
            x = f(r)
            return None if x is None else x in vals
        return is_in
    if op in ("is_null", "not_null"):
        f, want = _compile_row(a[0]), op == "is_null"
        return lambda r: (f(r) is None) is want
    raise ValueError(f"unknown expression operation {op!r}")


# -- the Arrow form -------------------------------------------------------------------------------
def _arrow(e: Expr, table: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    op, a = e.op, e.args
    if op == "col":
        name = a[0]
        if name not in table.column_names:
            raise MissingColumn(name, table.column_names)
        return table.column(name)
    if op == "lit":
        return pa.scalar(a[0])
    if op == "alias":
        return _arrow(a[0], table)
    if op in _ARITH:
        x, y = _arrow(a[0], table), _arrow(a[1], table)
        kernel = _ARITH[op][1]
        if kernel is None:
            return _numpy_binary(op, x, y, table.num_rows)
        if op == "truediv":  # Python's / is a float whatever the operands
            x, y = pc.cast(x, pa.float64()), pc.cast(y, pa.float64())
        return getattr(pc, kernel)(x, y)
    if op in _COMPARE:
        return getattr(pc, _COMPARE[op][1])(_arrow(a[0], table), _arrow(a[1], table))
    if op == "and":
        return pc.and_kleene(_bool(_arrow(a[0], table)), _bool(_arrow(a[1], table)))
    if op == "or":
        return pc.or_kleene(_bool(_arrow(a[0], table)), _bool(_arrow(a[1], table)))
    if op == "not":
        return pc.invert(_bool(_arrow(a[0], table)))
    if op == "neg":
        return pc.negate_checked(_arrow(a[0], table))
    if op == "abs":
        return pc.abs_checked(_arrow(a[0], table))
    if op == "is_in":
        x = _arrow(a[0], table)
        vals = [v for v in a[1] if v is not None]
        out = pc.is_in(x, value_set=pa.array(vals, type=x.type) if vals else pa.array([], x.type))
        return pc.if_else(pc.is_null(x), pa.scalar(None, pa.bool_()), out)
    if op == "is_null":
        return pc.is_null(_arrow(a[0], table))
    if op == "not_null":
        return pc.is_valid(_arrow(a[0], table))
    raise ValueError(f"unknown expression operation {op!r}")


def _bool(x: Any) -> Any:
    """Logic takes booleans only (Python's ``and`` of two ints is not a bool): anything else
    is refused, and the batch goes tuple at a time."""
    import pyarrow as pa

    if not pa.types.is_boolean(x.type) and not pa.types.is_null(x.type):
        raise TypeError(f"& | ~ need booleans, got {x.type}")
    return x


def _numpy_binary(op: str, x: Any, y: Any, n: int) -> Any:
    """``//`` and ``%`` with Python's meaning (floor, the divisor's sign), by numpy: Arrow has
    no such kernel. Nulls propagate; a zero divisor is an error, as in Python."""
    import numpy as np
    import pyarrow as pa

    xs, xm = _numpy(x, n)
    ys, ym = _numpy(y, n)
    mask = xm | ym
    if np.any((ys == 0) & ~mask):
        raise ZeroDivisionError(f"{_SYMBOL[op]} by zero")
    ys = np.where(mask, 1, ys)  # masked rows: any divisor; their result is null
    out = np.floor_divide(xs, ys) if op == "floordiv" else np.remainder(xs, ys)
    return pa.array(out, mask=mask if mask.any() else None)


def _numpy(x: Any, n: int) -> tuple[Any, Any]:
    """An Arrow value (array or scalar) of numbers as (numpy values, null mask)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(x, pa.Scalar):
        if not x.is_valid:
            return np.zeros(n, np.int64), np.ones(n, bool)
        v = x.as_py()
        if type(v) not in (int, float):
            raise TypeError(f"// and % need numbers, got {type(v).__name__}")
        return np.full(n, v), np.zeros(n, bool)
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    if not (pa.types.is_integer(x.type) or pa.types.is_floating(x.type)):
        raise TypeError(f"// and % need numbers, got {x.type}")
    mask = x.is_null().to_numpy(zero_copy_only=False) if x.null_count else np.zeros(n, bool)
    vals = x.fill_null(0).to_numpy(zero_copy_only=False) if x.null_count else \
        x.to_numpy(zero_copy_only=False)
    if pa.types.is_unsigned_integer(x.type):
        vals = vals.astype(np.int64)
    return vals, mask
