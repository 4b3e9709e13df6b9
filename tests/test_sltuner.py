"""The SLTuner (determinism-latency §5.2): estimators, laxity trigger, greedy hill climbing,
the tuner behind the controller interface, and the baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.elastic.controller import Metrics
from stretchflow.elastic.sltuner import (
    ESTIMATORS,
    Explorer,
    MaxTimestamp,
    Samples,
    SLTDecision,
    SLTModel,
    SLTuner,
    StaticSLT,
    TCPLike,
    feature_vector,
    hill_climb,
    laxity,
    make_estimator,
    nrmse,
    samples_from_series,
    trigger,
)

SPEEDUP = 10.0


def lag_ms(t_s: float) -> float:
    """A synthetic periodic skew (wall ms) as a function of event time (s)."""
    return 3000.0 * max(0.0, math.sin(2 * math.pi * t_s / 120.0))


def synthetic_samples(n: int = 240, seed: int = 0) -> dict[str, Samples]:
    """latency = min(lag, SLT / speed-up) and slack-ready ∝ the part of the lag above SLT,
    the shape the slack executor measures."""
    rng = np.random.default_rng(seed)
    s = Samples([], [], [])
    for _ in range(n):
        t = rng.uniform(0, 240)
        slt = rng.uniform(0, 40_000)
        lag = lag_ms(t)
        s.X.append(feature_vector(slt, t * 1000, 1, 5000, 40_000))
        s.latency.append(min(lag, slt / SPEEDUP) + rng.normal(0, 20))
        s.slack_ready.append(max(0.0, lag * SPEEDUP - slt) / 20 + rng.normal(0, 5))
    return {"join": s}


def metrics(ops: dict, latency: float, deadline: float | None = None) -> Metrics:
    return Metrics(time=1.0, period=0.5, parallelism=1, throughput=0.0, input_rate=0.0,
                   max_parallelism=1, extras={"operators": ops, "latency_ms": latency,
                                              "deadline_ms": deadline, "paths": [["join"]]})


def op_metrics(slt: float, last_ts: float, skew: float = 0.0) -> dict:
    return {"slt": slt, "last_ts": last_ts, "threads": 1, "window_ms": 5000,
            "skew_ms": skew, "max_skew_ms": skew, "latency_ms": 0.0, "slack_ready": 0}


@pytest.fixture(scope="module")
def model():
    return SLTModel("gp", slt_cap=40_000).fit(synthetic_samples(240))


# -- features and estimators -----------------------------------------------------------------


def test_feature_vector_is_eq6():
    x = feature_vector(math.inf, (2 * 3600 + 3 * 60 + 4) * 1000 + 999, 4, 5000, 60_000)
    assert x == [60_000.0, 2.0, 3.0, 4.0, 4.0, 5000.0]
    assert feature_vector(10, -math.inf, 1, 1, 100)[:4] == [10.0, 0.0, 0.0, 0.0]


def test_samples_from_series_skips_idle_operators():
    series = [{"operators": {"j": {**op_metrics(5, -math.inf), "latency_ms": 3}}},
              {"operators": {"j": {**op_metrics(5, 61_000), "latency_ms": 7,
                                   "slack_ready": 2}}}]
    s = samples_from_series(series, 100)
    assert s["j"].latency == [7.0] and s["j"].slack_ready == [2.0]
    assert s["j"].X == [[5.0, 0.0, 1.0, 1.0, 1.0, 5000.0]]
    # the time features follow the newest timestamp received when the executor reports it
    series[1]["operators"]["j"]["max_ts"] = 125_000
    assert samples_from_series(series, 100)["j"].X == [[5.0, 0.0, 2.0, 5.0, 1.0, 5000.0]]


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimators_learn_the_synthetic_model(name):
    s = synthetic_samples(200)["join"]
    X, lat, slr = s.arrays()
    tr, te = slice(0, 100), slice(100, 200)
    # a target that depends on the SLT only: every estimator must beat the mean
    y = np.minimum(X[:, 0] / SPEEDUP, 2000.0)
    err = nrmse(y[te], make_estimator(name).fit(X[tr], y[tr]).predict(X[te]))
    assert err < 0.5 * nrmse(y[te], np.full(100, y[tr].mean()))
    if name == "gp":  # the paper's choice also captures the periodic lag (time features)
        err = nrmse(lat[te], make_estimator(name).fit(X[tr], lat[tr]).predict(X[te]))
        assert err < 0.5 * nrmse(lat[te], np.full(100, lat[tr].mean()))


def test_estimator_errors():
    with pytest.raises(ValueError, match="unknown estimator"):
        make_estimator("forest")
    with pytest.raises(ValueError, match="n x 6"):
        make_estimator("linear").fit(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(RuntimeError, match="before fit"):
        make_estimator("gp").predict(np.zeros((1, 6)))


def test_nrmse():
    assert nrmse(np.array([0.0, 10.0]), np.array([0.0, 10.0])) == 0.0
    assert nrmse(np.array([0.0, 10.0]), np.array([1.0, 11.0])) == pytest.approx(0.1)


def test_model_save_and_load(tmp_path, model):
    X = np.asarray([feature_vector(s, 30_000, 1, 5000, 40_000) for s in (0, 10_000, 40_000)])
    before = model.predict("join", X)
    model.save(tmp_path / "m.joblib")
    loaded = SLTModel.load(tmp_path / "m.joblib")
    after = loaded.predict("join", X)
    np.testing.assert_allclose(before[0], after[0])
    np.testing.assert_allclose(before[1], after[1])
    assert loaded.slt_cap == 40_000 and loaded.operators == ["join"]
    with pytest.raises(KeyError, match="no model"):
        loaded.predict("other", X)


# -- trigger and hill climbing ---------------------------------------------------------------


def test_laxity_trigger():
    assert laxity(6000, 6500) == -500
    assert trigger(laxity(6000, 6500), 6000, 0.3) == "violation"
    assert trigger(laxity(6000, 6000), 6000, 0.3) == "violation"  # Eq. 9: <= 0
    assert trigger(laxity(6000, 5000), 6000, 0.3) is None
    assert trigger(laxity(6000, 4200), 6000, 0.3) == "room"  # Eq. 10: >= α·Deadline
    with pytest.raises(ValueError, match="alpha"):
        trigger(0, 1, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.5, 5.0), min_size=1, max_size=4), st.floats(100, 20_000),
       st.floats(100, 3000))
def test_hill_climbing_respects_the_deadline(weights, deadline, step):
    """Synthetic model: latency = Σ w_op·SLT_op / 10, slack-ready = Σ max(0, 50 000 − SLT_op)
    (both monotone, as in the paper). The climb ends under the deadline and no single further
    step would be valid."""
    ops = [f"op{i}" for i in range(len(weights))]
    w = dict(zip(ops, weights, strict=True))

    def lat(s):
        return sum(w[o] * s[o] for o in ops) / 10

    def slr(s):
        return sum(max(0.0, 50_000 - s[o]) for o in ops)

    start = dict.fromkeys(ops, 0.0)
    best = hill_climb(start, step, 50_000, lat, slr, deadline)
    assert lat(best) < deadline
    for o in ops:
        nxt = {**best, o: min(best[o] + step, 50_000)}
        assert nxt == best or not lat(nxt) < deadline
    assert slr(best) <= slr(start)


def test_hill_climbing_picks_the_operator_that_cuts_most_slack_ready():
    def lat(s):
        return s["a"] + s["b"]

    def slr(s):
        return 1000 - 3 * s["a"] - s["b"]  # raising a pays three times as much

    best = hill_climb({"a": 0, "b": 0}, 10, 100, lat, slr, 150)
    assert best == {"a": 100, "b": 40}  # a to its cap first, then b while latency < 150


# -- the tuner and the baselines ---------------------------------------------------------------


def test_sltuner_lowers_the_slt_on_a_predicted_violation(model):
    tuner = SLTuner(model, 1500, alpha=0.3, step=1000, margin=0.0)
    t = 30_000  # lag 3000 ms: with SLT 40 000 the predicted latency (3000) violates 1500
    d = tuner.observe(metrics({"join": op_metrics(40_000, t * 1.0)}, 3000))
    assert isinstance(d, SLTDecision)
    new = d.slt["join"]
    assert new < 40_000
    x = np.asarray([feature_vector(new, t, 1, 5000, 40_000)])
    assert model.predict("join", x)[0][0] < 1500  # the chosen SLT is predicted in time
    assert tuner.log[-1]["trigger"] == "violation"


def test_sltuner_raises_the_slt_when_there_is_room(model):
    tuner = SLTuner(model, 2500, alpha=0.3, step=1000, margin=0.0)
    t = 0  # lag 0: any SLT is in time, the climb goes to the cap (fewest slack-ready)
    d = tuner.observe(metrics({"join": op_metrics(1000, t)}, 5))
    assert isinstance(d, SLTDecision) and d.slt["join"] > 1000
    assert tuner.log[-1]["trigger"] == "room"


def test_sltuner_options_are_checked(model):
    for bad in ({"alpha": 1.0}, {"step": 0}, {"margin": 1.0}, {"horizon": 0}):
        with pytest.raises(ValueError):
            SLTuner(model, 1000, **bad)


def test_sltuner_needs_a_deadline(model):
    with pytest.raises(ValueError, match="deadline"):
        SLTuner(model).observe(metrics({"join": op_metrics(1000, 0)}, 5))
    assert SLTuner(model).observe(metrics({"join": op_metrics(1, -math.inf)}, 5, 10)) is None


def test_baselines():
    static = StaticSLT(1000)
    d = static.observe(metrics({"join": op_metrics(math.inf, 0)}, 5))
    assert d.slt == {"join": 1000}
    assert static.observe(metrics({"join": op_metrics(1000, 0)}, 5)) is None

    mx = MaxTimestamp()
    assert mx.observe(metrics({"join": op_metrics(math.inf, 0, skew=700)}, 5)).slt == \
        {"join": 700}
    assert mx.observe(metrics({"join": op_metrics(700, 0, skew=300)}, 5)) is None  # max kept

    tcp = TCPLike(initial=4000, step=1000)
    assert tcp.observe(metrics({"join": op_metrics(math.inf, 0)}, 100)).slt == {"join": 4000}
    assert tcp.observe(metrics({"join": op_metrics(4000, 0)}, 200)).slt == {"join": 2000}
    assert tcp.observe(metrics({"join": op_metrics(2000, 0)}, 150)).slt == {"join": 3000}
    assert tcp.observe(metrics({"join": op_metrics(3000, 0)}, 150)) is None


def test_explorer_holds_random_slts():
    ex = Explorer([0, 10, 20], hold=3, seed=1)
    got = [ex.observe(metrics({"join": op_metrics(0, 0)}, 5)) for _ in range(6)]
    assert [g is None for g in got] == [False, True, True, False, True, True]
    assert all(g.slt["join"] in (0, 10, 20) for g in got if g is not None)
