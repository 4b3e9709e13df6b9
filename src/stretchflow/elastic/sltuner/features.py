"""The features of the SLTuner's prediction models (determinism-latency Eq. 6) and the
training samples taken from runs of the slack executor.

``x_op = (SLT_op, hour_op, min_op, sec_op, |PThreads_op|, SW_op)``: hour, minute and second of
the last tuple the operator received (event time; they let the model pick up periodic
patterns of the input), the operator's thread count and its window size. An SLT of ∞ (ready
tuples only) is given to the models as ``slt_cap``.

Which "last tuple": the paper says the last one *processed*. But the timestamp an operator has
processed up to depends on the SLT itself (with a large SLT it lags the input by the whole
skew), so the same input moment gets different time features under different SLTs and a
model trained on varied SLTs cannot tell the phases of the input apart: with a growing skew
the SLTuner then never saw the violation coming. We use the newest timestamp the operator's
SSG has received (``max_ts``), a clock of the input that every SLT shares. Samples and the
tuner read ``max_ts`` when the executor reports it and fall back to ``last_ts`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

FEATURES = ("slt", "hour", "minute", "second", "threads", "window_ms")


def feature_vector(slt: float, last_ts: float, threads: int, window_ms: int,
                   slt_cap: float) -> list[float]:
    """Eq. 6 for one operator."""
    s = slt_cap if not math.isfinite(slt) or slt > slt_cap else float(slt)
    t = int(last_ts) if math.isfinite(last_ts) else 0
    sec_total = t // 1000
    return [s, float(sec_total // 3600 % 24), float(sec_total // 60 % 60),
            float(sec_total % 60), float(threads), float(window_ms)]


def clock_ts(m: Mapping[str, Any]) -> float:
    """The event time that gives an operator's time features (module doc)."""
    ts = m.get("max_ts", m["last_ts"])
    return ts if math.isfinite(ts) else m["last_ts"]


@dataclass
class Samples:
    """Training data of one operator: features, latency (ms) and slack-ready counts."""

    X: list[list[float]]
    latency: list[float]
    slack_ready: list[float]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self.X, dtype=float), np.asarray(self.latency, dtype=float),
                np.asarray(self.slack_ready, dtype=float))


def samples_from_series(series: Iterable[Mapping[str, Any]], slt_cap: float,
                        into: dict[str, Samples] | None = None) -> dict[str, Samples]:
    """Samples per operator from a run's ``extra["series"]``. The features of an interval
    pair the SLT in force during it with the event time the operator had reached at its end.
    Intervals before an operator processed anything are skipped."""
    out: dict[str, Samples] = into if into is not None else {}
    for point in series:
        for name, m in point["operators"].items():
            if not math.isfinite(m["last_ts"]):
                continue
            s = out.setdefault(name, Samples([], [], []))
            s.X.append(feature_vector(m["slt"], clock_ts(m), m["threads"], m["window_ms"],
                                      slt_cap))
            s.latency.append(float(m["latency_ms"]))
            s.slack_ready.append(float(m["slack_ready"]))
    return out
