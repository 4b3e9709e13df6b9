"""One core for the threads of a run that take turns at the GIL, while they do (issue #32).

CPython 3.11 runs one thread's Python at a time (the GIL), so the threads of a run that each
run Python — an O+'s instances calling the user's functions tuple by tuple, a source parsing
JSON Lines — take turns whatever the cores. On a machine with several cores the scheduler
starts each turn on whichever core is free: at a hand-over of the GIL the thread that takes it
often runs on the other core, and its working set (σ's dictionaries, the batch's rows, the
interpreter's own state) moves between the cores' caches. With the instances of a lambda flow
handing the GIL back and forth at every batch, that cost as much as the instances' own extra
work in some runs: hot items with lambdas on vsn at parallelism 2 (1 M bids, JSON Lines, the
2-core machine of the results) took 1.7 times the CPU of parallelism 1, and 1.3 times with
these threads on one core; the same run pinned against unpinned, alternating, took 0.81 and
0.95 of the wall time (medians of 4 and of 6 pairs on a noisy machine; single pairs 0.69 to
1.15). Issue #32's closing note of 2026-12-07 has the runs.

But a user's function can release the GIL (numpy, numba, a C extension, I/O), and then the
same threads run at once on several cores: pinned, 2 ordered workers on numpy operators of
1.2 ms per tuple used one core instead of 1.98 and lost their whole speed-up (the re-run of
ordered-scaling and vsn-scalejoin, issue #33). What a thread's code is cannot tell which case
a run is in; what the threads do can. So the pinning is **measured** (:class:`PythonCore`):
the candidate threads (those an executor marks ``python=True``) start where the scheduler puts
them, and every :data:`PERIOD` seconds the run reads their CPU time (``/proc/self/task/<tid>/
schedstat``, in nanoseconds). If together they used between :data:`BUSY` and :data:`SERIAL`
cores — busy, yet never more than one core at once: taking turns — they are put on one CPU.
More than :data:`SERIAL` cores means their work runs in parallel, so they stay free; less than
:data:`BUSY` says nothing (idle threads take no turns) and they stay as they are. Pinned
threads cannot show that they would use a second core, so every :data:`REPROBE` periods they
are let go for one period and measured again: a run whose work turns GIL-free (or a core that
another process takes) gets its threads back within about two seconds. Ordered-scaling's 2
workers use 1.98 cores again; a lambda flow spends one period in :data:`REPROBE` + 1 unpinned.

Only candidates are measured: a columnar O+, a source Arrow parses (Parquet, CSV, JSON Lines
read into tables: Arrow's threads, and the parse-ahead threads, take the affinity of the
thread that starts them) and the sinks are never pinned. A thread a pinned thread starts
inherits its CPU. Nothing is pinned with ``gil_core='off'``, on an interpreter without the
GIL, on a platform without per-thread affinity or schedstat, or in a process allowed one CPU.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .result import gil_serializes_threads

__all__ = ["BUSY", "PERIOD", "REPROBE", "SERIAL", "PythonCore", "gil_bound_source",
           "python_core"]

#: seconds between two measurements of the candidate threads
PERIOD = 0.2
#: at least this many cores used by the candidates together: they are busy
BUSY = 0.5
#: at most this many cores: never two at once, so they take turns at the GIL (two threads
#: running numpy in parallel use 1.9-2.0 on 2 cores; two running Python, 0.98-1.0)
SERIAL = 1.25
#: pinned threads are let go for one period in every REPROBE + 1, to see whether they would
#: use more than one core
REPROBE = 10
#: changes of state a run keeps in its log (a run that keeps changing counts the rest)
MAX_CHANGES = 50


def python_core(on: bool) -> int | None:
    """The CPU the run's Python threads may share, or None when they are never pinned:
    ``on`` False, no GIL, no ``sched_setaffinity``, no per-thread schedstat to measure them
    by, or one CPU allowed. The highest-numbered CPU this process may use (the first ones
    usually take the most interrupts)."""
    if not on or not gil_serializes_threads() or not hasattr(os, "sched_setaffinity"):
        return None
    if thread_cpu_s(threading.get_native_id()) is None:
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except OSError:
        return None
    return cpus[-1] if len(cpus) > 1 else None


def thread_cpu_s(tid: int) -> float | None:
    """CPU seconds thread ``tid`` of this process has run (None: it has ended, or the kernel
    keeps no schedstat)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def judge(pinned: bool, cores: float) -> bool:
    """Whether the candidates should be pinned after a period in which they used ``cores``
    cores together while unpinned (``pinned``: the state before; kept when idle)."""
    if cores > SERIAL:
        return False
    if cores >= BUSY:
        return True
    return pinned


