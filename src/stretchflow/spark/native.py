"""Bounded expression flows as Spark's own DataFrame operations: no Python worker (issue #31).

A flow whose every operator is declarative — ``filter(expr)``, ``select``, ``with_columns``,
and aggregates with column keys and a built-in accumulator (count, sum, min, max, mean,
top_k) in ``multi`` windows — compiles to filters, projections, ``explode`` of window ends,
``groupBy().agg()`` and ``rank()`` window functions that Spark runs in its JVM, with the
reference executor's output. Any other flow runs on the Python O+ path (:mod:`.batch`), and
:func:`run` says, per operator, which path it took and why (``extra["spark_native"]``).

Reading: the sources are read on the driver by stretchflow's own readers (``Source.batches``,
else ``items``), so a malformed record is the same one-line error as on the local engines.
A batch's Arrow table states its records exactly or there is none (:mod:`stretchflow.batch`,
:mod:`stretchflow.io.batches`: no field missing from some, no int beside floats); records
without one are not native. The tables are written to one uncompressed Parquet file in a
scratch directory that Spark reads (``createDataFrame`` from Arrow keeps the data in the
driver JVM's heap: 1 M bids ran it out of its 1 GB; on a non-local master the tables go
through it all the same, the scratch file being on the driver only). Each tuple carries its
timestamp (column ``t``, the payload's own ts field when it holds the same) and, when a sum
or mean may add floats, its position in the source (``q``, the order they add in); payload
fields are columns ``c1, c2, ...`` (:class:`Stream` maps names to them: no quoting, no case
folding).

Windows: an aggregate's tuple at ``ts`` falls in the instances ``[l, l+WS)`` with ``l`` a
multiple of WA, ``l <= ts < l + WS``; each row is exploded into the ends ``l + WS`` of its
windows (at most ``ceil(WS/WA)``, computed with ``pmod`` on longs: exact for negative ``ts``)
and grouped by (end, keys). A window appears once a row counts in it; its output carries
``ts = l + WS``. Float sums and means add in the reference's order (per slice of width
gcd(WS, WA) in arrival order, then the slices in time order: :mod:`~stretchflow.operators.
slicing`) with ``collect_list``, ``array_sort`` and ``aggregate`` — still in the JVM.

Exactness at run time (:mod:`.exprs`): Spark's ANSI errors (long overflow, division by
zero, a cast out of range) and the plan's own escapes (``int / int`` beyond 2**53, a mean of
ints whose sum is beyond 2**53, a NaN or -0.0 where Python's order of comparisons decides)
stop the native plan and the flow re-runs on the Python path, whose result (big ints) or
error (naming the tuple) is the reference's. So does a division by zero that Spark's plan
would have skipped (:attr:`.exprs.Translator.guards`, checked before the results are read).

Sinks: every sink's stream is collected on the driver (``toArrow``) before any is written,
sorted by ts and written through the stretchflow sink as batches (the same files as the local
engines).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import time
from dataclasses import dataclass, replace
from typing import Any

from ..batch import arrow_ints
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..io.sources import LateSource
from ..operators.aggregate import Aggregate
from ..operators.stateless import Filter, FlatMap, Map
from ..runtime.sinks import sink_session
from . import errors
from .exprs import (
    BOOL,
    ESCAPE,
    FLOAT,
    INT,
    NULL,
    STR,
    NotNative,
    Translator,
    escape,
    spark_type,
)

#: the value of ``extra["spark_native"][op]`` for an operator that ran in Spark's JVM
NATIVE = "native"
#: the hidden columns: the tuple's timestamp, its position in its source
TS, SEQ = "t", "q"
#: the most windows one tuple may fall in (WS/WA) for the native plan to explode it
MAX_WINDOWS = 4096
_EXACT = 1 << 53
_ROWS = 65536


class Fallback(Exception):
    """The native plan stopped at run time; the flow re-runs on the Python path."""


@dataclass(frozen=True)
class Stream:
    """A stream as the native plan holds it: ``df`` has the hidden columns (``t``, and ``q``
    while ``ordered``) and one column per payload field; ``fields`` are the payload's field
    names in order, ``cols`` their columns, ``kinds`` their kinds (:mod:`.exprs`)."""

    df: Any
    fields: tuple[str, ...]
    cols: dict[str, str]
    kinds: dict[str, str | None]
    ordered: bool

    def hidden(self) -> list[str]:
        return [TS, SEQ] if self.ordered else [TS]

    def payload(self) -> list[Any]:
        from pyspark.sql import functions as F

        return [F.col(self.cols[f]) for f in self.fields]


# -- what can run natively -------------------------------------------------------------------
def reasons(flow: Flow) -> dict[Node, str | None]:
    """Per node: None where the native plan can take it, else why not (decided from the
    flow alone; the data may still refuse, :class:`NotNative` at build time)."""
    out: dict[Node, str | None] = {}
    for n in flow.nodes:
        if n.kind == "source":
            out[n] = _source_reason(n.spec)
        elif n.kind == "stateless":
            out[n] = _stateless_reason(n.spec)
        elif n.kind == "oplus":
            out[n] = _oplus_reason(n.spec)
        else:
            out[n] = f"a {n.kind} operator"
    return out


def _source_reason(src: Any) -> str | None:
    if isinstance(src, LateSource):
        return "a late-data stream"
    if src.rate or src.speed:
        return "a paced source"
    if not src.rereadable:
        return "a source that cannot be read twice (a native plan may have to re-run)"
    return None


def _stateless_reason(op: Any) -> str | None:
    if type(op) is Filter:
        return None if op.expr is not None else "filter by a Python function"
    if type(op) is Map:
        return None if op.exprs is not None else "map by a Python function"
    if type(op) is FlatMap:
        return "flat_map (a Python function)"
    return f"{type(op).__name__} (a Python function)"


def _oplus_reason(op: Any) -> str | None:
    if not isinstance(op, Aggregate):
        return f"a {type(op).__name__} (a Python O+)"
    if getattr(op, "column_agg", None) is None:
        return "its init/update/output are Python functions"
    if op.key_exprs is None:
        return "keys is a Python function"
    if op.WT != "multi":
        return f"window type {op.WT}"
    return None


# -- running -----------------------------------------------------------------------------------
def run(flow: Flow, spark: Any, n_groups: int, n_partitions: int,
        native: bool = True) -> dict[str, Any]:
    """Runs ``flow`` on its bounded inputs natively where it can, else on the Python O+ path
    (:func:`.batch.run_batch`); returns what ``run_batch`` returns plus ``native``:
    ``{operator: "native" | "python: why"}``, or None when no operator is declarative (a flow
    of Python functions, which has nothing to say)."""
    from .batch import run_batch

    why = reasons(flow)
    ops = [n for n in flow.nodes if n.kind != "source"]
    blocker = next((f"{n.kind} {n.name!r}: {r}" for n, r in why.items() if r), None)
    if not native:
        blocker = "native plans are off"
    own: dict[str, str] = {}
    if blocker is None:
        try:
            info = NativeRun(flow, spark, n_partitions).run()
            info["native"] = {n.name: NATIVE for n in ops}
            return info
        except NotNative as e:
            blocker = str(e)
            if getattr(e, "node", None) is not None:
                own[e.node.name] = str(e)  # type: ignore[attr-defined]
        except Fallback as e:
            info = run_batch(flow, spark, n_groups, n_partitions)
            info["native"] = {n.name: f"python: re-ran on the Python path ({e})" for n in ops}
            return info
    info = run_batch(flow, spark, n_groups, n_partitions)
    info["native"] = {n.name: "python: " + (own.get(n.name) or why[n] or
                                            f"with the rest of the flow ({blocker})")
                      for n in ops} if any(why[n] is None for n in ops) else None
    return info


class NativeRun:
    """One native run of a flow (see the module doc)."""

    def __init__(self, flow: Flow, spark: Any, n_partitions: int):
        self.flow, self.spark, self.P = flow, spark, n_partitions
        self._n = 0
        #: whether the sources' arrival order must be kept (a sum or mean may be of floats)
        self.need_order = any(
            n.kind == "oplus" and n.spec.column_agg.kind in ("sum", "mean") for n in flow.nodes)
        #: the DataFrames persisted for the run (an aggregate's output read twice)
        self.cached: list[Any] = []
        #: (an operator's input DataFrame, its guards, its name): Python raises where one holds
        self.guards: list[tuple[Any, list[Any], str]] = []

    def fresh(self) -> str:
        self._n += 1
        return f"c{self._n}"

    def run(self) -> dict[str, Any]:
        from ..runtime.tempdirs import make_tempdir

        _quiet_query_loggers()
        tmp = make_tempdir("spark-native")
        conf = self.spark.conf
        saved = {k: conf.get(k, None) for k in _RUN_CONF}
        try:
            # ANSI: a long overflow is an error (the plan re-runs in Python), never a wrap
            conf.set("spark.sql.ansi.enabled", "true")
            conf.set("spark.sql.shuffle.partitions", str(self.P))
            t0 = time.perf_counter()
            streams: dict[Node, Stream] = {}
            counts: dict[str, int] = {}
            readers = self.flow.consumers()
            for node in self.flow.nodes:
                try:
                    if node.kind == "source":
                        streams[node], counts[node.name] = self.source(node, tmp)
                    elif node.kind == "stateless":
                        streams[node] = self.stateless(node.spec, streams[node.inputs[0]])
                    else:
                        s = self.aggregate(node.spec, streams[node.inputs[0]])
                        if readers.get(node, 0) > 1:  # read twice: computed once
                            s = replace(s, df=s.df.persist())
                            self.cached.append(s.df)
                        streams[node] = s
                except NotNative as e:
                    e.node = node  # type: ignore[attr-defined]
                    raise
                except Exception as e:
                    # Spark refusing a plan the translation thought sound: a gap of ours,
                    # which the Python path does not share
                    if type(e).__name__ != "AnalysisException":
                        raise
                    refused = NotNative(f"{node.kind} {node.name!r}: Spark's analysis "
                                        f"refused it ({errors.root_cause(str(e))[:200]})")
                    refused.node = node  # type: ignore[attr-defined]
                    raise refused from None
            t_read = time.perf_counter() - t0
            try:
                self.check_guards()
                results = [collect(streams[node]) for node, _ in self.flow.sinks]
            except Exception as e:
                why = escaped(e)
                if why is None:
                    raise
                raise Fallback(why) from None
        finally:
            for df in self.cached:
                df.unpersist()
            for k, v in saved.items():
                if v is None:
                    conf.unset(k)
                else:
                    conf.set(k, v)
            shutil.rmtree(tmp, ignore_errors=True)
        for (_, sink), (ts, table) in zip(self.flow.sinks, results, strict=True):
            write_sink(sink, ts, table)
        return {"tuples_in": counts, "driver_read_s": t_read}

    # -- sources ---------------------------------------------------------------------------------
    def source(self, node: Node, tmp: Any) -> tuple[Stream, int]:
        """The source read on the driver, as a Stream (see the module doc)."""
        import numpy as np
        import pyarrow as pa
        from pyspark.sql import functions as F

        src = node.spec
        where = f"source {src.name!r}"
        batches = src.batches(_ROWS)
        if batches is None:
            batches = _item_batches(src)
        tables, stamps = [], []
        n = 0
        for b in batches:
            t = b.table  # a batch's table states its records exactly, or there is none
            if t is None:
                raise NotNative(f"{where}: records that make no exact table (a field missing "
                                f"from some, in another order, ints beside floats, nesting)")
            if isinstance(t, pa.RecordBatch):
                t = pa.Table.from_batches([t])
            tables.append(t)
            stamps.append(b.ts)
            n += len(b)
        fields, kinds, tables = _unify(where, tables)
        cols = {f: self.fresh() for f in fields}
        ts = np.concatenate(stamps) if stamps else np.zeros(0, np.int64)
        data = {cols[f]: pa.chunked_array([c for t in tables for c in t.column(f).chunks],
                                          type=_arrow_type(kinds[f])) for f in fields}
        # the tuple's timestamp is most often the payload's own ts field: no second copy
        same = next((f for f in fields if f == src.ts_field and kinds[f] == INT
                     and data[cols[f]].null_count == 0
                     and np.array_equal(data[cols[f]].to_numpy(), ts)), None)
        if same is None:
            data[TS] = arrow_ints(ts)
        if self.need_order:  # the arrival order, for float sums
            data[SEQ] = arrow_ints(np.arange(n, dtype=np.int64))
        table = pa.Table.from_pydict(data)
        types = {cols[f]: spark_type(kinds[f]) if kinds[f] != NULL else "string"
                 for f in fields}
        schema = ", ".join(f"{c} {types.get(c, 'long')}" for c in table.column_names)
        df = self._load(table, schema, tmp / f"{self.fresh()}.parquet")
        if same is not None:
            df = df.withColumn(TS, F.col(cols[same]))
        return Stream(df, tuple(fields), cols, kinds, self.need_order), n

    def _load(self, table: Any, schema: str, path: Any) -> Any:
        """``table`` as a DataFrame: through a Parquet file Spark reads (local masters), else
        ``createDataFrame``."""
        import pyarrow.parquet as pq

        if not self.spark.sparkContext.master.startswith("local"):
            return self.spark.createDataFrame(table, schema)
        # row groups: Spark splits a file at them, so the first stage has a task per core
        per = max(4096, -(-table.num_rows // (2 * self.spark.sparkContext.defaultParallelism)))
        # plain encoding, uncompressed: a file read once, locally (dictionaries cost 4x the
        # write time of 1 M bids)
        pq.write_table(table, str(path), row_group_size=per, compression="none",
                       use_dictionary=False)
        return self.spark.read.schema(schema).parquet(str(path))  # no job to read the schema

    # -- stateless -------------------------------------------------------------------------------
    def stateless(self, op: Filter | Map, s: Stream) -> Stream:
        from pyspark.sql import functions as F

        if type(op) is Filter:
            where = f"filter {op.name!r}"
            tr = Translator(s.kinds, where, s.cols)
            cond, kind = tr.column(op.expr)
            if kind not in (BOOL, NULL):
                raise NotNative(f"{where}: the expression gives {kind} values, not booleans")
            self._guard(s.df, tr.guards, where)
            return replace(s, df=s.df.filter(cond if kind == BOOL else F.lit(False)))
        where = f"{'with_columns' if op.keep_input else 'select'} {op.name!r}"
        tr = Translator(s.kinds, where, s.cols)
        out: dict[str, tuple[Any, str, str]] = {}
        for name, e in op.exprs:  # all computed from the input payload
            c, kind = tr.column(e)
            out[name] = (c, kind, self.fresh())
        self._guard(s.df, tr.guards, where)
        if op.keep_input:
            fields = list(s.fields) + [f for f in out if f not in s.cols]
        else:
            fields = list(out)
        cols, kinds, select = {}, {}, [F.col(h) for h in s.hidden()]
        for f in fields:
            if f in out:
                c, kind, name = out[f]
                select.append(c.alias(name))
                cols[f], kinds[f] = name, kind
            else:
                cols[f], kinds[f] = s.cols[f], s.kinds[f]
                select.append(F.col(s.cols[f]))
        return Stream(s.df.select(*select), tuple(fields), cols, kinds, s.ordered)

    def _guard(self, df: Any, guards: list[Any], where: str) -> None:
        if guards:
            self.guards.append((df, guards, where))

    def check_guards(self) -> None:
        """A row where Python raises (a division by zero Spark's plan may skip) makes the
        flow re-run on the Python path, which names the tuple."""
        from pyspark.sql import functions as F

        for df, guards, where in self.guards:
            hit = F.lit(False)
            for g in guards:
                hit = hit | F.coalesce(g, F.lit(False))
            if df.filter(hit).limit(1).count():
                raise Fallback(f"{where}: a division by zero (Python's error names the tuple)")

    # -- aggregates ------------------------------------------------------------------------------
    def aggregate(self, op: Aggregate, s: Stream) -> Stream:
        """An A+ with column keys and a built-in accumulator (see the module doc)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        agg = op.column_agg
        where = f"aggregate {op.name!r}"
        names = list(op.key_names)
        if agg.kind != "top_k" and agg.name in names:
            raise NotNative(f"{where}: the output field {agg.name!r} is also a key's")
        n_windows = -(-op.WS // op.WA)
        if n_windows > MAX_WINDOWS:
            raise NotNative(f"{where}: a tuple falls in {n_windows} windows (size/slide)")
        tr = Translator(s.kinds, where, s.cols)
        keys = [tr.column(e) for e in op.key_exprs]
        keyed = F.lit(True)
        for k, _ in keys:
            keyed = keyed & k.isNotNull()
        value = None
        if agg.kind != "count":
            with tr.only_where(keyed):  # f_MK reads the value once the keys are there
                value = tr.column(agg.of)
        self._guard(s.df, tr.guards, where)
        kcols = [self.fresh() for _ in keys]
        kinds = [kind for _, kind in keys]
        select = [F.col(h) for h in s.hidden()]
        select += [_checked_key(c, kind, where).alias(name)
                   for (c, kind), name in zip(keys, kcols, strict=True)]
        empty = NULL in kinds
        present = F.lit(True)  # a row counts: its keys (and value) are not None
        for name in kcols:
            present = present & F.col(name).isNotNull()
        vkind = None
        if value is not None:
            v, vkind = value
            if vkind == NULL:
                empty = True
            elif agg.kind in ("sum", "mean") and vkind not in (INT, FLOAT, BOOL):
                raise NotNative(f"{where}: {agg.kind} of {vkind} values (a TypeError in "
                                f"Python)")
            elif agg.kind in ("min", "max", "top_k") and vkind == FLOAT:
                v = _orderable(v, where)
            if vkind == BOOL and agg.kind in ("sum", "mean"):
                v, vkind = v.cast("long"), INT  # Python adds bools as 0 and 1
            select.append(v.alias("v"))
            present = present & F.col("v").isNotNull()
        if agg.kind == "top_k":
            select += s.payload()
        df = s.df.select(*select).filter(F.lit(False) if empty else present)
        if agg.kind in ("sum", "mean") and vkind == FLOAT:
            if not s.ordered:
                raise NotNative(f"{where}: a float {agg.kind} over another aggregate's "
                                f"output (Python adds in its emission order)")
            return self._float_sum(op, df, kcols, kinds, names)
        df = df.withColumn("e", _ends(F.col(TS), op.WS, op.WA))
        if n_windows > 1:
            df = df.withColumn("e", F.explode("e"))
            if op.WS % op.WA:  # the last start may be too early: ts must be < l + WS
                df = df.filter(F.col("e") > F.col(TS))
        group = ["e", *kcols]
        if agg.kind == "top_k":
            w = Window.partitionBy(*group).orderBy(
                F.col("v").desc() if agg.largest else F.col("v").asc())
            df = df.withColumn("r", F.rank().over(w)).filter(F.col("r") <= agg.k)
            return Stream(df.select(F.col("e").alias(TS), *s.payload()), s.fields, s.cols,
                          s.kinds, False)
        vname = self.fresh()
        if agg.kind == "count":
            out, okind = F.count(F.lit(1)), INT
        elif agg.kind == "sum":
            out, okind = F.sum("v"), INT
        elif agg.kind in ("min", "max"):
            out, okind = (F.min if agg.kind == "min" else F.max)("v"), vkind
        else:  # mean of ints: Python divides the exact sum once
            total, n = F.sum("v"), F.count(F.lit(1))
            out, okind = F.when(total.between(-_EXACT, _EXACT), total / n).otherwise(
                escape(f"{where}: a mean of ints whose sum is beyond 2**53")), FLOAT
        df = df.groupBy(*group).agg(out.alias(vname))
        return self._keyed(df.withColumnRenamed("e", TS), kcols, kinds, names, vname, okind,
                           agg.name)

    def _float_sum(self, op: Aggregate, df: Any, kcols: list[str], kinds: list[str],
                   names: list[str]) -> Stream:
        """A float sum or mean in the reference's order of additions: per (key, slice of
        width gcd(WS, WA)) from 0 in arrival order, a window's slices from the first in time
        order (:mod:`~stretchflow.operators.slicing`; a tumbling window is one slice)."""
        from pyspark.sql import functions as F

        agg = op.column_agg
        width = math.gcd(op.WS, op.WA)
        sl = (F.col(TS) - F.pmod(F.col(TS), F.lit(width))).alias("s")
        rows = F.array_sort(F.collect_list(F.struct(F.col(SEQ), F.col("v"))))
        slices = df.groupBy(sl, *kcols).agg(
            F.aggregate(rows, F.lit(0.0), lambda a, x: a + x["v"]).alias("sum"),
            F.count(F.lit(1)).alias("n"))
        slices = slices.withColumn("e", _ends(F.col("s"), op.WS, op.WA))
        if -(-op.WS // op.WA) > 1:
            slices = slices.withColumn("e", F.explode("e"))
            if op.WS % op.WA:
                slices = slices.filter(F.col("e") > F.col("s"))
        parts = F.array_sort(F.collect_list(F.struct(F.col("s"), F.col("sum"))))
        total = F.aggregate(F.slice(parts, 2, 1 << 30), F.element_at(parts, 1)["sum"],
                            lambda a, x: a + x["sum"])
        vname = self.fresh()
        out = total if agg.kind == "sum" else total / F.sum("n")
        df = slices.groupBy("e", *kcols).agg(out.alias(vname))
        return self._keyed(df.withColumnRenamed("e", TS), kcols, kinds, names, vname, FLOAT,
                           agg.name)

    def _keyed(self, df: Any, kcols: list[str], kinds: list[str], names: list[str],
               vname: str, vkind: str, name: str) -> Stream:
        """The Stream of an aggregate's output: ``{key names..., name: value}``."""
        fields = (*names, name)
        cols = dict(zip(names, kcols, strict=True))
        cols[name] = vname
        return Stream(df, fields, cols, {**dict(zip(names, kinds, strict=True)), name: vkind},
                      False)


_RUN_CONF = ("spark.sql.ansi.enabled", "spark.sql.shuffle.partitions")


def _ends(ts: Any, size: int, slide: int) -> Any:
    """The ends ``l + size`` of the windows ``[l, l + size)`` (``l`` a multiple of
    ``slide``) holding ``ts``: one column for tumbling windows, else an array of the
    ``ceil(size/slide)`` candidates from the latest start down (the caller drops those that
    end at or before ``ts`` when ``slide`` does not divide ``size``)."""
    from pyspark.sql import functions as F

    last = ts - F.pmod(ts, F.lit(slide))  # floor to a multiple of slide, for any sign
    n = -(-size // slide)
    if n == 1:
        return last + size
    return F.array(*[last + (size - i * slide) for i in range(n)])


def _checked_key(c: Any, kind: str, where: str) -> Any:
    """A float key: NaN (Python keeps each NaN object apart; Spark groups them) and -0.0
    (Python keeps whichever zero came first) escape to the Python path."""
    return _orderable(c, where) if kind == FLOAT else c


def _orderable(v: Any, where: str) -> Any:
    """A float column whose NaN and -0.0 escape: with them Python's result depends on the
    order of its comparisons (min(0.0, -0.0) keeps the first; NaN compares False)."""
    from pyspark.sql import functions as F

    odd = F.isnan(v) | ((v == 0.0) & v.cast("string").startswith("-"))
    return F.when(odd, escape(f"{where}: NaN or -0.0 among the values")).otherwise(v)


# -- reading -----------------------------------------------------------------------------------
def _item_batches(src: Any) -> Any:
    """A source without batches (an iterable, an unsorted file) through ``items()``, as
    batches of payloads (explicit watermarks dropped: only single windows see them)."""
    from ..batch import Batch

    ts: list[int] = []
    ps: list[Any] = []
    for t, p in src.items():
        if p is WATERMARK:
            continue
        ts.append(t)
        ps.append(p)
        if len(ts) == _ROWS:
            yield Batch(ts, payloads=ps)
            ts, ps = [], []
    if ts:
        yield Batch(ts, payloads=ps)


def _unify(where: str, tables: list[Any]) -> tuple[list[str], dict[str, str], list[Any]]:
    """The fields (the first table's order), their kinds and the tables in the types those
    kinds have (ints as int64, floats as float64); refuses fields other types, or a field
    of one kind in some batches and another in others, or absent from some."""
    import pyarrow as pa

    if not tables:
        return [], {}, []
    fields = list(tables[0].column_names)
    if len(set(fields)) != len(fields):
        raise NotNative(f"{where}: a field named twice")
    kinds: dict[str, str] = {f: NULL for f in fields}
    for t in tables:
        if t.column_names != fields:
            raise NotNative(f"{where}: records whose fields differ from the first ones' (a "
                            f"field missing, or in another order)")
        for f in fields:
            k = _kind_of_arrow(t.schema.field(f).type)
            if k is None:
                raise NotNative(f"{where}: the field {f!r} is {t.schema.field(f).type} (not a "
                                f"number, string or boolean)")
            if k != NULL:
                if kinds[f] not in (NULL, k):
                    raise NotNative(f"{where}: the field {f!r} holds {kinds[f]} and {k} values")
                kinds[f] = k
    out = []
    for t in tables:
        cols = []
        for f in fields:
            c = t.column(f)
            want = _arrow_type(kinds[f])
            cols.append(c if c.type == want else c.cast(want))  # safe: uint64 > int64 raises
        out.append(pa.Table.from_arrays(cols, names=fields))
    return fields, kinds, out


def _kind_of_arrow(t: Any) -> str | None:
    import pyarrow as pa

    if pa.types.is_integer(t):
        return INT
    if pa.types.is_floating(t):
        return FLOAT
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STR
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_null(t):
        return NULL
    return None


def _arrow_type(kind: str) -> Any:
    """The Arrow type a field of ``kind`` is stored in (an all-None field as strings: Spark
    reads no null-typed Parquet column; its kind stays null)."""
    import pyarrow as pa

    return {INT: pa.int64(), FLOAT: pa.float64(), STR: pa.string(), BOOL: pa.bool_(),
            NULL: pa.string()}[kind]


# -- results -----------------------------------------------------------------------------------
def collect(s: Stream) -> tuple[Any, Any]:
    """The stream on the driver: (timestamps as numpy, payload table), ts-sorted (stable)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    at = s.df.select(F.col(TS), *s.payload()).toArrow()
    ts = at.column(0).cast(pa.int64())
    order = pc.sort_indices(ts)
    payload = pa.Table.from_arrays(at.columns[1:], names=list(s.fields)).take(order)
    return ts.take(order).to_numpy(), payload


def write_sink(sink: Any, ts: Any, table: Any, rows: int = _ROWS) -> None:
    """Writes a collected stream to a stretchflow sink, as batches."""
    from ..batch import Batch

    with sink_session([sink]):
        for a in range(0, len(ts), rows):
            sink.write_batch(Batch(ts[a:a + rows], table=table.slice(a, rows)))


def escaped(e: BaseException) -> str | None:
    """Why ``e`` stopped a native plan in a way the Python path answers (an escape, an ANSI
    arithmetic error), or None for any other error."""
    text = errors.safe_str(e)
    if ESCAPE in text:
        line = text[text.index(ESCAPE) + len(ESCAPE):].split("\n")[0]
        return line.lstrip(": ").split(" SQLSTATE")[0]
    if type(e).__name__ == "ArithmeticException" or "SparkArithmeticException" in text:
        cause = errors.root_cause(text)
        m = re.search(r"\[[A-Z_.]+\][^.]*", cause)  # "[ARITHMETIC_OVERFLOW] overflow"
        return m.group(0) if m else cause
    return None


def _quiet_query_loggers() -> None:
    """PySpark logs every failed query's context as JSON on stderr (``DataFrameQueryContext
    Logger``); an escape is an expected failure here, so those lines go to Spark's log."""
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        lg = PySparkLogger.getLogger(name)
        for h in list(lg.handlers):
            if not isinstance(h, _ToLog):
                lg.removeHandler(h)
        if not lg.handlers:
            lg.addHandler(_ToLog())


class _ToLog(logging.Handler):
    """Writes records to Spark's log file (:func:`.errors.write_log`)."""

    def emit(self, record: logging.LogRecord) -> None:
        errors.write_log(self.format(record) + "\n")
