"""The shared-nothing (SN) executor: ``--engine sn``, channels as threads or processes.

One O+ runs on N *channels*, each with its own private σ (no state is shared between
channels, unlike the VSN executor). The structure follows elastic-scaling §3–§6 and the
STRETCH journal's Alg. 1 (forwardSN) and Alg. 2 (processSN):

* **Splitter** (one thread, Alg. 1 forwardSN): merges the O+'s inputs by timestamp (ties to
  the lower input index, as the reference executor), applies the stateless chains in front of
  the O+, calls f_MK and sends the tuple to every channel owning at least one of its keys —
  a tuple with keys on k channels is *duplicated* k times. Ownership is by key group
  ``g = group(key) % G`` and the channel of ``g`` is its owner on a consistent-hashing ring of
  the channels (elastic-scaling §6.2), so the splitter and the channels' O+ instances agree
  exactly on who owns a key. ``group`` is Python's ``hash`` for thread channels and the
  process-independent :func:`~stretchflow.elastic.consistent_hash.stable_hash` for process
  channels (``hash`` of a str is salted per process). The splitter's batches are numbered
  (sequence numbers) and every flush goes to *every* channel with the splitter's watermark: a
  channel that gets no tuple still receives the watermark pulse that expires its windows.
* **Channels** (Alg. 2 processSN): an :class:`OPlusInstance` over a private ``SharedState(G)``
  that owns the groups assigned to the channel and ignores other keys. ``channels="threads"``
  runs them as threads of this process; ``channels="processes"`` as processes
  (:mod:`.sn_process`), which gives real multicore speed-up on a GIL build.
* **Merger** (the caller's thread): merges the channels' timestamp-sorted outputs; an output is
  released once every channel has reported a watermark at or beyond its timestamp (each
  channel reports one with every batch; all its later outputs are strictly later), applies
  the stateless chains after the O+ and writes the sinks.
* **Migration** (elastic-scaling §6.1, Alg. 4), asked for by ``reconfigure=[(COUNT, P), ...]``
  or by an elasticity controller: at a tuple boundary the splitter flushes and stops (the
  horizontal barrier), sends a migration pulse to all old and new channels; each channel
  releases its held f_U outputs, *donates* the window state of the groups it loses to a
  :class:`~stretchflow.elastic.migration.StateStore`, waits at the vertical barrier, *collects*
  the groups it gains; then the splitter resumes with the new ring.
* **Control** (elastic-scaling §4): every ``metrics_interval`` seconds the splitter measures the
  congestion index (fraction of the interval it spent blocked on full channel queues: it sends
  without blocking first and times only the sends that would block), the throughput (source
  tuples per second that every channel has finished, known from the sequence numbers the
  channels report back) and each channel's busy fraction, hands them to the controller as
  :class:`~stretchflow.elastic.controller.Metrics` and applies its decision as a migration.

Scope: flows with exactly one O+ whose inputs are sources, each possibly followed by a chain of
stateless operators read by nothing else, and whose sinks read the O+ through stateless chains.
Other flows raise :class:`FlowDefinitionError`.
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
from ..elastic.controller import Controller, Metrics
from ..elastic.migration import SQLiteStateStore, StateStore, open_store
from ..errors import FlowDefinitionError, OperatorError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import OPlus, OPlusInstance, SharedState
from ..operators.stateless import Filter, FlatMap, Map, apply_batch
from ..runtime.result import RunResult

Stateless = Map | FlatMap | Filter
_DROPPED = object()  # marks a source tuple its stateless chain dropped
_WAIT = 0.1  # seconds a blocked thread waits before checking whether the run was stopped

__all__ = ["ChannelCore", "group_assignment", "run"]


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

    def put(self, q: Any, item: Any) -> None:
        # a bounded queue whose reader died would block forever: wait in slices and give up
        # once the run is stopped (blocking waits, no spinning). Works for queue.Queue and
        # multiprocessing queues alike (both raise queue.Full / queue.Empty on timeouts).
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                q.put(item, timeout=_WAIT)
                return
            except queue.Full:
                continue

    def get(self, q: Any) -> Any:
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
    """A migration pulse (Alg. 4) for thread channels: old and new f_μ, the barriers."""

    epoch: int
    old: list[int]
    new: list[int]
    n_new: int
    vertical: threading.Barrier  # every donation is in the store
    done: threading.Barrier  # every channel collected (the splitter waits here too)
    bytes_moved: list[int] = field(default_factory=list)
    groups_moved: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- what a channel does, whatever runs it -----------------------------------------------------
class ChannelCore:
    """Alg. 2 processSN on one channel's own key groups, and its side of Alg. 4. The thread
    channel below and the process channel of :mod:`.sn_process` both drive one of these, so
    the two transports cannot drift apart in semantics.

    Messages it answers (tuples, first item the kind): ``("batch", seq, items, wm, last_ts)``
    → ``("out", j, outputs, wm, seq, busy_s)``; ``("end", last_ts)`` →
    ``("final", j, outputs, busy_s)``.
    """

    def __init__(self, j: int, op: OPlus, inst: OPlusInstance):
        self.j = j
        self.op = op
        self.inst = inst
        self.wm = -math.inf
        self.seq = 0  # sequence number of the last splitter batch processed

    def _note_last(self, last_ts: int | None) -> None:
        # The reference's single instance sees every tuple; it slides `single` window sets at
        # the end of input up to the latest window any tuple fell in. A channel sees only its
        # own tuples, so the splitter tells it the latest timestamp overall.
        if last_ts is not None:
            self.inst.saw_time(last_ts)

    def batch(self, msg: tuple) -> tuple:
        _, seq, items, wm, last_ts = msg
        # every channel gets every flush (the pulse), in the splitter's order: a gap would
        # mean a lost batch, and a wrong watermark
        if seq <= self.seq:
            raise RuntimeError(f"sn channel {self.j}: batch {seq} after batch {self.seq}")
        self.seq = seq
        t0 = time.perf_counter()
        inst = self.inst
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
            raise OperatorError(self.op.name, ts, v, e) from e
        if wm > self.wm:
            self.wm = wm
        return ("out", self.j, inst.take(), self.wm, seq, time.perf_counter() - t0)

    def end(self, last_ts: int | None) -> tuple:
        t0 = time.perf_counter()
        self._note_last(last_ts)
        try:
            self.inst.finish()
        except StretchflowError:
            raise
        except Exception as e:
            raise OperatorError(self.op.name, None, "<end of input>", e) from e
        return ("final", self.j, self.inst.take(), time.perf_counter() - t0)

    def release(self) -> tuple | None:
        """Alg. 4, first step: f_U outputs held for later windows live in the instance, not in
        σ; release them now (the merger holds them until every channel's watermark passes)."""
        self.inst.flush_pending()
        out = self.inst.take()
        return ("out", self.j, out, self.wm, self.seq, 0.0) if out else None

    def donate(self, store: StateStore, epoch: int, old: list[int],
               new: list[int]) -> tuple[int, int]:
        """Alg. 4 donate: the groups this channel loses go to the store. (bytes, groups)."""
        groups, j = self.inst.state.groups, self.j
        nbytes = moved = 0
        for g, (a, b) in enumerate(zip(old, new, strict=True)):
            if a == j and b != j:
                if groups[g]:
                    nbytes += store.put(epoch, g, groups[g])
                    moved += 1
                groups[g] = {}
        return nbytes, moved

    def collect(self, store: StateStore, epoch: int, old: list[int], new: list[int]) -> None:
        """Alg. 4 collect (after the vertical barrier): the groups this channel gains."""
        groups, j = self.inst.state.groups, self.j
        for g, (a, b) in enumerate(zip(old, new, strict=True)):
            if b == j and a != j:
                st = store.take(epoch, g)
                if st:
                    groups[g] = st
        self.inst.set_assignment(new)


class _Channel:
    """A thread channel: a :class:`ChannelCore` fed by a bounded ``queue.Queue``."""

    def __init__(self, j: int, op: OPlus, n_groups: int, assign: list[int], run: _Run,
                 outq: queue.Queue, store: StateStore, queue_size: int):
        self.j = j
        self.core = ChannelCore(j, op, op.instance(SharedState(n_groups), j, assign))
        self.run = run
        self.outq = outq
        self.store = store
        self.q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.thread = threading.Thread(target=self._main, name=f"sn-channel-{j}", daemon=True)
        self.threads = [self.thread]

    def start(self) -> None:
        self.thread.start()

    def close(self, failed: bool) -> None:
        """Nothing to release: the thread ends by itself once the run ends or stops."""

    def _main(self) -> None:
        try:
            self._loop()
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - every failure stops the run
            self.run.fail(e)

    def _loop(self) -> None:
        core, run = self.core, self.run
        while True:
            msg = run.get(self.q)
            kind = msg[0]
            if kind == "batch":
                run.put(self.outq, core.batch(msg))
            elif kind == "migrate":
                if not self._migrate(msg[1]):
                    return
            else:  # "end"
                run.put(self.outq, core.end(msg[1]))
                return

    def _migrate(self, m: _Migration) -> bool:
        """Alg. 4 on a channel: flush, donate, vertical barrier, collect. False if leaving."""
        core, run = self.core, self.run
        out = core.release()
        if out is not None:
            run.put(self.outq, out)
        nbytes, moved = core.donate(self.store, m.epoch, m.old, m.new)
        with m.lock:
            m.bytes_moved.append(nbytes)
            m.groups_moved.append(moved)
        run.wait(m.vertical)
        if self.j >= m.n_new:  # decommissioned: its outputs are all out, the merger forgets it
            run.put(self.outq, ("leave", self.j))
            run.wait(m.done)
            return False
        core.collect(self.store, m.epoch, m.old, m.new)
        run.wait(m.done)
        return True


# -- the executor ------------------------------------------------------------------------------
def run(flow: Flow, parallelism: int = 1, max_parallelism: int | None = None,
        reconfigure: list[tuple[int, int]] | None = None, channels: str = "threads",
        controller: str | Controller | None = None, **options: Any) -> RunResult:
    """Runs ``flow`` on ``parallelism`` shared-nothing channels.

    Args:
        parallelism: channels at the start.
        max_parallelism: upper bound for reconfigurations (default: the largest P requested,
            or, with a controller, ``max(parallelism, 4)``).
        reconfigure: ``[(COUNT, P), ...]``: after the COUNT-th tuple of all sources (0: before
            the first), migrate to P channels. Steps after the end of input are logged, not
            applied.
        channels: ``"threads"`` or ``"processes"`` (:mod:`.sn_process`).
        controller: an elasticity controller deciding migrations at run time: ``"level"``
            (the SASO level controller, elastic-scaling Alg. 1–3), ``"threshold"`` (STRETCH's)
            or a :class:`~stretchflow.elastic.controller.Controller`.
        controller_options: keyword options for a controller given by name, e.g.
            ``{"alpha": 0.5, "threshold": 0.2, "period": 5.0, "max_levels": 4}``.
        metrics_interval: seconds between two measurements handed to the controller (default
            1.0; the level controller combines them into its own period, 5 s by default).
        store: ``"memory"``, ``"sqlite"`` or a :class:`StateStore` for migrations (default
            memory for threads, sqlite for processes, which need an SQLite store).
        key_groups: number of key groups G (default 128).
        batch: input tuples per splitter flush / watermark pulse (default 256).
        queue_size: capacity of every channel queue, in batches (default 64).
        pulse_ms: also flush (and pulse) when this much wall-clock time passed since the last
            flush, checked at each input tuple, so a slow source still gets its outputs out
            (default 50).
        start_method: multiprocessing start method of process channels (default
            ``"forkserver"``; ``"spawn"`` also works; never ``"fork"`` with threads running).
    """
    ctl_opts = dict(options.pop("controller_options", None) or {})
    interval = float(options.pop("metrics_interval", 1.0))
    store_opt = options.pop("store", None)
    n_groups = int(options.pop("key_groups", 128))
    batch = int(options.pop("batch", 256))
    queue_size = int(options.pop("queue_size", 64))
    pulse = float(options.pop("pulse_ms", 50)) / 1000
    start_method = str(options.pop("start_method", "forkserver"))
    if options:
        raise TypeError(f"unknown options for the sn engine: {sorted(options)}")
    if channels not in ("threads", "processes"):
        raise FlowDefinitionError(
            f"the sn engine runs channels as 'threads' or 'processes', got {channels!r}")
    ctl = _make_controller(controller, ctl_opts)
    schedule = sorted(reconfigure or [])
    wanted = [parallelism] + [p for _, p in schedule]
    if max_parallelism is None:
        max_parallelism = max(wanted) if ctl is None else max(max(wanted), 4)
    if any(not 1 <= p <= max_parallelism for p in wanted):
        raise ValueError(f"parallelism must be between 1 and max_parallelism={max_parallelism}")
    if n_groups < 1 or batch < 1 or queue_size < 1:
        raise ValueError("key_groups, batch and queue_size must be positive")
    if not interval > 0:
        raise ValueError(f"metrics_interval must be > 0, got {interval!r}")
    plan = _analyse(flow)
    if channels == "processes":
        from . import sn_process  # only now: it is the module that imports multiprocessing

        transport: Any = sn_process.ProcessTransport(plan.op_node.spec, n_groups, start_method)
        if store_opt is None:
            store_opt = "sqlite"
        if store_opt == "memory" or (isinstance(store_opt, StateStore)
                                     and not isinstance(store_opt, SQLiteStateStore)):
            raise ValueError("process channels migrate state through a file every process can "
                             "open: use store='sqlite' (or an SQLiteStateStore)")
    else:
        transport = None
    store, own_store = open_store(store_opt)
    sinks = [s for s, _ in plan.sinks]
    for s in sinks:
        s.open()
    t0 = time.perf_counter()
    try:
        ex = _Executor(plan, parallelism, n_groups, batch, queue_size, schedule, store,
                       pulse, transport=transport, controller=ctl,
                       max_parallelism=max_parallelism, interval=interval)
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
            "parallelism": {ex.op.name: ex.p},  # per operator, as the VSN engine reports
            "max_parallelism": max_parallelism,
            "key_groups": n_groups,
            "store": type(store).__name__,
            "tuples_routed": ex.routed,
            "tuples_sent": ex.sent,
            "duplication_factor": ex.sent / ex.routed if ex.routed else 0.0,
            "reconfigurations": log,
            "migration_time_ms": sum(r["duration_ms"] for r in log if r["applied"]),
            "bytes_moved": sum(r["bytes_moved"] for r in log if r["applied"]),
            "controller": None if ctl is None else ctl.name,
            "metrics": ex.metrics_log,
            "blocked_s": ex.blocked_total,
            "startup_s": ex.startup_s,
        },
    )


