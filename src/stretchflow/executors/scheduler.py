"""Central scheduler policies of the ordered multicore executor (ordered-multicore §6).

A worker that needs work asks the scheduler, which looks at the *schedulable* operators (fewer
workers than their maximum degree of parallelism and a non-empty worklist, §6 first
paragraphs) and picks one with a heuristic. The worker then runs that operator for one time
slice: ``slice_tuples`` computes how many tuples fit in the slice from the measured per-tuple
cost c_i (§6: "the maximum number of tuples ... can be computed using this constant s and c_i").

Per-operator statistics (:class:`OpStats`): c_i (seconds per input tuple, an exponential
moving average of measured slices), s_i (outputs per input), cs_i (cumulative selectivity
since ingress, ∏ s_k), w_i (workers on the operator now) and Tw_i (worker time spent on it in
the current CT window).

Policies (all pure functions of a list of :class:`Candidate` views, so they are easy to test):

* ``qst`` — queue-size throttling, §6.1 and Eq. (1): the earliest operator whose output queue
  is below T_i = C·cs_i / Σ cs_k;
* ``lp`` — last in pipeline, §6.2: the latest schedulable operator;
* ``et`` — estimated time, §6.3 and Eq. (2): the highest p_i = I_i·c_i / (w_i + 1);
* ``ct`` — current throughput, §6.4 and Eq. (3): the lowest nw_i = (Tw_i + w_i·s)/(c_i·cs_i).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: weight of a new measurement in the moving averages of c_i and s_i
_ALPHA = 0.2


@dataclass
class OpStats:
    """Measured statistics of one operator of the pipeline (index ``index``, 0 = source)."""

    name: str
    index: int
    max_degree: int
    cost: float = 1e-5  # c_i, seconds per input tuple; a small prior until measured
    selectivity: float = 1.0  # s_i, outputs per input
    workers: int = 0  # w_i, workers currently running a slice of this operator
    tuples_in: float = 0  # float: an O+ instance reports 1/p of the inputs it went through
    tuples_out: float = 0
    busy: float = 0.0  # total worker time on the operator
    window_busy: float = 0.0  # Tw_i: worker time in the current CT window
    measured: bool = False

    def record(self, n_in: float, n_out: float, seconds: float) -> None:
        """One finished slice: ``n_in`` inputs gave ``n_out`` outputs in ``seconds``."""
        self.tuples_in += n_in
        self.tuples_out += n_out
        self.busy += seconds
        self.window_busy += seconds
        if n_in <= 0:
            return
        c, s = seconds / n_in, n_out / n_in
        if not self.measured:
            self.cost, self.selectivity, self.measured = c, s, True
        else:
            self.cost += _ALPHA * (c - self.cost)
            self.selectivity += _ALPHA * (s - self.selectivity)


@dataclass
class Candidate:
    """What a policy sees of one schedulable operator."""

    index: int  # position in the pipeline (0 = source)
    stats: OpStats
    worklist: int  # I_i, tuples waiting for the operator (large for an unread source)
    out_queue: int  # size of its output queue, the worklist of the next operator
    cum_selectivity: float  # cs_i


Policy = Callable[[Sequence[Candidate], "Scheduler"], Candidate]


def _qst(cands: Sequence[Candidate], sched: Scheduler) -> Candidate:
    # §6.1: push tuples from the ingress; T_i = C * cs_i / sum(cs_k) (Eq. 1)
    total = sum(sched.cum_selectivities) or 1.0
    for c in sorted(cands, key=lambda c: c.index):
        threshold = max(1.0, sched.capacity * c.cum_selectivity / total)
        if c.out_queue < threshold:
            return c
    # every output queue is above its threshold: drain from the egress (pull) rather than idle
    return _lp(cands, sched)


def _lp(cands: Sequence[Candidate], sched: Scheduler) -> Candidate:
    # §6.2: the latest operator in the pipeline with a non-empty worklist (threshold 1)
    return max(cands, key=lambda c: c.index)


def _et(cands: Sequence[Candidate], sched: Scheduler) -> Candidate:
    # §6.3, Eq. 2: the operator that needs the most worker time for its current worklist;
    # ties go to the later operator (pulls tuples out, keeps queues short)
    return max(cands, key=lambda c: (c.worklist * c.stats.cost / (c.stats.workers + 1),
                                     c.index))


def _ct(cands: Sequence[Candidate], sched: Scheduler) -> Candidate:
    # §6.4, Eq. 3: the lowest effective throughput nw_i in the current window is the bottleneck
    sched.roll_window()
    s = sched.time_slice

    def nw(c: Candidate) -> tuple[float, int]:
        st = c.stats
        denom = max(st.cost, 1e-9) * max(c.cum_selectivity, 1e-9)
        return ((st.window_busy + st.workers * s) / denom, -c.index)

    return min(cands, key=nw)


POLICIES: dict[str, Policy] = {"qst": _qst, "lp": _lp, "et": _et, "ct": _ct}


@dataclass
class Scheduler:
    """Chooses an operator for an idle worker and sizes its time slice.

    ``capacity`` is C of Eq. (1) (and the executor's queue bound), ``time_slice`` is s in
    seconds, ``max_batch`` caps the tuples of one slice (bounds reorder-buffer growth and
    keeps the pipeline responsive while costs are still unmeasured), ``ct_window`` is w of
    §6.4 in seconds. Not thread-safe: the executor calls it under its own lock.
    """

    stats: list[OpStats]
    policy: str = "qst"
    capacity: int = 1024
    time_slice: float = 0.002
    max_batch: int = 256
    ct_window: float = 0.05
    cum_selectivities: list[float] = field(default_factory=list)
    _window_start: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"unknown scheduler {self.policy!r}; schedulers: {', '.join(POLICIES)}"
            )
        self._choose = POLICIES[self.policy]
        self.refresh()

    def refresh(self) -> None:
        """Recomputes cs_i = ∏_{k<=i} s_k (the source's own selectivity counts as 1)."""
        cs, acc = [], 1.0
        for st in self.stats:
            if st.index > 0:
                acc *= st.selectivity
            cs.append(acc)
        self.cum_selectivities = cs

    def roll_window(self) -> None:
        """Starts a new CT window once ``ct_window`` seconds have passed."""
        now = time.perf_counter()
        if now - self._window_start >= self.ct_window:
            self._window_start = now
            for st in self.stats:
                st.window_busy = 0.0

    def choose(self, cands: Sequence[Candidate]) -> Candidate | None:
        """The operator an idle worker should run next, or None if nothing is schedulable."""
        if not cands:
            return None
        return self._choose(cands, self)

    def slice_tuples(self, stats: OpStats) -> int:
        """How many tuples fit in one time slice at the operator's measured cost."""
        n = int(self.time_slice / max(stats.cost, 1e-9))
        return max(1, min(self.max_batch, n))

    def finished_slice(self, stats: OpStats, n_in: float, n_out: float, seconds: float) -> None:
        """Records a slice and refreshes the cumulative selectivities."""
        stats.record(n_in, n_out, seconds)
        self.refresh()
