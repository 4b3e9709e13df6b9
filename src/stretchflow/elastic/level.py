"""The SASO level controller of Gedik et al., "Elastic scaling for data stream
processing" (IEEE TPDS 2014), §4, Algorithms 1–3.

Once per adaptation period (5 s in the paper) the controller sees two local
metrics of a parallel region:

* the *congestion index*, the fraction of the period the splitter spent
  blocked sending to channels (averaged over channels); the period counts as
  congested when it exceeds a threshold (0.2 in the paper's experiments; §4.3
  and App. B.3 find [0.01, 0.3] robust, 0 overshoots, 0.9 under-provisions);
* the *throughput*, tuples processed per second over the period.

It moves one *level* at a time following the principles of §4:

* P1 expand: congested → go up, unless that level was visited and did not
  give better throughput;
* P2 contract: not congested → go down, unless that level was visited and
  was congested;
* P3 congestion adapt / P4 throughput adapt: a change of congestion or of
  throughput that says the load went up (down) forgets what was learned about
  the levels above (below);
* P5 remote congestion: congestion continues after going up and throughput
  did not improve → the bottleneck is downstream, go back down;
* P6 rapid scaling: levels map to channel counts super-linearly.

Resolved ambiguities and deliberate deviations (see also NOTES-elastic-scaling):

* Levels (P6). The paper prints ``N_L = ceil(0.5 + 2^(0.5 (L+1)))`` but lists
  1, 2, 3, 4, 6, 8, 11, 16, 23, 32, …; the ceiling gives 2, 3, 4, 5, 7, 9, …
  The list is what rounding gives: ``N_L = floor(0.5 + 2^((L+1)/2))``, i.e.
  ``2^((L+1)/2)`` rounded to the nearest integer, computed exactly with
  integer square roots. Without rapid scaling ``N_L = L + 1``. The last level
  is capped at the maximum parallelism (so 10 channels give 1, 2, 3, 4, 6, 8,
  10), and ``L*`` — "the maximum number of levels" — is the length of that
  table: levels are 0 .. L*-1 (Alg. 2 goes up only while ``L < L* - 1``), and
  the state arrays have one more entry, L*, that is never entered.
* Level -1 (read by Alg. 2/3 at L = 0) is never visited: its ``P`` is -1 and
  ``N_{-1} = 0``.
* The printed Alg. 2 nests the P2 ``else`` under P1's inner ``if``; the text
  ("if there is no congestion, we go one level down unless …") makes it the
  ``else`` of ``if C``, which is what is implemented.
* α, the *change sensitivity*, weighs how large a throughput change must be
  to count as a load change: ``s = 0.1 + (1 - α) 0.9`` (Alg. 1) scales the
  ideal per-channel throughput of a linearly scaling system in Alg. 3's
  same-level tests. α = 1 reacts to 10 % of one channel's worth, α = 0 only to
  a full one. Default 0.5 (App. B).
* Noise margins. Alg. 2 and Alg. 3's cross-level tests compare two noisy
  throughputs with bare ``<=``/``>=``/``<``/``>``. With measurement noise those
  coin flips make the controller ratchet up under remote congestion (a
  slightly higher sample after going up defeats P5, a slightly lower one
  raises LessLoad and erases the congestion memory that P5 needs) and re-probe
  levels it already knows to be useless. Here every such comparison requires
  a difference of more than ``gain_margin`` times the ideal linear gain between
  the two levels — ``gain_margin · (N_hi - N_lo) · T / N`` with ``T / N`` the
  per-channel throughput of the level compared against, the same
  normalization the paper uses for Alg. 3. The text supports this: P5 speaks
  of throughput that has "not significantly increased", and §4.1 says a
  "minor improvement" suffices to go up only with high sensitivity. Default
  0.2; it must stay below ``threshold / (1 - threshold)`` (0.25 for 0.2): a
  congested level handles at most ``(1 - threshold)`` of the offered load, so
  an uncongested level above improves on it by at least that ratio, which the
  margin must not hide. ``gain_margin=0`` (with ``congested_steps_as_load``)
  gives the printed algorithm.
* Steps between congested levels are not load signals (issue #20). Alg. 3's
  last two throughput tests read a step up followed by lower throughput as
  LessLoad, and a step down followed by higher throughput as MoreLoad; Alg. 2
  applies their resets *before* P5's test ``r``. §4.2 ("if the current level
  is higher than the last one, yet the throughput has decreased, this is taken
  as load decrease") assumes throughput never falls when channels are added
  (at worst it stays flat, under remote congestion). On a machine with fewer cores than
  channels it does fall: with input at full speed every level is congested, a
  useless step up lowers throughput, the LessLoad reset sets ``C_{L-1}`` to
  false, ``r`` fails, and P1 climbs to the top level (``bench run sn-settle``
  on 2 cores); coming back down, the rise would read as MoreLoad and forget
  that the level above did worse. Here, when the period is congested and so
  was the level just left, the cross-level throughput tests report no load
  change: with the splitter blocked at both levels the throughput measures
  each level's capacity, which P1 and P5 judge, not the offered load. Load
  changes are still seen through congestion (Alg. 3's first routine,
  unchanged) and through the same-level throughput test (P4) in the next
  period. ``congested_steps_as_load=True`` restores the printed tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from .controller import Controller, Decision, Metrics, PeriodAccumulator

__all__ = [
    "LevelController",
    "LevelRecord",
    "LoadChange",
    "level_channels",
    "level_table",
]


class LoadChange(Enum):
    """What Alg. 3 infers about the offered load."""

    UNKNOWN = 0
    MORE = 1
    LESS = 2


def level_channels(level: int, *, rapid_scaling: bool = True) -> int:
    """Channels at ``level`` (P6): 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, …

    ``floor(0.5 + sqrt(2^(L+1)))`` in exact integer arithmetic; ``L + 1``
    without rapid scaling; 0 for level -1, which is never visited.
    """
    if level < 0:
        return 0
    if not rapid_scaling:
        return level + 1
    m = 1 << (level + 1)
    root = math.isqrt(m)
    # sqrt(m) >= root + 1/2  <=>  m >= root^2 + root + 1/4  <=>  m > root^2 + root
    return root + (1 if m > root * root + root else 0)


def level_table(max_parallelism: int, *, rapid_scaling: bool = True) -> tuple[int, ...]:
    """Channel counts of levels 0 .. L*-1, the last one capped at ``max_parallelism``."""
    if max_parallelism < 1:
        raise ValueError(f"max_parallelism must be >= 1, got {max_parallelism!r}")
    table: list[int] = []
    level = 0
    while True:
        n = level_channels(level, rapid_scaling=rapid_scaling)
        if n >= max_parallelism:
            table.append(max_parallelism)
            return tuple(table)
        table.append(n)
        level += 1


@dataclass(frozen=True, slots=True)
class LevelRecord:
    """What the controller remembers about one level (Alg. 1's arrays)."""

    level: int
    channels: int
    last_period: int  # P_i: last adaptation period spent at this level (-1: never)
    congested: bool  # C_i: congestion the last time at this level
    last_throughput: float  # T_i^-: throughput the last time at this level
    first_throughput: float  # T_i^+: throughput at the start of the latest stay


class LevelController(Controller):
    """SASO level controller with rapid scaling (elastic-scaling Alg. 1–3).

    Args:
        max_parallelism: cap on channels; ``None`` takes the executor's
            ``Metrics.max_parallelism``.
        threshold: congestion-index threshold (default 0.2, App. B).
        alpha: change sensitivity α in [0, 1] (default 0.5, App. B).
        period: adaptation period in seconds (default 5, App. B); shorter
            intervals reported by the executor are combined.
        rapid_scaling: use the super-linear level table (P6); default on.
        gain_margin: noise margin for throughput comparisons, as a fraction
            of the ideal linear gain between two levels (module docstring).
        congested_steps_as_load: read a throughput change across a step
            between two congested levels as a load change, as Alg. 3 prints;
            off by default (module docstring, issue #20).
        levels: explicit channel counts per level (strictly increasing,
            starting at 1), overriding ``rapid_scaling``.
        max_levels: L*, the number of levels (Alg. 1); the level table is cut
            to its first ``max_levels`` entries. ``None`` (default) takes every
            level up to the maximum parallelism.
    """

    name = "level"

    def __init__(
        self,
        *,
        max_parallelism: int | None = None,
        threshold: float = 0.2,
        alpha: float = 0.5,
        period: float = 5.0,
        rapid_scaling: bool = True,
        gain_margin: float = 0.2,
        congested_steps_as_load: bool = False,
        levels: Sequence[int] | None = None,
        max_levels: int | None = None,
    ) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
        if gain_margin < 0:
            raise ValueError(f"gain_margin must be >= 0, got {gain_margin!r}")
        if max_levels is not None and max_levels < 1:
            raise ValueError(f"max_levels must be >= 1, got {max_levels!r}")
        if max_parallelism is not None and max_parallelism < 1:
            raise ValueError(f"max_parallelism must be >= 1, got {max_parallelism!r}")
        if levels is not None:
            levels = tuple(int(n) for n in levels)
            steps = zip(levels, levels[1:], strict=False)
            if not levels or levels[0] != 1 or any(a >= b for a, b in steps):
                raise ValueError(f"levels must increase strictly from 1, got {levels!r}")
        self.threshold = threshold
        self.alpha = alpha
        self.rapid_scaling = rapid_scaling
        self.gain_margin = gain_margin
        self.congested_steps_as_load = congested_steps_as_load
        self.max_parallelism = max_parallelism
        self.max_levels = max_levels
        self.period = period
        self._explicit_levels = levels
        # Alg. 1: s turns α into a fraction of one channel's ideal throughput.
        self.sensitivity = 0.1 + (1.0 - alpha) * 0.9
        self._accumulator = PeriodAccumulator(period)
        self._cap: int | None = None
        self._levels: tuple[int, ...] = ()
        self._reset_state()

    # -- public ----------------------------------------------------------

    @property
    def level(self) -> int:
        """The current level L."""
        return self._L

    @property
    def levels(self) -> tuple[int, ...]:
        """Channel counts of levels 0 .. L*-1 (empty before the first period)."""
        return self._levels

    @property
    def history(self) -> tuple[LevelRecord, ...]:
        """The per-level memory (levels 0 .. L*-1)."""
        return tuple(
            LevelRecord(i, self._levels[i], self._P_i[i], self._C_i[i], self._Tm[i], self._Tp[i])
            for i in range(len(self._levels))
        )

    def observe(self, metrics: Metrics) -> Decision | None:
        """Run Alg. 2 once per adaptation period; ``None`` when staying."""
        period = self._accumulator.push(metrics)
        if period is None:
            return None
        self._ensure_levels(period.max_parallelism)
        self._align(period.parallelism)
        congested = period.congestion > self.threshold
        reason = self._update(period.throughput, congested, period.congestion)
        channels = self._levels[self._L]
        if channels == period.parallelism:
            return None
        return Decision(channels, reason)

    def reset(self) -> None:
        """Back to Alg. 1's initial state (level 0, nothing remembered)."""
        self._accumulator.reset()
        self._reset_state()

    # -- Alg. 1 ----------------------------------------------------------

    def _reset_state(self) -> None:
        self._P = 1
        self._L = 0
        size = len(self._levels) + 1  # levels 0 .. L*, L* never entered
        self._Tp = [math.nan] * size  # T_i^+
        self._Tm = [math.inf] * size  # T_i^-
        self._C_i = [True] * size
        self._P_i = [-1] * size

    def _ensure_levels(self, executor_max: int) -> None:
        cap = executor_max if self.max_parallelism is None else min(
            executor_max, self.max_parallelism
        )
        if cap == self._cap:
            return
        # A new cap changes L* and the level table; what was learned about
        # the old levels does not carry over, so start afresh (Alg. 1).
        self._cap = cap
        if self._explicit_levels is not None:
            table = [n for n in self._explicit_levels if n < cap] + [cap]
            self._levels = tuple(table)
        else:
            self._levels = level_table(cap, rapid_scaling=self.rapid_scaling)
        if self.max_levels is not None:
            self._levels = self._levels[: self.max_levels]
        self._reset_state()

    def _align(self, parallelism: int) -> None:
        # The executor is the authority on the channels actually running (it
        # may not have applied a decision yet, or something else reconfigured
        # it); measurements must be credited to the level they were taken at.
        if self._levels[self._L] == parallelism:
            return
        below = [i for i, n in enumerate(self._levels) if n <= parallelism]
        self._L = below[-1] if below else 0

    # -- helpers over Alg. 1's arrays -------------------------------------

    def _n(self, level: int) -> int:
        if level < 0:
            return 0  # level -1 is never visited
        if level < len(self._levels):
            return self._levels[level]
        # The sentinel level L*: the next count of the series, so the
        # MoreLoad threshold at the top level keeps the shape it has below.
        top = self._levels[-1]
        if self._explicit_levels is None:
            nxt = level_channels(level, rapid_scaling=self.rapid_scaling)
        else:
            nxt = top + 1
        return max(top + 1, nxt)

    def _margin(self, low: int, high: int, throughput: float, at: int) -> float:
        """gain_margin × ideal gain from level ``low`` to ``high``, per channel of ``at``."""
        if self.gain_margin == 0.0 or not math.isfinite(throughput) or self._n(at) == 0:
            return 0.0
        return self.gain_margin * (self._n(high) - self._n(low)) * throughput / self._n(at)

    # -- Alg. 3 ----------------------------------------------------------

    def _load_change_via_congestion(self, congested: bool) -> LoadChange:
        L, P = self._L, self._P
        # Same level as last period, congestion flipped.
        if self._P_i[L] == P - 1 and self._C_i[L] != congested:
            return LoadChange.MORE if congested else LoadChange.LESS
        # Came down from a congested level and congestion vanished.
        if self._P_i[L + 1] == P - 1 and self._C_i[L + 1] and not congested:
            return LoadChange.LESS
        # Came up from an uncongested level and congestion appeared.
        if L > 0 and self._P_i[L - 1] == P - 1 and not self._C_i[L - 1] and congested:
            return LoadChange.MORE
        return LoadChange.UNKNOWN

    def _step_reads_load(self, congested: bool, previous: int) -> bool:
        """Whether a throughput change since ``previous`` (the level of the last
        period) may count as a load change in Alg. 3's cross-level tests.

        Deviation (module docstring, issue #20): Alg. 3 always lets it; when this
        period and the previous level are both congested the difference is the
        two levels' capacity, not load, and the printed order (Alg. 2: reset,
        then P5) would erase the memory P5 needs on a machine where more
        channels than cores lower throughput.
        """
        return self.congested_steps_as_load or not (congested and self._C_i[previous])

    def _load_change_via_throughput(self, t: float, congested: bool) -> LoadChange:
        L, P, s = self._L, self._P, self.sensitivity
        Tp = self._Tp[L]
        if self._P_i[L] == P - 1 and not math.isnan(Tp):
            # Same level: a change beyond s of the ideal step to the next
            # level down (drop) or up (rise), per channel of this level.
            if t < Tp:
                if Tp - t > s * (self._n(L) - self._n(L - 1)) * Tp / self._n(L):
                    return LoadChange.LESS
            elif t - Tp > s * (self._n(L + 1) - self._n(L)) * Tp / self._n(L):
                return LoadChange.MORE
        # Came down yet throughput rose: more load (margin: see module doc).
        # Alg. 3, checkLoadChangeViaThroughput, "P_{L+1} = P - 1 and T > T_{L+1}^-";
        # skipped between congested levels, where a rise after a P5 step down is
        # the upper level doing worse and would erase that memory (issue #20).
        above = self._Tm[L + 1]
        if (
            self._P_i[L + 1] == P - 1
            and self._step_reads_load(congested, L + 1)
            and t > above + self._margin(L, L + 1, above, L + 1)
        ):
            return LoadChange.MORE
        # Came up yet throughput fell: less load. Alg. 3, "P_{L-1} = P - 1 and
        # T < T_{L-1}^-"; skipped between congested levels: with more channels
        # than cores the fall is the step's own cost, and Alg. 2's reset would
        # clear C_{L-1} before P5 tests it, so P1 climbed to the top (issue #20).
        if L > 0 and self._P_i[L - 1] == P - 1 and self._step_reads_load(congested, L - 1):
            below = self._Tm[L - 1]
            if t < below - self._margin(L - 1, L, below, L - 1):
                return LoadChange.LESS
        return LoadChange.UNKNOWN

    # -- Alg. 2 ----------------------------------------------------------

    def _update(self, t: float, congested: bool, index: float) -> str:
        L = self._L
        # P3 and P4: congestion and throughput adapt.
        by_congestion = self._load_change_via_congestion(congested)
        by_throughput = self._load_change_via_throughput(t, congested)
        changes = {by_congestion, by_throughput}
        if LoadChange.LESS in changes:
            for i in range(0, L + 1):  # forget the levels below (and this one)
                self._C_i[i] = False
                self._Tm[i] = 0.0
        if LoadChange.MORE in changes:
            for i in range(L, len(self._C_i)):  # forget the levels above
                self._C_i[i] = True
                self._Tm[i] = math.inf

        # Update what is known about the current level.
        self._P_i[L] = self._P
        self._P += 1
        self._Tm[L] = t
        self._C_i[L] = congested
        if math.isnan(self._Tp[L]):
            self._Tp[L] = t

        note = _describe(changes)
        # P5: came up from L-1 last period, congested at both, no gain.
        if (
            L > 0
            and self._P_i[L - 1] == self._P_i[L] - 1
            and self._C_i[L - 1]
            and self._C_i[L]
            and self._Tm[L] <= self._Tm[L - 1] + self._margin(L - 1, L, self._Tm[L - 1], L - 1)
        ):
            self._Tp[L - 1] = math.nan
            self._L = L - 1
            return f"P5 remote congestion: no throughput gain at level {L}{note}"
        if congested:
            # P1: go up unless the level above is known to do no better.
            if L < len(self._levels) - 1 and self._Tm[L + 1] >= t + self._margin(L, L + 1, t, L):
                self._Tp[L + 1] = math.nan
                self._L = L + 1
                return f"P1 expand: congestion {index:.3f} > {self.threshold}{note}"
        elif L > 0 and not self._C_i[L - 1]:
            # P2: go down unless the level below is known to be congested.
            self._Tp[L - 1] = math.nan
            self._L = L - 1
            return f"P2 contract: congestion {index:.3f} <= {self.threshold}{note}"
        return f"stay at level {L}{note}"


def _describe(changes: set[LoadChange]) -> str:
    names = sorted(c.name.lower() for c in changes if c is not LoadChange.UNKNOWN)
    return f" (load change: {', '.join(names)})" if names else ""
