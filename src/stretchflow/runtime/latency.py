"""Latency: when inputs entered, and the percentiles of outputs' latencies — one place.

:class:`IngestClock` records when each source added which timestamps; a sink asks it when the
first input with ``ts >= T − δ`` entered and measures an output of timestamp ``T`` from there
(the latest input that can contribute to it, or the one that closed it).
:class:`LatencyRecorder` keeps every sample of the whole run in a log-bucketed histogram
(HDR-style: 1 % relative precision, memory bounded by the range of values, not by their number)
and a time series thinned by doubling its stride, so a long run is covered to its end.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..eventtime import WATERMARK
from .control import Barrier

_PRECISION = 1.01  # bucket b holds values in [1.01^b, 1.01^(b+1)) µs
_LOG = math.log(_PRECISION)
_SERIES_MAX = 4000
#: outputs measured per hand-over to a sink (:meth:`LatencyRecorder.measure_outputs`)
SAMPLES = 16


def percentiles(values: Sequence[float]) -> dict[str, Any]:
    """p50, p99, max and the count of ``values`` (sorted or not), by nearest rank; None for
    no values. The one definition every engine and benchmark reports."""
    if not values:
        return {"p50": None, "p99": None, "max": None, "samples": 0}
    v = sorted(values)
    n = len(v)
    return {"p50": v[n // 2], "p99": v[min(n - 1, int(n * 0.99))], "max": v[-1], "samples": n}


class IngestClock:
    """When each source added which timestamps (non-decreasing record of first arrivals)."""

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.wall: list[float] = []
        self._lock = threading.Lock()

    def record(self, ts: int) -> None:
        now = time.perf_counter()
        with self._lock:
            if not self.ts or ts > self.ts[-1]:
                self.ts.append(ts)
                self.wall.append(now)

    def clocked(self, items: Iterator[Any], every: int = 256) -> Iterator[Any]:
        """``items`` (a source read item by item, not through a
        :class:`~stretchflow.runtime.SourcePump`, which records each batch it hands on),
        recording every ``every``-th item's timestamp as it enters (the first one too): one
        counter test per item, one lock per ``every`` items."""
        record = self.record
        n = every
        for item in items:
            n += 1
            if n >= every:
                n = 0
                record(item[0])
            yield item

    def entered(self, ts: int) -> float | None:
        """Wall-clock time the first input with timestamp >= ``ts`` entered, if any did."""
        with self._lock:
            i = bisect.bisect_left(self.ts, ts)
            return self.wall[i] if i < len(self.wall) else None


class LatencyRecorder:
    """Latency samples of a whole run: a histogram for percentiles and a thinned series."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        self._lock = threading.Lock()
        self._buckets: dict[int, int] = {}
        self._n = 0
        self._max = -math.inf
        self._series: list[tuple[float, float]] = []
        self._stride = 1
        self._skip = 0
        from .metrics import announce  # the live view reads it while the run goes on

        announce(self)

    def add(self, now: float, ms: float) -> None:
        """One sample: at wall-clock time ``now``, a latency of ``ms`` milliseconds."""
        with self._lock:
            self._add(now, ms)

    def _add(self, now: float, ms: float) -> None:  # under self._lock
        b = int(math.log(ms * 1000.0 if ms > 1e-3 else 1.0) / _LOG)
        buckets = self._buckets
        buckets[b] = buckets.get(b, 0) + 1
        self._n += 1
        if ms > self._max:
            self._max = ms
        self._skip += 1
        if self._skip >= self._stride:
            self._skip = 0
            self._series.append((now - self.t0, ms))
            if len(self._series) >= _SERIES_MAX:
                self._series = self._series[::2]
                self._stride *= 2

    def measure_outputs(self, clock: IngestClock, items: Sequence[tuple[Any, Any]]) -> None:
        """Measures one hand-over of ``items`` to a sink, against ``clock`` (the one
        definition of ``latency_ms``, runtime/result.py): up to :data:`SAMPLES` of them,
        evenly spaced, each output of timestamp T from when the first input with ts >= T − 1
        entered until now; a :class:`~stretchflow.batch.Batch` item counts as one output at
        its last timestamp (a window's rows share it), watermarks and barriers as none. One
        lock per hand-over, not per sample: this runs on the sinks' hot path."""
        n = len(items)
        if not n:
            return
        now = time.perf_counter()
        entered = clock.entered
        found = []
        for item in items[::-(-n // SAMPLES)]:
            p = item[1]
            if p is WATERMARK or isinstance(p, Barrier):
                continue
            t_in = entered(item[0] - 1)
            if t_in is not None:
                found.append(t_in)
        if found:
            with self._lock:
                for t_in in found:
                    self._add(now, (now - t_in) * 1000.0)

    @property
    def samples(self) -> int:
        return self._n

    def summary(self) -> dict[str, Any]:
        """p50, p99 and max in ms (the percentiles within 1 %, the max exact) and the count."""
        with self._lock:
            n = self._n
            if not n:
                return percentiles(())
            ranks = {"p50": n // 2, "p99": min(n - 1, int(n * 0.99))}
            out: dict[str, Any] = {}
            seen = 0
            for b in sorted(self._buckets):
                seen += self._buckets[b]
                for name, r in ranks.items():
                    if name not in out and seen > r:
                        # the bucket's middle, never above the exact max
                        out[name] = min(self._max, _PRECISION ** (b + 0.5) / 1000.0)
            return {"p50": out["p50"], "p99": out["p99"], "max": self._max, "samples": n}

    def series(self) -> list[tuple[float, float]]:
        """``(seconds since the run's start, ms)`` pairs over the whole run, at most ~4000."""
        with self._lock:
            return [(round(t, 3), round(ms, 3)) for t, ms in self._series]
