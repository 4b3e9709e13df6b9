"""Reconfiguration latency under load (issue #16): the control hold of the Elastic ScaleGate
(sources wait from a control tuple until its switch, so the instances need not win the GIL
from them), the per-reconfiguration phases and the spread bound at each control tuple.
No wall-clock assertion: counts, orders and bounds only."""

import threading

import pytest

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.buffers.esg import Aborted, ElasticScaleGate
from stretchflow.engines import get_spec
from stretchflow.io.generators import tweets
from stretchflow.queries import build_query

WAIT = 10.0  # seconds a test waits at most for a thread it expects to finish


def _adder(esg, t, source="a"):
    """A thread that adds ``t`` from ``source``; its outcome is in ``box``."""
    box = {}

    def run():
        try:
            esg.add(t, source)
            box["ok"] = True
        except Exception as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


def _held(esg, n):
    """Until some source waits in the hold (a bounded wait); True if one does."""
    for _ in range(2000):
        with esg._lock:
            if esg._hold_waiting >= n:
                return True
        threading.Event().wait(0.005)
    return False


def test_a_source_waits_after_add_next_until_release():
    esg = ElasticScaleGate(sources=["a"], readers=["r"], capacity=64)
    esg.set_control_hold(60.0)
    esg.add_batch([(1, "x"), (2, "y")], "a")
    assert esg.get_batch("r", 1) == [(1, "x")]
    assert esg.add_next("ctl") == 1
    th, box = _adder(esg, (3, "z"))
    assert _held(esg, 1)
    assert esg.stats()["added"] == 3  # two tuples and the control tuple: z waits
    # the readers are not held: the one reader gets everything up to and past the control
    assert esg.get_batch("r", 9) == [(1, "ctl"), (2, "y")]
    esg.release_hold()
    th.join(WAIT)
    assert box == {"ok": True}
    assert esg.get_batch("r", 9) == [(3, "z")]
    st = esg.stats()
    assert st["hold_waits"] == 1 and st["control_hold"] == 60.0


def test_add_batch_waits_too_and_later_adds_do_not():
    esg = ElasticScaleGate(sources=["a"], readers=["r"])
    esg.set_control_hold(60.0)
    esg.add((1, "x"), "a")
    esg.add_next("ctl")
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", esg.add_batch([(2, "y")], "a")),
                          daemon=True)
    th.start()
    assert _held(esg, 1)
    esg.release_hold()
    th.join(WAIT)
    assert "r" in box
    esg.add((3, "z"), "a")  # released: no wait
    assert esg.stats()["hold_waits"] == 1


def test_the_hold_ends_by_itself_after_its_bound():
    esg = ElasticScaleGate(sources=["a"], readers=["r"])
    esg.set_control_hold(0.01)  # nobody releases it
    esg.add((1, "x"), "a")
    esg.add_next("ctl")
    th, box = _adder(esg, (2, "y"))
    th.join(WAIT)
    assert box == {"ok": True}
    esg.add((3, "z"), "a")  # the lapsed hold is off for later adds
    assert esg.stats()["hold_waits"] == 1
    # no reader had read anything: the control tuple went first, stamped with x's ts
    assert esg.get_batch("r", 9) == [(1, "ctl"), (1, "x"), (2, "y"), (3, "z")]


def test_no_hold_unless_set():
    esg = ElasticScaleGate(sources=["a"], readers=["r"])
    esg.add((1, "x"), "a")
    esg.add_next("ctl")
    esg.add((2, "y"), "a")  # would wait forever (no release) if it held
    assert esg.stats()["hold_waits"] == 0 and esg.stats()["control_hold"] is None


def test_abort_and_removal_end_a_hold_with_an_error():
    esg = ElasticScaleGate(sources=["a", "b"], readers=["r"])
    esg.set_control_hold(60.0)
    esg.add((1, "x"), "a")
    esg.add((1, "x"), "b")
    esg.add_next("ctl")
    ta, boxa = _adder(esg, (2, "y"), "a")
    tb, boxb = _adder(esg, (2, "y"), "b")
    assert _held(esg, 2)
    esg.remove_sources(["b"])  # b's waiting add must raise, as in add's flow control
    tb.join(WAIT)
    assert isinstance(boxb.get("error"), ValueError) and "removed" in str(boxb["error"])
    esg.abort(RuntimeError("stop"))
    ta.join(WAIT)
    assert isinstance(boxa.get("error"), Aborted)


