"""A VSN operator and its elasticity: control tuples, epochs and the barrier (STRETCH Alg. 4–6).

An O+ run by VSN has ``n`` instances sharing its state σ
(:class:`~stretchflow.operators.oplus.SharedState`); the ``m`` connected ones read every tuple
of its inlet ESG_in, the others wait in a pool. f_μ assigns σ's key groups to the connected
instances. This module holds the operator's side of elasticity; the instances' loop
(processVSN) and the executor are in :mod:`stretchflow.executors.vsn`.

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
ESG_out source is about to be flushed). Joining instances start from the acting instance's
watermark W̄ (Lemma 3: every later tuple has ts >= W̄, so W̄ is a safe lower bound) and from
its position in ESG_in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import FlowDefinitionError
from ..flow import Node
from ..operators.oplus import SharedState
from ..runtime.control import Barrier, RunControl, Stopped
from ..runtime.gc_hold import GC_HOLD, CountedHold
from ..runtime.metrics import MetricsLog
from ..runtime.switch_hold import SWITCH_HOLD
from .plan import Inlet

if TYPE_CHECKING:
    from .vsn import VSNInstance


class Control(Barrier):
    """The payload of a control tuple: the next epoch e*, its instances O* and f_μ*."""

    __slots__ = ("assign", "instances")

    def __init__(self, epoch: int, instances: frozenset[int], assign: tuple[int, ...]):
        super().__init__(epoch)
        self.instances = instances
        self.assign = assign

    def __repr__(self) -> str:
        return f"Control(epoch={self.epoch}, instances={sorted(self.instances)})"


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
    # where the time went (phases_ms): the control tuple in ESG_in, the first and the last
    # instance at the barrier
    sent_at: float | None = None
    first_at: float | None = None
    last_at: float | None = None
    # how far the slowest instance was behind the furthest when the control tuple went in,
    # in ESG_in entries (tuples; batches on the columnar path): at most max_spread
    spread_at_send: int | None = None
    trigger_ts: int | None = None
    assignment: tuple[int, ...] = ()
    note: str = ""
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    #: the process-wide holds taken for this request (gc_hold, switch_hold), released once
    holds: tuple[CountedHold, ...] = field(default=(), repr=False)
    control: Control | None = field(default=None, repr=False)

    def finish(self) -> None:
        """Marks the request done, lets garbage collection run again (see gc_hold) and puts
        back the GIL switch interval (switch_hold); called under the operator's lock, once
        or more."""
        holds, self.holds = self.holds, ()
        for hold in holds:
            hold.release()
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
                "note": self.note, "key_groups_per_instance": _group_counts(self.assignment),
                "phases_ms": self.phases_ms(), "spread_at_send": self.spread_at_send}

    def phases_ms(self) -> dict[str, float] | None:
        """An applied request's duration in parts: ``send`` (the call until its control tuple
        is in ESG_in), ``first`` and ``reach`` (from then until the first and the last
        instance is at the barrier: the instances' work up to the control tuple, their waits
        for the GIL and for the CPU), ``switch`` (from the last arrival to the end of the
        barrier action). None if it was not applied."""
        t = (self.requested_at, self.sent_at, self.first_at, self.last_at, self.applied_at)
        if not self.applied or any(x is None for x in t):
            return None
        req, sent, first, last, done = t
        # an instance may reach the barrier before the sending thread reads the clock
        return {"send": (sent - req) * 1000, "first": max(0.0, first - sent) * 1000,
                "reach": max(0.0, last - sent) * 1000, "switch": (done - last) * 1000}


def _group_counts(assign: tuple[int, ...]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for j in assign:
        counts[j] = counts.get(j, 0) + 1
    return dict(sorted(counts.items()))


def default_assignment(n_groups: int, p: int) -> tuple[int, ...]:
    """f_μ over key groups: group g to instance g mod P (hash(k) mod Π of Op. 9, by group)."""
    return tuple(g % p for g in range(n_groups))


class VSNOperator:
    """An O+ run by ``n`` instances sharing σ; ``m`` connected at the start.

    The executor gives it its instances (:attr:`instances`) and its inlet (:attr:`inlet`);
    ``control`` is the run's, ``log`` the run's metrics log (an applied reconfiguration is a
    change of parallelism there), ``defer_gc`` holds cyclic garbage collection from a
    request until it is settled (:mod:`~stretchflow.runtime.gc_hold`), ``hold_switch`` lowers
    the GIL switch interval as long (:mod:`~stretchflow.runtime.switch_hold`).
    """

    def __init__(self, node: Node, m: int, n: int, n_groups: int, *, control: RunControl,
                 log: MetricsLog, defer_gc: bool = True, hold_switch: bool = False):
        if not 1 <= m <= n:
            raise FlowDefinitionError(f"{node.name}: need 1 <= parallelism ({m}) <= "
                                      f"max_parallelism ({n})")
        self.node = node
        self.op = node.spec
        self.name = node.name
        self.n = n
        self.G = n_groups
        self.control = control
        self.metrics_log = log
        self.defer_gc = defer_gc
        self.hold_switch = hold_switch
        self.sigma = SharedState(n_groups)
        self.assign: tuple[int, ...] = default_assignment(n_groups, m)
        self.O: frozenset[int] = frozenset(range(m))
        self.epoch = 0
        self.log: list[Reconfiguration] = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.done = False
        self.acting = threading.local()  # .instance: the instance this thread runs
        self._requested_epoch = 0
        self._requests: dict[int, Reconfiguration] = {}
        self._barriers: dict[int, threading.Barrier] = {}
        self._finished = 0
        self.inlet: Inlet = None  # type: ignore[assignment]  # set by the executor
        #: a columnar O+'s shared σ (:class:`~stretchflow.operators.columnar_shared.
        #: ColumnarShared`), set by the executor when its input comes as batches
        self.columnar_state: Any = None
        #: its columnar instances may emit several windows an entry (while one of them owns
        #: every key group: ColumnarVSNInstance.merge_rows), set by the executor where every
        #: reader of its output is a columnar O+
        self.merge_outputs = False
        #: and, with several instances, one entry per updateW each
        #: (ColumnarVSNInstance.interleave): where the readers' outputs are order free
        self.interleave = False
        #: True when its input comes as batches of rows (issue #32): each batch through the
        #: instances' ``process_shared``/``process_rows``, its f_MK computed once for all of
        #: them under :attr:`rows_lock` (:mod:`~stretchflow.operators.row_keys`)
        self.rows = False
        self.rows_lock = threading.Lock()
        self.instances: list[VSNInstance] = []  # set by the executor
        #: the run's :class:`~stretchflow.executors.vsn_checkpoint.VSNCheckpoints` (checkpoint
        #: barriers in ESG_in), or None
        self.checkpoints: Any = None

    @property
    def parallelism(self) -> int:
        return len(self.O)

    def sample(self, now: float) -> tuple[float, list[float], int, float, int]:
        """``(now, busy seconds per instance, tuples processed, seconds ESG_in's sources
        waited, backlog)`` for the executor's metrics."""
        # congestion (elastic-scaling §5): time sources spent blocked on a full ESG_in; backlog
        # (issue #18): ESG_in's entries not yet read by its slowest instance, pending or ready
        # (one stats() call per period, under the ESG's lock once: nothing per tuple)
        st = self.inlet.esg.stats()
        return (now, [vi.busy for vi in self.instances],
                sum(vi.processed for vi in self.instances), st["source_wait_s"], st["buffered"])

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
            # taken before the clock starts (a hold is not free either); released in
            # Reconfiguration.finish
            holds = ((GC_HOLD,) if self.defer_gc else ()) + \
                ((SWITCH_HOLD,) if self.hold_switch else ())
            for hold in holds:
                hold.acquire()
            rec = Reconfiguration(self.name, e, before, p, time.perf_counter(),
                                  assignment=assign, holds=holds,
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
        rec.spread_at_send = self.inlet.esg.stats()["spread"]
        sent = self.inlet.send_control(rec.control)
        rec.sent_at = time.perf_counter()
        if not sent:
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
            rec = self._requests.get(epoch)
            if rec is not None:  # an instance at the barrier (Reconfiguration.phases_ms)
                rec.last_at = time.perf_counter()
                if rec.first_at is None:
                    rec.first_at = rec.last_at
            b = self._barriers.get(epoch)
            if b is None:
                b = self._barriers[epoch] = self.new_barrier(
                    len(self.O), lambda: self._apply(epoch))
            return b

    def new_barrier(self, parties: int, action: Callable[[], None]) -> threading.Barrier:
        """A barrier for ``parties`` instances (call holding :attr:`lock`); raises
        :class:`Stopped` if the run has failed. :meth:`wake_all` aborts the barriers it finds
        under the lock, after the run's stop is set: checked here under the same lock, a
        barrier made after that abort is never waited at."""
        if self.control.stop.is_set():
            raise Stopped
        return threading.Barrier(parties, action=action)

    def _apply(self, epoch: int) -> None:
        """Run by exactly one instance while all connected instances wait (Alg. 4 L11–L13):
        applies the request whose control tuple the instances read. Requests of lower
        epochs still pending are superseded — their control tuples come later in ESG_in, or
        never, and instances ignore them (the latest control tuple wins, Theorem 4)."""
        try:
            self._apply_request(epoch)
        except BaseException as e:
            # recorded before the barrier breaks, so the other instances report this error
            # and not the broken barrier; control.fail() here would deadlock (its abort hooks
            # abort this barrier, whose lock the action holds) — the acting thread fails the
            # run once the exception reaches its guard
            self.control.record(e)
            raise

    def _apply_request(self, epoch: int) -> None:
        acting: VSNInstance = self.acting.instance
        with self.lock:
            ctrl = self._requests[epoch].control
        assert ctrl is not None
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
        self.inlet.esg.release_hold()  # switched: ESG_in's sources go on (the control hold)
        self.metrics_log.parallelism_changed(self.name, len(new), now)

    def _resolve(self, rec: Reconfiguration, applied: bool, note: str) -> None:
        self._requests.pop(rec.epoch, None)
        rec.applied = applied
        rec.note = note
        rec.finish()

    def release_gc_holds(self) -> None:
        """Settles the GC and switch-interval holds of requests a failed run left pending."""
        with self.lock:
            for rec in self.log:
                if rec.holds:
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
            else:
                return
        self.inlet.esg.release_hold()  # no switch will release it now

    def wake_all(self) -> None:
        """The run failed: wakes pool instances and breaks the barriers (an abort hook)."""
        with self.lock:
            self.done = True
            barriers = list(self._barriers.values())
            self.cond.notify_all()
        # outside self.lock: a barrier's action (_apply, a checkpoint's snapshot) runs holding
        # the barrier's lock and takes self.lock; aborting under self.lock deadlocked with it
        for b in barriers:
            b.abort()


__all__ = ["Control", "Reconfiguration", "VSNOperator", "default_assignment"]
