"""The flow ``bench run latency-load`` runs (:mod:`stretchflow_bench.latency_load`), a flow file
run as a user runs one::

    stretchflow run latency_load_flow.py --param query=currency --param rate=50000 \\
        --param tuples=3000000 --param out=level.json [--engine vsn --parallelism 1]

**What it measures.** Every output's delay from the *scheduled* send time of the input tuple
that made it (coordinated omission corrected, as HdrHistogram users measure): tuple ``i`` is
due at ``t0 + i / rate``, ``t0`` being the moment the source handed over tuple 0. A run that
falls behind does not move the schedule, so a stall is charged to every tuple that was due
during it, not only to the one that waited (a closed-loop measure from the actual send time
would hide those: the "coordinated omission" of load generators that wait for the system).

**The source** is a generator of NEXMark-like bids (``ts``, ``seq``, ``auction``, ``bidder``,
``price``) read through ``sf.io.iterable(...).at_rate(rate)``: the engine's own pacing
(:func:`stretchflow.io.sources.pace`), which is open-loop: item ``n`` no earlier than ``n /
rate`` s after the first, sent at once without sleeping when it is late, the schedule never
re-based (``tests/test_bench_latency_load.py`` checks this with a fake clock). Tuple ``i``'s
event time is ``floor(i * 1000 / rate)`` ms, its wall-clock schedule in event time. The
generator is cheap (numpy draws of 8 192 tuples at a time, a dict per tuple) because its cost
is the engine's budget too; the same generator, unpaced (``rate=0``), measures the capacity.
``seq`` (= ``i``) travels in the payload, so the sink computes the due time exactly instead of
from the millisecond ``ts``, which is floored (up to 1 ms early).

**The queries.** ``currency``: NEXMark Q1, every bid with its price in euros, a lambda map
(every input has exactly one output, same ``ts``, same ``seq``). ``window_count``: bids per
auction in tumbling 1 s windows (lambdas); a window's outputs are measured from the scheduled
time of the first tuple at or after the window's end (the one that closed it: its timestamp
is the watermark that passes the end); windows closed only by the end of input (no such
tuple) are counted apart, not measured.

**A deadline** (``deadline``, s): an engine that cannot keep up would take many times a level's
length to drain its schedule, so the source stops at its first check past ``t0 + deadline``
and the run says ``truncated``; the delays measured are then lower bounds (the tuples never
sent would have waited longer still).

**The sink** (:class:`DelaySink`, a ``Sink`` subclass: docs/api.md's sinks) reads the clock once
per hand-over from the engine (every item of a hand-over reached it at that moment), and keeps
the delays in a log-bucketed histogram of 1 % buckets (:class:`Histogram`). It must run in the
source's process to share ``t0`` (it records both process ids; ``perf_counter`` is
CLOCK_MONOTONIC, the same clock in every process of the machine). Tuples due in the first
``warmup`` seconds are left out of the histogram (start-up: imports done, but caches, the
allocator and an engine's threads still settling), not out of the counts. At the end of a
successful run (``commit``) it writes a JSON to ``out``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import stretchflow as sf
from stretchflow.io import Sink

#: relative width of a histogram bucket: bucket b holds [1.01^b, 1.01^(b+1)) µs, so a
#: percentile read as the bucket's geometric middle is within 0.5 % of the exact value
PRECISION = 1.01
_LOG = math.log(PRECISION)
#: tuples drawn by numpy at a time (one call per 8 192 tuples keeps the per-tuple cost to the
#: dict and the yield)
CHUNK = 8192
#: the generator reads the clock every this many tuples (and at the last) to see how far
#: behind schedule it is; reading it per tuple would cost the engine's budget ~60 ns a tuple
LAG_EVERY = 256
#: a source this late (s) counts as behind schedule: below it, a pull is merely the time a
#: hand-over takes
BEHIND_S = 0.001
AUCTIONS = 1000
WINDOW_MS = 1000
#: the quantiles the JSON gives (nearest rank, as stretchflow.runtime.latency.percentiles)
QUANTILES = {"p50": 0.5, "p99": 0.99, "p99_9": 0.999}
QUERIES = ("currency", "window_count")


# -- the schedule (pure: unit-tested) ---------------------------------------------------------
def bid_ts(i: int, rate: float) -> int:
    """Event time (ms) of tuple ``i`` at ``rate`` tuples/s: ``floor(i * 1000 / rate)``, the
    same float operations as the generator's numpy arrays, so both agree to the bit."""
    return int(i * 1000.0 / rate)


