"""Elastic membership of the Elastic ScaleGate (STRETCH journal §6 and Table II; conference
§4.1/§7): sources and readers that join and leave while tuples flow, the control tuples of
a reconfiguration (``add_next``, journal §7), and the bound on the readers' spread.

:class:`ElasticMembership` is a mixin of :class:`~stretchflow.buffers.esg.ElasticScaleGate`,
which holds the state and the core (the sorted merge and readiness of journal Definition 3,
reads, garbage collection, flow control; see that module's docstring). The methods here run
under the gate's one lock and only call into the core's ``_new_source``, ``_advance`` and
``_reader_moved``; none of them is on a per-tuple path.

Hidden tuples (journal §6)
    ``add_sources(S, j)`` gives each new source a *dummy* at ``j``'s latest
    timestamp (safe by Lemma 3) and ``remove_sources`` a *flush* at the removed
    source's latest timestamp. Under Definition 3 the whole effect of a dummy
    is that the new source's latest timestamp starts at ``j``'s, and the whole
    effect of a flush is that the removed source no longer bounds ``W`` while
    its pending tuples stay queued until ``W`` passes them. We record exactly
    that and never put hidden tuples into the ready log, so ``get`` has no
    filtering on its path and can never return one.

Tuples of no source (``add_next``)
    A reconfiguration's control tuple must reach every reader at the same position of
    the same sequence, and should not wait: ``add_next`` puts it right after the furthest
    reader's position (after earlier such tuples no reader has reached), stamped with the
    ts of the tuple before it, so the log stays sorted and no reader has passed it.

The control hold (``set_control_hold``; off unless set)
    From an ``add_next`` until ``release_hold`` — or at most the hold's bound, in seconds,
    after the ``add_next`` — sources that add wait (the readers are not held). Why: under
    CPython's interpreter lock, a source thread pushing at full speed keeps the readers
    that must reach the control tuple waiting for the lock, up to a switch interval (5 ms)
    per hand-over; held, it blocks on a condition and lets them run. No deadlock: every
    tuple before the control tuple is already in the ready log (it goes right after the
    furthest reader), so the readers reach it without a new tuple; ``abort`` wakes the
    waiters, a removed source raises as in ``add``, and the bound ends a hold that nobody
    releases (a control tuple that its readers ignore). Flow control is unchanged.

Membership (Table II; test-and-set of §6)
    All methods run under one lock, so concurrent calls are linearized. A
    membership call is all-or-nothing: it returns True only if it applied
    every change, and otherwise changes nothing and returns False (a reader
    or source is already present/absent, or ``j`` is not a member). Of N
    concurrent calls with the same argument, the first wins and the rest find
    the change made and return False. Table II's wording allows a partial
    effect; we apply none so that False always means "nothing changed".
    New readers start at exactly the tuple ``j`` gets next and inherit ``j``'s
    watermark. A removed reader gets ``END`` from ``get`` (also if it was
    blocked in it), so a decommissioned thread learns to stop; a name that was
    never a reader raises ValueError. A removed source gets ValueError from
    ``add`` (also if it was blocked in it): its tuples must not vanish silently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .esg_state import Aborted, _as_members, _pos, _Reader, _Source

__all__ = ["ElasticMembership"]


class ElasticMembership:
    """The membership calls of Table II and ``add_next``, mixed into ElasticScaleGate.

    Example:
        >>> from stretchflow.buffers.esg import END, ElasticScaleGate
        >>> esg = ElasticScaleGate(sources=["a"], readers=["r"])
        >>> esg.add((1, "a1"), "a")
        >>> esg.add_sources(["b"], "a"), esg.add_readers(["q"], "r")  # b starts at a's ts 1
        (True, True)
        >>> esg.add_sources(["b"], "a")                  # all-or-nothing: b is already there
        False
        >>> esg.add((2, "b2"), "b"); esg.add((3, "a3"), "a")
        >>> esg.get_batch("r", 9), esg.get_batch("q", 9)  # ready: ts <= min(3, 2)
        ([(1, 'a1'), (2, 'b2')], [(1, 'a1'), (2, 'b2')])
        >>> esg.remove_readers(["q"]), esg.get("q") is END
        (True, True)
        >>> esg.remove_sources(["a", "b"]), esg.get("r"), esg.get("r") is END
        (True, (3, 'a3'), True)
    """

    # State owned by ElasticScaleGate (declared here for the reader of this module).
    _lock: threading.Lock
    _readable: threading.Condition
    _room: threading.Condition
    _sources: dict[Hashable, _Source]
    _feeds: list[_Source]
    _readers: dict[Hashable, _Reader]
    _retired: set[Hashable]
    _log: list[tuple]
    _base: int
    _min_pos: int
    _marker_end: int
    _frontier: float
    _added: int
    _removed_delivered: int
    _reader_waiting: int
    _room_waiting: int
    _max_spread: int | None
    _spread_waiting: int
    _spread_wait_s: float
    _spread_waits: int
    _control_hold: float | None
    _holding: bool
    _hold_deadline: float
    _hold_waiting: int
    _hold_wait_s: float
    _hold_waits: int
    _aborted: BaseException | None
    _wait_readable: Callable[[float | None], bool]

    def add_next(self, payload: Any) -> Any:
        """Add a tuple of no source that every reader gets next after the furthest reader's
        position (and after the tuples added there this way before). Returns its ts, or
        None, adding nothing, if no reader can get it any more (no reader, or every source
        is gone and the furthest reader has got everything).

        For the control tuples of a reconfiguration (journal §7): every reader gets it at
        the same position of the same sequence, and no reader waits behind tuples that no
        reader has reached yet. Its ts is that of the tuple before it (or, at the very
        start, of the one after it, or ``W`` if the log is empty), so the log stays sorted.
        It takes no room from the sources' capacity (one tuple per request; it counts as
        buffered until the readers pass it).

        Example:
            >>> from stretchflow.buffers.esg import ElasticScaleGate
            >>> esg = ElasticScaleGate(sources=["a"], readers=["r1", "r2"])
            >>> esg.add_batch([(1, "x"), (2, "y"), (3, "z")], "a")
            >>> esg.get("r1"), esg.add_next("control")
            ((1, 'x'), 1)
            >>> esg.get_batch("r2", 9)
            [(1, 'x'), (1, 'control'), (2, 'y'), (3, 'z')]
        """
        with self._lock:
            if not self._readers:
                return None
            log, base = self._log, self._base
            end = base + len(log)
            ahead = max(self._readers.values(), key=_pos)
            q = ahead.pos
            if self._marker_end > q:  # an earlier one nobody has read yet: go after it
                q = self._marker_end
                ts = log[q - 1 - base][0]
            elif ahead.wm is not None:  # the ts of log[q - 1], which may be released
                ts = ahead.wm
            else:  # no reader got anything yet
                ts = log[0][0] if log else self._frontier
            if q >= end and not self._sources:
                return None
            log.insert(q - base, (ts, payload))
            self._marker_end = q + 1
            self._added += 1
            if self._control_hold is not None:  # sources wait until release_hold
                self._holding = True
                self._hold_deadline = time.monotonic() + self._control_hold
            if self._reader_waiting:
                self._readable.notify_all()
            return ts

    def add_readers(self, readers: Iterable[Hashable], j: Hashable) -> bool:
        """Add ``readers``; each starts at the tuple reader ``j`` gets next (Table II).

        Returns True only if ``j`` is a reader and none of ``readers`` is; otherwise
        changes nothing and returns False.
        """
        new = _as_members(readers, "readers")
        with self._lock:
            rj = self._readers.get(j)
            if rj is None or any(x in self._readers for x in new):
                return False
            for x in new:
                self._readers[x] = _Reader(rj.pos, rj.wm)
                self._retired.discard(x)
            return True

    def remove_readers(self, readers: Iterable[Hashable]) -> bool:
        """Remove ``readers``; True only if all of them were readers (else nothing changes).

        Their next (or pending) ``get`` returns ``END``.
        """
        gone = _as_members(readers, "readers")
        with self._lock:
            if any(x not in self._readers for x in gone):
                return False
            for x in gone:
                r = self._readers.pop(x)
                self._removed_delivered += r.pos - r.start
                self._retired.add(x)
            if not self._readers:
                self._base += len(self._log)
                self._log.clear()
                self._min_pos = self._base
                if self._room_waiting:
                    self._room.notify_all()
            else:
                self._reader_moved(min(map(_pos, self._readers.values())))
            if self._reader_waiting:  # a removed reader blocked in get must return END
                self._readable.notify_all()
            return True

    def add_sources(self, sources: Iterable[Hashable], j: Hashable) -> bool:
        """Add ``sources``, each starting at source ``j``'s latest ts (§6, Lemma 3).

        The new sources' hidden dummy at that ts means they do not hold readiness back
        below it, and they may only add tuples with ts >= it. Returns True only if ``j``
        is a source and none of ``sources`` is; otherwise changes nothing and returns False.
        """
        new = _as_members(sources, "sources")
        with self._lock:
            sj = self._sources.get(j)
            if sj is None or any(x in self._sources for x in new):
                return False
            for x in new:
                self._new_source(x, sj.last)
            # W is unchanged: every new source starts at sj.last >= W.
            return True

    def remove_sources(self, sources: Iterable[Hashable]) -> bool:
        """Remove ``sources`` with a hidden flush each (§6): their tuples stay and become
        ready once the remaining sources pass them; they no longer hold readiness back.

        Returns True only if all of them were sources; otherwise changes nothing and
        returns False. Once no source remains, readers get ``END`` after the last tuple.
        """
        gone = _as_members(sources, "sources")
        with self._lock:
            if any(x not in self._sources for x in gone):
                return False
            for x in gone:
                self._sources.pop(x).active = False
            self._feeds = [f for f in self._feeds if f.active or f.pending]
            self._advance(None)
            # a removed source blocked in add (for room or in the control hold) must raise
            if self._room_waiting or self._hold_waiting:
                self._room.notify_all()
            if not self._sources and self._reader_waiting:
                self._readable.notify_all()
            return True

    def close_source(self, source: Hashable) -> bool:
        """End of input for ``source``: ``remove_sources([source])``."""
        return self.remove_sources((source,))

    # -- the spread bound between readers (esg's module docstring); not membership, but like
    # it a reader-set concern off the per-tuple path (only _wait_spread is called by get)

    def _wait_spread(self, deadline: float | None) -> bool:
        """Wait (lock held) for the slowest reader to move, while this one is ``max_spread``
        positions ahead of it; False if the deadline passed first."""
        if deadline is not None and deadline <= time.monotonic():
            return False
        t0 = time.perf_counter()
        self._spread_waiting += 1
        try:
            return self._wait_readable(deadline)
        finally:
            self._spread_waiting -= 1
            self._spread_wait_s += time.perf_counter() - t0
            self._spread_waits += 1

    # -- the control hold (module docstring): sources wait while readers reach add_next's
    # tuple; add and add_batch test one flag, only _wait_hold runs when it is set

    def _wait_hold(self, s: _Source) -> None:
        """Wait (lock held) while the control hold is on: until ``release_hold``, the
        hold's deadline, an abort, or ``s``'s removal (then ``add`` raises as usual)."""
        t0 = time.perf_counter()
        self._hold_waiting += 1
        try:
            while self._holding:
                if self._aborted is not None:
                    raise Aborted("the buffer was aborted") from self._aborted
                if self._sources.get(s.name) is not s:
                    raise ValueError(f"source {s.name!r} was removed while waiting for room "
                                     f"to add")
                left = self._hold_deadline - time.monotonic()
                if left <= 0:  # nobody released it in time: the sources go on
                    self._holding = False
                    break
                self._room.wait(left)
        finally:
            self._hold_waiting -= 1
            self._hold_wait_s += time.perf_counter() - t0
            self._hold_waits += 1

    def release_hold(self) -> None:
        """Ends the control hold (the control tuple's switch is done): sources go on."""
        with self._lock:
            self._holding = False
            if self._hold_waiting:
                self._room.notify_all()

    def set_control_hold(self, seconds: float | None) -> None:
        """Makes each ``add_next`` hold the sources until :meth:`release_hold`, for at most
        ``seconds`` (None: no hold, the default)."""
        if seconds is not None and (isinstance(seconds, bool)
                                    or not (isinstance(seconds, int | float) and seconds > 0)):
            raise ValueError(f"control hold must be a positive number of seconds or None, "
                             f"got {seconds!r}")
        with self._lock:
            self._control_hold = seconds
            if seconds is None and self._holding:
                self._holding = False
                if self._hold_waiting:
                    self._room.notify_all()

    def set_max_spread(self, max_spread: int | None) -> None:
        """Bounds (or, with None, unbounds) how far a reader may get ahead of the slowest."""
        if max_spread is not None and (type(max_spread) is not int or max_spread < 1):
            raise ValueError(f"max_spread must be a positive integer or None, got "
                             f"{max_spread!r}")
        with self._lock:
            self._max_spread = max_spread
            if self._reader_waiting:  # a looser bound may let waiting readers go on
                self._readable.notify_all()

    @property
    def max_spread(self) -> int | None:
        return self._max_spread

    def sources(self) -> list[Hashable]:
        """Current sources, in rank order."""
        with self._lock:
            return list(self._sources)

    def readers(self) -> list[Hashable]:
        """Current readers."""
        with self._lock:
            return list(self._readers)
