"""The SLTuner (determinism-latency §4.2, §5.2): the laxity trigger (Eq. 9–10) and greedy
hill climbing over the SLTs of all operators (§5.2.3), behind the controller interface.

Each measurement interval the executor passes :class:`~stretchflow.elastic.controller.Metrics`
whose ``extras`` hold, per operator, the SLT in force, the event time it has reached (see
:func:`~.features.clock_ts`), the thread count and the window size (Eq. 6's features), and
the source-to-sink paths of the flow (Eq. 2). The tuner

1. predicts each operator's latency ``horizon`` intervals ahead with the current SLTs
   (:class:`~.estimators.SLTModel`; the time features are advanced by ``horizon`` intervals of
   event time, estimated from how far the input advanced during the last one) and the
   end-to-end latency as the maximum over paths of the sums (Eq. 2). ``horizon`` defaults to
   2 because a decision taken at the end of interval k cannot help interval k + 1 fully: the
   tuples read during it have already waited under the old SLT (measured: looking one interval
   ahead, the SLTuner acted at the crossing and that one interval still ended 26 ms over the
   deadline);
2. computes ``laxity = deadline − predicted latency`` and optimizes when ``laxity <= 0``
   (Eq. 9, a predicted violation: the search starts from the smallest SLTs) or
   ``laxity >= α·deadline`` (Eq. 10, room to spare: the search starts from the current SLTs);
3. climbs: repeatedly applies the single SLT increase (by ``step`` event-time ms, capped at
   ``max_slt``) that minimizes the predicted total slack-ready tuples (Eq. 5) among those whose
   predicted latency stays below the deadline (times ``1 − margin``), and stops when no
   increase is valid.

``margin`` (default 0.1) is not in the paper: it keeps the climb a little below the deadline
because a model trained on a few runs is off by its NRMSE; set it to 0 for the paper's rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..controller import Controller, Decision, Metrics
from .estimators import SLTModel
from .features import clock_ts, feature_vector

__all__ = ["SLTDecision", "SLTuner", "hill_climb", "laxity", "trigger"]


@dataclass(frozen=True, slots=True)
class SLTDecision(Decision):
    """A decision that sets SLTs (event-time ms) by operator name; parallelism unchanged."""

    slt: Mapping[str, float] = field(default_factory=dict)


def laxity(deadline_ms: float, latency_ms: float) -> float:
    """Laxity = Deadline − Latency (§5.2.2)."""
    return deadline_ms - latency_ms


def trigger(lax: float, deadline_ms: float, alpha: float) -> str | None:
    """``"violation"`` when laxity <= 0 (Eq. 9), ``"room"`` when laxity >= α·Deadline
    (Eq. 10), else None."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if lax <= 0:
        return "violation"
    if lax >= alpha * deadline_ms:
        return "room"
    return None


def hill_climb(start: Mapping[str, float], step: Mapping[str, float] | float,
               max_slt: Mapping[str, float] | float,
               latency: Callable[[Mapping[str, float]], float],
               slack_ready: Callable[[Mapping[str, float]], float],
               deadline_ms: float) -> dict[str, float]:
    """Greedy hill climbing of §5.2.3 from ``start``: each step applies the one increase of
    one operator's SLT that minimizes predicted slack-ready tuples (ties: lower predicted
    latency) while predicted latency < ``deadline_ms``; stops when no increase is valid."""
    cur = dict(start)

    def get(v: Mapping[str, float] | float, op: str) -> float:
        return v[op] if isinstance(v, Mapping) else v

    while True:
        best: tuple[float, float, dict[str, float]] | None = None
        for op in cur:
            nxt = min(cur[op] + get(step, op), get(max_slt, op))
            if nxt <= cur[op]:
                continue
            cand = {**cur, op: nxt}
            lat = latency(cand)
            if not lat < deadline_ms:
                continue
            key = (slack_ready(cand), lat)
            if best is None or key < best[:2]:
                best = (key[0], key[1], cand)
        if best is None:
            return cur
        cur = best[2]


