"""Column expressions (:mod:`stretchflow.expr`) as Spark columns, with Python's meaning.

A native Spark plan (:mod:`.native`) evaluates an :class:`~stretchflow.expr.Expr` in the JVM
(no Python worker), so the translation must give what :meth:`Expr.row_fn` gives on every
row, or refuse. Three ways out keep it exact:

* **not native** (:class:`NotNative`, decided while planning): a form whose Spark meaning
  differs from Python's and has no exact rewrite — ``//`` and ``%`` of floats, ``&``/``|``/
  ``~`` of non-booleans, ``<`` between a string and a number (a TypeError in Python), an
  unknown operation. The flow then runs on the Python O+ path.
* **escape** (:func:`escape`, at run time): a value for which the cheap Spark form would
  round differently raises an error carrying :data:`ESCAPE`, and the plan re-runs on the
  Python path: ``int / int`` beyond 2**53 (Python rounds the exact quotient once; Spark
  divides two rounded doubles). Spark's own ANSI errors (``long`` overflow, division by
  zero) do the same: Python's integers do not overflow, and its ZeroDivisionError names the
  tuple.
* **guards** (:attr:`Translator.guards`): Python evaluates every subexpression of every row
  an operator reads, Spark only what the result needs — it prunes unused columns, pushes
  filters under projections and short-circuits ``AND``/``OR``. A division by zero Python
  would raise can thus vanish in Spark. Each division by anything but a non-zero constant
  leaves a guard, true where its divisor is 0 and its dividend is not None; the plan checks
  the guards over the operator's whole input before trusting the native result.

What is exact as is: ``+ - *`` of ints (Spark ``long``, ANSI overflow errors) and floats
(IEEE doubles in both), ``/`` of floats, comparisons of two ints, two strings (UTF-8 byte
order is code point order), two booleans, SQL's three-valued ``AND``/``OR``/``NOT`` (the
row form's), ``is_null``. Rewritten: ``//`` and ``%`` of ints from Spark's truncating
``div`` and remainder with Python's floor correction; comparisons involving floats with
Python's NaN (unequal to everything; Spark orders NaN above all numbers and equal to itself);
an int against a float compared exactly (Spark would round the int to a double); ``==`` and
``!=`` between unrelated types (False / True, as in Python); ``is_in`` with the values
filtered to those that can equal the column's type; booleans in arithmetic and comparisons
with numbers as 0 and 1 (Python's ``bool`` is an ``int``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from ..expr import Expr

#: the kinds of values a column holds (Spark type): int (long), float (double), str (string),
#: bool (boolean), null (only None)
INT, FLOAT, STR, BOOL, NULL = "int", "float", "str", "bool", "null"
_NUMBERS = (INT, FLOAT, BOOL)

#: the text an :func:`escape` error carries: the native plan re-runs on the Python path
ESCAPE = "stretchflow-native-escape"

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
#: every int of magnitude up to this is exactly a double
_EXACT = 1 << 53

_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
_STR_OPS = {"str_starts", "str_ends", "str_contains", "str_len"}
#: ``a OP b`` is ``b FLIP[OP] a``
_FLIP = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


class NotNative(Exception):
    """An expression (or an operator) that the native plan cannot run with Python's meaning;
    the message says why (it goes to the run summary)."""


def quote(name: str) -> str:
    """``name`` as a Spark column reference (backticks: dots and spaces are literal)."""
    return "`" + name.replace("`", "``") + "`"


def kind_of(data_type: Any) -> str | None:
    """The kind of a Spark data type, or None for a type expressions do not take."""
    name = type(data_type).__name__
    return {"LongType": INT, "DoubleType": FLOAT, "StringType": STR, "BooleanType": BOOL,
            "NullType": NULL}.get(name)


def spark_type(kind: str) -> str:
    return {INT: "long", FLOAT: "double", STR: "string", BOOL: "boolean", NULL: "void"}[kind]


def escape(reason: str) -> Any:
    """A column that fails the Spark job with :data:`ESCAPE` and ``reason`` when evaluated."""
    from pyspark.sql import functions as F

    return F.raise_error(F.lit(f"{ESCAPE}: {reason}"))


def null_of(kind: str) -> Any:
    """A typed null."""
    from pyspark.sql import functions as F

    return F.lit(None).cast(spark_type(kind)) if kind != NULL else F.lit(None)


class Translator:
    """Translates expressions over one DataFrame whose fields have the kinds ``kinds``
    (``{name: kind}``, None for a type expressions do not take); ``where`` names the operator
    in reasons; ``names`` maps a field to its Spark column's name where they differ (the
    native plan's columns are ``c0``, ``c1``...: no quoting, no case folding). Collects
    :attr:`guards`."""

    def __init__(self, kinds: dict[str, str | None], where: str,
                 names: dict[str, str] | None = None):
        self.kinds = kinds
        self.where = where
        self.names = names
        #: boolean columns, true on a row where Python raises ZeroDivisionError
        self.guards: list[Any] = []

    def column(self, e: Expr) -> tuple[Any, str]:
        """``(Spark column, kind)`` of ``e``; raises :class:`NotNative`."""
        from pyspark.sql import functions as F

        op, a = e.op, e.args
        if op == "col":
            name = a[0]
            if name not in self.kinds:
                raise NotNative(f"{self.where}: no column {name!r}")
            kind = self.kinds[name]
            if kind is None:
                raise NotNative(f"{self.where}: column {name!r} is not a number, string or "
                                f"boolean")
            return F.col(self.names[name] if self.names else quote(name)), kind
        if op == "lit":
            return _literal(a[0], self.where)
        if op == "alias":
            return self.column(a[0])
        if op in ("add", "sub", "mul", "truediv", "floordiv", "mod"):
            return self._arith(op, a[0], a[1])
        if op in _COMPARE:
            (x, kx), (y, ky) = self.column(a[0]), self.column(a[1])
            return _compare(op, x, kx, y, ky, self.where), BOOL
        if op in ("and", "or"):
            (x, kx), (y, ky) = self.column(a[0]), self.column(a[1])
            for k in (kx, ky):
                if k not in (BOOL, NULL):
                    raise NotNative(f"{self.where}: & and | of {k} values (Python's and/or "
                                    f"of non-booleans has no SQL form)")
            x, y = _typed(x, kx, BOOL), _typed(y, ky, BOOL)
            return (x & y if op == "and" else x | y), BOOL
        if op == "not":
            x, k = self.column(a[0])
            if k not in (BOOL, NULL):
                raise NotNative(f"{self.where}: ~ of {k} values")
            return ~_typed(x, k, BOOL), BOOL
        if op in ("neg", "abs"):
            x, k = self.column(a[0])
            if k == NULL:
                return x, NULL
            if k not in _NUMBERS:
                raise NotNative(f"{self.where}: {op} of {k} values")
            x, k = _numeric(x, k)
            return (-x if op == "neg" else F.abs(x)), k
        if op == "is_in":
            x, k = self.column(a[0])
            return _is_in(x, k, a[1], self.where), BOOL
        if op in ("is_null", "not_null"):
            x, _ = self.column(a[0])
            return (x.isNull() if op == "is_null" else x.isNotNull()), BOOL
        if op == "fill_null":
            x, kx = self.column(a[0])
            with self.only_where(x.isNull()):  # Python evaluates the value only there
                y, ky = self.column(a[1])
            kind = _one_kind(self.where, "fill_null", [kx, ky])
            return F.coalesce(_typed(x, kx, kind), _typed(y, ky, kind)), kind
        if op == "cast":
            return _cast(*self.column(a[0]), a[1], self.where)
        if op in _STR_OPS:
            x, k = self.column(a[0])
            out_kind = INT if op == "str_len" else BOOL
            if k == NULL:
                return null_of(out_kind), out_kind
            if k != STR:
                raise NotNative(f"{self.where}: string operation on {k} values (a TypeError "
                                f"in Python)")
            if op == "str_len":
                return F.length(x).cast("long"), INT  # characters: code points, as len()
            fn = {"str_starts": F.startswith, "str_ends": F.endswith,
                  "str_contains": F.contains}[op]
            return fn(x, F.lit(a[1])), BOOL
        if op == "case":
            return self._case(a)
        raise NotNative(f"{self.where}: expression operation {op!r} has no native form")

    @contextlib.contextmanager
    def only_where(self, condition: Any) -> Iterator[None]:
        """Within: what is translated is evaluated by Python only on rows where
        ``condition`` is True (a when arm, a fill_null value), so its guards hold only there."""
        start = len(self.guards)
        yield
        cond = F_coalesce_false(condition)
        self.guards[start:] = [cond & g for g in self.guards[start:]]

    def _case(self, a: tuple[Any, ...]) -> tuple[Any, str]:
        """``when(c1).then(v1)...otherwise(d)``: Python tries the conditions in order and
        evaluates only the chosen value; Spark's CASE WHEN the same. A condition must be a
        boolean (else Python raises), the values of one kind (else the column would mix)."""
        from pyspark.sql import functions as F

        reached = F.lit(True)  # no earlier condition was True
        conds, vals, kinds = [], [], []
        for c, v in zip(a[:-1:2], a[1:-1:2], strict=True):
            with self.only_where(reached):
                cx, ck = self.column(c)
            if ck not in (BOOL, NULL):
                raise NotNative(f"{self.where}: a when() condition of {ck} values (a "
                                f"TypeError in Python)")
            cx = _typed(cx, ck, BOOL)
            with self.only_where(reached & F_coalesce_false(cx)):
                vx, vk = self.column(v)
            conds.append(cx)
            vals.append(vx)
            kinds.append(vk)
            reached = reached & ~F_coalesce_false(cx)
        with self.only_where(reached):
            dx, dk = self.column(a[-1])
        kind = _one_kind(self.where, "when()", kinds + [dk])
        out = None
        for cx, vx, vk in zip(conds, vals, kinds, strict=True):
            v = _typed(vx, vk, kind)
            out = F.when(cx, v) if out is None else out.when(cx, v)
        return out.otherwise(_typed(dx, dk, kind)), kind

    def _arith(self, op: str, ea: Expr, eb: Expr) -> tuple[Any, str]:
        from pyspark.sql import functions as F

        (x, kx), (y, ky) = self.column(ea), self.column(eb)
        if op == "add" and STR in (kx, ky) and {kx, ky} <= {STR, NULL}:  # str + str
            return (null_of(STR) if NULL in (kx, ky) else F.concat(x, y)), STR
        for k in (kx, ky):
            if k not in _NUMBERS and k != NULL:
                sym = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//",
                       "mod": "%"}[op]
                raise NotNative(f"{self.where}: {sym} of {k} values")
        if op in ("floordiv", "mod") and FLOAT in (kx, ky):
            raise NotNative(f"{self.where}: // and % of floats (Python's floor and sign of "
                            f"zero have no exact Spark form)")
        result = FLOAT if op == "truediv" or FLOAT in (kx, ky) else INT
        if NULL in (kx, ky):
            return null_of(result), result  # None with anything is None (never raises)
        x, kx = _numeric(x, kx)
        y, ky = _numeric(y, ky)
        if op in ("truediv", "floordiv", "mod") and not _nonzero_constant(eb):
            self.guards.append((y == 0) & x.isNotNull())
        if op == "add":
            return x + y, result
        if op == "sub":
            return x - y, result
        if op == "mul":
            return x * y, result
        if op == "truediv":
            if kx == INT and ky == INT:
                # Python rounds the exact quotient; two doubles are exact up to 2**53
                exact = x.between(-_EXACT, _EXACT) & y.between(-_EXACT, _EXACT)
                return (F.when(x.isNull() | y.isNull(), null_of(FLOAT))
                        .when(exact, x / y)
                        .otherwise(escape(f"{self.where}: int / int beyond 2**53"))), FLOAT
            return x / y, FLOAT
        q = F.call_function("div", x, y)  # truncates toward zero; long.MIN div -1 overflows
        r = x % y  # Java's remainder: the dividend's sign
        off = (r != 0) & ((r < 0) != (y < 0))  # Python floors: one less, the divisor's sign
        if op == "floordiv":
            return F.when(off, q - 1).otherwise(q), INT
        return F.when(off, r + y).otherwise(r), INT


def F_coalesce_false(c: Any) -> Any:  # noqa: N802 - reads as the Spark function it wraps
    """True where ``c`` is True (None counts as not True, as for a when() condition)."""
    from pyspark.sql import functions as F

    return F.coalesce(c, F.lit(False))


def _one_kind(where: str, what: str, kinds: list[str]) -> str:
    """The one kind the values of ``kinds`` share (None fits any); a mix of kinds (an int
    here, a float there) has no column type that keeps each value's own."""
    found = {k for k in kinds if k != NULL}
    if len(found) > 1:
        raise NotNative(f"{where}: {what} of {' and '.join(sorted(found))} values (one "
                        f"column cannot keep each value's type)")
    return found.pop() if found else NULL


