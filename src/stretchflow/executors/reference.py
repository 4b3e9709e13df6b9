"""The reference executor: sequential and exact, the oracle every other executor matches.

Each node of the flow becomes a Python iterator of ``(ts, payload)`` items in timestamp order
(explicit watermarks as ``(w, WATERMARK)``), pulled from the sinks:

* a source yields its checked, ordered items;
* a stateless operator applies its function and keeps the timestamp;
* an O+ runs Alg. 2 (processSN) on one instance owning every key. With several inputs it reads
  them through a timestamp merge, which delivers a tuple only when every input has shown a
  later or equal one — Definition 3's readiness, ties going to the lower input index — so its
  watermark is the timestamp of the tuple it processes. At the end of input every open window
  instance expires.

A stream read by several consumers is teed; several sinks are pulled together through one
timestamp merge so that no branch runs far ahead of another.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..errors import OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus
from ..operators.stateless import Filter, FlatMap, Map

Item = tuple[int, Any]


@dataclass
class RunResult:
    """What a run did: tuples read per source, tuples written per sink, wall-clock time."""

    engine: str
    elapsed: float
    tuples_in: dict[str, int] = field(default_factory=dict)
    tuples_out: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_in(self) -> int:
        return sum(self.tuples_in.values())

    @property
    def throughput(self) -> float:
        """Input tuples per second of wall-clock time."""
        return self.total_in / self.elapsed if self.elapsed > 0 else float("inf")


def run(flow: Flow, **options: Any) -> RunResult:
    """Runs ``flow`` to the end of its inputs on one thread."""
    if options:
        raise TypeError(f"the reference engine takes no options, got {sorted(options)}")
    flow.validate()
    counts: dict[str, list[int]] = {}
    streams = _compile(flow, counts)
    t0 = time.perf_counter()
    sinks = [s for _, s in flow.sinks]
    for s in sinks:
        s.open()
    try:
        if len(sinks) == 1:
            _drain(streams[0], sinks[0])
        else:
            _drain_many(streams, sinks)
    finally:
        for s in sinks:
            s.close()
    elapsed = time.perf_counter() - t0
    return RunResult(
        engine="reference",
        elapsed=elapsed,
        tuples_in={name: c[0] for name, c in counts.items()},
        tuples_out={s.name: s.count for s in sinks},
    )


def _drain(stream: Iterator[Item], sink: Any, batch: int = 4096) -> None:
    buf: list[Item] = []
    append = buf.append
    for item in stream:
        if item[1] is not WATERMARK:
            append(item)
            if len(buf) < batch:
                continue
        elif not buf:
            continue
        # a full batch, or a watermark: what it closed reaches the sink now, not at the end
        sink.write(buf)
        buf = []
        append = buf.append
    if buf:
        sink.write(buf)


def _drain_many(streams: list[Iterator[Item]], sinks: list[Any]) -> None:
    tagged = [_tag(s, i) for i, s in enumerate(streams)]
    bufs: list[list[Item]] = [[] for _ in sinks]
    for ts, i, p in heapq.merge(*tagged, key=itemgetter(0)):
        if p is WATERMARK:
            if bufs[i]:
                sinks[i].write(bufs[i])
                bufs[i] = []
            continue
        bufs[i].append((ts, p))
        if len(bufs[i]) >= 4096:
            sinks[i].write(bufs[i])
            bufs[i] = []
    for b, s in zip(bufs, sinks, strict=True):
        if b:
            s.write(b)


def _compile(flow: Flow, counts: dict[str, list[int]]) -> list[Iterator[Item]]:
    """One iterator per sink, built bottom-up; shared streams are teed."""
    consumers = flow.consumers()
    pools: dict[Node, list[Iterator[Item]]] = {}

    def take(node: Node) -> Iterator[Item]:
        if node not in pools:
            it = build(node)
            n = consumers[node]
            pools[node] = list(itertools.tee(it, n)) if n > 1 else [it]
        return pools[node].pop()

    def build(node: Node) -> Iterator[Item]:
        if node.kind == "source":
            counter = counts.setdefault(node.name, [0])
            return _counted(node.spec.items(), counter)
        ups = [take(u) for u in node.inputs]
        if node.kind == "stateless":
            return _stateless(node.spec, ups[0])
        return _oplus(node.spec, ups)

    return [take(node) for node, _ in flow.sinks]


def _counted(items: Iterator[Item], counter: list[int]) -> Iterator[Item]:
    n = 0
    for item in items:
        if item[1] is not WATERMARK:
            n += 1
        yield item
    counter[0] = n


def _stateless(op: Map | FlatMap | Filter, up: Iterator[Item]) -> Iterator[Item]:
    fn = op.fn
    kind = type(op)
    for ts, v in up:
        if v is WATERMARK:
            yield ts, v
            continue
        try:
            if kind is Map:
                yield ts, fn(v)
            elif kind is Filter:
                if fn(v):
                    yield ts, v
            else:
                for out in fn(v):
                    yield ts, out
        except StretchflowError:
            raise
        except Exception as e:
            raise OperatorError(op.name, ts, v, e) from e


def _tag(items: Iterator[Item], i: int) -> Iterator[tuple[int, int, Any]]:
    for ts, v in items:
        yield ts, i, v


def _oplus(op: OPlus, ups: list[Iterator[Item]]) -> Iterator[Item]:
    inst = op.instance()
    process, advance = inst.process, inst.advance
    if len(ups) == 1:
        tagged: Iterator[tuple[int, int, Any]] = _tag(ups[0], 0)
    else:
        tagged = heapq.merge(*(_tag(up, i) for i, up in enumerate(ups)), key=itemgetter(0))
    ts = v = None
    try:
        for ts, i, v in tagged:
            if v is WATERMARK:
                advance(ts)
                if inst.out:
                    yield from inst.take()
                yield ts, WATERMARK
                continue
            process(ts, v, i)
            if inst.out:
                yield from inst.take()
        ts = v = None
        inst.finish()
    except StretchflowError:
        raise  # a source's or an upstream operator's error already names its origin
    except Exception as e:
        raise OperatorError(op.name, ts, v if ts is not None else "<end of input>", e) from e
    yield from inst.take()
