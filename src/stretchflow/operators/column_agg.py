"""Declarative aggregates (issue #31): keys and accumulators given by column, not by lambda.

``s.aggregate(size="10s", keys="auction", **count())`` says *what* it computes: group by the
column ``auction``, count the rows. An :class:`~.aggregate.Aggregate` built from such a
description knows its f_MK, f_U, combine and f_O exactly, so it can run them on whole Arrow
batches (:mod:`.column_forms`) as well as tuple at a time (this module), with the same
outputs. This module holds the description and its tuple-at-a-time form:

* :func:`parse_keys`: ``keys`` as a column name, a tuple of names and named expressions, a
  named :class:`~stretchflow.expr.Expr` or None (one group per window) -> :class:`KeySpec`
  (the key expressions, their output names);
* :class:`ColumnAgg`: the accumulator (``kind`` count, sum, min, max, mean or top_k, the value
  expression ``of``, the output field ``name``, ``k`` and ``largest`` for top_k) and the
  f_U / combine / f_O of its tuple path;
* :class:`DeclKeys`: f_MK of the tuple path, ``payload -> {key: value}`` (a dict: several
  keys, each with the value f_U receives, :mod:`.keys`), or None for no key.

Null semantics are SQL's: a row whose key (any key column) is null is in no window; sum, min,
max, mean and top_k skip a row whose value is null (f_MK gives it no key, so a key none of
whose rows has a value has no output, on both paths); count counts the rows with a non-null
key. The key of one key column is its value, of several the tuple of their values; keys=None
is the one key 0 (a constant, so every engine's hashing and key columns treat it as any key).

top_k (and arg_max/arg_min, k = 1) keeps, per key and window, every row whose value ranks
among the k best, ties included: rank(r) = 1 + #rows strictly better. Keeping the rows of rank
<= k is a homomorphism of multiset union (a row's better rows all rank better than it, so a
kept row's better rows are kept too and its rank is unchanged by pruning), hence the pruned
union of two pruned sets is the pruned union of the sets: combine is associative, any
slicing gives the same rows, on every engine. A row is kept iff its value is at least the
k-th best value counted with multiplicity.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ..errors import FlowDefinitionError
from ..expr import Expr, col

KINDS = ("count", "sum", "min", "max", "mean", "top_k")

_KEYS_HELP = "keys must be a callable, a column name, a tuple of names or a named expression"


# -- keys ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeySpec:
    """What ``keys=`` said: ``exprs`` the key expressions (None for a callable, ``()`` for
    keys=None), ``names`` their output field names, ``fn`` the callable if one was given."""

    exprs: tuple[Expr, ...] | None
    names: tuple[str, ...]
    fn: Callable[[Any], Any] | None = None


def parse_keys(keys: Any, op_name: str) -> KeySpec:
    """``keys`` as a :class:`KeySpec`; anything else is a FlowDefinitionError naming the
    operator."""
    if keys is None:
        return KeySpec((), ())
    if isinstance(keys, Expr) or isinstance(keys, str):
        keys = (keys,)
    elif callable(keys):
        return KeySpec(None, (), keys)
    if type(keys) is not tuple or not keys:
        raise FlowDefinitionError(f"aggregate {op_name!r}: {_KEYS_HELP}; got {keys!r}")
    exprs, names = [], []
    for k in keys:
        if isinstance(k, str):
            if not k:
                raise FlowDefinitionError(f"aggregate {op_name!r}: a key column name is a "
                                          f"non-empty str")
            e = col(k)
        elif isinstance(k, Expr):
            e = k
        else:
            raise FlowDefinitionError(f"aggregate {op_name!r}: {_KEYS_HELP}; got {k!r} in "
                                      f"{keys!r}")
        if e.output_name is None:
            raise FlowDefinitionError(
                f"aggregate {op_name!r}: the key {e!r} has no output name: give it one "
                f"with .alias(\"name\")")
        exprs.append(e)
        names.append(e.output_name)
    if len(set(names)) != len(names):
        raise FlowDefinitionError(f"aggregate {op_name!r}: two keys named alike: {names}")
    return KeySpec(tuple(exprs), tuple(names))


def as_expr(of: Any, what: str) -> Expr:
    """An accumulator's ``of`` given as a column name or an expression, as an Expr."""
    if isinstance(of, Expr):
        return of
    if isinstance(of, str) and of:
        return col(of)
    raise TypeError(f"{what}: of is a callable, a column name or an expression, got {of!r}")


