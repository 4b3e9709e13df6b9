"""The columnar sliced A+ run by VSN instances that share σ (issues #16, #31).

:mod:`.columnar` runs an A+ with columnar forms (``Aggregate.columnar``) on one instance; here
the ``m`` connected instances of a VSN operator (STRETCH §5) share its input, its output and
its state, and split the work:

* **σ** is :class:`ColumnarShared`: per slice of width gcd(WS, WA) (general stream slicing,
  Scotty, EDBT 2019, §4), the *partials* of the batches whose tuples fell in it — an Arrow
  table of (key columns, state ``v``) folded per key (:mod:`.column_forms`; a float sum's
  rows as they are), with each row's key group beside it, kept in ESG order. Nothing
  in it belongs to an instance: f_μ only says which instance emits which key groups, so a
  reconfiguration (Alg. 4's barrier) moves no state, as VSN promises.
* **Accumulate** (Hazelcast Jet's accumulate step): each batch read from ESG_in (every
  instance reads every batch, Alg. 4) is exploded by f_MK's columnar form and folded per
  (slice, key) *once*, by the first instance to reach it; the others find it done. An
  instance that reaches a batch another instance is still summing does not wait idle: it sums
  the next batches the source has added (:meth:`ColumnarShared.prepared`), so while one
  instance sums batch k the other sums k + 1, each kernel running with the GIL released.
  Partials may thus be added ahead of an instance's watermark: harmless, since a window is
  combined only once the watermark W passes its right boundary, and every tuple of a later
  batch has ts >= W, beyond it.
* **Combine** (Jet's combine and finish): when its watermark passes a window's right boundary
  (Alg. 2's updateW, ρ + WS <= W) every batch with a tuple in the window's slices is in, so
  each slice's partials are folded into one, in ESG order (once, by whichever instance gets
  there first: the fold is the same whoever makes it), and an instance combines the window's
  slices over the key groups it owns (f_μ) and emits them through f_O's columnar form as one
  table. Instances combine disjoint key groups, so this part is split ``m`` ways.

Key groups come from :func:`.columnar_kernels.key_groups` (a hash in numpy of each key's
value), never Python's salted ``hash``: the group of a key must be the same for the columnar
partials and for the tuple-at-a-time ones below.

A batch f_MK's columnar form refuses (e.g. a payload whose text is not a string) is summed
tuple at a time (f_MK, f_U per tuple, as :class:`.slicing.SlicedAggregateInstance` does) into
Python partials in the same σ; its error, if f_MK or f_U fails on a tuple, is raised by the
instance that *processes* that batch, in ESG order — so the first failing tuple of the input
is the one reported, as tuple at a time, even when a later batch was summed ahead.

Partials of one slice are kept in ESG order whatever order their batches were summed in (a
batch is numbered when first seen: its producer offers batches in order, and an instance reads
one only after all before it), so a float sum adds its rows in the tuple path's order and the
output is the same on every run and at every parallelism.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..batch import Batch, arrow_mask
from ..errors import RunTupleError, StretchflowError
from .column_forms import (
    cast_keys,
    form_of,
    key_cols,
    partial,
    pinned_key_types,
    pinned_state_type,
    state_of,
)
from .columnar import FALLBACK, _keys_of, combine_in_python, fold_parts, key_arrays, take_columns
from .columnar_kernels import key_groups
from .oplus import key_pairs

if TYPE_CHECKING:
    from .aggregate import Aggregate

_MISSING = object()


class _Prep:
    """A batch's accumulate step: claimed by one instance, then done (or failed)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = False
        self.error: BaseException | None = None


class _PyPart:
    """Tuple-at-a-time partial of one slice: ``{key: acc}`` and each key's group."""

    __slots__ = ("accs", "groups")

    def __init__(self, accs: dict[Hashable, Any], groups: dict[Hashable, int]):
        self.accs = accs
        self.groups = groups


