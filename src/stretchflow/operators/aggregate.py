"""A+: the O+ with one input (journal Definition 5, Theorem 2; Appendix D, Op. 9 and Op. 14).

A user gives ``keys`` (f_MK), ``init``/``update`` for a per-(key, window) accumulator and
``output(key, acc)`` (f_O). With WT ``multi`` each window instance holds its accumulator and
``update(acc, value) -> acc`` runs once per (key, window) the tuple falls in, as in Op. 14.
With WT ``single`` the window set stores its tuples (Table I's default f_U and f_S) and f_O
folds ``update`` over them when the instance expires, so both types give the same results.

Columnar form (optional): an A+ whose f_U adds (``update(acc, v) == acc + v``) may also give
``columns``, f_MK over a whole list of payloads at once (e.g. Arrow compute over a record
batch). :meth:`AggregateInstance.process_columns` / :meth:`AggregateInstance.process_keyed`
then take many tuples per call: values are summed per (window, key) with Arrow and f_U runs
once per (window, key) with the sum. The Spark engine uses it; any executor may.

Declarative form (issue #31): ``keys`` a column name, a tuple of names and named expressions or
None, and an accumulator given by column (``**count()``, ``**sum_of("price")``, ...:
:mod:`.column_agg`). The aggregate then knows f_MK, f_U, combine and f_O exactly and has
columnar forms without the user writing them (:mod:`.column_forms`).

Sliced form (optional): an A+ with WT multi and sliding windows (WA < WS) whose accumulators
combine (``combine(a, b)``, associative, ``init()`` its identity, consistent with ``update``)
keeps per key one accumulator per *slice* of width gcd(WS, WA) instead of one per window
instance, so a tuple costs one f_U instead of WS/WA; a window's accumulator is combined from its
slices when it expires (general stream slicing: Scotty, Traub et al., EDBT 2019; Hazelcast Jet's
accumulate-combine-finish). See :mod:`.slicing`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..errors import FlowDefinitionError, RunTupleError
from ..expr import Expr
from .aggregate_instance import _MISSING, AggregateInstance
from .column_agg import (
    ColumnAgg,
    DeclKeys,
    KeysOnly,
    _add_pairs,
    _Either,
    _MeanOutput,
    _none,
    _pair,
    _row,
    as_expr,
    parse_keys,
)
from .keys import input_keys_fn, one_key_fn
from .oplus import OPlus, OPlusInstance, SharedState, WindowSet
from .slicing import SlicedAggregateInstance


class Aggregate(OPlus):
    """A+ with an accumulator.

    With WT multi, sliding windows (WA < WS) and a ``combine`` (associative, ``init()`` its
    identity, ``fold(update, A ++ B) == combine(fold(update, A), fold(update, B))``), the
    instances slice (:attr:`sliced`, :mod:`.slicing`): one f_U per (tuple, key) instead of
    one per window instance, the same outputs. :func:`count`, :func:`sum_of`, :func:`min_of`,
    :func:`max_of` and :func:`mean_of` give such ``init``/``update``/``combine``.

    >>> from stretchflow.operators.aggregate import Aggregate, sum_of
    >>> per_user = Aggregate(size=10, keys="user", **sum_of("n"))
    >>> inst = per_user.instance()
    >>> inst.process(1, {"user": "a", "n": 2}); inst.process(3, {"user": "a", "n": None})
    >>> inst.finish(); inst.take()
    [(10, {'user': 'a', 'sum': 2})]
    >>> count = Aggregate(size=10, slide=10, keys=lambda t: t.split(), init=lambda: 0,
    ...                   update=lambda acc, t: acc + 1,
    ...                   output=lambda k, acc: {"word": k, "count": acc})
    >>> inst = count.instance()
    >>> inst.process(1, "a b"); inst.process(3, "a"); inst.finish()
    >>> inst.take()
    [(10, {'word': 'a', 'count': 2}), (10, {'word': 'b', 'count': 1})]
    """

    def __init__(
        self,
        *,
        size: int | str,
        slide: int | str | None = None,
        keys: Any,
        init: Callable[[], Any],
        update: Callable[[Any, Any], Any],
        output: Callable[[Hashable, Any], Any] | None = None,
        window_type: str = "multi",
        f_mu: Callable[[Hashable, int], int] | None = None,
        name: str = "aggregate",
        columns: Callable[[Sequence[Any]], tuple[Any, Any, Any]] | None = None,
        combine: Callable[[Any, Any], Any] | None = None,
        output_columns: tuple[str, ...] | None = None,
        column_agg: ColumnAgg | None = None,
    ):
        spec = parse_keys(keys, name)
        #: the key expressions (issue #31): None when ``keys`` is a callable, ``()`` for
        #: keys=None (one group per window), else one Expr per key field
        self.key_exprs: tuple[Expr, ...] | None = spec.exprs
        #: the output field names of the keys (``()`` for a callable or keys=None)
        self.key_names: tuple[str, ...] = spec.names
        if column_agg is not None and (update is not column_agg.update or (
                output is not None and output is not column_agg.output)):
            column_agg = None  # the user's own f_U or f_O: opaque, tuple at a time
        #: the declarative accumulator (:class:`~.column_agg.ColumnAgg`: ``kind``, ``of``,
        #: ``name``, ``k``, ``largest``) when both f_U and f_O are the accumulator's own,
        #: else None. With key expressions it gives the A+ its columnar forms.
        self.column_agg = column_agg
        if column_agg is not None:
            keys, init = DeclKeys(spec, column_agg), column_agg.init()
            update, combine = column_agg.x_update(), column_agg.combine()
            output = column_agg.x_output(None if spec.exprs is None else spec.names)
        elif spec.exprs is not None:
            keys = KeysOnly(spec)
        #: f_O returns a list of payloads (top_k: one output tuple per row kept)
        self.many_outputs = column_agg is not None and column_agg.kind == "top_k"
        # f_MK, its result read by one_key: a str/number/tuple is one key (issue #18)
        self.user_keys = one_key_fn(keys)
        #: ``combine(a, b)``: the accumulator of the tuples of ``a`` followed by those of ``b``.
        #: Given, and with WT multi and WA < WS, the instances slice (:attr:`sliced`). It must
        #: be associative with ``init()`` as identity and consistent with ``update``:
        #: ``fold(update, A ++ B) == combine(fold(update, A), fold(update, B))`` for any runs
        #: A, B (then outputs equal the unsliced ones). It is applied in time order (it need
        #: not commute) and, like f_O, must not modify its arguments: a slice's accumulator
        #: is still needed by the next windows. Every engine slices the same way, so even an
        #: inexact combine (float addition) gives the same output on every engine.
        self.combine = combine
        #: vectorized f_MK, ``columns(payloads) -> (rows, keys, values)``: for every payload
        #: ``payloads[r]``, the (key, value) pairs with ``rows == r``, summed per key, equal
        #: ``keys(payloads[r])`` as a dict (a key may repeat: its values add up).
        #: ``payloads`` is a list of payloads or a batch's Arrow table. ``rows`` a numpy
        #: integer array, ``keys`` an Arrow string array (or, for keys that are tuples, a
        #: tuple of Arrow arrays, one per component; Spark's columnar stage takes only the
        #: former), ``values`` a numpy int64 array. Only for an f_U that adds
        #: (``update(acc, v) == acc + v``, ``init()`` its zero) and WT multi: the instance
        #: then sums a key's values of many tuples before calling f_U once. It may raise on
        #: payloads it cannot handle; callers then take the tuple-at-a-time path, which
        #: reports the offending tuple.
        self.columns = columns
        #: f_O's columnar form: ``(key_field, value_field)`` when ``output(key, acc)`` is
        #: always ``{key_field: key, value_field: acc}`` (wordcount's ``("word", "count")``),
        #: or ``(key_field_1, ..., key_field_m, value_field)`` for keys that are m-tuples
        #: (paircount's ``("first", "second", "count")``). With ``columns`` and ``combine``
        #: it lets a window's whole output be one Arrow table (:mod:`.columnar`: batches in,
        #: tables out, no Python step per row).
        if output_columns is not None and (len(output_columns) < 2
                                           or len(set(output_columns)) != len(output_columns)):
            raise ValueError(f"{name}: output_columns needs two or more different field "
                             f"names, got {output_columns!r}")
        self.output_columns = tuple(output_columns) if output_columns is not None else None
        if columns is None and self.column_agg is not None and spec.exprs is not None and \
                self.column_agg.kind in ("count", "sum"):
            from .column_forms import DeclColumns

            # issue #16's columns protocol (SN's process channels take it): int64 values
            # that f_U adds, for a declarative count or integer sum
            self.columns = DeclColumns(self)
        self.user_init = init
        self.user_update = update
        self.user_output = output if output is not None else _pair
        super().__init__(
            size=size,
            slide=slide,
            inputs=1,
            keys=input_keys_fn([keys]),
            window_type=window_type,
            f_mu=f_mu,
            output=self._fold_output,
            name=name,
        )

    def check_columns(self, available: Sequence[str]) -> list[str] | None:
        """Before a run whose input schema is known (Parquet, a typed source): raises
        FlowDefinitionError naming this operator, the column and ``available`` when a key or
        value expression reads a column not in ``available``; returns the columns of this
        aggregate's outputs (``[key names..., name]``; top_k: ``available``, its rows as they
        are), or None where they are not known (a callable ``keys``, or the user's own f_O)."""
        have = list(available)
        need = []
        for e in self.key_exprs or ():
            need.extend(sorted(e.columns()))
        agg = self.column_agg
        if agg is not None and agg.of is not None:
            need.extend(sorted(agg.of.columns()))
        for c in need:
            if c not in have:
                raise FlowDefinitionError(
                    f"aggregate {self.name!r}: no column {c!r} (columns: "
                    f"{', '.join(have) or 'none'})")
        if agg is None or self.key_exprs is None:
            return None
        if agg.kind == "top_k":
            return have
        return [*self.key_names, agg.name]

    @property
    def sliced(self) -> bool:
        """Whether instances keep slices (WT multi, a ``combine``, sliding windows: with
        WA == WS a window is its own slice and slicing would only add bookkeeping)."""
        return self.combine is not None and self.WT == "multi" and self.WA < self.WS

    @property
    def slice_width(self) -> int:
        """gcd(WS, WA): every window boundary is a slice boundary (Scotty's slices for
        sliding windows), so a window is exactly a run of whole slices."""
        return math.gcd(self.WS, self.WA)

    def _fold_output(self, ws: WindowSet) -> list:
        """f_O when the window set stores its tuples (WT single, or WT multi through the
        generic instance, as the slack engine runs it): aggregate them. For a sliced A+ the
        fold runs per slice and the slices combine in time order, as the sliced instance
        computes, so the result is the same to the last bit even for an inexact combine."""
        init, upd = self.user_init, self.user_update
        acc = _MISSING
        part: Any = _MISSING
        cur = None
        width = self.slice_width if self.sliced else 0
        combine = self.combine
        for ts, v in ws.states[0]:
            if width:
                s = ts - ts % width
                if s != cur:
                    if part is not _MISSING:
                        acc = part if acc is _MISSING else combine(acc, part)  # type: ignore
                    cur, part = s, init()
            elif part is _MISSING:
                part = init()
            try:
                part = upd(part, v)
            except Exception as e:
                # the update runs at expiry here: name the tuple it failed on, not the one
                # whose watermark closed the window (every engine names the same tuple)
                raise RunTupleError(ts, v, e) from e
        if part is not _MISSING:
            acc = part if acc is _MISSING else combine(acc, part)  # type: ignore[misc]
        res = self.user_output(ws.key, init() if acc is _MISSING else acc)
        if res is None:
            return []
        return list(res) if self.many_outputs else [res]

    def output_table(self, key_columns: list[str], table: Any) -> Any:
        """f_O's columnar form (:attr:`output_columns`): a window's table of key column(s)
        ``key_columns`` and accumulator column ``v`` as its output table."""
        import pyarrow as pa

        *names, v = self.output_columns  # type: ignore[misc]
        if len(names) != len(key_columns):
            raise ValueError(f"{self.name}: output_columns names {len(names)} key field(s), "
                             f"f_MK's columnar form gave {len(key_columns)}")
        return pa.table({**{n: table.column(k) for n, k in zip(names, key_columns,
                                                                strict=True)},
                         v: table.column("v")})

    @property
    def columnar(self) -> bool:
        """Whether whole batches can run through Arrow kernels, windows coming out as tables
        (:mod:`.columnar`): a declarative aggregate with key expressions, or a hand-written
        columnar f_MK, f_O and ``combine``; WT multi (:func:`.column_forms.form_of`)."""
        from .columnar import applies

        return applies(self)

    def columnar_instance(self) -> OPlusInstance:
        """The instance taking whole batches (:class:`~.columnar.ColumnarSlicedInstance`):
        one instance owning every key (the sequential case)."""
        from .columnar import ColumnarSlicedInstance

        if not self.columnar:
            raise ValueError(f"{self.name}: needs key expressions and a declarative "
                             f"accumulator, or columns=, output_columns= and combine=, with "
                             f"WT multi to run on columns")
        return ColumnarSlicedInstance(self)

    def instance(self, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None) -> OPlusInstance:
        if self.WT == "single":
            return OPlusInstance(self, sigma, j, assign)
        if self.sliced:

            return SlicedAggregateInstance(self, sigma, j, assign)
        return AggregateInstance(self, sigma, j, assign)




# -- built-in accumulators ---------------------------------------------------------------------
# Each returns the ``init``/``update``/``combine`` keyword arguments of :class:`Aggregate` (and
# ``output`` for mean, whose accumulator needs a finishing step), so that
# ``Aggregate(size=..., keys=..., **sum_of("x"))`` slices. ``of`` is a column name or an
# expression (``sf.col("price") * 0.9``): the aggregate is then declarative (the dict carries
# ``column_agg``) and runs on Arrow batches where the engine runs batches; or a callable, as
# before issue #31, mapping what f_U receives (the tuple, or the value f_MK's dict gives the
# key) to the aggregated number (by default, of=None, that value itself).

def count(name: str = "count") -> dict[str, Any]:
    """The number of tuples per (key, window), output as ``name``."""
    return _declared(ColumnAgg("count", None, name), int, operator.add)


def sum_of(of: Any = None, name: str = "sum") -> dict[str, Any]:
    """The sum of the values per (key, window). Exact for integers (a sum beyond int64 runs
    tuple at a time with Python's integers); floats add in the tuple path's order where the
    engine can (docs/columnar.md)."""
    if of is None or callable(of) and not isinstance(of, Expr):
        return {"init": int, "update": _Fold(operator.add, of), "combine": operator.add}
    return _declared(ColumnAgg("sum", as_expr(of, "sum_of"), name), int, operator.add)


def min_of(of: Any = None, name: str = "min") -> dict[str, Any]:
    """The least value per (key, window). The accumulator starts as None, the identity of
    combine (a key is in a window only once a tuple updated it)."""
    if of is None or callable(of) and not isinstance(of, Expr):
        return {"init": _none, "update": _Fold(min, of), "combine": _Either(min)}
    return _declared(ColumnAgg("min", as_expr(of, "min_of"), name), _none, _Either(min))


def max_of(of: Any = None, name: str = "max") -> dict[str, Any]:
    """The greatest value per (key, window); see :func:`min_of`."""
    if of is None or callable(of) and not isinstance(of, Expr):
        return {"init": _none, "update": _Fold(max, of), "combine": _Either(max)}
    return _declared(ColumnAgg("max", as_expr(of, "max_of"), name), _none, _Either(max))


def mean_of(of: Any = None, output: Callable[[Hashable, Any], Any] | None = None,
            name: str = "mean") -> dict[str, Any]:
    """The mean of the values per (key, window): a (sum, count) accumulator, which combines
    by adding both, finished by ``output(key, sum / count)`` (with a column or expression
    ``of`` and no ``output``: ``{key fields..., name: mean}``; with a callable ``of`` and no
    ``output``: ``{"key": key, "value": mean}``)."""
    if of is None or callable(of) and not isinstance(of, Expr) or output is not None:
        fn = of if of is None or callable(of) and not isinstance(of, Expr) \
            else _row(as_expr(of, "mean_of"))
        return {"init": _zero_pair, "update": _MeanUpdate(fn), "combine": _add_pairs,
                "output": _MeanOutput(output if output is not None else _pair)}
    agg = ColumnAgg("mean", as_expr(of, "mean_of"), name)
    return {**_declared(agg, _zero_pair, _add_pairs), "output": agg.output}


def top_k(of: Any, k: int, name: str | None = None, largest: bool = True) -> dict[str, Any]:
    """Per (key, window), the rows whose value ranks among the ``k`` largest (``largest=
    False``: smallest), ties included (rank = 1 + the rows strictly better); each such row's
    payload is one output tuple, as it is, at the window's end. ``of`` is a column name or
    an expression; rows whose value is null are not candidates."""
    agg = ColumnAgg("top_k", as_expr(of, "top_k"), name or "top_k", k, largest)
    return _declared(agg, list, agg.combine())


def arg_max(of: Any, name: str | None = None) -> dict[str, Any]:
    """The row(s) with the greatest value per (key, window): :func:`top_k` with k = 1."""
    return top_k(of, 1, name or "arg_max")


def arg_min(of: Any, name: str | None = None) -> dict[str, Any]:
    """The row(s) with the least value per (key, window): :func:`top_k` with k = 1,
    smallest first."""
    return top_k(of, 1, name or "arg_min", largest=False)


def _declared(agg: ColumnAgg, init: Callable[[], Any],
              combine: Callable[[Any, Any], Any]) -> dict[str, Any]:
    return {"init": init, "update": agg.update, "combine": combine, "column_agg": agg}


def _zero_pair() -> tuple[int, int]:
    return (0, 0)


class _Fold:
    """f_U ``acc, v -> fn(acc, of(v))``; an accumulator of None (min/max's init) takes the
    first value. A class, not a closure, so that it pickles by reference (SN processes)."""

    __slots__ = ("fn", "of")

    def __init__(self, fn: Callable[[Any, Any], Any], of: Callable[[Any], Any] | None):
        self.fn, self.of = fn, of

    def __call__(self, acc: Any, v: Any) -> Any:
        x = v if self.of is None else self.of(v)
        return x if acc is None else self.fn(acc, x)


class _MeanUpdate:
    __slots__ = ("of",)

    def __init__(self, of: Callable[[Any], Any] | None):
        self.of = of

    def __call__(self, acc: tuple[Any, int], v: Any) -> tuple[Any, int]:
        return (acc[0] + (v if self.of is None else self.of(v)), acc[1] + 1)
