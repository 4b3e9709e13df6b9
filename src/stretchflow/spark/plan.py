"""From a Flow to Spark stages, and the Python kernels those stages run on the workers.

A Flow compiles to *feeds* and *stages*. A feed is a stream as Spark sees it: a producer (a
source, or an O+) followed by the fused chain of stateless operators in front of a consumer
(the same fusion as the local executors: stateless operators run where their input is
produced, STRETCH §7). A stage is one O+ with one feed per input.

A stream travels in *chunks*: a row ``(tmin, tmax, seq, n, p)`` holds up to :data:`CHUNK`
tuples pickled together as a list of ``(ts, seq, sub, payload)`` sorted by (ts, seq, sub) —
``seq`` the arrival number at the producer, ``sub`` the position among the outputs one input
tuple got from a flat_map. One pickled list per few thousand tuples instead of one row per
tuple: Spark's per-row costs (JVM rows, Arrow conversion, shuffle records) and pickle's
per-object overhead are paid per chunk. A routed chunk holds the tuples of one input for one
bucket, each with the keys the bucket owns; a partition merges its chunks back into
(ts, input, seq, sub) order (:func:`merge_chunks`).

The O+ runs shared-nothing (elastic-scaling §3, the SN duplication of STRETCH Alg. 1
forwardSN): f_MK's keys go to key groups ``g = stable_hash(key) % G`` and the groups to
*buckets* ``b = g % P``, one per Spark partition. A tuple is sent once to every bucket owning
at least one of its keys — a tuple with several keys in the same bucket reaches it once — and
the bucket's single :class:`OPlusInstance` (Alg. 2 processSN) sees only the keys it owns
(:func:`given_keys`). ``stable_hash`` (BLAKE2b), never Python's ``hash()``: workers are
separate processes with their own string-hash salt.
"""

from __future__ import annotations

import ast
import copy
import pickle
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..elastic.consistent_hash import stable_hash
from ..errors import FlowDefinitionError, OperatorError, SourceError, StretchflowError
from ..flow import Flow, Node
from ..operators.oplus import OPlus
from ..operators.stateless import Filter, FlatMap, Map, apply_batch
from ..runtime.control import user_error
from ..runtime.gc_hold import GC_HOLD

Stateless = Map | FlatMap | Filter

#: a chunk of a stream: first and last ts, first seq, tuples, pickled [(ts, seq, sub, payload)]
STREAM_SCHEMA = "tmin long, tmax long, seq long, n int, p binary"
#: a chunk routed to an O+: partitioning token, bucket, first ts, input index, first seq and
#: the pickled [(ts, i, seq, sub, payload, keys the bucket owns)]
ROUTED_SCHEMA = "dest int, b int, tmin long, i int, seq long, p binary"
#: tuples per chunk
CHUNK = 4096
_ORDER3 = itemgetter(0, 1, 2)  # (ts, seq, sub) of a stream item
_ORDER_ROUTED = itemgetter(0, 2, 3)  # (ts, seq, sub) of a routed item (one input per chunk)

_MEMO_LIMIT = 1 << 20  # keys whose bucket is remembered per worker (high-cardinality keys)


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: a kernel allocates millions of small acyclic
    objects (tuples, payload dicts, σ entries) and each generation-0 overflow would scan
    them, doubling the time of a kernel or of the driver's collect. A counted hold, shared
    with the VSN executor's reconfigurations, so nested and concurrent pauses compose."""
    GC_HOLD.acquire()
    try:
        yield
    finally:
        GC_HOLD.release()


Kernel = Callable[[Iterator[Any]], Iterator[Any]]  # a mapInArrow function


def gc_paused(kernel: Kernel) -> Kernel:
    """``kernel`` run with the garbage collector paused (:func:`no_gc`)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        with no_gc():
            yield from kernel(batches)

    return run


def dumps(p: Any) -> bytes:
    return pickle.dumps(p, protocol=5)


loads = pickle.loads


@dataclass
class Feed:
    """A producer node's stream through a fused chain of stateless operators."""

    producer: Node
    chain: list[Stateless] = field(default_factory=list)


@dataclass
class Stage:
    """An O+ and the feed of each of its inputs."""

    node: Node
    feeds: list[Feed]

    @property
    def op(self) -> OPlus:
        return self.node.spec


def feed_of(node: Node) -> Feed:
    """The feed a consumer of ``node``'s stream reads."""
    chain: list[Stateless] = []
    while node.kind == "stateless":
        chain.append(node.spec)
        node = node.inputs[0]
    chain.reverse()
    return Feed(node, chain)