class ColumnarShared:
    """σ of a columnar sliced A+ shared by its VSN instances; see the module doc."""

    def __init__(self, op: Aggregate, n_groups: int):
        self.op = op
        self.G = n_groups
        form = form_of(op)
        if form is None:
            raise ValueError(f"{op.name}: no columnar form")
        self.form = form
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        #: slice start -> partials: (table of key columns and v, key group per row or None)
        #: or _PyPart
        self.parts: dict[int, list[Any]] = {}
        #: batches added to ESG_in whose accumulate step nobody has claimed yet (in order)
        self.pending: deque[Batch] = deque()
        #: connected instance -> the left boundary of its next window not yet emitted
        self.next_l: dict[int, float] = {}
        self._key_types: list[Any] | None = None
        self._v_type: Any = None  # the state column's type, from the first batch summed
        #: slice start -> the ESG position of each of its partials' batch (parts are kept in
        #: that order: a float sum adds in the tuple path's order whoever summed a batch)
        self.part_seqs: dict[int, list[int]] = {}
        #: slices whose one partial is folded already (every batch of theirs is in)
        self.folded: set[int] = set()
        self._seqs: dict[int, int] = {}  # id(batch) -> ESG position, while it is pending
        self._next_seq = 0
        self.stopped = False
        #: checkpoint cuts whose barrier is in ESG_in but not yet snapshotted: no helper
        #: sums a batch past the first (the snapshot holds exactly the batches <= the cut)
        self.fences: deque[float] = deque()

    # -- the accumulate step, shared -----------------------------------------------------------
    def offer(self, batches: list[Batch]) -> None:
        """Batches just added to ESG_in (called by their producer): helpers may sum them."""
        with self.lock:
            for b in batches:
                self._seq(b)
            self.pending.extend(batches)

    def _seq(self, batch: Batch) -> int:
        """``batch``'s position in ESG_in (under the lock): numbered on first sight, which is
        in ESG order (its producer offers batches in order, and an instance reads one only
        after all before it)."""
        seq = self._seqs.get(id(batch))
        if seq is None:
            seq = self._seqs[id(batch)] = self._next_seq
            self._next_seq += 1
        return seq

    def prepared(self, batch: Batch, hits: list[int] | None) -> _Prep:
        """``batch``'s accumulate step, done: by this instance if nobody claimed it, else by
        whoever did — meanwhile this instance sums later pending batches. ``hits`` (the
        calling instance's per-group tuple counts, for a balancing f_μ) counts the rows of
        the batches this instance sums."""
        with self.lock:
            prep = self._prep_of(batch)
            mine = prep is None
            if mine:
                prep = self._new_prep(batch)
            self._prune()
        if mine:
            self._compute(batch, prep, hits)
            return prep
        while True:
            with self.lock:
                if prep.done:
                    return prep
                other = self._claim()
                if other is None:
                    while not prep.done and not self.stopped:
                        self.cond.wait(0.5)
                    return prep
            self._compute(other[0], other[1], hits)

    def _prep_of(self, batch: Batch) -> _Prep | None:
        """This σ's accumulate step of ``batch`` (None: unclaimed). ``batch.memo`` holds one
        per columnar O+ reading it: several O+ may read one source's batches."""
        memo = batch.memo
        return None if memo is None else memo.get(id(self))

    def _new_prep(self, batch: Batch) -> _Prep:
        if batch.memo is None:
            batch.memo = {}
        prep = batch.memo[id(self)] = _Prep()
        return prep

    def _prune(self) -> None:
        pending = self.pending
        while pending and self._prep_of(pending[0]) is not None:
            pending.popleft()

    def _claim(self) -> tuple[Batch, _Prep] | None:
        self._prune()
        if not self.pending or (self.fences and self.pending[0].first > self.fences[0]):
            return None
        b = self.pending.popleft()
        prep = self._new_prep(b)
        return b, prep

    def _compute(self, batch: Batch, prep: _Prep, hits: list[int] | None) -> None:
        with self.lock:
            seq = self._seq(batch)
        try:
            parts = self._partials(batch, hits)
        except BaseException as e:  # raised by the instance that processes the batch
            with self.lock:
                prep.error = e
                prep.done = True
                self.cond.notify_all()
            if not isinstance(e, Exception):
                raise
            return
        with self.lock:
            self._seqs.pop(id(batch), None)
            late = self._behind_emitted(parts)
            if late is not None:  # the batch's instance raises it (process_batch)
                prep.error = StretchflowError(
                    f"{self.op.name}: internal error: rows of slice {late[0]} reached the "
                    f"shared state after every connected instance had emitted the windows "
                    f"holding them (up to the one starting before {late[1]}); they would be "
                    f"lost, so the run stops")
            else:
                for s, part in parts:
                    self._insert(s, seq, part)
            prep.done = True
            self.cond.notify_all()

    def _behind_emitted(self, parts: list[tuple[int, Any]]) -> tuple[int, float] | None:
        """``(slice, m)`` for a partial whose slice lies before ``m``, the left boundary below
        which every connected instance has emitted its windows (under the lock): such rows
        are in no window still to come, and :meth:`moved` drops the slice. Correct ordering
        never makes one; a race in the runtime would, and would lose the rows silently."""
        if not self.next_l or not parts:
            return None
        m = min(self.next_l.values())
        low = min(s for s, _ in parts)
        return (low, m) if low < m else None

    def _insert(self, s: int, seq: int, part: Any) -> None:
        """Partial ``part`` of the batch at ESG position ``seq`` into slice ``s``, in ESG order
        (under the lock). Partials restored from a checkpoint count as earlier than any."""
        ps = self.parts.setdefault(s, [])
        seqs = self.part_seqs.setdefault(s, [])
        if len(seqs) < len(ps):
            seqs[:0] = [-1] * (len(ps) - len(seqs))
        i = bisect.bisect(seqs, seq)
        seqs.insert(i, seq)
        ps.insert(i, part)
        self.folded.discard(s)

    def fence_at(self, cut: float) -> None:
        """A checkpoint barrier for ``cut`` enters ESG_in (before the batches after it)."""
        with self.lock:
            self.fences.append(cut)

    def unfence(self) -> None:
        """The earliest fenced checkpoint is snapshotted: helpers may sum past it."""
        with self.lock:
            if self.fences:
                self.fences.popleft()
            self.cond.notify_all()

    def stop(self) -> None:
        """The run failed: nobody waits for a batch any more."""
        with self.lock:
            self.stopped = True
            self.cond.notify_all()

    def _partials(self, batch: Batch, hits: list[int] | None) -> list[tuple[int, Any]]:
        """The batch's partials per slice, as ``(slice start, partial)`` pairs: its rows
        folded per (slice, key), or (a float sum's) as they are, each row with its key group;
        tuple at a time where the columnar form refuses the batch."""
        import numpy as np
        import pyarrow as pa

        op, form = self.op, self.form
        cols = take_columns(op, batch)  # maybe computed by the source's thread already
        if cols is None:  # refused: the tuple path names the tuple it fails on
            return self._python_partials(batch, hits)
        rows, keys, v = cols
        if not len(v):  # no row has a key and a value (all null): nothing to add
            return []
        try:
            cols = self._key_columns(keys)
            self._state_type(v)
            width = op.slice_width
            t = batch.ts - batch.ts % width  # each tuple's slice, then each row's
            if rows is not None:
                t = t[rows]
            if form.pregroup(v):
                sl, ks, vs = form.fold(cols, v, t)
            else:
                sl, ks, vs = t, cols, v  # rows in time order: slices ascending
            g = key_groups(ks, self.G) if self.G > 1 and len(sl) else None
        except (*FALLBACK, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return self._python_partials(batch, hits)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(batch.first, batch.payloads[0], e) from e
        if not len(sl):
            return []
        if g is not None and hits is not None:
            for grp, c in enumerate(np.bincount(g, minlength=self.G).tolist()):
                if c:
                    hits[grp] += c
        cut = np.flatnonzero(sl[1:] != sl[:-1]) + 1
        out = []
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(sl)].tolist(), strict=True):
            table = partial([k.slice(a, b - a) for k in ks], vs.slice(a, b - a))
            out.append((int(sl[a]), (table, None if g is None else g[a:b])))
        return out

    def _key_columns(self, keys: Any) -> list[Any]:
        """f_MK's key column(s), each cast to the type its column had first (so partials of
        different batches concatenate)."""
        arrays = key_arrays(keys)
        with self.lock:
            self._key_types = types = pinned_key_types(self._key_types, arrays, self.op.name)
        return cast_keys(arrays, types)

    def _state_type(self, v: Any) -> None:
        """The state column's type is the first batch's; another (ints after floats) is
        refused, as on one instance (:func:`.column_forms.pinned_state_type`)."""
        with self.lock:
            self._v_type = pinned_state_type(self._v_type, v)

    def _python_partials(self, batch: Batch, hits: list[int] | None) -> list[tuple[int, Any]]:
        """Tuple at a time (f_MK, then f_U per (slice, key), as the sliced instance does)."""
        op = self.op
        width = op.slice_width
        keys_of, update, init = op.user_keys, op.user_update, op.user_init
        by_slice: dict[int, dict[Hashable, Any]] = {}
        ts = v = None
        try:
            for ts, v in batch.items():
                ks = keys_of(v)
                if not ks:
                    continue
                d = by_slice.setdefault(ts - ts % width, {})
                for k, x in key_pairs(ks, v):
                    acc = d.get(k, _MISSING)
                    d[k] = update(init() if acc is _MISSING else acc, x)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(ts, v, e) from e
        out = []
        for s, d in by_slice.items():
            groups = self._groups_of(list(d))
            if hits is not None and self.G > 1:
                for grp in groups.values():
                    hits[grp] += 1
            out.append((s, _PyPart(d, groups)))
        return out

    def _groups_of(self, ks: list[Hashable]) -> dict[Hashable, int]:
        """Each key's group, as :func:`key_groups` gives it for the same key in an Arrow
        partial; a key Arrow cannot hold (a string with a lone surrogate) never is in one,
        so any fixed choice does for it."""
        if self.G == 1:
            return dict.fromkeys(ks, 0)
        out: dict[Hashable, int] = {}
        for k in ks:
            try:
                cols = self._key_columns(_arrow_key(k))
                out[k] = int(key_groups(cols, self.G)[0])
            except Exception:  # noqa: BLE001 - not representable in Arrow: see the doc
                out[k] = hash(k) % self.G
        return out

    # -- the combine step, per instance ---------------------------------------------------------
    def window_parts(self, slices: list[int]) -> list[list[Any]]:
        """Each slice's partials in ESG order, folded into one first where they are all
        Arrow partials (once per slice: every batch of a slice is in when a window holding it
        closes, so the fold is final and the same whichever instance makes it)."""
        out = []
        for s in slices:
            with self.lock:
                ps = list(self.parts.get(s, ()))
                done = s in self.folded
            if not done and ps and all(type(p) is tuple for p in ps):
                folded = self._fold_slice(ps)
                if folded is not None:
                    with self.lock:
                        if len(self.parts.get(s, ())) == len(ps):
                            self.parts[s] = [folded]
                            self.part_seqs[s] = self.part_seqs.get(s, [-1])[-1:]
                            self.folded.add(s)
                    ps = [folded]
            out.append(ps)
        return out

    def _fold_slice(self, ps: list[tuple[Any, Any]]) -> tuple[Any, Any] | None:
        """A slice's Arrow partials folded into one, with its rows' key groups; None when the
        fold cannot be exact (a sum beyond int64: the window is combined in Python)."""
        import pyarrow as pa

        if len(ps) == 1 and self.form.pregroup(state_of(ps[0][0])):
            # one batch's partial, folded per (slice, key) by _partials already (the common
            # case with a source's wide batches): folding it again gives the same rows
            return ps[0]
        try:
            table = fold_parts(self.form, [t for t, _ in ps])
        except (*FALLBACK, pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        g = key_groups(key_cols(table), self.G) if self.G > 1 and table.num_rows else None
        return table, g

    def slices_from(self, l: float) -> list[int]:
        with self.lock:
            return sorted(s for s in self.parts if s >= l)

    def moved(self, j: int, next_l: float | None) -> None:
        """Instance ``j`` emitted every window before ``next_l`` (None: it left); slices no
        connected instance needs any more are dropped."""
        with self.lock:
            if next_l is None:
                self.next_l.pop(j, None)
            else:
                self.next_l[j] = next_l
            if not self.next_l:
                return
            m = min(self.next_l.values())  # every window with l < m is emitted by all
            for s in [s for s in self.parts if s < m]:
                del self.parts[s]


class ColumnarVSNInstance:
    """o+_j of a columnar sliced A+ on VSN: takes whole batches, emits windows as tables."""

    path = "columnar"
    takes_runs = False

    def __init__(self, op: Aggregate, shared: ColumnarShared, j: int,
                 assign: list[int] | None, connected: bool):
        self.op = op
        self.shared = shared
        self.j = j
        self.W: float = -math.inf
        self.next_l: float = -math.inf
        self.out: list[tuple[int, Any]] = []
        self.group_hits: list[int] | None = None
        self._owner: Any = None
        self._owns_all = True
        #: id of a slice's partial -> (the partial, its rows of the owned key groups, as a
        #: table, or None when it has none): filtered once per partial under this assignment,
        #: though the partial is in WS / WA windows (:meth:`_owned_part`)
        self._owned: dict[int, tuple[Any, Any]] = {}
        #: rows an output entry may hold when this instance owns every key group (0: one
        #: window an entry). The executor sets it where every reader of the output is a
        #: columnar O+, whose inlet counts entries of source batches: a sink's counts windows
        self.merge_rows = 0
        #: where it owns only some key groups, one entry for all the windows an updateW
        #: closes (Batch.floor says how far a reader may advance after it). The executor
        #: sets it where every reader is a columnar O+ whose output does not depend on the
        #: order of its input's rows within a timestamp (count, min, max, top_k)
        self.interleave = False
        self.set_assignment(assign)
        if connected:
            shared.moved(j, self.next_l)

    # -- what VSN's instance loop calls ---------------------------------------------------------
    def set_assignment(self, assign: list[int] | None) -> None:
        import numpy as np

        self.assign = assign
        self._owns_all = assign is None or all(a == self.j for a in assign)
        self._owner = None if assign is None else np.asarray(assign, dtype=np.int64)
        self._owned = {}  # filtered under the assignment before

    def process_batch(self, batch: Batch) -> None:
        """Alg. 4 for a batch: its partials (summed once for all instances), then updateW to
        its last timestamp, emitting the windows that closed over the owned key groups."""
        if not len(batch):
            return
        prep = self.shared.prepared(batch, self.group_hits)
        if prep.error is not None:
            raise prep.error
        if not prep.done:  # the run stopped while another instance summed it
            raise RuntimeError(f"{self.op.name}: stopped")
        self.advance(batch.last if batch.floor is None else batch.floor)

    def process(self, ts: int, value: Any, i: int = 0) -> None:
        self.process_batch(Batch([ts], payloads=[value]))

    def advance(self, w: float) -> None:
        if w > self.W:
            before, self.W = self.W, w
            self._expire(w, before)

    def finish(self) -> None:
        before, self.W = self.W, math.inf
        self._expire(math.inf, before)

    def take(self) -> list[tuple[int, Any]]:
        out, self.out = self.out, []
        return out

    def saw_time(self, ts: float) -> None:
        """Nothing to record: windows follow from the slices in σ, not from this instance."""

    def flush_pending(self) -> None:
        """Nothing is held: windows go out as they close."""

    def joined(self, acting: ColumnarVSNInstance) -> None:
        """Connected at a barrier: the acting instance's windows are this one's too."""
        self.W = acting.W
        self.next_l = acting.next_l
        self.shared.moved(self.j, self.next_l)

    def left(self) -> None:
        self.shared.moved(self.j, None)

    # -- updateW's expiry: combine the windows that closed --------------------------------------
    def _expire(self, wm: float, before: float) -> None:
        """updateW from ``before`` to ``wm``: the windows whose right boundary is in
        (before, wm] closed."""
        op, sh = self.op, self.shared
        ws_, wa = op.WS, op.WA
        ss = sh.slices_from(self.next_l)
        l = self.next_l
        i = 0
        windows: list[tuple[int, list[int]]] = []  # (right boundary, its slices) that closed
        while i < len(ss):
            first = ((ss[i] - ws_) // wa + 1) * wa  # the first window holding slice ss[i]
            lw = first if first > l else l
            right = lw + ws_
            if right > wm:
                break
            k = i
            while k < len(ss) and ss[k] < right:
                k += 1
            windows.append((right, ss[i:k]))
            l = lw + wa
            while i < len(ss) and ss[i] < l:
                i += 1
        if windows:
            self._emit_windows([(right, sh.window_parts(w)) for right, w in windows], before)
        if wm == math.inf:
            l = math.inf
        else:
            done = ((wm - ws_) // wa + 1) * wa  # the first window with l + WS > W
            l = done if done > l else l
        if l != self.next_l:
            self.next_l = l
            sh.moved(self.j, l)

    def _emit_windows(self, windows: list[tuple[int, list[list[Any]]]], before: float) -> None:
        """The windows that closed as W passed from ``before`` on, in order (each with its
        slices' partials): combined over the owned key groups in one fold by (window, key) —
        a slice's partial counts once in every window it is in, slices in time order — then
        cut into one output batch per window (ESG_out orders entries by timestamp, so each
        carries one), or into runs of whole windows (:attr:`merge_rows`, :attr:`interleave`)."""
        import numpy as np
        import pyarrow as pa

        if any(type(p) is not tuple or len(ps) > 1 for _, slices in windows
               for ps in slices for p in ps):
            self._emit_in_python(windows, before)
            return
        tables, rights = [], []
        owned = None if self._owns_all else self._owned_part
        for right, slices in windows:
            for ps in slices:
                for p in ps:
                    t = p[0] if owned is None else owned(p)
                    if t is not None:
                        tables.append(t)
                        rights.append(np.full(len(t), right, np.int64))
        if owned is not None:
            self._forget_owned(windows)
        if not tables:
            return
        table = tables[0] if len(tables) == 1 else \
            pa.concat_tables(tables, promote_options="default")  # columns null in a batch
        r = np.concatenate(rights)
        form = self.shared.form
        try:
            rs, ks, v = form.fold(key_cols(table), state_of(table), r)
        except (*FALLBACK, pa.ArrowInvalid, pa.ArrowTypeError):
            self._emit_in_python(windows, before)
            return
        out = form.output(ks, v)
        cut = np.flatnonzero(rs[1:] != rs[:-1]) + 1
        starts, ends = np.r_[0, cut].tolist(), np.r_[cut, len(rs)].tolist()
        floor = None
        if self._interleaved():
            # every connected instance passes the same watermarks (they read the same
            # ESG_in), so each emits the windows with right boundary in (before, W] now: one
            # entry each, which the others' entries of that span interleave with; every
            # later entry of ESG_out holds rows after ``before`` only, so that is the
            # watermark a reader takes after this one (Batch.floor), not its last timestamp.
            # The entry's timestamp is its first row's: ESG_out gives a reader another
            # instance's watermark T before this entry only if T <= that, so none of its
            # rows is late. Keyed by its last row's (a window's right boundary, W when the
            # batch ended on one), another instance's watermark at W could come first in
            # the ties of equal timestamps, and the reader closed the windows this entry's
            # earlier rows belong to before it read them (lost rows)
            starts, ends, floor = [0], [len(rs)], before
        elif self.merge_rows and self._owns_all:
            # every output row of the operator is this instance's, so a run of whole
            # windows is a run in timestamp order that no other producer's entry of ESG_out
            # can interleave with (an entry is (last ts, batch), as a source's): the columnar
            # O+ behind (hot items' arg_max) then sums many windows per call, not one
            starts, ends = _merged_runs(starts, ends, self.merge_rows)
        for a, b in zip(starts, ends, strict=True):
            batch = Batch(rs[a:b], table=out.slice(a, b - a))
            batch.floor = floor
            self.out.append((int(rs[b - 1] if floor is None else rs[a]), batch))

    def _owned_part(self, p: tuple[Any, Any]) -> Any:
        """The rows of Arrow partial ``p`` (table, key group per row) in the key groups this
        instance owns, as a table, or None if it owns none of them: a folded slice's partial
        is in WS / WA windows, and this filters it once, not once per window (and not the
        other instances' rows of every window before they are dropped)."""
        got = self._owned.get(id(p))
        if got is not None and got[0] is p:
            return got[1]
        table, g = p
        if g is None:  # one key group (G == 1): all rows or none
            out = table if self._owner[0] == self.j else None
        else:
            mine = self._owner[g] == self.j
            if mine.all():
                out = table
            elif mine.any():
                out = table.filter(arrow_mask(mine))
            else:
                out = None
        self._owned[id(p)] = (p, out)
        return out

    def _forget_owned(self, windows: list[tuple[int, list[list[Any]]]]) -> None:
        """Keeps the filtered partials of the last window's slices only: the next windows
        share slices with it (a sliding window), no earlier window is combined again."""
        keep = {id(p) for ps in windows[-1][1] for p in ps}
        for i in [i for i in self._owned if i not in keep]:
            del self._owned[i]

    def _emit_in_python(self, windows: list[tuple[int, list[list[Any]]]],
                        before: float) -> None:
        import numpy as np

        out = []
        for right, slices in windows:  # keys only the tuple path could hold: per window
            payloads = self._window_in_python(slices)
            if payloads:
                out.append((right, Batch(np.full(len(payloads), right, np.int64),
                                         payloads=payloads)))
        if out and self._interleaved():  # one entry, as _emit_windows makes (and keys)
            batch = Batch.concat([b for _, b in out])
            batch.floor = before
            out = [(out[0][0], batch)]
        self.out.extend(out)

    def _interleaved(self) -> bool:
        """Whether this instance's windows leave as one entry per updateW that other
        instances' entries interleave with (:attr:`interleave`, unless it owns every key
        group and merges runs of its own)."""
        return self.interleave and not (self.merge_rows and self._owns_all)

    def _window_in_python(self, slices: list[list[Any]]) -> list[Any]:
        """A window combined in Python (:func:`.columnar.combine_in_python`) over the owned
        key groups, each slice's partials in ESG order."""
        return combine_in_python(self.op, [[r for p in ps for r in self._owned_rows(p)]
                                           for ps in slices])

    def _owned_rows(self, p: Any) -> list[tuple[Hashable, Any]]:
        """A partial's (key, accumulator) rows of the key groups this instance owns."""
        mine = self._mine
        if type(p) is _PyPart:
            return [(k, a) for k, a in p.accs.items() if mine(p.groups[k])]
        table, g = p
        keys = _keys_of(table)
        vals = self.shared.form.to_accs(state_of(table))
        gs = [0] * len(keys) if g is None else g.tolist()
        return [(k, v) for k, v, grp in zip(keys, vals, gs, strict=True) if mine(grp)]

    def _mine(self, g: int) -> bool:
        return self._owns_all or int(self._owner[g]) == self.j


def _merged_runs(starts: list[int], ends: list[int], limit: int) -> tuple[list[int], list[int]]:
    """Consecutive windows ``[starts[i], ends[i])`` joined into runs of at most ``limit`` rows,
    a window never split (one larger than ``limit`` is a run of its own).

    >>> _merged_runs([0, 3, 5, 9], [3, 5, 9, 10], 5)
    ([0, 5], [5, 10])
    >>> _merged_runs([0, 7], [7, 8], 5)  # a window of 7 rows stays whole
    ([0, 7], [7, 8])
    """
    out_s: list[int] = []
    out_e: list[int] = []
    for a, b in zip(starts, ends, strict=True):
        if out_s and b - out_s[-1] <= limit:
            out_e[-1] = b
        else:
            out_s.append(a)
            out_e.append(b)
    return out_s, out_e


def _arrow_key(k: Hashable) -> Any:
    """One key as the key column(s) f_MK's columnar form would give for it."""
    import pyarrow as pa

    if type(k) is tuple:
        return tuple(pa.array([c]) for c in k)
    return pa.array([k])
