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
  tuple path names the tuple that fails. The Arrow form also refuses wherever its kernels
  would give another value or type than Python (an int beyond 2**53 against a float, values
  of an int and a float type in one result, ``str()`` of text ``int()`` reads but Arrow's
  cast does not): refusing costs speed, never a different output.
* ``.cast(...)`` is Python's ``int()``/``float()``/``str()``/``bool()``; ``.str.starts_with``,
  ``.ends_with``, ``.contains`` (literal), ``.len()``; ``+`` of two strings concatenates;
  ``.fill_null(v)``; ``when(c).then(a).otherwise(b)``.

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


class MissingColumn(KeyError):
    """An expression names a field its payload or table does not have.

    Not a :class:`~stretchflow.errors.StretchflowError`: like a ``KeyError`` in a lambda it
    is the user's function failing on a tuple, so the executor wraps it in an
    :class:`~stretchflow.errors.OperatorError` that names the operator and the tuple
    (``operator 'f' failed on tuple ts=3 payload={...}: MissingColumn: no column 'pricee'
    (columns: ts, price)``)."""

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
_REPR = {"col": "col({0!r})", "lit": "lit({0!r})", "alias": "{0!r}.alias({1!r})",
         "not": "~{0!r}", "neg": "-{0!r}", "abs": "abs({0!r})", "cast": "{0!r}.cast({1!r})",
         "fill_null": "{0!r}.fill_null({1!r})"}
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

    def fill_null(self, value: Any) -> Expr:
        """``value`` (a constant or an expression) where this is None, else this."""
        return Expr("fill_null", self, value if isinstance(value, Expr) else lit(value))

    def cast(self, dtype: str | type) -> Expr:
        """This value converted as Python's ``int()``, ``float()``, ``str()`` or ``bool()``
        converts it: ``dtype`` is ``"int64"`` (or ``"int"``, ``int``), ``"float64"``
        (``"float"``, ``float``), ``"string"`` (``"str"``, ``str``) or ``"bool"`` (``bool``).
        A float becomes an int truncated toward zero; a str an int only if ``int()`` takes
        it (else the error ``int()`` gives); ``str`` of a float is its ``repr`` (``"1.0"``),
        of a bool ``"True"``/``"False"``; ``bool`` of a str is whether it is non-empty.
        None stays None."""
        name = _CASTS.get(dtype) if isinstance(dtype, str | type) else None
        if name is None:
            raise TypeError(f"cast: the type is one of 'int64', 'float64', 'string', 'bool' "
                            f"(or int, float, str, bool), got {dtype!r}")
        return Expr("cast", self, name)

    @property
    def str(self) -> StrOps:
        """String operations: ``.str.starts_with(s)``, ``.str.ends_with(s)``,
        ``.str.contains(s)`` (``s`` a literal substring) and ``.str.len()``."""
        return StrOps(self)

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
        if op in _REPR:
            return _REPR[op].format(*a)
        if op in _SYMBOL:
            return f"({a[0]!r} {_SYMBOL[op]} {a[1]!r})"
        if op == "is_in":
            return f"{a[0]!r}.is_in({list(a[1])!r})"
        if op in _STR:
            return f"{a[0]!r}.str.{_STR[op]}({', '.join(map(repr, a[1:]))})"
        if op == "case":
            arms = "".join(f".when({c!r}).then({v!r})" for c, v in zip(a[:-1:2], a[1:-1:2],
                                                                        strict=True))
            return f"{arms[1:]}.otherwise({a[-1]!r})"
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
            out = pa.repeat(out, table.num_rows)
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


def when(condition: Expr) -> When:
    """``when(c).then(a).otherwise(b)``: ``a`` where ``c`` is True, else ``b`` (a None
    condition counts as not True); more arms with ``.when(c2).then(a2)`` before
    ``.otherwise``, the first True one winning. Without ``.otherwise`` the rest is None.
    The row form evaluates only the chosen value; the Arrow form evaluates every value on
    every row, so a value that fails on rows its condition excludes (``10 // x`` where
    ``x`` is 0) makes the batch go tuple at a time, with the same result."""
    return When((), condition)