def analyse(flow: Flow) -> tuple[list[Stage], list[Feed]]:
    """The O+ stages in topological order and the feed of each sink (of a flow
    :func:`..engines.run` has validated)."""
    stages = [Stage(n, [feed_of(u) for u in n.inputs]) for n in flow.nodes if n.kind == "oplus"]
    for n in flow.nodes:
        if n.kind not in ("source", "stateless", "oplus"):
            raise FlowDefinitionError(f"the spark engine cannot run node {n!r}")
    return stages, [feed_of(node) for node, _ in flow.sinks]


def needs_last_ts(op: OPlus) -> bool:
    """True when end-of-input expiry depends on the latest timestamp the *whole* operator saw
    (a ``single`` window set keeps sliding up to it and f_O may emit at each step; see
    ``OPlusInstance.saw_time``): each bucket must then be told the global latest ts."""
    if op.WT != "single":
        return False
    return not (op.output is None and (op.default_slide or op.slide_collapses))


# -- keys, groups, buckets ---------------------------------------------------------------------
class Buckets:
    """Key -> key group -> bucket, memoized per worker (BLAKE2b costs ~2 µs a key)."""

    def __init__(self, n_groups: int, n_buckets: int):
        self.G = n_groups
        self.P = n_buckets
        self._memo: dict[Any, int] = {}

    def group(self, key: Any) -> int:
        return stable_hash(key) % self.G

    def of(self, key: Any) -> int:
        b = self._memo.get(key)
        if b is None:
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            b = self._memo[key] = stable_hash(key) % self.G % self.P
        return b



def route(op: OPlus, q: Any, i: int, ts: int, buckets: Buckets) -> dict[int, Any] | None:
    """f_MK of one tuple split by owner (:func:`split_keys`), None for no keys; a failing
    f_MK is an :class:`OperatorError` naming the tuple."""
    try:
        ks = op.keys(q, i)
        return split_keys(ks, buckets) if ks else None
    except Exception as e:
        raise user_error(op.name, ts, q, e) from e


def split_keys(ks: Any, buckets: Buckets) -> dict[int, Any]:
    """f_MK's result split by owner: ``{owner: the keys it owns}``, each part a dict when f_MK
    returned one (the per-key values f_U sees), else a list of distinct keys (a set). The hot
    loop of routing: memo lookups inlined."""
    get, of = buckets._memo.get, buckets.of
    parts: dict[int, Any] = {}
    if isinstance(ks, dict):
        for k, v in ks.items():
            b = get(k)
            if b is None:
                b = of(k)
            d = parts.get(b)
            if d is None:
                parts[b] = {k: v}
            else:
                d[k] = v
        return parts
    if type(ks) is not set and type(ks) is not frozenset:
        ks = dict.fromkeys(ks)  # duplicates count once
    for k in ks:
        b = get(k)
        if b is None:
            b = of(k)
        lst = parts.get(b)
        if lst is None:
            parts[b] = [k]
        else:
            lst.append(k)
    return parts


def given_keys(op: OPlus, current: list[Any]) -> OPlus:
    """A copy of ``op`` whose f_MK returns ``current[0]``: the keys of the tuple that the
    row's owner owns, computed once by the routing stage (the splitter of Alg. 1 calls f_MK
    once per tuple) and shipped with the row — the ownership filter of the SN executor's
    ``SharedState``, without calling f_MK again in every copy of a duplicated tuple."""
    op2 = copy.copy(op)
    op2.keys = lambda t, i: current[0]  # type: ignore[method-assign]
    if getattr(op, "user_keys", None) is not None:  # Aggregate's instance calls user_keys
        op2.user_keys = lambda t: current[0]  # type: ignore[attr-defined]
    return op2


# -- kernels (run inside Spark's Python workers) -------------------------------------------------
def chain_outputs(chain: list[Stateless], ts: int, p: Any) -> list[Any]:
    """The payloads the fused stateless chain makes of one tuple (all keep ``ts``)."""
    items = [(ts, p)]
    for op in chain:
        items = apply_batch(op, items)
        if not items:
            return []
    return [q for _, q in items]


