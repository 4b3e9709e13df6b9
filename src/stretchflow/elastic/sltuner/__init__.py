"""The SLTuner of determinism-latency §4.2/§5.2 and its baselines.

* :mod:`.features` — Eq. 6's features and training samples from runs;
* :mod:`.estimators` — Gaussian processes (and linear, isotonic, SVR) per operator, saved and
  loaded with joblib;
* :mod:`.tuner` — the laxity trigger (Eq. 9–10) and greedy hill climbing, :class:`SLTuner`;
* :mod:`.baselines` — static low/high, max-timestamp and TCP-like.

All are :class:`~stretchflow.elastic.controller.Controller` objects whose decisions are
:class:`SLTDecision` (new SLTs), for the slack executor (``stretchflow.executors.slack``).
"""

from __future__ import annotations

from .baselines import BASELINES, MaxTimestamp, StaticSLT, TCPLike
from .estimators import ESTIMATORS, Estimator, SLTModel, make_estimator, nrmse
from .features import FEATURES, Samples, feature_vector, samples_from_series
from .training import Explorer, train
from .tuner import SLTDecision, SLTuner, hill_climb, laxity, trigger

__all__ = ["BASELINES", "ESTIMATORS", "FEATURES", "Estimator", "Explorer", "MaxTimestamp",
           "SLTDecision", "SLTModel", "SLTuner", "Samples", "StaticSLT", "TCPLike",
           "feature_vector", "hill_climb", "laxity", "make_estimator", "nrmse",
           "samples_from_series", "train", "trigger"]
