"""A failing run must never deadlock a VSN operator's barriers.

A barrier's action (Alg. 4's reconfiguration, a checkpoint's snapshot) runs holding the
barrier's lock and takes the operator's lock; the abort hook (wake_all) must therefore not
abort barriers while holding the operator's lock. CI once hung for 90 minutes on this
(a scalejoin checkpoint test whose source failed while its instances were at a checkpoint
barrier)."""

from __future__ import annotations

import threading

import pytest

from stretchflow.executors.vsn_operator import VSNOperator
from stretchflow.flow import Node
from stretchflow.runtime.control import RunControl, Stopped
from stretchflow.runtime.metrics import MetricsLog


def _vop() -> VSNOperator:
    vop = VSNOperator(Node("op", "oplus", None), 1, 2, 8, control=RunControl(),
                      log=MetricsLog())
    vop.control.on_abort(lambda _e: vop.wake_all())  # as the executor does
    return vop


def test_abort_while_a_barrier_action_takes_the_operator_lock() -> None:
    vop = _vop()
    in_action, aborting = threading.Event(), threading.Event()
    finished: list[str] = []

    def action() -> None:
        in_action.set()
        aborting.wait(5)
        # wake_all now holds vop.lock (old code) or is done with it (new code)
        threading.Event().wait(0.3)
        with vop.lock:
            finished.append("action")

    with vop.lock:
        bar = vop._barriers[1] = vop.new_barrier(1, action)

    def party() -> None:
        try:
            bar.wait(10)
        except threading.BrokenBarrierError:
            pass
        finished.append("party")

    def fail() -> None:
        in_action.wait(5)
        aborting.set()
        vop.control.fail(RuntimeError("a source failed"))
        finished.append("abort")

    threads = [threading.Thread(target=f, daemon=True) for f in (party, fail)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(finished) == ["abort", "action", "party"], finished


def test_no_barrier_is_made_once_the_run_has_stopped() -> None:
    vop = _vop()
    vop.control.fail(RuntimeError("boom"))
    with vop.lock, pytest.raises(Stopped):
        vop.new_barrier(2, lambda: None)
    with pytest.raises(Stopped):
        vop.barrier(3)