def _cast(x: Any, kind: str, to: str, where: str) -> tuple[Any, str]:
    """Python's ``int()``, ``float()``, ``str()``, ``bool()`` of a value of ``kind``."""
    from pyspark.sql import functions as F

    want = {"int64": INT, "float64": FLOAT, "string": STR, "bool": BOOL}[to]
    if kind == NULL:
        return null_of(want), want
    if kind == want:
        return x, want
    if kind == STR and want in (INT, FLOAT):
        raise NotNative(f"{where}: {to} of strings (Python's int()/float() read text Spark's "
                        f"cast does not)")
    if kind == FLOAT and want == STR:
        raise NotNative(f"{where}: str() of floats (Python's repr differs from Spark's)")
    if want == STR:  # of an int (decimal digits in both) or a bool (True/False)
        if kind == BOOL:
            return F.when(x, F.lit("True")).when(~x, F.lit("False")), STR  # None: None
        return x.cast("string"), STR
    if want == BOOL:
        if kind == STR:
            return F.length(x) > 0, BOOL
        return x != F.lit(0).cast(spark_type(kind)), BOOL  # NaN is True in both
    # int of a float truncates toward zero in both (NaN, inf and beyond the longs are ANSI
    # errors: Python raises or makes a big int, the Python path decides); float of an int
    # rounds to nearest in both; of a bool 0 and 1
    return x.cast(spark_type(want)), want


