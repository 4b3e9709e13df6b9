"""Prediction models of the SLTuner's Estimator (determinism-latency §5.2.1, Eq. 7–8, Table 1).

Every model is an :class:`Estimator`: ``fit(X, y)`` then ``predict(X)``, over the features of
Eq. 6 (:mod:`.features`). The paper's choice is Gaussian-process regression (a mean and a
variance per prediction); its alternatives — linear regression, isotonic regression (on the
SLT alone: it fits one monotone function of one variable) and support-vector regression — are
here too, all from scikit-learn. :class:`SLTModel` holds two models per operator (latency and
slack-ready tuples, Eq. 7 and 8) and is saved and loaded with joblib.

scikit-learn (with scipy and joblib) is the ``tuner`` extra: building an estimator without it
is one error naming the extra (:func:`stretchflow.extras.require`), before any training.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...extras import require
from .features import FEATURES, Samples

__all__ = ["ESTIMATORS", "Estimator", "GaussianProcess", "Isotonic", "Linear", "SLTModel",
           "SVM", "make_estimator", "nrmse"]


class Estimator(ABC):
    """A regression model over Eq. 6's features."""

    name = "estimator"

    @abstractmethod
    def fit(self, X: np.ndarray, y: np.ndarray) -> Estimator:
        """Trains on ``X`` (n × 6) and targets ``y`` (n)."""

    @abstractmethod
    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted means for the rows of ``X``."""

    @staticmethod
    def _check(X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != len(FEATURES):
            raise ValueError(f"features must be an n x {len(FEATURES)} array {FEATURES}, "
                             f"got shape {X.shape}")
        if y is not None and len(y) != len(X):
            raise ValueError(f"{len(X)} feature rows but {len(y)} targets")
        if y is not None and len(y) < 2:
            raise ValueError("need at least 2 training samples")
        return X


def _require_sklearn() -> None:
    require("sklearn", "tuner", "the SLTuner's estimators")


class _Sklearn(Estimator):
    def __init__(self) -> None:
        _require_sklearn()  # here, not at fit: a missing extra shows before any training run
        self.model: Any = None

    def _make(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def fit(self, X: np.ndarray, y: np.ndarray) -> Estimator:
        X = self._check(X, y)
        self.model = self._make().fit(X, np.asarray(y, dtype=float))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError(f"{self.name}: predict before fit")
        return np.asarray(self.model.predict(self._check(X)), dtype=float)


class GaussianProcess(_Sklearn):
    """Gaussian-process regression (the paper's choice): an anisotropic RBF kernel over the
    standardized features plus a white-noise term, hyperparameters fitted by marginal
    likelihood. At most ``max_samples`` (a random subset) are used: GP training is cubic."""

    name = "gp"

    def __init__(self, max_samples: int = 600, seed: int = 0):
        super().__init__()
        self.max_samples = max_samples
        self.seed = seed
        self.mask = np.ones(len(FEATURES), dtype=bool)

    def _make(self) -> Any:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        kernel = (ConstantKernel(1.0, (1e-3, 1e3))
                  * RBF(length_scale=np.ones(int(self.mask.sum())),
                        length_scale_bounds=(1e-2, 1e3))
                  + WhiteKernel(0.1, (1e-4, 1e1)))
        return make_pipeline(StandardScaler(), GaussianProcessRegressor(
            kernel, normalize_y=True, optimizer=_bounded_lbfgs, random_state=self.seed))

    def fit(self, X: np.ndarray, y: np.ndarray) -> Estimator:
        X = self._check(X, y)
        y = np.asarray(y, dtype=float)
        if len(X) > self.max_samples:
            idx = np.random.default_rng(self.seed).choice(len(X), self.max_samples,
                                                          replace=False)
            X, y = X[idx], y[idx]
        # constant features (one thread count, one window size in the training runs) carry
        # no information and leave the optimizer a flat direction: the kernel skips them
        self.mask = X.std(axis=0) > 0
        if not self.mask.any():
            self.mask[0] = True
        self.model = self._make().fit(X[:, self.mask], y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError(f"{self.name}: predict before fit")
        return np.asarray(self.model.predict(self._check(X)[:, self.mask]), dtype=float)

    def predict_std(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation (Eq. 7–8's N(f̄, var))."""
        mean, std = self.model.predict(self._check(X)[:, self.mask], return_std=True)
        return np.asarray(mean, dtype=float), np.asarray(std, dtype=float)


def _bounded_lbfgs(obj_func: Callable, initial_theta: np.ndarray,
                   bounds: np.ndarray) -> tuple[np.ndarray, float]:
    """scikit-learn's default L-BFGS-B hyperparameter search with an iteration cap: on a
    loaded 2-core machine an uncapped search took from 0.2 s to over 10 s on 300 samples for
    the same likelihood to within noise."""
    from scipy.optimize import minimize

    res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds,
                   options={"maxiter": 40})
    return res.x, res.fun


