"""The shared-nothing (SN) executor: ``--engine sn``, channels as threads.

One O+ runs on N *channels*, each with its own private σ (no state is shared between
channels, unlike the VSN executor). The structure follows elastic-scaling §3–§6 and the
STRETCH journal's Alg. 1 (forwardSN) and Alg. 2 (processSN):

* **Splitter** (one thread, Alg. 1 forwardSN): merges the O+'s inputs by timestamp (ties to
  the lower input index, as the reference executor), applies the stateless chains in front of
  the O+, calls f_MK and sends the tuple to every channel owning at least one of its keys —
  a tuple with keys on k channels is *duplicated* k times. Ownership is by key group:
  ``g = hash(key) % G`` and the channel of ``g`` is its owner on a consistent-hashing ring of
  the channels (elastic-scaling §6.2), so the splitter and the channels' O+ instances agree
  exactly on who owns a key. The splitter's batches are numbered (sequence numbers) and every
  flush goes to *every* channel with the splitter's watermark: a channel that gets no tuple
  still receives the watermark pulse that expires its windows.
* **Channels** (one thread each, Alg. 2 processSN): an :class:`OPlusInstance` over a private
  ``SharedState(G)`` that owns the groups assigned to the channel and ignores other keys.
* **Merger** (the caller's thread): merges the channels' timestamp-sorted outputs; an output is
  released once every channel has reported a watermark at or beyond its timestamp (each
  channel reports one with every batch; all its later outputs are strictly later), applies
  the stateless chains after the O+ and writes the sinks.
* **Migration** (elastic-scaling §6.1, Alg. 4) for ``reconfigure=[(COUNT, P), ...]``: after the
  COUNT-th source tuple the splitter flushes and stops at that tuple boundary (the
  horizontal barrier), sends a migration pulse to all old and new channels; each channel
  releases its held f_U outputs, *donates* the window state of the groups it loses to a
  :class:`~stretchflow.elastic.migration.StateStore`, waits at the vertical barrier, *collects*
  the groups it gains; then the splitter resumes with the new ring.

Scope: flows with exactly one O+ whose inputs are sources, each possibly followed by a chain of
stateless operators read by nothing else, and whose sinks read the O+ through stateless chains.
Other flows raise :class:`FlowDefinitionError`. Only thread channels exist
(``channels="threads"``).
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..elastic.consistent_hash import ConsistentHashRing
from ..elastic.migration import StateStore, open_store
from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import Filter, FlatMap, Map, apply_batch
from .reference import RunResult

Stateless = Map | FlatMap | Filter
_DROPPED = object()  # marks a source tuple its stateless chain dropped
_WAIT = 0.1  # seconds a blocked thread waits before checking whether the run was stopped

__all__ = ["group_assignment", "run"]


def group_assignment(n_channels: int, n_groups: int) -> list[int]:
    """The channel owning each key group: the consistent-hashing owner of ``g`` on a ring of
    channels ``0..n_channels-1`` (elastic-scaling §6.2). Growing or shrinking the ring moves
    groups only to new channels or away from removed ones."""
    ring = ConsistentHashRing(range(n_channels))
    return [int(ring.owner(g)) for g in range(n_groups)]


# -- flow analysis -----------------------------------------------------------------------------
@dataclass
class _Plan:
    op_node: Node
    inputs: list[tuple[Node, list[Stateless]]]  # per O+ input: source node, chain after it
    sinks: list[tuple[Any, list[Stateless]]]  # per sink: the chain from the O+ to it


def _analyse(flow: Flow) -> _Plan:
    flow.validate()
    ops = [n for n in flow.nodes if n.kind == "oplus"]
    if len(ops) != 1:
        raise FlowDefinitionError(
            f"the sn engine runs flows with exactly one O+ operator, {flow.name!r} has {len(ops)}")
    op_node = ops[0]
    consumers = flow.consumers()
    inputs: list[tuple[Node, list[Stateless]]] = []
    for up in op_node.inputs:
        chain: list[Stateless] = []
        node = up
        while node.kind == "stateless":
            if consumers[node] != 1:
                raise FlowDefinitionError(
                    f"the sn engine needs the stream of {node.name!r} to feed only the O+")
            chain.append(node.spec)
            node = node.inputs[0]
        if node.kind != "source" or consumers[node] != 1:
            raise FlowDefinitionError(
                f"the sn engine needs every input of {op_node.name!r} to come from its own "
                "source through stateless operators only")
        chain.reverse()
        inputs.append((node, chain))
    sinks: list[tuple[Any, list[Stateless]]] = []
    for node, sink in flow.sinks:
        chain = []
        while node.kind == "stateless":
            chain.append(node.spec)
            node = node.inputs[0]
        if node is not op_node:
            raise FlowDefinitionError(
                f"the sn engine needs every sink to read the O+ {op_node.name!r} "
                f"(through stateless operators); sink {sink.name!r} does not")
        chain.reverse()
        sinks.append((sink, chain))
    return _Plan(op_node, inputs, sinks)


# -- coordination ------------------------------------------------------------------------------
class _Stopped(Exception):
    """The run was stopped (another thread failed); the current thread just exits."""


class _Run:
    """What the threads share to stop together: the first error and the live barriers."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self.barriers: list[threading.Barrier] = []

    def fail(self, e: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = e
            self.stop.set()
            barriers = list(self.barriers)
        for b in barriers:  # wakes threads waiting at a migration barrier
            b.abort()

    def put(self, q: queue.Queue, item: Any) -> None:
        # a bounded queue whose reader died would block forever: wait in slices and give up
        # once the run is stopped (blocking waits, no spinning)
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                q.put(item, timeout=_WAIT)
                return
            except queue.Full:
                continue

    def get(self, q: queue.Queue) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return q.get(timeout=_WAIT)
            except queue.Empty:
                continue

    def wait(self, barrier: threading.Barrier) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            raise _Stopped from None


@dataclass
class _Migration:
    """A migration pulse (Alg. 4): old and new f_μ, the barriers, what was moved."""

    epoch: int
    old: list[int]
    new: list[int]
    n_new: int
    vertical: threading.Barrier  # every donation is in the store
    done: threading.Barrier  # every channel collected (the splitter waits here too)
    bytes_moved: list[int] = field(default_factory=list)
    groups_moved: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- channel: Alg. 2 processSN on the channel's own key groups ---------------------------------
class _Channel:
    def __init__(self, j: int, op: OPlus, n_groups: int, assign: list[int], run: _Run,
                 outq: queue.Queue, store: StateStore, queue_size: int):
        self.j = j
        self.op = op
        self.inst: OPlusInstance = op.instance(SharedState(n_groups), j, assign)
        self.run = run
        self.outq = outq
        self.store = store
        self.q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.wm = -math.inf
        self.seq = 0  # sequence number of the last splitter batch processed
        self.thread = threading.Thread(target=self._main, name=f"sn-channel-{j}", daemon=True)

    def _main(self) -> None:
        try:
            self._loop()
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - every failure stops the run
            self.run.fail(e)

    def _note_last(self, last_ts: int | None) -> None:
        # The reference's single instance sees every tuple; it slides `single` window sets at
        # the end of input up to the latest window any tuple fell in. A channel sees only its
        # own tuples, so the splitter tells it the latest timestamp overall.
        if last_ts is not None:
            self.inst.saw_time(last_ts)

    def _loop(self) -> None:
        inst, op, run, j = self.inst, self.op, self.run, self.j
        while True:
            msg = run.get(self.q)
            kind = msg[0]
            if kind == "batch":
                _, seq, items, wm, last_ts = msg
                # every channel gets every flush (the pulse), in the splitter's order: a gap
                # would mean a lost batch, and a wrong watermark
                if seq <= self.seq:
                    raise RuntimeError(f"sn channel {j}: batch {seq} after batch {self.seq}")
                self.seq = seq
                ts = v = None
                try:
                    for ts, i, v in items:
                        inst.process(ts, v, i)
                    ts, v = wm, "<watermark>"
                    self._note_last(last_ts)
                    inst.advance(wm)
                except StretchflowError:
                    raise
                except Exception as e:
                    raise OperatorError(op.name, ts, v, e) from e
                if wm > self.wm:
                    self.wm = wm
                run.put(self.outq, ("out", j, inst.take(), self.wm))
            elif kind == "migrate":
                if not self._migrate(msg[1]):
                    return
            else:  # "end"
                self._note_last(msg[1])
                try:
                    inst.finish()
                except StretchflowError:
                    raise
                except Exception as e:
                    raise OperatorError(op.name, None, "<end of input>", e) from e
                run.put(self.outq, ("final", j, inst.take()))
                return

    def _migrate(self, m: _Migration) -> bool:
        """Alg. 4 on a channel: flush, donate, vertical barrier, collect. False if leaving."""
        inst, j, run = self.inst, self.j, self.run
        # f_U outputs held for later windows live in the instance, not in σ: release them now
        # (the merger holds them until every channel's watermark passes their timestamp)
        inst.flush_pending()
        out = inst.take()
        if out:
            run.put(self.outq, ("out", j, out, self.wm))
        groups = inst.state.groups
        nbytes = moved = 0
        for g, (a, b) in enumerate(zip(m.old, m.new, strict=True)):
            if a == j and b != j:  # donate
                if groups[g]:
                    nbytes += self.store.put(m.epoch, g, groups[g])
                    moved += 1
                groups[g] = {}
        with m.lock:
            m.bytes_moved.append(nbytes)
            m.groups_moved.append(moved)
        run.wait(m.vertical)
        if j >= m.n_new:  # decommissioned: its outputs are all out, the merger forgets it
            run.put(self.outq, ("leave", j))
            run.wait(m.done)
            return False
        for g, (a, b) in enumerate(zip(m.old, m.new, strict=True)):
            if b == j and a != j:  # collect
                st = self.store.take(m.epoch, g)
                if st:
                    groups[g] = st
        inst.set_assignment(m.new)
        run.wait(m.done)
        return True


# -- the executor ------------------------------------------------------------------------------
def run(flow: Flow, parallelism: int = 1, max_parallelism: int | None = None,
        reconfigure: list[tuple[int, int]] | None = None, channels: str = "threads",
        **options: Any) -> RunResult:
    """Runs ``flow`` on ``parallelism`` shared-nothing channels (threads).

    Args:
        parallelism: channels at the start.
        max_parallelism: upper bound for reconfigurations (default: the largest P requested).
        reconfigure: ``[(COUNT, P), ...]``: after the COUNT-th tuple of all sources (0: before
            the first), migrate to P channels. Steps after the end of input are logged, not
            applied.
        channels: ``"threads"`` (the only kind implemented).
        store: ``"memory"`` (default), ``"sqlite"`` or a :class:`StateStore` for migrations.
        key_groups: number of key groups G (default 128).
        batch: input tuples per splitter flush / watermark pulse (default 256).
        queue_size: capacity of every queue, in batches (default 64).
        pulse_ms: also flush (and pulse) when this much wall-clock time passed since the last
            flush, checked at each input tuple, so a slow source still gets its outputs out
            (default 50).
    """
    if options.pop("controller", None) is not None:
        raise FlowDefinitionError("the sn engine has no elasticity controller yet; use "
                                  "reconfigure=[(COUNT, P), ...]")
    store_opt = options.pop("store", "memory")
    n_groups = int(options.pop("key_groups", 128))
    batch = int(options.pop("batch", 256))
    queue_size = int(options.pop("queue_size", 64))
    pulse = float(options.pop("pulse_ms", 50)) / 1000
    if options:
        raise TypeError(f"unknown options for the sn engine: {sorted(options)}")
    if channels != "threads":
        raise FlowDefinitionError(
            f"the sn engine supports channels='threads' only, got {channels!r}")
    schedule = sorted(reconfigure or [])
    wanted = [parallelism] + [p for _, p in schedule]
    if max_parallelism is None:
        max_parallelism = max(wanted)
    if any(not 1 <= p <= max_parallelism for p in wanted):
        raise ValueError(f"parallelism must be between 1 and max_parallelism={max_parallelism}")
    if n_groups < 1 or batch < 1 or queue_size < 1:
        raise ValueError("key_groups, batch and queue_size must be positive")
    plan = _analyse(flow)
    store, own_store = open_store(store_opt)
    sinks = [s for s, _ in plan.sinks]
    for s in sinks:
        s.open()
    t0 = time.perf_counter()
    try:
        ex = _Executor(plan, parallelism, n_groups, batch, queue_size, schedule, store,
                       pulse)
        ex.execute()
    finally:
        for s in sinks:
            s.close()
        if own_store:
            store.close()
    elapsed = time.perf_counter() - t0
    log = ex.log
    return RunResult(
        engine="sn",
        elapsed=elapsed,
        tuples_in={name: c[0] for name, c in ex.counts.items()},
        tuples_out={s.name: s.count for s in sinks},
        extra={
            "channels": channels,
            "parallelism": ex.p,
            "key_groups": n_groups,
            "store": type(store).__name__,
            "tuples_routed": ex.routed,
            "tuples_sent": ex.sent,
            "duplication_factor": ex.sent / ex.routed if ex.routed else 0.0,
            "reconfigurations": log,
            "migration_time_ms": sum(r["duration_ms"] for r in log if r["applied"]),
            "bytes_moved": sum(r["bytes_moved"] for r in log if r["applied"]),
        },
    )


class _Executor:
    def __init__(self, plan: _Plan, parallelism: int, n_groups: int, batch: int,
                 queue_size: int, schedule: list[tuple[int, int]], store: StateStore,
                 pulse: float = 0.05):
        self.plan = plan
        self.pulse = pulse
        self.op: OPlus = plan.op_node.spec
        self.G = n_groups
        self.batch = batch
        self.queue_size = queue_size
        self.schedule = schedule
        self.store = store
        self.p0 = self.p = parallelism
        self.assign = group_assignment(parallelism, n_groups)
        self.run = _Run()
        self.outq: queue.Queue = queue.Queue(maxsize=queue_size * 4)
        self.channels: dict[int, _Channel] = {}
        self.all_threads: list[threading.Thread] = []
        self.counts: dict[str, list[int]] = {}
        self.read = 0  # source tuples the splitter has taken (what COUNT counts)
        self.routed = 0  # tuples reaching the O+ (after the stateless chains)
        self.sent = 0
        self.log: list[dict[str, Any]] = []
        self.epoch = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def _start_channel(self, j: int) -> None:
        ch = _Channel(j, self.op, self.G, self.assign, self.run, self.outq, self.store,
                      self.queue_size)
        self.channels[j] = ch
        self.all_threads.append(ch.thread)
        ch.thread.start()

    def execute(self) -> None:
        for j in range(self.p):
            self._start_channel(j)
        splitter = threading.Thread(target=self._splitter_main, name="sn-splitter", daemon=True)
        self.all_threads.append(splitter)
        splitter.start()
        try:
            self._merger()
        except _Stopped:
            pass
        except BaseException as e:
            self.run.fail(e)
        finally:
            self.run.stop.set()  # no thread outlives the run, whatever happened
            for b in self.run.barriers:
                b.abort()
            # channels may be started by the splitter while we join: join until none is new
            joined = 0
            while joined < len(self.all_threads):
                self.all_threads[joined].join()
                joined += 1
        if self.run.error is not None:
            raise self.run.error

    # -- splitter: Alg. 1 forwardSN ------------------------------------------------------------
    def _inputs(self) -> Iterator[tuple[int, int, Any, int]]:
        streams = []
        for i, (node, chain) in enumerate(self.plan.inputs):
            counter = self.counts.setdefault(node.name, [0])
            streams.append(_input(node.spec.items(), chain, i, counter))
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=itemgetter(0))

    def _splitter_main(self) -> None:
        try:
            self._splitter()
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - every failure stops the run
            self.run.fail(e)

    def _splitter(self) -> None:
        op, G, run = self.op, self.G, self.run
        keys = op.keys
        bufs: dict[int, list] = {j: [] for j in self.channels}
        wm = -math.inf
        last_ts: int | None = None
        dirty = False
        n_buf = 0
        seq = 0  # sequence number of the splitter's flushes (one per pulse)
        sched = list(reversed(self.schedule))
        clock = time.monotonic
        pulse = self.pulse
        next_pulse = clock() + pulse

        def flush() -> None:
            nonlocal dirty, n_buf, seq, next_pulse
            if not dirty:
                return
            seq += 1
            next_pulse = clock() + pulse
            for j, ch in self.channels.items():
                run.put(ch.q, ("batch", seq, bufs[j], wm, last_ts))
                bufs[j] = []
            dirty = False
            n_buf = 0

        def due() -> None:
            nonlocal bufs
            while sched and sched[-1][0] <= self.read:
                _, p = sched.pop()
                flush()  # the horizontal barrier: nothing before it stays in the splitter
                self._migrate(p, wm, last_ts)
                bufs = {j: [] for j in self.channels}

        due()
        assign = self.assign
        for ts, i, v, new in self._inputs():
            if run.stop.is_set():
                raise _Stopped
            if new:  # a new source tuple: every item of the ones before it is dispatched
                if sched and sched[-1][0] <= self.read:
                    due()
                    assign = self.assign
                self.read += 1
                if v is _DROPPED:
                    continue
            if v is WATERMARK:  # an explicit watermark reaches every channel
                if ts > wm:
                    wm = ts
                    dirty = True
                    flush()
                continue
            try:
                ks = keys(v, i)
            except StretchflowError:
                raise
            except Exception as e:
                raise OperatorError(op.name, ts, v, e) from e
            if ks:
                owners = {assign[hash(k) % G] for k in (ks.keys() if isinstance(ks, dict)
                                                       else ks)}
                item = (ts, i, v)
                for j in owners:
                    bufs[j].append(item)
                self.sent += len(owners)
            self.routed += 1
            if ts > wm:
                wm = ts  # later tuples are no earlier: a watermark for every channel
            last_ts = ts
            dirty = True
            n_buf += 1
            if n_buf >= self.batch or clock() >= next_pulse:
                flush()
        due()
        flush()
        for s in reversed(sched):
            self.log.append(_log_entry(s[0], self.p, s[1], applied=False,
                                       note="scheduled after the end of input"))
        for ch in self.channels.values():
            run.put(ch.q, ("end", last_ts))
        run.put(self.outq, ("eos", sorted(self.channels)))

    def _migrate(self, p: int, wm: float, last_ts: int | None) -> None:
        """Alg. 4 driven by the splitter: migration pulse, wait for the channels, new ring."""
        t0 = time.perf_counter()
        run = self.run
        old_p, old = self.p, self.assign
        new = group_assignment(p, self.G)
        for j in range(old_p, p):  # provisioned channels join the merger before any output
            run.put(self.outq, ("join", j, wm))
            self._start_channel(j)
        participants = max(old_p, p)
        self.epoch += 1
        m = _Migration(self.epoch, old, new, p, threading.Barrier(participants),
                       threading.Barrier(participants + 1))
        run.barriers.extend([m.vertical, m.done])
        if run.stop.is_set():  # fail() may have missed the new barriers
            raise _Stopped
        for j in range(participants):
            run.put(self.channels[j].q, ("migrate", m))
        run.wait(m.done)
        run.barriers.remove(m.vertical)
        run.barriers.remove(m.done)
        for j in range(p, old_p):
            del self.channels[j]
        self.p, self.assign = p, new
        entry = _log_entry(self.read, old_p, p, applied=True, note="")
        entry.update(duration_ms=(time.perf_counter() - t0) * 1000,
                     bytes_moved=sum(m.bytes_moved), groups_moved=sum(m.groups_moved),
                     groups_reassigned=sum(a != b for a, b in zip(old, new, strict=True)),
                     trigger_ts=last_ts)
        self.log.append(entry)

    # -- merger --------------------------------------------------------------------------------
    def _merger(self) -> None:
        run = self.run
        # the channels at the start, not self.p: the splitter may have migrated already
        wms: dict[int, float] = {j: -math.inf for j in range(self.p0)}
        heap: list[tuple[int, int, Any]] = []
        seq = 0
        finals: set[int] = set()
        eos: set[int] | None = None
        write = self._write
        while True:
            msg = run.get(self.outq)
            kind = msg[0]
            if kind == "out" or kind == "final":
                j, outs = msg[1], msg[2]
                for ts, p in outs:  # seq keeps each channel's order among equal timestamps
                    seq += 1
                    heapq.heappush(heap, (ts, seq, p))
                if kind == "out":
                    wms[j] = msg[3]
                else:
                    wms[j] = math.inf
                    finals.add(j)
            elif kind == "join":
                wms[msg[1]] = msg[2]
            elif kind == "leave":
                del wms[msg[1]]
            else:  # "eos": the channels that will send a final batch
                eos = set(msg[1])
            lo = min(wms.values())
            if heap and heap[0][0] <= lo:
                ready = []
                while heap and heap[0][0] <= lo:
                    ts, _, p = heapq.heappop(heap)
                    ready.append((ts, p))
                write(ready)
            if eos is not None and eos <= finals:
                break
        rest = [(ts, p) for ts, _, p in sorted(heap)]
        if rest:
            write(rest)

    def _write(self, items: list[tuple[int, Any]]) -> None:
        for sink, chain in self.plan.sinks:
            out = items
            for op in chain:
                out = apply_batch(op, out)
                if not out:
                    break
            if out:
                sink.write(out)


def _input(items: Iterator[tuple[int, Any]], chain: list[Stateless], i: int,
           counter: list[int]) -> Iterator[tuple[int, int, Any, int]]:
    """One O+ input: a source's items through its stateless chain, as ``(ts, i, payload,
    new)``; ``new`` is 1 on the first item of each source tuple (a source tuple the chain
    drops still yields one ``_DROPPED`` item), so the splitter counts source tuples in merged
    order, as ``--reconfigure COUNT`` means."""
    n = 0
    for ts, p in items:
        if p is WATERMARK:
            yield ts, i, p, 0
            continue
        n += 1
        counter[0] = n
        out = [(ts, p)]
        for op in chain:
            out = apply_batch(op, out)
            if not out:
                yield ts, i, _DROPPED, 1
                break
        else:
            new = 1
            for ts2, q in out:
                yield ts2, i, q, new
                new = 0


def _log_entry(count: int, before: int, after: int, *, applied: bool,
               note: str) -> dict[str, Any]:
    return {"count": count, "parallelism_before": before, "parallelism_after": after,
            "applied": applied, "note": note, "duration_ms": 0.0, "bytes_moved": 0,
            "groups_moved": 0, "groups_reassigned": 0, "trigger_ts": None}

