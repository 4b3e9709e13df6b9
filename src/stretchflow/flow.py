"""The user API: a :class:`Flow` is a logical plan of sources, operators and sinks.

>>> import stretchflow as sf
>>> flow = sf.Flow("count")
>>> words = flow.source(sf.io.iterable([{"ts": 1, "text": "a b a"}, {"ts": 70, "text": "b"}]))
>>> counts = words.aggregate(size=60, keys=lambda t: t["text"].split(), init=lambda: 0,
...                          update=lambda n, t: n + 1,
...                          output=lambda w, n: {"word": w, "count": n})
>>> out = counts.collect()
>>> _ = flow.run()
>>> for r in out.records():
...     print(r)
{'ts': 60, 'word': 'a', 'count': 1}
{'ts': 60, 'word': 'b', 'count': 1}
{'ts': 120, 'word': 'b', 'count': 1}

(``keys`` returning a list means several keys, a set of them, so "a" counts once per tweet
there; the built-in wordcount returns a ``Counter`` to count occurrences. A str, number or
tuple is one key: ``keys=lambda t: t["user"]`` groups by user.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .engines import run as run_engine
from .errors import FlowDefinitionError
from .expr import Expr
from .io.endpoints import open_output
from .io.late import LATE_POLICIES
from .io.sinks import Collector, Sink, open_sink
from .io.sources import LateSource, Source
from .operators.aggregate import Aggregate
from .operators.join import Join
from .operators.oplus import OPlus
from .operators.stateless import (
    Filter,
    FlatMap,
    Map,
    arrow_filter,
    expr_filter,
    is_arrow_expression,
    map_batches,
    project,
)
from .runtime.gc_hold import RUN_FREEZE
from .runtime.result import RunResult

#: the flow file ``stretchflow run FILE`` is loading (:func:`loading_app`), else None
_LOADING_APP: ContextVar[str | None] = ContextVar("stretchflow_loading_app", default=None)


@contextmanager
def loading_app(path: str | os.PathLike) -> Iterator[None]:
    """While a flow file is loaded to be run by the CLI: a ``flow.run()`` the file makes at
    import is an error that says to guard it with ``if __name__ == "__main__":`` (the CLI runs
    the flow it finds, so an unguarded call would run it twice, once with the file's own
    options and once with the command line's)."""
    token = _LOADING_APP.set(os.fspath(path))
    try:
        yield
    finally:
        _LOADING_APP.reset(token)


@dataclass(eq=False)
class Node:
    """A vertex of the logical plan: a source, a stateless operator or an O+."""

    name: str
    kind: str  # "source" | "stateless" | "stateful" | "oplus"
    spec: Any
    inputs: list[Node] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.kind})"


def _callable(kind: str, name: str, fn: Any, alternatives: str = "") -> None:
    if not callable(fn):
        raise FlowDefinitionError(
            f"{kind} {name!r}: takes a function of the payload{alternatives}, got "
            f"{type(fn).__name__} {fn!r}"[:300])


