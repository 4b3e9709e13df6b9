"""f_MK of a batch of rows, once for all the VSN instances sharing σ (issue #32).

Every VSN instance reads every tuple of its ESG_in (journal Alg. 4) and handles the keys of
the key groups f_μ gives it. Tuple at a time, each of the P instances calls the user's f_MK
on every tuple to learn which keys are its own: P times the Python work of one instance,
which under the GIL made parallelism 2 slower than 1. On a batch of rows the first instance
that needs it computes :class:`RowKeys` — f_MK on each row, each key's group ``hash(k) % G``
and the rows split by the instance owning that group — and leaves it on the batch
(:meth:`~stretchflow.batch.Batch.shared`, under a lock the operator's instances share, so
f_MK runs exactly once per tuple); every instance then updates only its own part.

All the instances reading a batch hold the same assignment: a reconfiguration switches them
at a control tuple, an entry of ESG_in of its own between two batches. The parts are made for
the assignment of the instance that computed them; an instance holding another one (which
the switch rules out) gets its part recomputed from them, so the result never depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from ..errors import RunTupleError, StretchflowError
from .keys import key_pairs, one_key_test

#: one entry per (row, key of the row): ``(ts, key, value f_U sees, key group, payload)``
Entry = tuple[int, Any, Any, int, Any]

#: one in this many entries counted in an instance's ``group_hits`` (the loads a balancing
#: f_μ packs): a fair sample, counted once per batch off the rows' loop
HIT_SAMPLE = 8


class RowKeys:
    """f_MK's result for a batch of rows: ``parts[j]``, the entries of the key groups
    instance ``j`` owns under ``assign``, in row order; ``failed``, ``(ts, payload, error)``
    of the row f_MK failed on (the parts then hold the rows before it), or None."""

    __slots__ = ("assign", "parts", "failed")

    def __init__(self, keys: Callable[[Any], Any], ts: Sequence[int], payloads: Sequence[Any],
                 G: int, assign: Sequence[int], hits: list[int] | None):
        self.assign = list(assign)
        owners = max(self.assign) + 1
        self.parts: list[list[Entry]] = [[] for _ in range(owners)]
        add = [part.append for part in self.parts]
        to = [add[a] for a in self.assign]  # key group -> its owner's part
        kind, learn = one_key_test()
        self.failed: tuple[Any, Any, BaseException] | None = None
        t = v = None
        try:
            for t, v in zip(ts, payloads, strict=True):
                ks = keys(v)
                one = kind.get(type(ks))
                if one or (one is None and learn(type(ks))):
                    g = hash(ks) % G
                    to[g]((t, ks, v, g, v))
                elif ks:
                    for k, x in key_pairs(ks, v):
                        g = hash(k) % G
                        to[g]((t, k, x, g, v))
        except Exception as e:  # noqa: BLE001 - every instance raises it after its rows
            self.failed = (t, v, e)
        if hits is not None:
            for part in self.parts:
                for e in part[::HIT_SAMPLE]:
                    hits[e[3]] += 1

    def part(self, j: int, assign: Sequence[int]) -> list[Entry]:
        """Instance ``j``'s entries under ``assign`` (its own, see the module doc)."""
        if assign == self.assign:
            return self.parts[j] if j < len(self.parts) else []
        # the parts merged back in timestamp order: a key's entries all sit in one part, in
        # row order, and a stable sort keeps them so (the order across keys is immaterial)
        rows = sorted(chain.from_iterable(self.parts), key=_TS)
        return [e for e in rows if assign[e[3]] == j]

    def raise_failure(self) -> None:
        """Raises f_MK's failure (if any) as the tuple path does: stretchflow's own errors
        as they are, the user's as a :class:`RunTupleError` naming the row."""
        if self.failed is None:
            return
        t, v, e = self.failed
        if isinstance(e, RunTupleError | StretchflowError):
            raise e
        raise RunTupleError(t, v, e) from e


_TS = itemgetter(0)
