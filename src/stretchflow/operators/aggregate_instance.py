"""The run-time instance of an A+ with WT multi (journal Alg. 2 on bare accumulators) and its
columnar form; :mod:`.aggregate` defines the operator, :mod:`.slicing` the sliced instance."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..batch import arrow_mask
from ..errors import RunTupleError, StretchflowError
from .columnar_kernels import sum_by
from .keys import key_pairs, one_key_test
from .oplus import OPlusInstance
from .row_keys import RowKeys

if TYPE_CHECKING:
    from ..batch import Batch
    from .aggregate import Aggregate


class AggregateInstance(OPlusInstance):
    """Alg. 2 for an A+ with WT multi, holding each window instance's ζ as the bare
    accumulator: the same steps as :class:`OPlusInstance` without a WindowSet per
    (key, window) and one fewer call per update, the hot path of wordcount."""

    op: Aggregate
    #: how tuples reach σ: ``"tuple"`` (one f_U per (key, window instance), Op. 14),
    #: ``"columnar"`` (some run came through :meth:`process_keyed`: f_U once per (window, key)
    #: with summed values) or ``"sliced"`` (one accumulator per (key, slice), whichever way
    #: tuples come; :class:`~.slicing.SlicedAggregateInstance`). For a run summary.
    path: str = "tuple"

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

    def process_rows(self, ts: Sequence[int], payloads: Sequence[Any], i: int = 0) -> None:
        """A batch of rows (:meth:`OPlusInstance.process_rows`) in one loop: Alg. 2's
        processSN per row with updateW reduced to the one comparison that matters inside a
        batch (does this row close the earliest window, ρ + WS <= ts?) and the window
        instances a row falls in looked up once per window range, not per row. The user's
        f_MK is read as :func:`~.keys.one_key` reads it, inlined. An instance sharing σ
        with others (an assignment, VSN) or taking runs through a kernel goes the general
        way."""
        if not self._rows_alone() or self.takes_runs:
            super().process_rows(ts, payloads, i)
            return
        op = self.op
        raw = getattr(op.user_keys, "__wrapped__", op.user_keys)
        kind, learn = one_key_test()
        update, init, missing = op.user_update, op.user_init, _MISSING
        # the σ entries a row updates (its window instances, or its slice: _dicts) are the
        # same through a span of gcd(WS, WA): looked up once per span, as in _own_rows
        width, ws_ = math.gcd(op.WS, op.WA), op.WS
        sg, heap, dicts = self.groups[0], self._lheap, self._dicts
        nxt = heap[0][0] + ws_ if heap else math.inf  # the next expiry (ρ + WS)
        cur = None  # the span whose σ entries `ds` holds
        ds: list[dict] = []
        d1: dict | None = None  # ds's one entry, when it has one (a sliced A+: its slice)
        t = v = None
        try:
            for t, v in zip(ts, payloads, strict=True):
                if t >= nxt:  # updateW: this row closes windows (slices may go)
                    self.W = t
                    self._expire(t)
                    nxt = heap[0][0] + ws_ if heap else math.inf
                    cur = None
                ks = raw(v)
                one = kind.get(type(ks))
                if one or (one is None and learn(type(ks))):
                    pairs = None
                elif not ks:
                    continue  # no keys: no σ entry is made
                else:
                    pairs = key_pairs(ks, v)
                s = t - t % width
                if s != cur:
                    ds = dicts(sg, 0, t)  # check&Create
                    d1 = ds[0] if len(ds) == 1 else None
                    nxt = heap[0][0] + ws_
                    cur = s
                if pairs is None:
                    if d1 is not None:  # no loop over one entry: ~30 ns a row
                        acc = d1.get(ks, missing)
                        d1[ks] = update(init() if acc is missing else acc, v)  # f_U
                        continue
                    for d in ds:
                        acc = d.get(ks, missing)
                        d[ks] = update(init() if acc is missing else acc, v)  # f_U
                    continue
                for k, x in pairs:
                    for d in ds:
                        acc = d.get(k, missing)
                        d[k] = update(init() if acc is missing else acc, x)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(t, v, e) from e
        self._rows_done(ts)

    def _rows_alone(self) -> bool:
        """Whether this instance alone handles every key: it owns all of σ and σ is one
        group (the sequential case, or a VSN instance owning the one group there is), so a
        row's keys need no routing."""
        return self.assign is None or (self._owns_all and self.state.G == 1)

    def process_shared(self, batch: Batch, lock: Any) -> None:
        """A batch of rows read by every instance sharing σ (VSN, Alg. 4), this instance
        updating the keys of its own groups: f_MK runs once per row for all of them
        (:class:`~.row_keys.RowKeys`, left on the batch under ``lock``, which the
        instances share), then this instance's rows go through one loop (:meth:`_own_rows`).
        Same σ and outputs as :meth:`process` on every row; a failure is a
        :class:`~stretchflow.errors.RunTupleError` naming its row. An instance alone
        (:meth:`_rows_alone`) or taking runs through a kernel takes :meth:`process_rows`."""
        if self._rows_alone() or self.takes_runs:
            self.process_rows(batch.ts_list(), batch.payloads)
            return
        n = len(batch)
        if not n:
            return
        if self.state.G == 1:  # one group, another instance's: nothing here but time
            self._rows_end(batch.last)
            return
        op, assign = self.op, self.assign
        raw = getattr(op.user_keys, "__wrapped__", op.user_keys)
        hits = self.group_hits
        rk = batch.shared(self.state, lock, lambda: RowKeys(raw, batch, self.state.G, assign,
                                                             hits))
        self._own_rows(*rk.part(self.j, assign))
        if rk.failed is not None:  # the rows before it are done, and updateW at its ts
            self._rows_end(rk.failed[0])
            rk.raise_failure()
        self._rows_end(batch.last)

    def _own_rows(self, ts: list[int], keys: list[Any], xs: list[Any], gs: list[int],
                  payloads: list[Any]) -> None:
        """This instance's entries of a batch (:class:`~.row_keys.RowKeys`), in order: the
        loop of :meth:`process_rows` with each key's group given. The σ entries a row
        updates (:meth:`_dicts`) are the same for every row of one span of gcd(WS, WA) —
        both ends of its window range, and its slice, change only at such multiples — so they
        are looked up once per span and group. updateW runs at the rows of this instance
        only (and at the batch's end, :meth:`_rows_end`): a window a row falls in closes
        after it, and the outputs of windows that close come out in timestamp order either
        way."""
        op = self.op
        update, init, missing = op.user_update, op.user_init, _MISSING
        width, ws_ = math.gcd(op.WS, op.WA), op.WS
        groups, heap, dicts = self.groups, self._lheap, self._dicts
        nxt = heap[0][0] + ws_ if heap else math.inf  # the next expiry (ρ + WS)
        cur = None  # the span whose σ entries `cached` holds, per group
        cached: dict[int, list[dict]] = {}
        t = v = None
        try:
            for t, k, x, g, v in zip(ts, keys, xs, gs, payloads, strict=True):  # noqa: B007
                if t >= nxt:  # updateW: this row closes windows
                    self.W = t
                    self._expire(t)
                    nxt = heap[0][0] + ws_ if heap else math.inf
                    cur = None
                s = t - t % width
                if s != cur:
                    cached = {}
                    cur = s
                ds = cached.get(g)
                if ds is None:
                    ds = cached[g] = dicts(groups[g], g, t)
                    nxt = heap[0][0] + ws_
                for d in ds:
                    acc = d.get(k, missing)
                    d[k] = update(init() if acc is missing else acc, x)  # f_U
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(t, v, e) from e

    def _dicts(self, sg: dict, g: int, t: int) -> list[dict]:
        """σ_g's window instances a row at ``t`` falls in, earliestWinL(t)..latestWinL(t),
        created (check&Create) where missing."""
        wa = self.op.WA
        return [self._entry(sg, l, g)
                for l in range(((t - self.op.WS) // wa + 1) * wa, t - t % wa + 1, wa)]

    def _rows_end(self, last: int) -> None:
        """updateW at a batch's last timestamp ``last`` for an instance that skipped rows
        of it: expire what it closes, then W and latestWinL (:meth:`_rows_done`)."""
        heap = self._lheap
        if heap and heap[0][0] + self.op.WS <= last:
            self.W = max(self.W, last)
            self._expire(last)
        self._rows_done((last,))

    def _rows_done(self, ts: Sequence[int]) -> None:
        """updateW's bookkeeping after a batch of rows: W and latestWinL of its last row."""
        if len(ts):
            last = ts[-1]
            if last > self.W:
                self.W = last
            latest = last - last % self.op.WA
            if latest > self._last_l:
                self._last_l = latest

    def _expire(self, wm: float) -> None:
        heap, groups, ws_ = self._lheap, self.groups, self.op.WS
        output, out, many = self.op.user_output, self.out, self.op.many_outputs
        while heap and heap[0][0] + ws_ <= wm:
            l, g = heapq.heappop(heap)
            right = l + ws_
            for k, acc in groups[g].pop(l).items():  # forwardAndShift; WT multi: remove
                res = output(k, acc)
                if res is not None:
                    if many:  # f_O gives several payloads (top_k's rows)
                        out.extend((right, r) for r in res)
                    else:
                        out.append((right, res))

    def finish(self) -> None:
        self._expire(math.inf)

    # -- columnar form -------------------------------------------------------------------------
    def process_columns(self, ts: Sequence[int], payloads: Sequence[Any]) -> None:
        """``process(ts[r], payloads[r])`` for every r, in one call through the operator's
        vectorized f_MK (``Aggregate.columns``); timestamps non-decreasing and not below the
        watermark. When ``columns`` fails (a payload it cannot take) the tuples go one at a
        time through :meth:`process`, which reports the offending tuple."""
        import numpy as np

        if not len(payloads):
            return
        try:
            rows, keys, values = self.op.columns(payloads)  # type: ignore[misc]
        except Exception:
            for t, p in zip(ts, payloads, strict=True):
                self.process(t, p)  # raises the user's own error for the offending tuple
            return
        ts_arr = np.asarray(ts, dtype=np.int64)
        self.process_keyed(ts_arr[np.asarray(rows, dtype=np.int64)], keys, values,
                           first=int(ts_arr[0]), last=int(ts_arr[-1]))

    def process_keyed(self, ts: Any, keys: Any, values: Any, first: int | None = None,
                      last: int | None = None) -> None:
        """The tuples of a run already split into (ts, key, value) rows — what f_MK's
        columnar form gives, or a shuffle by key delivers — ts non-decreasing and not below
        the watermark. ``first``/``last``: the run's first and last tuple timestamps when
        they carry no rows here (default: the rows' own).

        Same σ and outputs as :meth:`process` on each tuple (Alg. 2): updateW to the first
        timestamp; every row falls in the windows earliestWinL(ts)..latestWinL(ts) (Op. 14),
        or in its one slice when sliced (:meth:`_spans`); the values of each (window, key)
        are summed (Arrow ``group_by``) and f_U runs once
        with the sum, which equals f_U on each value because f_U adds; then updateW to the
        last timestamp. No window a row falls in can expire inside the run: with ts
        non-decreasing, a window closes only at a timestamp after all of its rows."""
        import numpy as np
        import pyarrow as pa

        op = self.op
        ts = np.asarray(ts, dtype=np.int64)
        n = len(ts)
        if first is None:
            if not n:
                return
            first, last = int(ts[0]), int(ts[-1])
        if first < self.W or (n and (int(ts[0]) < first or int(ts[-1]) > last)):
            raise ValueError(f"{op.name}: process_keyed needs non-decreasing timestamps not "
                             f"below the watermark {self.W}")
        if first > self.W:
            self._update_w(first)
        if self.path == "tuple":
            self.path = "columnar"
        if n:
            l1, l2, wa = self._spans(ts)
            ls, ks, vs = [], [], []
            keys = pa.array(keys) if not isinstance(keys, pa.Array | pa.ChunkedArray) \
                else keys
            values = np.asarray(values, dtype=np.int64)
            for j in range(int((l2 - l1).max()) // wa + 1):  # the j-th window of each row
                lj = l1 + j * wa
                m = lj <= l2
                if m.all():
                    ls.append(lj), ks.append(keys), vs.append(values)
                elif m.any():
                    ls.append(lj[m]), ks.append(keys.filter(arrow_mask(m))), vs.append(values[m])
            # the kernel the columnar sliced instance uses (operators/columnar_kernels.py):
            # one implementation for Spark's keyed stage and the local engines
            key_col = pa.chunked_array([c for k in ks for c in
                                        (k.chunks if isinstance(k, pa.ChunkedArray) else [k])],
                                       keys.type).combine_chunks()
            l_col, (k_col,), sums = sum_by([key_col], np.concatenate(vs), np.concatenate(ls))
            cut = np.flatnonzero(np.diff(l_col)) + 1  # where the window changes
            ks, sums = k_col.to_pylist(), sums.tolist()
            for a, b in zip(np.r_[0, cut], np.r_[cut, len(l_col)], strict=True):
                self._merge(int(l_col[a]), ks[a:b], sums[a:b])
        if last > self.W:
            self._update_w(last)

    def _spans(self, ts: Any) -> tuple[Any, Any, int]:
        """For a numpy array of timestamps: the first and last left boundary of the σ
        entries each row updates, and their step — the window instances
        earliestWinL(ts)..latestWinL(ts) by WA (Op. 14)."""
        wa = self.op.WA
        return ((ts - self.op.WS) // wa + 1) * wa, ts - ts % wa, wa

    def _merge(self, l: int, ks: list[Any], sums: list[int]) -> None:
        """f_U once per key of σ entry ``l`` (a window instance, or a slice when sliced) with
        the sum of its values (σ.check&Create, f_U, set), for the keys this instance owns."""
        update, init = self.op.user_update, self.op.user_init
        groups, assign, j, G = self.groups, self.assign, self.j, self.state.G
        if G == 1 and (assign is None or self._owns_all):
            d = self._entry(groups[0], l, 0)
            get = d.get
            for k, s in zip(ks, sums, strict=True):
                acc = get(k, _MISSING)
                d[k] = update(init() if acc is _MISSING else acc, s)
            return
        for k, s in zip(ks, sums, strict=True):
            g = hash(k) % G
            if assign is not None and not self._owns_all and assign[g] != j:
                continue
            d = self._entry(groups[g], l, g)
            acc = d.get(k, _MISSING)
            d[k] = update(init() if acc is _MISSING else acc, s)

    def _entry(self, sg: dict, l: int, g: int) -> dict:
        """σ_g's window instances at ``l``, created (and indexed for expiry) if new."""
        d = sg.get(l)
        if d is None:
            d = sg[l] = {}
            heapq.heappush(self._lheap, (l, g))
        return d


_MISSING = object()
