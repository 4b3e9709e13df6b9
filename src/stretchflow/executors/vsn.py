"""The VSN executor: virtual shared-nothing parallelism and elasticity (STRETCH journal §5–§7).

``setup(O+, m, n)``: an O+ gets ``n`` instances (threads) that share its state σ
(:class:`~stretchflow.operators.oplus.SharedState`); ``m`` are connected to its inlet ESG_in
(they read every tuple) and to the ESG_out of its consumers (they add their outputs), the other
``n − m`` wait in a pool. f_μ assigns σ's key groups to the connected instances; each instance
handles the keys and expired windows of its groups only (Alg. 4 L16–L19), so no key is touched
by two instances and σ needs no per-key lock.

Elasticity (Alg. 4–6): :meth:`VSNOperator.reconfigure` adds a control tuple ⟨e*, O*, f_μ*⟩
to ESG_in at once, right after the position of the instance furthest ahead
(:meth:`~stretchflow.executors.plan.Inlet.send_control`). An instance that reads a control
tuple of a newer epoch (prepareReconfig, Alg. 6) waits right there at a barrier with the other
connected instances; exactly one of them (the barrier's action) applies that request, and
earlier ones still pending are superseded (Theorem 4: the latest control tuple wins): it adds
joining instances as sources of ESG_out and then as readers of ESG_in (starting with the tuple
after the control tuple), or removes leaving instances as readers of ESG_in and then as
sources of ESG_out. Every instance then switches to f_μ* and goes on. Nothing in σ is copied:
instances only change which key groups they own.

Alg. 5 adds the control tuple before each producer's next tuple, and Alg. 4 L10 switches at the
first tuple that raises the watermark beyond γ, the control tuple's timestamp; here the control
tuple goes in at once and the switch is at the control tuple itself. Theorem 3 needs only that
every instance switches at the same position of ESG_in's sequence, with everything before it
done under the old f_μ — true at any position. So a reconfiguration waits neither for the
producers' next tuples (ties at γ included; forever, for an idle source) nor behind a backlog
no instance has reached. Leaving instances first release the f_U outputs they hold (their
ESG_out source is about to be flushed). Joining instances start from the acting instance's watermark
W̄ (Lemma 3: every later tuple has ts >= W̄, so W̄ is a safe lower bound) and from its
position in ESG_in.

Threads: one per source (stateless operators run on it), ``n`` per O+, one per sink, and one
for the controller if there is one. Everything blocks on conditions; nothing spins.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..buffers.esg import END
from ..errors import FlowDefinitionError, OperatorError, RunTupleError, StretchflowError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.oplus import SharedState
from ..runtime.gc_hold import GC_HOLD
from .plan import Inlet, PhysicalPlan, Pusher, Tagged
from ..runtime.result import RunResult

BATCH = 256  # tuples an instance takes from ESG_in at once, and a source adds at once
RUN_BATCH = 1024  # tuples an instance of an O+ with update_many takes at once
BATCH_DELAY = 0.001  # seconds a source holds a partial batch
BARRIER_TIMEOUT = 120.0


@dataclass(frozen=True)
class Control:
    """The payload of a control tuple: the next epoch e*, its instances O* and f_μ*."""

    epoch: int
    instances: frozenset[int]
    assign: tuple[int, ...]


@dataclass
class Reconfiguration:
    """One reconfiguration request and what became of it (the reconfiguration log)."""

    operator: str
    epoch: int
    parallelism_before: int
    parallelism_after: int
    requested_at: float  # time.perf_counter() of the reconfigure call
    applied: bool = False
    applied_at: float | None = None
    trigger_ts: int | None = None
    assignment: tuple[int, ...] = ()
    note: str = ""
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    gc_held: bool = field(default=False, repr=False)
    control: Control | None = field(default=None, repr=False)

    def finish(self) -> None:
        """Marks the request done and lets garbage collection run again (see gc_hold);
        called under the operator's lock, once or more."""
        if self.gc_held:
            self.gc_held = False
            GC_HOLD.release()
        self.done.set()

    @property
    def duration_ms(self) -> float | None:
        """From the reconfigure call to the end of the barrier action."""
        if self.applied_at is None:
            return None
        return (self.applied_at - self.requested_at) * 1000

    def as_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "epoch": self.epoch,
                "parallelism_before": self.parallelism_before,
                "parallelism_after": self.parallelism_after, "applied": self.applied,
                "duration_ms": self.duration_ms, "trigger_ts": self.trigger_ts,
                "note": self.note, "key_groups_per_instance": _group_counts(self.assignment)}