def _row(e: Expr) -> Callable[[Any], Any]:
    # MissingColumn is a KeyError, not a StretchflowError: the executor reports it as this
    # operator's failure on the tuple (operator, tuple, column and the columns there are)
    return e.row_fn()


class DeclKeys:
    """f_MK of a declarative aggregate on one payload: ``{key: x}`` with ``x`` what f_U
    adds in (1 for count, the value for sum/min/max, ``(value, 1)`` ... see
    :meth:`ColumnAgg.x_of`), or None when a key or the value is null. With a callable
    ``keys`` its keys (one or several) each get ``x``. Picklable (SN processes): it keeps the
    expressions and compiles their row functions on first use."""

    def __init__(self, spec: KeySpec, agg: ColumnAgg):
        self.spec, self.agg = spec, agg
        self._fn: Callable[[Any], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "agg": self.agg, "_fn": None}

    def __call__(self, t: Any) -> Any:
        fn = self._fn
        if fn is None:
            fn = self._fn = self._compile()
        return fn(t)

    def _compile(self) -> Callable[[Any], Any]:
        spec, agg = self.spec, self.agg
        x_of = agg.x_of()
        if spec.exprs is None:
            user = spec.fn
            from .keys import one_key

            def by_callable(t: Any) -> Any:
                x = x_of(t)
                if x is None:
                    return None
                ks = one_key(user(t))  # type: ignore[misc]
                if not ks:
                    return None
                return {k: x for k in ks}
            return by_callable
        fns = [_row(e) for e in spec.exprs]
        if not fns:
            def no_keys(t: Any) -> Any:
                x = x_of(t)
                return None if x is None else {0: x}
            return no_keys
        if len(fns) == 1:
            (f,) = fns

            def one(t: Any) -> Any:
                k = f(t)
                if k is None:
                    return None
                x = x_of(t)
                return None if x is None else {k: x}
            return one

        def several(t: Any) -> Any:
            k = tuple(f(t) for f in fns)
            if None in k:
                return None
            x = x_of(t)
            return None if x is None else {k: x}
        return several


