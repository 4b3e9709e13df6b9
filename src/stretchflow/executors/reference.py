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

Batches (issues #16, #31): an A+ with columnar f_MK, f_O and ``combine``
(``Aggregate.columnar``) runs as a :class:`~stretchflow.operators.columnar.ColumnarSlicedInstance`
at parallelism 1, and as P instances sharing one columnar σ at P > 1 (:func:`_oplus_columnar`).
A source whose every reader takes batches (such an A+, a Map or Filter with a columnar form, or
a sink) delivers :class:`~stretchflow.batch.Batch` items ``(last ts, batch)``
(``Source.batches``); a Map or Filter with a columnar form applies it to each batch, the A+
processes each batch with Arrow kernels and emits its windows as batches (which an A+ behind it
takes whole), and a sink writes a batch at once. A reader that takes tuples gets a batch's
tuples one by one, in order. The run summary's ``paths`` names the path of each O+ and of each
Map or Filter with a columnar form, ``columnar_fallback`` why an O+ with columnar forms took
tuples. The next batch is read on a thread while this one is computed, and the engine's file
sinks write on a thread of their own (:mod:`.reference_overlap`): the same calls in the same
order, so the same bytes; the three steps are mostly Arrow kernels, which release the GIL.

Checkpoints (issue #17, ``checkpoint=DIR``): the sources put checkpoint barriers into their
streams (:mod:`stretchflow.runtime.checkpoint`); a stateless operator forwards them; an O+ at
the first barrier of an epoch processes what it gathered, advances its watermark to the cut,
snapshots its instances (:mod:`stretchflow.operators.snapshot`) and forwards it; the sinks'
drain commits each epoch's output as a part and writes the checkpoint.

Live sources (issue #19): a paced source gets a watermark before each wait for its next tuple
(:func:`~stretchflow.io.sources.marked_items`, the sources' one pacing with watermarks; a
followed file yields its own when it goes quiet), which flushes the O+'s run and the drain's
buffer: outputs reach the sink as the watermark passes them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..batch import WIDE, Batch, prefer_system_allocator
from ..engines import Settings, given
from ..engines import run as run_engine
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..io.sinks import CsvSink, JsonLinesSink, ParquetSink
from ..io.sources import marked_items, read_batches
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import Filter, FlatMap, Map, over_batch
from ..runtime.control import CheckpointBarrier, raise_user_error, user_error
from ..runtime.drain import SinkDrain, pull_merged
from ..runtime.result import RunResult
from ..runtime.skeleton import Run
from ..sorted_runs import merge_runs
from .plan import one_row_each, readers_of, stateless_paths
from .reference_overlap import WriteBehind, read_ahead

if TYPE_CHECKING:  # imported by a run that checkpoints (hashlib, pickle, json: start-up time)
    from ..runtime.checkpoint import Checkpointer

Item = tuple[int, Any]
#: data tuples an O+ whose instance takes runs reads at once (OPlusInstance.process_run):
#: long enough to amortize a kernel's fixed cost per call (numba's, Arrow's)
RUN = 1024
#: tuples a source batch holds (``Source.batches``): peak RSS of 200 000 tweets' wordcount was
#: 153 MB at 16 384 against 230 MB at 65 536 (the chunk, its table, tokens and output text are
#: alive at once). 8 192 since Parquet is read at the size asked for (it was read at 8 192
#: whatever was asked): paircount on 1 M tweets, JSON Lines, 243 against 298 MB at 16 384,
#: wall 1.01x (farm-bench); hot items with lambdas 0.88x
BATCH = 8_192
#: tuples of a source batch whose readers keep at most one row per tuple (a flow of column
#: expressions, :func:`~.plan.one_row_each`): mean price per category over 10 M bids in
#: Parquet took 1.5 s at 16 384 and 1.1 s at 65 536 here; the tweets' flows, whose tokens
#: and pairs multiply the rows, keep :data:`BATCH` (paircount's peak RSS on 1 M tweets,
#: Parquet, was 307 MB at 16 384 against 1 050 MB at 65 536)
WIDE_BATCH = WIDE
#: sinks whose writes run on a thread of their own while the flow computes (:func:`_drain`):
#: the engine's file sinks, which format with Arrow kernels (GIL released) and write to a
#: file; a user's sink keeps being called from the run's thread
_OVERLAPPED = (JsonLinesSink, CsvSink, ParquetSink)


def run(flow: Flow, parallelism: int | None = None, key_groups: int | None = None,
        columnar: str | None = None, checkpoint: str | None = None,
        checkpoint_every: Any = None) -> RunResult:
    """Runs ``flow`` to the end of its inputs on one thread.

    ``parallelism`` P > 1 runs each O+ as P instances in turn on this one thread, each owning
    the key groups f_μ gives it (g mod P of ``key_groups`` G, default 16·P) and every
    instance reading every tuple (journal Alg. 2, processSN, on P instances): the partitioned
    algorithm without threads, so its output can be checked against P = 1's exactly.

    ``columnar="off"`` runs every O+ tuple at a time even where it has columnar forms (the
    tuple path, e.g. to compare the two).

    ``checkpoint`` DIR takes a checkpoint there every ``checkpoint_every`` (N input tuples,
    ``"Ns"`` seconds; default 10 s), holds the output there until the end of input and resumes
    from the checkpoint DIR holds (docs/checkpoints.md)."""
    return run_engine(flow, "reference", given(locals()))


def execute(flow: Flow, s: Settings) -> RunResult:
    """Runs ``flow`` with checked settings ``s`` (:func:`stretchflow.engines.run`'s call)."""
    parallelism, columnar = s.parallelism, s.columnar
    G = s.key_groups or (16 * parallelism if parallelism > 1 else 1)
    counts: dict[str, list[int]] = {}
    instances: dict[str, list[OPlusInstance]] = {}
    ckpt = None
    if s.checkpoint is not None:
        from ..runtime.checkpoint import Checkpointer

        ckpt = Checkpointer(s.checkpoint, s.checkpoint_every, flow, {"columnar": columnar},
                            [n.name for n in flow.nodes if n.kind in ("oplus", "stateful")])
    # the runtime's skeleton: the sinks (or the checkpoint's held output), the result; no
    # threads of its own (the pull below runs on the caller's), no latency nor metrics
    rt = Run("reference", flow, checkpoints=ckpt, measures=())
    info: dict[str, Any] = {}
    try:
        streams = _compile(flow, counts, parallelism, G, instances, columnar == "on", ckpt,
                           info)
    except BaseException:
        if ckpt is not None:
            ckpt.close()
        raise
    sinks = rt.sinks

    def pull() -> None:
        if ckpt is not None:  # the checkpoint's drain: parts per epoch, then the checkpoint
            ckpt.drain(streams)
        elif len(sinks) == 1:
            _drain(streams[0], sinks[0])
        else:
            pull_merged(streams, [SinkDrain(s) for s in sinks])

    rt.execute(body=pull)
    fallback = info.get("fallback")
    return rt.result({name: c[0] for name, c in counts.items()},
                     {"paths": {**{name: insts[0].path for name, insts in instances.items()
                                   if insts},
                                **stateless_paths(flow, info.get("streams", set()))},
                      # why an O+ with columnar forms took tuples
                      **({"columnar_fallback": fallback} if fallback else {})})


def _drain(stream: Iterator[Item], sink: Any) -> None:
    """One sink's stream through the runtime's drain, the engine's file sinks written on a
    thread of their own (:class:`~.reference_overlap.WriteBehind`)."""
    if type(sink) in _OVERLAPPED:
        with WriteBehind(sink.write, sink.write_batch, "stretchflow-sink") as w:
            SinkDrain(w).pull(stream)
    else:
        SinkDrain(sink).pull(stream)


def _compile(flow: Flow, counts: dict[str, list[int]], P: int = 1, G: int = 1,
             instances: dict[str, list[OPlusInstance]] | None = None,
             batches_on: bool = True, ckpt: Checkpointer | None = None,
             info: dict[str, Any] | None = None) -> list[Iterator[Item]]:
    """One iterator per sink, built bottom-up; shared streams are teed. ``info`` gets
    ``streams`` (the nodes whose streams hold batches) and ``fallback`` (why each O+ with
    columnar forms takes tuples)."""
    consumers = flow.consumers()
    readers = readers_of(flow)  # a sink is a None
    able = [node for node in flow.nodes
            if node.kind == "oplus" and getattr(node.spec, "columnar", False)]
    # at P > 1 (or G > 1) P instances share one columnar σ (_oplus_columnar); their
    # partials have no snapshot here, so a checkpointed run takes tuples there
    shared_ok = (P == 1 and G == 1) or ckpt is None
    fallback = {node.name: "columnar='off'" if not batches_on else
                "several inputs" if len(node.inputs) > 1 else
                "a checkpointed run at parallelism > 1: the shared columnar state has no "
                "snapshot on this engine" for node in able}
    columnar = {node for node in able
                if len(node.inputs) == 1 and batches_on and shared_ok}
    for node in columnar:
        del fallback[node.name]
    if info is not None:
        info["fallback"] = fallback
    if columnar:
        prefer_system_allocator()
    one_sink = len(flow.sinks) == 1  # several sinks read through one tuple merge

    def takes_batches(reader: Node | None) -> bool:
        # a sink; a columnar O+ or stateless operator (tables); a stateless operator or a
        # one-input O+ of Python functions (rows, issue #32); several inputs are merged
        # tuple by tuple (readiness is per tuple)
        if reader is None:
            return one_sink
        return reader in columnar or (batches_on and (
            reader.kind == "stateless" or (reader.kind == "oplus" and len(reader.inputs) == 1)))

    def needs_tables(reader: Node | None) -> bool:
        return reader is not None and (reader in columnar or (
            reader.kind == "stateless" and getattr(reader.spec, "batch_fn", None) is not None))

    batchy: set[Node] = set()  # nodes whose stream may hold Batch items
    pools: dict[Node, list[Iterator[Item]]] = {}

    def take(node: Node, reader: Node | None) -> Iterator[Item]:
        if node not in pools:
            it = build(node)
            n = consumers[node]
            pools[node] = list(itertools.tee(it, n)) if n > 1 else [it]
        it = pools[node].pop()
        return _explode(it) if node in batchy and not takes_batches(reader) else it

    def build(node: Node) -> Iterator[Item]:
        if node.kind == "source":
            counter = counts.setdefault(node.name, [0])
            batches = getattr(node.spec, "batches", None) if batches_on else None
            if batches is not None and all(takes_batches(r) for r in readers[node]):
                bs = read_batches(node.spec,
                                  WIDE_BATCH if one_row_each(node, readers) else BATCH,
                                  any(needs_tables(r) for r in readers[node]))
                if bs is not None:
                    batchy.add(node)
                    if ckpt is not None:
                        return ckpt.batches(node.name, bs, counter)
                    if len(readers[node]) == 1 and readers[node][0] in columnar:
                        # f_MK's explode of the next batch on the reading thread
                        from ..operators.columnar import explode_ahead

                        bs = explode_ahead(readers[node][0].spec, bs)
                    return _counted_batches(read_ahead(bs, "stretchflow-read"), counter)
            # paced: a watermark before each wait, without which a window's output waited
            # in the O+'s run (RUN) and the drain's buffer for more tuples or the end
            items = marked_items(node.spec)
            if ckpt is not None:
                return ckpt.source(node.name, items, counter)
            return _counted(items, counter)
        ups = [take(u, node) for u in node.inputs]
        if node.kind == "stateless":
            if node.inputs[0] in batchy and takes_batches(node):
                batchy.add(node)
                return _stateless_batches(node.spec, ups[0])
            return _stateless(node.spec, ups[0])
        if node.kind == "stateful":
            return _stateful(node.spec, ups[0], node.name, ckpt)
        insts = instances.setdefault(node.name, []) if instances is not None else []
        if node in columnar:
            batchy.add(node)
            return _oplus_columnar(node.spec, ups[0], insts, node.name, ckpt, P, G)
        if node.inputs[0] in batchy and takes_batches(node):
            batchy.add(node)  # batches of rows in, the outputs of each batch out as one
        return _oplus(node.spec, ups, P, G, insts, node.name, ckpt)

    out = [take(node, None) for node, _ in flow.sinks]
    if info is not None:
        info["streams"] = batchy
    return out


def _counted_batches(batches: Iterator[Batch], counter: list[int]) -> Iterator[Item]:
    n = 0
    for b in batches:
        if len(b):
            n += len(b)
            counter[0] = n
            yield b.last, b
    counter[0] = n


def _explode(items: Iterator[Item]) -> Iterator[Item]:
    """A stream with Batch items as tuples, in order (for readers that take tuples)."""
    for item in items:
        if type(item[1]) is Batch:
            yield from item[1].items()
        else:
            yield item


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
        if v is WATERMARK or type(v) is CheckpointBarrier:
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


def _stateless_batches(op: Map | FlatMap | Filter, up: Iterator[Item]) -> Iterator[Item]:
    """A stateless operator over a stream that holds batches: a batch goes through it at once
    (:func:`~stretchflow.operators.stateless.over_batch`: a columnar form on its table —
    a batch without a table, or one the form refuses, tuple by tuple through ``fn``, which
    names the tuple it fails on — else the function over its rows in one loop, issue #32),
    a batch out; the outputs before a failing tuple go on before its error is raised
    (tuple-at-a-time order). Anything else goes through ``fn``."""
    for ts, v in up:
        if type(v) is not Batch:
            yield from _stateless(op, iter(((ts, v),)))
            continue
        out, err = over_batch(op, v)
        if len(out):
            yield out.last, out
        if err is not None:
            raise err


def _stateful(op: Any, up: Iterator[Item], name: str = "",
              ckpt: Checkpointer | None = None) -> Iterator[Item]:
    """A stateful operator of a :class:`~stretchflow.pipeline.Pipeline` (ordered-multicore
    paper): its instance keeps the state and returns each tuple's outputs in order."""
    inst = op.instance()
    process = inst.process
    if ckpt is not None:
        from ..operators import snapshot

        if (blob := ckpt.restored(name)) is not None:
            snapshot.restore_stateful(inst, blob)
    for ts, v in up:
        if v is WATERMARK:
            yield ts, v
            continue
        if type(v) is CheckpointBarrier:
            if ckpt is not None:
                ckpt.snapshot(name, v.epoch, snapshot.snapshot_stateful(inst))
            yield ts, v
            continue
        yield from process(ts, v)


def _tag(items: Iterator[Item], i: int) -> Iterator[tuple[int, int, Any]]:
    for ts, v in items:
        yield ts, i, v


def _oplus(op: OPlus, ups: list[Iterator[Item]], P: int = 1, G: int = 1,
           registry: list[OPlusInstance] | None = None, name: str = "",
           ckpt: Checkpointer | None = None) -> Iterator[Item]:
    if P == 1 and G == 1:
        insts = [op.instance()]
    else:
        sigma = SharedState(G)
        assign = [g % P for g in range(G)]  # f_μ: key group g to instance g mod P
        insts = [op.instance(sigma, j, assign) for j in range(P)]
    if registry is not None:
        registry[:] = insts  # for the run summary's paths
    at_barrier = _Barriers(name, insts, ckpt)
    lock = threading.Lock()  # the instances' shared f_MK of a batch (one thread here)
    if len(ups) == 1:
        tagged: Iterator[tuple[int, int, Any]] = _tag(ups[0], 0)
    else:
        tagged = heapq.merge(*(_tag(up, i) for i, up in enumerate(ups)), key=itemgetter(0))
    if insts[0].takes_runs:
        yield from _oplus_runs(op, insts, tagged, at_barrier, lock)
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
                tv = type(v)
                if tv is Batch:  # rows of a batch in one loop, their outputs as one batch
                    inst.process_rows(v.ts_list(), v.payloads, i)
                    yield from _as_batch(insts)
                    continue
                if tv is CheckpointBarrier:
                    yield from at_barrier(ts, v)
                    continue
                process(ts, v, i)
                if inst.out:
                    yield from inst.take()
        else:
            for ts, i, v in tagged:
                if type(v) is CheckpointBarrier:
                    yield from at_barrier(ts, v)
                    continue
                if type(v) is Batch:
                    _shared_rows(insts, v, lock, i)
                    yield from _as_batch(insts)
                    continue
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
        raise_user_error(op.name, ts, v, e)
    yield from _merged(insts)


def _shared_rows(insts: list[OPlusInstance], batch: Batch, lock: Any, i: int) -> None:
    """A batch of rows through P instances sharing σ: an A+'s keys computed once for all of
    them (``process_shared``, as VSN's instances do: f_MK once per tuple at any P), any other
    O+ row by row in each (``process_rows``)."""
    rows = None
    for inst in insts:
        shared = getattr(inst, "process_shared", None)
        if shared is not None and i == 0:
            shared(batch, lock)
            continue
        if rows is None:
            rows = batch.ts_list()
        inst.process_rows(rows, batch.payloads, i)


def _as_batch(insts: list[OPlusInstance]) -> Iterator[Item]:
    """The instances' outputs of one step (:func:`_merged`) as one batch of rows."""
    items = _merged(insts)
    if items:
        yield items[-1][0], Batch.of_items(items)


def _oplus_runs(op: OPlus, insts: list[OPlusInstance],
                tagged: Iterator[tuple[int, int, Any]], at_barrier: _Barriers, lock: Any
                ) -> Iterator[Item]:
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

    def flush() -> Iterator[Item]:
        nonlocal run
        if run:
            for inst in insts:
                inst.process_run(run)
            run = []  # a new list: an instance may keep the one it was handed
            yield from _merged(insts)

    try:
        for item in _then_failure(tagged):
            if type(item) is _Failure:
                yield from flush()  # the tuples before the upstream error go first
                raise item.error
            ts, i, v = item
            if type(v) is Batch:
                yield from flush()
                _shared_rows(insts, v, lock, i)
                yield from _as_batch(insts)
                continue
            if v is WATERMARK:
                yield from flush()
                for inst in insts:
                    inst.advance(ts)
                yield from _merged(insts)
                yield ts, WATERMARK
                continue
            if type(v) is CheckpointBarrier:
                yield from flush()
                yield from at_barrier(ts, v)
                continue
            run.append((ts, v, i))
            if len(run) >= RUN:
                yield from flush()
        yield from flush()
        ts = v = None
        for inst in insts:
            inst.finish()
    except Exception as e:
        raise_user_error(op.name, ts, v, e)
    yield from _merged(insts)


def _oplus_columnar(op: Any, up: Iterator[Item],
                    registry: list[OPlusInstance] | None = None, name: str = "",
                    ckpt: Checkpointer | None = None, P: int = 1, G: int = 1
                    ) -> Iterator[Item]:
    """A columnar A+ (``Aggregate.columnar``): batches go through Arrow kernels as they come;
    tuples (from a reader upstream that takes tuples) are gathered into batches of up to
    :data:`RUN` first, cut at every watermark; windows leave as batches. Errors are reported
    as tuple at a time: the columnar instance falls back to tuples to name the tuple.

    At P > 1 (or G > 1) the P instances share one columnar σ, as VSN's do
    (:class:`~stretchflow.operators.columnar_shared.ColumnarShared`): every instance reads
    every batch in turn, the first sums it once for all, each combines the windows of the key
    groups f_μ gives it (g mod P) and the instances' windows are merged by timestamp — the
    partitioned algorithm on one thread, as :func:`_oplus` runs the tuple path."""
    if P == 1 and G == 1:
        insts = [op.columnar_instance()]
        take = _taken_batch
    else:
        from ..operators.columnar_shared import ColumnarShared, ColumnarVSNInstance

        shared = ColumnarShared(op, G)
        assign = [g % P for g in range(G)]  # f_μ: key group g to instance g mod P
        insts = [ColumnarVSNInstance(op, shared, j, assign, True) for j in range(P)]
        take = _merged
    if registry is not None:
        registry[:] = insts
    at_barrier = _Barriers(name, insts, ckpt)
    run: list[Item] = []
    ts = v = None

    def flush() -> Iterator[Item]:
        if run:
            b = Batch.of_items(run)
            for inst in insts:
                inst.process_batch(b)
            run.clear()
        yield from take(insts)

    try:
        for item in _then_failure(up):
            if type(item) is _Failure:
                # an upstream error met while gathering: the tuples before it go first, so
                # an error of this operator on an earlier tuple still wins (tuple at a time)
                yield from flush()
                raise item.error
            ts, v = item
            if type(v) is Batch:
                yield from flush()
                for inst in insts:
                    inst.process_batch(v)
                yield from flush()
            elif v is WATERMARK:
                yield from flush()
                for inst in insts:
                    inst.advance(ts)
                yield from flush()
                yield ts, WATERMARK
            elif type(v) is CheckpointBarrier:
                yield from flush()
                yield from at_barrier(ts, v, flush)
            else:
                run.append((ts, v))
                if len(run) >= RUN:
                    yield from flush()
        ts = v = None
        yield from flush()
        for inst in insts:
            inst.finish()
    except Exception as e:
        raise_user_error(op.name, ts, v if type(v) is not Batch else v.payloads[0], e)
    yield from flush()


def _taken_batch(insts: list[Any]) -> Iterator[Item]:
    """The one sequential columnar instance's windows so far, as one batch."""
    out = insts[0].take_batch()
    if out is not None:
        yield out.last, out


class _Barriers:
    """An O+'s part at checkpoint barriers: on the first barrier of each epoch (a merge
    delivers one per input, one after the other) its instances, which have processed every
    tuple up to the cut, advance to the cut (everything after the barrier is later), emit
    what that closes, snapshot and forward the barrier. Restores the instances on resume."""

    def __init__(self, name: str, insts: list[OPlusInstance], ckpt: Checkpointer | None):
        self.name, self.insts, self.ckpt = name, insts, ckpt
        self.epoch = -1
        if ckpt is not None and (blob := ckpt.restored(name)) is not None:
            from ..operators import snapshot

            snapshot.restore(name, insts, blob)

    def __call__(self, ts: Any, b: CheckpointBarrier,
                 flush: Any = None) -> Iterator[Item]:
        if b.epoch <= self.epoch:
            return  # the same barrier from another input
        self.epoch = b.epoch
        for inst in self.insts:
            inst.advance(b.cut)
        # the outputs it closed, by the operator's own way out (tables for the columnar one)
        yield from flush() if flush is not None else _merged(self.insts)
        if self.ckpt is not None:
            from ..operators import snapshot

            self.ckpt.snapshot(self.name, b.epoch, snapshot.snapshot(self.name, self.insts))
        yield ts, b


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


def _then_failure(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, then ``_Failure(e)`` instead of raising an upstream error ``e``: a reader
    that gathers runs processes what it gathered before raising it (tuple-at-a-time order)."""
    try:
        yield from items
    except Exception as e:  # noqa: BLE001 - handed to the reader, which raises it in order
        yield _Failure(e)


def _merged(insts: list[OPlusInstance]) -> list[Item]:
    """The instances' outputs of one step, merged by timestamp: each instance's are sorted
    and every instance read the same tuples, so all of them are at or below the watermark.
    One instance's list is returned as it is (no generator step per output)."""
    outs = [inst.take() for inst in insts if inst.out]
    if len(outs) == 1:
        return outs[0]
    return merge_runs(outs, itemgetter(0)) if outs else []
