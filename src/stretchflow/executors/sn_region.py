"""One SN parallel region: the splitter, the channels and the merger of one O+.

A flow with several O+ runs one region per O+ (elastic-scaling §3: a parallel region is a
partitioned-stateful operator with its splitter and merger), each on its own channels, with its
own migrations (§6.1, Alg. 4) and its own controller (§4). Regions are chained by what their
mergers deliver (:mod:`.sn_links`): the merger of one region feeds, through stateless
operators, the splitter of the next.

* **Splitter** (a thread, STRETCH Alg. 1 forwardSN): merges the O+'s inputs by timestamp
  (``heapq.merge``: a tuple is taken only once every input has shown a later or equal one,
  ties to the lower input index, as the reference executor), applies the stateless chains in
  front of the O+, calls f_MK and sends the tuple to every channel owning at least one of its
  keys. Ownership is by key group ``g = group(key) % G`` and the channel of ``g`` is its owner
  on a consistent-hashing ring of the channels (§6.2). Every flush goes to *every* channel with
  the splitter's watermark: a channel that gets no tuple still receives the pulse that expires
  its windows.
* **Merger** (a thread): merges the channels' timestamp-sorted outputs and releases an output
  once every channel has reported a watermark at or beyond its timestamp (each channel's later
  outputs are strictly later), then hands the released batch to its subscribers (sinks through
  stateless chains, downstream regions), followed by the watermark itself when a downstream
  region listens, so that region's windows expire without waiting for its next tuple.
* **Migration** (Alg. 4), asked for by ``reconfigure`` or by the controller, at a tuple
  boundary of the splitter: flush (the horizontal barrier), migration pulse, donate, vertical
  barrier, collect; then the splitter resumes with the new ring.
* **Control** (§4): every ``metrics_interval`` seconds the splitter ticks the runtime's
  metrics sampler, between two flushes: it measures the congestion index (the fraction of the
  interval it spent blocked on full channel queues: it sends without blocking first and times
  only the sends that would block), the throughput (tuples every channel has finished, from
  the sequence numbers the channels report back) and each channel's busy fraction; the
  sampler logs them and hands them to the region's controller, whose decision becomes a
  migration right there.
"""

from __future__ import annotations

import heapq
import math
import queue
import time
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from ..elastic.controller import Controller, Metrics
from ..elastic.migration import StateStore
from ..eventtime import WATERMARK
from ..operators.oplus import OPlus
from ..runtime import MetricsLog, MetricsSampler, RunControl, Stopped, raise_user_error
from ..runtime.checkpoint import CheckpointBarrier
from .sn_channel import ThreadChannel, group_assignment, migrate_threads
from .sn_links import DROPPED

__all__ = ["Region"]