def chain_kernel(chain: list[Stateless]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function: a stream through a fused stateless chain (chunks -> chunks)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            out = []
            for raw in batch.column("p").to_pylist():
                for ts, seq, _, p in loads(raw):
                    for j, q in enumerate(chain_outputs(chain, ts, p)):
                        out.append((ts, seq, j, q))
            # a partition's chunks come in any order (round-robin repartitions, unions):
            # a chunk must be sorted inside
            out.sort(key=_ORDER3)
            yield chunks_batch(pa, out)

    return gc_paused(run)


def chunks_batch(pa: Any, items: list[tuple[int, int, int, Any]]) -> Any:
    """Stream rows (chunks of :data:`CHUNK`) for items sorted by (ts, seq, sub)."""
    cols: tuple[list, ...] = ([], [], [], [], [])
    tmin, tmax, seq, n, p = cols
    for a in range(0, len(items), CHUNK):
        part = items[a:a + CHUNK]
        tmin.append(part[0][0])
        tmax.append(part[-1][0])
        seq.append(part[0][1])
        n.append(len(part))
        p.append(dumps(part))
    return pa.RecordBatch.from_arrays(
        [pa.array(tmin, pa.int64()), pa.array(tmax, pa.int64()), pa.array(seq, pa.int64()),
         pa.array(n, pa.int32()), pa.array(p, pa.binary())],
        names=["tmin", "tmax", "seq", "n", "p"])


def route_kernel(chain: list[Stateless], op: OPlus, i: int, n_groups: int,
                 tokens: list[int]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function for input ``i`` of ``op``: the fused chain, then f_MK once per
    tuple, then the tuple with the keys each bucket owns goes to that bucket's chunk (Alg. 1
    forwardSN's duplication; a tuple reaches a bucket once however many of its keys it
    owns)."""
    P = len(tokens)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        buckets = Buckets(n_groups, P)
        for batch in batches:
            per: dict[int, list] = {}
            for raw in batch.column("p").to_pylist():
                for ts, seq, sub, p in loads(raw):
                    outs = enumerate(chain_outputs(chain, ts, p)) if chain else ((sub, p),)
                    for s, q in outs:
                        parts = route(op, q, i, ts, buckets)
                        if not parts:
                            continue
                        for b, part in parts.items():
                            lst = per.get(b)
                            if lst is None:
                                lst = per[b] = []
                            lst.append((ts, i, seq, s, q, part))
            cols: tuple[list, ...] = ([], [], [], [], [], [])
            dest, bs, tmin, i_o, seq_o, p_o = cols
            for b, lst in per.items():
                lst.sort(key=_ORDER_ROUTED)  # the batch's chunks come in any order
                for a in range(0, len(lst), CHUNK):
                    part = lst[a:a + CHUNK]
                    dest.append(tokens[b])
                    bs.append(b)
                    tmin.append(part[0][0])
                    i_o.append(i)
                    seq_o.append(part[0][2])
                    p_o.append(dumps(part))
            yield pa.RecordBatch.from_arrays(
                [pa.array(dest, pa.int32()), pa.array(bs, pa.int32()),
                 pa.array(tmin, pa.int64()), pa.array(i_o, pa.int32()),
                 pa.array(seq_o, pa.int64()), pa.array(p_o, pa.binary())],
                names=["dest", "b", "tmin", "i", "seq", "p"])

    return gc_paused(run)


def merge_chunks(batches: Iterator[Any]) -> Iterator[tuple]:
    """The items of routed chunks in (ts, i, seq, sub) order, the chunks arriving sorted by
    (tmin, i, seq) (``sortWithinPartitions``) and each sorted inside. An item is released
    once no chunk still to come can hold a smaller one: every later chunk starts at or after
    the chunk just read, so memory holds only chunks that overlap in time."""
    import heapq

    heap: list[tuple] = []  # (item key, chunk number, position, items)
    nc = 0
    for batch in batches:
        d = batch.to_pydict()
        for tmin, i, seq, raw in zip(d["tmin"], d["i"], d["seq"], d["p"], strict=True):
            bound = (tmin, i, seq)
            while heap and heap[0][0] < bound:
                yield from _advance(heap, bound)
            items = loads(raw)
            nc += 1
            heapq.heappush(heap, (items[0][:4], nc, 0, items))
    while heap:
        yield from _advance(heap, None)


def _advance(heap: list[tuple], bound: tuple | None) -> Iterator[tuple]:
    """Yields the smallest item, and the following items of its chunk while they stay below
    every other chunk's head and ``bound`` (a run, without touching the heap)."""
    import heapq

    _, nc, pos, items = heap[0]
    limit = min(heap[1], heap[2])[0] if len(heap) > 2 else heap[1][0] if len(heap) > 1 \
        else None
    if bound is not None and (limit is None or bound < limit):
        limit = bound
    n = len(items)
    while True:
        yield items[pos]
        pos += 1
        if pos == n:
            heapq.heappop(heap)
            return
        key = items[pos][:4]
        if limit is not None and not key < limit:
            heapq.heapreplace(heap, (key, nc, pos, items))
            return


def oplus_kernel(op: OPlus, last_ts: int | None,
                 final_wm: int | None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function over one partition's routed chunks sorted by (tmin, i, seq): one
    O+ instance for all the partition's buckets runs Alg. 2 processSN on every tuple in
    (ts, i, seq, sub) order with the keys the tuple carries, then end-of-input expiry. Emits
    the instance's outputs (ts-sorted) as stream chunks."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        current: list[Any] = [None]
        inst = given_keys(op, current).instance()
        process = inst.process
        out = Outputs()
        ts = p = None
        try:
            for ts, i, _, _, p, ks in merge_chunks(batches):
                current[0] = ks
                process(ts, p, i)
                if inst.out:
                    yield from out.collect(inst)
            ts = p = None
            if final_wm is not None:
                inst.advance(final_wm)
            if last_ts is not None:
                inst.saw_time(last_ts)
            inst.finish()
        except Exception as e:
            raise user_error(op.name, ts, p, e) from e
        yield from out.collect(inst, final=True)

    return gc_paused(run)


class Outputs:
    """An O+ instance's outputs as stream chunks (:func:`chunks_batch`) of :data:`CHUNK`
    tuples, numbered in emission order from the Spark partition's base (partition << 40), so
    (ts, seq) orders the outputs of all partitions."""

    def __init__(self) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        self.base = (ctx.partitionId() if ctx is not None else 0) << 40
        self.items: list[tuple[int, int, int, Any]] = []

    def collect(self, inst: Any, final: bool = False) -> Iterator[Any]:
        """Takes ``inst``'s outputs; yields a chunk once :data:`CHUNK` are held (``final``:
        whatever is held)."""
        import pyarrow as pa

        items = self.items
        k = self.base + len(items)
        for ts, q in inst.take():
            items.append((ts, k, 0, q))
            k += 1
        if items and (final or len(items) >= CHUNK):
            yield chunks_batch(pa, items)
            self.base += len(items)
            self.items = []


# -- errors from the workers -------------------------------------------------------------------
class RemoteOperatorError(OperatorError):
    """An :class:`OperatorError` raised in a Spark worker, re-raised on the driver. Only its
    message crosses from the worker (inside Spark's own exception text), so ``operator``,
    ``ts`` and ``payload`` are read back from it: the values as the worker wrote them (a
    payload the message shortened stays text)."""

    def __init__(self, message: str):
        StretchflowError.__init__(self, message)
        self.operator, self.ts, self.payload = _parse_operator_message(message)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _parse_operator_message(message: str) -> tuple[Any, Any, Any]:
    """``operator 'NAME' failed on tuple ts=TS payload=PAYLOAD: CAUSE`` (OperatorError's own
    format) back into its three values; (None, None, None) for another text."""
    m = re.match(r"operator (.+?) failed on tuple ts=(.*?) payload=", message)
    if m is None:
        return None, None, None
    rest = message[m.end():]
    if rest.startswith(": "):
        return _literal(m.group(1)), _literal(m.group(2)), None  # no payload was shown
    # the payload's repr may itself hold ": ": the first cut that parses is the payload
    payload: Any = None
    for k in (k for k in range(len(rest)) if rest.startswith(": ", k)):
        try:
            payload = ast.literal_eval(rest[:k])
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    else:  # shortened with "...": up to the cause's exception type
        cause = re.search(r": [A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b", rest)
        payload = rest[:cause.start()] if cause else rest
    return _literal(m.group(1)), _literal(m.group(2)), payload


class RemoteSourceError(SourceError):
    """A :class:`SourceError` raised in a Spark worker, re-raised on the driver."""

    def __init__(self, message: str):
        StretchflowError.__init__(self, message)


_REMOTE = re.compile(r"stretchflow\.(?:errors|spark\.plan)\.(\w*(?:OperatorError|SourceError)):"
                     r" (.*)")


def translate(e: BaseException) -> BaseException:
    """The stretchflow error a worker raised, out of Spark's wrapping; else ``e``."""
    found = list(_REMOTE.finditer(str(e)))
    if not found:
        return e
    m = found[-1]  # the last one: the innermost re-raise names the operator and tuple
    cls = RemoteSourceError if m.group(1).endswith("SourceError") else RemoteOperatorError
    return cls(m.group(2).strip())