def _nonzero_constant(e: Expr) -> bool:
    while e.op == "alias":
        e = e.args[0]
    return e.op == "lit" and type(e.args[0]) in (int, float) and e.args[0] != 0


def _literal(v: Any, where: str) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    if v is None:
        return F.lit(None), NULL
    if type(v) is bool:
        return F.lit(v), BOOL
    if type(v) is int:
        if not _I64_MIN <= v <= _I64_MAX:
            raise NotNative(f"{where}: the constant {v} is beyond 64-bit integers")
        return F.lit(v).cast("long"), INT
    if type(v) is float:
        return F.lit(v).cast("double"), FLOAT
    if type(v) is str:
        return F.lit(v), STR
    raise NotNative(f"{where}: constant {v!r}")


def _typed(x: Any, kind: str, want: str) -> Any:
    return null_of(want) if kind == NULL else x


def _numeric(x: Any, kind: str) -> tuple[Any, str]:
    """A boolean as the int Python's ``bool`` is (0, 1)."""
    return (x.cast("long"), INT) if kind == BOOL else (x, kind)


def _compare(op: str, x: Any, kx: str, y: Any, ky: str, where: str) -> Any:
    from pyspark.sql import functions as F

    if NULL in (kx, ky):
        return null_of(BOOL)
    if kx in _NUMBERS and ky in _NUMBERS:
        if kx == BOOL and ky == BOOL:
            return _plain(op, x, y)
        x, kx = _numeric(x, kx)
        y, ky = _numeric(y, ky)
        if kx == INT and ky == INT:
            return _plain(op, x, y)
        if kx == FLOAT and ky == FLOAT:
            # Python: NaN is unequal to everything and not ordered (Spark: NaN = NaN, and
            # NaN above every number)
            return F.when(F.isnan(x) | F.isnan(y), F.lit(op == "ne")).otherwise(_plain(op, x, y))
        if kx == FLOAT:  # float OP int is int FLIP(OP) float
            return _int_float(_FLIP[op], y, x)
        return _int_float(op, x, y)
    if kx == ky:  # two strings
        return _plain(op, x, y)
    if op in ("eq", "ne"):  # unrelated types are never equal in Python
        return F.when(x.isNull() | y.isNull(), null_of(BOOL)).otherwise(F.lit(op == "ne"))
    raise NotNative(f"{where}: {op} between {kx} and {ky} values (a TypeError in Python)")


