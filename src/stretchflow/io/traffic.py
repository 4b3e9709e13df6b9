"""The traffic application of determinism-latency §6: Dublin bus reports and SCATS junction
sensors, with a speed-up factor and delay injection on a source.

The Dublin data is not available, so both streams are generated with the paper's shapes:

* ``bus_reports``: 911 buses, each reporting every 20 s (a random phase per bus); a report
  carries the bus's area (buses move: each report is in the previous area or, with
  ``move_prob``, a neighbouring one) and whether the bus reports congestion
  (``congestion_prob``, higher in a few hot areas).
* ``scats_reports``: 3504 sensors, each reporting every minute; a sensor sits in a fixed area
  and reports a traffic flow (vehicles per minute, lognormal), higher in the hot areas.

:class:`DelayedReplay` replays records in event time ``speedup`` times faster than real time
and injects delays into the writer in wall-clock time (§6 "we delayed the bus input source"):

* :class:`ZipfDelay` — the paper's periodic schedule: phases of ``duration_s`` seconds in which
  each tuple costs a delay of k ms, k in 1..max_ms with probability ∝ k^-exponent (20 s at
  1.0 / 10 ms, then 50 s at 0.35 / 2 ms, repeating). The delay is a per-tuple service time of
  the source's link: tuple i leaves at ``max(schedule_i, leave_{i-1} + d_i)``, so the source
  falls behind while the mean delay exceeds its inter-arrival time and catches up otherwise
  (the periodic skew of the paper's Fig. 1).
* :class:`ConstantDelay` — a constant delay added to every tuple by a sequential writer that
  sleeps the schedule's inter-arrival gap after the previous departure and then the delay:
  ``leave_i = leave_{i-1} + (schedule_i − schedule_{i-1}) + d``, so tuple i leaves ``i·d``
  late and the skew grows linearly (Fig. 11).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .sources import Source, _check_sorted

__all__ = ["ConstantDelay", "DelayedReplay", "ZipfDelay", "bus_reports", "scats_reports"]

BUSES = 911
BUS_PERIOD_MS = 20_000
SENSORS = 3504
SENSOR_PERIOD_MS = 60_000


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _hot_areas(areas: int, hot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 7919)
    return rng.choice(areas, size=min(hot, areas), replace=False)


def bus_reports(duration_ms: int, *, buses: int = BUSES, period_ms: int = BUS_PERIOD_MS,
                areas: int = 40, hot_areas: int = 6, congestion_prob: float = 0.05,
                hot_congestion_prob: float = 0.5, move_prob: float = 0.2,
                seed: int = 0) -> list[dict[str, Any]]:
    """Bus reports ``{"ts", "bus", "area", "congested", "delay_s"}`` over ``[0, duration_ms)``,
    sorted by ``ts``: every bus reports every ``period_ms`` from a random phase."""
    _check(duration_ms >= 0 and buses >= 1 and period_ms >= 1 and areas >= 1,
           "bus_reports: duration_ms >= 0, buses >= 1, period_ms >= 1 and areas >= 1")
    _check(0 <= congestion_prob <= 1 and 0 <= hot_congestion_prob <= 1 and 0 <= move_prob <= 1,
           "bus_reports: probabilities must be in [0, 1]")
    rng = np.random.default_rng(seed)
    phase = rng.integers(0, period_ms, size=buses)
    rounds = -(-duration_ms // period_ms) + 1
    ts = (phase[None, :] + period_ms * np.arange(rounds)[:, None])  # rounds x buses
    area = np.empty((rounds, buses), dtype=np.int64)
    area[0] = rng.integers(0, areas, size=buses)
    for k in range(1, rounds):  # a random walk over neighbouring areas
        step = rng.choice([-1, 1], size=buses) * (rng.random(buses) < move_prob)
        area[k] = (area[k - 1] + step) % areas
    hot = np.zeros(areas, dtype=bool)
    hot[_hot_areas(areas, hot_areas, seed)] = True
    p = np.where(hot[area], hot_congestion_prob, congestion_prob)
    congested = rng.random((rounds, buses)) < p
    delay = np.round(np.where(congested, rng.exponential(180, (rounds, buses)), 0), 1)
    ts_f = ts.ravel()
    keep = ts_f < duration_ms
    order = np.lexsort((np.tile(np.arange(buses), rounds)[keep], ts_f[keep]))
    bus_f = np.tile(np.arange(buses), rounds)[keep][order]
    cols = (ts_f[keep][order], bus_f, area.ravel()[keep][order], congested.ravel()[keep][order],
            delay.ravel()[keep][order])
    return [{"ts": int(t), "bus": int(b), "area": int(a), "congested": bool(c),
             "delay_s": float(d)} for t, b, a, c, d in zip(*cols, strict=True)]


def scats_reports(duration_ms: int, *, sensors: int = SENSORS,
                  period_ms: int = SENSOR_PERIOD_MS, areas: int = 40, hot_areas: int = 6,
                  seed: int = 0) -> list[dict[str, Any]]:
    """SCATS reports ``{"ts", "sensor", "area", "flow"}`` over ``[0, duration_ms)``, sorted
    by ``ts``: every sensor reports its junction's flow (vehicles/min) every ``period_ms``."""
    _check(duration_ms >= 0 and sensors >= 1 and period_ms >= 1 and areas >= 1,
           "scats_reports: duration_ms >= 0, sensors >= 1, period_ms >= 1 and areas >= 1")
    rng = np.random.default_rng(seed + 1)
    phase = rng.integers(0, period_ms, size=sensors)
    area = rng.integers(0, areas, size=sensors)
    hot = np.zeros(areas, dtype=bool)
    hot[_hot_areas(areas, hot_areas, seed)] = True
    base = np.where(hot[area], 45.0, 20.0)
    rounds = -(-duration_ms // period_ms) + 1
    ts = (phase[None, :] + period_ms * np.arange(rounds)[:, None]).ravel()
    flow = np.round(np.tile(base, rounds) * rng.lognormal(0, 0.35, rounds * sensors), 1)
    sid = np.tile(np.arange(sensors), rounds)
    keep = ts < duration_ms
    order = np.lexsort((sid[keep], ts[keep]))
    cols = (ts[keep][order], sid[keep][order], np.tile(area, rounds)[keep][order],
            flow[keep][order])
    return [{"ts": int(t), "sensor": int(s), "area": int(a), "flow": float(f)}
            for t, s, a, f in zip(*cols, strict=True)]


# -- delay injection --------------------------------------------------------------------------


class ZipfDelay:
    """Per-tuple delays from a Zipf law whose (duration, exponent, max) cycles over phases.

    ``phases``: ``(duration_s, exponent, max_ms)`` in wall-clock seconds; the paper's default
    is ``((20, 1.0, 10), (50, 0.35, 2))``. ``additive`` is False: the link model (module doc).
    """

    additive = False

    def __init__(self, phases: Sequence[tuple[float, float, int]] = ((20, 1.0, 10),
                                                                      (50, 0.35, 2)),
                 seed: int = 0):
        _check(len(phases) > 0, "ZipfDelay needs at least one phase")
        for d, e, m in phases:
            _check(d > 0 and e >= 0 and m >= 1,
                   f"ZipfDelay phase {(d, e, m)!r}: need duration > 0, exponent >= 0, max >= 1")
        self.phases = [(float(d), float(e), int(m)) for d, e, m in phases]
        self.cycle = sum(d for d, _, _ in self.phases)
        self._cdfs = []
        for _, e, m in self.phases:
            w = np.arange(1, m + 1, dtype=np.float64) ** -e
            self._cdfs.append(np.cumsum(w) / w.sum())
        self._rng = np.random.default_rng(seed)

    def phase_at(self, t: float) -> int:
        """Index of the phase at ``t`` seconds after the start."""
        t = t % self.cycle
        for k, (d, _, _) in enumerate(self.phases):
            if t < d:
                return k
            t -= d
        return len(self.phases) - 1

    def mean_ms(self, phase: int) -> float:
        cdf = self._cdfs[phase]
        p = np.diff(np.concatenate([[0.0], cdf]))
        return float((p * np.arange(1, len(cdf) + 1)).sum())

    def delay_ms(self, t: float) -> float:
        """The delay of a tuple sent at ``t`` seconds after the start."""
        cdf = self._cdfs[self.phase_at(t)]
        return float(np.searchsorted(cdf, self._rng.random(), side="right") + 1)


class ConstantDelay:
    """The same delay ``ms`` added to every tuple by a sequential writer (additive: the
    delays accumulate, module doc)."""

    additive = True

    def __init__(self, ms: float = 1.0):
        _check(ms >= 0, f"ConstantDelay: ms must be >= 0, got {ms!r}")
        self.ms = float(ms)

    def delay_ms(self, t: float) -> float:
        return self.ms


class DelayedReplay(Source):
    """Replays sorted records ``speedup`` times faster than event time, with injected delays.

    Tuple i is due ``(ts_i − ts_0) / speedup`` ms after the start; with a delay policy it
    leaves as described in the module doc. Sleeping follows a virtual clock, so the mean rate
    is exact even though the OS sleeps in coarser steps. With ``until_s`` the replay stops at
    that many seconds after the start (a delayed source does not get to send its backlog: the
    experiment is over). ``live = True`` tells executors to
    hand its tuples over one at a time (latency matters more than batching).
    """

    live = True

    def __init__(self, records: Sequence[dict[str, Any]], *, speedup: float = 10.0,
                 delay: ZipfDelay | ConstantDelay | None = None, name: str = "replay",
                 start: float | None = None, origin: int | None = 0,
                 until_s: float | None = None):
        _check(speedup > 0, f"{name}: speedup must be > 0, got {speedup!r}")
        super().__init__(name, "ts", True)
        self.records = records
        self.speedup = float(speedup)
        self.delay = delay
        self.start = start  # a shared perf_counter origin aligns several sources
        self.origin = origin  # event time due at the start (None: this source's first ts)
        self.until_s = until_s  # the experiment ends: no tuple leaves after this many seconds

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        for n, rec in enumerate(self.records, 1):
            yield self._ts_of(rec, n), rec, n

    def items(self) -> Iterator[tuple[int, Any]]:
        clock, sleep = time.perf_counter, time.sleep
        t0 = self.start if self.start is not None else clock()
        origin = self.origin
        leave = -math.inf  # virtual departure time of the previous tuple (s since t0)
        due = 0.0
        delay = self.delay
        for ts, rec in _check_sorted(self, self._raw()):
            if origin is None:
                origin = ts
            prev_due = due
            due = (ts - origin) / self.speedup / 1000.0
            if delay is None:
                leave = due
            elif delay.additive:  # leave_i = leave_{i-1} + (due_i - due_{i-1}) + d
                at = due if leave == -math.inf else leave + (due - prev_due)
                leave = at + delay.delay_ms(at) / 1000.0
            else:  # the link model: leave_i = max(due_i, leave_{i-1} + d_i)
                prev = max(leave, 0.0)
                leave = max(due, prev + delay.delay_ms(prev) / 1000.0)
            if self.until_s is not None and leave > self.until_s:
                return  # the end of the experiment (the rest of the input is not sent)
            ahead = leave - (clock() - t0)
            if ahead > 0.0005:
                sleep(ahead)
            self.read += 1
            yield ts, rec
