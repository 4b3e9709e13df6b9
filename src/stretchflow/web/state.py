"""The live view's model of one run: the flow's graph and what it did over time.

Fed from three places, none of which is an executor's internals: the run's
:class:`~stretchflow.runtime.metrics.MetricsLog` (rows per period, parallelism changes,
controller decisions; through its ``listeners``), a poller reading the sources' ``read`` and
the sinks' ``count`` counters every ``interval`` seconds, and the :class:`RunResult` at the end
(reconfiguration durations, the whole-run latency). A
:class:`~stretchflow.runtime.latency.LatencyRecorder` announced to the watchers
(:func:`stretchflow.runtime.metrics.announce`) adds latency while the run goes on, and a
:class:`~stretchflow.runtime.checkpoint_stats.CheckpointStats` each checkpoint as it commits
(its duration, write time and bytes; a ``checkpoint`` event on the timeline).

Times are seconds since the watch started. Series are thinned by halving when they reach
``max_points``, so a long run keeps bounded memory and still spans its whole length.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..runtime.checkpoint_stats import CheckpointStats
from ..runtime.latency import LatencyRecorder
from ..runtime.metrics import MetricsLog

MAX_POINTS = 1200


class _Series:
    """Columns of one node's measurements over time, thinned together."""

    FIELDS = ("t", "in_rate", "out_rate", "parallelism", "busy", "congestion", "backlog")

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {f: [] for f in self.FIELDS}

    def add(self, max_points: int, **values: Any) -> None:
        for f in self.FIELDS:
            self.cols[f].append(values.get(f))
        if len(self.cols["t"]) >= max_points:  # keep every other point: bounded, whole run
            for f in self.FIELDS:
                self.cols[f] = self.cols[f][::2]