class Linear(_Sklearn):
    """Ordinary least squares on the standardized features."""

    name = "linear"

    def _make(self) -> Any:
        from sklearn.linear_model import LinearRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LinearRegression())


class Isotonic(Estimator):
    """Isotonic regression of the target on the SLT (feature 0), increasing or decreasing as
    the data says: latency grows and slack-ready counts shrink with the SLT."""

    name = "isotonic"

    def __init__(self) -> None:
        _require_sklearn()
        self.model: Any = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> Estimator:
        from sklearn.isotonic import IsotonicRegression

        X = self._check(X, y)
        self.model = IsotonicRegression(increasing="auto", out_of_bounds="clip").fit(
            X[:, 0], np.asarray(y, dtype=float))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("isotonic: predict before fit")
        return np.asarray(self.model.predict(self._check(X)[:, 0]), dtype=float)


class SVM(_Sklearn):
    """Support-vector regression (RBF kernel) on standardized features and targets."""

    name = "svm"

    def __init__(self, C: float = 10.0, epsilon: float = 0.05):  # noqa: N803
        super().__init__()
        self.C = C
        self.epsilon = epsilon

    def _make(self) -> Any:
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVR

        return TransformedTargetRegressor(
            make_pipeline(StandardScaler(), SVR(C=self.C, epsilon=self.epsilon)),
            transformer=StandardScaler())


ESTIMATORS: dict[str, Callable[[], Estimator]] = {
    "gp": GaussianProcess, "linear": Linear, "isotonic": Isotonic, "svm": SVM,
}


def make_estimator(name: str) -> Estimator:
    """An estimator by name: gp, linear, isotonic or svm."""
    try:
        return ESTIMATORS[name]()
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; estimators: {', '.join(ESTIMATORS)}") \
            from None


def nrmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root-mean-square error normalized by the range of ``y_true`` (Table 1's NRMSE)."""
    y_true, y_pred = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    span = float(y_true.max() - y_true.min()) if len(y_true) else 0.0
    rmse = float(np.sqrt(np.mean((y_true - y_pred) ** 2))) if len(y_true) else 0.0
    return rmse / span if span > 0 else rmse


class SLTModel:
    """Per operator, a latency model and a slack-ready model (Eq. 7–8)."""

    def __init__(self, estimator: str = "gp", slt_cap: float = 100_000.0):
        self.estimator = estimator
        self.slt_cap = float(slt_cap)
        self.latency: dict[str, Estimator] = {}
        self.slack_ready: dict[str, Estimator] = {}

    def fit(self, samples: Mapping[str, Samples]) -> SLTModel:
        if not samples:
            raise ValueError("SLTModel.fit: no samples (did the training runs process tuples?)")
        for op, s in samples.items():
            X, lat, slr = s.arrays()
            self.latency[op] = make_estimator(self.estimator).fit(X, lat)
            self.slack_ready[op] = make_estimator(self.estimator).fit(X, slr)
        return self

    @property
    def operators(self) -> list[str]:
        return list(self.latency)

    def predict(self, op: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (latency ms, slack-ready tuples) of ``op`` for the rows of ``X``; both
        clipped at 0 (neither can be negative)."""
        if op not in self.latency:
            raise KeyError(f"no model for operator {op!r}; models: {self.operators}")
        lat = np.maximum(self.latency[op].predict(X), 0.0)
        slr = np.maximum(self.slack_ready[op].predict(X), 0.0)
        return lat, slr

    def save(self, path: str | os.PathLike) -> None:
        joblib = require("joblib", "tuner", "saving an SLTuner model")
        joblib.dump(self, path)

    @staticmethod
    def load(path: str | os.PathLike) -> SLTModel:
        joblib = require("joblib", "tuner", "loading an SLTuner model")
        model = joblib.load(path)
        if not isinstance(model, SLTModel):
            raise ValueError(f"{path}: not a saved SLTModel (got {type(model).__name__})")
        return model
