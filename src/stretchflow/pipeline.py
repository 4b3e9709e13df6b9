"""A linear pipeline of the ordered-multicore paper's operator kinds, as a :class:`Flow`.

:class:`Pipeline` is a builder: one source, then stateless (map / flat_map / filter),
stateful and partitioned-stateful operators (:mod:`stretchflow.operators.stateful`), collected
in memory. Each run builds a fresh :class:`~stretchflow.flow.Flow` (source → nodes → a
:class:`~stretchflow.io.sinks.Collector`), so a pipeline runs as often as its source can be
read. The sequential oracle of Def. 5.1 is the reference engine on that flow; the ordered
engine must reproduce its output sequence exactly (ordered execution).

>>> import stretchflow as sf
>>> pl = Pipeline(sf.io.iterable([{"ts": i, "k": i % 2, "v": i} for i in range(6)]))
>>> _ = pl.map(lambda t: t["v"] * 10 + t["k"]).partitioned(
...     lambda s, v: (s.append(v), [sum(s)])[1], key=lambda v: v % 10,
...     init=lambda k: [], buckets=4)
>>> pl.run(parallelism=2).items == pl.run(engine="reference").items
True
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import FlowDefinitionError
from .flow import Flow
from .io.sinks import Collector
from .io.sources import Source
from .operators.stateful import PartitionedStateful, Stateful
from .operators.stateless import Filter, FlatMap, Map
from .runtime.result import RunResult

Item = tuple[Any, Any]
#: the engines that run a flow's stateful nodes (the paper's kinds beyond O+)
ENGINES = ("ordered", "reference")


@dataclass
class PipelineRun:
    """The output items of a pipeline run and its :class:`RunResult`."""

    items: list[Item]
    result: RunResult


class Pipeline:
    """A linear pipeline of the paper's operator kinds, built fluently from one source."""

    def __init__(self, source: Source, name: str = "pipeline"):
        if not isinstance(source, Source):
            raise FlowDefinitionError(f"not a source: {source!r}")
        self.name = name
        self.source = source
        self.ops: list[Map | FlatMap | Filter | Stateful | PartitionedStateful] = []

    def map(self, fn: Callable[[Any], Any], name: str = "map") -> Pipeline:
        """Stateless: one output per input."""
        return self.add(Map(fn, name))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str = "flat_map") -> Pipeline:
        """Stateless: zero or more outputs per input."""
        return self.add(FlatMap(fn, name))

    def filter(self, fn: Callable[[Any], bool], name: str = "filter") -> Pipeline:
        """Stateless: keeps the inputs for which ``fn`` is true."""
        return self.add(Filter(fn, name))

    def stateful(self, fn: Callable[[Any, Any], Iterable[Any] | None],
                 init: Callable[[], Any], name: str = "stateful") -> Pipeline:
        """A :class:`Stateful` operator."""
        return self.add(Stateful(fn, init, name))

    def partitioned(self, fn: Callable[[Any, Any], Iterable[Any] | None], *,
                    key: Callable[[Any], Hashable], init: Callable[[Hashable], Any],
                    buckets: int = 100, partitioner: Callable[[Any], int] | None = None,
                    name: str = "partitioned") -> Pipeline:
        """A :class:`PartitionedStateful` operator."""
        return self.add(PartitionedStateful(fn, key, init, buckets, partitioner, name))

    def add(self, op: Map | FlatMap | Filter | Stateful | PartitionedStateful) -> Pipeline:
        """Appends an operator object (e.g. one of :mod:`stretchflow.workloads.micro`)."""
        if not isinstance(op, Map | FlatMap | Filter | Stateful | PartitionedStateful):
            raise FlowDefinitionError(f"not an operator of a pipeline: {op!r}")
        self.ops.append(op)
        return self

    def to_flow(self) -> tuple[Flow, Collector]:
        """A new flow of this pipeline and the collector at its end."""
        flow = Flow(self.name)
        s = flow.source(self.source)
        for op in self.ops:
            if isinstance(op, Map):
                s = s.map(op.fn, op.name)
            elif isinstance(op, FlatMap):
                s = s.flat_map(op.fn, op.name)
            elif isinstance(op, Filter):
                s = s.filter(op.fn, op.name)
            else:
                s = s.stateful(op)
        return flow, s.collect()

    def run(self, engine: str = "ordered", **options: Any) -> PipelineRun:
        """Runs the pipeline on ``engine`` (``ordered``, default, with the ordered engine's
        options, or ``reference``: the sequential run every parallel run must reproduce)."""
        if engine not in ENGINES:
            raise FlowDefinitionError(
                f"a pipeline runs on the {' or '.join(ENGINES)} engine, not {engine!r}: only "
                "they run the ordered-multicore paper's stateful operator kinds")
        flow, col = self.to_flow()
        res = flow.run(engine, **options)
        return PipelineRun(list(col.items), res)


__all__ = ["ENGINES", "PartitionedStateful", "Pipeline", "PipelineRun", "Stateful"]
