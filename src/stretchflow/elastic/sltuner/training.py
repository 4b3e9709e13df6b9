"""Training data for the SLTuner's Estimator: runs with varied SLT (determinism-latency §6,
"we run the application for different slack threshold parameters and kept the latency and
the amount of slack-ready tuples as historical data").

:class:`Explorer` is a controller that holds a random SLT from ``grid`` for ``hold``
intervals, then draws another: one run then covers many (SLT, time) pairs of the same input
timeline, which is what Eq. 6's time features need. :func:`train` fits an
:class:`~.estimators.SLTModel` on the samples of such runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..controller import Controller, Decision, Metrics
from .estimators import SLTModel
from .features import Samples, samples_from_series
from .tuner import SLTDecision

__all__ = ["Explorer", "train"]


class Explorer(Controller):
    """Random SLTs from ``grid``, each held for ``hold`` intervals (a training policy)."""

    name = "explorer"

    def __init__(self, grid: Sequence[float], hold: int = 2, seed: int = 0):
        if not grid:
            raise ValueError("Explorer needs a non-empty grid of SLTs")
        if hold < 1:
            raise ValueError(f"hold must be >= 1, got {hold!r}")
        self.grid = list(grid)
        self.hold = hold
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        self._rng = random.Random(self.seed)
        self._n = 0

    def observe(self, metrics: Metrics) -> Decision | None:
        self._n += 1
        if (self._n - 1) % self.hold:
            return None
        slt = self._rng.choice(self.grid)
        return SLTDecision(metrics.parallelism, "explore",
                           {n: slt for n in metrics.extras["operators"]})


def train(runs: Iterable[Callable[[], Any]] | Iterable[Any], estimator: str = "gp",
          slt_cap: float = 100_000.0) -> tuple[SLTModel, dict[str, Samples]]:
    """Fits a model on the series of ``runs`` (RunResults of the slack executor, or callables
    returning them); returns the model and the samples it was trained on."""
    samples: dict[str, Samples] = {}
    for r in runs:
        res = r() if callable(r) else r
        samples_from_series(res.extra["series"], slt_cap, samples)
    return SLTModel(estimator, slt_cap).fit(samples), samples
