"""f_MK of a batch of rows, once for all the VSN instances sharing σ (issue #32).

Every VSN instance reads every tuple of its ESG_in (journal Alg. 4) and handles the keys of
the key groups f_μ gives it. Tuple at a time, each of the P instances calls the user's f_MK
on every tuple to learn which keys are its own: P times the Python work of one instance,
which under the GIL made parallelism 2 slower than 1. On a batch of rows the first instance
that needs it computes :class:`RowKeys` — f_MK on each row, each key's group ``hash(k) % G``
and the rows split by the instance owning that group — and leaves it on the batch
(:meth:`~stretchflow.batch.Batch.shared`, under a lock the operator's instances share, so
f_MK runs exactly once per tuple); every instance then updates only its own part.

The work beyond f_MK is done for the whole batch at once where it can be: f_MK mapped over the
payloads, the groups hashed into a numpy array, each instance's rows gathered by numpy — no
object per row (a tuple per row cost as much again as the loops, in allocation and in the
garbage collector's passes over them). A batch whose f_MK gives several keys for some row
(a set, a list, a dict) is flattened row by row into one entry per (row, key).

All the instances reading a batch hold the same assignment: a reconfiguration switches them
at a control tuple, an entry of ESG_in of its own between two batches. The parts are made for
the assignment of the instance that computed them; an instance holding another one (which
the switch rules out) gets its part computed from the same columns, so the result never
depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RunTupleError, StretchflowError
from .keys import key_pairs, one_key_test

if TYPE_CHECKING:
    from ..batch import Batch

#: an instance's part: its entries as parallel lists ``(ts, key, value f_U sees, key group,
#: payload)``, one entry per (row, key of the row), in row order
Part = tuple[list[int], list[Any], list[Any], list[int], list[Any]]

#: one in this many entries counted in an instance's ``group_hits`` (the loads a balancing
#: f_μ packs): a fair sample, counted once per batch off the rows' loop
HIT_SAMPLE = 8


class RowKeys:
    """f_MK's result for a batch of rows: :meth:`part` gives each instance its entries;
    ``failed``, ``(ts, payload, error)`` of the first row whose keys could not be had (f_MK
    raised, or a key is unhashable): the entries then hold the rows before it; or None."""

    __slots__ = ("assign", "parts", "failed", "_cols")

    def __init__(self, keys: Callable[[Any], Any], batch: Batch, G: int,
                 assign: Sequence[int], hits: list[int] | None):
        import numpy as np

        payloads = batch.payloads
        self.failed: tuple[Any, Any, BaseException] | None = None
        ks: list[Any] = []
        try:
            ks.extend(map(keys, payloads))  # extend keeps the keys before a failure
        except Exception as e:  # noqa: BLE001 - every instance raises it after its rows
            self.failed = (int(batch.ts[len(ks)]), payloads[len(ks)], e)
        m = len(ks)
        kind, learn = one_key_test()
        if all(kind.get(tp) or (kind.get(tp) is None and learn(tp)) for tp in set(map(type, ks))):
            ps = payloads if m == len(payloads) else payloads[:m]
            cols: list[Any] = [batch.ts[:m], ks, ps, ps]  # one key per row: f_U sees the row
        else:
            cols = self._flattened(batch.ts, payloads, ks)
        gs = self._groups(cols, G)
        self._cols = cols + [gs]
        self.assign = list(assign)
        self.parts = self._split(self.assign)
        if hits is not None and len(gs):
            counts = np.bincount(gs[::HIT_SAMPLE], minlength=G)
            for g in np.flatnonzero(counts).tolist():
                hits[g] += int(counts[g])

    def _flattened(self, ts: Any, payloads: Sequence[Any], ks: list[Any]) -> list[Any]:
        """One entry per (row, key) of rows whose f_MK gave several keys, none or one."""
        import numpy as np

        kind, learn = one_key_test()
        rows: list[int] = []
        keys: list[Any] = []
        xs: list[Any] = []
        r = 0
        try:
            for r, (k0, v) in enumerate(zip(ks, payloads, strict=False)):
                one = kind.get(type(k0))
                if one or (one is None and learn(type(k0))):
                    rows.append(r)
                    keys.append(k0)
                    xs.append(v)
                elif k0:
                    for k, x in key_pairs(k0, v):
                        rows.append(r)
                        keys.append(k)
                        xs.append(x)
        except Exception as e:  # noqa: BLE001 - a failing iterable of keys: that row's error
            self._fail(int(ts[r]), payloads[r], e)
            while rows and rows[-1] == r:  # its entries so far are not the tuple path's
                rows.pop(), keys.pop(), xs.pop()
        idx = np.asarray(rows, dtype=np.int64)
        return [ts[idx], keys, xs, [payloads[r] for r in rows]]

    def _groups(self, cols: list[Any], G: int) -> Any:
        """Each entry's key group ``hash(k) % G`` (a numpy array); an unhashable key fails
        its row, the entries from it on dropped."""
        import numpy as np

        keys = cols[1]
        try:
            hs = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys))
        except TypeError:
            hs = []
            for i, k in enumerate(keys):
                try:
                    hs.append(hash(k))
                except TypeError as e:
                    self._fail(int(cols[0][i]), cols[3][i], e)
                    for c in range(4):
                        cols[c] = cols[c][:i]
                    break
            hs = np.asarray(hs, dtype=np.int64)
        return hs % G

    def _fail(self, t: int, v: Any, e: BaseException) -> None:
        """Records a failure at row ``(t, v)`` unless one at an earlier row is recorded
        (rows come in timestamp order; a later check can find an earlier row)."""
        if self.failed is None or t <= self.failed[0]:
            self.failed = (t, v, e)

    def _split(self, assign: Sequence[int]) -> list[Part]:
        import numpy as np

        ts, ks, xs, vs, gs = self._cols
        owners = np.asarray(assign, dtype=np.int64)[gs]
        parts: list[Part] = []
        obj = None
        for j in range(max(assign) + 1):
            idx = np.flatnonzero(owners == j)
            if len(idx) == len(gs):  # every entry this instance's: no gathering
                parts.append((ts.tolist(), ks, xs, gs.tolist(), vs))
                continue
            if not len(idx):  # none: nothing to gather (one key's batch, another instance's)
                parts.append(([], [], [], [], []))
                continue
            if obj is None:  # object columns; the rows once when f_U sees the row (xs is vs)
                obj = [np.fromiter(c, dtype=object, count=len(c))
                       for c in ((ks, xs) if vs is xs else (ks, xs, vs))]
            x = obj[1][idx].tolist()
            parts.append((ts[idx].tolist(), obj[0][idx].tolist(), x, gs[idx].tolist(),
                          x if vs is xs else obj[2][idx].tolist()))
        return parts

    def part(self, j: int, assign: Sequence[int]) -> Part:
        """Instance ``j``'s entries under ``assign`` (its own, see the module doc)."""
        parts = self.parts if assign == self.assign else self._split(assign)
        return parts[j] if j < len(parts) else ([], [], [], [], [])

    def raise_failure(self) -> None:
        """Raises the failure (if any) as the tuple path does: stretchflow's own errors as
        they are, the user's as a :class:`RunTupleError` naming the row."""
        if self.failed is None:
            return
        t, v, e = self.failed
        if isinstance(e, RunTupleError | StretchflowError):
            raise e
        raise RunTupleError(t, v, e) from e
