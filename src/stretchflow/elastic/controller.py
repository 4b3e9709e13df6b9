"""The interface between executors and elasticity controllers.

An executor measures its operator (or parallel region) over a period and
hands a :class:`Metrics` to :meth:`Controller.observe`; the controller answers
with a :class:`Decision` (a new parallelism) or ``None`` (keep going).

Contract for executors:

* every :class:`Metrics` describes one measurement interval spent entirely at
  ``parallelism`` instances; an executor applies a :class:`Decision` before it
  starts measuring the next interval;
* intervals may be shorter than the controller's own adaptation period:
  controllers that have one (the level controller's 5 s) combine consecutive
  intervals with a :class:`PeriodAccumulator` and decide once per period.

A :class:`Decision` whose parallelism equals the current one asks only for a
new key assignment (a load-balancing reconfiguration in STRETCH's terms).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "Controller",
    "Decision",
    "Metrics",
    "PeriodAccumulator",
    "coefficient_of_variation",
    "combine_metrics",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """What an executor measured over one period.

    Attributes:
        time: end of the period, in seconds (any monotonic origin).
        period: length of the period, in seconds (> 0).
        parallelism: instances (channels, threads) active during the period.
        throughput: tuples processed per second during the period.
        input_rate: tuples offered per second by the upstream during the period
            (what the source wanted to push, which exceeds ``throughput`` when
            the operator cannot keep up).
        per_instance_load: busy-time fraction in [0, 1] of every instance
            (empty when the executor does not measure it).
        congestion: the congestion index of elastic-scaling §4, the fraction in
            [0, 1] of the period the sender spent blocked on full queues,
            averaged over channels.
        max_parallelism: the most instances the executor can run.
        extras: anything else an executor wants to pass on (free form).
    """

    time: float
    period: float
    parallelism: int
    throughput: float
    input_rate: float
    per_instance_load: tuple[float, ...] = ()
    congestion: float = 0.0
    max_parallelism: int
    extras: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Executors build these from lists and numpy values; normalizing here
        # keeps the object hashable and truly immutable.
        loads = tuple(float(x) for x in self.per_instance_load)
        object.__setattr__(self, "per_instance_load", loads)
        object.__setattr__(self, "extras", MappingProxyType(dict(self.extras)))
        if not self.period > 0:
            raise ValueError(f"Metrics.period must be > 0, got {self.period!r}")
        if self.parallelism < 1:
            raise ValueError(f"Metrics.parallelism must be >= 1, got {self.parallelism!r}")
        if self.max_parallelism < self.parallelism:
            raise ValueError(
                f"Metrics.max_parallelism ({self.max_parallelism}) is below "
                f"parallelism ({self.parallelism})"
            )
        for name in ("throughput", "input_rate"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"Metrics.{name} must be finite and >= 0, got {value!r}")
        if not 0.0 <= self.congestion <= 1.0:
            raise ValueError(f"Metrics.congestion must be in [0, 1], got {self.congestion!r}")
        if loads and len(loads) != self.parallelism:
            raise ValueError(
                f"Metrics.per_instance_load has {len(loads)} entries for "
                f"parallelism {self.parallelism}"
            )
        if any(not 0.0 <= x <= 1.0 for x in loads):
            raise ValueError(f"Metrics.per_instance_load values must be in [0, 1], got {loads}")

    @property
    def average_load(self) -> float:
        """Mean busy fraction over instances (0.0 when not measured)."""
        loads = self.per_instance_load
        return sum(loads) / len(loads) if loads else 0.0

    @property
    def load_cv(self) -> float:
        """Coefficient of variation of the per-instance loads."""
        return coefficient_of_variation(self.per_instance_load)


@dataclass(frozen=True, slots=True)
class Decision:
    """A controller's answer: run with ``parallelism`` instances from now on."""

    parallelism: int
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError(f"Decision.parallelism must be >= 1, got {self.parallelism!r}")


class Controller(ABC):
    """An elasticity policy: metrics in, parallelism decisions out."""

    #: Short name used by the command line's ``--controller NAME``.
    name: str = "controller"

    @abstractmethod
    def observe(self, metrics: Metrics) -> Decision | None:
        """Take one period's metrics; return a decision or ``None`` for no change."""

    @abstractmethod
    def reset(self) -> None:
        """Forget everything learned so far, as if freshly constructed."""


def coefficient_of_variation(loads: Iterable[float]) -> float:
    """Population standard deviation of ``loads`` divided by their mean.

    STRETCH (journal §8.4, Fig. 9) reports this, as a percentage, for the
    per-thread load to show that reconfigurations start from balanced threads.
    Returns 0.0 for no values or a zero mean (nothing to be unbalanced about).
    """
    values = [float(x) for x in loads]
    if not values:
        return 0.0
    mean = math.fsum(values) / len(values)
    if mean == 0.0:
        return 0.0
    variance = math.fsum((x - mean) ** 2 for x in values) / len(values)
    return math.sqrt(variance) / abs(mean)


def combine_metrics(parts: Sequence[Metrics]) -> Metrics:
    """Merge consecutive periods at the same parallelism into one.

    Rates, congestion and busy fractions are averaged weighted by period
    length, which is what they would have been had they been measured over
    the whole span at once.
    """
    if not parts:
        raise ValueError("combine_metrics needs at least one Metrics")
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    if any(p.parallelism != last.parallelism for p in parts):
        raise ValueError("combine_metrics: all parts must have the same parallelism")
    span = math.fsum(p.period for p in parts)

    def weighted(values: Iterable[float]) -> float:
        return math.fsum(v * p.period for v, p in zip(values, parts, strict=True)) / span

    if all(len(p.per_instance_load) == last.parallelism for p in parts):
        loads = tuple(
            min(1.0, weighted(p.per_instance_load[i] for p in parts))
            for i in range(last.parallelism)
        )
    else:
        loads = last.per_instance_load
    return Metrics(
        time=last.time,
        period=span,
        parallelism=last.parallelism,
        throughput=weighted(p.throughput for p in parts),
        input_rate=weighted(p.input_rate for p in parts),
        per_instance_load=loads,
        congestion=min(1.0, weighted(p.congestion for p in parts)),
        max_parallelism=last.max_parallelism,
        extras=last.extras,
    )


class PeriodAccumulator:
    """Collects measurement intervals until they span a controller's period.

    ``push`` returns the combined :class:`Metrics` once at least ``period``
    seconds have been collected, else ``None``. A change of parallelism
    restarts the collection: a period must be measured at one operating
    point, or the controller would credit one level with another's numbers.
    ``period`` of ``None`` or 0 passes every interval straight through.
    """

    # Tolerates float drift when an executor's interval divides the period.
    _SLACK = 1e-6

    def __init__(self, period: float | None) -> None:
        if period is not None and period < 0:
            raise ValueError(f"period must be >= 0, got {period!r}")
        self.period = period or 0.0
        self._parts: list[Metrics] = []

    def push(self, metrics: Metrics) -> Metrics | None:
        """Add one interval; return the combined period when it is complete."""
        if self._parts and self._parts[-1].parallelism != metrics.parallelism:
            self._parts.clear()
        self._parts.append(metrics)
        collected = math.fsum(p.period for p in self._parts)
        if collected + self._SLACK * max(1.0, self.period) < self.period:
            return None
        combined = combine_metrics(self._parts)
        self._parts.clear()
        return combined

    def reset(self) -> None:
        """Drop a partially collected period."""
        self._parts.clear()