class Stream:
    """The output stream of a node; methods add operators downstream of it."""

    def __init__(self, flow: Flow, node: Node):
        self.flow = flow
        self.node = node

    # -- stateless ----------------------------------------------------------------------------
    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> Stream:
        """One output per tuple, same timestamp."""
        name = self.flow._name(name, "map")
        _callable("map", name, fn, "; for column expressions use with_columns(name=expr) "
                                   "or select(...)")
        return self.flow._add("stateless", Map(fn, name), [self])

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> Stream:
        """Zero or more outputs per tuple, each with the tuple's timestamp."""
        name = self.flow._name(name, "flat_map")
        _callable("flat_map", name, fn)
        return self.flow._add("stateless", FlatMap(fn, name), [self])

    def filter(self, fn: Callable[[Any], bool] | Expr | Any, name: str | None = None) -> Stream:
        """Keeps the tuples for which ``fn`` is true. ``fn`` may be a column expression
        (``sf.col("price") > 10``: kept where it is True, dropped where False or None) or a
        pyarrow compute expression (``pc.field("lang") == "en"``); with either, whole batches
        are filtered by Arrow where the executor runs batches."""
        name = self.flow._name(name, "filter")
        if isinstance(fn, Expr):
            op = expr_filter(fn, name)
        elif is_arrow_expression(fn):
            op = arrow_filter(fn, name)
        else:
            _callable("filter", name, fn, ", a column expression (sf.col('x') > 1) or a "
                                          "pyarrow compute expression")
            op = Filter(fn, name)
        return self.flow._add("stateless", op, [self])

    def select(self, *columns: str | Expr, name: str | None = None,
               **named: str | Expr) -> Stream:
        """Payloads of exactly the given fields, in this order: ``columns`` are column names
        or expressions that name their output (``(sf.col("price") * 0.9).alias("eur")``, a
        bare ``sf.col("x")``), ``named`` are ``name=expression`` (or ``name="column"``).
        Each tuple keeps its timestamp; a computed expression without a name is a
        :class:`FlowDefinitionError`."""
        name = self.flow._name(name, "select")
        return self.flow._add("stateless", project(columns, named, name, False), [self])

    def with_columns(self, *columns: Expr, name: str | None = None,
                     **named: str | Expr) -> Stream:
        """The payload with these fields added or replaced: every field of the input in its
        order (a replaced one in its place), the new ones after them, all computed from the
        input payload. ``columns`` and ``named`` as in :meth:`select`."""
        name = self.flow._name(name, "with_columns")
        return self.flow._add("stateless", project(columns, named, name, True), [self])

    def map_batches(self, fn: Callable[[Any], Any], name: str | None = None,
                    format: str = "arrow") -> Stream:  # noqa: A002
        """A map over whole batches: ``fn`` takes the payloads of many tuples as a pyarrow
        Table (``format="pandas"``: a DataFrame) and returns a Table or DataFrame of as many
        rows, row r computed from input row r only; each output row keeps its tuple's
        timestamp. Executors that do not run batches call ``fn`` on one-row tables."""
        return self.flow._add("stateless",
                              map_batches(fn, self.flow._name(name, "map_batches"), format),
                              [self])

    # -- stateful -----------------------------------------------------------------------------
    def stateful(self, op: Any, name: str | None = None) -> Stream:
        """Applies an ordered-multicore stateful or partitioned-stateful operator
        (:mod:`stretchflow.operators.stateful`; usually through :class:`~stretchflow.pipeline.
        Pipeline`): a node of kind ``"stateful"`` whose outputs keep their inputs' order."""
        return self.flow._add("stateful", op, [self], self.flow._name(name or op.name,
                                                                      "stateful"))

    def oplus(self, op: OPlus, *others: Stream) -> Stream:
        """Applies an O+ whose input 0 is this stream and inputs 1.. are ``others``."""
        return self.flow.oplus(op, self, *others)

    def aggregate(self, *, size: int | str, slide: int | str | None = None,
                  keys: Any, init: Callable[[], Any],
                  update: Callable[[Any, Any], Any],
                  output: Callable[[Hashable, Any], Any] | None = None,
                  window_type: str = "multi",
                  f_mu: Callable[[Hashable, int], int] | None = None,
                  name: str | None = None,
                  combine: Callable[[Any, Any], Any] | None = None,
                  column_agg: Any = None) -> Stream:
        """An A+ (O+ with one input): per key and window, ``acc = update(acc, t)`` from
        ``init()``; ``output(key, acc)`` when the window instance expires.

        Declaratively (issue #31): ``keys`` a column name (``"auction"``), a tuple of names
        and named expressions (``("bidder", (sf.col("price") // 1000).alias("bucket"))``),
        a named expression, or None (one group per window), with an accumulator of
        :mod:`stretchflow.operators.aggregate` splatted in (``**count()``,
        ``**sum_of("price")``, ``**mean_of(sf.col("price") * 0.9)``, ``**arg_max("n")``):
        outputs are ``{key fields..., name: value}`` and the aggregate runs on Arrow batches
        where the engine runs batches. Rows with a null key are in no window; rows with a
        null value are skipped.

        Or ``keys(t)``, a callable, returns one key — a str, bytes, number or tuple
        (``t["user"]`` groups by user; ``(t["user"], t["page"])`` by the pair) — or several:
        a set, list or other iterable (duplicates count once), or a dict mapping each key to
        the value ``update`` receives for it (a ``Counter`` counts occurrences); None or an
        empty set: no key.
        ``size``/``slide``: ms, a ``timedelta`` or a string (``"2min"``, ``"10 seconds"``,
        ``"1.5s"``). With ``combine``
        (associative, ``init()`` its identity, consistent with ``update``) a sliding window's
        state is sliced: each tuple updates one slice of width gcd(size, slide), and a window
        combines its slices when it expires
        (:class:`~stretchflow.operators.aggregate.Aggregate`)."""
        op = Aggregate(size=size, slide=slide, keys=keys, init=init, update=update,
                       output=output, window_type=window_type, f_mu=f_mu,
                       name=self.flow._name(name, "aggregate"), combine=combine,
                       column_agg=column_agg)
        return self.flow.oplus(op, self)

    def join(self, other: Stream, *, size: int | str, slide: int | str | None = None,
             keys: Callable[[Any], Any] | None = None,
             predicate: Callable[[Any, Any], bool] | None = None,
             output: Callable[[Any, Any], Any] | None = None, window_type: str = "multi",
             f_mu: Callable[[Hashable, int], int] | None = None,
             name: str | None = None, left_keys: Callable[[Any], Any] | None = None,
             right_keys: Callable[[Any], Any] | None = None) -> Stream:
        """A J+ (O+ with two inputs): pairs (this, other) sharing a key in the same window
        instance for which ``predicate`` holds, as ``output(left, right)``. ``keys`` applies
        to both sides; streams whose key fields differ give ``left_keys`` (this stream) and
        ``right_keys`` (``other``) instead. Keys mean what they do in :meth:`aggregate`."""
        op = Join(size=size, slide=slide, keys=keys, predicate=predicate, output=output,
                  window_type=window_type, f_mu=f_mu, name=self.flow._name(name, "join"),
                  left_keys=left_keys, right_keys=right_keys)
        return self.flow.oplus(op, self, other)

    # -- late data ----------------------------------------------------------------------------
    def late(self) -> Stream:
        """The late-data stream of this source stream (declared ``late="side"``): the records
        that arrived behind the source's watermark, unchanged, each at the timestamp of that
        watermark (so the stream never goes back); sink or process it like any stream. The
        same stream on every call. docs/event-time.md."""
        node = self.node
        if node.kind != "source" or isinstance(node.spec, LateSource):
            raise FlowDefinitionError(f"late(): {node.name!r} is not a source stream; call "
                                      f"late() on the stream flow.source() returned")
        if node.spec.late != "side":
            raise FlowDefinitionError(
                f"late(): source {node.name!r} has late={node.spec.late!r}; declare it with "
                f"late='side' (or Flow(..., late='side')) to get its late-data stream")
        known = self.flow._late_streams.get(node.name)
        if known is not None:
            return known
        try:
            spec = LateSource(node.spec)
        except ValueError as e:
            raise FlowDefinitionError(str(e)) from None
        stream = self.flow._add("source", spec, [], self.flow._name(spec.name, "late"))
        self.flow._late_streams[node.name] = stream
        return stream

    # -- sinks --------------------------------------------------------------------------------
    def sink(self, sink: Sink | Source | str | os.PathLike) -> Sink:
        """Sends this stream to a sink (a file path or URL — ``s3://``, ``redis://…?stream=K``
        — a file source object, or a Sink)."""
        if isinstance(sink, str | os.PathLike):
            sink = open_output(sink)
        elif isinstance(sink, Source) and hasattr(sink, "path"):
            sink = open_sink(sink.path)
        if not isinstance(sink, Sink):
            raise FlowDefinitionError(f"not a sink: {sink!r}")
        self.flow.sinks.append((self.node, sink))
        return sink

    def collect(self) -> Collector:
        """Collects this stream in memory; returns the collector."""
        c = Collector()
        self.sink(c)
        return c


