"""What a run did: :class:`RunResult`, the same on every engine.

``extra`` has one schema; every key below means the same on every engine that reports it,
and an engine reports only what it measures. The executor skeleton
(:class:`~stretchflow.runtime.skeleton.Run`) assembles the keys every engine measures the same
way (``latency_ms``, ``latency_series``, ``metrics``, ``parallelism_series``, ``checkpoints``,
``checkpoint_log``); the executor adds the others.

=========================  ================================================================
``parallelism``            ``{operator: instances at the end}``
``parallelism_series``     ``{operator: [(seconds since start, instances), ...]}``
``reconfigurations``       ``[{"operator", "epoch", "parallelism_before", "parallelism_after",
                           "applied", "duration_ms", "note", ...}, ...]``
``latency_ms``             ``{"p50", "p99", "max", "samples"}`` of output latency in ms, over
                           the whole run (:class:`~stretchflow.runtime.LatencyRecorder`),
                           measured one way on every engine that reports it (vsn, sn,
                           ordered, slack; the sequential reference does not): each hand-over
                           of outputs to a sink (a batch its sink thread took, or a producer
                           delivered) samples up to 16 of them, evenly spaced; an output of
                           timestamp T is measured from when the first input with ts >= T − 1
                           entered (the ingest clock, which the sources record at the latest
                           timestamp read, once per batch of about 256 tuples) to when its
                           sink got it. A
                           :class:`~stretchflow.batch.Batch` counts as one output at its last
                           timestamp
``latency_series``         ``[(seconds since start, ms), ...]``, at most ~4000, whole run
``metrics``                per-period measurements: ``[{"operator", "time", "parallelism",
                           "input_rate", "throughput", "congestion", "loads"}, ...]`` (and
                           ``"backlog"``; sn's rows with a controller also its ``"decision"``,
                           the parallelism asked for or None, and ``"reason"``)
``controller``             the controller's name, or None
``checkpoints``            checkpoints this run wrote (a checkpointed run only)
``checkpoint_log``         per checkpoint: ``{"epoch", "cut", "time", "duration_ms",
                           "write_ms", "bytes"}`` (runtime/checkpoint_stats.py)
``errors``                 messages of errors reported without stopping the run (none today)
``paths``                  ``{operator: path}``: how each O+ took its tuples — ``"tuple"`` (one
                           at a time), ``"runs"`` (runs through ``update_many``), ``"sliced"``
                           (one accumulator per slice), ``"columnar"`` (whole batches through
                           Arrow kernels, windows out as tables; issue #16)
=========================  ================================================================

Anything else an engine reports sits under its own documented key (e.g. the SN engine's
``duplication_factor``, the Spark engine's ``mode``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

#: engines whose instances are threads of one process (sn too, on channels="threads")
_THREADED = frozenset({"vsn", "slack", "ordered"})


def gil_serializes_threads() -> bool:
    """Whether this interpreter runs one thread's Python at a time: CPython with its GIL
    (a free-threaded build says so through ``sys._is_gil_enabled``, 3.13 on)."""
    if sys.implementation.name != "cpython":
        return False
    enabled = getattr(sys, "_is_gil_enabled", None)
    return enabled() if enabled is not None else True


@dataclass
class RunResult:
    """What a run did: tuples read per source, tuples written per sink, wall-clock time."""

    engine: str
    elapsed: float
    tuples_in: dict[str, int] = field(default_factory=dict)
    tuples_out: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_in(self) -> int:
        return sum(self.tuples_in.values())

    @property
    def total_out(self) -> int:
        return sum(self.tuples_out.values())

    @property
    def throughput(self) -> float:
        """Input tuples per second of wall-clock time."""
        return self.total_in / self.elapsed if self.elapsed > 0 else float("inf")

    def summary(self) -> str:
        """A few lines: tuples in and out, time, throughput, latency, parallelism,
        reconfigurations and checkpoints (what the CLI and ``print(result)`` show)."""
        lines = [f"{self.engine}: {self.total_in:,} tuples in, {self.total_out:,} out, "
                 f"{self.elapsed:.2f} s, {self.throughput:,.0f} tuples/s"]
        lat = self.extra.get("latency_ms")
        if lat and lat.get("samples"):
            lines.append(f"latency: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, "
                         f"max {lat['max']:.1f} ms ({lat['samples']:,} samples)")
        par = self.extra.get("parallelism")
        if par:
            lines.append("final parallelism: " + ", ".join(f"{k} {v}" for k, v in par.items()))
        paths = self.extra.get("paths")
        if paths:
            lines.append("paths: " + ", ".join(f"{k} {v}" for k, v in paths.items()))
        recs = self.extra.get("reconfigurations") or []
        if recs:
            done = [r for r in recs if r.get("applied")]
            line = f"reconfigurations: {len(done)} applied of {len(recs)} requested"
            steps = [f"{r.get('parallelism_before')}→{r.get('parallelism_after')}"
                     for r in done if r.get("parallelism_before") is not None
                     and r.get("parallelism_after") is not None]
            if steps:  # the first few changes say how the run scaled; all could be hundreds
                more = f", +{len(steps) - 6} more" if len(steps) > 6 else ""
                line += f" ({', '.join(steps[:6])}{more})"
            lines.append(line)
        ckpts = self.extra.get("checkpoints")
        if ckpts is not None:
            durations = sorted(r["duration_ms"] for r in self.extra.get("checkpoint_log") or []
                               if r.get("duration_ms") is not None)
            took = (f" (barrier to commit: median {durations[len(durations) // 2]:.0f} ms, "
                    f"max {durations[-1]:.0f} ms)") if durations else ""
            lines.append(f"checkpoints: {ckpts} taken{took}")
        late = self.extra.get("late")
        if late:  # sources whose late tuples are dropped or sent to a side stream
            lines.append("late: " + ", ".join(f"{s} {n:,}" for s, n in late.items()))
        native = self.extra.get("spark_native")
        if native:  # which operators ran as Spark's own operations, and why not the others
            lines.append("spark plan: " + _plan_line(native))
        if self.extra.get("spark_log"):  # Spark's own log lines went there, not to stderr
            lines.append(f"spark log: {self.extra['spark_log']}")
        gil = self.gil_note()
        if gil:
            lines.append(gil)
        return "\n".join(lines)

    def gil_note(self) -> str | None:
        """One line when the run asked threads to share Python work that the GIL runs one
        thread at a time: an O+ not on the columnar path (so its functions are called per
        tuple, slice or run) with more than one instance (or worker) on a threaded engine;
        None otherwise, and always on an interpreter without the GIL."""
        threaded = self.engine in _THREADED or (
            self.engine == "sn" and self.extra.get("channels") == "threads")
        if not threaded or not gil_serializes_threads():
            return None
        most = dict(self.extra.get("parallelism") or {})
        for op, series in (self.extra.get("parallelism_series") or {}).items():
            most[op] = max([most.get(op, 0), *(n for _, n in series)])
        workers = self.extra.get("workers") or 0
        paths = self.extra.get("paths") or {}  # none reported (slack): tuple at a time
        ops = {op: max(n, workers) for op, n in most.items()
               if max(n, workers) > 1 and paths.get(op, "tuple") != "columnar"}
        if not ops:
            return None
        v = sys.version_info
        core = self.extra.get("gil_core")
        shared = (f" (they shared CPU {core['cpu']} for {core['pinned_s']:.1f} s of the run "
                  "while measured taking turns, so the GIL's hand-overs kept their data in one "
                  "core's caches: gil_core)") if core and core.get("pinned_s") else ""
        return (f"GIL: the Python functions of {', '.join(ops)} run on {max(ops.values())} "
                f"threads, but CPython {v.major}.{v.minor} runs one thread's Python at a time, "
                f"so more threads cannot make them faster{shared}; column expressions (the "
                "columnar path) or engine='sn' with channels='processes' can")

    def __repr__(self) -> str:
        # a vsn result holds thousands of latency samples and a metrics series: a repr (what a
        # REPL, a list of results or a debugger shows) is the summary on one line, never them
        lat = self.extra.get("latency_ms") or {}
        parts = [f"{self.total_in:,} in", f"{self.total_out:,} out", f"{self.elapsed:.3f} s",
                 f"{self.throughput:,.0f}/s"]
        if lat.get("samples"):
            parts.append(f"p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms")
        par = self.extra.get("parallelism")
        if par:
            parts.append("parallelism " + ", ".join(f"{k} {v}" for k, v in
                                                    list(par.items())[:4])
                         + (", ..." if len(par) > 4 else ""))
        recs = self.extra.get("reconfigurations")
        if recs:
            parts.append(f"{sum(1 for r in recs if r.get('applied'))} reconfigurations")
        if self.extra.get("checkpoints") is not None:
            parts.append(f"{self.extra['checkpoints']} checkpoints")
        return f"<RunResult {self.engine}: {'; '.join(parts)}>"

    __str__ = summary


def _plan_line(native: dict[str, str]) -> str:
    """``native filter, count; python top (keys is a Python function)``: operators grouped by
    how they ran (``extra["spark_native"]``)."""
    groups: dict[str, list[str]] = {}
    for op, how in native.items():
        groups.setdefault(how, []).append(op)
    parts = []
    for how, ops in groups.items():
        if how == "native":
            parts.append("native " + ", ".join(ops))
        else:
            parts.append(f"python {', '.join(ops)} ({how.removeprefix('python: ')})")
    return "; ".join(parts)