def _plain(op: str, x: Any, y: Any) -> Any:
    return {"eq": lambda: x == y, "ne": lambda: x != y, "lt": lambda: x < y,
            "le": lambda: x <= y, "gt": lambda: x > y, "ge": lambda: x >= y}[op]()


def _int_float(op: str, i: Any, d: Any) -> Any:
    """``i OP d`` for a long ``i`` and a double ``d``, exactly as Python compares an int with
    a float (Spark would round ``i`` to a double first). With ``f = floor(d)`` (an integral
    double, exact as a long when within its range) and ``frac = d != f``: ``i == d`` iff
    ``not frac and i == f``; ``i < d`` iff ``i < f or (i == f and frac)``; ``i <= d`` iff
    ``i <= f``; the others are negations. A ``d`` beyond the longs decides by its sign."""
    from pyspark.sql import functions as F

    f = F.floor(d)  # a long; only evaluated for d within the longs
    frac = d != f.cast("double")
    if op in ("eq", "ne"):
        eq = ~frac & (i == f)
        core = eq if op == "eq" else ~eq
    elif op in ("lt", "ge"):
        lt = (i < f) | ((i == f) & frac)
        core = lt if op == "lt" else ~lt
    else:
        le = i <= f
        core = le if op == "le" else ~le
    above = op in ("ne", "lt", "le")  # i OP d when d is above every long
    below = op in ("ne", "gt", "ge")
    return (F.when(i.isNull() | d.isNull(), null_of(BOOL))
            .when(F.isnan(d), F.lit(op == "ne"))
            .when(d >= float(1 << 63), F.lit(above))
            .when(d < -float(1 << 63), F.lit(below))
            .otherwise(core))


