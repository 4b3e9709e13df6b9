"""The VSN executor: virtual shared-nothing parallelism and elasticity (STRETCH journal §5–§7).

``setup(O+, m, n)``: an O+ gets ``n`` instances (threads) that share its state σ
(:class:`~stretchflow.operators.oplus.SharedState`); ``m`` are connected to its inlet ESG_in
(they read every tuple) and to the ESG_out of its consumers (they add their outputs), the other
``n − m`` wait in a pool. f_μ assigns σ's key groups to the connected instances; each instance
handles the keys and expired windows of its groups only (Alg. 4 L16–L19), so no key is touched
by two instances and σ needs no per-key lock.

This module holds the instances' loop (processVSN, Alg. 4, with the epoch switch at a control
tuple) and the executor; the operator's side of elasticity (requests, control tuples, the
barrier and its action, Alg. 5–6) is :mod:`stretchflow.executors.vsn_operator`.

The executor runs on the runtime's skeleton (:mod:`stretchflow.runtime.skeleton`): its
threads are the run's (the first error wins; aborting the ESGs and waking the operators are
its abort hooks), sources are read by a :class:`~stretchflow.runtime.SourcePump` (batches,
live sources, the ``--reconfigure`` schedule), each sink thread hands ESG_out's batches to
the runtime's sink drain (which measures latency), and the run's
:class:`~stretchflow.runtime.MetricsSampler` measures every operator each
``metrics_interval`` and hands the measurement to the controller, if there is one. What it
plugs in is listed in the skeleton's docstring.

Threads: one per source (stateless operators run on it), ``n`` per O+, one per sink, and the
metrics sampler. Everything blocks on conditions; nothing spins.

The spread between instances is bounded (``max_spread``): an instance reads at most that many
tuples of ESG_in ahead of the slowest instance of its operator, in batches of at most half of
it, so a reconfiguration, whose control tuple goes right after the furthest instance, waits
for at most about ``1.5 × max_spread`` tuples per instance; from a control tuple until its
switch, ESG_in's sources wait (the option ``control_hold``), so the instances get the GIL
(docs/vsn.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from itertools import groupby
from operator import itemgetter
from typing import Any

from ..batch import Batch
from ..buffers.esg import END
from ..engines import Settings, given
from ..engines import run as run_engine
from ..engines import settings as engine_settings
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..runtime import ReconfigureSchedule, RunResult, SourcePump, Stopped, pump, raise_user_error
from ..runtime.control import CheckpointBarrier
from ..runtime.drain import SINK_BATCH, drain_buffer
from ..runtime.gil_core import gil_bound_source
from ..runtime.skeleton import Run, controller_name
from .plan import PhysicalPlan, Pusher, Tagged, stateless_paths
from .vsn_batches import BatchAwareInlets, plan_batches, spread_in_entries
from .vsn_operator import Control, Reconfiguration, VSNOperator, default_assignment

BATCH = 256  # tuples an instance takes from ESG_in at once, and a source adds at once
RUN_BATCH = 1024  # tuples an instance of an O+ whose kernels take runs takes at once
BATCH_DELAY = 0.001  # seconds a source holds a partial batch
# default max_spread (docs/vsn.md, "The spread between instances"): tuples an instance may
# read ahead of the slowest one; an O+ whose kernels take runs keeps its 1 024-tuple runs
MAX_SPREAD = 64
MAX_SPREAD_RUNS = 2 * RUN_BATCH


class VSNInstance:
    """o+_j: a thread running processVSN (Alg. 4) over the operator's shared σ."""

    def __init__(self, vop: VSNOperator, j: int):
        self.vop = vop
        self.j = j
        if vop.columnar_state is not None:  # whole batches through Arrow kernels
            from ..operators.columnar_shared import ColumnarVSNInstance

            self.inst = ColumnarVSNInstance(vop.op, vop.columnar_state, j, list(vop.assign),
                                            j in vop.O)
            if vop.merge_outputs:
                self.inst.merge_rows = pump.WIDE_COLUMNAR_BATCH
                self.inst.interleave = vop.interleave
        else:
            self.inst = vop.op.instance(vop.sigma, j, list(vop.assign))
        self.inst.group_hits = [0] * vop.G
        self.connected = j in vop.O
        self.e = 0
        self.ckpt_epoch = 0  # the latest checkpoint barrier passed (vsn_checkpoint)
        self.trigger_ts: float | None = None  # the ts of the control tuple of the switch
        self.prefix: list | None = None
        self.remaining: list | None = None
        self.W_bar: float = -math.inf
        self.pusher: Pusher = None  # type: ignore[assignment]
        self.busy = 0.0
        self.processed = 0
        self.last_wm = -math.inf
        runs = self.inst.takes_runs
        self._step = self._process_runs if runs else self._process
        # a kernel over runs pays a fixed cost per call: larger runs amortize it
        self._take = RUN_BATCH if runs else BATCH
        if vop.columnar_state is not None:
            self._step = self._process_batches
            self._batch = self.inst.process_batch
            self._take = 2  # entries: whole source batches (plan.columnar_batch)
        elif vop.rows:  # batches of rows, f_MK once per batch for all instances
            self._step = self._process_batches
            self._batch = self._rows
            self._take = 2

    def bound_take(self, spread: int | None) -> None:
        """Takes at most half of ``max_spread`` tuples at a time: a batch in flight is work
        the other instances wait for at a reconfiguration, so it is bounded with the spread."""
        if spread is not None:
            self._take = max(1, min(self._take, spread // 2))

    def run(self) -> None:
        """The thread's body (under the run's guard: an exception fails the run)."""
        self.vop.acting.instance = self
        vop, control = self.vop, self.vop.control
        esg = vop.inlet.esg
        while True:
            if not self.connected:
                with vop.cond:
                    while not self.connected and not vop.done and control.error is None:
                        vop.cond.wait()
                    if not self.connected:
                        return
            if self.prefix is not None:
                items, self.prefix = self.prefix, None
            else:
                items = esg.get_batch(self.j, self._take)
            if control.error is not None:
                raise Stopped
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
            if kind is CheckpointBarrier:
                self.vop.checkpoints.at_barrier(self, ts, p)
                continue
            n += 1
            try:
                if p is WATERMARK:
                    advance(ts)
                elif kind is Tagged:
                    process(ts, p.p, p.i)
                else:
                    process(ts, p, 0)
            except Exception as e:
                raise_user_error(self.vop.name, ts, p.p if kind is Tagged else p, e)
        self.processed += n
        return True

    def _process_runs(self, items: list) -> bool:
        """_process for an O+ whose kernels take runs (``update_many``, a columnar f_MK): the
        data tuples between watermarks go to OPlusInstance.process_run as one run, so a numpy
        or Arrow kernel covers many tuples per call while the GIL is released. From a control
        tuple on, the batch takes the tuple-at-a-time path, which handles Alg. 4's epoch
        switch."""
        run: list[tuple[int, Any, int]] = []
        for idx, (ts, p) in enumerate(items):
            kind = type(p)
            if kind is Control:
                self._run(run)
                return self._process(items[idx:])
            if p is WATERMARK or kind is CheckpointBarrier:
                self._run(run)
                run = []
                self._process(items[idx:idx + 1])
                continue
            run.append((ts, p.p, p.i) if kind is Tagged else (ts, p, 0))
        self._run(run)
        return True

    def _process_batches(self, items: list) -> bool:
        """processVSN (Alg. 4) over ESG_in entries that are whole batches: each batch goes
        through the shared columnar σ at once (a columnar O+, :mod:`~stretchflow.operators.
        columnar_shared`) or through the instance's loop over its rows (:meth:`_rows`);
        control tuples, checkpoint barriers and watermarks are entries of their own, between
        batches, and switch or advance as tuple at a time."""
        inst, batch = self.inst, self._batch
        for idx, (ts, p) in enumerate(items):
            kind = type(p)
            if kind is Control:
                if p.epoch > self.e and not self._switch(p, ts, items, idx + 1):
                    return False
                continue
            if kind is CheckpointBarrier:
                self.vop.checkpoints.at_barrier(self, ts, p)
                continue
            try:
                if kind is Batch:
                    batch(p)
                    self.processed += len(p)
                elif p is WATERMARK:
                    inst.advance(ts)
                else:
                    inst.process(ts, p, 0)
                    self.processed += 1
            except Exception as e:
                raise_user_error(self.vop.name, ts, p.payloads[0] if kind is Batch else p, e)
        return True

    def _rows(self, batch: Batch) -> None:
        """A batch of rows (issue #32): an A+ instance's keys computed once for the
        operator's instances (``process_shared``), any other O+'s ``process_rows``."""
        shared = getattr(self.inst, "process_shared", None)
        if shared is not None:
            shared(batch, self.vop.rows_lock)
        else:
            self.inst.process_rows(batch.ts_list(), batch.payloads, 0)

    def _run(self, run: list[tuple[int, Any, int]]) -> None:
        if not run:
            return
        try:
            self.inst.process_run(run)  # names the failing tuple (RunTupleError)
        except Exception as e:
            raise_user_error(self.vop.name, run[0][0], run[0][1], e)
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
        vop.control.wait_at(vop.barrier(ctrl.epoch), f"{vop.name}: barrier of epoch {ctrl.epoch}")
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
        left = getattr(self.inst, "left", None)
        if left is not None:  # a columnar instance: σ no longer waits for its windows
            left()
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
        self.ckpt_epoch = acting.ckpt_epoch  # its barriers' later copies are passed too
        self.prefix = list(acting.remaining)
        self.last_wm = acting.last_wm
        joined = getattr(self.inst, "joined", None)
        if joined is not None:  # a columnar instance: the acting one's windows are done
            joined(acting.inst)

    def _emit(self) -> None:
        out = self.inst.take()  # windows as batches: the pusher explodes them where needed
        if self.vop.rows and out:
            out = by_timestamp(out)
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
        except Exception as e:
            raise_user_error(self.vop.name, None, None, e)
        self._emit()
        self.pusher.close()
        self.vop.instance_finished()


class VSNExecutor:
    """Runs a Flow with every O+ as a VSN operator.

    Args: as :func:`run`, but ``controller`` is an object (or None) and ``reconfigure`` a
    list of ``(COUNT, P)`` steps.
    """

    def __init__(self, flow: Flow, settings: Settings | None = None, **options: Any):
        s = settings if settings is not None else engine_settings("vsn", options)
        self.flow = flow
        self.defer_gc = s.defer_gc  # no cyclic GC pause inside a reconfiguration (gc_hold.py)
        n = s.max_parallelism
        # key groups let f_μ move keys between instances; with one instance at most there is
        # nothing to move, and one group keeps the per-key routing as cheap as the reference.
        # 16 per instance at the most instances lets a balancing f_μ even out skew; each
        # group has its own expiry (a heap entry, a combine, f_O per window), so no more: at
        # 128 (the floor before) hot items at P = 2 ran ~6 % more instructions than at 32
        self.G = s.key_groups or (16 * n if n > 1 else 1)
        # the runtime's skeleton: threads, sinks, metrics, latency, checkpoints, the result
        self.rt = Run("vsn", flow, gil_core=s.gil_core)
        self.control, self.metrics_log = self.rt.control, self.rt.metrics
        self.clock, self.latency = self.rt.clock, self.rt.latency
        switch = s.hold_switch
        self.ops: dict[Node, VSNOperator] = {
            node: VSNOperator(node, s.parallelism, n, self.G, control=self.control,
                              log=self.metrics_log, defer_gc=s.defer_gc, hold_switch=switch)
            for node in flow.nodes if node.kind == "oplus"
        }
        self.batches = plan_batches(flow, self.ops, self.G, s.columnar == "on",
                                    s.checkpoint is not None)
        for node in self.batches.rows:
            self.ops[node].rows = True
        self.plan = PhysicalPlan(flow, self._producer_ids, self._reader_ids, s.capacity,
                                 inlet=BatchAwareInlets(flow, self.ops, self.batches),
                                 batches=self.batches)
        for node, vop in self.ops.items():
            vop.inlet = self.plan.inlets[node]
            vop.instances = [VSNInstance(vop, j) for j in range(n)]
            spread = _spread(s.max_spread, vop.instances[0].inst.takes_runs)
            if vop.columnar_state is not None or vop.rows:  # positions are batches here
                spread = spread_in_entries(spread, self.batches.rows_in(node))
            vop.inlet.esg.set_max_spread(spread)
            vop.inlet.esg.set_control_hold(s.control_hold)
            for vi in vop.instances:
                vi.bound_take(spread)
                vi.pusher = self.plan.pusher(node, (vop.name, vi.j))
        for inlet in self.plan.inlets.values():  # no thread stays blocked on an ESG
            self.control.on_abort(inlet.esg.abort)
        for vop in self.ops.values():  # nor in the pool or at a barrier
            self.control.on_abort(lambda _e, vop=vop: vop.wake_all())
            if vop.columnar_state is not None:  # nor waiting for another's batch
                self.control.on_abort(lambda _e, st=vop.columnar_state: st.stop())
        sources = sum(1 for node in flow.nodes if node.kind == "source")
        self.schedule = ReconfigureSchedule(s.reconfigure, sources)
        self.controller = s.controllers(0)
        self.metrics_interval = s.metrics_interval
        self.on_start = s.on_start
        self._by_name = {vop.name: vop for vop in self.ops.values()}
        self._last: dict[VSNOperator, tuple[float, list[float], int, float, int]] = {}
        self.checkpoints = None  # checkpoints and resume (vsn_checkpoint, docs/checkpoints.md)
        if s.checkpoint is not None:
            from ..runtime.threaded_checkpoint import RunCheckpoints
            from .vsn_checkpoint import VSNCheckpoints

            self.checkpoints = VSNCheckpoints(self, RunCheckpoints(
                s.checkpoint, s.checkpoint_every, flow, {"columnar": s.columnar},
                [vop.name for vop in self.ops.values()]))
            self.rt.checkpoints = self.checkpoints.run

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
        pusher = self.plan.pusher(node, ("source", node.name))
        spec, push, batches = node.spec, pusher.push, self.batches.get(node)
        if self.checkpoints is not None:  # barriers in the stream, skipping on resume
            spec, push, batches = self.checkpoints.run.pump_args(node, pusher, batches)
        pump = SourcePump(spec, push, self.control, schedule=self.schedule,
                          on_due=self._scheduled, clock=self.clock, batch=BATCH,
                          delay=BATCH_DELAY)
        if batches is not None:
            pump.run_batches(batches)
        else:
            pump.run()
        pusher.close()

    def _scheduled(self, due: list[int]) -> None:
        """Requests the parallelisms of ``--reconfigure`` steps due now; of several due at
        once only the latest is sent and applied (the latest control tuple wins)."""
        for vop in self.ops.values():
            recs = [vop.request(p) for p in due]
            vop.send(recs[-1])

    def _sink(self, k: int, sink: Any) -> None:
        """Sink ``k``'s thread: ESG_out's hand-overs through the runtime's drain (into the
        sink, or its part of a checkpointed run)."""
        esg = self.plan.inlets[("sink", k)].esg
        reader = ("sink", k)
        drain_buffer(self.rt.drain(k), lambda: esg.get_batch(reader, SINK_BATCH), END,
                     self.control)

    # -- metrics -------------------------------------------------------------------------------
    def _measure(self) -> list[tuple[str, Any]]:
        """One :class:`~stretchflow.elastic.controller.Metrics` per O+ since the last call."""
        # imported here, not with the module: a run that never samples (shorter than one
        # interval) does not load the elastic package
        from ..elastic.controller import Metrics

        out: list[tuple[str, Any]] = []
        for vop in self.ops.values():
            t0, busy0, n0, b0, _ = self._last[vop]
            now, busy, n, b, backlog = self._last[vop] = vop.sample(time.perf_counter())
            dt = max(now - t0, 1e-9)
            loads = tuple(min(1.0, (busy[j] - busy0[j]) / dt) for j in sorted(vop.O))
            # every connected instance reads every tuple: tuples of the operator's input
            # per second are the instances' sum over Π
            rate = (n - n0) / dt / max(1, vop.parallelism)
            out.append((vop.name, Metrics(
                time=now - self.rt.t0, period=dt, parallelism=vop.parallelism,
                throughput=rate, input_rate=rate, per_instance_load=loads,
                congestion=min(1.0, (b - b0) / dt), max_parallelism=vop.n,
                extras={"backlog": backlog})))
        return out

    def _apply_decision(self, operator: str, decision: Any) -> None:
        vop = self._by_name[operator]
        if not vop.done:
            vop.reconfigure(decision.parallelism, "balanced", wait=False)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        rt = self.rt
        for node in self.flow.nodes:
            if node.kind == "source":
                # parsed in Python (or by orjson): not where Arrow parses it into tables,
                # on threads that would take the source thread's CPU (runtime/gil_core.py)
                rt.thread(self._source, node, name=f"source {node.name}",
                          python=gil_bound_source(node.spec)
                          and node not in self.batches.table_sources)
        for vop in self.ops.values():
            for vi in vop.instances:  # an O+ calling Python functions (not Arrow kernels)
                rt.thread(vi.run, name=f"{vop.name}[{vi.j}]",
                          python=vop.columnar_state is None)
        for k, (_, s) in enumerate(self.flow.sinks):
            rt.thread(self._sink, k, s, name=f"sink {s.name}")
        rt.sample(self.metrics_interval, self._measure, self.controller, self._apply_decision)
        rt.at_end(self._release_holds)
        rt.execute(begin=self._begin, started=(lambda: self.on_start(self))
                   if self.on_start is not None else None)
        ops = self.ops.values()
        fallback = self.batches.fallback
        return rt.result(
            {n.name: n.spec.read for n in self.flow.nodes if n.kind == "source"},
            {"parallelism": {v.name: v.parallelism for v in ops},
             "reconfigurations": [r.as_dict() for v in ops for r in v.log],
             "controller": controller_name(self.controller),
             # how each O+ took its tuples (RunResult's schema): an instance's path; each
             # Map or Filter with a columnar form: whether it ran on batches
             "paths": {**{v.name: _path(v.instances) for v in ops},
                       **stateless_paths(self.flow, self.batches.streams)},
             # why an O+ with columnar forms took tuples (vsn_batches.BatchPlan.fallback)
             **({"columnar_fallback": fallback} if fallback else {}),
             # vsn's own: what each instance did (tuples read, seconds busy)
             "instances": {v.name: [{"j": vi.j, "tuples": vi.processed,
                                     "busy_s": round(vi.busy, 4)} for vi in v.instances]
                           for v in ops}})

    def _begin(self, t0: float) -> None:
        for vop in self.ops.values():  # the first period starts now, at this parallelism
            self._last[vop] = vop.sample(t0)
            self.metrics_log.parallelism_changed(vop.name, vop.parallelism, t0)

    def _release_holds(self) -> None:
        for vop in self.ops.values():  # requests a failure left pending hold no GC
            vop.release_gc_holds()


def by_timestamp(out: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """An instance's outputs (timestamp-sorted) as one batch per timestamp. A batch is one
    ESG entry at its last timestamp, and ESG_out merges its producers' entries by those:
    a batch spanning several timestamps could go after another producer's later tuples,
    which the consumer would then read out of order; one timestamp a batch keeps the merge
    exactly that of the tuples."""
    runs: list[tuple[int, Any]] = []
    for t, group in groupby(out, key=_TS):
        ps = [p for _, p in group]
        runs.append((t, Batch([t] * len(ps), payloads=ps)))
    return runs


_TS = itemgetter(0)


def _path(instances: list[VSNInstance]) -> str:
    """The most specific path any instance took (``runs`` once a run went through the
    kernels; ``sliced`` for a sliced aggregate's instances)."""
    paths = {vi.inst.path for vi in instances}
    return next((p for p in ("columnar", "runs", "sliced") if p in paths), "tuple")


def run(flow: Flow, parallelism: int | None = None, max_parallelism: int | None = None,
        key_groups: int | None = None, capacity: int | None = None,
        reconfigure: list[tuple[int, int]] | str | None = None, controller: Any = None,
        controller_options: dict[str, Any] | None = None,
        metrics_interval: float | None = None,
        on_start: Callable[[VSNExecutor], None] | None = None,
        defer_gc: bool | None = None, max_spread: int | None = None,
        control_hold: float | None = None, hold_switch: bool | None = None,
        columnar: str | None = None, checkpoint: str | None = None,
        checkpoint_every: Any = None, gil_core: bool | None = None) -> RunResult:
    """Runs ``flow`` on the VSN engine (the options are ``stretchflow.engines``' vsn spec,
    checked there; an option left at None takes its default).

    Args:
        parallelism: connected instances of each O+ at the start.
        max_parallelism: instances of each O+ (connected or in the pool); default: the
            largest of ``parallelism`` and the ``reconfigure`` steps.
        key_groups: key groups G of each O+'s σ (default: 1 with one instance at most, else
            16 × max_parallelism).
        capacity: tuples each ESG holds before its sources block.
        reconfigure: ``[(COUNT, P), ...]`` (or ``"COUNT:P,..."``): after the COUNT-th input
            tuple of all sources, request parallelism P.
        controller: a name (``threshold``, ``level``) or a
            :class:`~stretchflow.elastic.controller.Controller`; its decisions reconfigure
            with a balanced f_μ.
        controller_options: keyword options of a controller given by name.
        metrics_interval: seconds between two measurements (``extra["metrics"]``) and
            controller calls.
        on_start: called with the :class:`VSNExecutor` once its threads run (to call its
            ``reconfigure`` from Python).
        defer_gc: hold cyclic garbage collection during a reconfiguration (gc_hold).
        max_spread: how many tuples of its ESG_in an instance may read ahead of the slowest
            instance of its operator (default :data:`MAX_SPREAD`, :data:`MAX_SPREAD_RUNS` for
            an O+ whose kernels take runs; 0: no bound). It bounds how long a
            reconfiguration waits for the slowest instance (docs/vsn.md).
        control_hold: seconds ESG_in's sources wait at most from a control tuple until its
            switch (default 0.05; 0: no hold; docs/vsn.md).
        hold_switch: lower the GIL switch interval from a request until its switch
            (default False; :mod:`~stretchflow.runtime.switch_hold`).
        columnar: ``"off"`` runs every O+ on tuples even where it has columnar forms
            (``"on"``: an A+ with columnar forms reading a batch-capable file source takes
            whole batches through Arrow kernels, :mod:`~stretchflow.operators.columnar_shared`).
        checkpoint: a directory: checkpoints are written there, and a run given one that
            holds a checkpoint resumes from it (docs/checkpoints.md).
        checkpoint_every: how often: N input tuples, ``"Ns"`` or ``"Nms"`` (default 10 s).
        gil_core: run the threads that call Python functions tuple by tuple on one CPU
            while they are measured taking turns at the GIL (default True;
            :mod:`~stretchflow.runtime.gil_core`).

    ``RunResult.extra`` has the runtime's keys (``parallelism``, ``parallelism_series``,
    ``reconfigurations`` with vsn's ``trigger_ts`` and ``key_groups_per_instance``,
    ``latency_ms``, ``latency_series``, ``metrics``, ``controller``) and vsn's own
    ``instances``: ``{operator: [{"j", "tuples", "busy_s"}, ...]}``.
    """
    return run_engine(flow, "vsn", given(locals()))


def execute(flow: Flow, settings: Settings) -> RunResult:
    """Runs ``flow`` with checked ``settings`` (:func:`stretchflow.engines.run`'s call)."""
    return VSNExecutor(flow, settings).run()


def _spread(max_spread: int | None, runs: bool) -> int | None:
    """The ESG_in bound of ``max_spread`` (None: the default; 0: none) for an O+ whose
    kernels take runs (``runs``) or not."""
    if max_spread is None:
        return MAX_SPREAD_RUNS if runs else MAX_SPREAD
    return max_spread or None


__all__ = ["BATCH", "MAX_SPREAD", "MAX_SPREAD_RUNS", "Control", "Reconfiguration",
           "VSNExecutor", "VSNInstance", "VSNOperator", "default_assignment", "run"]