class PythonCore:
    """The run's candidate threads and whether they share :attr:`cpu` now (module doc).

    :meth:`wrap` a candidate's function before its thread starts; :meth:`start` the
    measurements once the threads run and :meth:`stop` them at the end of the run. Correct
    without the GIL: the threads, the state and the log change under one lock, and a thread
    starting while the run is pinned pins itself under it."""

    def __init__(self, cpu: int, period: float = PERIOD):
        self.cpu = cpu
        self.period = period
        self.allowed = os.sched_getaffinity(0)
        self.names: list[str] = []  # every candidate, in the order made
        #: the first MAX_CHANGES judgements that changed the state: (seconds since the start,
        #: "pin" or "free", the cores the candidates used in that period); n_changes counts all
        self.changes: list[tuple[float, str, float]] = []
        self.n_changes = 0
        self.periods = 0  # measurements made
        self.pinned_s = 0.0
        self._lock = threading.Lock()
        self._tids: dict[int, str] = {}
        self._pinned = False
        self._done = threading.Event()
        self._judge: threading.Thread | None = None
        self._t0 = self._since = 0.0

    def wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``fn`` as a candidate thread's target: measured while it runs, pinned while the
        run's candidates are."""
        with self._lock:  # a run may make threads from several (vsn's reconfigurations)
            self.names.append(name)

        def target(*args: Any) -> Any:
            tid = threading.get_native_id()
            with self._lock:
                self._tids[tid] = name
                if self._pinned:
                    self._set(tid, {self.cpu})
            try:
                return fn(*args)
            finally:
                with self._lock:
                    self._tids.pop(tid, None)

        target.__name__ = getattr(fn, "__name__", "target")
        return target

    def start(self) -> None:
        self._t0 = self._since = time.perf_counter()
        self._judge = threading.Thread(target=self._measure, name="gil_core", daemon=True)
        self._judge.start()

    def stop(self) -> None:
        self._done.set()
        if self._judge is not None:
            self._judge.join()
        with self._lock:
            if self._pinned:
                self.pinned_s += time.perf_counter() - self._since

    def report(self) -> dict[str, Any]:
        """What a result says (``extra["gil_core"]``): the CPU, the candidates, the seconds
        they were pinned and the judgements that changed the state."""
        with self._lock:
            return {"cpu": self.cpu, "threads": list(self.names),
                    "pinned_s": round(self.pinned_s, 3),
                    "changes": [list(c) for c in self.changes], "n_changes": self.n_changes}

    def _set(self, tid: int, cpus: set[int]) -> None:
        # a thread that ended, or one the system refuses to move, stays where it is: pinning
        # is an optimization, never a failure
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass

    def _apply(self, on: bool, now: float) -> None:
        """Pins (``on``) or frees every live candidate. Under the lock."""
        if self._pinned and not on:
            self.pinned_s += now - self._since
        elif on and not self._pinned:
            self._since = now
        self._pinned = on
        for tid in self._tids:
            self._set(tid, {self.cpu} if on else self.allowed)

    def _read(self) -> tuple[dict[int, float], float]:
        with self._lock:
            tids = list(self._tids)
        return {t: c for t in tids if (c := thread_cpu_s(t)) is not None}, time.perf_counter()

    def _measure(self) -> None:
        wanted = False  # the last judgement; a probe's free period does not change it
        since_probe = 0
        before, t_before = self._read()
        while not self._done.wait(self.period):
            now_cpu, now = self._read()
            # a thread that started within the period counts from the next one
            used = sum(c - before[t] for t, c in now_cpu.items() if t in before)
            cores = used / max(now - t_before, 1e-9)
            with self._lock:
                if self._done.is_set():
                    return
                self.periods += 1
                if self._pinned:  # pinned, they cannot show a second core's worth of work
                    since_probe += 1
                    if since_probe >= REPROBE:
                        since_probe = 0
                        self._apply(False, now)
                else:
                    got = judge(wanted, cores)
                    if got != wanted:
                        self.n_changes += 1
                        if len(self.changes) < MAX_CHANGES:
                            self.changes.append((round(now - self._t0, 3),
                                                 "pin" if got else "free", round(cores, 2)))
                    wanted = got
                    self._apply(got, now)
            before, t_before = now_cpu, now


def gil_bound_source(spec: Any) -> bool:
    """Whether reading source ``spec`` holds the GIL for most of its work (``Source.gil_bound``;
    a source class of the user's that does not say is taken to)."""
    return getattr(spec, "gil_bound", True)