def _make_controller(controller: str | Controller | None,
                     options: dict[str, Any]) -> Controller | None:
    if controller is None:
        if options:
            raise ValueError("controller_options given without a controller")
        return None
    if isinstance(controller, Controller):
        if options:
            raise ValueError("controller_options apply to a controller given by name only")
        return controller
    from ..elastic import make_controller

    return make_controller(str(controller), **options)


class _Executor:
    def __init__(self, plan: _Plan, parallelism: int, n_groups: int, batch: int,
                 queue_size: int, schedule: list[tuple[int, int]], store: StateStore,
                 pulse: float = 0.05, *, transport: Any = None,
                 controller: Controller | None = None, max_parallelism: int | None = None,
                 interval: float = 1.0):
        self.plan = plan
        self.pulse = pulse
        self.op: OPlus = plan.op_node.spec
        self.G = n_groups
        self.batch = batch
        self.queue_size = queue_size
        self.schedule = schedule
        self.store = store
        self.transport = transport  # None: thread channels
        self.controller = controller
        self.max_p = max_parallelism or parallelism
        self.interval = interval
        self.p0 = self.p = parallelism
        self.assign = group_assignment(parallelism, n_groups)
        self.run = _Run()
        self.outq: queue.Queue = queue.Queue(maxsize=queue_size * 4)
        self.channels: dict[int, Any] = {}
        self.all_channels: list[Any] = []
        self.all_threads: list[threading.Thread] = []
        self.counts: dict[str, list[int]] = {}
        self.read = 0  # source tuples the splitter has taken (what COUNT counts)
        self.routed = 0  # tuples reaching the O+ (after the stateless chains)
        self.sent = 0
        self.log: list[dict[str, Any]] = []
        self.metrics_log: list[dict[str, Any]] = []
        self.epoch = 0
        self.startup_s = 0.0  # until every initial channel runs (process start, imports)
        # measurements: written by the merger (done, busy) and the splitter (the rest)
        self.busy: dict[int, float] = {}  # busy seconds per channel, from its reports
        self.region_seq = 0  # the latest splitter batch every channel has finished
        self.cum: dict[int, int] = {0: 0}  # batch seq -> tuples routed up to it
        self.blocked_total = 0.0  # seconds the splitter spent blocked on full channel queues
        self._blocked = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    def _start_channel(self, j: int) -> None:
        if self.transport is None:
            ch = _Channel(j, self.op, self.G, self.assign, self.run, self.outq, self.store,
                          self.queue_size)
        else:
            ch = self.transport.channel(self, j)
        self.channels[j] = ch
        self.all_channels.append(ch)
        ch.start()
        self.all_threads.extend(ch.threads)  # only started threads can be joined

    def execute(self) -> None:
        self.t_start = time.perf_counter()
        if self.transport is not None:
            self.transport.open(self)
        try:
            for j in range(self.p):
                self._start_channel(j)
            if self.transport is not None:
                self.transport.wait_ready(self)
            self.startup_s = time.perf_counter() - self.t_start
            splitter = threading.Thread(target=self._splitter_main, name="sn-splitter",
                                        daemon=True)
            self.all_threads.append(splitter)
            splitter.start()
            self._merger()
        except _Stopped:
            pass
        except BaseException as e:
            self.run.fail(e)
        finally:
            failed = self.run.error is not None
            self.run.stop.set()  # no thread outlives the run, whatever happened
            for b in self.run.barriers:
                b.abort()
            # channels may be started by the splitter while we join: join until none is new
            joined = 0
            while joined < len(self.all_threads):
                self.all_threads[joined].join()
                joined += 1
            for ch in self.all_channels:
                ch.close(failed)
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

    def _send(self, q: Any, msg: Any) -> None:
        """Sends to a channel; the time a send had to block counts toward the congestion index
        (elastic-scaling §4: non-blocking send first, measure the blocking only if it must)."""
        try:
            q.put_nowait(msg)
        except queue.Full:
            t0 = time.perf_counter()
            self.run.put(q, msg)
            self._blocked += time.perf_counter() - t0

    def _splitter(self) -> None:
        op, G, run = self.op, self.G, self.run
        keys = op.keys
        group = None if self.transport is None else self.transport.group_of
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
        ctl = self.controller
        next_metrics = clock() + self.interval
        send = self._send
        cum = self.cum

        def flush() -> None:
            nonlocal dirty, n_buf, seq, next_pulse
            if not dirty:
                return
            seq += 1
            next_pulse = clock() + pulse
            if ctl is not None:
                cum[seq] = self.routed
            for j, ch in self.channels.items():
                send(ch.q, ("batch", seq, bufs[j], wm, last_ts))
                bufs[j] = []
            dirty = False
            n_buf = 0

        def due() -> None:
            nonlocal bufs
            while sched and sched[-1][0] <= self.read:
                _, p = sched.pop()
                flush()  # the horizontal barrier: nothing before it stays in the splitter
                self._migrate(p, wm, last_ts, seq)
                bufs = {j: [] for j in self.channels}

        def control() -> None:
            # at a flush boundary: the splitter holds nothing, a migration can start here
            nonlocal bufs, next_metrics
            decision = self._observe()
            if decision is not None:
                self._migrate(decision[0], wm, last_ts, seq, note=decision[1])
                bufs = {j: [] for j in self.channels}
            next_metrics = clock() + self.interval

        due()
        if ctl is not None:
            self._start_measuring()
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
                kk = ks.keys() if isinstance(ks, dict) else ks
                if group is None:
                    owners = {assign[hash(k) % G] for k in kk}
                else:
                    owners = {assign[group(k)] for k in kk}
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
                if ctl is not None and clock() >= next_metrics:
                    control()
                    assign = self.assign
        due()
        flush()
        for s in reversed(sched):
            self.log.append(_log_entry(s[0], self.p, s[1], applied=False,
                                       note="scheduled after the end of input",
                                       operator=self.op.name, epoch=self.epoch))
        for ch in self.channels.values():
            run.put(ch.q, ("end", last_ts))
        run.put(self.outq, ("eos", sorted(self.channels)))

    # -- control: elastic-scaling §4 metrics, decisions become migrations ----------------------
    def _start_measuring(self) -> None:
        self._m_t = time.perf_counter()
        self._m_t0 = getattr(self, "_m_t0", self._m_t)
        self._m_routed = self.routed
        self._m_done = self.cum.get(self.region_seq, 0)
        self._m_busy = dict(self.busy)
        self._blocked = 0.0

    def _observe(self) -> tuple[int, str] | None:
        """One measurement interval at one parallelism → the controller → (P, reason)."""
        now = time.perf_counter()
        dt = max(now - self._m_t, 1e-9)
        done_seq = self.region_seq
        done = self.cum.get(done_seq, self._m_done)
        for s in [s for s in self.cum if s < done_seq]:  # keep only what may still be asked
            del self.cum[s]
        busy = dict(self.busy)
        loads = tuple(min(1.0, max(0.0, (busy.get(j, 0.0) - self._m_busy.get(j, 0.0)) / dt))
                      for j in range(self.p))
        blocked = self._blocked
        self.blocked_total += blocked
        # the splitter is one thread sending to the channels in turn: the time it blocked on
        # any channel is time it could not send; summed over channels it is the fraction of
        # the splitter's time lost to backpressure (see docs/sn.md on the paper's average)
        m = Metrics(time=now - self._m_t0, period=dt, parallelism=self.p,
                    throughput=max(0.0, done - self._m_done) / dt,
                    input_rate=max(0.0, self.routed - self._m_routed) / dt,
                    per_instance_load=loads, congestion=min(1.0, blocked / dt),
                    max_parallelism=self.max_p)
        decision = self.controller.observe(m)  # type: ignore[union-attr]
        p = None
        if decision is not None:
            p = min(self.max_p, max(1, decision.parallelism))
        self.metrics_log.append({"time": m.time, "period": dt, "parallelism": self.p,
                                 "throughput": m.throughput, "input_rate": m.input_rate,
                                 "congestion": m.congestion, "loads": list(loads),
                                 "decision": p, "reason": decision and decision.reason})
        self._start_measuring()
        if p is None or p == self.p:
            return None  # consistent hashing: same P, same ring, nothing to rebalance
        return p, f"controller {self.controller.name}: {decision.reason}"  # type: ignore

    def _migrate(self, p: int, wm: float, last_ts: int | None, seq: int,
                 note: str = "") -> None:
        """Alg. 4 driven by the splitter: migration pulse, wait for the channels, new ring."""
        t0 = time.perf_counter()
        run = self.run
        old_p, old = self.p, self.assign
        new = group_assignment(p, self.G)
        for j in range(old_p, p):  # provisioned channels join the merger before any output
            run.put(self.outq, ("join", j, wm, seq))
            self._start_channel(j)
        self.epoch += 1
        if self.transport is None:
            nbytes, moved = self._migrate_threads(old, new, old_p, p)
        else:
            nbytes, moved = self.transport.migrate(self, self.epoch, old, new, old_p, p)
        for j in range(p, old_p):
            del self.channels[j]
        self.p, self.assign = p, new
        entry = _log_entry(self.read, old_p, p, applied=True, note=note,
                           operator=self.op.name, epoch=self.epoch)
        entry.update(duration_ms=(time.perf_counter() - t0) * 1000, bytes_moved=nbytes,
                     groups_moved=moved,
                     groups_reassigned=sum(a != b for a, b in zip(old, new, strict=True)),
                     trigger_ts=last_ts)
        self.log.append(entry)
        if self.controller is not None:
            self._start_measuring()  # the migration is not part of any level's period

    def _migrate_threads(self, old: list[int], new: list[int], old_p: int,
                         p: int) -> tuple[int, int]:
        run = self.run
        participants = max(old_p, p)
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
        return sum(m.bytes_moved), sum(m.groups_moved)

    # -- merger --------------------------------------------------------------------------------
    def _merger(self) -> None:
        run = self.run
        # the channels at the start, not self.p: the splitter may have migrated already
        wms: dict[int, float] = {j: -math.inf for j in range(self.p0)}
        done: dict[int, int] = {j: 0 for j in range(self.p0)}
        busy = self.busy
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
                    if msg[4] > done.get(j, 0):
                        done[j] = msg[4]
                        self.region_seq = min(done.values())
                    busy[j] = busy.get(j, 0.0) + msg[5]
                else:
                    wms[j] = math.inf
                    finals.add(j)
            elif kind == "join":
                wms[msg[1]] = msg[2]
                done[msg[1]] = msg[3]
                busy.setdefault(msg[1], 0.0)
            elif kind == "leave":
                del wms[msg[1]]
                done.pop(msg[1], None)
                if done:
                    self.region_seq = min(done.values())
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


def _log_entry(count: int, before: int, after: int, *, applied: bool, note: str,
               operator: str, epoch: int) -> dict[str, Any]:
    return {"operator": operator, "epoch": epoch, "count": count,
            "parallelism_before": before, "parallelism_after": after,
            "applied": applied, "note": note, "duration_ms": 0.0, "bytes_moved": 0,
            "groups_moved": 0, "groups_reassigned": 0, "trigger_ts": None}
