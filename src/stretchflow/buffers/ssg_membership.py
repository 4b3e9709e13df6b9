"""Run-time changes of the Slack ScaleGate and its statistics: the SLT Setter
(determinism-latency.txt §4.1–§4.2), writers and readers that join and leave (the Elastic
ScaleGate's Table II, STRETCH journal §6), and ``stats`` (ready, slack-ready and late tuples
per reader, flow-control figures).

:class:`SlackMembership` is a mixin of :class:`~stretchflow.buffers.ssg.SlackScaleGate`,
which holds the state and the core (Alg. 1–3: insertSSGTuple, getSSGTuple, the per-reader
late queues, and flow control; see that module's docstring). The methods here run under
the SSG's one lock and call into the core's ``_new_writer``, ``_recompute``, ``_gc`` and
``_held``; none of them is on a per-tuple path.

SLT
    In event-time ms, changed at run time by :meth:`set_slt` (the SLT Setter of §4.2).
    ``math.inf`` (the default) reads ready tuples only: the SSG is then an ESG. Lowering SLT
    wakes waiting readers, since tuples may have just become slack-ready.

Membership (as the ESG's Table II; all calls under the one lock, so linearized)
    ``add_readers(R, j)``: each new reader starts at exactly the tuple ``j`` gets next: it
    copies ``j``'s ScaleGate position, ``lastReadTs`` and late queue, so from then on it gets
    exactly the tuples ``j`` gets (the same set, each exactly once). ``remove_readers(R)``:
    their next or pending ``get`` returns :data:`END`; the log entries and late tuples only
    they held are released. ``add_writers(W, j)``: each new writer starts with ``j``'s
    latest ts as its ``maxWriterTs`` — the ESG's hidden *dummy* tuple at that ts, recorded
    without materializing it (so no reader can ever get it). Since that ts is ``>=
    merge_ts`` and ``<= max_ts``, neither moves: a tuple already returned as ready stays
    ready, and nothing becomes slack-ready. The new writer may only insert ts ``>=`` it.
    ``remove_writers(W)`` (``close_writer`` is one): the writer no longer holds merge_ts
    (the ESG's *flush*); its tuples stay and are delivered; a removed writer blocked in
    ``insert`` gets ValueError (its tuples must not vanish silently). A membership call is
    all-or-nothing: True only if it applied every change; otherwise (a name already
    present/absent, ``j`` not a member) nothing changes and it returns False, so of
    concurrent conflicting calls exactly one succeeds. Once no writer is left, none can be
    added (there is no ``j``) and readers get :data:`END` after the last tuple. With no
    reader left, inserted tuples are released at once (nobody can read them: new readers
    only start where an existing reader is).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Iterable
from typing import Any

from .esg_state import _as_members
from .ssg_state import _Reader, _Writer

__all__ = ["SlackMembership"]

_NEG_INF = -math.inf


class SlackMembership:
    """Run-time SLT, membership and statistics of the SSG, mixed into SlackScaleGate.

    Example:
        >>> from stretchflow.buffers.ssg import END, SlackScaleGate
        >>> ssg = SlackScaleGate(writers=["a"], readers=["r"], slt=100)
        >>> ssg.insert((1, "a1"), "a")
        >>> ssg.add_writers(["b"], "a"), ssg.add_readers(["q"], "r")  # b starts at a's ts 1
        (True, True)
        >>> ssg.add_writers(["b"], "a")             # all-or-nothing: b is a writer already
        False
        >>> ssg.insert_batch([(20, "a20"), (40, "a40")], "a")
        >>> ssg.get_batch("q", 9, timeout=0)        # merge_ts = min(40, 1): (1, 'a1') is ready
        [((1, 'a1'), False)]
        >>> ssg.set_slt(10); ssg.get_batch("q", 9, timeout=0)  # 40 - 20 > SLT: slack-ready
        [((20, 'a20'), True)]
        >>> ssg.remove_readers(["q"]), ssg.get("q") is END
        (True, True)
        >>> ssg.remove_writers(["a", "b"]), ssg.get_batch("r", 9)
        (True, [((1, 'a1'), False), ((20, 'a20'), False), ((40, 'a40'), False)])
    """

    # State owned by SlackScaleGate (declared here for the reader of this module).
    _lock: threading.Lock
    _cond: threading.Condition
    _room: threading.Condition
    _capacity: int | None
    _gc_every: int
    _slt: float
    _all_writers: list[_Writer]
    _writers: dict[Hashable, _Writer]
    _removed_writers: set[Hashable]
    _readers: dict[Hashable, _Reader]
    _retired: set[Hashable]
    _gone_counts: list[int]
    _merge: float
    _max: float
    _log: list[tuple[Any, ...]]
    _late_total: int
    _room_waiting: int
    max_skew: float
    _max_held: int
    _max_size: int
    _copied_late: int
    _writer_waits: int
    _writer_wait_s: float
    _exempt_inserts: int

    # -- configuration --------------------------------------------------------------------------
    @staticmethod
    def _check_slt(slt: float) -> None:
        if not (slt >= 0):  # also rejects NaN
            raise ValueError(f"SLT must be >= 0 (event-time ms) or math.inf, got {slt!r}")

    @property
    def slt(self) -> float:
        return self._slt

    @property
    def capacity(self) -> int | None:
        return self._capacity

    def set_slt(self, slt: float) -> None:
        """setSLT (§4.1): the slack threshold from now on; readers waiting are re-checked."""
        self._check_slt(slt)
        with self._lock:
            lower = slt < self._slt
            self._slt = slt
            if lower:
                self._cond.notify_all()
            elif self._room_waiting:
                # fewer tuples are slack-ready: maybe no reader can take one any more, and a
                # writer holding merge_ts is then exempt from the bound
                self._room.notify_all()

    @property
    def writers(self) -> list[Hashable]:
        """The current (open) writers."""
        with self._lock:
            return list(self._writers)

    @property
    def readers(self) -> list[Hashable]:
        """The current readers."""
        with self._lock:
            return list(self._readers)

    @property
    def max_writer_ts(self) -> dict[Hashable, float]:
        """maxWriterTs (Alg. 1) of the current writers."""
        with self._lock:
            return {name: w.last for name, w in self._writers.items()}

    def merge_ts(self) -> float:
        """min over writers of their latest timestamp (+inf once all are closed)."""
        return self._merge

    def max_ts(self) -> float:
        """max over writers of their latest timestamp."""
        return self._max

    # -- membership (the ESG's Table II) --------------------------------------------------------
    def close_writer(self, writer: Hashable) -> bool:
        """The writer's end of input: ``remove_writers([writer])``. False if already closed.

        Raises:
            ValueError: ``writer`` never was a writer.
        """
        with self._lock:
            if writer not in self._writers and writer not in self._removed_writers:
                raise ValueError(f"SSG: {writer!r} is not a writer; writers: "
                                 f"{list(self._writers)}")
            return self._remove_writers([writer])

    def remove_writers(self, writers: Iterable[Hashable]) -> bool:
        """Removes ``writers`` (the ESG's flush): they no longer hold merge_ts back; their
        tuples stay and are delivered. True only if all were writers, else nothing changes."""
        gone = _as_members(writers, "writers")
        with self._lock:
            return self._remove_writers(gone)

    def _remove_writers(self, gone: list[Hashable]) -> bool:
        if any(x not in self._writers for x in gone):
            return False
        for x in gone:
            w = self._writers.pop(x)
            w.open = False
            self._removed_writers.add(x)
        self._recompute()
        self._cond.notify_all()  # tuples may be ready now, or END reached
        if self._room_waiting:  # a removed writer blocked in insert must raise
            self._room.notify_all()
        return True

    def add_writers(self, writers: Iterable[Hashable], j: Hashable) -> bool:
        """Adds ``writers``, each starting at writer ``j``'s latest ts (the ESG's dummy tuple):
        merge_ts and max_ts do not move, so no returned tuple becomes unready; they may only
        insert ts >= it. True only if ``j`` is a writer and none of ``writers`` is, else
        nothing changes."""
        new = _as_members(writers, "writers")
        with self._lock:
            wj = self._writers.get(j)
            if wj is None or any(x in self._writers for x in new):
                return False
            for x in new:
                self._new_writer(x, wj.last)
            k = len(self._all_writers)
            for r in self._readers.values():
                r.last_read.extend([_NEG_INF] * (k - len(r.last_read)))
            # merge_ts unchanged (wj.last >= merge_ts), max_ts unchanged (wj.last <= max_ts)
            return True

    def add_readers(self, readers: Iterable[Hashable], j: Hashable) -> bool:
        """Adds ``readers``; each starts at the tuple reader ``j`` gets next (it copies j's
        position, lastReadTs and late queue). True only if ``j`` is a reader and none of
        ``readers`` is, else nothing changes."""
        new = _as_members(readers, "readers")
        with self._lock:
            rj = self._readers.get(j)
            if rj is None or any(x in self._readers for x in new):
                return False
            for x in new:
                self._readers[x] = _Reader(x, rj.pos, list(rj.late), list(rj.last_read))
                self._retired.discard(x)
                self._late_total += len(rj.late)
                self._copied_late += len(rj.late)
            return True

    def remove_readers(self, readers: Iterable[Hashable]) -> bool:
        """Removes ``readers``: their next or pending ``get`` returns END, and what only they
        held is released. True only if all were readers, else nothing changes."""
        gone = _as_members(readers, "readers")
        with self._lock:
            if any(x not in self._readers for x in gone):
                return False
            for x in gone:
                r = self._readers.pop(x)
                self._late_total -= len(r.late)
                self._gone_counts[0] += r.n_ready
                self._gone_counts[1] += r.n_slack
                self._gone_counts[2] += r.n_late
                self._retired.add(x)
            self._gc()
            self._cond.notify_all()  # a removed reader blocked in get must return END
            if self._room_waiting:
                self._room.notify_all()
            return True

    # -- statistics -----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts per current reader (ready, slack-ready, late), totals including removed
        readers, flow-control figures, SLT and skew."""
        with self._lock:
            rs = self._readers
            return {
                "slt": self._slt,
                "capacity": self._capacity,
                "held": self._held(),
                "max_held": self._max_held,
                "size": len(self._log) + self._late_total,
                "max_size": self._max_size,
                "gc_every": self._gc_every,
                "copied_late": self._copied_late,
                "writers_ever": len(self._all_writers),
                "writer_waits": self._writer_waits,
                "writer_wait_s": self._writer_wait_s,
                "exempt_inserts": self._exempt_inserts,
                "buffered": len(self._log),
                "late_queued": {n: len(r.late) for n, r in rs.items()},
                "ready": {n: r.n_ready for n, r in rs.items()},
                "slack_ready": {n: r.n_slack for n, r in rs.items()},
                "late": {n: r.n_late for n, r in rs.items()},
                "removed_readers": dict(zip(("ready", "slack_ready", "late"),
                                            self._gone_counts, strict=True)),
                "max_skew": self.max_skew,
            }
