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

import numpy as np

from ..errors import RunTupleError
from ..operators.oplus import OPlus, Run, WindowSet
from .band_kernel import band_pairs, warm_up


class Columns:
    """The stored tuples of one input in one key, as numpy columns that grow by doubling: ts
    (int64), the two band attributes (float64: exact for integers below 2**53, and for
    floats) and the ids (objects: any value); purging advances a head index."""

    __slots__ = ("ts", "uv", "ids", "head", "tail")

    def __init__(self, capacity: int = 16):
        self.ts = np.zeros(capacity, dtype=np.int64)
        self.uv = np.zeros((2, capacity), dtype=np.float64)
        self.ids = np.empty(capacity, dtype=object)
        self.head = 0
        self.tail = 0

    def __len__(self) -> int:
        return self.tail - self.head

    def _reserve(self, n: int) -> int:
        """Room for n more tuples (moving the live ones to the front of new arrays of twice
        their size when full); returns the tail."""
        t = self.tail
        if t + n > len(self.ts):
            h = self.head
            live = t - h
            cap = max(16, 2 * (live + n))
            ts_, uv, ids = (np.zeros(cap, dtype=np.int64), np.zeros((2, cap)),
                            np.empty(cap, dtype=object))
            ts_[:live] = self.ts[h:t]
            uv[:, :live] = self.uv[:, h:t]
            ids[:live] = self.ids[h:t]
            self.ts, self.uv, self.ids, self.head, self.tail = ts_, uv, ids, 0, live
            t = live
        return t

    def append(self, ts: int, u: float, v: float, ident: Any) -> None:
        t = self._reserve(1)
        self.ts[t] = ts
        self.uv[0, t] = u
        self.uv[1, t] = v
        self.ids[t] = ident
        self.tail = t + 1

    def extend(self, ts: np.ndarray, u: np.ndarray, v: np.ndarray, ids: np.ndarray) -> None:
        """Appends many tuples at once (a run's stored tuples): one copy per column instead of
        four item assignments per tuple."""
        n = len(ts)
        if not n:
            return
        t = self._reserve(n)
        self.ts[t:t + n] = ts
        self.uv[0, t:t + n] = u
        self.uv[1, t:t + n] = v
        self.ids[t:t + n] = ids
        self.tail = t + n

    def purge(self, horizon: int) -> None:
        """Drops the tuples with ts < horizon (they are stored in ts order)."""
        h, t = self.head, self.tail
        if h < t and self.ts[h] < horizon:
            self.head = h + int(np.searchsorted(self.ts[h:t], horizon))

    def band_match(self, u: float, v: float, band: float) -> list:
        """Ids of the stored tuples within ``band`` of (u, v) in both attributes: one
        vectorized comparison over the key's share of the window (numpy releases the GIL)."""
        h, t = self.head, self.tail
        if h == t:
            return []
        uv = self.uv
        hit = np.abs(uv[0, h:t] - u) <= band
        hit &= np.abs(uv[1, h:t] - v) <= band
        return self.ids[h:t][hit].tolist() if hit.any() else []


def run_columns(ts: list[int], values: list[Any], inputs: list[int]) -> tuple[np.ndarray, ...]:
    """(ts, input, u, v, id) columns of a run of ScaleJoin tuples: u, v are (x, y) for left
    tuples and (a, b) for right ones."""
    n = len(ts)
    pairs = list(zip(values, inputs, strict=True))
    try:  # comprehensions, not a loop of numpy item assignments: this runs under the GIL
        u = np.array([val["x"] if i == 0 else val["a"] for val, i in pairs], dtype=np.float64)
        v = np.array([val["y"] if i == 0 else val["b"] for val, i in pairs], dtype=np.float64)
        ids = np.fromiter([val["id"] for val in values], dtype=object, count=n)
        if u.shape != (n,) or v.shape != (n,):
            raise ValueError("band attributes must be numbers")
    except Exception:
        _raise_for_first_bad(ts, values, inputs)
        raise
    return np.asarray(ts, dtype=np.int64), np.asarray(inputs, dtype=np.int8), u, v, ids


def _raise_for_first_bad(ts: list[int], values: list[Any], inputs: list[int]) -> None:
    """The failing tuple, not the run, is what the user must see."""
    for t, val, i in zip(ts, values, inputs, strict=True):
        try:
            u, v = (val["x"], val["y"]) if i == 0 else (val["a"], val["b"])
            float(u), float(v)
            val["id"]  # noqa: B018 - the lookup is the check
        except Exception as e:
            raise RunTupleError(t, val, e) from e


