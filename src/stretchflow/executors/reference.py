"""The reference executor: sequential and exact, the oracle every other executor matches.

Each node of the flow becomes a Python iterator of ``(ts, payload)`` items in timestamp order
(explicit watermarks as ``(w, WATERMARK)``), pulled from the sinks:

* a source yields its checked, ordered items;
* a stateless operator applies its function and keeps the timestamp;
* an O+ runs Alg. 2 (processSN) on one instance owning every key. With several inputs it reads
  them through a timestamp merge, which delivers a tuple only when every input has shown a
  later or equal one — Definition 3's readiness, ties going to the lower input index — so its
  watermark is the timestamp of the tuple it processes. At the end of input every open window
  instance expires. An O+ whose kernels take runs of tuples (``update_many``, a columnar
  f_MK) reads the tuples up to the next watermark, at most :data:`RUN`, and hands them over
  as one run (``OPlusInstance.process_run``): the same outputs, fewer kernel calls.

A stream read by several consumers is teed; several sinks are pulled together through one
timestamp merge so that no branch runs far ahead of another.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import Filter, FlatMap, Map
from ..runtime.control import raise_user_error, user_error
from ..runtime.result import RunResult

Item = tuple[int, Any]
#: data tuples an O+ whose instance takes runs reads at once (OPlusInstance.process_run):
#: long enough to amortize a kernel's fixed cost per call (numba's, Arrow's)
RUN = 1024


def run(flow: Flow, parallelism: int = 1, key_groups: int | None = None) -> RunResult:
    """Runs ``flow`` to the end of its inputs on one thread.

    ``parallelism`` P > 1 runs each O+ as P instances in turn on this one thread, each owning
    the key groups f_μ gives it (g mod P of ``key_groups`` G, default max(128, 16·P)) and every
    instance reading every tuple (journal Alg. 2, processSN, on P instances): the partitioned
    algorithm without threads, so its output can be checked against P = 1's exactly."""
    flow.validate()
    G = key_groups or (max(128, 16 * parallelism) if parallelism > 1 else 1)
    counts: dict[str, list[int]] = {}
    streams = _compile(flow, counts, parallelism, G)
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


def _compile(flow: Flow, counts: dict[str, list[int]], P: int = 1,
             G: int = 1) -> list[Iterator[Item]]:
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
        if node.kind == "stateful":
            return _stateful(node.spec, ups[0])
        return _oplus(node.spec, ups, P, G)

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
        except Exception as e:
            raise user_error(op.name, ts, v, e) from e


def _stateful(op: Any, up: Iterator[Item]) -> Iterator[Item]:
    """A stateful operator of a :class:`~stretchflow.pipeline.Pipeline` (ordered-multicore
    paper): its instance keeps the state and returns each tuple's outputs in order."""
    process = op.instance().process
    for ts, v in up:
        if v is WATERMARK:
            yield ts, v
            continue
        yield from process(ts, v)


def _tag(items: Iterator[Item], i: int) -> Iterator[tuple[int, int, Any]]:
    for ts, v in items:
        yield ts, i, v


def _oplus(op: OPlus, ups: list[Iterator[Item]], P: int = 1, G: int = 1) -> Iterator[Item]:
    if P == 1 and G == 1:
        insts = [op.instance()]
    else:
        sigma = SharedState(G)
        assign = [g % P for g in range(G)]  # f_μ: key group g to instance g mod P
        insts = [op.instance(sigma, j, assign) for j in range(P)]
    if len(ups) == 1:
        tagged: Iterator[tuple[int, int, Any]] = _tag(ups[0], 0)
    else:
        tagged = heapq.merge(*(_tag(up, i) for i, up in enumerate(ups)), key=itemgetter(0))
    if insts[0].takes_runs:
        yield from _oplus_runs(op, insts, tagged)
        return
    ts = v = None
    try:
        if len(insts) == 1:
            inst = insts[0]
            process, advance = inst.process, inst.advance
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
        else:
            for ts, i, v in tagged:
                for inst in insts:
                    if v is WATERMARK:
                        inst.advance(ts)
                    else:
                        inst.process(ts, v, i)
                yield from _merged(insts)
                if v is WATERMARK:
                    yield ts, WATERMARK
        ts = v = None
        for inst in insts:
            inst.finish()
    except Exception as e:
        raise user_error(op.name, ts, v, e) from e
    yield from _merged(insts)


def _oplus_runs(op: OPlus, insts: list[OPlusInstance],
                tagged: Iterator[tuple[int, int, Any]]) -> Iterator[Item]:
    """The O+ reading its (merged) input in runs for ``OPlusInstance.process_run``: the data
    tuples up to the next watermark, at most RUN of them (issue #16: every engine runs the
    kernels on runs of tuples, so ScaleJoin's and wordcount's kernels cover many tuples per
    call here too). Pulling a run ahead changes when outputs are produced, never which: the
    merge already fixed each tuple's position (readiness), and process_run gives the outputs
    of processing its tuples one at a time. An upstream failure met while gathering is raised
    after the tuples before it are processed, as tuple at a time: an error of this operator
    on an earlier tuple still wins."""
    ts = v = None
    run: list[tuple[int, Any, int]] = []
    it = iter(tagged)
    try:
        while True:
            wm = upstream = None
            done = False
            try:
                for ts, i, v in it:
                    if v is WATERMARK:
                        wm = ts
                        break
                    run.append((ts, v, i))
                    if len(run) >= RUN:
                        break
                else:
                    done = True
            except Exception as e:  # noqa: BLE001 - re-raised below, after the run
                upstream = e
            if run:
                for inst in insts:
                    inst.process_run(run)
                run = []
                yield from _merged(insts)
            if upstream is not None:
                raise upstream
            if wm is not None:
                ts, v = wm, WATERMARK
                for inst in insts:
                    inst.advance(wm)
                yield from _merged(insts)
                yield wm, WATERMARK
            if done:
                break
        ts = v = None
        for inst in insts:
            inst.finish()
    except Exception as e:
        raise_user_error(op.name, ts, v, e)
    yield from _merged(insts)


def _merged(insts: list[OPlusInstance]) -> Iterator[Item]:
    """The instances' outputs of one step, merged by timestamp: each instance's are sorted
    and every instance read the same tuples, so all of them are at or below the watermark."""
    outs = [inst.take() for inst in insts if inst.out]
    if len(outs) == 1:
        yield from outs[0]
    elif outs:
        yield from heapq.merge(*outs, key=itemgetter(0))
