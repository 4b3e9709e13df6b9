"""The Slack ScaleGate (SSG) of "Maximizing determinism in stream processing under latency
constraints" (determinism-latency.txt §4.1, §5.1, Alg. 1–3), with flow control and run-time
membership as the Elastic ScaleGate (:mod:`stretchflow.buffers.esg`).

Writers insert timestamp-sorted tuples; every reader gets every tuple exactly once. A tuple
is returned to a reader when it is

* *ready* (Def. 2.1): ``ts <= merge_ts``, the minimum over writers of their latest timestamp
  (inclusive, as :mod:`stretchflow.buffers.esg`: a writer that added nothing counts as
  ``-inf``, a closed writer no longer counts, and with no writer left ``merge_ts = +inf``); or
* *slack-ready* (Def. 3.1): ``max_ts - ts > SLT`` with ``max_ts`` the maximum over writers of
  their latest timestamp. Such a tuple is returned before it is ready, flagged ``slack=True``.

Structure (Alg. 1)
    ``_log`` is the ScaleGate: all tuples in ``(ts, seq)`` order, ``seq`` a global insertion
    counter. Each reader's position in it is the key ``(ts, seq)`` of the last tuple it took
    from it, so :meth:`get_head` (the paper's non-consuming ``getHead(r)``) is a bisection and
    never consumes. Each reader also has a late queue (a heap, the paper's priority queue) for
    tuples inserted *behind* its position after it read slack-ready tuples.
    ``maxWriterTs[w]`` and ``lastReadTs[r][w]`` are Alg. 1's arrays (``max_writer_ts`` by
    writer name, and per reader).

The insert race (§5.1) and how it is closed
    Alg. 2 decides per reader "has this reader overtaken the tuple?" and then adds the tuple to
    the ScaleGate; a reader may overtake it between the two steps and never receive it (the
    paper accepts this rare loss and offers "queue always and de-duplicate on read" as the
    strict variant). Here the decision and the insertion happen under one lock, which is the
    equivalent strict variant: each reader gets the tuple either in its late queue (it has
    already read past ``ts``) or at a position after its own in ``_log`` (it has not), never
    both and never neither. Python threads cannot run the lock-free skip list of the paper
    any faster than a short critical section (the GIL serializes bytecode), and a single lock
    linearizes insert/get/membership, which is what the exactly-once proof needs.

    Overtaken means ``max(lastReadTs[r]) > ts`` (Alg. 2 L4–L5). A reader's position key is
    ``(ts_r, seq_r)`` and the new tuple's is ``(ts, seq)`` with ``seq > seq_r``, so the tuple
    lies after the reader's position exactly when it is not overtaken: the two tests agree.

Flags (Alg. 3)
    A late-queue tuple is slack-ready unless it has become ready (L5–L10; Property 3: it is at
    least slack-ready). A head tuple is ready if ``ts <= merge_ts``, else slack-ready if
    ``max_ts - ts > SLT``, else the reader waits (L13–L29).

SLT, membership and statistics
    SLT is changed at run time by ``set_slt``; writers and readers join and leave while
    tuples flow. Those calls, and ``stats``, live in :mod:`stretchflow.buffers.ssg_membership`
    (a mixin of :class:`SlackScaleGate`; its docstring gives their rules). This module holds
    the core: Alg. 1–3 with the per-reader late queues, and flow control.


Flow control (not in the paper, which assumes unbounded memory; the ESG's rule adapted)
    ``held`` = log entries some current reader has not passed yet + the entries of every late
    queue (a tuple in the log and in two late queues counts three times: each holds a
    reference). Inserting a tuple costs the entries it creates: one per reader that already
    read past it (its late queue) plus one log entry if some reader has not. A writer inserts
    while the cost fits in ``capacity - held``; otherwise it waits on a condition (no
    spinning), with one exception: a writer that *holds merge_ts* (its latest ts ``<=
    merge_ts``, or it added nothing) may insert one tuple while *no reader has a deliverable
    tuple* (an empty late queue and a head that is neither ready nor slack-ready). Why: if
    readers can take tuples, they free room (late tuples are always deliverable; a reader
    that runs out of deliverable tuples wakes the waiting writers), so waiting is safe. If
    none can, the held tuples wait for merge_ts (or max_ts) to move, and only the writers at
    merge_ts can move it: blocking them would deadlock. Finite SLT helps: slack-ready tuples
    are deliverable, so readers overtake a slow writer and free room while it lags — as long
    as the tuples within SLT of max_ts fit in the capacity; beyond that the fast writer waits
    for the slow one, as with SLT = inf.

    Deadlock freedom: if every writer waits and no reader has a deliverable tuple, a writer
    holding merge_ts (one always exists while a writer is open) is exempt — a contradiction.
    Bound: at an exempt insert every tuple of that writer is ready (``ts <= its latest <=
    merge_ts``) and no reader has a deliverable one, so every reader already took them all:
    the writer holds nothing. Hence each writer holds at most one tuple admitted over
    capacity, which costs at most ``R`` entries (R readers), and ``held <= capacity + W * R``
    (W writers, counting removed writers whose tuples are still held; with one reader
    ``capacity + W`` as in the ESG). Two additions: a tuple whose cost alone exceeds the
    capacity (more readers than capacity) is admitted into an empty SSG, and the late queues
    copied by :meth:`add_readers` (in :mod:`stretchflow.buffers.ssg_membership`) count
    until they are read (``stats()["copied_late"]``). ``stats()["max_held"]`` records the
    largest ``held``. The log itself
    is compacted every ``gc_every = max(1, min(512, capacity // 8))`` reads, so ``len(_log)
    + late entries`` exceeds ``held`` by fewer than ``gc_every`` passed entries
    (``stats()["max_size"]`` records its maximum). ``insert_batch`` admits a run in parts
    when room is short. A writer that had to wait resumes only once ``capacity // 4``
    entries (or its whole remaining run) fit, so a full buffer is not refilled one tuple per
    reader step (the ESG's hysteresis); the exemption does not depend on room.
    ``capacity=None`` disables flow control.

    Limitation shared with the ESG executors: flow control is per buffer, so a query graph
    with a diamond (one thread writing into two SSGs whose outputs meet again) can deadlock
    when the skew between the two paths exceeds a capacity. The slack executor's default
    capacity (65 536) keeps that far away for the built-in queries.


End of input
    Once every writer is closed every tuple is ready; ``get`` returns :data:`END` when the
    reader has taken everything.

Example:
    >>> ssg = SlackScaleGate(writers=["bus", "scats"], readers=["r"], slt=1000)
    >>> ssg.insert((0, "s0"), "scats"); ssg.insert((500, "b0"), "bus")
    >>> ssg.insert((2000, "s1"), "scats")
    >>> ssg.get("r", timeout=0)                # ready: 0 <= merge_ts = min(500, 2000)
    ((0, 's0'), False)
    >>> ssg.get("r", timeout=0)
    ((500, 'b0'), False)
    >>> ssg.insert((3500, "s2"), "scats")      # max_ts - 2000 = 1500 > SLT
    >>> ssg.get("r", timeout=0)
    ((2000, 's1'), True)
    >>> ssg.insert((1000, "b1"), "bus")        # behind the reader: into its late queue
    >>> ssg.get("r", timeout=0)                # late, but ready (1000 <= merge_ts), Alg. 3 L7
    ((1000, 'b1'), False)
    >>> ssg.stats()["late"]
    {'r': 1}
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from bisect import bisect_left, insort
from collections.abc import Hashable, Sequence
from itertools import islice
from operator import itemgetter, le
from typing import Any

from .esg import END, Aborted
from .ssg_membership import SlackMembership
from .ssg_state import _Reader, _Writer

__all__ = ["END", "Aborted", "SlackScaleGate"]

DEFAULT_CAPACITY = 65536  # tuples held, as the ESG's default
_GC_MAX = 512  # at most this many log reads between garbage collections of the log
_ts = itemgetter(0)
_NEG_INF = -math.inf


class SlackScaleGate(SlackMembership):
    """An SSG (Alg. 1–3) with a capacity bound and run-time membership.

    Args:
        writers: initial writer names (distinct, at least one).
        readers: initial reader names (distinct, at least one); they start at the beginning.
        slt: the slack threshold in event-time ms (``math.inf``: ready tuples only).
        capacity: the flow-control bound on held tuples (>= 1), or None for no bound.

    See the module docstring for the readiness and flow-control rules, and
    :mod:`stretchflow.buffers.ssg_membership` (the mixin) for SLT changes and membership.
    """

    def __init__(self, writers: Sequence[Hashable], readers: Sequence[Hashable],
                 slt: float = math.inf, capacity: int | None = DEFAULT_CAPACITY):
        if not writers:
            raise ValueError("an SSG needs at least one writer")
        if not readers:
            raise ValueError("an SSG needs at least one reader")
        if len(set(writers)) != len(writers) or len(set(readers)) != len(readers):
            raise ValueError("writer and reader names must be distinct")
        if capacity is not None and (not isinstance(capacity, int) or isinstance(capacity, bool)
                                     or capacity < 1):
            raise ValueError(f"SSG capacity must be a positive integer or None, got {capacity!r}")
        self._check_slt(slt)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # readers wait here
        self._room = threading.Condition(self._lock)  # writers wait here for room
        self._capacity = capacity
        self._resume_room = max(1, capacity // 4) if capacity is not None else 1
        self._gc_every = max(1, min(_GC_MAX, capacity // 8)) if capacity is not None \
            else _GC_MAX
        self._slt = slt
        self._all_writers: list[_Writer] = []  # by rank, removed ones included
        self._writers: dict[Hashable, _Writer] = {}  # current (open) writers
        self._removed_writers: set[Hashable] = set()
        for w in writers:
            self._new_writer(w, _NEG_INF)
        self._readers: dict[Hashable, _Reader] = {
            r: _Reader(r, (_NEG_INF, -1), [], [_NEG_INF] * len(self._all_writers))
            for r in readers}
        self._retired: set[Hashable] = set()  # removed readers: get() tells them END
        self._gone_counts = [0, 0, 0]  # ready, slack, late tuples of removed readers
        self._merge = _NEG_INF  # min over open writers of their latest ts (+inf when none)
        self._max = _NEG_INF  # max over writers of their latest ts
        self._log: list[tuple[Any, ...]] = []  # ScaleGate: (ts, seq, rank, item), sorted
        self._seq = 0
        self._late_total = 0  # entries in all late queues
        self._reads = 0
        self._aborted: BaseException | None = None
        self._room_waiting = 0
        self._waiting_writers: dict[_Writer, int] = {}  # writers blocked for room
        self.max_skew = 0.0  # the largest max_ts - merge_ts seen (the max-timestamp baseline)
        # flow-control metrics
        self._max_held = 0
        self._max_size = 0
        self._copied_late = 0
        self._writer_waits = 0
        self._writer_wait_s = 0.0
        self._exempt_inserts = 0

    # -- insertSSGTuple (Alg. 2) ----------------------------------------------------------------
    def insert(self, t: tuple, writer: Hashable) -> None:
        """Adds tuple ``t`` (``t[0]`` its integer timestamp) from ``writer``; blocks while the
        SSG is full (module docstring, flow control)."""
        self.insert_batch((t,), writer)

    def insert_batch(self, ts_tuples: Sequence[tuple], writer: Hashable) -> None:
        """Adds a writer's timestamp-sorted tuples: in one critical section if they fit,
        otherwise in parts, waiting for room in between. The run is validated first: for an
        unsorted run nothing is added.

        Raises:
            ValueError: unknown or closed writer, or a timestamp that goes back (naming the
                writer, both timestamps and the record); the writer was removed while it
                waited for room.
            Aborted: the SSG was aborted.
        """
        batch = ts_tuples if isinstance(ts_tuples, list | tuple) else list(ts_tuples)
        n = len(batch)
        if not n:
            return
        stamps = list(map(_ts, batch))
        if n > 1 and not all(map(le, stamps, islice(stamps, 1, None))):
            i = next(i for i in range(1, n) if stamps[i] < stamps[i - 1])
            raise self._ts_back(writer, stamps[i - 1], batch[i])
        with self._lock:
            w = self._writer_state(writer, batch[0])
            cap = self._capacity
            i = 0
            while i < n:
                if self._aborted is not None:
                    raise Aborted("the SSG was aborted") from self._aborted
                if stamps[i] < w.last:  # also after a wait: another thread may have written
                    raise self._ts_back(writer, w.last, batch[i])
                if cap is None:
                    i = self._insert_run(w, batch, i, math.inf, False)
                    continue
                # fast path: the physical size bounds held from above, so room >= this
                j = self._insert_run(w, batch, i, cap - len(self._log) - self._late_total, False)
                if j == i:  # not one tuple fit by the estimate: the exact room, else wait
                    j = self._insert_run(w, batch, i, cap - self._held(), False)
                    if j == i:
                        room, force = self._wait_room(w, batch[i], n - i)
                        if stamps[i] < w.last:
                            raise self._ts_back(writer, w.last, batch[i])
                        j = self._insert_run(w, batch, i, room, force)
                i = j

    def _cost(self, ts: Any) -> int:
        """Entries a tuple at ``ts`` would add now: one per reader that overtook it (its late
        queue), plus one log entry if some reader has not."""
        p = 0
        for r in self._readers.values():
            if r.pos[0] > ts:
                p += 1
        return p + (p < len(self._readers))

    def _insert_run(self, w: _Writer, batch: Sequence[tuple], i: int, room: float,
                    force: bool) -> int:
        """Alg. 2 for ``batch[i:]`` of ``w`` (lock held) while each tuple's entries fit in
        ``room`` (``force``: the first one in any case); returns the index it stopped at."""
        log, readers = self._log, list(self._readers.values())
        nr = len(readers)
        rank = w.rank
        seq = self._seq
        late_n = 0
        n = len(batch)
        k = i
        while k < n:
            t = batch[k]
            ts = t[0]
            # Alg. 2 L3–L8: overtaken iff max(lastReadTs[r]) > ts, and that maximum is the ts
            # of the reader's log position (late tuples are older)
            p = 0
            for r in readers:
                if r.pos[0] > ts:
                    p += 1
            cost = p + (p < nr)
            if cost > room and not (force and k == i):
                break
            room -= cost
            k += 1
            seq += 1
            entry = (ts, seq, rank, t)
            if p:
                for r in readers:
                    if r.pos[0] > ts:
                        heapq.heappush(r.late, entry)
                late_n += p
            if p < nr:  # L10–L11: only if some reader has not overtaken the writer
                if not log or log[-1] < entry:
                    log.append(entry)
                else:
                    insort(log, entry)
        if k == i:
            return i
        self._seq = seq
        self._late_total += late_n
        w.last = batch[k - 1][0]  # L21
        if w.last > self._max:
            self._max = w.last
        old = self._merge
        self._recompute()
        size = len(log) + self._late_total
        if size > self._max_size:
            self._max_size = size
            if size > self._max_held:  # held <= size: only then can the maximum grow
                held = self._held()
                if held > self._max_held:
                    self._max_held = held
        self._cond.notify_all()
        if self._merge != old and self._waiting_writers:
            self._wake_merge_holders()
        return k

    def _wake_merge_holders(self) -> None:
        """merge_ts moved: a waiting writer that now holds it may be exempt."""
        m = self._merge
        if any(w.last <= m for w in self._waiting_writers):
            self._room.notify_all()

    def _held(self) -> int:
        """Log entries a current reader has not passed + late entries (module docstring)."""
        log = self._log
        if not self._readers or not log:
            return len(log) + self._late_total
        low = min(r.pos for r in self._readers.values())
        return len(log) - bisect_left(log, (low[0], low[1] + 1)) + self._late_total

    def _deliverable(self, r: _Reader) -> bool:
        """True if Alg. 3 would return a tuple to ``r`` now."""
        if r.late:
            return True
        e = self._head(r)
        return e is not None and (e[0] <= self._merge or self._max - e[0] > self._slt)

    def _wait_room(self, w: _Writer, t: tuple, want: int) -> tuple[float, bool]:
        """Waits (lock held) until ``w`` may insert ``t`` (and maybe more of its ``want``
        tuples); returns the room and whether ``t`` is admitted whatever its cost."""
        cap = self._capacity
        assert cap is not None
        need = 1
        t0 = 0.0
        try:
            while True:
                if self._aborted is not None:
                    raise Aborted("the SSG was aborted") from self._aborted
                if self._writers.get(w.name) is not w:
                    raise ValueError(f"SSG: writer {w.name!r} was removed while waiting for "
                                     "room to insert")
                held = self._held()
                room = cap - held
                if room >= max(need, self._cost(t[0])):
                    return room, False
                if not held:  # a tuple costing more than the capacity (readers > capacity)
                    return room, True
                # the exemption of the flow-control rule (module docstring)
                if w.last <= self._merge and not any(
                        map(self._deliverable, self._readers.values())):
                    self._exempt_inserts += 1
                    return room, True
                if not t0:
                    t0 = time.perf_counter()
                    self._writer_waits += 1
                    need = min(want, self._resume_room)
                self._room_waiting += 1
                self._waiting_writers[w] = self._waiting_writers.get(w, 0) + 1
                try:
                    self._room.wait()
                finally:
                    self._room_waiting -= 1
                    c = self._waiting_writers[w] - 1
                    if c:
                        self._waiting_writers[w] = c
                    else:
                        del self._waiting_writers[w]
        finally:
            if t0:
                self._writer_wait_s += time.perf_counter() - t0

    def _writer_state(self, writer: Hashable, record: Any) -> _Writer:
        w = self._writers.get(writer)
        if w is None:
            if writer in self._removed_writers:
                raise ValueError(f"SSG: writer {writer!r} is closed; its tuple {record!r} "
                                 "cannot be added")
            raise ValueError(f"SSG: {writer!r} is not a writer; writers: "
                             f"{list(self._writers)}")
        return w

    @staticmethod
    def _ts_back(writer: Hashable, prev: Any, record: Any) -> ValueError:
        return ValueError(f"SSG: writer {writer!r} went back in time from {prev} to "
                          f"{record[0]} (record {record!r}); writers must be sorted")

    def _new_writer(self, name: Hashable, last: float) -> None:
        w = _Writer(name, len(self._all_writers), last)
        self._all_writers.append(w)
        self._writers[name] = w
        self._removed_writers.discard(name)

    def _recompute(self) -> None:
        if not self._writers:
            self._merge = math.inf
            return
        self._merge = min(w.last for w in self._writers.values())
        skew = self._max - self._merge  # -inf - (-inf) is nan: not a skew yet
        if self._merge > _NEG_INF and skew > self.max_skew:
            self.max_skew = skew

    def abort(self, cause: BaseException | None = None) -> None:
        """Stops the SSG: every blocked and later ``get``/``insert`` raises
        :class:`~stretchflow.buffers.esg.Aborted` (a failed thread cannot leave others
        blocked on a full or empty buffer)."""
        with self._lock:
            self._aborted = cause if cause is not None else Aborted("aborted")
            self._cond.notify_all()
            self._room.notify_all()

    # -- getSSGTuple (Alg. 3) -------------------------------------------------------------------
    def get_head(self, reader: Hashable) -> tuple | None:
        """getHead(r) (§5.1): the next ScaleGate tuple after the reader's position, ready or
        not, without consuming it; None if there is none (or ``reader`` was removed)."""
        with self._lock:
            r = self._readers.get(reader)
            if r is None:
                if reader in self._retired:
                    return None
                raise self._unknown_reader(reader)
            e = self._head(r)
            return None if e is None else e[3]

    def _head(self, r: _Reader) -> tuple | None:
        ts, seq = r.pos
        log = self._log
        i = bisect_left(log, (ts, seq + 1))  # first entry with key > (ts, seq)
        return log[i] if i < len(log) else None

    def _take(self, r: _Reader) -> tuple[tuple, bool] | None:
        """One step of Alg. 3 for reader ``r`` under the lock; None if nothing yet."""
        late = r.late
        if late:  # L2–L11
            ts, _, w, t = heapq.heappop(late)
            self._late_total -= 1
            r.last_read[w] = ts
            slack = not ts <= self._merge
            if slack:
                r.n_slack += 1
            else:
                r.n_ready += 1
            r.n_late += 1
            return t, slack
        e = self._head(r)  # L13
        if e is None:
            return None
        ts, seq, w, t = e
        if ts <= self._merge:  # L18–L22: ready
            slack = False
            r.n_ready += 1
        elif self._max - ts > self._slt:  # L25–L28: slack-ready
            slack = True
            r.n_slack += 1
        else:
            return None  # L29
        r.pos = (ts, seq)
        r.last_read[w] = ts
        self._reads += 1
        if self._reads >= self._gc_every:
            self._gc()
        return t, slack

    def _gc(self) -> None:
        """Drops log entries every reader has passed (all of them with no reader)."""
        self._reads = 0
        if not self._readers:
            self._log.clear()
            return
        low = min(r.pos for r in self._readers.values())
        i = bisect_left(self._log, (low[0], low[1] + 1))
        if i:
            del self._log[:i]

    def _done(self, r: _Reader) -> bool:
        return not self._writers and not r.late and self._head(r) is None

    def get(self, reader: Hashable, timeout: float | None = None) -> Any:
        """getSSGTuple(r): ``(tuple, slack)`` with ``slack`` True for a slack-ready tuple;
        None if nothing is (slack-)ready within ``timeout`` seconds (None: wait as long as
        needed); :data:`END` once every writer is closed and the reader took everything, or
        once the reader was removed.

        Raises:
            ValueError: ``reader`` never was a reader.
            Aborted: the SSG was aborted.
        """
        out = self._get(reader, 1, timeout)
        return out if out is None or out is END else out[0]

    def get_batch(self, reader: Hashable, max_items: int,
                  timeout: float | None = None) -> Any:
        """Up to ``max_items`` ``(tuple, slack)`` pairs in one critical section; waits (as
        :meth:`get`) for the first. Returns a list (empty on timeout) or :data:`END`."""
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items!r}")
        out = self._get(reader, max_items, timeout)
        return [] if out is None else out

    def _get(self, reader: Hashable, max_items: int, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            r = self._readers.get(reader)
            if r is None:
                if reader in self._retired:
                    return END
                raise self._unknown_reader(reader)
            while True:
                if self._aborted is not None:
                    raise Aborted("the SSG was aborted") from self._aborted
                out = []
                while len(out) < max_items:
                    got = self._take(r)
                    if got is None:
                        break
                    out.append(got)
                if self._room_waiting:
                    self._after_reads(exhausted=len(out) < max_items)
                if out:
                    return out
                if self._done(r):
                    return END
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._cond.wait(left)
                if self._readers.get(reader) is not r:
                    return END

    def _after_reads(self, exhausted: bool) -> None:
        """Wakes waiting writers when room is back (hysteresis) or when this reader has no
        deliverable tuple left (perhaps none has, and a writer at merge_ts is then exempt)."""
        cap = self._capacity
        if exhausted or (cap is not None and cap - self._held() >= self._resume_room):
            self._room.notify_all()

    @staticmethod
    def _unknown_reader(reader: Hashable) -> ValueError:
        return ValueError(f"SSG: {reader!r} is not a reader (never added)")
