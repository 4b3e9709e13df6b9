"""Q6 of the STRETCH journal (§8.6): the hedge self-join over trades.

The paper runs J+ as a self-join, feeding the trade stream ⟨τ, id, TradePrice, AveragePrice⟩
twice with WS = 30 s, and outputs ⟨l_id, l_price, r_id, r_price⟩ when
``t_R.id ≠ t_L.id ∧ −1.05 ≤ ND_R / ND_L ≤ −0.95`` with the normalized distance
``ND = (price − avg_price) / avg_price``: two companies whose prices moved away from their
averages by about the same amount in opposite directions. The paper's text is cut after the
lower bound; −0.95 as the upper one is our reading (a band around −1, like the lower bound's
5 %), and both bounds are parameters.

Feeding one stream twice into a two-input J+ pairs every new tuple t with each tuple s of the
window in both roles: (L = s, R = t) and (L = t, R = s); a tuple meets its own copy only with
the same id, which the predicate excludes. :class:`Hedge` computes exactly those outputs with
one input: each new tuple is compared, in both roles, with the window's earlier tuples, and
then stored. Like ScaleJoin (Op. 10) every instance sees every tuple through a fixed key set,
and each tuple is stored in one key chosen round-robin, so the comparisons split evenly over
the instances; each comparison is a numpy expression over the key's share of the window.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..eventtime import DELTA, parse_duration
from ..operators.oplus import OPlus, WindowSet
from .scalejoin import Columns


class HedgeState:
    """ζ: the tuple counter ``c`` and this key's stored trades (u = ND, v = company code,
    ids = (id, price)). Never empty, like ScaleJoin's, so ``c`` survives every slide."""

    __slots__ = ("c", "stored", "codes")

    def __init__(self) -> None:
        self.c = 0
        self.stored = Columns()
        self.codes: dict[Any, int] = {}  # company id -> number, only compared within this ζ

    def __bool__(self) -> bool:
        return True


class Hedge(OPlus):
    """The hedge self-join: trades ``{ts, id, price, avg_price}`` in, pairs
    ``{l_id, l_price, r_id, r_price}`` out (see the module docstring)."""

    slide_collapses = True

    def __init__(self, window: int | str = 30_000, lower: float = -1.05, upper: float = -0.95,
                 n_keys: int = 1000, name: str = "hedge"):
        self.window = parse_duration(window)
        super().__init__(size=self.window + DELTA, slide=DELTA, inputs=1,
                         window_type="single", name=name)
        if not lower <= upper:
            raise ValueError(f"hedge: need lower <= upper, got {lower} > {upper}")
        if n_keys < 1:
            raise ValueError(f"hedge: n_keys must be >= 1, got {n_keys}")
        self.lower, self.upper = lower, upper
        self.n_keys = n_keys
        self._keys = frozenset(range(n_keys))

    keys_iterable = True  # keys returns a frozenset: skip the one-key check per tuple

    def keys(self, t: Any, i: int) -> frozenset:
        return self._keys

    def init(self) -> HedgeState:
        return HedgeState()

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list | None:  # type: ignore[override]
        st: HedgeState = ws.states[0]
        st.c += 1
        price, avg = value["price"], value["avg_price"]
        if not avg:
            raise ValueError("avg_price must be non-zero (ND divides by it)")
        nd = (price - avg) / avg
        code = st.codes.setdefault(value["id"], len(st.codes))
        store = st.stored
        store.purge(ts - self.window)
        out = None
        h, t = store.head, store.tail
        if h < t and nd != 0.0:
            other = store.uv[0, h:t]
            diff = store.uv[1, h:t] != code
            with np.errstate(divide="ignore", invalid="ignore"):
                r_role = nd / other  # t as R: ND_R / ND_L
                l_role = other / nd  # t as L: ND_R / ND_L with the stored tuple as R
            as_r = diff & (r_role >= self.lower) & (r_role <= self.upper)
            as_l = diff & (l_role >= self.lower) & (l_role <= self.upper)
            me = (value["id"], price)
            if as_r.any() or as_l.any():
                ids = store.ids[h:t]
                out = [_pair(s, me) for s in ids[as_r].tolist()]
                out += [_pair(me, s) for s in ids[as_l].tolist()]
        if st.c % self.n_keys == ws.key:
            store.append(ts, nd, code, (value["id"], price))
        return out

    def slide(self, ws: WindowSet) -> None:  # type: ignore[override]
        ws.states[0].stored.purge(ws.l)

    def f_mu(self, key: Any, n: int) -> int:
        return key % n


def _pair(left: tuple, right: tuple) -> dict:
    return {"l_id": left[0], "l_price": left[1], "r_id": right[0], "r_price": right[1]}


__all__ = ["Hedge", "HedgeState"]
