"""The channel of the SN pulse path on rows (issue #32): an A+ of Python functions (lambdas)
whose f_MK, f_U and f_O run in the channels, not in the parent.

The parent's dealer, merger and the channels' peer shuffle are those of the columnar path
(:mod:`.sn_columnar`, :class:`~.sn_columnar_channel.PulseChannel`); what differs is what a
channel does with a pulse:

* **Explode** (the channel the batch is dealt to): the stateless operators before the A+ over
  the batch's rows, then f_MK once per row (:class:`~stretchflow.operators.row_keys.RowKeys`,
  the keys vsn's instances share: a set, list or dict of keys flattened to one entry per (row,
  key)), each key's group from a hash that is the same in every process
  (:func:`.sn_process.stable_group_function`; thread channels share a process and use
  ``hash``), its owner from f_μ. Every channel gets one *part* of the pulse: the entries of
  the keys it owns, ``(ts, key, value f_U sees, payload)`` as parallel lists, pickled to a
  process channel (payloads repeated in both lists are pickled once).
* **Own** (every channel): the A+'s own instance (σ of one group: groups only route here,
  nothing migrates), parts applied in
  pulse order (so a key's f_U calls come in the reference's order: non-commutative f_U are
  exact), then updateW at the pulse's watermark; its answer is the windows it closed, as
  ``(ts, payload)`` rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..batch import Batch
from ..errors import RunTupleError
from ..operators.row_keys import RowKeys
from .sn_columnar_channel import PulseChannel, named
from .sn_process import stable_group_function
from .sn_raw_lines import RawLines, parse

__all__ = ["ROWS_BATCH", "RowChannel", "rows_capable"]

#: source tuples a pulse of the rows path (the batches dealt). Hot items with lambdas, 1 000 000
#: bids, 2 process channels, all processes' CPU in alternating single runs: 5.2-5.4 s at 4 096
#: (the columnar path's pump.COLUMNAR_BATCH), 4.1-4.4 s at 2 048, 4.3-4.4 s at 1 024, 5.8-6.0
#: s at 16 384; mean price 2.35 s at 4 096, 2.31 s at 2 048
ROWS_BATCH = 2048


def rows_capable(op: Any) -> bool:
    """Whether ``op``'s instance takes an instance's part of a batch's precomputed keys
    (``_own_rows``: an A+ with WT multi)."""
    return hasattr(op.instance(), "_own_rows")


class _StableRowKeys(RowKeys):
    """:class:`RowKeys` with each key's group from a process-independent hash."""

    __slots__ = ("group_of",)

    def __init__(self, group_of: Callable[[Any], int], *args: Any):
        self.group_of = group_of
        super().__init__(*args)

    def _groups(self, cols: list[Any], G: int) -> Any:
        import numpy as np

        try:
            return np.fromiter(map(self.group_of, cols[1]), dtype=np.int64,
                               count=len(cols[1]))
        except TypeError:
            # an unhashable key (the stable hash's cache raises without naming the row):
            # RowKeys fails its row and drops the entries from it on, then the rest again
            super()._groups(cols, G)
            keys = cols[1]
            return np.fromiter(map(self.group_of, keys), dtype=np.int64, count=len(keys))


class RowChannel(PulseChannel):
    """A channel of the rows path: the A+'s instance over the key groups f_μ gives it."""

    def __init__(self, j: int, op: Any, p: int, n_groups: int, assign: list[int],
                 send: Any, pre: Sequence[Any] = (), ipc: bool = True, source: Any = None):
        super().__init__(j, op, p, n_groups, assign, send, pre, ipc, source)
        # σ of one group: no migration on this path, so the key groups only route; one group
        # expires each window once (per group, each window's slices would be combined once
        # for every group the channel owns: 64 times at G=128, P=2)
        self.inst = op.instance()
        if not hasattr(self.inst, "_own_rows"):
            raise ValueError(f"{op.name}: not an A+ with WT multi")
        self._keys = getattr(op.user_keys, "__wrapped__", op.user_keys)
        self._group_of = stable_group_function(n_groups) if ipc else None
        # entries: (row, key) pairs f_MK gave; shuffled: those sent to another channel
        self.entries = self.shuffled = 0

    def explode_batch(self, seq: int, batch: Any, wm: int) -> None:
        if type(batch) is RawLines:  # lines the dealer did not parse (sn_raw_lines)
            t0 = time.perf_counter()
            batch, err = parse(self.source, batch)
            if err is not None:  # after the rows before it: any failure of theirs wins
                self.fail(seq, err, 2)  # no timestamp: after every row of the pulse
            self.busy += time.perf_counter() - t0
        super().explode_batch(seq, batch, wm)

    def _parts(self, b: Batch, seq: int) -> list[tuple | None]:
        import numpy as np

        # f_MK over the rows with their row numbers as timestamps: the entries' rows, by
        # which failures of one timestamp in several channels are ordered (fail)
        rows = Batch(np.arange(len(b), dtype=np.int64), payloads=b.payloads)
        args = (self._keys, rows, self.G, self.assign, None)
        rk = RowKeys(*args) if self._group_of is None else _StableRowKeys(self._group_of,
                                                                           *args)
        if rk.failed is not None:  # the entries before it still go to their owners
            r, v, e = rk.failed
            err = e if isinstance(e, RunTupleError) else RunTupleError(int(b.ts[r]), v, e)
            self.fail(seq, named(self.op.name, err), 1, r)
        out: list[tuple | None] = []
        for o in range(self.p):
            part = rk.part(o, self.assign)
            n = len(part[0])
            self.entries += n
            if o != self.j:
                self.shuffled += n
            # the groups stay here (the owner's σ is one group); its rows beside the entries
            out.append(("rows", (b.ts[part[0]].tolist(), part[1], part[2], part[4], part[0]))
                       if n else None)
        return out

    def _apply(self, part: tuple) -> None:
        ts, keys, xs, payloads, _ = part[1]
        self.inst._own_rows(ts, keys, xs, [0] * len(ts), payloads)

    def _row_of(self, part: tuple | None, e: BaseException) -> float:
        """The row of the entry ``_own_rows`` failed on: the first of its timestamp and
        payload (a tuple's entries are one row's)."""
        if part is None or not isinstance(e, RunTupleError):
            return math.inf
        ts, _, _, payloads, rows = part[1]
        return next((r for t, p, r in zip(ts, payloads, rows, strict=True)
                     if p is e.payload and t == e.ts), math.inf)

    def _close(self, wm: int) -> tuple | None:
        inst = self.inst
        inst._rows_end(wm)
        return self.pack(Batch.of_items(inst.take())) if inst.out else None

    def _finish(self) -> tuple | None:
        inst = self.inst
        inst.finish()
        return self.pack(Batch.of_items(inst.take())) if inst.out else None

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "entries": self.entries, "entries_shuffled": self.shuffled}