# -- the accumulator -------------------------------------------------------------------------
class ColumnAgg:
    """A declarative accumulator: ``kind`` (count, sum, min, max, mean, top_k), ``of`` (the
    value expression; None for count), ``name`` (its output field), ``k`` and ``largest``
    (top_k: how many ranks, best = largest or smallest). :func:`~.aggregate.count` and the
    other accumulator functions make one; the dict they return carries it as
    ``column_agg`` beside the tuple path's ``init``/``update``/``combine``, and an
    Aggregate whose ``update`` (and ``output``, if any) are this object's own is
    declarative (:attr:`~.aggregate.Aggregate.column_agg`)."""

    def __init__(self, kind: str, of: Expr | None, name: str, k: int | None = None,
                 largest: bool = True):
        if kind not in KINDS:
            raise ValueError(f"unknown accumulator kind {kind!r}")
        if kind == "top_k" and (type(k) is not int or k < 1):
            raise ValueError(f"top_k: k is a positive int, got {k!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind}: name is a non-empty str, got {name!r}")
        self.kind, self.of, self.name = kind, of, name
        self.k = k if kind == "top_k" else None
        self.largest = largest
        #: the tuple path's functions: ``update``/``output`` as handed to the user (the
        #: identity check that tells a declarative aggregate from one with the user's own)
        # a count's f_U on a payload is one addition: a plain function, one call per tuple
        # instead of _PayloadUpdate's three (the hot loop of a lambda flow's count)
        self.update: Callable[[Any, Any], Any] = \
            _count_update if kind == "count" else _PayloadUpdate(self)
        self.output: Callable[[Hashable, Any], Any] | None = \
            _MeanOutput(_pair) if kind == "mean" else None

    def __repr__(self) -> str:
        extra = f", k={self.k}, largest={self.largest}" if self.kind == "top_k" else ""
        return f"ColumnAgg({self.kind!r}, {self.of!r}, name={self.name!r}{extra})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (ColumnAgg, (self.kind, self.of, self.name, self.k, self.largest))

    # -- f_MK's value ----------------------------------------------------------------------------
    def x_of(self) -> Callable[[Any], Any]:
        """``payload -> x``, what :class:`DeclKeys` gives f_U for a row (None: skip it)."""
        kind = self.kind
        if kind == "count":
            return _one
        v = _row(self.of)  # type: ignore[arg-type]
        if kind == "mean":
            def pair(t: Any) -> Any:
                x = v(t)
                return None if x is None else (x, 1)
            return pair
        if kind == "top_k":
            def cand(t: Any) -> Any:
                x = v(t)
                return None if x is None else [(x, t)]
            return cand
        return v

    # -- the tuple path on x (DeclKeys' values) -------------------------------------------------
    def init(self) -> Callable[[], Any]:
        return {"count": int, "sum": int, "min": _none, "max": _none, "mean": _zero_pair,
                "top_k": list}[self.kind]

    def x_update(self) -> Callable[[Any, Any], Any]:
        """f_U ``acc, x -> acc`` where x is what :class:`DeclKeys` gives (count and sum add,
        so a run's x may be summed first: ``Aggregate.columns``)."""
        kind = self.kind
        if kind in ("count", "sum"):
            return operator.add
        if kind == "min":
            return _Either(min)
        if kind == "max":
            return _Either(max)
        if kind == "mean":
            return _add_pairs
        return TopK(self.k, self.largest, prune_at=2 * self.k + 8)  # type: ignore[arg-type]

    def combine(self) -> Callable[[Any, Any], Any]:
        kind = self.kind
        if kind == "top_k":
            return TopK(self.k, self.largest)  # type: ignore[arg-type]
        return self.x_update()

    def x_output(self, key_names: tuple[str, ...] | None) -> Callable[[Hashable, Any], Any]:
        """f_O: ``{key_name_1: k1, ..., name: value}`` (keys=None: ``{name: value}``; a
        callable keys: ``{"key": key, "value": value}`` as before issue #31); top_k: the
        list of its rows' payloads."""
        if self.kind == "top_k":
            return TopKOutput(self.k, self.largest)  # type: ignore[arg-type]
        return DeclOutput(key_names, self.name, self.kind == "mean")


# -- picklable pieces (SN processes pickle operators; closures would not) ---------------------
def _one(_: Any) -> int:
    return 1


def _none() -> None:
    return None


def _zero_pair() -> tuple[int, int]:
    return (0, 0)