class When:
    """A condition waiting for its value (:func:`when`)."""

    __slots__ = ("arms", "condition")

    def __init__(self, arms: tuple[Any, ...], condition: Any):
        if not isinstance(condition, Expr):
            raise TypeError(f"when: a condition is a column expression, got "
                            f"{type(condition).__name__}")
        self.arms, self.condition = arms, condition

    def then(self, value: Any) -> Case:
        """The value where the condition is True."""
        v = value if isinstance(value, Expr) else lit(value)
        return Case("case", *self.arms, self.condition, v, lit(None))


class Case(Expr):
    """``when(...).then(...)``: an expression (None where no condition is True) that takes
    more arms (:meth:`when`) and a default (:meth:`otherwise`)."""

    __slots__ = ()

    def when(self, condition: Expr) -> When:
        return When(self.args[:-1], condition)

    def otherwise(self, value: Any) -> Expr:
        v = value if isinstance(value, Expr) else lit(value)
        return Expr("case", *self.args[:-1], v)


class StrOps:
    """``expr.str``: string operations on a column of str values (anything else is a
    TypeError; None stays None)."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr):
        self.expr = expr

    def _literal(self, what: str, s: Any) -> Any:
        if not isinstance(s, str):
            raise TypeError(f"str.{what}: takes a str literal, got {type(s).__name__}")
        return s

    def starts_with(self, prefix: str) -> Expr:
        """True where the value starts with ``prefix``."""
        return Expr("str_starts", self.expr, self._literal("starts_with", prefix))

    def ends_with(self, suffix: str) -> Expr:
        """True where the value ends with ``suffix``."""
        return Expr("str_ends", self.expr, self._literal("ends_with", suffix))

    def contains(self, substring: str) -> Expr:
        """True where ``substring`` (literal text, not a pattern) occurs in the value."""
        return Expr("str_contains", self.expr, self._literal("contains", substring))

    def len(self) -> Expr:
        """The number of characters (code points, Python's ``len``)."""
        return Expr("str_len", self.expr)


_CASTS: dict[Any, str] = {"int64": "int64", "int": "int64", int: "int64",
                          "float64": "float64", "float": "float64", float: "float64",
                          "string": "string", "str": "string", str: "string",
                          "bool": "bool", bool: "bool"}
_STR = {"str_starts": "starts_with", "str_ends": "ends_with", "str_contains": "contains",
        "str_len": "len"}


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
    if op in ("and", "or"):
        f, g = _compile_row(a[0]), _compile_row(a[1])
        # the value that decides alone, whatever the other (None included): False for &
        dominant = op == "or"
        both = (lambda x, y: bool(x and y)) if op == "and" else (lambda x, y: bool(x or y))

        def logic(r: Any) -> Any:
            x, y = f(r), g(r)
            if x is dominant or y is dominant:
                return dominant
            return None if x is None or y is None else both(x, y)
        return logic
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
    if op == "fill_null":
        f, g = _compile_row(a[0]), _compile_row(a[1])

        def fill_null(r: Any) -> Any:
            x = f(r)
            return g(r) if x is None else x
        return fill_null
    if op == "cast":
        f, to = _compile_row(a[0]), {"int64": int, "float64": float, "string": str,
                                     "bool": bool}[a[1]]

        def cast(r: Any) -> Any:
            x = f(r)
            return None if x is None else to(x)
        return cast
    if op in _STR:
        f, what = _compile_row(a[0]), _STR[op]
        fn2: Callable[[str], Any] = {
            "str_starts": lambda x, s=a[-1]: x.startswith(s),
            "str_ends": lambda x, s=a[-1]: x.endswith(s),
            "str_contains": lambda x, s=a[-1]: s in x,
            "str_len": len}[op]

        def string(r: Any) -> Any:
            x = f(r)
            if x is None:
                return None
            if type(x) is not str:
                raise TypeError(f"str.{what}() needs str values, got {type(x).__name__} "
                                f"{x!r}")
            return fn2(x)
        return string
    if op == "case":
        arms = [(_compile_row(c), _compile_row(v)) for c, v in zip(a[:-1:2], a[1:-1:2],
                                                                    strict=True)]
        default = _compile_row(a[-1])

        def case(r: Any) -> Any:
            for c, v in arms:
                b = c(r)
                if b is True:
                    return v(r)
                if b is not None and b is not False:
                    raise TypeError(f"when() needs a boolean condition, got "
                                    f"{type(b).__name__} {b!r}")
            return default(r)
        return case
    raise ValueError(f"unknown expression operation {op!r}")


# -- the Arrow form -------------------------------------------------------------------------------
def _arrow(e: Expr, table: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    op, a = e.op, e.args
    if op == "col":
        return _column(table, a[0])
    if op == "lit":
        return arrow_scalar(a[0])
    if op == "alias":
        return _arrow(a[0], table)
    if op in _ARITH:
        x, y = _arrow(a[0], table), _arrow(a[1], table)
        kernel = _ARITH[op][1]
        if op == "add" and _is_str(x.type) and _is_str(y.type):  # Python's str + str
            return pc.binary_join_element_wise(x, y, "")
        if kernel is None:
            return _numpy_binary(op, x, y, table.num_rows)
        if op == "truediv":  # Python's / is a float whatever the operands
            # numbers only: a cast would parse a string column ("1.5" / "2" is an error in
            # Python); a safe cast refuses an int beyond 2**53 (Python divides ints exactly)
            for v in (x, y):
                if not (pa.types.is_integer(v.type) or pa.types.is_floating(v.type)
                        or pa.types.is_null(v.type)):
                    raise TypeError(f"/ needs numbers, got {v.type}")
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
        if pa.types.is_null(x.type):
            return arrow_scalar(None, pa.bool_())
        out = pc.is_in(x, value_set=_py_array(_value_set(a[1], x.type), x.type))
        return pc.if_else(pc.is_null(x), arrow_scalar(None, pa.bool_()), out)
    if op == "is_null":
        return pc.is_null(_arrow(a[0], table))
    if op == "not_null":
        return pc.is_valid(_arrow(a[0], table))
    if op == "fill_null":
        x, y = _arrow(a[0], table), _arrow(a[1], table)
        if pa.types.is_null(x.type):
            return y
        if pa.types.is_null(y.type):
            return x
        _same_type(x, y)
        return pc.coalesce(x, y)
    if op == "cast":
        return _cast(_arrow(a[0], table), a[1])
    if op in _STR:
        x = _arrow(a[0], table)
        if pa.types.is_null(x.type):
            return arrow_scalar(None, pa.int64() if op == "str_len" else pa.bool_())
        if not _is_str(x.type):
            raise TypeError(f"str.{_STR[op]}() needs strings, got {x.type}")
        if op == "str_len":
            return pc.cast(pc.utf8_length(x), pa.int64())
        kernel = {"str_starts": pc.starts_with, "str_ends": pc.ends_with,
                  "str_contains": pc.match_substring}[op]
        return kernel(x, pattern=a[1])
    if op == "case":
        conds = [_bool(_arrow(c, table)) for c in a[:-1:2]]
        vals = [_arrow(v, table) for v in a[1::2]] + [_arrow(a[-1], table)]
        typed = [v for v in vals if not pa.types.is_null(v.type)]
        if not typed:
            return arrow_scalar(None)
        for v in typed[1:]:
            _same_type(typed[0], v)
        t = typed[0].type
        n = table.num_rows
        conds = [_broadcast(pc.cast(c, pa.bool_()), n) for c in conds]
        vals = [_broadcast(v if v.type == t else pc.cast(v, t), n) for v in vals]
        return pc.case_when(pc.make_struct(*conds, field_names=[str(i) for i in
                                                                  range(len(conds))]),
                            *vals)
    raise ValueError(f"unknown expression operation {op!r}")


def _column(table: Any, name: str) -> Any:
    """A column as an operand, in the type its Python values have: any integer type as
    int64 (an int32 sum overflows where Python's does not; a uint64 beyond int64 refuses),
    float32 as float64. Other than numbers, strings, booleans and nulls (dates, decimals,
    lists...) is refused: Python's operations on their objects are not Arrow's kernels."""
    import pyarrow as pa

    if name not in table.column_names:
        raise MissingColumn(name, table.column_names)
    c = table.column(name)
    t = c.type
    if pa.types.is_integer(t):
        return c if t == pa.int64() else c.cast(pa.int64())
    if pa.types.is_floating(t):
        return c if t == pa.float64() else c.cast(pa.float64())
    if _is_str(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return c
    raise TypeError(f"column {name!r} is of type {t}: expressions take numbers, strings and "
                    f"booleans on batches (the tuple path takes it)")


def _value_set(values: tuple[Any, ...], t: Any) -> list[Any]:
    """The values Python's ``==`` finds equal to some value of a column of type ``t``
    (``1 == 1.0 == True``), in that type; the others can match no row."""
    import pyarrow as pa

    if any(type(v) is float and v != v for v in values):  # Python's `in` finds no NaN read
        raise ValueError("is_in: NaN in the values")      # from a row; Arrow's is_in would
    out: list[Any] = []
    for v in values:
        if v is None or type(v) not in (bool, int, float, str):
            continue
        if _is_str(t):
            if type(v) is str:
                out.append(v)
        elif type(v) is str:
            continue
        elif pa.types.is_integer(t):
            if (type(v) is not float or v.is_integer()) and -(1 << 63) <= v < (1 << 63):
                out.append(int(v))
        elif pa.types.is_floating(t):
            if type(v) is float or float(v) == v:  # an int a float cannot hold equals none
                out.extend((0.0, -0.0) if v == 0 else (float(v),))  # Arrow tells them apart
        elif pa.types.is_boolean(t):
            if v in (0, 1):
                out.append(bool(v))
        else:
            raise TypeError(f"is_in on a {t} column")
    return out


def _is_str(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _same_type(x: Any, y: Any) -> None:
    """Refuses values of two types where Python keeps each row's own (an int where one
    operand is an int, a float where the other is): Arrow would make both one type."""
    if x.type != y.type:
        raise TypeError(f"values of types {x.type} and {y.type} in one column")


# Arrow values built from their buffers: pyarrow's own pa.scalar and pa.array import pandas
# on first use (~0.25 s and tens of MB at start-up, measured with pyarrow 26), which a flow
# that never needs pandas must not pay for (batch.arrow_ints says the same)
def _py_array(values: list[Any], t: Any) -> Any:
    """Python values (None for null) as an Arrow array of type ``t`` (int64, float64,
    string or bool)."""
    import numpy as np
    import pyarrow as pa

    from .batch import arrow_ints, arrow_mask, arrow_strings

    if t == pa.int64():
        arr = arrow_ints(np.array([0 if v is None else v for v in values], np.int64))
    elif t == pa.float64():
        arr = _py_numpy(np.array([0.0 if v is None else v for v in values], np.float64))
    elif _is_str(t):
        arr = arrow_strings(["" if v is None else v for v in values])
    elif pa.types.is_boolean(t):
        arr = arrow_mask([bool(v) for v in values])
    elif pa.types.is_null(t):
        return pa.nulls(len(values))
    else:
        raise TypeError(f"no Arrow array of {t} here")
    valid = [v is not None for v in values]
    if all(valid):
        return arr
    return pa.Array.from_buffers(arr.type, len(arr), [arrow_mask(valid).buffers()[1],
                                                      *arr.buffers()[1:]])


def _py_numpy(values: Any, mask: Any = None) -> Any:
    """A numpy int64 or float64 array as an Arrow array, null where ``mask`` is True."""
    import numpy as np
    import pyarrow as pa

    from .batch import arrow_mask

    values = np.ascontiguousarray(values)
    t = {"i": pa.int64(), "f": pa.float64()}[values.dtype.kind]
    values = values.astype(np.int64 if t == pa.int64() else np.float64, copy=False)
    validity = None if mask is None or not mask.any() else arrow_mask(~mask).buffers()[1]
    return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(values)])


def arrow_scalar(v: Any, t: Any = None) -> Any:
    """A Python constant as an Arrow scalar (``t``: the type of a null). An int beyond int64
    is refused: Arrow has no type for Python's large ints."""
    import pyarrow as pa

    if v is None:
        return pa.nulls(1, t or pa.null())[0]
    kind = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}[type(v)]
    if kind == pa.int64() and not -(1 << 63) <= v < (1 << 63):
        raise OverflowError(f"{v} is beyond int64")
    return _py_array([v], kind)[0]


def _broadcast(x: Any, n: int) -> Any:
    import pyarrow as pa

    return pa.repeat(x, n) if isinstance(x, pa.Scalar) else x


#: what ``int()`` and ``float()`` take that Arrow's casts read the same way (anything else,
#: "+1", " 1", "1_000", "nan", "١", goes tuple at a time, where Python decides)
_INT_TEXT = r"^-?[0-9]+$"
_FLOAT_TEXT = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"


def _cast(x: Any, to: str) -> Any:
    """``int()``, ``float()``, ``str()`` or ``bool()`` of each value, by kernels."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = x.type
    if pa.types.is_null(t):
        return x
    if isinstance(x, pa.Scalar):
        v = x.as_py()
        if v is None:  # a typed null (a string op on a null literal): null, as the row form
            return arrow_scalar(None, getattr(pa, "string" if to == "string" else
                                              "bool_" if to == "bool" else to)())
        return arrow_scalar({"int64": int, "float64": float, "string": str, "bool": bool}[to](v))
    if to == "int64":
        if pa.types.is_integer(t) or pa.types.is_boolean(t):
            return pc.cast(x, pa.int64())
        if pa.types.is_floating(t):  # int() truncates toward zero; NaN, inf, > int64 refuse
            return pc.cast(pc.trunc(x), pa.int64())
        if _is_str(t):
            if pc.all(pc.match_substring_regex(x, _INT_TEXT)).as_py() is False:
                raise ValueError("cast: a string int() reads differently")
            return pc.cast(x, pa.int64())
    elif to == "float64":
        if pa.types.is_integer(t):  # rounded to the nearest double, as float() rounds
            return pc.cast(x, pa.float64(), safe=False)
        if pa.types.is_floating(t) or pa.types.is_boolean(t):
            return pc.cast(x, pa.float64())
        if _is_str(t):
            if pc.all(pc.match_substring_regex(x, _FLOAT_TEXT)).as_py() is False:
                raise ValueError("cast: a string float() reads differently")
            return pc.cast(x, pa.float64())
    elif to == "string":
        if _is_str(t):
            return x
        if pa.types.is_integer(t):
            return pc.cast(x, pa.string())
        if pa.types.is_boolean(t):
            return pc.if_else(x, arrow_scalar("True"), arrow_scalar("False"))
        if pa.types.is_floating(t):  # str(1.0) is "1.0", Arrow's cast writes "1": repr each
            return _py_array([None if v is None else repr(v) for v in x.to_pylist()],
                             pa.string())
    elif to == "bool":
        if pa.types.is_boolean(t):
            return x
        if pa.types.is_integer(t) or pa.types.is_floating(t):  # NaN is True, as bool(nan)
            return pc.not_equal(x, arrow_scalar(0 if pa.types.is_integer(t) else 0.0))
        if _is_str(t):
            return pc.greater(pc.binary_length(x), 0)
    raise TypeError(f"cast to {to}: a {t} column goes tuple at a time")


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

    xs, xm = _numpy(x, n)
    ys, ym = _numpy(y, n)
    mask = xm | ym
    if np.any((ys == 0) & ~mask):
        raise ZeroDivisionError(f"{_SYMBOL[op]} by zero")
    ys = np.where(mask, 1, ys)  # masked rows: any divisor; their result is null
    if xs.dtype.kind == "i" and ys.dtype.kind == "i" and op == "floordiv" and \
            np.any((xs == np.iinfo(np.int64).min) & (ys == -1)):
        raise OverflowError("// overflows int64")  # Python's int gives 2**63
    with np.errstate(all="ignore"):  # inf and NaN give what Python's floats give
        out = np.floor_divide(xs, ys) if op == "floordiv" else np.remainder(xs, ys)
    return _py_numpy(out, mask)


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
    if pa.types.is_integer(x.type):
        t, dt = pa.int64(), np.int64  # a uint64 beyond int64 refuses (a safe cast)
    elif pa.types.is_floating(x.type):
        t, dt = pa.float64(), np.float64
    else:
        raise TypeError(f"// and % need numbers, got {x.type}")
    if x.type != t:
        x = x.cast(t)
    # read off the buffers: to_numpy imports pandas (batch.int_numpy says why not)
    vals = np.frombuffer(x.buffers()[1], dt, len(x), x.offset * np.dtype(dt).itemsize)
    if not x.null_count:
        return vals, np.zeros(n, bool)
    bits = np.frombuffer(x.buffers()[0], np.uint8)
    mask = np.unpackbits(bits, bitorder="little")[x.offset:x.offset + len(x)] == 0
    return np.where(mask, dt(0), vals), mask
