"""Metrics: one schema for what executors measure, and the sampler that feeds controllers.

Every period the sampler asks the executor for one
:class:`~stretchflow.elastic.controller.Metrics` per elastic operator, appends it to the run's
:class:`MetricsLog` (``RunResult.extra["metrics"]``) and hands it to the operator's controller;
a decision goes back to the executor through its ``apply`` callback. The executor only measures
and applies; the loop, the log's shape and the controller calls are written once, here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .control import RunControl


class MetricsLog:
    """Per-period measurements and parallelism over time, in one schema for every engine."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        self.rows: list[dict[str, Any]] = []
        self.parallelism: dict[str, list[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def record(self, operator: str, m: Any) -> dict[str, Any]:
        """Logs a :class:`~stretchflow.elastic.controller.Metrics` of ``operator``."""
        row = {"operator": operator, "time": round(m.time, 4),
               "parallelism": m.parallelism, "input_rate": m.input_rate,
               "throughput": m.throughput, "congestion": m.congestion,
               "loads": list(m.per_instance_load)}
        with self._lock:
            self.rows.append(row)
        return row

    def parallelism_changed(self, operator: str, p: int, now: float | None = None) -> None:
        """Records that ``operator`` runs ``p`` instances from now on."""
        t = (time.perf_counter() if now is None else now) - self.t0
        with self._lock:
            series = self.parallelism.setdefault(operator, [])
            if not series or series[-1][1] != p:
                series.append((round(max(t, 0.0), 4), p))


class MetricsSampler:
    """A thread calling ``measure()`` every ``period`` seconds; each ``(operator, Metrics)``
    it returns is logged and handed to ``controller.observe``; a decision is passed to
    ``apply(operator, decision)``. Stops with the run, or by :meth:`stop`."""

    def __init__(self, control: RunControl, log: MetricsLog, period: float,
                 measure: Callable[[], list[tuple[str, Any]]],
                 controller: Any = None,
                 apply: Callable[[str, Any], None] | None = None):
        if not period > 0:
            raise ValueError(f"the metrics period must be > 0 s, got {period!r}")
        self.control = control
        self.log = log
        self.period = period
        self.measure = measure
        self.controller = controller
        self.apply = apply
        self._stop = threading.Event()
        control.on_abort(lambda _e: self._stop.set())
        self._thread = control.thread(self._loop, name="metrics")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def tick(self) -> None:
        """One period's work (also callable from an executor's own thread)."""
        for operator, m in self.measure():
            self.log.record(operator, m)
            if self.controller is None:
                continue
            decision = self.controller.observe(m)
            if decision is not None and self.apply is not None:
                self.apply(operator, decision)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.tick()