def _add_pairs(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
    return (a[0] + b[0], a[1] + b[1])


def _pair(key: Hashable, acc: Any) -> dict:
    return {"key": key, "value": acc}


class _Either:
    """min/max with None (no value yet) as the identity; on ties the earlier stays (as
    Python's ``min(a, b)`` keeps ``a``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any, Any], Any]):
        self.fn = fn

    def __call__(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else self.fn(a, b)


class _MeanOutput:
    __slots__ = ("output",)

    def __init__(self, output: Callable[[Hashable, Any], Any]):
        self.output = output

    def __call__(self, key: Hashable, acc: tuple[Any, int]) -> Any:
        return self.output(key, acc[0] / acc[1])


def _count_update(acc: int, t: Any) -> int:
    """A count's f_U on a payload (``_PayloadUpdate`` of a count: x is always 1)."""
    return acc + 1


class _PayloadUpdate:
    """The ``update`` handed to the user in the accumulator's dict: f_U on a payload (what
    the aggregate's own f_MK gives when keys are a user's and the description was dropped).
    A declarative aggregate replaces it by :meth:`ColumnAgg.x_update` on f_MK's values."""

    def __init__(self, agg: ColumnAgg):
        self.agg = agg
        self._fn: Callable[[Any, Any], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"agg": self.agg, "_fn": None}

    def __call__(self, acc: Any, t: Any) -> Any:
        if self._fn is None:
            x_of, upd = self.agg.x_of(), self.agg.x_update()

            def fn(acc: Any, t: Any) -> Any:
                x = x_of(t)
                return acc if x is None else upd(acc, x)
            self._fn = fn
        return self._fn(acc, t)


class DeclOutput:
    """f_O of a declarative aggregate other than top_k (see :meth:`ColumnAgg.x_output`)."""

    __slots__ = ("names", "name", "mean")

    def __init__(self, names: tuple[str, ...] | None, name: str, mean: bool):
        self.names, self.name, self.mean = names, name, mean

    def __call__(self, key: Hashable, acc: Any) -> dict:
        v = acc[0] / acc[1] if self.mean else acc
        names = self.names
        if names is None:
            return {"key": key, "value": v}
        if len(names) == 1:
            return {names[0]: key, self.name: v}
        out = dict(zip(names, key, strict=True)) if names else {}  # type: ignore[arg-type]
        out[self.name] = v
        return out


def _kth(xs: list[Any], k: int, largest: bool) -> Any:
    """The k-th best of ``xs`` counted with multiplicity (``len(xs) >= k``)."""
    return (heapq.nlargest if largest else heapq.nsmallest)(k, xs)[-1]


def prune(cands: list[tuple[Any, Any]], k: int, largest: bool) -> list[tuple[Any, Any]]:
    """The candidates of rank <= k (ties included), in their order."""
    if len(cands) <= k:
        return cands
    kth = _kth([x for x, _ in cands], k, largest)
    if largest:
        return [c for c in cands if c[0] >= kth]
    return [c for c in cands if c[0] <= kth]


class TopK:
    """top_k's f_U and combine on candidate lists ``[(value, payload), ...]`` in arrival
    order: the concatenation, pruned to rank <= k once it holds over ``prune_at`` (f_U) or
    always (combine; its arguments are left as they are: a slice's list is combined again by
    later windows)."""

    __slots__ = ("k", "largest", "prune_at")

    def __init__(self, k: int, largest: bool, prune_at: int = 0):
        self.k, self.largest, self.prune_at = k, largest, prune_at

    def __call__(self, a: list, b: list) -> list:
        if self.prune_at:  # f_U: a is this (key, window)'s own list
            a.extend(b)
            if len(a) > self.prune_at:
                a[:] = prune(a, self.k, self.largest)
            return a
        return prune(a + b, self.k, self.largest)


class TopKOutput:
    """top_k's f_O: the payloads of the rows of rank <= k, in arrival order."""

    __slots__ = ("k", "largest")

    def __init__(self, k: int, largest: bool):
        self.k, self.largest = k, largest

    def __call__(self, key: Hashable, acc: list) -> list:
        return [t for _, t in prune(acc, self.k, self.largest)]


class KeysOnly:
    """f_MK from key expressions for an aggregate with the user's own f_U or f_O: the key
    (one value, or the tuple of several; 0 for keys=None), None when a key is null."""

    def __init__(self, spec: KeySpec):
        self.spec = spec
        self._fns: list[Callable[[Any], Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "_fns": None}

    def __call__(self, t: Any) -> Any:
        fns = self._fns
        if fns is None:
            fns = self._fns = [_row(e) for e in self.spec.exprs or ()]
        if len(fns) == 1:
            return fns[0](t)
        if not fns:
            return 0
        k = tuple(f(t) for f in fns)
        return None if None in k else k