def _group_counts(assign: tuple[int, ...]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for j in assign:
        counts[j] = counts.get(j, 0) + 1
    return dict(sorted(counts.items()))


class _Aborted(Exception):
    """Raised in a thread that was woken because another thread failed."""


_tls = threading.local()


class VSNOperator:
    """An O+ run by ``n`` instances sharing σ; ``m`` connected at the start."""

    def __init__(self, ex: VSNExecutor, node: Node, m: int, n: int, n_groups: int):
        if not 1 <= m <= n:
            raise FlowDefinitionError(f"{node.name}: need 1 <= parallelism ({m}) <= "
                                      f"max_parallelism ({n})")
        self.ex = ex
        self.node = node
        self.op = node.spec
        self.name = node.name
        self.n = n
        self.G = n_groups
        self.sigma = SharedState(n_groups)
        self.assign: tuple[int, ...] = default_assignment(n_groups, m)
        self.O: frozenset[int] = frozenset(range(m))
        self.epoch = 0
        self.log: list[Reconfiguration] = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.done = False
        self._requested_epoch = 0
        self._requests: dict[int, Reconfiguration] = {}
        self._barriers: dict[int, threading.Barrier] = {}
        self._finished = 0
        self.inlet: Inlet = None  # type: ignore[assignment]  # set by the executor
        self.instances = [VSNInstance(self, j) for j in range(n)]

    @property
    def parallelism(self) -> int:
        return len(self.O)

    # -- the public reconfigure ------------------------------------------------------------------
    def reconfigure(self, parallelism: int | None = None,
                    f_mu: Any = None, wait: bool = True,
                    timeout: float | None = None) -> Reconfiguration:
        """Requests a new parallelism and/or f_μ; with ``wait``, returns once it is applied
        (or superseded, or impossible because the input ended). Callable from any thread.

        ``f_mu``: None (key group g to instance g mod P), ``"balanced"`` (key groups packed by
        their measured load), a sequence of G instance indices, or ``fn(g, P) -> instance``.
        """
        rec = self.request(parallelism, f_mu)
        self.send(rec)
        if wait:
            rec.done.wait(timeout)
        return rec

    def request(self, parallelism: int | None = None, f_mu: Any = None) -> Reconfiguration:
        """Registers a request without sending its control tuple (see :meth:`send`)."""
        with self.lock:
            before = self.parallelism
            p = parallelism if parallelism is not None else before
            if not 1 <= p <= self.n:
                raise ValueError(f"{self.name}: parallelism must be in 1..{self.n} "
                                 f"(max_parallelism), got {p}")
            assign = self._resolve_f_mu(f_mu, p)
            self._requested_epoch += 1
            e = self._requested_epoch
            if self.ex.defer_gc:  # before the clock starts: the hold is not free either
                GC_HOLD.acquire()
            rec = Reconfiguration(self.name, e, before, p, time.perf_counter(),
                                  assignment=assign, gc_held=self.ex.defer_gc,
                                  control=Control(e, frozenset(range(p)), assign))
            self._requests[e] = rec
            self.log.append(rec)
            if self.done:
                self._resolve(rec, False, "the input had ended")
            return rec

    def send(self, rec: Reconfiguration) -> None:
        """Adds ``rec``'s control tuple to ESG_in. Earlier requests still pending are
        superseded once it applies (the latest wins), so of several requests made at once
        (``--reconfigure`` steps due at the same tuple) only the latest needs sending."""
        if rec.done.is_set():
            return
        if not self.inlet.send_control(rec.control):
            # only rec: an earlier request's control tuple may still be on its way to the
            # slower instances (those not sent end when the instances do)
            with self.lock:
                self._resolve(rec, False, "the input had ended")

    def _resolve_f_mu(self, f_mu: Any, p: int) -> tuple[int, ...]:
        G = self.G
        if f_mu is None:
            return default_assignment(G, p)
        if isinstance(f_mu, str):
            if f_mu != "balanced":
                raise ValueError(f"unknown f_mu {f_mu!r}: use None, 'balanced', a list or a "
                                 f"function (group, parallelism) -> instance")
            from ..elastic.threshold import pack_key_groups

            loads = dict.fromkeys(range(G), 0.0)
            for vi in self.instances:
                for g, h in enumerate(vi.inst.group_hits):
                    loads[g] += h
            mapping = pack_key_groups(loads, p).mapping
            return tuple(mapping[g] for g in range(G))
        assign = tuple(f_mu(g, p) for g in range(G)) if callable(f_mu) else tuple(f_mu)
        if len(assign) != G or any(not 0 <= a < p for a in assign):
            raise ValueError(f"{self.name}: f_mu must map each of the {G} key groups to an "
                             f"instance in 0..{p - 1}")
        return assign

    # -- Alg. 4's barrier ----------------------------------------------------------------------
    def barrier(self, epoch: int) -> threading.Barrier:
        """The barrier of the switch to ``epoch`` for the instances of the current epoch."""
        with self.lock:
            b = self._barriers.get(epoch)
            if b is None:
                b = self._barriers[epoch] = threading.Barrier(
                    len(self.O), action=lambda: self._apply(epoch))
            return b

    def _apply(self, epoch: int) -> None:
        """Run by exactly one instance while all connected instances wait (Alg. 4 L11–L13):
        applies the request whose control tuple the instances read. Requests of lower
        epochs still pending are superseded — their control tuples come later in ESG_in, or
        never, and instances ignore them (the latest control tuple wins, Theorem 4)."""
        try:
            self._apply_request(epoch)
        except BaseException as e:
            # recorded before the barrier breaks, so the other instances report this error
            # and not the broken barrier (fail() itself would deadlock on the barrier's lock)
            self.ex.record_error(e)
            raise

    def _apply_request(self, epoch: int) -> None:
        acting: VSNInstance = _tls.instance
        with self.lock:
            ctrl = self._requests[epoch].control
        old, new = self.O, ctrl.instances
        joining = sorted(new - old)
        leaving = sorted(old - new)
        outlets = acting.pusher.inlets()
        for j in leaving:  # parked at the barrier: their outputs go out before they leave
            self.instances[j].release_held()
        if joining:  # provisioning: sources of ESG_out first, then readers of ESG_in
            pids = [(self.name, j) for j in joining]
            for inlet in outlets:
                if not inlet.add_producers(pids, (self.name, acting.j)):
                    raise RuntimeError(f"{self.name}: adding sources {pids} to {inlet.name} "
                                       f"failed")
            for j in joining:
                self.instances[j].join(acting, ctrl)
            if not self.inlet.esg.add_readers(joining, acting.j):
                raise RuntimeError(f"{self.name}: adding readers {joining} failed")
        if leaving:  # decommissioning: readers of ESG_in first, then sources of ESG_out
            if not self.inlet.esg.remove_readers(leaving):
                raise RuntimeError(f"{self.name}: removing readers {leaving} failed")
            for inlet in outlets:
                inlet.remove_producers([(self.name, j) for j in leaving])
            for j in leaving:
                # done here, while the leaving thread waits at the barrier: once released it
                # touches nothing, so a later epoch may re-provision it at once
                self.instances[j].leave(ctrl)
        with self.lock:
            self.O = new
            self.assign = ctrl.assign
            self.epoch = epoch
            for j in joining:  # only now, with σ's owners and O settled, may joiners start
                self.instances[j].connected = True
            self._barriers.pop(epoch, None)
            now = time.perf_counter()
            for e in sorted(self._requests):
                if e > epoch:
                    break
                rec = self._requests.pop(e)
                rec.applied_at = now
                rec.trigger_ts = acting.trigger_ts
                if e == epoch:
                    rec.applied = True
                else:
                    rec.note = f"superseded by epoch {epoch} (the latest control tuple wins)"
                rec.finish()
            if joining:
                self.cond.notify_all()

    def _resolve(self, rec: Reconfiguration, applied: bool, note: str) -> None:
        self._requests.pop(rec.epoch, None)
        rec.applied = applied
        rec.note = note
        rec.finish()

    def instance_finished(self) -> None:
        with self.lock:
            self._finished += 1
            if self._finished == len(self.O):
                self.done = True
                for rec in list(self._requests.values()):
                    self._resolve(rec, False, "the input ended before its control tuple "
                                              "was read")
                self.cond.notify_all()

    def wake_all(self) -> None:
        with self.lock:
            self.done = True
            for b in self._barriers.values():
                b.abort()
            self.cond.notify_all()


def default_assignment(n_groups: int, p: int) -> tuple[int, ...]:
    """f_μ over key groups: group g to instance g mod P (hash(k) mod Π of Op. 9, by group)."""
    return tuple(g % p for g in range(n_groups))


class VSNInstance:
    """o+_j: a thread running processVSN (Alg. 4) over the operator's shared σ."""

    def __init__(self, vop: VSNOperator, j: int):
        self.vop = vop
        self.j = j
        self.inst = vop.op.instance(vop.sigma, j, list(vop.assign))
        self.inst.group_hits = [0] * vop.G
        self.connected = j in vop.O
        self.e = 0
        self.trigger_ts: float | None = None  # the ts of the control tuple of the switch
        self.prefix: list | None = None
        self.remaining: list | None = None
        self.W_bar: float = -math.inf
        self.pusher: Pusher = None  # type: ignore[assignment]
        self.busy = 0.0
        self.processed = 0
        self.last_wm = -math.inf
        self._step = self._process_runs if vop.op.batchable else self._process
        # a kernel over runs pays a fixed cost per call: larger runs amortize it
        self._take = RUN_BATCH if vop.op.batchable else BATCH

    def run(self) -> None:
        _tls.instance = self
        try:
            self._loop()
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            self.vop.ex.fail(e)

    def _loop(self) -> None:
        vop, ex = self.vop, self.vop.ex
        esg = vop.inlet.esg
        while True:
            if not self.connected:
                with vop.cond:
                    while not self.connected and not vop.done and ex.error is None:
                        vop.cond.wait()
                    if not self.connected:
                        return
            if self.prefix is not None:
                items, self.prefix = self.prefix, None
            else:
                items = esg.get_batch(self.j, self._take)
            if ex.error is not None:
                raise _Aborted
            if items is END:
                self._finish()
                return
            t0 = time.perf_counter()
            if self._step(items):
                self._emit()
            self.busy += time.perf_counter() - t0

    def _process(self, items: list) -> bool:
        """processVSN (Alg. 4) over a batch; False once this instance has left."""
        inst = self.inst
        process, advance = inst.process, inst.advance
        n = 0
        for idx, (ts, p) in enumerate(items):
            kind = type(p)
            if kind is Control:  # isControl / prepareReconfig (Alg. 6), switching here
                if p.epoch > self.e and not self._switch(p, ts, items, idx + 1):
                    self.processed += n
                    return False
                continue
            n += 1
            try:
                if p is WATERMARK:
                    advance(ts)
                elif kind is Tagged:
                    process(ts, p.p, p.i)
                else:
                    process(ts, p, 0)
            except StretchflowError:
                raise
            except Exception as e:
                raise OperatorError(self.vop.name, ts, p.p if kind is Tagged else p, e) from e
        self.processed += n
        return True

    def _process_runs(self, items: list) -> bool:
        """_process for an O+ with ``update_many``: the data tuples between watermarks go to
        OPlusInstance.process_batch as one run, so a numpy kernel covers many tuples per call
        while the GIL is released. From a control tuple on, the batch takes the
        tuple-at-a-time path, which handles Alg. 4's epoch switch."""
        run: list[tuple[int, Any, int]] = []
        for idx, (ts, p) in enumerate(items):
            kind = type(p)
            if kind is Control:
                self._run(run)
                return self._process(items[idx:])
            if p is WATERMARK:
                self._run(run)
                run = []
                self._process(items[idx:idx + 1])
                continue
            run.append((ts, p.p, p.i) if kind is Tagged else (ts, p, 0))
        self._run(run)
        return True

    def _run(self, run: list[tuple[int, Any, int]]) -> None:
        if not run:
            return
        try:
            self.inst.process_batch(run)
        except StretchflowError:
            raise
        except RunTupleError as e:
            raise OperatorError(self.vop.name, e.ts, e.payload, e.cause) from e.cause
        except Exception as e:
            raise OperatorError(self.vop.name, run[0][0], run[0][1], e) from e
        self.processed += len(run)

    def _switch(self, ctrl: Control, ts: float, items: list, idx: int) -> bool:
        """waitForInstances and the epoch switch at the control tuple ``(ts, ctrl)``, which
        is ``items[idx - 1]``; False if this instance left."""
        vop = self.vop
        # decided now: once the barrier releases a leaving instance, a later epoch may
        # re-provision it before this thread runs again (and touches anything)
        leaving = self.j not in ctrl.instances
        self._emit()  # what W̄ released reaches ESG_out before its membership changes
        self.trigger_ts = ts
        self.remaining = items[idx:]
        self.W_bar = self.inst.W
        try:
            vop.barrier(ctrl.epoch).wait(BARRIER_TIMEOUT)
        except threading.BrokenBarrierError:
            if vop.ex.error is not None:
                raise _Aborted from None
            raise RuntimeError(f"{vop.name}: barrier of epoch {ctrl.epoch} broke") from None
        if leaving:
            return False  # the barrier action has moved this instance to the pool
        self.remaining = None
        self.e = ctrl.epoch
        self.inst.set_assignment(list(ctrl.assign))
        return True

    def release_held(self) -> None:
        """A leaving instance's f_U outputs held for order, out to ESG_out before its source
        there is removed (called in the barrier action, while this thread is parked)."""
        self.inst.flush_pending()
        self._emit()

    def leave(self, ctrl: Control) -> None:
        """Disconnects this instance (called in the barrier action)."""
        self.connected = False
        self.e = ctrl.epoch
        self.remaining = None
        self.inst.set_assignment(list(ctrl.assign))

    def join(self, acting: VSNInstance, ctrl: Control) -> None:
        """Connects this pool instance at the triggering tuple (called in the barrier action)."""
        self.inst.W = acting.W_bar  # Lemma 3
        self.inst.saw_time(acting.W_bar)
        self.inst.set_assignment(list(ctrl.assign))
        self.e = ctrl.epoch
        self.prefix = list(acting.remaining)
        self.last_wm = acting.last_wm

    def _emit(self) -> None:
        out = self.inst.take()
        w = self.inst.W
        # lets ESG_out's readiness pass this instance (Lemma 2); a leaving instance that
        # flushed outputs beyond W is about to be removed and needs none
        if w > self.last_wm and (not out or out[-1][0] <= w):
            out.append((w, WATERMARK))
            self.last_wm = w
        if out:
            self.pusher.push(out)

    def _finish(self) -> None:
        try:
            self.inst.finish()
        except StretchflowError:
            raise
        except Exception as e:
            raise OperatorError(self.vop.name, None, "<end of input>", e) from e
        self._emit()
        self.pusher.close()
        self.vop.instance_finished()


class IngestClock:
    """When each source added which timestamps, to measure latency at the sinks: from the
    wall-clock time the first input with ts >= T − δ entered to the emission of an output
    with ts T (the latest input that can contribute to it, or the one that closed it)."""

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.wall: list[float] = []
        self.lock = threading.Lock()

    def record(self, ts: int) -> None:
        now = time.perf_counter()
        with self.lock:
            if not self.ts or ts > self.ts[-1]:
                self.ts.append(ts)
                self.wall.append(now)

    def entered(self, ts: int) -> float | None:
        i = bisect.bisect_left(self.ts, ts)
        return self.wall[i] if i < len(self.wall) else None


class VSNExecutor:
    """Runs a Flow with every O+ as a VSN operator."""

    def __init__(self, flow: Flow, parallelism: int = 1, max_parallelism: int | None = None,
                 reconfigure: list[tuple[int, int]] | None = None,
                 controller: Any = None, n_groups: int | None = None,
                 capacity: int = 4096, period: float = 1.0,
                 on_start: Callable[[VSNExecutor], None] | None = None,
                 defer_gc: bool = True):
        self.flow = flow
        self.defer_gc = defer_gc  # no cyclic GC pause inside a reconfiguration (gc_hold.py)
        schedule = sorted(reconfigure or [])
        n = max_parallelism or max([parallelism] + [p for _, p in schedule])
        if any(p > n for _, p in schedule):
            raise FlowDefinitionError(f"--reconfigure asks for more than max_parallelism={n}")
        self.schedule = schedule
        # key groups let f_μ move keys between instances; with one instance at most there is
        # nothing to move, and one group keeps the per-key routing as cheap as the reference
        self.G = n_groups or (max(128, 16 * n) if n > 1 else 1)
        self.error: BaseException | None = None
        self._error_lock = threading.Lock()
        self.ops: dict[Node, VSNOperator] = {
            node: VSNOperator(self, node, parallelism, n, self.G)
            for node in flow.nodes if node.kind == "oplus"
        }
        self.plan = PhysicalPlan(flow, self._producer_ids, self._reader_ids, capacity)
        for node, vop in self.ops.items():
            vop.inlet = self.plan.inlets[node]
            for vi in vop.instances:
                vi.pusher = self.plan.pusher(node, (vop.name, vi.j))
        self.clock = IngestClock()
        self._sources_left = sum(1 for n in flow.nodes if n.kind == "source")
        self.controller = controller
        self.period = period
        self.on_start = on_start
        self.read = 0
        self.latencies: list[tuple[float, float]] = []  # (wall-clock time, latency ms)
        self.t_start = 0.0
        self.metrics_log: list[dict[str, Any]] = []

    def _producer_ids(self, node: Node) -> list[Hashable]:
        if node.kind == "source":
            return [("source", node.name)]
        vop = self.ops[node]
        return [(vop.name, j) for j in sorted(vop.O)]

    def _reader_ids(self, node: Node) -> list[Hashable]:
        return sorted(self.ops[node].O)

    def reconfigure(self, parallelism: int | None = None, f_mu: Any = None,
                    wait: bool = True) -> list[Reconfiguration]:
        """Reconfigures every O+ of the flow; see :meth:`VSNOperator.reconfigure`."""
        return [vop.reconfigure(parallelism, f_mu, wait=wait) for vop in self.ops.values()]

    # -- threads -------------------------------------------------------------------------------
    def _source(self, node: Node) -> None:
        try:
            pusher = self.plan.pusher(node, ("source", node.name))
            scheduled = bool(self.schedule)
            count = 0
            batch: list = []
            clock = time.perf_counter
            started = clock()
            # a paced or replayed source (a live one) makes us wait for every item: holding
            # its tuples for a fuller batch would only add latency
            live = bool(getattr(node.spec, "rate", None) or getattr(node.spec, "speed", None))
            for item in node.spec.items():
                if self.error is not None:
                    return
                now = clock()
                if not batch:
                    started = now
                batch.append(item)
                if item[1] is not WATERMARK:
                    count += 1
                    if scheduled:
                        due = self._count_tuple()
                        if due:  # --reconfigure: after the COUNT-th tuple of all sources
                            pusher.push(batch)
                            batch = []
                            self._scheduled(due)
                # a batch goes out when full, BATCH_DELAY old, or its source is slow
                n = len(batch)
                if n and (n >= BATCH or live or now - started >= BATCH_DELAY):
                    pusher.push(batch)
                    self.clock.record(batch[-1][0])
                    batch = []
            if batch:
                pusher.push(batch)
                self.clock.record(batch[-1][0])
            with self._error_lock:
                self._sources_left -= 1
                last = self._sources_left == 0
                rest = [p for _, p in self.schedule] if last else []
                self.schedule = [] if last else self.schedule
            self._scheduled(rest)  # due after the last tuple: applied at the end of input
            pusher.close()
        except BaseException as e:  # noqa: BLE001
            self.fail(e)

    def _scheduled(self, due: list[int]) -> None:
        """Requests the parallelisms of ``--reconfigure`` steps due now; of several due at
        once only the latest is sent and applied (the latest control tuple wins)."""
        if due:
            for vop in self.ops.values():
                recs = [vop.request(p) for p in due]
                vop.send(recs[-1])

    def _count_tuple(self) -> list[int]:
        """Counts one input tuple over all sources; the parallelisms now due."""
        with self._error_lock:
            self.read += 1
            due = []
            while self.schedule and self.read >= self.schedule[0][0]:
                due.append(self.schedule.pop(0)[1])
            return due

    def _sink(self, k: int, sink: Any) -> None:
        try:
            inlet = self.plan.inlets[("sink", k)]
            reader = ("sink", k)
            entered = self.clock.entered
            lat = self.latencies
            while True:
                items = inlet.esg.get_batch(reader, 4096)
                if self.error is not None:
                    return
                if items is END:
                    return
                now = time.perf_counter()
                out = [item for item in items if item[1] is not WATERMARK]
                if out:
                    sink.write(out)
                    if len(lat) < 200_000:
                        for ts, _ in out[:: max(1, len(out) // 16)]:
                            t_in = entered(ts - 1)
                            if t_in is not None:
                                lat.append((now, (now - t_in) * 1000))
        except BaseException as e:  # noqa: BLE001
            self.fail(e)

    def _control_loop(self, stop: threading.Event) -> None:
        from ..elastic.controller import Metrics

        try:
            def blocked(vop: VSNOperator) -> float:
                # congestion (elastic-scaling §5): time sources spent blocked on a full ESG_in
                return vop.inlet.esg.stats()["source_wait_s"]

            last = {vop: (time.perf_counter(), [vi.busy for vi in vop.instances],
                          sum(vi.processed for vi in vop.instances), blocked(vop))
                    for vop in self.ops.values()}
            t_start = self.t_start  # the run's start, as latency_series
            while not stop.wait(self.period):
                for vop in self.ops.values():
                    t0, busy0, n0, b0 = last[vop]
                    now = time.perf_counter()
                    busy = [vi.busy for vi in vop.instances]
                    n = sum(vi.processed for vi in vop.instances)
                    b = blocked(vop)
                    dt = max(now - t0, 1e-9)
                    loads = tuple(min(1.0, (busy[j] - busy0[j]) / dt) for j in sorted(vop.O))
                    last[vop] = (now, busy, n, b)
                    # every connected instance reads every tuple: tuples of the operator's
                    # input per second are the instances' sum over Π
                    rate = (n - n0) / dt / max(1, vop.parallelism)
                    m = Metrics(time=now - t_start, period=dt, parallelism=vop.parallelism,
                                throughput=rate, input_rate=rate,
                                per_instance_load=loads,
                                congestion=min(1.0, (b - b0) / dt),
                                max_parallelism=vop.n)
                    self.metrics_log.append({"operator": vop.name, "time": m.time,
                                             "parallelism": m.parallelism,
                                             "input_rate": m.input_rate,
                                             "congestion": m.congestion,
                                             "loads": list(loads)})
                    decision = self.controller.observe(m)
                    if decision is not None and not vop.done:
                        vop.reconfigure(decision.parallelism, "balanced", wait=False)
        except BaseException as e:  # noqa: BLE001
            self.fail(e)

    def record_error(self, e: BaseException) -> None:
        """Keeps the first error of the run."""
        with self._error_lock:
            if self.error is None:
                self.error = e

    def fail(self, e: BaseException) -> None:
        self.record_error(e)
        for inlet in self.plan.inlets.values():
            inlet.esg.abort(e)
        for vop in self.ops.values():
            vop.wake_all()

    def run(self) -> RunResult:
        sinks = [s for _, s in self.flow.sinks]
        for s in sinks:
            s.open()
        threads = []
        for node in self.flow.nodes:
            if node.kind == "source":
                threads.append(threading.Thread(target=self._source, args=(node,),
                                                name=f"source {node.name}", daemon=True))
        for vop in self.ops.values():
            for vi in vop.instances:
                threads.append(threading.Thread(target=vi.run, name=f"{vop.name}[{vi.j}]",
                                                daemon=True))
        for k, s in enumerate(sinks):
            threads.append(threading.Thread(target=self._sink, args=(k, s),
                                            name=f"sink {s.name}", daemon=True))
        stop = threading.Event()
        ctl = None
        if self.controller is not None:
            ctl = threading.Thread(target=self._control_loop, args=(stop,), daemon=True,
                                   name="controller")
        t0 = self.t_start = time.perf_counter()
        for t in threads:
            t.start()
        if ctl is not None:
            ctl.start()
        if self.on_start is not None:
            self.on_start(self)
        try:
            for t in threads:
                t.join()
        finally:
            stop.set()
            if ctl is not None:
                ctl.join()
            for vop in self.ops.values():  # requests a failure left pending hold no GC
                with vop.lock:
                    for rec in vop.log:
                        if rec.gc_held:
                            rec.finish()
            for s in sinks:
                s.close()
        elapsed = time.perf_counter() - t0
        if self.error is not None:
            raise self.error
        counts = {n.name: n.spec.read for n in self.flow.nodes if n.kind == "source"}
        lat = sorted(ms for _, ms in self.latencies)
        step = max(1, len(self.latencies) // 2000)
        series = [(round(t - t0, 3), round(ms, 3)) for t, ms in self.latencies[::step]]
        return RunResult(
            engine="vsn",
            elapsed=elapsed,
            tuples_in=counts,
            tuples_out={s.name: s.count for s in sinks},
            extra={
                "parallelism": {v.name: v.parallelism for v in self.ops.values()},
                "reconfigurations": [r.as_dict() for v in self.ops.values() for r in v.log],
                "latency_ms": _percentiles(lat),
                "latency_series": series,  # (seconds since start, ms), at most ~2000
                "instances": {v.name: [{"j": vi.j, "tuples": vi.processed,
                                        "busy_s": round(vi.busy, 4)} for vi in v.instances]
                              for v in self.ops.values()},
                "metrics": self.metrics_log,
            },
        )


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None, "samples": 0}
    n = len(values)
    return {"p50": values[n // 2], "p99": values[min(n - 1, int(n * 0.99))],
            "max": values[-1], "samples": n}


def run(flow: Flow, parallelism: int = 1, max_parallelism: int | None = None,
        reconfigure: list[tuple[int, int]] | None = None, controller: Any = None,
        **options: Any) -> RunResult:
    """Runs ``flow`` on the VSN engine; ``controller`` is a name (``threshold``, ``level``)
    or a :class:`~stretchflow.elastic.controller.Controller`."""
    if isinstance(controller, str):
        from ..elastic import make_controller

        controller = make_controller(controller)
    return VSNExecutor(flow, parallelism, max_parallelism, reconfigure, controller,
                       **options).run()