def due_s(i: int, rate: float) -> float:
    """Seconds after ``t0`` at which tuple ``i`` is due (``pace``'s schedule)."""
    return i / rate


def closing_index(end_ms: int, rate: float) -> int:
    """The first tuple whose event time is at or after ``end_ms``: the one whose timestamp,
    a watermark on a sorted source, closes a window ending at ``end_ms``."""
    i = max(0, math.ceil(end_ms * rate / 1000.0))
    # the float estimate can be one off either way; settle it on bid_ts itself
    while i > 0 and bid_ts(i - 1, rate) >= end_ms:
        i -= 1
    while bid_ts(i, rate) < end_ms:
        i += 1
    return i


def delay_s(now: float, t0: float, i: int, rate: float) -> float:
    """The delay of an output observed at ``now`` whose input tuple ``i`` was due at
    ``t0 + i / rate``."""
    return now - (t0 + i / rate)


def warm_index(warmup_s: float, rate: float) -> int:
    """The first tuple measured: those due before ``warmup_s`` are the warm-up."""
    return math.ceil(warmup_s * rate) if rate > 0 else 0


# -- the histogram -----------------------------------------------------------------------------
class Histogram:
    """Delays in log buckets of 1 % (HDR-style: memory bounded by the range of values, not
    their number), percentiles by nearest rank. Not :class:`stretchflow.runtime.latency.
    LatencyRecorder`: that one gives p50 and p99 only, announces itself to the live view and
    keeps a series and a lock per sample; this one is what the sink needs and no more."""

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.n = 0
        self.max_s = -math.inf
        self.min_s = math.inf

    def add(self, d: float) -> None:
        """One delay of ``d`` seconds (below 1 µs counts as 1 µs: the first bucket)."""
        us = d * 1e6
        b = int(math.log(us) / _LOG) if us > 1.0 else 0
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.n += 1
        if d > self.max_s:
            self.max_s = d
        if d < self.min_s:
            self.min_s = d

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile in seconds (nearest rank: the value of rank ``int(n * q)`` of
        the sorted delays), as its bucket's geometric middle kept within [min, max]; None
        when empty."""
        if not self.n:
            return None
        rank = min(self.n - 1, int(self.n * q))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen > rank:
                mid = PRECISION ** (b + 0.5) / 1e6
                return min(self.max_s, max(self.min_s, mid))
        return self.max_s  # not reached: the counts add up to n

    def summary_ms(self) -> dict[str, Any]:
        """The quantiles of :data:`QUANTILES` and the max in ms, and the count."""
        out: dict[str, Any] = {k: _ms(self.quantile(q)) for k, q in QUANTILES.items()}
        out["max"] = _ms(self.max_s) if self.n else None
        out["samples"] = self.n
        return out


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000.0, 4)


# -- the run's shared state, the source and the sink ---------------------------------------
class RunState:
    """What the source and the sink of one run share: the schedule's ``t0`` and how the source
    kept its schedule. One object held by both (not module globals: the flow file is loaded by
    ``runpy`` into a namespace of its own)."""

    def __init__(self, rate: float, ts_rate: float, tuples: int, clock: Callable[[], float],
                 deadline_s: float = 0.0):
        self.rate = rate  # tuples/s of the schedule; 0: unpaced (capacity)
        self.ts_rate = ts_rate  # tuples per s of event time
        self.tuples = tuples  # planned
        self.clock = clock
        #: the source stops this long after t0 (0: never), so that an engine that cannot keep
        #: up does not run on for many times the level's length; the run is then truncated
        self.deadline_s = deadline_s
        self.sent = tuples  # tuples the source handed over (fewer when truncated)
        self.truncated = False
        self.t0: float | None = None
        self.source_pid: int | None = None
        self.starts = 0  # times the generator was started (1 in a sound run)
        self.last_pull: float | None = None  # when the source took the last tuple
        self.lag_checks = 0
        self.behind = 0  # checks that found the source more than BEHIND_S late
        self.max_lag_s = 0.0
        self.final_lag_s = 0.0

    def check_lag(self, i: int, now: float) -> None:
        """The source takes tuple ``i`` at ``now``: how late is that against its due time?
        (``pace`` takes a tuple from us before it decides to sleep, so a positive lag is a
        tuple it sends at once, late.)"""
        lag = now - (self.t0 + i / self.rate)  # type: ignore[operator]
        self.lag_checks += 1
        if lag > BEHIND_S:
            self.behind += 1
        if lag > self.max_lag_s:
            self.max_lag_s = lag
        self.final_lag_s = lag

    def last_sent_s(self) -> float | None:
        """Seconds from ``t0`` to the send of the last tuple: ``pace`` sends it at its due time
        or, late, when it is taken."""
        if self.t0 is None or self.last_pull is None:
            return None
        due = due_s(self.sent - 1, self.rate) if self.rate else 0.0
        return max(due, self.last_pull - self.t0)


def bids(run: RunState, seed: int = 1) -> Iterator[dict[str, int]]:
    """``run.tuples`` bids in event-time order; sets ``run.t0`` as it hands over tuple 0 and
    checks its lateness every :data:`LAG_EVERY` tuples and at the last; stops early (the run
    truncated) at a check past ``run.deadline_s``."""
    run.starts += 1
    run.source_pid = os.getpid()
    clock, rate, n, deadline = run.clock, run.rate, run.tuples, run.deadline_s
    last = n - 1
    rng = np.random.default_rng(seed)
    i = 0
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        # floor(i * 1000 / ts_rate) as bid_ts computes it (non-negative: astype floors)
        ts = (np.arange(start, start + m, dtype=np.int64) * 1000.0 / run.ts_rate
              ).astype(np.int64).tolist()
        auction = rng.integers(0, AUCTIONS, m).tolist()
        bidder = rng.integers(0, 100_000, m).tolist()
        price = rng.integers(100, 1_000_000, m).tolist()
        for t, a, b, p in zip(ts, auction, bidder, price, strict=True):
            if not i & (LAG_EVERY - 1) or i == last:
                now = clock()
                if i == 0:
                    run.t0 = now  # pace() takes its own t0 µs after: delays err high, never low
                elif rate:
                    run.check_lag(i, now)
                    if deadline and now - run.t0 > deadline:  # type: ignore[operator]
                        run.sent, run.truncated, run.last_pull = i, True, now
                        return
                if i == last:
                    run.last_pull = now
            yield {"ts": t, "seq": i, "auction": a, "bidder": b, "price": p}
            i += 1


class DelaySink(Sink):
    """Each output's delay from its input's scheduled time (:func:`delay_s`) into a
    :class:`Histogram`, counts, and a JSON at ``commit``."""

    name = "latency"

    def __init__(self, run: RunState, query: str, out: str, warmup_s: float):
        self.run = run
        self.query = query
        self.out = out
        self.warmup_s = warmup_s
        self.hist = Histogram()
        self.count = 0

    def open(self) -> None:
        self.count = 0
        self.hist = Histogram()
        self.sink_pid = os.getpid()
        self.first_output: float | None = None
        self.last_output: float | None = None
        self.sum_counts = 0  # window_count: the counts add up to the tuples
        self.closed_by_end = 0  # window_count: outputs of windows no tuple closed
        self._end_ms: int | None = None  # window_count: the last window end seen ...
        self._closer = 0  # ... and the tuple that closed it

    def write(self, items: list[tuple[int, Any]]) -> None:
        now = self.run.clock()
        if self.first_output is None:
            self.first_output = now
        self.last_output = now
        self.count += len(items)
        run = self.run
        if not run.rate:  # unpaced: the capacity run counts and times, no schedule to miss
            if self.query == "window_count":
                self.sum_counts += sum(p["count"] for _, p in items)
            return
        t0, inv, add = run.t0, 1.0 / run.rate, self.hist.add
        base = now - t0  # type: ignore[operator]
        warm = warm_index(self.warmup_s, run.rate)
        if self.query == "currency":
            for _, p in items:
                i = p["seq"]
                if i >= warm:
                    add(base - i * inv)
            return
        n = run.sent  # final once the source ended, before the end of input's outputs
        for ts, p in items:
            self.sum_counts += p["count"]
            if ts != self._end_ms:
                self._end_ms, self._closer = ts, closing_index(ts, run.ts_rate)
            i = self._closer
            if i >= n:
                self.closed_by_end += 1
            elif i >= warm:
                add(base - i * inv)

    def commit(self) -> None:
        run = self.run
        t0 = run.t0
        span = run.last_sent_s()
        rel = (lambda t: None if t is None or t0 is None else t - t0)
        last_out = rel(self.last_output)
        doc = {
            "query": self.query,
            "rate": run.rate,
            "ts_rate": run.ts_rate,
            "tuples": run.tuples,
            "sent": run.sent,
            "truncated": run.truncated,
            "deadline_s": run.deadline_s,
            "outputs": self.count,
            "source_pid": run.source_pid,
            "sink_pid": self.sink_pid,
            "same_process": run.source_pid == self.sink_pid,
            "source_starts": run.starts,
            "warmup_s": self.warmup_s,
            "warmup_tuples": min(run.tuples, warm_index(self.warmup_s, run.rate)),
            "first_output_s": rel(self.first_output),
            "last_output_s": last_out,
            "last_sent_s": span,
            # (N - 1) intervals between N sends: exactly the offered rate when on schedule
            "achieved_rate": ((run.sent - 1) / span if span else None),
            # the engine's own rate: tuples over the time from tuple 0 to the last output
            "own_rate": (run.sent / last_out if last_out else None),
            "delay_ms": self.hist.summary_ms(),
            "behind": {"checks": run.lag_checks, "behind": run.behind,
                       "max_lag_ms": round(run.max_lag_s * 1000.0, 3),
                       "final_lag_ms": round(run.final_lag_s * 1000.0, 3),
                       "every": LAG_EVERY, "threshold_ms": BEHIND_S * 1000.0},
        }
        if self.query == "window_count":
            doc["sum_counts"] = self.sum_counts
            doc["closed_by_end"] = self.closed_by_end
        with open(self.out, "w") as f:
            json.dump(doc, f, indent=1)

    def abort(self) -> None:
        pass  # a failed run writes no JSON: the benchmark reports the run's own error


# -- the flow ------------------------------------------------------------------------------------
def currency(bids: sf.Stream) -> sf.Stream:
    """NEXMark Q1: every bid with its price in euros beside it (one output per input)."""
    return bids.map(lambda t: {**t, "price_eur": t["price"] * 0.908})


def window_count(bids: sf.Stream) -> sf.Stream:
    """Bids per auction in tumbling 1 s windows."""
    return bids.aggregate(size=WINDOW_MS, keys=lambda t: t["auction"], **sf.count(),
                          output=lambda k, n: {"auction": k, "count": n})


def build_flow(params: dict[str, str]) -> sf.Flow:
    """``query`` (currency, window_count), ``tuples``, ``rate`` (tuples/s; 0: unpaced),
    ``ts_rate`` (tuples per s of event time; default ``rate``, required when unpaced),
    ``warmup`` (s), ``deadline`` (s after t0 the source stops; 0: never), ``seed``, ``out``
    (the JSON)."""
    query = params.get("query", "currency")
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; queries: {', '.join(QUERIES)}")
    rate = float(params.get("rate", 0))
    ts_rate = float(params.get("ts_rate") or rate)
    if ts_rate <= 0:
        raise ValueError("an unpaced run (rate=0) needs ts_rate > 0")
    run = RunState(rate, ts_rate, int(params["tuples"]), time.perf_counter,
                   float(params.get("deadline", 0)))
    seed = int(params.get("seed", 1))
    src = sf.io.iterable(lambda: bids(run, seed), name="bids")
    if rate:
        src = src.at_rate(rate)
    flow = sf.Flow(f"latency-{query}")
    out = {"currency": currency, "window_count": window_count}[query](flow.source(src))
    out.sink(DelaySink(run, query, params["out"], float(params.get("warmup", 0))))
    return flow