class SLTuner(Controller):
    """Estimator + Trigger + Optimization over a trained :class:`SLTModel`."""

    name = "sltuner"

    def __init__(self, model: SLTModel, deadline_ms: float | None = None, *,
                 alpha: float = 0.3, step: float = 1000.0, min_slt: float = 0.0,
                 max_slt: float | None = None, margin: float = 0.1, horizon: int = 2):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if step <= 0:
            raise ValueError(f"step must be > 0, got {step!r}")
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin!r}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1 interval, got {horizon!r}")
        self.horizon = horizon
        self.model = model
        self.deadline_ms = deadline_ms
        self.alpha = alpha
        self.step = step
        self.min_slt = min_slt
        self.max_slt = model.slt_cap if max_slt is None else max_slt
        self.margin = margin
        self.log: list[dict[str, Any]] = []
        self._prev_ts: dict[str, float] = {}

    def reset(self) -> None:
        self.log = []
        self._prev_ts = {}

    def _features(self, ops: Mapping[str, Mapping[str, Any]], slts: Mapping[str, float],
                  ahead: Mapping[str, float]) -> dict[str, list[float]]:
        return {name: feature_vector(slts[name], clock_ts(m) + ahead[name], m["threads"],
                                     m["window_ms"], self.model.slt_cap)
                for name, m in ops.items()}

    def predict(self, ops: Mapping[str, Mapping[str, Any]], slts: Mapping[str, float],
                ahead: Mapping[str, float], paths: Sequence[Sequence[str]]
                ) -> tuple[float, float, dict[str, float]]:
        """(end-to-end latency (Eq. 2), total slack-ready (Eq. 5), latency per operator)."""
        feats = self._features(ops, slts, ahead)
        per_lat, total_slr = {}, 0.0
        for name, x in feats.items():
            lat, slr = self.model.predict(name, np.asarray([x]))
            per_lat[name] = float(lat[0])
            total_slr += float(slr[0])
        e2e = max((sum(per_lat[n] for n in p) for p in paths), default=max(per_lat.values()))
        return e2e, total_slr, per_lat

    def observe(self, metrics: Metrics) -> Decision | None:
        ex = metrics.extras
        deadline = self.deadline_ms if self.deadline_ms is not None else ex.get("deadline_ms")
        if deadline is None:
            raise ValueError("SLTuner needs a deadline (constructor or the run's deadline)")
        ops = {n: m for n, m in ex["operators"].items()
               if math.isfinite(m["last_ts"]) and n in self.model.latency}
        if not ops:
            return None
        paths = [[n for n in p if n in ops] for p in ex.get("paths", [list(ops)])]
        ahead = {n: self.horizon * max(0.0, clock_ts(m) - self._prev_ts.get(n, clock_ts(m)))
                 for n, m in ops.items()}
        self._prev_ts.update({n: clock_ts(m) for n, m in ops.items()})
        current = {n: min(float(m["slt"]), self.max_slt) for n, m in ops.items()}
        predicted, _, _ = self.predict(ops, current, ahead, paths)
        lax = laxity(deadline, predicted)
        why = trigger(lax, deadline, self.alpha)
        self.log.append({"t": metrics.time, "predicted_ms": predicted, "laxity_ms": lax,
                         "trigger": why})
        if why is None:
            return None
        start = ({n: self.min_slt for n in ops} if why == "violation" else current)
        bound = deadline * (1 - self.margin)
        best = hill_climb(start, self.step, self.max_slt,
                          lambda s: self.predict(ops, s, ahead, paths)[0],
                          lambda s: self.predict(ops, s, ahead, paths)[1], bound)
        if best == current:
            return None
        return SLTDecision(metrics.parallelism, f"{why}: laxity {lax:.0f} ms", best)
