"""Regression: SN outputs went back in time when a channel index left and came back.

The flaky failure (test_sn_process, query longest-hashtag, seed 0, 4 tuples, p0 = 4, schedule
``[(2, 1), (2, 4), (5, 1), (6, 2)]``, process channels): "sink 0 output goes back in time".
Cause: with process channels the splitter's migration waited only for the staying channels'
``collected``; a leaving channel's ``leave`` went to the merger through that channel's relay
thread whenever the relay got to it. The migration right after (1 → 4, same COUNT) put a
``join`` for the same index first; the late ``leave`` then deleted the *new* channel's
watermark in the merger, which released the other channels' later outputs before the new
channel's earlier ones. Fix: the horizontal barrier spans the leaving channels too (as
elastic-scaling Alg. 4 and the thread channels do): the relay reports ``left`` once the
``leave`` is in the merger's queue, and the splitter waits for it.

The first test forces the bad interleaving (no sleeps deciding the outcome: a ``leave`` waits,
bounded, for the ``join`` the old code lets overtake it) and fails on the old code with the
flaky failure's message; the next two check the barrier itself without processes; the last
the merger's guard against a ``join`` of an index that has not left.
"""

import queue
import threading

import pytest

import stretchflow as sf
from stretchflow.elastic.migration import MemoryStateStore
from stretchflow.executors import sn_region
from stretchflow.executors.sn_process import ProcessTransport
from stretchflow.runtime import MetricsLog, RunControl
from test_sn import same_as_reference, tweet_records

FAILING_SCHEDULE = [(2, 1), (2, 4), (5, 1), (6, 2)]
# Seconds a held message waits at most. A "leave" is released by the "join" that overtakes
# it on the old code; on the fixed code nothing can overtake it and it waits all of
# _LEAVE_HOLD (the test's cost). Channel 1's outputs are released by the other channels'
# finals, which come on old and fixed code alike: the bound only keeps a broken run from
# hanging, and is long because a channel process can take seconds to start on a busy machine.
_LEAVE_HOLD = 2.0
_OUTPUT_HOLD = 30.0


class _RacyMergerQueue(queue.Queue):
    """A region's merger queue that makes the old race happen every time.

    * A ``leave`` of channel j waits until a ``join`` of j is in (bounded): on
      the old code the splitter's next migration does not wait for the leave, so the join
      overtakes it; on the fixed code the migration waits for the leave, nothing overtakes it
      and the hold times out.
    * The outputs of channel 1 once it joined again wait until every other channel's
      ``final`` is in (bounded): with its watermark wrongly dropped, the merger then releases
      the others' later outputs before channel 1's earlier ones (in the failing run channel 1
      was the late one; only one channel is held, or they would all wait for each other).

    ``order`` is ``(kind, j)`` of every join / leave / final in the order they entered."""

    def __init__(self, maxsize: int):
        super().__init__(maxsize)
        self.cond = threading.Condition()
        self.order: list[tuple[str, int]] = []
        # items already held once (run.put retries a put on a full queue), by id(); the item
        # is kept so that its id is not reused by a later message
        self.held: dict[int, tuple] = {}

    def put(self, item, block=True, timeout=None):
        kind = item[0]
        if kind in ("leave", "out", "final") and id(item) not in self.held:
            self.held[id(item)] = item
            j = item[1]
            with self.cond:
                if kind == "leave":
                    self.cond.wait_for(lambda: ("join", j) in self.order, _LEAVE_HOLD)
                elif j == 1 and ("join", j) in self.order:
                    self.cond.wait_for(lambda: self._others_final(j), _OUTPUT_HOLD)
        super().put(item, block, timeout)
        if kind in ("join", "leave", "final"):
            with self.cond:
                self.order.append((kind, item[1]))
                self.cond.notify_all()

    def _others_final(self, j: int) -> bool:
        finals = {k for kind, k in self.order if kind == "final"}
        return all(k in finals for k in range(4) if k != j)


