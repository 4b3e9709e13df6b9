"""The Slack ScaleGate (SSG) of "Maximizing determinism in stream processing under latency
constraints" (determinism-latency.txt §4.1, §5.1, Alg. 1–3).

Writers insert timestamp-sorted tuples; every reader gets every tuple exactly once. A tuple
is returned to a reader when it is

* *ready* (Def. 2.1): ``ts <= merge_ts``, the minimum over writers of their latest timestamp
  (inclusive, as :mod:`stretchflow.buffers.esg`: a writer that added nothing counts as
  ``-inf``, a closed writer as ``+inf``); or
* *slack-ready* (Def. 3.1): ``max_ts - ts > SLT`` with ``max_ts`` the maximum over writers of
  their latest timestamp. Such a tuple is returned before it is ready, flagged ``slack=True``.

Structure (Alg. 1)
    ``_log`` is the ScaleGate: all tuples in ``(ts, seq)`` order, ``seq`` a global insertion
    counter. Each reader's position in it is the key ``(ts, seq)`` of the last tuple it took
    from it, so :meth:`get_head` (the paper's non-consuming ``getHead(r)``) is a bisection and
    never consumes. Each reader also has a late queue (a heap, the paper's priority queue) for
    tuples inserted *behind* its position after it read slack-ready tuples.
    ``max_writer_ts[w]`` and ``last_read_ts[r][w]`` are Alg. 1's arrays.

The insert race (§5.1) and how it is closed
    Alg. 2 decides per reader "has this reader overtaken the tuple?" and then adds the tuple to
    the ScaleGate; a reader may overtake it between the two steps and never receive it (the
    paper accepts this rare loss and offers "queue always and de-duplicate on read" as the
    strict variant). Here the decision and the insertion happen under one lock, which is the
    equivalent strict variant: each reader gets the tuple either in its late queue (it has
    already read past ``ts``) or at a position after its own in ``_log`` (it has not), never
    both and never neither. Python threads cannot run the lock-free skip list of the paper
    any faster than a short critical section (the GIL serializes bytecode), and a single lock
    linearizes insert/get, which is what the exactly-once proof needs.

    Overtaken means ``max(last_read_ts[r]) > ts`` (Alg. 2 L4–L5). A reader's position key is
    ``(ts_r, seq_r)`` and the new tuple's is ``(ts, seq)`` with ``seq > seq_r``, so the tuple
    lies after the reader's position exactly when it is not overtaken: the two tests agree.

Flags (Alg. 3)
    A late-queue tuple is slack-ready unless it has become ready (L5–L10; Property 3: it is at
    least slack-ready). A head tuple is ready if ``ts <= merge_ts``, else slack-ready if
    ``max_ts - ts > SLT``, else the reader waits (L13–L29).

SLT
    In event-time ms, changed at run time by :meth:`set_slt` (the SLT Setter of §4.2).
    ``math.inf`` (the default) reads ready tuples only: the SSG is then an ESG. Lowering SLT
    wakes waiting readers, since tuples may have just become slack-ready.

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
from typing import Any

from .esg import END

__all__ = ["END", "SlackScaleGate"]

_GC_EVERY = 512  # reads between garbage collections of the log


class SlackScaleGate:
    """An SSG with a fixed set of writers and readers (Alg. 1–3)."""

    def __init__(self, writers: Sequence[Hashable], readers: Sequence[Hashable],
                 slt: float = math.inf):
        if not writers:
            raise ValueError("an SSG needs at least one writer")
        if not readers:
            raise ValueError("an SSG needs at least one reader")
        if len(set(writers)) != len(writers) or len(set(readers)) != len(readers):
            raise ValueError("writer and reader names must be distinct")
        self._check_slt(slt)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._w = {w: k for k, w in enumerate(writers)}
        self._writers = list(writers)
        self._r = {r: k for k, r in enumerate(readers)}
        self._readers = list(readers)
        nw, nr = len(writers), len(readers)
        self._slt = slt
        # Alg. 1: maxWriterTs[w] and lastReadTs[r][w]; -inf = nothing yet
        self.max_writer_ts: list[float] = [-math.inf] * nw
        self.last_read_ts: list[list[float]] = [[-math.inf] * nw for _ in range(nr)]
        self._closed = [False] * nw
        self._open = nw
        self._merge = -math.inf  # min over open writers of max_writer_ts (+inf when none)
        self._max = -math.inf  # max over writers of max_writer_ts
        self._log: list[tuple[Any, ...]] = []  # ScaleGate: (ts, seq, writer, item), sorted
        self._seq = 0
        self._pos: list[tuple[float, int]] = [(-math.inf, -1)] * nr  # last (ts, seq) from log
        self._late: list[list[tuple[Any, ...]]] = [[] for _ in range(nr)]  # priority queues
        self._reads = 0
        # statistics per reader: ready, slack-ready, late tuples returned
        self.n_ready = [0] * nr
        self.n_slack = [0] * nr
        self.n_late = [0] * nr
        self.max_skew = 0.0  # the largest max_ts - merge_ts seen (the max-timestamp baseline)

    # -- configuration --------------------------------------------------------------------------
    @staticmethod
    def _check_slt(slt: float) -> None:
        if not (slt >= 0):  # also rejects NaN
            raise ValueError(f"SLT must be >= 0 (event-time ms) or math.inf, got {slt!r}")

    @property
    def slt(self) -> float:
        return self._slt

    def set_slt(self, slt: float) -> None:
        """setSLT (§4.1): the slack threshold from now on; readers waiting are re-checked."""
        self._check_slt(slt)
        with self._cond:
            lower = slt < self._slt
            self._slt = slt
            if lower:
                self._cond.notify_all()

    @property
    def writers(self) -> list[Hashable]:
        return list(self._writers)

    @property
    def readers(self) -> list[Hashable]:
        return list(self._readers)

    def merge_ts(self) -> float:
        """min over writers of their latest timestamp (+inf once all are closed)."""
        return self._merge

    def max_ts(self) -> float:
        """max over writers of their latest timestamp."""
        return self._max

    # -- insertSSGTuple (Alg. 2) ----------------------------------------------------------------
    def insert(self, t: tuple, writer: Hashable) -> None:
        """Adds tuple ``t`` (``t[0]`` its integer timestamp) from ``writer``."""
        self.insert_batch((t,), writer)

    def insert_batch(self, ts_tuples: Sequence[tuple], writer: Hashable) -> None:
        """Adds a writer's timestamp-sorted tuples, in one critical section."""
        if not ts_tuples:
            return
        w = self._writer_index(writer)
        with self._cond:
            if self._closed[w]:
                raise ValueError(f"SSG: writer {writer!r} is closed; its tuple "
                                 f"{ts_tuples[0]!r} cannot be added")
            prev = self.max_writer_ts[w]
            log, positions, late = self._log, self._pos, self._late
            for t in ts_tuples:
                ts = t[0]
                if ts < prev:
                    raise ValueError(f"SSG: writer {writer!r} went back in time from {prev} "
                                     f"to {ts} (record {t!r}); writers must be sorted")
                prev = ts
                self._seq += 1
                entry = (ts, self._seq, w, t)
                in_log = False
                for r, pos in enumerate(positions):
                    # Alg. 2 L3–L8: overtaken iff max(lastReadTs[r]) > ts, and that maximum
                    # is the ts of the reader's log position (late tuples are older)
                    if pos[0] > ts:
                        heapq.heappush(late[r], entry)
                    else:
                        in_log = True
                if in_log:  # L10–L11: only if some reader has not overtaken the writer
                    if not log or log[-1] < entry:
                        log.append(entry)
                    else:
                        insort(log, entry)
            self.max_writer_ts[w] = prev  # L21
            self._recompute()
            self._cond.notify_all()

    def close_writer(self, writer: Hashable) -> bool:
        """The writer's end of input: it no longer holds back readiness. False if closed."""
        w = self._writer_index(writer)
        with self._cond:
            if self._closed[w]:
                return False
            self._closed[w] = True
            self._open -= 1
            self._recompute()
            self._cond.notify_all()
            return True

    def _writer_index(self, writer: Hashable) -> int:
        try:
            return self._w[writer]
        except KeyError:
            raise ValueError(f"SSG: {writer!r} is not a writer; writers: {self._writers}") \
                from None

    def _recompute(self) -> None:
        mw, closed = self.max_writer_ts, self._closed
        self._max = max(mw)
        if self._open == 0:
            self._merge = math.inf
        else:
            self._merge = min(m for m, c in zip(mw, closed, strict=True) if not c)
            skew = self._max - self._merge  # -inf - (-inf) is nan: not a skew yet
            if self._merge > -math.inf and skew > self.max_skew:
                self.max_skew = skew

    # -- getSSGTuple (Alg. 3) -------------------------------------------------------------------
    def get_head(self, reader: Hashable) -> tuple | None:
        """getHead(r) (§5.1): the next ScaleGate tuple after the reader's position, ready or
        not, without consuming it; None if there is none."""
        r = self._reader_index(reader)
        with self._lock:
            e = self._head(r)
            return None if e is None else e[3]

    def _head(self, r: int) -> tuple | None:
        ts, seq = self._pos[r]
        log = self._log
        i = bisect_left(log, (ts, seq + 1))  # first entry with key > (ts, seq)
        return log[i] if i < len(log) else None

    def _take(self, r: int) -> tuple[tuple, bool] | None:
        """One step of Alg. 3 for reader index ``r`` under the lock; None if nothing yet."""
        late = self._late[r]
        if late:  # L2–L11
            ts, _, w, t = heapq.heappop(late)
            self.last_read_ts[r][w] = ts
            slack = not ts <= self._merge
            if slack:
                self.n_slack[r] += 1
            else:
                self.n_ready[r] += 1
            self.n_late[r] += 1
            return t, slack
        e = self._head(r)  # L13
        if e is None:
            return None
        ts, seq, w, t = e
        if ts <= self._merge:  # L18–L22: ready
            slack = False
            self.n_ready[r] += 1
        elif self._max - ts > self._slt:  # L25–L28: slack-ready
            slack = True
            self.n_slack[r] += 1
        else:
            return None  # L29
        self._pos[r] = (ts, seq)
        self.last_read_ts[r][w] = ts
        self._reads += 1
        if self._reads >= _GC_EVERY:
            self._gc()
        return t, slack

    def _gc(self) -> None:
        """Drops log entries every reader has passed."""
        self._reads = 0
        low = min(self._pos)
        i = bisect_left(self._log, (low[0], low[1] + 1))
        if i:
            del self._log[:i]

    def _reader_index(self, reader: Hashable) -> int:
        try:
            return self._r[reader]
        except KeyError:
            raise ValueError(f"SSG: {reader!r} is not a reader; readers: {self._readers}") \
                from None

    def _done(self, r: int) -> bool:
        return self._open == 0 and not self._late[r] and self._head(r) is None

    def get(self, reader: Hashable, timeout: float | None = None) -> Any:
        """getSSGTuple(r): ``(tuple, slack)`` with ``slack`` True for a slack-ready tuple;
        None if nothing is (slack-)ready within ``timeout`` seconds (None: wait as long as
        needed); :data:`END` once every writer is closed and the reader took everything."""
        r = self._reader_index(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                got = self._take(r)
                if got is not None:
                    return got
                if self._done(r):
                    return END
                if deadline is None:
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def get_batch(self, reader: Hashable, max_items: int,
                  timeout: float | None = None) -> Any:
        """Up to ``max_items`` ``(tuple, slack)`` pairs in one critical section; waits (as
        :meth:`get`) for the first. Returns a list (empty on timeout) or :data:`END`."""
        first = self.get(reader, timeout)
        if first is None:
            return []
        if first is END:
            return END
        out = [first]
        r = self._r[reader]
        with self._lock:
            while len(out) < max_items:
                got = self._take(r)
                if got is None:
                    break
                out.append(got)
        return out

    # -- statistics -----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts per reader (ready, slack-ready, late), buffered tuples, SLT and skew."""
        with self._lock:
            return {
                "slt": self._slt,
                "buffered": len(self._log),
                "late_queued": [len(q) for q in self._late],
                "ready": dict(zip(self._readers, self.n_ready, strict=True)),
                "slack_ready": dict(zip(self._readers, self.n_slack, strict=True)),
                "late": dict(zip(self._readers, self.n_late, strict=True)),
                "max_skew": self.max_skew,
            }