def _is_in(x: Any, kind: str, values: tuple[Any, ...], where: str) -> Any:
    """``x in set(values)`` with Python's equality: only values that can equal an ``x`` of
    this kind are kept, converted to its type (2 == 2.0 == True's 1, but 2**53 + 1 is no
    float); NaN equals nothing (Spark's IN would match NaN to NaN)."""
    from pyspark.sql import functions as F

    if kind == NULL:
        return null_of(BOOL)
    keep: list[Any] = []
    if kind == STR:
        keep = [v for v in values if type(v) is str]
    elif kind in _NUMBERS:
        nums = [v for v in values if type(v) in (int, float, bool)]
        if kind == BOOL and any(type(v) is not bool for v in nums):
            x, kind = _numeric(x, kind)
        if kind == BOOL:
            keep = nums
        elif kind == INT:
            for v in nums:
                if type(v) is float and not (math.isfinite(v) and v == int(v)):
                    continue  # no int equals it
                v = int(v)
                if _I64_MIN <= v <= _I64_MAX:
                    keep.append(v)
        else:  # FLOAT
            for v in nums:
                if type(v) is not float and float(v) != v:  # exact in Python
                    continue
                v = float(v)
                if not math.isnan(v):
                    keep.append(v)
    else:
        raise NotNative(f"{where}: is_in of {kind} values")
    keep = list(dict.fromkeys(keep))
    if not keep:
        return F.when(x.isNull(), null_of(BOOL)).otherwise(F.lit(False))
    typed = [F.lit(v).cast(spark_type(kind)) for v in keep]
    out = x.isin(*typed)
    if kind == FLOAT:
        out = F.when(F.isnan(x), F.lit(False)).otherwise(out)
    return out
