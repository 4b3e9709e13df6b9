"""J+: the O+ with two inputs (journal Definition 5, Theorem 2).

Tuples of the left (input 0) and right (input 1) stream that share a key and fall in window
instances with the same boundaries are matched by f_U as soon as the second one arrives
(Definition 1 for J); each window set stores the tuples of both inputs (Table I's default
state) and f_S purges them as a ``single`` window slides.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ..errors import FlowDefinitionError
from .keys import input_keys_fn
from .oplus import OPlus, OPlusInstance, SharedState, WindowSet


class Join(OPlus):
    """J+ with a predicate and an output function over (left, right) payload pairs.

    >>> from stretchflow.operators.join import Join
    >>> j = Join(size=10, keys=lambda t: {t["k"]}, predicate=lambda a, b: a["v"] < b["v"],
    ...          output=lambda a, b: (a["v"], b["v"]))
    >>> inst = j.instance()
    >>> inst.process(1, {"k": 1, "v": 1}, 0); inst.process(2, {"k": 1, "v": 5}, 1)
    >>> inst.finish(); inst.take()
    [(10, (1, 5))]

    Streams whose key fields differ take ``left_keys`` and ``right_keys`` instead of ``keys``:

    >>> j = Join(size=10, left_keys=lambda o: o["user"], right_keys=lambda c: c["uid"])
    >>> inst = j.instance()
    >>> inst.process(1, {"user": "ann"}, 0); inst.process(2, {"uid": "ann"}, 1)
    >>> inst.finish(); inst.take()
    [(10, {'left': {'user': 'ann'}, 'right': {'uid': 'ann'}})]
    """

    def __init__(
        self,
        *,
        size: int | str,
        slide: int | str | None = None,
        keys: Callable[[Any], Any] | None = None,
        predicate: Callable[[Any, Any], bool] | None = None,
        output: Callable[[Any, Any], Any] | None = None,
        window_type: str = "multi",
        f_mu: Callable[[Hashable, int], int] | None = None,
        name: str = "join",
        left_keys: Callable[[Any], Any] | None = None,
        right_keys: Callable[[Any], Any] | None = None,
    ):
        self.predicate = predicate
        self.pair_output = output if output is not None else _pair
        #: the user's f_MK of the left and the right input, unwrapped (:class:`JoinInstance`
        #: reads their results as :func:`~.keys.one_key` does, inlined)
        self.side_keys = join_keys(name, keys, left_keys, right_keys)
        super().__init__(
            size=size,
            slide=slide,
            inputs=2,
            keys=input_keys_fn(self.side_keys),
            window_type=window_type,
            f_mu=f_mu,
            update=self._match_and_store,
            name=name,
        )

    def instance(self, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None) -> OPlusInstance:
        """A :class:`~.join_instance.JoinInstance`, which runs this f_U inlined; the general
        instance for a subclass with an f_U of its own."""
        if type(self)._match_and_store is not Join._match_and_store:
            return OPlusInstance(self, sigma, j, assign)
        from .join_instance import JoinInstance

        return JoinInstance(self, sigma, j, assign)

    def _match_and_store(self, ws: WindowSet, ts: int, value: Any, i: int) -> list:
        pred, make = self.predicate, self.pair_output
        res = []
        if i == 0:
            for _, r in ws.states[1]:
                if pred is None or pred(value, r):
                    res.append(make(value, r))
        else:
            for _, left in ws.states[0]:
                if pred is None or pred(left, value):
                    res.append(make(left, value))
        ws.states[i].append((ts, value))
        return res


def join_keys(name: str, keys: Callable[[Any], Any] | None,
              left_keys: Callable[[Any], Any] | None,
              right_keys: Callable[[Any], Any] | None) -> list[Callable[[Any], Any]]:
    """f_MK of the left and the right input: ``keys`` for both, or ``left_keys`` and
    ``right_keys`` (streams whose key fields differ); exactly one of the two forms."""
    if keys is not None:
        if left_keys is not None or right_keys is not None:
            raise FlowDefinitionError(
                f"{name}: give keys= (both sides) or left_keys= and right_keys=, not both")
        return [keys, keys]
    if left_keys is None or right_keys is None:
        missing = " and ".join(n for n, f in (("left_keys", left_keys),
                                              ("right_keys", right_keys)) if f is None)
        raise FlowDefinitionError(
            f"{name}: a join needs keys= (both sides) or left_keys= and right_keys=; "
            f"{missing} missing")
    return [left_keys, right_keys]


def _pair(left: Any, right: Any) -> dict:
    return {"left": left, "right": right}
