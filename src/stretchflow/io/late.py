"""Event time for disordered input: bounded out-of-orderness, idle timeouts and late tuples
(issue #19; docs/event-time.md).

One code path turns a source's records, in arrival order, into the timestamp-ordered stream
the engines take (:func:`reorder`). Its watermark W only moves forward and comes from three
places, all handled alike: an explicit watermark record, ``max ts seen − max_delay`` when the
source declares ``max_delay``, and ``max ts seen`` when an idle timeout fires. Tuples are held
in a heap and released in (ts, arrival) order once ``ts <= W``, followed by ``(W, WATERMARK)``;
a tuple with ``ts < W`` is *late* and the source's ``late`` policy decides: ``"error"`` (one
:class:`~stretchflow.errors.SourceError`), ``"drop"`` (counted) or ``"side"`` (the late-data
stream :class:`~stretchflow.io.sources.LateSource` re-reads the input through this same
function and yields only the late tuples).

Lateness depends only on the arrival order, the explicit watermarks and ``max_delay``, so two
passes over the same input, or runs on any engine and parallelism, find the same late tuples.
An idle timeout is the exception: it depends on wall-clock time (it trades determinism for
latency, as SSG's slack does), which is why a source with one cannot have a side stream.

This module imports nothing of :mod:`stretchflow.io.sources` (sources import it).
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from ..eventtime import WATERMARK, parse_duration

Item = tuple[int, Any]
#: what a source does with a tuple behind its watermark
LATE_POLICIES = ("error", "drop", "side")


class _Idle:
    """Marker payload of the item an idle timeout inserts into a source's raw records."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IDLE"


IDLE = _Idle()

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def check_event_time(name: str, max_delay: Any, idle_timeout: Any, late: str | None
                     ) -> tuple[int | None, float | None, str | None]:
    """The validated ``(max_delay ms, idle_timeout seconds, late)`` of source ``name``; a bad
    value is one ValueError naming the source and the setting."""
    delay = None
    if max_delay is not None:
        try:
            delay = parse_duration(max_delay)
        except ValueError as e:
            raise ValueError(f"source {name!r}: max_delay: {e}") from None
    idle = None
    if idle_timeout is not None:
        try:
            idle = parse_duration(idle_timeout) / 1000  # wall-clock seconds
        except ValueError as e:
            raise ValueError(f"source {name!r}: idle_timeout: {e}") from None
        if idle <= 0:
            raise ValueError(f"source {name!r}: idle_timeout must be positive, got "
                             f"{idle_timeout!r}")
    if late is not None and late not in LATE_POLICIES:
        raise ValueError(f"source {name!r}: late must be one of {', '.join(LATE_POLICIES)}, "
                         f"got {late!r}")
    return delay, idle, late


def to_ms(value: Any) -> int | None:
    """Event time in ms of a timestamp value: an int as it is, an ISO-8601 string or a
    :class:`~datetime.datetime` as ms since the epoch (aware: converted to UTC; naive: taken
    as UTC, as Arrow's timestamps without a time zone are), floored to whole ms; None for
    anything else (a float, a bool, a date without a time...)."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    elif isinstance(value, datetime):
        dt = value
    else:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MS


def reorder(src: Any, raw: Iterator[tuple[Any, Any, Any]], *, delay: int | None,
            side: bool = False) -> Iterator[Item]:
    """``raw`` (``(ts, payload_or_WATERMARK_or_IDLE, where)`` in arrival order) as tuples in
    timestamp order with explicit watermarks, ``delay`` being the source's bounded
    out-of-orderness in ms (None: only explicit watermarks and idle timeouts move W).

    ``side=False`` (the source's own stream): late tuples raise (``src.late == "error"``) or
    are counted in ``src.late_seen`` and left out. ``side=True`` (the late-data stream): only
    the late tuples, each as ``(W, record)`` with W the watermark it was found behind (so the
    stream's timestamps never go back), and the watermarks; nothing is held.
    """
    heap: list[tuple[int, int, Any]] = []
    push, pop = heapq.heappush, heapq.heappop
    seq = 0
    wm: float = -math.inf
    top: float = -math.inf  # the largest timestamp seen
    error = src.late == "error"
    for ts, payload, where in raw:
        if payload is WATERMARK:
            new = ts
        elif payload is IDLE:
            new = top  # nothing arrived for a while: release all that is held
        else:
            if ts < wm:
                if error:
                    raise src._error(
                        where, f"late tuple: timestamp {ts} is behind the watermark {wm}",
                        payload)
                if side:
                    yield wm, payload
                else:
                    src.late_seen += 1
                continue
            if not side:
                seq += 1
                push(heap, (ts, seq, payload))
            if ts <= top:
                continue
            top = ts
            if delay is None:
                continue
            new = ts - delay
        if new <= wm:
            continue  # watermarks only move forward; a repeated one says nothing new
        wm = new
        last = None
        while heap and heap[0][0] <= wm:
            last, _, p = pop(heap)
            yield last, p
        if last != wm or payload is WATERMARK:
            # a released tuple at ts == W already is a derived watermark (implicit); an
            # explicit one is passed on as the source gave it
            yield wm, WATERMARK
    while heap:
        t, _, p = pop(heap)
        yield t, p


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


_END = object()


def idle_marked(raw: Iterator[tuple[Any, Any, Any]], seconds: float, name: str
                ) -> Iterator[tuple[Any, Any, Any]]:
    """``raw`` read by a thread, with an ``(None, IDLE, None)`` item each time nothing
    arrived for ``seconds`` of wall-clock time (a live source that pauses then releases what
    it holds). The reader's errors are raised here, unchanged. Closing this generator stops
    the reader at its next record (a reader blocked inside ``raw`` stays, as a daemon thread,
    until its input yields or ends)."""
    q: queue.Queue = queue.Queue(maxsize=1024)
    stop = threading.Event()

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in raw:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failed(e))

    t = threading.Thread(target=read, name=f"stretchflow-idle-{name}", daemon=True)
    t.start()
    get = q.get
    try:
        while True:
            try:
                item = get(timeout=seconds)
            except queue.Empty:
                yield None, IDLE, None
                continue
            if item is _END:
                return
            if type(item) is _Failed:
                raise item.error
            yield item
    finally:
        stop.set()
