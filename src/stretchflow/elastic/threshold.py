"""STRETCH's threshold controller and a key-group packer for VSN.

The controller is the "simple controller" of the STRETCH journal paper,
§8.4 (conference version §9.3): every instance reports its load (busy-time
fraction); with an upper, a target and a lower threshold (90 %, 70 %, 45 %):

* average load above *upper*: provision the fewest instances that bring the
  average, the same total load spread over the new count, to at most *target*;
* average load below *lower*: decommission the most instances that keep that
  average at most *target*;
* otherwise do nothing (the band between *lower* and *upper* is the
  hysteresis that keeps the controller from flapping).

Both rules give the same count, ``ceil(total / target)``: the smallest count
whose average is at most the target. "At most" rather than "below" follows
Table IV, where 70 threads at 30 % load shrink to exactly 30 threads (70 %).

A saturated instance reports a busy fraction of 1.0 however much work waits
for it, so busy time alone under-states an overload: at "120 % of the
sustainable rate" (§8.4) the threads are 100 % busy. When the executor reports
an input rate above the throughput, the controller scales the measured total
load by ``input_rate / throughput`` to estimate the demand; with that, the
rule reproduces Table IV's provisioning row exactly (1→2, 5→9, 9→16, 18→31,
30→52, 40→69 from 70 % to 120 % load). Pass ``use_input_rate=False`` for the
busy-time-only reading.

Which keys go to which instance after a reconfiguration is the new f_μ; the
paper leaves that policy open and only reports the resulting coefficient of
variation of the per-thread load (at most 2 %). :func:`pack_key_groups`
implements the longest-processing-time-first greedy, then improves it by
moves and swaps between the most and the least loaded instance.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .controller import Controller, Decision, Metrics, PeriodAccumulator, coefficient_of_variation

__all__ = [
    "Packing",
    "ThresholdController",
    "pack_key_groups",
    "round_robin_key_groups",
    "threshold_parallelism",
]

K = TypeVar("K", bound=Hashable)

# Absorbs float error in total/target (0.7 * 3 / 0.7 is 3.0000000000000004) and in the
# average compared with a threshold (nine loads of 0.45 average 0.44999999999999996).
_EPS = 1e-9


def threshold_parallelism(
    loads: Sequence[float],
    *,
    upper: float = 0.9,
    target: float = 0.7,
    lower: float = 0.45,
    max_parallelism: int,
    min_parallelism: int = 1,
    demand_factor: float = 1.0,
) -> int:
    """The instance count STRETCH's threshold rule asks for.

    Args:
        loads: busy fraction of each currently active instance (len = count).
        upper, target, lower: the thresholds, as fractions of one instance.
        max_parallelism, min_parallelism: bounds on the result.
        demand_factor: multiplies the measured total load (>= 1 estimates the
            demand of saturated instances; see the module docstring).

    Returns:
        The new count, or ``len(loads)`` when no action is due.
    """
    n = len(loads)
    if n == 0:
        raise ValueError("threshold_parallelism needs the load of at least one instance")
    _check_thresholds(upper, target, lower)
    if demand_factor <= 0:
        raise ValueError(f"demand_factor must be > 0, got {demand_factor!r}")
    if not 1 <= min_parallelism <= max_parallelism:
        raise ValueError(f"need 1 <= min_parallelism <= max_parallelism, got "
                         f"{min_parallelism}, {max_parallelism}")
    total = math.fsum(loads) * demand_factor
    average = total / n
    # Smallest count whose average is at most the target, clamped to the bounds.
    needed = max(0, math.ceil(total / target - _EPS))
    needed = min(max_parallelism, max(min_parallelism, needed))
    # an average within _EPS of a threshold is at it: no action (the rule acts strictly
    # above upper and strictly below lower)
    if average > upper + _EPS and needed > n:
        return needed
    if average < lower - _EPS and needed < n:
        return needed
    if n > max_parallelism:
        return max_parallelism
    if n < min_parallelism:
        return min_parallelism
    return n


def _check_thresholds(upper: float, target: float, lower: float) -> None:
    if not (0.0 < lower <= target <= upper and lower < upper):
        raise ValueError(
            f"need 0 < lower <= target <= upper and lower < upper, got "
            f"lower={lower}, target={target}, upper={upper}"
        )


class ThresholdController(Controller):
    """STRETCH's threshold controller (journal §8.4) on per-instance busy time.

    Args:
        upper, target, lower: thresholds on the average busy fraction
            (defaults 0.9, 0.7, 0.45 as in the paper; §8.5 narrows the band to
            lower 0.7, upper 0.8).
        max_parallelism: cap on instances; ``None`` takes the executor's
            ``Metrics.max_parallelism``.
        min_parallelism: floor on instances (default 1).
        period: seconds of measurements to combine before deciding; ``None``
            decides on every interval the executor reports.
        use_input_rate: estimate the demand of saturated instances from
            ``input_rate / throughput`` (see the module docstring).
        rebalance_cv: when set and no scaling is due, a coefficient of
            variation of the per-instance loads above it yields a decision
            with the current parallelism, i.e. a request for a new key
            assignment only. Off by default.

    Periods without ``per_instance_load`` carry no busy time and are ignored.
    """

    name = "threshold"

    def __init__(
        self,
        *,
        upper: float = 0.9,
        target: float = 0.7,
        lower: float = 0.45,
        max_parallelism: int | None = None,
        min_parallelism: int = 1,
        period: float | None = None,
        use_input_rate: bool = True,
        rebalance_cv: float | None = None,
    ) -> None:
        _check_thresholds(upper, target, lower)
        if min_parallelism < 1:
            raise ValueError(f"min_parallelism must be >= 1, got {min_parallelism!r}")
        if max_parallelism is not None and max_parallelism < min_parallelism:
            raise ValueError("max_parallelism must be >= min_parallelism")
        self.upper = upper
        self.target = target
        self.lower = lower
        self.max_parallelism = max_parallelism
        self.min_parallelism = min_parallelism
        self.use_input_rate = use_input_rate
        self.rebalance_cv = rebalance_cv
        self._accumulator = PeriodAccumulator(period)

    def demand_factor(self, metrics: Metrics) -> float:
        """How much more work than busy time shows (1.0 unless saturated)."""
        if not self.use_input_rate or metrics.throughput <= 0:
            return 1.0
        return max(1.0, metrics.input_rate / metrics.throughput)

    def observe(self, metrics: Metrics) -> Decision | None:
        """Apply the threshold rule to one period; ``None`` when in the band."""
        period = self._accumulator.push(metrics)
        if period is None or not period.per_instance_load:
            return None
        cap = period.max_parallelism
        if self.max_parallelism is not None:
            cap = min(cap, self.max_parallelism)
        cap = max(cap, self.min_parallelism)
        factor = self.demand_factor(period)
        n = period.parallelism
        new = threshold_parallelism(
            period.per_instance_load,
            upper=self.upper,
            target=self.target,
            lower=self.lower,
            max_parallelism=cap,
            min_parallelism=self.min_parallelism,
            demand_factor=factor,
        )
        average = period.average_load * factor
        if new > n:
            return Decision(new, f"provision: average load {average:.3f} > upper {self.upper}")
        if new < n:
            return Decision(new, f"decommission: average load {average:.3f} < lower {self.lower}")
        if self.rebalance_cv is not None:
            cv = period.load_cv
            if cv > self.rebalance_cv:
                return Decision(n, f"rebalance: load CV {cv:.3f} > {self.rebalance_cv}")
        return None

    def reset(self) -> None:
        """Drop any partially collected period (the rule itself is stateless)."""
        self._accumulator.reset()


@dataclass(frozen=True, slots=True)
class Packing:
    """A key-group → instance assignment and the load it puts on each instance."""

    mapping: Mapping[Hashable, int]
    instance_loads: tuple[float, ...]

    @property
    def cv(self) -> float:
        """Coefficient of variation of the instance loads."""
        return coefficient_of_variation(self.instance_loads)

    @property
    def makespan(self) -> float:
        """Load of the most loaded instance."""
        return max(self.instance_loads, default=0.0)


def round_robin_key_groups(loads: Mapping[K, float], n: int) -> Packing:
    """Key groups dealt to instances in iteration order (the naive baseline)."""
    _check_pack_args(loads, n)
    mapping: dict[Hashable, int] = {}
    totals = [0.0] * n
    for i, (key, load) in enumerate(loads.items()):
        mapping[key] = i % n
        totals[i % n] += load
    return Packing(mapping, tuple(totals))


def pack_key_groups(
    loads: Mapping[K, float], n: int, *, refine: bool = True, max_rounds: int | None = None
) -> Packing:
    """Assign key groups with measured loads to ``n`` instances, balancing load.

    Longest-processing-time first (Graham): the heaviest group goes to the
    least loaded instance, ties broken by the lower instance index and, among
    groups, by the order of ``loads`` — so the result is deterministic, which
    matters because every VSN instance must compute the same f_μ.

    With ``refine`` the greedy result is improved by moving one group, or
    swapping two, between the most and the least loaded instance while that
    strictly lowers the larger of the two; this never raises the makespan and
    fixes LPT's classic misses (loads 3, 3, 2, 2, 2 on two instances: LPT gives
    7 / 5, one swap gives 6 / 6). ``max_rounds`` bounds the improvement steps
    (default: 4 × number of groups).
    """
    _check_pack_args(loads, n)
    keys = list(loads)
    weights = [float(loads[k]) for k in keys]
    # Sorting indices (stable) keeps the key order as the tie-break without
    # comparing keys, which may be of mixed, unorderable types.
    order = sorted(range(len(keys)), key=lambda i: -weights[i])
    heap = [(0.0, j) for j in range(n)]
    owner = [0] * len(keys)
    for i in order:
        total, j = heapq.heappop(heap)
        owner[i] = j
        heapq.heappush(heap, (total + weights[i], j))
    if refine and n > 1 and keys:
        rounds = 4 * len(keys) if max_rounds is None else max_rounds
        _refine(weights, owner, n, rounds)
    totals = [0.0] * n
    for i, j in enumerate(owner):
        totals[j] += weights[i]
    mapping = {keys[i]: owner[i] for i in range(len(keys))}
    return Packing(mapping, tuple(totals))


def _check_pack_args(loads: Mapping[K, float], n: int) -> None:
    if n < 1:
        raise ValueError(f"need at least one instance, got n={n!r}")
    if any(not (v >= 0 and math.isfinite(v)) for v in loads.values()):
        raise ValueError("key-group loads must be finite and >= 0")


def _refine(weights: list[float], owner: list[int], n: int, rounds: int) -> None:
    """Move/swap groups between the extreme instances while that helps.

    Each accepted step shifts d with 0 < d < gap from the most to the least
    loaded instance, which strictly lowers the sum of squared loads, so the
    loop ends; neither instance ends above the old maximum.
    """
    members: list[list[int]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for i, j in enumerate(owner):
        members[j].append(i)
        totals[j] += weights[i]
    for _ in range(rounds):
        hi = max(range(n), key=lambda j: (totals[j], -j))
        lo = min(range(n), key=lambda j: (totals[j], j))
        gap = totals[hi] - totals[lo]
        if gap <= 1e-12 * max(1.0, totals[hi]):
            return
        # Shifting d from hi to lo helps iff 0 < d < gap; d = gap / 2 is best.
        lo_items = sorted((weights[i], i) for i in members[lo])
        lo_weights = [w for w, _ in lo_items]
        best_err, best = gap / 2, None
        for i in members[hi]:
            w = weights[i]
            candidates: list[tuple[float, int | None]] = [(w, None)]  # a move
            # A swap with the lo group whose weight is nearest w - gap / 2.
            pos = bisect.bisect_left(lo_weights, w - gap / 2)
            for p in (pos - 1, pos):
                if 0 <= p < len(lo_items):
                    candidates.append((w - lo_items[p][0], lo_items[p][1]))
            for d, other in candidates:
                err = abs(gap / 2 - d)
                if 0 < d < gap and err < best_err - 1e-12 * gap:
                    best_err, best = err, (i, other, d)
        if best is None:
            return
        i, other, d = best
        members[hi].remove(i)
        members[lo].append(i)
        owner[i] = lo
        if other is not None:
            members[lo].remove(other)
            members[hi].append(other)
            owner[other] = hi
        totals[hi] -= d
        totals[lo] += d