class RunState:
    """What the live view, /metrics and the report show of one run of ``flow``."""

    def __init__(self, flow: Any, engine: str, interval: float = 0.25,
                 max_points: int = MAX_POINTS):
        self.flow_name = flow.name
        self.engine = engine
        self.interval = interval
        self.max_points = max_points
        self.t0 = time.perf_counter()
        self.started = time.time()
        self.status = "running"
        self.version = 0  # bumped on every change: the page redraws when it moves
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self.nodes: list[dict[str, Any]] = []
        self._sources: dict[str, Any] = {}
        self._sinks: dict[str, Any] = {}
        for node in flow.nodes:
            self.nodes.append({"name": node.name, "kind": node.kind,
                               "inputs": [u.name for u in node.inputs]})
            if node.kind == "source":
                self._sources[node.name] = node.spec
        for k, (node, sink) in enumerate(flow.sinks):
            name = f"sink {getattr(sink, 'name', None) or k}"
            self.nodes.append({"name": name, "kind": "sink", "inputs": [node.name]})
            self._sinks[name] = sink
        self.series: dict[str, _Series] = {n["name"]: _Series() for n in self.nodes}
        # per node: the latest values and the counters /metrics exports
        self.current: dict[str, dict[str, Any]] = {n["name"]: {} for n in self.nodes}
        self.totals: dict[str, dict[str, float]] = {
            n["name"]: {"in": 0.0, "out": 0.0} for n in self.nodes}
        self.events: list[dict[str, Any]] = []
        self.reconfigurations: dict[str, int] = {}
        self.reconfiguration_durations: list[tuple[str, float]] = []  # (operator, seconds)
        self.latency: dict[str, list[Any]] = {"t": [], "p50": [], "p99": []}
        self.latency_summary: dict[str, Any] = {}
        self.recorders: list[LatencyRecorder] = []
        self.checkpoints: int | None = None
        # one record per committed checkpoint: t (state time), epoch, duration_ms, write_ms,
        # bytes; live from an announced CheckpointStats, else from the result at the end
        self.checkpoint_log: list[dict[str, Any]] = []
        self.checkpoints_live = False
        self.result: dict[str, Any] = {}
        self._last_counts: dict[str, tuple[float, int]] = {}
        self._last_latency_t = 0.0
        self._row_t: dict[str, float] = {}
        self._thread = threading.Thread(target=self._loop, name="web-state", daemon=True)

    # -- feeding ----------------------------------------------------------------------------------
    def attach(self, obj: Any) -> None:
        """A run object announced while the watch runs (a MetricsLog or a LatencyRecorder)."""
        if isinstance(obj, MetricsLog):
            obj.listeners.append(_LogListener(self, obj))
        elif isinstance(obj, LatencyRecorder):
            with self._lock:
                self.recorders.append(obj)
        elif isinstance(obj, CheckpointStats):
            with self._lock:
                self.checkpoints_live = True
                if self.checkpoints is None:
                    self.checkpoints = 0
            obj.listeners.append(self)
            for rec in obj.log():  # committed before the watch saw it (never today)
                self.on_checkpoint(obj, rec)

    def now(self) -> float:
        return round(time.perf_counter() - self.t0, 4)

    def on_row(self, log: MetricsLog, row: dict[str, Any]) -> None:
        name = row["operator"]
        if name not in self.series:
            return  # an operator the flow does not name (never today): not drawn
        t = round(log.t0 + row["time"] - self.t0, 4)
        loads = row.get("loads") or []
        busy = sum(loads) / len(loads) if loads else None
        with self._lock:
            dt = max(0.0, t - self._row_t.get(name, t))
            self._row_t[name] = t
            tot = self.totals[name]
            tot["in"] += (row.get("input_rate") or 0.0) * dt
            tot["out"] += (row.get("throughput") or 0.0) * dt
            cur = self.current[name]
            cur.update(parallelism=row["parallelism"], in_rate=row.get("input_rate"),
                       out_rate=row.get("throughput"), busy=busy, loads=loads,
                       congestion=row.get("congestion"), backlog=row.get("backlog"))
            self.series[name].add(self.max_points, t=t, in_rate=cur["in_rate"],
                                  out_rate=cur["out_rate"], parallelism=cur["parallelism"],
                                  busy=busy, congestion=cur["congestion"],
                                  backlog=cur["backlog"])
            self.version += 1

    def on_parallelism(self, log: MetricsLog, operator: str, t: float, p: int) -> None:
        t = round(log.t0 + t - self.t0, 4)
        with self._lock:
            cur = self.current.setdefault(operator, {})
            before = cur.get("parallelism")
            cur["parallelism"] = p
            if operator in self.series:  # the step is drawn where it happened, not a period later
                self.series[operator].add(self.max_points, t=max(t, 0.0), parallelism=p)
            if before is not None and before != p:  # the first value is the start, not a change
                kind = "migration" if self.engine == "sn" else "reconfiguration"
                self.reconfigurations[operator] = self.reconfigurations.get(operator, 0) + 1
                self.events.append({"t": max(t, 0.0), "kind": kind, "operator": operator,
                                    "text": f"{operator}: {before} -> {p} instances"})
            self.version += 1

    def on_decision(self, log: MetricsLog, event: dict[str, Any]) -> None:
        t = round(log.t0 + event["time"] - self.t0, 4)
        why = f" ({event['reason']})" if event.get("reason") else ""
        with self._lock:
            self.events.append({"t": max(t, 0.0), "kind": "decision",
                                "operator": event["operator"],
                                "text": f"controller: {event['operator']} to "
                                        f"{event['parallelism']}{why}"})
            self.version += 1

    def on_checkpoint(self, stats: CheckpointStats, rec: dict[str, Any]) -> None:
        """A checkpoint committed (called by the committing thread, outside its lock)."""
        self._add_checkpoint(round(stats.t0 + rec["time"] - self.t0, 4), rec)

    def _add_checkpoint(self, t: float, rec: dict[str, Any]) -> None:
        with self._lock:
            entry = {"t": max(t, 0.0), "epoch": rec["epoch"],
                     "duration_ms": rec["duration_ms"], "write_ms": rec["write_ms"],
                     "bytes": rec["bytes"]}
            self.checkpoint_log.append(entry)
            self.checkpoints = max(self.checkpoints or 0, len(self.checkpoint_log))
            self.events.append({"t": entry["t"], "kind": "checkpoint", "operator": "",
                                "duration": rec["duration_ms"] / 1000.0,
                                "text": f"checkpoint {rec['epoch']}: {rec['duration_ms']:.0f} "
                                        f"ms from barrier to manifest ({rec['write_ms']:.0f} "
                                        f"ms writing {rec['bytes']:,} bytes)"})
            self.version += 1

    def poll(self) -> None:
        """One sample of the source and sink counters and of the announced latency."""
        t = self.now()
        with self._lock:
            for name, spec in self._sources.items():
                self._count(name, t, getattr(spec, "read", 0) or 0, "out")
            for name, sink in self._sinks.items():
                self._count(name, t, getattr(sink, "count", 0) or 0, "in")
            self._poll_latency(t)
            self.version += 1

    def _count(self, name: str, t: float, n: int, side: str) -> None:
        # a source's counter moves every few thousand records: the rate is taken between two
        # moves, not between two polls (which would alternate zeros and spikes)
        t_prev, n_prev = self._last_counts.get(name, (0.0, 0))
        if n == n_prev or t <= t_prev:
            return
        rate = (n - n_prev) / (t - t_prev)
        self._last_counts[name] = (t, n)
        self.totals[name][side] = float(n)
        cur = self.current[name]
        cur[f"{side}_rate"] = rate
        self.series[name].add(self.max_points, t=t, **{f"{side}_rate": rate})

    def _poll_latency(self, t: float) -> None:
        if not self.recorders:
            return
        rec = self.recorders[-1]
        self.latency_summary = rec.summary()
        # the recorder's series is relative to its own t0 (reset by the executor at start)
        shift = rec.t0 - self.t0
        window = [ms for s, ms in rec.series() if self._last_latency_t < s + shift <= t]
        self._last_latency_t = t
        if window:
            window.sort()
            n = len(window)
            self._add_latency(t, window[n // 2], window[min(n - 1, int(n * 0.99))])

    def _add_latency(self, t: float, p50: float, p99: float) -> None:
        lat = self.latency
        lat["t"].append(t)
        lat["p50"].append(round(p50, 3))
        lat["p99"].append(round(p99, 3))
        if len(lat["t"]) >= self.max_points:
            for k in lat:
                lat[k] = lat[k][::2]

    # -- life -------------------------------------------------------------------------------------
    def start(self) -> None:
        self.poll()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def finish(self, result: Any) -> None:
        """The run ended: its result fills in what was known only at the end."""
        self.stop()
        self.poll()
        extra = result.extra
        with self._lock:
            self.status = "finished"
            for rec in extra.get("reconfigurations") or []:
                op = rec.get("operator", "")
                if rec.get("applied") and rec.get("duration_ms") is not None:
                    self.reconfiguration_durations.append((op, rec["duration_ms"] / 1000.0))
                if not rec.get("applied"):
                    self.events.append({"t": self.now(), "kind": "decision", "operator": op,
                                        "text": f"{op}: to {rec.get('parallelism_after')} "
                                                f"not applied ({rec.get('note', '')})"})
            if extra.get("latency_ms", {}).get("samples"):
                self.latency_summary = dict(extra["latency_ms"])
                if not self.latency["t"] and extra.get("latency_series"):
                    self._latency_from_series(extra["latency_series"])
            if "checkpoints" in extra:
                self.checkpoints = extra["checkpoints"]
        if not self.checkpoints_live:  # an engine that did not announce its stats
            for rec in extra.get("checkpoint_log") or []:
                self._add_checkpoint(rec["time"], rec)  # (its own t0: about the run's start)
        with self._lock:
            self.result = {"summary": result.summary(), "elapsed": round(result.elapsed, 4),
                           "tuples_in": dict(result.tuples_in),
                           "tuples_out": dict(result.tuples_out),
                           "reconfigurations": list(extra.get("reconfigurations") or [])}
            self.version += 1

    def _latency_from_series(self, series: list[tuple[float, float]]) -> None:
        """p50/p99 per ~1/50 of the run from the result's latency series (a run whose
        recorder was not announced: the view shows latency once the run ended)."""
        if not series:
            return
        span = max(s for s, _ in series) or 1.0
        step = max(span / 50, self.interval)
        bucket: list[float] = []
        edge = step
        for s, ms in sorted(series):
            if s > edge and bucket:
                bucket.sort()
                n = len(bucket)
                self._add_latency(round(edge, 3), bucket[n // 2],
                                  bucket[min(n - 1, int(n * 0.99))])
                bucket = []
                while s > edge:
                    edge += step
            bucket.append(ms)
        if bucket:
            bucket.sort()
            n = len(bucket)
            self._add_latency(round(edge, 3), bucket[n // 2], bucket[min(n - 1, int(n * 0.99))])

    def fail(self, e: BaseException) -> None:
        self.stop()
        with self._lock:
            self.status = f"failed: {type(e).__name__}: {e}"
            self.version += 1

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything the page draws, as JSON-ready data."""
        with self._lock:
            return {
                "flow": self.flow_name, "engine": self.engine, "status": self.status,
                "version": self.version, "elapsed": self.now(), "started": self.started,
                "nodes": [dict(n, current=_clean(self.current.get(n["name"], {})),
                               totals={k: round(v) for k, v in self.totals[n["name"]].items()})
                          for n in self.nodes],
                "series": {k: {f: list(v) for f, v in s.cols.items()}
                           for k, s in self.series.items()},
                "latency": {k: list(v) for k, v in self.latency.items()},
                "latency_summary": dict(self.latency_summary),
                "latency_live": bool(self.recorders),
                "events": sorted(self.events, key=lambda e: e["t"]),
                "checkpoints": self.checkpoints,
                "checkpoint_log": [dict(c) for c in self.checkpoint_log],
                "result": self.result,
            }


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}


class _LogListener:
    """Binds a MetricsLog to the state: its times are relative to the log's own t0."""

    def __init__(self, state: RunState, log: MetricsLog):
        self.state, self.log = state, log

    def on_row(self, row: dict[str, Any]) -> None:
        self.state.on_row(self.log, row)

    def on_parallelism(self, operator: str, t: float, p: int) -> None:
        self.state.on_parallelism(self.log, operator, t, p)

    def on_decision(self, event: dict[str, Any]) -> None:
        self.state.on_decision(self.log, event)
