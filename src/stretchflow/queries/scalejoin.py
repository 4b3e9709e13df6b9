"""ScaleJoin as a J+ (journal Appendix D, Op. 10) and the forwarding O+ of Op. 15.

ScaleJoin: ``J+(δ, WS, 2, f_MK, single, S, f_μ, f_U, -, -)``. f_MK returns every key of a fixed
key set (1000, more than any parallelism), so every instance sees every tuple; each window set
counts the tuples it has seen in ``c`` (the same count in every key, since all instances read
the same sequence), compares the new tuple with the opposite stream's stored tuples after
purging those older than WS, and the tuple is stored in exactly one key: the one equal to
``c mod 1000``. Op. 10 numbers its keys 1..1000, which no ``c mod 1000`` reaches for key 1000;
here keys are 0..999 so each tuple is stored exactly once.

DESIGN's contract pairs tuples with |tsL − tsR| <= window. A window instance [l, l + WS) holds
two tuples that far apart only if WS = window + δ, so that is the WS used; f_U's purge keeps
the opposite tuples with ts >= t.τ − window, the same ones Table I's f_S keeps when the window
set slides to earliestWinL(t.τ) = t.τ − window (Op. 10's "T[0].τ + WS < t.τ" would keep one
δ more, which f_S has already purged).
"""

from __future__ import annotations

from typing import Any

from ..operators.oplus import OPlus, WindowSet


class ScaleJoinState(list):
    """ζ of a ScaleJoin window instance: stored tuples ``(ts, payload)`` (purged by Table I's
    default f_S) and the tuple counter ``c``. Never empty: ``c`` carries the round-robin position
    for the whole stream, so the window set is shifted, never removed and recreated at 0."""

    __slots__ = ("c",)

    def __init__(self) -> None:
        super().__init__()
        self.c = 0

    def __bool__(self) -> bool:
        return True


class ScaleJoin(OPlus):
    """Band join: left ``{ts,id,x,y}`` with right ``{ts,id,a,b,...}`` where |x−a| <= band,
    |y−b| <= band and |tsL−tsR| <= window; outputs ``{left: idL, right: idR}``."""

    def __init__(self, window: int | str = 300_000, band: int = 10, n_keys: int = 1000,
                 name: str = "scalejoin"):
        from ..eventtime import DELTA, parse_duration

        self.window = parse_duration(window)
        super().__init__(size=self.window + DELTA, slide=DELTA, inputs=2, window_type="single",
                         name=name)
        self.band = band
        self.n_keys = n_keys
        self._keys = frozenset(range(n_keys))

    def keys(self, t: Any, i: int) -> frozenset:
        return self._keys

    def init(self) -> ScaleJoinState:
        return ScaleJoinState()

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list | None:  # type: ignore[override]
        this, opp = ws.states[i], ws.states[1 - i]
        this.c += 1
        opp.c += 1
        horizon = ts - self.window
        n = 0
        for t_opp, _ in opp:  # purge (Op. 10 L21–L22)
            if t_opp >= horizon:
                break
            n += 1
        if n:
            del opp[:n]
        out = None
        if opp:
            band = self.band
            if i == 0:
                x, y = value["x"], value["y"]
                for _, r in opp:
                    if abs(x - r["a"]) <= band and abs(y - r["b"]) <= band:
                        (out := out or []).append({"left": value["id"], "right": r["id"]})
            else:
                a, b = value["a"], value["b"]
                for _, left in opp:
                    if abs(left["x"] - a) <= band and abs(left["y"] - b) <= band:
                        (out := out or []).append({"left": left["id"], "right": value["id"]})
        if this.c % self.n_keys == ws.key:  # store t in exactly one key (L26–L27)
            this.append((ts, value))
        return out

    def f_mu(self, key: Any, n: int) -> int:
        return key % n


class Forward(OPlus):
    """Op. 15: ``O+(δ, δ, I, f_MK, single, S, f_μ, f_U, -, -)`` forwarding every input tuple.

    Op. 15's f_MK returns all n keys and every instance forwards every tuple, so its output
    grows with the parallelism. To emit every tuple exactly once at any parallelism, f_MK here
    returns one key per tuple (its timestamp mod 1000): the instances still share and merge
    every input tuple, which is what Q2 measures. Outputs carry the window's right boundary,
    τ + δ.
    """

    def __init__(self, inputs: int = 2, n_keys: int = 1000, name: str = "forward"):
        super().__init__(size=1, slide=1, inputs=inputs, window_type="single", name=name)
        self.n_keys = n_keys
        self.init = list

    def keys(self, t: Any, i: int) -> tuple:
        return (t["ts"] % self.n_keys,)

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list:  # type: ignore[override]
        return [value]  # {∅, ∅, t.φ}: the states stay empty, so the window set is removed

    def f_mu(self, key: Any, n: int) -> int:
        return key % n


__all__ = ["Forward", "ScaleJoin", "ScaleJoinState"]
