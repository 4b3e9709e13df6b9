"""The Tuple Buffer of STRETCH (journal Definition 6, Table II) as an Elastic ScaleGate.

Sources add timestamp-sorted tuples; every reader gets every *ready* tuple, all
readers in the same total order, with non-decreasing watermarks. Sources and
readers can join and leave while tuples flow (journal §6, conference §4.1/§7).
A tuple is any Python tuple whose element 0 is its integer timestamp ``ts``;
the rest is payload that the buffer never reads or copies.

Readiness (journal Definition 3, conference §2)
    Let the *frontier* ``W`` be the minimum, over the current sources, of the
    latest timestamp each source added. A tuple is ready when ``ts <= W``
    (inclusive). A source that has added nothing yet counts as ``-inf``: it
    holds readiness back until it adds a tuple or is removed. Once every
    source is gone, ``W`` is ``+inf`` and every remaining tuple is ready.
    ``W`` never decreases, so a ready tuple stays ready.

    The papers are ambiguous here (NOTES-stretch.md "Readiness ambiguity"):
    the conference §7 skip list does not return a node that a source handle
    still points to (a strict reading: a source's last tuple waits for that
    source's next tuple), while the journal §6.1/§7 needs the control tuple of
    an epoch switch to be deliverable at once. We implement the inclusive
    Definition 3: with the strict reading, the control tuples that Alg. 5
    (addSTRETCH) stamps with each source's latest timestamp would wait for
    the next data tuple of every source, and an idle source would stall the
    reconfiguration. With the inclusive reading, when every source has
    reached ``T`` and adds its control tuple at ``T``, all of them are ready
    immediately. (The VSN executor now adds its control tuples with
    ``add_next``, in :mod:`stretchflow.buffers.esg_membership`, which does not
    depend on this rule; the rule still decides when the sources' tuples are
    ready.)

A source's last tuple
    It becomes ready as soon as every other current source has added a tuple
    with a timestamp at least as large, or when the other sources are removed
    (or closed). The source itself never needs to add more.

Ties (tuples with equal ``ts``)
    The ready log is ordered by ``ts``; equal timestamps are ordered first by
    the moment they became ready (the linearization order under the lock),
    then, among tuples that became ready in the same step, by source rank
    (the order in which sources were registered, constructor order first,
    then ``add_sources`` order), then by each source's own order. A fully
    run-independent order such as (ts, rank) is impossible with the
    inclusive rule: once ``W == T``, a source at ``T`` may still add more
    tuples at ``T``, and delivering the earlier ones cannot wait for them.
    The rule costs nothing extra (a stable sort of the newly-ready runs) and
    every reader sees the same order, which is what determinism needs (the
    contract in DESIGN.md compares multisets per timestamp).

Hidden tuples, ``add_next`` and membership (journal §6, §7, Table II)
    Sources and readers join and leave through :class:`ElasticScaleGate`'s membership
    methods, which live in :mod:`stretchflow.buffers.esg_membership` (a mixin; its
    docstring gives the hidden dummy/flush tuples of §6, the control tuples of
    ``add_next`` and the all-or-nothing rule of Table II). This module holds the core:
    the sorted merge, readiness, reads, garbage collection and flow control.

Garbage collection
    Tuples that every current reader has passed are released. With no reader
    at all, ready tuples are released at once (nobody can ever read them:
    new readers only start where an existing reader is).

Flow control
    ``buffered`` = pending (not yet ready) + ready tuples the slowest reader
    has not consumed. ``add`` waits on a condition while ``buffered >=
    capacity``, with one exception: a source that holds the frontier (its
    latest ``ts`` equals ``W``, or it has added nothing) may add one tuple
    while no ready tuple awaits a reader. Why: if the buffer is full of
    pending tuples, they are pending *because of* the sources at the
    frontier, and only those sources can make them ready; blocking them
    would deadlock. If ready tuples await a reader, readers will free room,
    so waiting is safe and memory stays bounded. Deadlock freedom: if every
    reader has caught up and every source waits, the backlog is empty and a
    frontier source (one always exists) is exempt, a contradiction. Bound:
    each source holds at most one tuple admitted over capacity (it was at the
    frontier, so its earlier pending tuples were all ready), hence
    ``buffered <= capacity + number of sources`` (counting removed sources
    whose tuples are still pending); ``stats()["max_buffered"]`` records it.
    ``add_batch`` is admitted in parts when the buffer lacks room. A source
    that had to wait resumes only once ``capacity // 4`` tuples (or its whole
    remaining run) fit, so a full buffer is not refilled one tuple per reader
    step (this hysteresis made batched throughput about ten times higher);
    the frontier exemption does not depend on room, so it cannot deadlock.

Spread bound (``max_spread``; None: no bound)
    A reader may not get more than ``max_spread`` positions ahead of the slowest current
    reader: ``get_batch`` returns at most that many, and waits while the reader is that far
    ahead, until the slowest reader moves or leaves (or the buffer is aborted). The
    slowest reader is never held back, so some reader can always move: no deadlock, and
    flow control is unchanged (it waits on the slowest reader anyway). The check costs
    one comparison per ``get_batch``; waiters are woken only when the minimum moves. Why:
    a control tuple of ``add_next`` goes after the furthest reader, so the slowest one's
    wait for it is bounded by the spread (the VSN executor's reconfiguration time).

Control hold (``set_control_hold``, off by default; :mod:`~stretchflow.buffers.esg_membership`)
    From an ``add_next`` until ``release_hold`` (or a bounded time), sources wait in ``add``.

Example:
    >>> esg = ElasticScaleGate(sources=["a", "b"], readers=["r"])
    >>> esg.add_batch([(1, "a1"), (5, "a5")], "a")
    >>> esg.get("r", timeout=0) is None      # "b" added nothing: nothing is ready
    True
    >>> esg.add((3, "b3"), "b")
    >>> esg.get_batch("r", 10)               # ready: ts <= min(5, 3)
    [(1, 'a1'), (3, 'b3')]
    >>> esg.close_source("b")                # its flush: "a"'s (5, 'a5') is ready
    True
    >>> esg.get("r"), esg.watermark("r")
    ((5, 'a5'), 5)
    >>> esg.close_source("a")
    True
    >>> esg.get("r") is END
    True
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_right
from collections.abc import Hashable, Iterable, Sequence
from itertools import chain, islice
from operator import attrgetter, itemgetter, le
from typing import Any, Final

from .esg_membership import ElasticMembership
from .esg_state import Aborted, _pos, _Reader, _Source, _ts_back, _unknown_reader, _unknown_source

__all__ = ["END", "Aborted", "ElasticScaleGate"]


class _End:
    """Type of the END sentinel (a singleton)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"

    def __reduce__(self) -> str:
        return "END"