class Region:
    """The SN region of one O+ (see the module docstring).

    ``inputs`` are iterator factories, one per O+ input, yielding ``(ts, i, payload, new)``
    (:mod:`.sn_links`); ``new`` is 1 on the first item of a source tuple read by this splitter
    itself. ``others`` are the counters of the sources this splitter does not read: with them
    it counts every source tuple of the run, as ``reconfigure``'s COUNT means.
    """

    def __init__(self, op: OPlus, *, parallelism: int, n_groups: int, batch: int,
                 queue_size: int, schedule: list[tuple[int, int]], store: StateStore,
                 pulse: float, run: RunControl, metrics: MetricsLog, threads: list[Any],
                 inputs: list[Callable[[], Iterator[tuple[int, int, Any, int]]]],
                 others: list[list[int]], transport: Any = None,
                 controller: Controller | None = None, max_parallelism: int = 1,
                 interval: float = 1.0, index: int = 0, n_regions: int = 1):
        self.op = op
        self.name = op.name
        self.G = n_groups
        self.batch = batch
        self.queue_size = queue_size
        self.schedule = schedule
        self.store = store
        self.pulse = pulse
        self.run = run
        self.metrics = metrics
        self.threads = threads  # every thread of the run, joined by the executor
        self.inputs = inputs
        self.others = others
        self.transport = transport  # None: thread channels
        self.controller = controller
        self.max_p = max_parallelism
        self.interval = interval
        self.p0 = self.p = parallelism
        self.assign = group_assignment(parallelism, n_groups)
        self.outq: queue.Queue = queue.Queue(maxsize=queue_size * 4)
        self.channels: dict[int, Any] = {}
        self.all_channels: list[Any] = []
        self.subscribers: list[Any] = []  # what the merger delivers to (sn_links)
        self.forward_watermarks = False  # a downstream region listens
        self.read = 0  # source tuples this splitter has taken itself
        self.routed = 0  # tuples reaching the O+ (after the stateless chains)
        self.sent = 0
        self.log: list[dict[str, Any]] = []
        self.epoch = 0
        # regions share the run's state store: region k's migration e is stored under
        # e * n_regions + k, so two regions never read each other's groups
        self.index, self.n_regions = index, n_regions
        # measurements: written by the merger (done, busy) and the splitter (the rest)
        self.busy: dict[int, float] = {}  # busy seconds per channel, from its reports
        self.region_seq = 0  # the latest splitter batch every channel has finished
        self.cum: dict[int, int] = {0: 0}  # batch seq -> tuples routed up to it
        self.blocked_total = 0.0  # seconds the splitter spent blocked on full channel queues
        self._blocked = 0.0
        # checkpoints (sn_checkpoint): the run's SNCheckpoints, this O+'s node name, and
        # the restore blob of each initial channel
        self.checkpoints: Any = None
        self.node_name = self.name
        self.restore_blobs: dict[int, bytes] = {}
        # the runtime's metrics sampler, ticked by the splitter between two flushes, where a
        # decision can become a migration (_observe)
        self.sampler = MetricsSampler(run, metrics, interval, self._measure, controller,
                                      self._decided, note_decisions=True)
        self._decision: tuple[int, str] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start_channel(self, j: int) -> None:
        if self.transport is None:
            ch = ThreadChannel(j, self.op, self.G, self.assign, self.run, self.outq,
                               self.store, self.queue_size, region=f"{self.name}-")
        else:
            ch = self.transport.channel(self, j)
        self.channels[j] = ch
        self.all_channels.append(ch)
        ch.start()
        self.threads.extend(ch.threads)  # only started threads can be joined
        blob = self.restore_blobs.pop(j, None)  # an initial channel of a resumed run
        if blob is not None:
            self.run.put(ch.q, ("restore", blob))

    def start(self) -> None:
        """Starts the splitter and the merger (the channels run already)."""
        self.metrics.parallelism_changed(self.name, self.p)
        for fn, role in ((self._splitter, "splitter"), (self._merger, "merger")):
            t = self.run.thread(fn, name=f"sn-{role}-{self.name}")
            t.start()
            self.threads.append(t)  # only started threads can be joined

    def _count(self) -> int:
        """Source tuples of the whole run read so far (what COUNT counts)."""
        return self.read + sum(c[0] for c in self.others)

    # -- splitter: Alg. 1 forwardSN ------------------------------------------------------------
    def _merged(self) -> Iterator[tuple[int, int, Any, int]]:
        streams = [make() for make in self.inputs]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=itemgetter(0))

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
        keys, stop = op.keys, run.stop
        group = None if self.transport is None else self.transport.group_of
        bufs: dict[int, list] = {j: [] for j in self.channels}
        wm = -math.inf
        last_ts: int | None = None
        dirty = False
        n_buf = 0
        seq = 0  # sequence number of the splitter's flushes (one per pulse)
        sched = list(reversed(self.schedule))
        watch = bool(self.others)  # tuples read elsewhere count too: check at every item
        count = self._count
        clock = time.monotonic
        pulse = self.pulse
        next_pulse = clock() + pulse
        next_metrics = clock() + self.interval
        send = self._send
        cum = self.cum

        def flush() -> None:
            nonlocal dirty, n_buf, seq, next_pulse
            if not dirty:
                return
            seq += 1
            next_pulse = clock() + pulse
            cum[seq] = self.routed
            for j, ch in self.channels.items():
                send(ch.q, ("batch", seq, bufs[j], wm, last_ts))
                bufs[j] = []
            dirty = False
            n_buf = 0

        def due() -> None:
            nonlocal bufs
            while sched and sched[-1][0] <= count():
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
        self._start_measuring()
        assign = self.assign
        ck_epoch = 0
        for ts, i, v, new in self._merged():
            if stop.is_set():
                raise Stopped
            if new:  # a new source tuple: every item of the ones before it is dispatched
                if sched and sched[-1][0] <= count():
                    due()
                    assign = self.assign
                self.read += 1
                if v is DROPPED:
                    continue
            elif watch and sched and sched[-1][0] <= count():
                due()
                assign = self.assign
            if v is WATERMARK:  # an explicit watermark reaches every channel
                if ts > wm:
                    wm = ts
                    dirty = True
                    flush()
                continue
            if type(v) is CheckpointBarrier:
                if v.epoch > ck_epoch:  # the first copy: every tuple <= its cut is routed
                    ck_epoch = v.epoch
                    if v.cut > wm:
                        wm = v.cut
                    dirty = True
                    flush()  # every channel advances W to the cut, then snapshots
                    run.put(self.outq, ("barrier", v, ts, sorted(self.channels)))
                    for ch in self.channels.values():
                        run.put(ch.q, ("barrier", v.epoch))
                continue
            try:
                ks = keys(v, i)
            except Exception as e:
                raise_user_error(op.name, ts, v, e)
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
                if clock() >= next_metrics:
                    control()
                    assign = self.assign
        due()
        flush()
        for s in reversed(sched):
            self.log.append(_log_entry(s[0], self.p, s[1], applied=False,
                                       note="scheduled after the end of input",
                                       operator=self.name, epoch=self.epoch))
        for ch in self.channels.values():
            run.put(ch.q, ("end", last_ts))
        run.put(self.outq, ("eos", sorted(self.channels)))
        self.blocked_total += self._blocked  # since the last measurement
        self._blocked = 0.0

    # -- control: elastic-scaling §4 metrics, decisions become migrations ----------------------
    def _start_measuring(self) -> None:
        self._m_t = time.perf_counter()
        self._m_t0 = getattr(self, "_m_t0", self._m_t)
        self._m_routed = self.routed
        self._m_done = self.cum.get(self.region_seq, 0)
        self._m_busy = dict(self.busy)
        self._blocked = 0.0

    def _observe(self) -> tuple[int, str] | None:
        """One measurement interval at one parallelism (the sampler's period: measured,
        logged, handed to the controller) → (P, reason) of a migration, or None."""
        self._decision = None
        self.sampler.tick()
        decision, self._decision = self._decision, None
        return decision

    def _measure(self) -> list[tuple[str, Metrics]]:
        """The region's Metrics since the last call (elastic-scaling §4)."""
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
                    max_parallelism=self.max_p,
                    # backlog (issue #18): tuples routed to the channels (thread or process:
                    # counted here, in the splitter) that the slowest channel has not finished
                    extras={"backlog": max(0, self.routed - done)})
        self._start_measuring()
        return [(self.name, m)]

    def _decided(self, operator: str, decision: Any) -> None:
        """The controller's decision: a migration if it changes P (consistent hashing: the
        same P is the same ring, nothing to rebalance)."""
        p = min(self.max_p, max(1, decision.parallelism))
        if p != self.p:
            self._decision = (p, f"controller {self.controller.name}: "  # type: ignore[union-attr]
                                 f"{decision.reason}")

    def _migrate(self, p: int, wm: float, last_ts: int | None, seq: int,
                 note: str = "") -> None:
        """Alg. 4 driven by the splitter: migration pulse, wait for the channels, new ring."""
        t0 = time.perf_counter()
        old_p, old = self.p, self.assign
        new = group_assignment(p, self.G)
        for j in range(old_p, p):  # provisioned channels join the merger before any output
            self.run.put(self.outq, ("join", j, wm, seq))
            self.start_channel(j)
        self.epoch += 1
        key = self.epoch * self.n_regions + self.index
        if self.transport is None:
            nbytes, moved = migrate_threads(self.run, self.channels, key, old, new, old_p, p)
        else:
            nbytes, moved = self.transport.migrate(self, key, old, new, old_p, p)
        for j in range(p, old_p):
            del self.channels[j]
        self.p, self.assign = p, new
        self.metrics.parallelism_changed(self.name, p)
        entry = _log_entry(self._count(), old_p, p, applied=True, note=note,
                           operator=self.name, epoch=self.epoch)
        entry.update(duration_ms=(time.perf_counter() - t0) * 1000, bytes_moved=nbytes,
                     groups_moved=moved,
                     groups_reassigned=sum(a != b for a, b in zip(old, new, strict=True)),
                     trigger_ts=last_ts)
        self.log.append(entry)
        if self.controller is not None:
            self._start_measuring()  # the migration is not part of any level's period

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
        deliver = self._deliver
        forward = self.forward_watermarks
        sent_wm = -math.inf
        barriers: dict[int, tuple] = {}  # epoch -> (barrier item, its channels, snapshots)
        while True:
            msg = run.get(self.outq)
            kind = msg[0]
            complete = None
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
                # a channel index comes back only after its previous channel left (the
                # migration's horizontal barrier waits for the "leave"); a late "leave" would
                # drop this channel's watermark and release outputs before its own
                if msg[1] in wms:
                    raise RuntimeError(f"sn region {self.name}: channel {msg[1]} joins the "
                                       f"merger before the previous channel {msg[1]} left")
                wms[msg[1]] = msg[2]
                done[msg[1]] = msg[3]
                busy.setdefault(msg[1], 0.0)
            elif kind == "leave":
                del wms[msg[1]]
                done.pop(msg[1], None)
                if done:
                    self.region_seq = min(done.values())
            elif kind == "barrier":
                barriers[msg[1].epoch] = ((msg[2], msg[1]), set(msg[3]), {})
            elif kind == "snap":
                item, need, got = barriers[msg[2]]
                got[msg[1]] = msg[3]
                if len(got) == len(need):
                    complete = barriers.pop(msg[2])
            else:  # "eos": the channels that will send a final batch
                eos = set(msg[1])
            lo = min(wms.values())
            ready = []
            while heap and heap[0][0] <= lo:
                ts, _, p = heapq.heappop(heap)
                ready.append((ts, p))
            # every later output of every channel is after lo: a watermark downstream
            if forward and sent_wm < lo < math.inf:
                sent_wm = lo
                ready.append((lo, WATERMARK))
            if ready:
                deliver(ready)
            if complete is not None:
                self._checkpoint(heap, *complete)
            if eos is not None and eos <= finals:
                break
        rest = [(ts, p) for ts, _, p in sorted(heap)]
        if rest:
            deliver(rest)
        for sub in self.subscribers:
            sub.end()

    def _checkpoint(self, heap: list, item: tuple, need: set[int],
                    got: dict[int, bytes]) -> None:
        """Every channel snapped at a barrier: its outputs <= the cut go out (all of them
        are in: each channel's watermark is the cut), then the region's snapshot, then the
        barrier downstream."""
        b = item[1]
        ready = []
        while heap and heap[0][0] <= b.cut:
            ts, _, p = heapq.heappop(heap)
            ready.append((ts, p))
        if ready:
            self._deliver(ready)
        self.checkpoints.region_snapshot(self.node_name, b.epoch, got)
        for sub in self.subscribers:
            sub.barrier(item)

    def _deliver(self, items: list[tuple[int, Any]]) -> None:
        for sub in self.subscribers:
            sub.deliver(items)

    # -- what the run reports --------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {"parallelism": self.p, "tuples_routed": self.routed, "tuples_sent": self.sent,
                "duplication_factor": self.sent / self.routed if self.routed else 0.0,
                "blocked_s": self.blocked_total}


def _log_entry(count: int, before: int, after: int, *, applied: bool, note: str,
               operator: str, epoch: int) -> dict[str, Any]:
    return {"operator": operator, "epoch": epoch, "count": count,
            "parallelism_before": before, "parallelism_after": after,
            "applied": applied, "note": note, "duration_ms": 0.0, "bytes_moved": 0,
            "groups_moved": 0, "groups_reassigned": 0, "trigger_ts": None}
