"""What a run did: :class:`RunResult`, the same on every engine.

``extra`` has one schema; every key below means the same on every engine that reports it,
and an engine reports only what it measures:

=========================  ================================================================
``parallelism``            ``{operator: instances at the end}``
``parallelism_series``     ``{operator: [(seconds since start, instances), ...]}``
``reconfigurations``       ``[{"operator", "epoch", "parallelism_before", "parallelism_after",
                           "applied", "duration_ms", "note", ...}, ...]``
``latency_ms``             ``{"p50", "p99", "max", "samples"}`` of output latency in ms, over
                           the whole run (:class:`~stretchflow.runtime.LatencyRecorder`)
``latency_series``         ``[(seconds since start, ms), ...]``, at most ~4000, whole run
``metrics``                per-period measurements: ``[{"operator", "time", "parallelism",
                           "input_rate", "throughput", "congestion", "loads"}, ...]``
``controller``             the controller's name, or None
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

from dataclasses import dataclass, field
from typing import Any


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
        """A few lines: tuples in and out, time, throughput, parallelism, latency and
        reconfigurations (what the CLI prints)."""
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
            lines.append(f"reconfigurations: {len(done)} applied of {len(recs)} requested")
        return "\n".join(lines)

    def __repr__(self) -> str:  # a vsn result holds thousands of samples: print the summary
        return (f"RunResult(engine={self.engine!r}, elapsed={self.elapsed:.3f}, "
                f"tuples_in={self.tuples_in!r}, tuples_out={self.tuples_out!r}, "
                f"extra=<{', '.join(self.extra)}>)")

    __str__ = summary