def _joins_before_leave(order: list[tuple[str, int]], p0: int) -> list[int]:
    """Channel indexes whose ``join`` reached the merger while the previous channel with that
    index had not left yet."""
    live, bad = set(range(p0)), []
    for kind, j in order:
        if kind == "join":
            if j in live:
                bad.append(j)
            live.add(j)
        elif kind == "leave":
            live.discard(j)
    return bad


def test_leave_reaches_the_merger_before_the_same_index_joins_again(monkeypatch):
    queues: list[_RacyMergerQueue] = []
    init = sn_region.Region.__init__

    def racy_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.outq = _RacyMergerQueue(self.outq.maxsize)
        queues.append(self.outq)

    monkeypatch.setattr(sn_region.Region, "__init__", racy_init)
    # exactly the arguments of the flaky failure
    res = same_as_reference("longest-hashtag", [tweet_records(0, 4)], parallelism=4,
                            reconfigure=FAILING_SCHEDULE, batch=256, channels="processes")
    (q,) = queues
    assert _joins_before_leave(q.order, 4) == []
    assert [r["parallelism_after"] for r in res.extra["reconfigurations"]] == [1, 4, 1, 2]
    assert [r["applied"] for r in res.extra["reconfigurations"]] == [True, True, False, False]


def _transport() -> ProcessTransport:
    # migrate() reads only the reply queue: no operator to ship, no process to start
    t = ProcessTransport.__new__(ProcessTransport)
    t.ctlq = queue.Queue()
    return t


class _Ex:
    def __init__(self, n: int):
        self.run = RunControl()
        self.channels = {j: type("Ch", (), {"q": queue.Queue()})() for j in range(n)}


def test_process_migration_waits_for_every_leaving_channel():
    """4 → 1: three channels leave; the migration returns only after their ``left`` (the
    horizontal barrier over max(N_old, N_new) channels), so no reply is left behind."""
    t, ex = _transport(), _Ex(4)
    for j in range(4):
        t.ctlq.put(("donated", j, 10, 1))
    # replies in any order: a leaving relay may be faster than the staying channel
    for msg in [("left", 3), ("collected", 0), ("left", 1), ("left", 2)]:
        t.ctlq.put(msg)
    old, new = [0, 1, 2, 3], [0, 0, 0, 0]
    assert t.migrate(ex, 1, old, new, 4, 1) == (40, 4)
    assert t.ctlq.empty()
    assert ex.channels[0].q.get_nowait() == ("migrate", 1, old, new)
    assert ex.channels[0].q.get_nowait() == ("collect", 1, old, new)
    for j in (1, 2, 3):
        assert ex.channels[j].q.get_nowait() == ("migrate", 1, old, new)
        assert ex.channels[j].q.get_nowait() == ("leave",)


def test_process_migration_rejects_a_reply_it_does_not_expect():
    t, ex = _transport(), _Ex(2)
    for j in range(2):
        t.ctlq.put(("donated", j, 0, 0))
    t.ctlq.put(("collected", 0))
    t.ctlq.put(("collected", 1))  # channel 1 was told to leave: a second "collected" is wrong
    with pytest.raises(RuntimeError, match="unexpected reply 'collected'"):
        t.migrate(ex, 1, [0, 1], [0, 0], 2, 1)


def test_merger_refuses_a_join_before_the_same_index_left():
    """The merger's own guard: had a late ``leave`` slipped in again, the run fails with a
    clear error instead of writing outputs out of order."""
    op = sf.Flow("x").source(sf.io.iterable([])).aggregate(
        size=10, keys=lambda t: {t}, init=lambda: 0, update=lambda a, t: a + 1).node.spec
    region = sn_region.Region(op, parallelism=2, n_groups=8, batch=4, queue_size=4,
                              schedule=[], store=MemoryStateStore(), pulse=1.0,
                              run=RunControl(), metrics=MetricsLog(), threads=[], inputs=[],
                              others=[])
    region.outq.put(("join", 1, 0, 0))  # channel 1 of the start has not left
    region.outq.put(("eos", []))  # without the guard the merger ends here, without an error
    with pytest.raises(RuntimeError, match="channel 1 joins the merger before"):
        region._merger()