def join_run(stores: tuple[Columns, Columns], cols: tuple[np.ndarray, ...], keep: np.ndarray,
             band: float, window: int) -> list[tuple[int, dict]]:
    """Op. 10's f_U (L21–L27) for a run of tuples of both inputs, vectorized: tuple k is
    compared with the opposite input's stored tuples with ts >= ts_k − window — those stored
    before the run, then the run's own earlier tuples of the opposite input that ``keep``
    marks for storage — and the tuples ``keep`` marks are appended to their input's store.
    Returns ``[(ts_k, {"left", "right"}), ...]``. The same outputs and stores as the
    tuple-at-a-time f_U in the same order of tuples."""
    ts, inp, u, v, ids = cols
    out: list[tuple[int, dict]] = []
    for i in (0, 1):
        q = np.flatnonzero(inp == i)
        if not len(q):
            continue
        qts, qu, qv = ts[q], u[q], v[q]
        opp = stores[1 - i]
        opp.purge(int(qts[0]) - window)  # Op. 10 L21–L22, for the run's earliest horizon
        h, t = opp.head, opp.tail
        # before the run: the stored tuples with ts >= ts_k − window
        lo = np.searchsorted(opp.ts[h:t], qts - window)
        rows, c1 = band_pairs(opp.uv[0, h:t], opp.uv[1, h:t], lo, np.full(len(q), t - h),
                              qu, qv, band)
        matched = opp.ids[h:t][c1]
        cand = np.flatnonzero((inp != i) & keep)  # the run's own stored opposite tuples,
        if len(cand):  # those before tuple k and with ts >= ts_k − window
            lo = np.searchsorted(ts[cand], qts - window)
            hi = np.searchsorted(cand, q)
            r2, c2 = band_pairs(u[cand], v[cand], lo, hi, qu, qv, band)
            if len(r2):
                rows = np.concatenate((rows, r2))
                matched = np.concatenate((matched, ids[cand[c2]]))
        if len(rows):
            pts, pids = qts[rows].tolist(), ids[q[rows]].tolist()
            if i == 0:
                out += [(t_, {"left": a, "right": b})
                        for t_, a, b in zip(pts, pids, matched.tolist(), strict=True)]
            else:
                out += [(t_, {"left": b, "right": a})
                        for t_, a, b in zip(pts, pids, matched.tolist(), strict=True)]
    for i in (0, 1):  # L26–L27, in ts order per input as the tuple-at-a-time f_U stores
        sel = np.flatnonzero(keep & (inp == i))
        stores[i].extend(ts[sel], u[sel], v[sel], ids[sel])
    return out


class ScaleJoinState:
    """ζ of a ScaleJoin window instance: the tuple counter ``c`` and the stored tuples of its
    input. Never empty: ``c`` carries the round-robin position for the whole stream, so the
    window set is shifted, never removed and recreated at 0."""

    __slots__ = ("c", "stored")

    def __init__(self) -> None:
        self.c = 0
        self.stored = Columns()

    def __bool__(self) -> bool:
        return True


class ScaleJoin(OPlus):
    """Band join: left ``{ts,id,x,y}`` with right ``{ts,id,a,b,...}`` where |x−a| <= band,
    |y−b| <= band and |tsL−tsR| <= window; outputs ``{left: idL, right: idR}``.

    ``n_keys`` is the number of storage keys (Op. 10: 1000). Any number gives the same output;
    it sets how finely the window is spread over keys, hence over instances, and how many
    comparisons one vectorized call makes (window / n_keys)."""

    slide_collapses = True  # f_S purges by the new left boundary

    def __init__(self, window: int | str = 300_000, band: int = 10, n_keys: int = 1000,
                 name: str = "scalejoin"):
        from ..eventtime import DELTA, parse_duration

        self.window = parse_duration(window)
        super().__init__(size=self.window + DELTA, slide=DELTA, inputs=2, window_type="single",
                         name=name)
        if n_keys < 1:
            raise ValueError(f"scalejoin: n_keys must be >= 1, got {n_keys}")
        self.band = band
        self.n_keys = n_keys
        self._keys = frozenset(range(n_keys))
        warm_up()  # numba's import and the kernel's load happen here, not in a running flow

    keys_iterable = True  # keys returns a frozenset: skip the one-key check per tuple

    def keys(self, t: Any, i: int) -> frozenset:
        return self._keys

    def init(self) -> ScaleJoinState:
        return ScaleJoinState()

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list | None:  # type: ignore[override]
        this, opp = ws.states[i], ws.states[1 - i]
        this.c += 1
        opp.c += 1
        store = opp.stored
        store.purge(ts - self.window)  # Op. 10 L21–L22
        out = None
        if store.tail > store.head:  # match (L23–L24)
            if i == 0:
                ids = store.band_match(value["x"], value["y"], self.band)
                if ids:
                    me = value["id"]
                    out = [{"left": me, "right": r} for r in ids]
            else:
                ids = store.band_match(value["a"], value["b"], self.band)
                if ids:
                    me = value["id"]
                    out = [{"left": r, "right": me} for r in ids]
        if this.c % self.n_keys == ws.key:  # store t in exactly one key (L26–L27)
            if i == 0:
                this.stored.append(ts, value["x"], value["y"], value["id"])
            else:
                this.stored.append(ts, value["a"], value["b"], value["id"])
        return out

    def update_many(self, ws: WindowSet, run: Run) -> list[tuple[int, dict]]:  # type: ignore[override]
        """f_U for a run of tuples (OPlusInstance.process_batch): every key of the instance
        sees the same run, so the columns are built once per run (``run.cache``)."""
        cols = run.cache.get("scalejoin")
        if cols is None:
            cols = run.cache["scalejoin"] = run_columns(run.ts, run.values, run.inputs)
        st0, st1 = ws.states
        c0 = st0.c
        n = len(run.ts)
        st0.c += n
        st1.c += n
        keep = np.zeros(n, dtype=bool)  # tuple k is stored here iff (c0 + k + 1) % n_keys == key
        keep[(ws.key - c0 - 1) % self.n_keys::self.n_keys] = True
        return join_run((st0.stored, st1.stored), cols, keep, self.band, self.window)

    def slide(self, ws: WindowSet) -> None:  # type: ignore[override]
        """f_S: purge the tuples that fell before the new left boundary."""
        for st in ws.states:
            st.stored.purge(ws.l)

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

    keys_iterable = True  # keys returns a set: skip the one-key check per tuple

    def keys(self, t: Any, i: int) -> set:
        return {t["ts"] % self.n_keys}

    def update(self, ws: WindowSet, ts: int, value: Any, i: int) -> list:  # type: ignore[override]
        return [value]  # {∅, ∅, t.φ}: the states stay empty, so the window set is removed

    def f_mu(self, key: Any, n: int) -> int:
        return key % n


__all__ = ["Columns", "Forward", "ScaleJoin", "ScaleJoinState", "join_run", "run_columns"]
