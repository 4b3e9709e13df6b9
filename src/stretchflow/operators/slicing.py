"""Stream slicing for an A+ whose accumulators combine (issue #16).

General stream slicing (Scotty: Traub et al., "Scotty: General and Efficient Open-Source Window
Aggregation for Stream Processing Systems", EDBT 2019) cuts time into non-overlapping slices
such that every window is a run of whole slices. For sliding windows of size WS and slide WA the
slices have width D = gcd(WS, WA): every window boundary l (a multiple of WA) and l + WS is a
multiple of D. A tuple then updates ONE accumulator per key — that of its slice — instead of one
per window instance it falls in (WS/WA of them in Op. 14 when WA divides WS). When window l
expires, the accumulators of its slices are combined per key in time order and f_O runs on the
result: Hazelcast Jet's accumulate-combine-finish (Jet's *deduct*, which slides a running total
by subtracting the oldest slice, needs an invertible aggregate and is not used: each window is
combined afresh from its WS/D slices, so min and max slice too).

Same outputs as the unsliced instance, for an associative ``combine`` with ``init()`` as
identity and consistent with ``update`` (``fold(update, A ++ B) == combine(fold(update, A),
fold(update, B))``): window l holds key k iff some slice of [l, l+WS) does, i.e. iff some tuple
with key k fell in [l, l+WS), and its accumulator is the fold of those tuples.

σ layout, per key group g (what :class:`~.oplus.SharedState` shares between VSN instances and
what SN migration donates and collects, and Spark's streaming state pickles — so it must
describe itself): ``σ_g = {s: {key: acc}, NEXT: l}`` for the slice starts s, plus, while σ_g
holds slices, the left boundary l of its earliest window that has not been emitted. NEXT is
needed because a slice outlives the first windows it belongs to: after window l is emitted the
slices before l + WA go, but the remaining earliest slice may still belong to windows up to l,
which must not be emitted twice. The instance's expiry heap holds (σ_g[NEXT], g) for each owned
group with slices, so ``_lheap[0][0] + WS`` is still the next expiry time (Alg. 2's ρ + WS),
which executors and Spark's timers read.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from .aggregate_instance import _MISSING, AggregateInstance
from .oplus import SharedState, key_pairs

if TYPE_CHECKING:
    from .aggregate import Aggregate

#: σ_g's entry holding the left boundary of the group's earliest window not yet emitted
#: (a string: slice starts are integers, and a string pickles the same in every process)
NEXT = "next"


class SlicedAggregateInstance(AggregateInstance):
    """Alg. 2 for a sliced A+ (:attr:`Aggregate.sliced`): handleInputTuple updates the
    tuple's slice; updateW's expiry loop combines a window's slices when ρ + WS <= W."""

    op: Aggregate
    path = "sliced"

    def __init__(self, op: Aggregate, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None):
        self._width = op.slice_width
        super().__init__(op, sigma, j, assign)

    def set_assignment(self, assign: list[int] | None) -> None:
        """f_μ after a barrier (Alg. 4): index the owned groups' next windows for expiry."""
        if assign is None and self.state.G != 1:
            raise ValueError("several key groups need an assignment of groups to instances")
        self.assign = assign
        j = self.j
        self._owns_all = assign is not None and all(a == j for a in assign)
        # ownership first: other instances may be writing their own groups meanwhile
        self._lheap = [(sg[NEXT], g) for g, sg in enumerate(self.groups)
                       if (assign is None or assign[g] == j) and sg]
        heapq.heapify(self._lheap)

    # -- handleInputTuple: one slice per tuple ---------------------------------------------------
    def _handle(self, ts: int, value: Any, i: int) -> None:
        op = self.op
        ks = op.user_keys(value)
        if not ks:
            return
        s = ts - ts % self._width
        update, init = op.user_update, op.user_init
        if self.assign is None:
            # one group, all keys owned (the sequential case): every key updates the same
            # slice, so look it up once instead of routing key by key
            sg = self.groups[0]
            d = sg.get(s)
            if d is None:
                d = self._entry(sg, s, 0)
            get = d.get
            for k, v in key_pairs(ks, value):
                acc = get(k, _MISSING)
                d[k] = update(init() if acc is _MISSING else acc, v)
            return
        for k, v, g, sg in self._route(ks, value):
            d = sg.get(s)
            if d is None:
                d = self._entry(sg, s, g)
            acc = d.get(k, _MISSING)
            d[k] = update(init() if acc is _MISSING else acc, v)  # check&Create, f_U, set

    def _dicts(self, sg: dict, g: int, t: int) -> list[dict]:
        """The one σ entry a row at ``t`` updates: its slice in σ_g, created if new."""
        return [self._entry(sg, t - t % self._width, g)]

    def _spans(self, ts: Any) -> tuple[Any, Any, int]:
        # process_keyed: each row updates its one slice
        s = ts - ts % self._width
        return s, s, self._width

    def _entry(self, sg: dict, s: int, g: int) -> dict:
        """σ_g's slice at ``s``, created if new. A group that had no slices gets the first
        window of this slice as its next one: every earlier window was emitted or never held
        a tuple (a tuple at ts >= W falls only in windows not yet expired)."""
        d = sg.get(s)
        if d is None:
            d = sg[s] = {}
            if NEXT not in sg:
                op = self.op
                l = ((s - op.WS) // op.WA + 1) * op.WA  # earliestWinL of the slice
                sg[NEXT] = l
                heapq.heappush(self._lheap, (l, g))
        return d

    # -- updateW's expiry ------------------------------------------------------------------------
    def _expire(self, wm: float) -> None:
        heap, groups = self._lheap, self.groups
        op = self.op
        ws_, wa = op.WS, op.WA
        while heap and heap[0][0] + ws_ <= wm:
            l, g = heapq.heappop(heap)  # ρ
            sg = groups[g]
            ss = self._emit_window(sg, l)
            keep = l + wa  # windows after l start here: earlier slices are done
            rest = None
            for s in ss:
                if s < keep:
                    self._drop_slice(sg, s)
                elif rest is None:
                    rest = s
            if rest is None:  # no slice in this window remains: any later one?
                rest = min((s for s in sg if s != NEXT), default=None)
            if rest is None:
                del sg[NEXT]  # σ_g is empty again
                continue
            # the first window after l holding a slice (windows between hold none)
            nxt = max(keep, ((rest - ws_) // wa + 1) * wa)
            sg[NEXT] = nxt
            heapq.heappush(heap, (nxt, g))

    def _emit_window(self, sg: dict, l: int) -> list[int]:
        """forwardAndShift of window ``l``: f_O on each key's accumulator combined from the
        window's slices, into ``out``; returns those slices' starts (sorted). The columnar
        instance emits a table instead (:mod:`.columnar`)."""
        output, out, many = self.op.user_output, self.out, self.op.many_outputs
        right = l + self.op.WS
        accs, ss = self._combined(sg, l)
        # f_O on each key's combined accumulator, called by map (no Python loop around it)
        results = map(output, accs.keys(), accs.values())
        if many:  # f_O gives several payloads (top_k's rows)
            out.extend([(right, r) for res in results if res is not None for r in res])
        else:
            out.extend([(right, res) for res in results if res is not None])
        return ss

    def _drop_slice(self, sg: dict, s: int) -> None:
        """A slice no later window needs (it starts before the next window's left end)."""
        del sg[s]

    def _combined(self, sg: dict, l: int) -> tuple[dict[Hashable, Any], list[int]]:
        """Window ``l``'s accumulator per key, combined from its slices in time order, and
        those slices' starts (sorted). Slices before ``l`` are gone (see :meth:`_expire`), so
        the window's slices are those of its WS / D starts that σ_g holds. The slices' own
        accumulators are left intact: later windows combine them again."""
        ss = [s for s in range(l, l + self.op.WS, self._width) if s in sg]
        if not ss:
            return {}, ss
        if len(ss) == 1:
            return sg[ss[0]], ss
        combine = self.op.combine
        acc = dict(sg[ss[0]])
        get = acc.get
        for s in ss[1:]:
            for k, a in sg[s].items():
                b = get(k, _MISSING)
                acc[k] = a if b is _MISSING else combine(b, a)  # type: ignore[misc]
        return acc, ss

    @property
    def sigma(self) -> dict[int, dict[Hashable, Any]]:
        """σ as Alg. 2 defines it for a single key group, ``{l: {key: accumulator}}`` over the
        open window instances, each combined from its slices: a view computed on demand (the
        state itself is the slices, in ``groups``), e.g. to follow a paper's execution trace."""
        if self.state.G != 1:
            raise AttributeError("sigma is only defined for a single key group; use .groups")
        sg = self.groups[0]
        if not sg:
            return {}
        last = max(s for s in sg if s != NEXT)
        view = {}
        for l in range(sg[NEXT], last + 1, self.op.WA):
            accs, _ = self._combined({s: d for s, d in sg.items() if s == NEXT or s >= l}, l)
            if accs:
                view[l] = dict(accs)
        return view

    def finish(self) -> None:
        self._expire(math.inf)
