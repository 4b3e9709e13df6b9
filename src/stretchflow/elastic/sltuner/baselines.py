"""The SLT-tuning baselines of determinism-latency §6, behind the controller interface.

* :class:`StaticSLT` — a fixed SLT throughout (the paper's Static Low and Static High);
* :class:`MaxTimestamp` — K-slack's adaptive K of [16]: the SLT follows the largest delay
  observed so far between the inputs, ``max_ts − merge_ts`` (so tuples wait until ready as
  long as the skew does not exceed anything seen before);
* :class:`TCPLike` — the TCP-like adaptation of [17]: halve the SLT when the latency
  increased since the previous interval, add a fixed step (1000 ms) when it decreased.
"""

from __future__ import annotations

import math

from ..controller import Controller, Decision, Metrics
from .tuner import SLTDecision

__all__ = ["BASELINES", "MaxTimestamp", "StaticSLT", "TCPLike"]


class StaticSLT(Controller):
    """Sets every operator's SLT to ``slt`` (once) and never changes it."""

    name = "static"

    def __init__(self, slt: float):
        if not slt >= 0:
            raise ValueError(f"slt must be >= 0, got {slt!r}")
        self.slt = slt

    def reset(self) -> None:
        pass

    def observe(self, metrics: Metrics) -> Decision | None:
        ops = metrics.extras["operators"]
        if all(m["slt"] == self.slt for m in ops.values()):
            return None
        return SLTDecision(metrics.parallelism, "static", {n: self.slt for n in ops})


class MaxTimestamp(Controller):
    """SLT = the maximum skew ``max_ts − merge_ts`` observed so far, per operator."""

    name = "max-timestamp"

    def __init__(self) -> None:
        self._max: dict[str, float] = {}

    def reset(self) -> None:
        self._max = {}

    def observe(self, metrics: Metrics) -> Decision | None:
        new = {}
        for n, m in metrics.extras["operators"].items():
            skew = float(m.get("max_skew_ms", m["skew_ms"]))
            if skew > self._max.get(n, -math.inf):
                self._max[n] = skew
            if m["slt"] != self._max[n]:
                new[n] = self._max[n]
        return SLTDecision(metrics.parallelism, "max observed delay", new) if new else None


class TCPLike(Controller):
    """Multiplicative decrease (÷2) on a latency increase, additive increase (+``step``) on a
    decrease; the SLT starts at ``initial``."""

    name = "tcp"

    def __init__(self, initial: float = 1000.0, step: float = 1000.0, max_slt: float = math.inf):
        if initial < 0 or step <= 0:
            raise ValueError("TCPLike: initial must be >= 0 and step > 0")
        self.initial = initial
        self.step = step
        self.max_slt = max_slt
        self._prev: float | None = None

    def reset(self) -> None:
        self._prev = None

    def observe(self, metrics: Metrics) -> Decision | None:
        lat = float(metrics.extras["latency_ms"])
        prev, self._prev = self._prev, lat
        ops = metrics.extras["operators"]
        if prev is None:
            return SLTDecision(metrics.parallelism, "initial", {n: self.initial for n in ops})
        if lat == prev:
            return None
        new = {}
        for n, m in ops.items():
            cur = float(m["slt"]) if math.isfinite(m["slt"]) else self.initial
            new[n] = cur / 2 if lat > prev else min(cur + self.step, self.max_slt)
        why = "latency increased: halve" if lat > prev else "latency decreased: +step"
        return SLTDecision(metrics.parallelism, why, new)


BASELINES = {"static": StaticSLT, "max-timestamp": MaxTimestamp, "tcp": TCPLike}