def test_turning_the_hold_off_releases_waiting_sources():
    esg = ElasticScaleGate(sources=["a"], readers=["r"])
    esg.set_control_hold(60.0)
    esg.add((1, "x"), "a")
    esg.add_next("ctl")
    th, box = _adder(esg, (2, "y"))
    assert _held(esg, 1)
    esg.set_control_hold(None)
    th.join(WAIT)
    assert box == {"ok": True}


@pytest.mark.parametrize("bad", [0, -1.0, "1", True, float("nan")])
def test_bad_hold_is_refused(bad):
    esg = ElasticScaleGate(sources=["a"], readers=["r"])
    with pytest.raises(ValueError, match="control hold"):
        esg.set_control_hold(bad)


HOLD = get_spec("vsn").option("control_hold").value  # the engine's default control hold


class _Live(sf.io.IterableSource):
    """Pushed tuple by tuple at once, like the reconfiguration bench's paced source."""

    live = True


def _wordcount(recs, spread, schedule, hold):
    flow = sf.Flow("wc")
    col = build_query("wordcount", [flow.source(_Live(recs, name="tweets"))]).collect()
    seen = {}
    res = flow.run("vsn", parallelism=1, max_parallelism=8, reconfigure=schedule,
                   max_spread=spread, control_hold=hold or 0,
                   on_start=lambda ex: seen.setdefault("esg", next(
                       iter(ex.ops.values())).inlet.esg))
    return col, res, seen["esg"].stats()


@pytest.mark.parametrize("spread", [4, 64])
def test_reconfigurations_under_a_live_source_keep_outputs_bounds_and_phases(spread):
    recs = tweets(3000, seed=3, rate=100_000, vocabulary=60).to_pylist()
    steps = (2, 4, 8, 4, 2, 1, 8, 1)
    schedule = [(200 + 300 * k, p) for k, p in enumerate(steps)]
    ref = sf.Flow("wc")
    ref_col = build_query("wordcount", [ref.source(sf.io.iterable(recs))]).collect()
    ref.run("reference")
    col, res, st = _wordcount(recs, spread, schedule, HOLD)
    assert multiset(col.items) == multiset(ref_col.items)
    log = res.extra["reconfigurations"]
    applied = [r for r in log if r["applied"]]
    # a request still pending when the next one applies is superseded (the hold ends by
    # itself after the control hold, so on a slow host the source may go on before a switch)
    assert applied and all("superseded" in r["note"] for r in log if not r["applied"])
    assert applied[-1]["parallelism_after"] == steps[-1]
    for r in applied:
        # the control tuple goes right after the furthest instance: the slowest one is at
        # most max_spread tuples behind it, the wait the bound is there for
        assert 0 <= r["spread_at_send"] <= spread
        ph = r["phases_ms"]
        # each part is the time between two of the request's events, in their order: the
        # call, the control tuple in ESG_in, the first and the last instance at the barrier,
        # the end of the barrier action (the call and the action take time of their own)
        assert ph["send"] > 0 and ph["switch"] > 0 and ph["first"] <= ph["reach"]
        parts = ph["send"] + ph["reach"] + ph["switch"]
        if ph["reach"] > 0:  # the parts are the whole duration
            assert parts == pytest.approx(r["duration_ms"], abs=1e-6)
        else:  # an instance at the barrier before the sender read the clock: clamped, adds
            assert parts >= r["duration_ms"] - 1e-6
    # the source pushes its next tuple right after each control tuple: it found the hold
    # on at least once of eight (it waits until the switch instead of taking the GIL)
    assert st["hold_waits"] >= 1 and st["control_hold"] == HOLD
    assert st["spread"] == 0  # every instance got everything


def test_without_the_hold_sources_never_wait():
    recs = tweets(1500, seed=4, rate=100_000, vocabulary=60).to_pylist()
    schedule = [(300, 4), (700, 1), (1100, 8)]
    col, res, st = _wordcount(recs, None, schedule, None)
    assert st["hold_waits"] == 0 and st["control_hold"] is None
    log = res.extra["reconfigurations"]
    assert log[-1]["applied"] and res.extra["parallelism"] == {"wordcount": 8}
    assert all(r["phases_ms"] is None for r in log if not r["applied"])
