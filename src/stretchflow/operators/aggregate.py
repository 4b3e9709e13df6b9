"""A+: the O+ with one input (journal Definition 5, Theorem 2; Appendix D, Op. 9 and Op. 14).

A user gives ``keys`` (f_MK), ``init``/``update`` for a per-(key, window) accumulator and
``output(key, acc)`` (f_O). With WT ``multi`` each window instance holds its accumulator and
``update(acc, value) -> acc`` runs once per (key, window) the tuple falls in, as in Op. 14.
With WT ``single`` the window set stores its tuples (Table I's default f_U and f_S) and f_O
folds ``update`` over them when the instance expires, so both types give the same results.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from typing import Any

from .oplus import OPlus, OPlusInstance, SharedState, WindowSet


class Aggregate(OPlus):
    """A+ with an accumulator.

    >>> from stretchflow.operators.aggregate import Aggregate
    >>> count = Aggregate(size=10, slide=10, keys=lambda t: t.split(), init=lambda: 0,
    ...                   update=lambda acc, t: acc + 1,
    ...                   output=lambda k, acc: {"word": k, "count": acc})
    >>> inst = count.instance()
    >>> inst.process(1, "a b"); inst.process(3, "a"); inst.finish()
    >>> inst.take()
    [(10, {'word': 'a', 'count': 2}), (10, {'word': 'b', 'count': 1})]
    """

    def __init__(
        self,
        *,
        size: int | str,
        slide: int | str | None = None,
        keys: Callable[[Any], Any],
        init: Callable[[], Any],
        update: Callable[[Any, Any], Any],
        output: Callable[[Hashable, Any], Any] | None = None,
        window_type: str = "multi",
        f_mu: Callable[[Hashable, int], int] | None = None,
        name: str = "aggregate",
    ):
        self.user_keys = keys
        self.user_init = init
        self.user_update = update
        self.user_output = output if output is not None else _pair
        super().__init__(
            size=size,
            slide=slide,
            inputs=1,
            keys=lambda t, i: keys(t),
            window_type=window_type,
            f_mu=f_mu,
            output=self._fold_output,
            name=name,
        )

    def _fold_output(self, ws: WindowSet) -> list:
        """f_O for WT single: aggregate the tuples the window set stores."""
        acc = self.user_init()
        upd = self.user_update
        for _, v in ws.states[0]:
            acc = upd(acc, v)
        res = self.user_output(ws.key, acc)
        return [] if res is None else [res]

    def instance(self, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None) -> OPlusInstance:
        if self.WT == "single":
            return OPlusInstance(self, sigma, j, assign)
        return AggregateInstance(self, sigma, j, assign)


def _pair(key: Hashable, acc: Any) -> dict:
    return {"key": key, "value": acc}


class AggregateInstance(OPlusInstance):
    """Alg. 2 for an A+ with WT multi, holding each window instance's ζ as the bare
    accumulator: the same steps as :class:`OPlusInstance` without a WindowSet per
    (key, window) and one fewer call per update, the hot path of wordcount."""

    op: Aggregate

    def _handle(self, ts: int, value: Any, i: int) -> None:
        op = self.op
        ks = op.user_keys(value)
        if not ks:
            return
        routed = self._route(ks, value)
        wa = op.WA
        l1 = ((ts - op.WS) // wa + 1) * wa  # earliestWinL
        l2 = ts - ts % wa  # latestWinL
        update, init = op.user_update, op.user_init
        for l in range(l1, l2 + 1, wa):
            for k, v, g, sg in routed:
                d = sg.get(l)
                if d is None:
                    d = sg[l] = {}
                    heapq.heappush(self._lheap, (l, g))
                acc = d.get(k, _MISSING)
                d[k] = update(init() if acc is _MISSING else acc, v)  # check&Create, f_U, set

    def _expire(self, wm: float) -> None:
        heap, groups, ws_ = self._lheap, self.groups, self.op.WS
        output, out = self.op.user_output, self.out
        while heap and heap[0][0] + ws_ <= wm:
            l, g = heapq.heappop(heap)
            right = l + ws_
            for k, acc in groups[g].pop(l).items():  # forwardAndShift; WT multi: remove
                res = output(k, acc)
                if res is not None:
                    out.append((right, res))

    def finish(self) -> None:
        self._expire(math.inf)


_MISSING = object()
