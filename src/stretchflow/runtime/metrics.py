"""Metrics: one schema for what executors measure, and the sampler that feeds controllers.

Every period the sampler asks the executor for one
:class:`~stretchflow.elastic.controller.Metrics` per elastic operator, appends it to the run's
:class:`MetricsLog` (``RunResult.extra["metrics"]``) and hands it to the operator's controller;
a decision goes back to the executor through its ``apply`` callback. The executor only measures
and applies; the loop, the log's shape and the controller calls are written once, here.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .control import RunControl

log = logging.getLogger(__name__)

# Watchers of the runs started in this context (the live web view): each is called with every
# MetricsLog made, and may add itself to its ``listeners``. A context variable, not a global:
# two runs in two threads of one process (tests) do not see each other's logs.
_WATCHERS: contextvars.ContextVar[tuple[Callable[[Any], None], ...]] = \
    contextvars.ContextVar("stretchflow_metrics_watchers", default=())


@contextmanager
def watching(callback: Callable[[Any], None]) -> Iterator[None]:
    """Calls ``callback(obj)`` for each :class:`MetricsLog` (or other run object passed to
    :func:`announce`) made in this context while the block runs."""
    token = _WATCHERS.set(_WATCHERS.get() + (callback,))
    try:
        yield
    finally:
        _WATCHERS.reset(token)


def announce(obj: Any) -> None:
    """Tells the watchers of this context about a run object (a MetricsLog, a
    LatencyRecorder): what the live view reads while the run goes on."""
    for cb in _WATCHERS.get():
        cb(obj)


class MetricsLog:
    """Per-period measurements and parallelism over time, in one schema for every engine."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        self.rows: list[dict[str, Any]] = []
        self.parallelism: dict[str, list[tuple[float, int]]] = {}
        # controller decisions: {"operator", "time", "parallelism", "reason"}
        self.decisions: list[dict[str, Any]] = []
        # objects with on_row(row), on_parallelism(operator, t, p), on_decision(event); called
        # outside the lock, from the thread that logged
        self.listeners: list[Any] = []
        self._lock = threading.Lock()
        announce(self)

    def record(self, operator: str, m: Any) -> dict[str, Any]:
        """Logs a :class:`~stretchflow.elastic.controller.Metrics` of ``operator``."""
        row = {"operator": operator, "time": round(m.time, 4),
               "parallelism": m.parallelism, "input_rate": m.input_rate,
               "throughput": m.throughput, "congestion": m.congestion,
               "loads": list(m.per_instance_load)}
        backlog = (getattr(m, "extras", None) or {}).get("backlog")
        if backlog is not None:  # tuples waiting in the operator's input (ESG, SSG, queues)
            row["backlog"] = backlog
        with self._lock:
            self.rows.append(row)
        for listener in self.listeners:
            listener.on_row(row)
        return row

    def decision(self, operator: str, decision: Any, now: float | None = None) -> None:
        """Records a controller's decision for ``operator`` (applied or not: the executor
        says by a parallelism change)."""
        t = (time.perf_counter() if now is None else now) - self.t0
        event = {"operator": operator, "time": round(max(t, 0.0), 4),
                 "parallelism": getattr(decision, "parallelism", None),
                 "reason": str(getattr(decision, "reason", "") or "")}
        with self._lock:
            self.decisions.append(event)
        log.debug("controller decision for %s at %.1f s: parallelism %s (%s)", operator,
                  event["time"], event["parallelism"], event["reason"] or "no reason given")
        for listener in self.listeners:
            listener.on_decision(event)

    def parallelism_changed(self, operator: str, p: int, now: float | None = None) -> None:
        """Records that ``operator`` runs ``p`` instances from now on."""
        t = (time.perf_counter() if now is None else now) - self.t0
        with self._lock:
            series = self.parallelism.setdefault(operator, [])
            changed = not series or series[-1][1] != p
            if changed:
                series.append((round(max(t, 0.0), 4), p))
        if changed:
            log.debug("%s runs %d instance(s) from %.1f s", operator, p, max(t, 0.0))
            for listener in self.listeners:
                listener.on_parallelism(operator, round(max(t, 0.0), 4), p)


class MetricsSampler:
    """Every ``period`` seconds, ``measure()``: each ``(operator, Metrics)`` it returns is
    logged and handed to ``controller.observe``; a decision is logged and passed to
    ``apply(operator, decision)`` (with ``note_decisions``, each row also says what the
    controller answered: ``decision``, the parallelism asked for or None, and ``reason``).

    The periods run on a thread of their own (:meth:`start`, until :meth:`stop` or the end of
    the run), or on an executor's thread that calls :meth:`tick` where its algorithm can act
    on a decision (SN's splitter, between two flushes)."""

    def __init__(self, control: RunControl, log: MetricsLog, period: float,
                 measure: Callable[[], list[tuple[str, Any]]],
                 controller: Any = None,
                 apply: Callable[[str, Any], None] | None = None,
                 note_decisions: bool = False):
        if not period > 0:
            raise ValueError(f"the metrics period must be > 0 s, got {period!r}")
        self.control = control
        self.log = log
        self.period = period
        self.measure = measure
        self.controller = controller
        self.apply = apply
        self.note_decisions = note_decisions
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Runs the periods on a thread of the run."""
        self.control.on_abort(lambda _e: self._stop.set())
        self._thread = self.control.thread(self._loop, name="metrics")
        self._thread.start()

    def stop(self, final: bool = False) -> None:
        """Ends the periods (``final``: the last one, cut short, is measured too, unless the
        run failed)."""
        self._stop.set()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join()
        if final and t is not None and self.control.error is None:
            self.tick()

    def tick(self) -> None:
        """One period's work."""
        for operator, m in self.measure():
            row = self.log.record(operator, m)
            if self.controller is None:
                continue
            decision = self.controller.observe(m)
            if self.note_decisions:
                row["decision"] = getattr(decision, "parallelism", None)
                row["reason"] = getattr(decision, "reason", None) or None
            if decision is not None:
                self.log.decision(operator, decision)
                if self.apply is not None:
                    self.apply(operator, decision)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.tick()
