"""The VSN executor lowers the GIL switch interval during its reconfigurations (switch_hold):
counted holds, restoring only what they set, and never left lowered by a failed run."""

import sys

import pytest

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.executors.vsn_operator import VSNOperator
from stretchflow.runtime import switch_hold
from stretchflow.runtime.switch_hold import SwitchHold
from test_gc_hold import _wordcount

LOW = 0.0003


@pytest.fixture(autouse=True)
def _default_interval():
    """Every test starts at CPython's default and must leave it there."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    after = sys.getswitchinterval()
    sys.setswitchinterval(before)
    assert after == pytest.approx(0.005)
    assert switch_hold.SWITCH_HOLD.holds == 0


def test_holds_are_counted_and_restore_the_previous_interval():
    hold = SwitchHold(LOW)
    hold.acquire()
    assert sys.getswitchinterval() == pytest.approx(LOW)
    hold.acquire()  # a second operator's request
    hold.release()
    assert sys.getswitchinterval() == pytest.approx(LOW) and hold.holds == 1
    hold.release()
    assert sys.getswitchinterval() == pytest.approx(0.005) and hold.holds == 0
    with pytest.raises(RuntimeError, match="SwitchHold.release without a matching acquire"):
        hold.release()
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_second_cycle_restores_what_was_there_then():
    hold = SwitchHold(LOW)
    sys.setswitchinterval(0.002)
    with hold:
        assert sys.getswitchinterval() == pytest.approx(LOW)
    assert sys.getswitchinterval() == pytest.approx(0.002)
    sys.setswitchinterval(0.005)
    with hold:
        pass
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_an_interval_already_as_low_is_left_alone():
    sys.setswitchinterval(0.0001)
    try:
        hold = SwitchHold(LOW)
        with hold:
            assert sys.getswitchinterval() == pytest.approx(0.0001)  # not raised to LOW
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(0.005)


def test_an_interval_changed_by_someone_else_during_the_hold_is_theirs():
    hold = SwitchHold(LOW)
    with hold:
        sys.setswitchinterval(0.001)  # e.g. the program, while a reconfiguration ran
    assert sys.getswitchinterval() == pytest.approx(0.001)
    sys.setswitchinterval(0.005)


def test_the_interval_is_restored_after_an_exception():
    hold = SwitchHold(LOW)
    with pytest.raises(ZeroDivisionError):
        with hold:
            with hold:
                raise ZeroDivisionError
    assert sys.getswitchinterval() == pytest.approx(0.005) and hold.holds == 0


@pytest.mark.parametrize("interval", [0, -1.0])
def test_a_non_positive_interval_is_refused(interval):
    with pytest.raises(ValueError, match="SwitchHold: the interval must be > 0"):
        SwitchHold(interval)


class _Recording(SwitchHold):
    """Records the interval seen right after each acquire."""

    def __init__(self):
        super().__init__(LOW)
        self.seen: list[float] = []

    def acquire(self):
        super().acquire()
        self.seen.append(sys.getswitchinterval())


@pytest.mark.parametrize("on", [True, False])
def test_every_reconfiguration_takes_and_returns_one_hold(monkeypatch, on):
    hold = _Recording()
    monkeypatch.setattr("stretchflow.executors.vsn_operator.SWITCH_HOLD", hold)
    at_switch = []  # the interval while the barrier action runs (the hold is still taken)
    apply = VSNOperator._apply_request

    def recording_apply(self, epoch):
        at_switch.append(sys.getswitchinterval())
        return apply(self, epoch)

    monkeypatch.setattr(VSNOperator, "_apply_request", recording_apply)
    f_ref, c_ref = _wordcount(name="switch")
    f_ref.run()
    flow, col = _wordcount(name="switch")
    res = flow.run(engine="vsn", parallelism=1, max_parallelism=4, hold_switch=on,
                   reconfigure=[(0, 2), (500, 4), (1500, 1), (2500, 3), (9999, 2)])
    assert len(res.extra["reconfigurations"]) == 5
    assert len(hold.seen) == (5 if on else 0)
    assert all(s == pytest.approx(LOW) for s in hold.seen)
    assert at_switch and all(s == pytest.approx(LOW if on else 0.005) for s in at_switch)
    assert hold.holds == 0
    assert c_ref.items and multiset(col.items) == multiset(c_ref.items)


def test_a_failing_run_releases_its_holds(monkeypatch):
    hold = _Recording()
    monkeypatch.setattr("stretchflow.executors.vsn_operator.SWITCH_HOLD", hold)
    # the last request is pending (its control tuple not yet read) when the operator fails
    with pytest.raises(sf.OperatorError, match="boom"):
        _wordcount(fail_at=1200, name="switch")[0].run(
            engine="vsn", parallelism=2, max_parallelism=4, hold_switch=True,
            reconfigure=[(1000, 4), (1199, 1), (2000, 3)])
    assert hold.seen and hold.holds == 0
    assert sys.getswitchinterval() == pytest.approx(0.005)