class Flow:
    """A query: sources, operators and sinks. Build it once; run it on any engine."""

    def __init__(self, name: str = "flow", *, late: str | None = None):
        """``late``: the default late-data policy of this flow's sources that do not declare
        one (``"error"``, ``"drop"`` or ``"side"``; docs/event-time.md)."""
        if late is not None and late not in LATE_POLICIES:
            raise FlowDefinitionError(
                f"flow {name!r}: late must be one of {', '.join(LATE_POLICIES)}, got {late!r}")
        self.name = name
        self.late = late
        self.nodes: list[Node] = []
        self.sinks: list[tuple[Node, Sink]] = []
        self._names: set[str] = set()
        self._late_streams: dict[str, Stream] = {}

    def source(self, source: Source, name: str | None = None) -> Stream:
        if not isinstance(source, Source):
            raise FlowDefinitionError(f"not a source: {source!r}")
        if name is not None:
            source.name = name
        if self.late is not None and not source.late_given:
            source.late = self.late
        return self._add("source", source, [], self._name(source.name, "source"))

    def oplus(self, op: OPlus, *inputs: Stream) -> Stream:
        """Applies an O+ to ``inputs`` (input i of the operator is ``inputs[i]``)."""
        if len(inputs) != op.I:
            raise FlowDefinitionError(
                f"operator {op.name!r} has I={op.I} inputs but {len(inputs)} streams were given"
            )
        op.name = self._name(op.name, "oplus") if op.name in self._names else op.name
        self._names.add(op.name)
        return self._add("oplus", op, list(inputs), op.name)

    def run(self, engine: str = "reference", *, parallelism: int | None = None,
            max_parallelism: int | None = None, key_groups: int | None = None,
            capacity: int | None = None, reconfigure: Any = None, controller: Any = None,
            **options: Any) -> RunResult:
        """Runs the flow to the end of its inputs on ``engine``; returns its :class:`RunResult`.

        Args:
            engine: ``reference`` (default), ``vsn``, ``sn``, ``ordered``, ``slack`` or
                ``spark`` (``stretchflow.engines.ENGINES`` lists them with their options).
            parallelism: instances of each O+ (threads, channels, workers or partitions).
            max_parallelism: the most instances a reconfiguration or controller may use.
            key_groups: key groups G that keys hash to; f_μ moves groups between instances.
            capacity: tuples a buffer between threads holds before its writers block.
            reconfigure: ``"COUNT:P,..."`` or ``[(COUNT, P), ...]``: after the COUNT-th input
                tuple of all sources, request parallelism P.
            controller: an elasticity controller, by name (``threshold``, ``level``) or object.
            **options: the engine's own options (docs/api.md lists them per engine).

        Options left as None take the engine's default. An option the engine does not take is
        a :class:`FlowDefinitionError` naming the engine and the options it accepts.
        """
        common = {"parallelism": parallelism, "max_parallelism": max_parallelism,
                  "key_groups": key_groups, "capacity": capacity,
                  "reconfigure": reconfigure, "controller": controller}
        given = {k: v for k, v in common.items() if v is not None}
        given.update(options)
        app = _LOADING_APP.get()
        if app is not None:
            raise FlowDefinitionError(
                f"{app} calls flow.run() while `stretchflow run` loads it, so the flow would "
                f"run twice; put the call under `if __name__ == \"__main__\":` (then the file "
                f"runs as a script and as a flow file)")
        # collections during the run skip the heap it started with; engines.run validates
        # the flow and the options, once
        with RUN_FREEZE:
            result = run_engine(self, engine, given)
        # every engine reads its sources in this process, so their counts are here
        late = {n.name: n.spec.late_seen for n in self.nodes
                if n.kind == "source" and not isinstance(n.spec, LateSource)
                and n.spec.late != "error"}
        if late:
            result.extra["late"] = late
        for n in self.nodes:  # the run committed: a source that commits what it consumed
            commit = getattr(n.spec, "acknowledge", None) if n.kind == "source" else None
            if commit is not None:  # (a Redis stream's consumer group: io/redis_streams.py)
                commit()
        return result

    # -- internals ------------------------------------------------------------------------------
    def _add(self, kind: str, spec: Any, inputs: list[Stream], name: str | None = None) -> Stream:
        for s in inputs:
            if s.flow is not self:
                raise FlowDefinitionError("a stream of another flow cannot be an input here")
        node = Node(name or spec.name, kind, spec, [s.node for s in inputs])
        self._names.add(node.name)
        self.nodes.append(node)
        return Stream(self, node)

    def _name(self, name: str | None, default: str) -> str:
        base = name or default
        if base not in self._names:
            return base
        i = 2
        while f"{base}-{i}" in self._names:
            i += 1
        return f"{base}-{i}"

    def consumers(self) -> dict[Node, int]:
        """How many operators and sinks read each node's stream."""
        n: dict[Node, int] = {node: 0 for node in self.nodes}
        for node in self.nodes:
            for up in node.inputs:
                n[up] += 1
        for node, _ in self.sinks:
            n[node] += 1
        return n

    def validate(self) -> None:
        if not self.sinks:
            raise FlowDefinitionError(f"flow {self.name!r} has no sink")
        self._check_columns()

    def _check_columns(self) -> None:
        """Before the run, where the columns of a stream are known — read from a Parquet
        source's footer, or made by a ``select`` — a column expression operator reading a
        column its input does not have is a :class:`FlowDefinitionError` naming the column,
        the operator and the columns there are (else the first tuple names it at run time).
        Known columns flow through filters and ``with_columns``; any other operator's
        output is unknown."""
        known: dict[Node, tuple[list[str], str] | None] = {}
        for node in self.nodes:  # in definition order: a node's inputs come before it
            if node.kind == "source":
                known[node] = _source_columns(node)
                continue
            up = known.get(node.inputs[0]) if node.kind == "stateless" else None
            spec = node.spec
            exprs: Any = None
            if type(spec) is Filter and spec.expr is not None:
                exprs = (("", spec.expr),)
            elif type(spec) is Map and spec.exprs is not None:
                exprs = spec.exprs
            if up is not None and exprs is not None:
                cols, origin = up
                have = set(cols)
                for _, e in exprs:
                    missing = sorted(e.columns() - have)
                    if missing:
                        kind = "filter" if type(spec) is Filter else \
                            "with_columns" if spec.keep_input else "select"
                        raise FlowDefinitionError(
                            f"{kind} {node.name!r}: no column {missing[0]!r} in its input "
                            f"(columns: {', '.join(cols)}; {origin})")
            if type(spec) is Map and spec.exprs is not None and not spec.keep_input:
                known[node] = ([n for n, _ in spec.exprs], f"made by select {node.name!r}")
            elif type(spec) is Map and spec.exprs is not None and up is not None:
                cols = up[0] + [n for n, _ in spec.exprs if n not in up[0]]
                known[node] = (cols, f"made by with_columns {node.name!r}")
            elif type(spec) is Filter and spec.expr is not None:
                known[node] = up
            else:
                known[node] = None


def _source_columns(node: Node) -> tuple[list[str], str] | None:
    """The payload fields of a source's tuples when its file says them before the run (a
    local Parquet file's schema), with where they come from; else None."""
    from .io.sources import Parquet

    src = node.spec
    if type(src) is not Parquet or not isinstance(src.path, os.PathLike) or \
            not os.path.isfile(src.path):
        return None
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(src.path).names
    except Exception:  # noqa: BLE001 - an unreadable file: the run reports it at its row
        return None
    return list(names), f"source {node.name!r}, {os.fspath(src.path)}"