END: Final = _End()
"""Returned by ``get``/``get_batch`` once every source is gone and the reader got everything."""

_ts = itemgetter(0)
_last = attrgetter("last")
_NEG_INF: Final = -math.inf
_POS_INF: Final = math.inf
# A source's pending list is compacted only when this many consumed entries sit in front of it,
# so the memmove is amortized over many releases.
_COMPACT_MIN: Final = 4096


class ElasticScaleGate(ElasticMembership):
    """Elastic ScaleGate: a many-sources, many-readers, timestamp-merging tuple buffer.

    See the module docstring for the readiness, tie, garbage collection and
    flow-control rules, and :mod:`stretchflow.buffers.esg_membership` (the mixin
    :class:`~stretchflow.buffers.esg_membership.ElasticMembership`) for membership.

    Args:
        sources: initial source names (hashable, distinct).
        readers: initial reader names (hashable, distinct); they start at the beginning.
        capacity: flow-control bound on buffered tuples (>= 1).
        max_spread: how many positions a reader may be ahead of the slowest reader
            (None: unbounded); see the module docstring and :meth:`set_max_spread`.

    Example:
        >>> import threading
        >>> esg = ElasticScaleGate(sources=[0, 1], readers=["x", "y"], capacity=4)
        >>> def produce(src):
        ...     for ts in range(src, 20, 2):
        ...         esg.add((ts, f"s{src}"), src)
        ...     esg.close_source(src)
        >>> threads = [threading.Thread(target=produce, args=(s,)) for s in (0, 1)]
        >>> for t in threads:
        ...     t.start()
        >>> got = {"x": [], "y": []}
        >>> def consume(r):
        ...     while (batch := esg.get_batch(r, 3)) is not END:
        ...         got[r].extend(batch)
        >>> readers = [threading.Thread(target=consume, args=(r,)) for r in got]
        >>> for t in readers:
        ...     t.start()
        >>> for t in threads + readers:
        ...     t.join()
        >>> got["x"] == got["y"] and [ts for ts, _ in got["x"]] == list(range(20))
        True
    """

    def __init__(
        self,
        sources: Iterable[Hashable],
        readers: Iterable[Hashable],
        capacity: int = 65536,
        max_spread: int | None = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        src = list(sources)
        rdr = list(readers)
        for names, what in ((src, "source"), (rdr, "reader")):
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate {what} names in {names!r}")
        self._capacity = capacity
        self._resume_room = max(1, capacity // 4)
        self._lock = threading.Lock()
        # Two conditions on one lock so that readers and sources wake only each other.
        self._readable = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._sources: dict[Hashable, _Source] = {}
        self._feeds: list[_Source] = []  # sources that are active or hold pending tuples, by rank
        self._next_rank = 0
        for name in src:
            self._new_source(name, _NEG_INF)
        self._readers: dict[Hashable, _Reader] = {name: _Reader(0, None) for name in rdr}
        self._retired: set[Hashable] = set()  # removed readers: get() tells them END
        self._log: list[tuple] = []  # ready tuples; _log[i] has absolute index _base + i
        self._base = 0
        self._min_pos = 0  # slowest reader's position (log end when there is no reader)
        self._marker_end = 0  # just after the latest add_next tuple (absolute index)
        self._frontier: float = _NEG_INF if src else _POS_INF
        self._pending_total = 0
        self._aborted: BaseException | None = None
        self._max_spread: int | None = None
        self._spread_waiting = 0
        # the control hold (esg_membership.set_control_hold): sources wait while it is on
        self._control_hold: float | None = None
        self._holding = False
        self._hold_deadline = 0.0
        self._hold_waiting = 0
        self._hold_wait_s = 0.0
        self._hold_waits = 0
        # metrics
        self._added = 0
        self._removed_delivered = 0
        self._max_buffered = 0
        self._reader_waiting = 0
        self._room_waiting = 0
        self._reader_wait_s = 0.0
        self._reader_waits = 0
        self._source_wait_s = 0.0
        self._source_waits = 0
        self._spread_wait_s = 0.0
        self._spread_waits = 0
        self.set_max_spread(max_spread)

    # ------------------------------------------------------------------ sources

    def add(self, t: tuple, source: Hashable) -> None:
        """Add tuple ``t`` (``t[0]`` is its ts) from ``source``; block while the buffer is full.

        Raises:
            ValueError: unknown source, ``t[0]`` below the source's previous ts, or the
                source was removed while this call waited for room.
        """
        ts = t[0]
        with self._lock:
            s = self._sources.get(source)
            if s is None:
                raise _unknown_source(source)
            if self._holding:  # a control tuple goes first (esg_membership, control hold)
                self._wait_hold(s)
            last = s.last
            if ts < last:
                raise _ts_back(source, last, ts)
            buffered = self._pending_total + self._base + len(self._log) - self._min_pos
            if buffered >= self._capacity:
                self._wait_room(s, 1)
                last = s.last
                if ts < last:  # another thread added for the same source while we waited
                    raise _ts_back(source, last, ts)
                buffered = self._pending_total + self._base + len(self._log) - self._min_pos
            if buffered >= self._max_buffered:
                self._max_buffered = buffered + 1
            self._added += 1
            s.last = ts
            if last > self._frontier:
                # s is ahead of W: t cannot be ready (ts >= last > W) and W cannot move.
                s.pending.append(t)
                self._pending_total += 1
            elif len(self._feeds) == 1:
                # s alone defines W and has nothing pending (it held W): t is ready now.
                self._frontier = ts
                if self._readers:
                    self._log.append(t)
                    if self._reader_waiting:
                        self._readable.notify_all()
                else:
                    self._base += 1
                    self._min_pos = self._base
            else:
                # s held W back: W may rise (Definition 3).
                s.pending.append(t)
                self._pending_total += 1
                self._advance(s)

    def add_batch(self, ts_tuples: Sequence[tuple], source: Hashable) -> None:
        """Add a timestamp-sorted run of tuples from ``source`` under one lock acquisition.

        If the buffer lacks room the run is admitted in parts, waiting in between.
        The whole run is validated before any of it is added.

        Raises:
            ValueError: as for :meth:`add`; for an unsorted run nothing is added.
        """
        batch = ts_tuples if isinstance(ts_tuples, list | tuple) else list(ts_tuples)
        n = len(batch)
        stamps = list(map(_ts, batch))
        # Validate outside the lock; all() over map() keeps the loop in C.
        if n > 1 and not all(map(le, stamps, islice(stamps, 1, None))):
            i = next(i for i in range(1, n) if stamps[i] < stamps[i - 1])
            raise ValueError(
                f"source {source!r}: timestamps go back within add_batch at position {i}: "
                f"{stamps[i]!r} after {stamps[i - 1]!r}"
            )
        with self._lock:
            s = self._sources.get(source)
            if s is None:
                raise _unknown_source(source)
            if n == 0:
                return
            if self._holding:  # a control tuple goes first (esg_membership, control hold)
                self._wait_hold(s)
            if stamps[0] < s.last:
                raise _ts_back(source, s.last, stamps[0])
            cap = self._capacity
            i = 0
            while i < n:
                room = cap - (self._pending_total + self._base + len(self._log) - self._min_pos)
                if room >= n - i:
                    k = n - i
                else:
                    k = self._wait_room(s, n - i)
                    if stamps[i] < s.last:
                        raise _ts_back(source, s.last, stamps[i])
                    room = cap - (self._pending_total + self._base + len(self._log) - self._min_pos)
                buffered = cap - room + k
                if buffered > self._max_buffered:
                    self._max_buffered = buffered
                if k == n:
                    s.pending.extend(batch)
                else:
                    s.pending.extend(batch[i : i + k])
                last = s.last
                i += k
                s.last = stamps[i - 1]
                self._pending_total += k
                self._added += k
                if last <= self._frontier:
                    self._advance(s)

    def _wait_room(self, s: _Source, want: int) -> int:
        """Wait (lock held) until ``s`` may add; return how many of ``want`` tuples fit now."""
        t0 = 0.0
        # Hysteresis: once it had to wait, a source resumes only when a good share of the
        # capacity is free, so a full buffer is not refilled a tuple or two per reader step.
        need = 1
        try:
            while True:
                if self._aborted is not None:
                    raise Aborted("the buffer was aborted") from self._aborted
                if self._sources.get(s.name) is not s:
                    raise ValueError(f"source {s.name!r} was removed while waiting for room to add")
                end = self._base + len(self._log)
                room = self._capacity - (self._pending_total + end - self._min_pos)
                if room >= need:
                    return min(room, want)
                # The frontier exemption of the flow-control rule (module docstring).
                if s.last <= self._frontier and end == self._min_pos:
                    return 1
                if not t0:
                    t0 = time.perf_counter()
                    self._source_waits += 1
                    need = min(want, self._resume_room)
                self._room_waiting += 1
                try:
                    self._room.wait()
                finally:
                    self._room_waiting -= 1
        finally:
            if t0:
                self._source_wait_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ readiness

    def _new_source(self, name: Hashable, last: float) -> None:
        s = _Source(name, self._next_rank, last)
        self._next_rank += 1
        self._sources[name] = s
        self._feeds.append(s)

    def _advance(self, s: _Source | None) -> None:
        """Recompute W after ``s`` (None: membership) changed and move newly ready tuples."""
        w = min(map(_last, self._sources.values())) if self._sources else _POS_INF
        if w > self._frontier:
            self._frontier = w
            self._release(self._feeds)
            # A waiting source may now hold the frontier; with a backlog it must wait for
            # readers anyway (they notify when it drains).
            if self._room_waiting and self._base + len(self._log) == self._min_pos:
                self._room.notify_all()
        elif s is not None:
            # W unchanged: only s can have a new tuple at ts == W; every other pending tuple
            # is > W by the invariant kept below.
            self._release((s,))

    def _release(self, feeds: Iterable[_Source]) -> None:
        """Move every pending tuple with ts <= W into the ready log, in ts order.

        Invariant afterwards: every pending tuple has ts > W, and the log is sorted
        (new tuples are >= old W >= anything already in the log).
        """
        w = self._frontier
        chunks = []
        drained_orphan = False
        for f in feeds:
            p = f.pending
            # A non-empty pending list always has head < len: a full release resets it to [].
            if not p:
                continue
            h = f.head
            if p[h][0] > w:
                continue
            if p[-1][0] <= w:
                chunks.append(p[h:] if h else p)
                f.pending = []
                f.head = 0
                if not f.active:
                    drained_orphan = True
            else:
                k = bisect_right(p, w, h, len(p), key=_ts)
                chunks.append(p[h:k])
                if k >= _COMPACT_MIN and 2 * k >= len(p):
                    del p[:k]
                    k = 0
                f.head = k
        if drained_orphan:
            self._feeds = [f for f in self._feeds if f.active or f.pending]
        if not chunks:
            return
        if len(chunks) == 1:
            new = chunks[0]
        else:
            # Chunks are in rank order and each is sorted; a stable sort merges the runs in C
            # and keeps rank order among equal ts (the tie rule).
            new = list(chain.from_iterable(chunks))
            new.sort(key=_ts)
        self._pending_total -= len(new)
        if self._readers:
            self._log.extend(new)
            if self._reader_waiting:
                self._readable.notify_all()
        else:
            self._base += len(self._log) + len(new)
            self._log.clear()
            self._min_pos = self._base

    # ------------------------------------------------------------------ readers

    def get(self, reader: Hashable, timeout: float | None = None) -> Any:
        """Return the next ready tuple for ``reader``, blocking until one is ready.

        Returns ``END`` once every source is gone and the reader got every tuple, or once
        the reader has been removed; ``None`` if ``timeout`` seconds pass first.

        Raises:
            ValueError: ``reader`` never was a reader.
        """
        out = self.get_batch(reader, 1, timeout)
        return out if out is None or out is END else out[0]

    def get_batch(self, reader: Hashable, max_items: int, timeout: float | None = None) -> Any:
        """Return a list of 1..``max_items`` ready tuples for ``reader``, blocking for the first.

        Returns ``END`` or ``None`` as :meth:`get` does.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items!r}")
        with self._lock:
            r = self._readers.get(reader)
            if r is None:
                if reader in self._retired:
                    return END
                raise _unknown_reader(reader)
            deadline = None
            while True:
                if self._aborted is not None:
                    raise Aborted("the buffer was aborted") from self._aborted
                pos = r.pos
                i = pos - self._base
                if i < len(self._log):
                    take = max_items
                    if self._max_spread is not None:
                        # The spread bound (module docstring): never more than max_spread
                        # positions ahead of the slowest reader, which is never held back.
                        take = self._min_pos + self._max_spread - pos
                        if take <= 0:
                            if timeout is not None and deadline is None:
                                deadline = time.monotonic() + timeout
                            if not self._wait_spread(deadline):
                                return None
                            if self._readers.get(reader) is not r:
                                return END
                            continue
                        if take > max_items:
                            take = max_items
                    out = self._log[i : i + take]
                    r.pos = pos + len(out)
                    r.wm = out[-1][0]
                    if pos == self._min_pos:
                        self._reader_moved(r.pos)
                    return out
                if not self._sources:
                    return END
                if timeout is not None:
                    if deadline is None:
                        deadline = time.monotonic() + timeout
                    if not self._wait_readable(deadline):
                        return None
                else:
                    self._wait_readable(None)
                if self._readers.get(reader) is not r:
                    return END

    def abort(self, cause: BaseException | None = None) -> None:
        """Stops the buffer: every blocked and later ``get``/``add`` raises :class:`Aborted`
        (so a failure in one thread of a query cannot leave the others blocked forever)."""
        with self._lock:
            self._aborted = cause if cause is not None else Aborted("aborted")
            self._readable.notify_all()
            self._room.notify_all()

    def _wait_readable(self, deadline: float | None) -> bool:
        """Wait (lock held) for new ready tuples; False if the deadline passed first."""
        if deadline is None:
            remaining = None
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
        t0 = time.perf_counter()
        self._reader_waiting += 1
        try:
            self._readable.wait(remaining)
        finally:
            self._reader_waiting -= 1
            self._reader_wait_s += time.perf_counter() - t0
            self._reader_waits += 1
        return True

    def _reader_moved(self, pos: int) -> None:
        """A reader at the minimum moved to ``pos`` or left: free what all readers passed."""
        readers = self._readers
        if len(readers) == 1:
            m = pos
        else:
            m = min(map(_pos, readers.values()))
            if m == self._min_pos:
                return
        self._min_pos = m
        if self._spread_waiting:  # readers held back by the spread bound may go on
            self._readable.notify_all()
        n = m - self._base
        # Free in bulk: deleting at least half the log keeps the memmove amortized O(1).
        if 2 * n >= len(self._log):
            del self._log[:n]
            self._base = m
        if self._room_waiting:
            backlog = self._base + len(self._log) - m
            if not backlog or self._pending_total + backlog <= self._capacity - self._resume_room:
                self._room.notify_all()

    def watermark(self, reader: Hashable) -> Any:
        """The ts of the latest tuple ``reader`` got (None before its first tuple)."""
        with self._lock:
            r = self._readers.get(reader)
            if r is None:
                raise _unknown_reader(reader)
            return r.wm

    # ------------------------------------------------------------------ membership
    # ------------------------------------------------------------------ introspection

    @property
    def capacity(self) -> int:
        return self._capacity

    def stats(self) -> dict[str, Any]:
        """A cheap snapshot of counters, for tests and elasticity controllers.

        ``reader_wait_s``/``source_wait_s`` add up the time readers spent blocked in
        ``get`` and sources in ``add`` (waits still in progress are not counted yet).
        """
        with self._lock:
            end = self._base + len(self._log)
            backlog = end - self._min_pos
            return {
                "added": self._added,
                "delivered": self._removed_delivered
                + sum(r.pos - r.start for r in self._readers.values()),
                "buffered": self._pending_total + backlog,
                "pending": self._pending_total,
                "backlog": backlog,
                "max_buffered": self._max_buffered,
                "capacity": self._capacity,
                "log_len": len(self._log),
                "frontier": self._frontier,
                "sources": len(self._sources),
                "readers": len(self._readers),
                "reader_wait_s": self._reader_wait_s,
                "reader_waits": self._reader_waits,
                "source_wait_s": self._source_wait_s,
                "source_waits": self._source_waits,
                "max_spread": self._max_spread,
                "spread": (max(map(_pos, self._readers.values())) - self._min_pos
                           if self._readers else 0),
                "spread_wait_s": self._spread_wait_s,
                "spread_waits": self._spread_waits,
                "control_hold": self._control_hold,
                "hold_wait_s": self._hold_wait_s,
                "hold_waits": self._hold_waits,
            }
