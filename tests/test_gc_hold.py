"""The VSN executor keeps cyclic garbage collection out of its reconfigurations (gc_hold)."""

import gc

import pytest

import stretchflow as sf
from stretchflow.runtime import gc_hold
from stretchflow.runtime.gc_hold import GCHold


def test_holds_are_counted_and_restore_the_previous_state():
    assert gc.isenabled()
    hold = GCHold()
    hold.acquire()
    hold.acquire()
    hold.release()
    assert not gc.isenabled() and hold.holds == 1
    hold.release()
    assert gc.isenabled() and hold.holds == 0
    with pytest.raises(RuntimeError, match="without a matching acquire"):
        hold.release()


def test_a_program_that_disabled_gc_keeps_it_disabled():
    gc.disable()
    try:
        hold = GCHold()
        hold.acquire()
        hold.release()
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Counting(GCHold):
    def __init__(self):
        super().__init__()
        self.acquired = 0
        self.disabled_at_acquire = []

    def acquire(self):
        super().acquire()
        self.acquired += 1
        self.disabled_at_acquire.append(not gc.isenabled())


def _wordcount(rows=3000, fail_at=None, name="gc"):
    """(flow, collector) of a small wordcount whose f_U fails from ``fail_at`` on (also the
    switch-interval hold's tests' flow)."""
    recs = [{"ts": t, "text": f"w{t % 17} w{t % 5}"} for t in range(rows)]
    flow = sf.Flow(name)

    def update(a, t):
        if fail_at is not None and t["ts"] >= fail_at:
            raise ZeroDivisionError("boom")
        return a + 1

    col = flow.source(sf.io.iterable(recs)).aggregate(
        size=100, keys=lambda t: set(t["text"].split()), init=lambda: 0, update=update,
        output=lambda k, a: {"k": k, "n": a}, name="agg").collect()
    return flow, col


@pytest.mark.parametrize("defer", [True, False])
def test_every_reconfiguration_takes_and_returns_one_hold(monkeypatch, defer):
    hold = _Counting()
    monkeypatch.setattr("stretchflow.executors.vsn_operator.GC_HOLD", hold)
    res = _wordcount()[0].run(engine="vsn", parallelism=1, max_parallelism=4,
                           reconfigure=[(0, 2), (500, 4), (1500, 1), (2500, 3), (9999, 2)],
                           defer_gc=defer)
    assert len(res.extra["reconfigurations"]) == 5
    assert hold.acquired == (5 if defer else 0)
    assert hold.holds == 0 and gc.isenabled()
    assert all(hold.disabled_at_acquire)


def test_a_failing_run_releases_its_holds(monkeypatch):
    hold = _Counting()
    monkeypatch.setattr("stretchflow.executors.vsn_operator.GC_HOLD", hold)
    with pytest.raises(sf.OperatorError, match="boom"):
        _wordcount(fail_at=1200)[0].run(engine="vsn", parallelism=2, max_parallelism=4,
                                     reconfigure=[(1000, 4), (1199, 1), (2000, 3)])
    assert hold.holds == 0 and gc.isenabled()
    assert gc_hold.GC_HOLD.holds == 0


def test_a_run_freezes_the_heap_it_starts_with_and_gives_it_back():
    seen = []

    def update(a, t):
        if not seen:
            seen.append(gc.get_freeze_count())
        return a + 1

    flow = sf.Flow("freeze")
    flow.source(sf.io.iterable([{"ts": t, "k": t % 3} for t in range(50)])).aggregate(
        size=10, keys=lambda t: {t["k"]}, init=lambda: 0, update=update,
        output=lambda k, a: {"k": k, "n": a}).collect()
    assert gc.get_freeze_count() == 0
    flow.run()
    assert seen and seen[0] > 0  # during the run, the objects alive at its start were frozen
    assert gc.get_freeze_count() == 0
    with pytest.raises(sf.OperatorError):  # a failing run gives them back too
        _wordcount(fail_at=10)[0].run()
    assert gc.get_freeze_count() == 0


def test_nested_runs_and_a_program_that_froze_objects_itself(monkeypatch):
    # gc.freeze/unfreeze are counted, not the frozen objects: those may be freed at any time
    # (another thread dropping a reference), so comparing counts before and after races
    calls: list[str] = []
    real_freeze, real_unfreeze = gc.freeze, gc.unfreeze
    monkeypatch.setattr(gc, "freeze", lambda: (calls.append("freeze"), real_freeze())[1])
    monkeypatch.setattr(gc, "unfreeze", lambda: (calls.append("unfreeze"), real_unfreeze())[1])
    freeze = gc_hold.RunFreeze()
    with freeze:
        assert gc.get_freeze_count() > 0
        with freeze:  # a second flow running at the same time
            pass
        assert calls == ["freeze"]  # the nested run neither froze again nor unfroze
    assert calls == ["freeze", "unfreeze"]
    assert gc.get_freeze_count() == 0
    real_freeze()  # a program that froze objects itself
    try:
        calls.clear()
        with freeze:
            assert gc.get_freeze_count() > 0
        assert calls == []  # left alone: not frozen again, not unfrozen by the run
        assert gc.get_freeze_count() > 0
    finally:
        real_unfreeze()
