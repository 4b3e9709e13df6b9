"""The generalized windowed operator O+ (STRETCH journal §4.2, Table I, Alg. 2).

``O+(WA, WS, I, f_MK, WT, S, f_μ, f_U, f_O, f_S)``:

* f_MK (``keys``) returns the keys of a tuple: one key (a str, bytes, number or tuple), an
  iterable of distinct keys (a set, list ...), or a dict mapping each key to the value f_U
  sees for it (:mod:`.keys` makes one key a set of one when the operator is built). The dict
  form is Corollary 1's Map fused into f_MK: the per-key copy of the tuple that carries one
  extra attribute (e.g. how many times a word occurs in a tweet) without a separate operator.
* For each key the operator keeps one set of I window instances per window (WT ``multi``) or
  one set that slides by WA (WT ``single``). A :class:`WindowSet` is σ[k][ℓ] of the paper.
* f_U (``update(ws, ts, value, i)``) runs on every (key, window) a tuple falls in; it updates
  ``ws.states`` in place (the paper's σ.set) and may return payloads to emit.
* f_O (``output(ws)``) runs when a window instance expires and may return payloads.
* f_S (``slide(ws)``) runs when a ``single`` window set has just advanced by WA (``ws.l`` is
  already the new left boundary) and updates ``ws.states`` in place.

Table I defaults: f_U stores ``(ts, value)`` in the state of the tuple's input; f_O emits
nothing; f_S purges stored tuples older than the new left boundary.

Every output tuple carries the right boundary ``l + WS`` of its window instance. The runtime
(:class:`OPlusInstance`) keeps outputs in timestamp order even when f_U emits into windows
that close later than windows f_O is about to close (see ``_emit_pending``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from ..errors import FlowDefinitionError, RunTupleError, StretchflowError
from ..eventtime import parse_duration
from .keys import key_pairs, one_key_fn2, wrap_keys_method

Payloads = Iterable[Any] | None


class WindowSet:
    """The I window instances ⟨ζ_i, l, k⟩ of one key ``key`` with left boundary ``l``.

    ``states[i]`` is ζ of input ``i``; ``right`` is the exclusive right boundary ``l + WS``.
    """

    __slots__ = ("key", "l", "right", "states")

    def __init__(self, key: Hashable, l: int, right: int, states: list):
        self.key = key
        self.l = l
        self.right = right
        self.states = states

    @property
    def state(self) -> Any:
        """ζ of the first input (convenient when I = 1)."""
        return self.states[0]

    def __repr__(self) -> str:
        return f"WindowSet(key={self.key!r}, l={self.l}, states={self.states!r})"


def default_update(ws: WindowSet, ts: int, value: Any, i: int) -> None:
    """Table I's f_U: store the tuple in the window state of its input; emit nothing."""
    ws.states[i].append((ts, value))


def default_slide(ws: WindowSet) -> None:
    """Table I's f_S: purge stored tuples that fell before the new left boundary."""
    l = ws.l
    for state in ws.states:
        n = 0
        for ts, _ in state:
            if ts >= l:
                break
            n += 1
        if n:
            del state[:n]


class OPlus:
    """Specification of an O+ operator: parameters and the user functions of Table I.

    Subclass and override ``keys``/``update``/``output``/``slide``/``init``, or pass the
    functions to the constructor.

    >>> from stretchflow.operators.oplus import OPlus
    >>> op = OPlus(size=10, slide=5, keys=lambda t, i: {t["k"]},
    ...            init=lambda: 0,
    ...            update=lambda ws, ts, t, i: ws.states.__setitem__(0, ws.states[0] + 1),
    ...            output=lambda ws: [{"k": ws.key, "n": ws.states[0]}])
    >>> inst = op.instance()
    >>> for ts in (1, 2, 7):
    ...     inst.process(ts, {"k": "a"}, 0)
    >>> inst.finish(); [(ts, p["n"]) for ts, p in inst.take()]
    [(5, 2), (10, 3), (15, 1)]
    """

    def __init__(
        self,
        *,
        size: int | str,
        slide: int | str | None = None,
        inputs: int = 1,
        keys: Callable[[Any, int], Any] | None = None,
        window_type: str = "multi",
        schema: Any = None,
        f_mu: Callable[[Hashable, int], int] | None = None,
        init: Callable[[], Any] | None = None,
        update: Callable[[WindowSet, int, Any, int], Payloads] | None = None,
        output: Callable[[WindowSet], Payloads] | None = None,
        slide_fn: Callable[[WindowSet], None] | None = None,
        name: str = "oplus",
    ):
        self.WS = parse_duration(size)
        self.WA = parse_duration(slide) if slide is not None else self.WS
        if self.WA <= 0 or self.WS <= 0:
            raise FlowDefinitionError(f"{name}: window size and slide must be positive")
        if self.WA > self.WS:
            raise FlowDefinitionError(
                f"{name}: slide (WA={self.WA} ms) must not exceed size (WS={self.WS} ms)"
            )
        if window_type not in ("single", "multi"):
            raise FlowDefinitionError(f"{name}: window_type must be 'single' or 'multi'")
        if inputs < 1:
            raise FlowDefinitionError(f"{name}: an O+ needs at least one input")
        self.I = inputs
        self.WT = window_type
        self.S = schema
        self.name = name
        if keys is not None:
            self.keys = one_key_fn2(keys)  # type: ignore[method-assign]
        elif type(self).keys is OPlus.keys:
            raise FlowDefinitionError(f"{name}: an O+ needs f_MK (keys)")
        if f_mu is not None:
            self.f_mu = f_mu
        if init is not None:
            self.init = init
        if update is not None:
            self.update = update
        if output is not None:
            self.output = output
        if slide_fn is not None:
            self.slide = slide_fn

    #: True in a subclass whose own ``keys`` method always returns a set, list, dict or other
    #: iterable of keys (never one bare key): it then skips the one-key check per tuple
    #: (:func:`~.keys.wrap_keys_method`). Applies to the class that sets it only.
    keys_iterable: bool = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        wrap_keys_method(cls)  # a subclass's f_MK means what a ``keys=`` function does

    # -- Table I hooks (overridable) ------------------------------------------------------
    def keys(self, t: Any, i: int) -> Any:  # pragma: no cover - replaced or overridden
        """f_MK: the keys of payload ``t`` from input ``i``: one key (a str, bytes, number or
        tuple), or several (a set, list or other iterable; a dict key -> value f_U sees)."""
        raise NotImplementedError

    def init(self) -> Any:
        """A new window state ζ (default: an empty list of stored tuples)."""
        return []

    update = staticmethod(default_update)
    output: Callable[[WindowSet], Payloads] | None = None  # default: emit nothing
    slide = staticmethod(default_slide)
    #: True if k applications of f_S equal one slide by k·WA (a purge by the new left
    #: boundary, as Table I's default): with the default f_O, a single window set may then jump
    #: to its new position at once instead of stepping WA at a time
    slide_collapses = False

    #: optional f_U over a run of tuples of one key, ``update_many(ws, run) -> [(ts, payload)]``
    #: with ``run`` a :class:`Run`; used by :meth:`OPlusInstance.process_batch` (see there for
    #: the contract). It lets a numpy kernel cover many tuples per call.
    update_many: Callable[[WindowSet, Run], list[tuple[int, Any]] | None] | None = None
    #: runs shorter than this take f_U tuple by tuple: a kernel call's fixed cost (tens of
    #: microseconds of numpy set-up per key) exceeds per-tuple f_U's for a tuple or two, which
    #: is what a live source at a low rate delivers
    min_run: int = 8
    #: runs at least this long take f_MK's columnar form (``Aggregate.columns``), if any (see
    #: :meth:`OPlusInstance.process_run`); None: never, the default, because it did not
    #: measurably pay (issue #16 report): wordcount's O+ alone breaks even at ~100 tweets a
    #: run unsliced, ~1 000 sliced (1.5x at 4 096), but f_O and reading dominate the whole
    #: run, and the first call imports pyarrow (~0.7 s): whole-process on 200 000 tweets,
    #: reference 1.13x slower, vsn 0.95-0.99x of the tuple path's time. 1 024 suits vsn
    columnar_min_run: int | None = None

    @property
    def batchable(self) -> bool:
        """Whether runs of tuples may go through ``update_many``: a single window set whose
        slides emit nothing and collapse (so no slide between the tuples of a run is missed)."""
        return (self.update_many is not None and self.WT == "single" and self.output is None
                and (self.default_slide or self.slide_collapses))

    def f_mu(self, key: Hashable, n: int) -> int:
        """f_μ: the instance (0..n-1) responsible for ``key`` (default: stable hash mod n)."""
        from ..elastic.consistent_hash import stable_hash

        return stable_hash(key) % n

    # -- runtime ----------------------------------------------------------------------------
    @property
    def default_output(self) -> bool:
        return self.output is None

    @property
    def default_slide(self) -> bool:
        return type(self).slide is OPlus.slide and self.__dict__.get("slide") is None

    def instance(self, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None) -> OPlusInstance:
        """A runtime instance o+_j over σ (a new single-group σ if None), owning the key groups
        ``g`` with ``assign[g] == j`` (all if None)."""
        return OPlusInstance(self, sigma, j, assign)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, WA={self.WA}, WS={self.WS}, I={self.I})"


class Run:
    """A run of tuples handed to ``update_many``: parallel lists of timestamps, f_U values and
    input indices in processing order, and a ``cache`` the operator may fill with columns
    derived from them. Keys that see the very same tuples share one Run (and its cache); a Run
    belongs to one instance, hence to one thread."""

    __slots__ = ("ts", "values", "inputs", "cache")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.values: list[Any] = []
        self.inputs: list[int] = []
        self.cache: dict[str, Any] = {}


class SharedState:
    """σ, the state of one O+ shared by all its instances, partitioned into G key groups.

    Group ``g`` holds ``{l: {key: window set}}`` for the keys with ``hash(key) % G == g``. A
    VSN f_μ assigns groups to instances (the conference paper's buckets), so each key is
    touched by one instance at a time and a reconfiguration hands groups over without copying
    any state. Python's ``hash`` is salted per process but fixed within one, which is all
    threads sharing σ need. The reference executor uses a single group.
    """

    __slots__ = ("G", "groups")

    def __init__(self, n_groups: int = 1):
        if n_groups < 1:
            raise ValueError("a shared state needs at least one key group")
        self.G = n_groups
        self.groups: list[dict[int, dict[Hashable, Any]]] = [{} for _ in range(n_groups)]

    def group_of(self, key: Hashable) -> int:
        return hash(key) % self.G


class OPlusInstance:
    """One instance o+_j running Alg. 2 (processSN), or Alg. 4's processing steps, over σ.

    σ is a :class:`SharedState`; the instance owns the key groups ``g`` with
    ``assign[g] == j`` (all of them when ``assign`` is None, the sequential case). Each group
    keeps ``{l: {key: WindowSet}}`` and the instance keeps a heap of the ``(l, g)`` pairs of its
    groups, so the expiry loop of Alg. 2 (L27–L29: "while ρ+WS <= W, forwardAndShift every key
    whose first window starts at ρ; ρ += WA") visits only boundaries that hold window instances
    instead of stepping ρ through empty ones. ρ is the heap's minimum.

    Expiry uses ``l + WS <= W`` (DESIGN: "a window instance expires once the watermark reaches
    its right boundary"); Alg. 2 writes ``<``, but with an exclusive right boundary and integer
    time no tuple with ts >= W can fall in such an instance, and only ``<=`` keeps a ``single``
    window set at ``earliestWinL(t)`` when t arrives, as check&Create assumes.
    """

    #: how tuples reach σ, for a run summary: ``"tuple"`` (one at a time, Alg. 2), ``"runs"``
    #: (some run went through ``update_many``); subclasses add ``"columnar"`` and ``"sliced"``
    path: str = "tuple"

    def __init__(self, op: OPlus, sigma: SharedState | None = None, j: int = 0,
                 assign: list[int] | None = None):
        self.op = op
        self.state = sigma if sigma is not None else SharedState(1)
        self.groups = self.state.groups
        self.j = j
        self.W = -math.inf  # watermark; "initially 0" in Alg. 2, -inf admits any first ts
        self._lheap: list[tuple[int, int]] = []  # (l, g) of the window sets of owned groups
        self._pending: list[tuple[int, int, Any]] = []  # f_U outputs that close later
        self._seq = 0
        self._last_l = -math.inf  # latest window left boundary any tuple fell in
        self.out: list[tuple[int, Any]] = []
        self.assign: list[int] | None = None
        self.group_hits: list[int] | None = None  # sampled tuples per owned group, if measured
        self._tick = 0
        self._owns_all = False
        self.set_assignment(assign)

    @property
    def sigma(self) -> dict[int, dict[Hashable, Any]]:
        """σ of a single-group state (the sequential case): ``{l: {key: window set}}``."""
        if self.state.G != 1:
            raise AttributeError("sigma is only defined for a single key group; use .groups")
        return self.groups[0]

    def set_assignment(self, assign: list[int] | None) -> None:
        """Takes the key groups ``g`` with ``assign[g] == j`` (f_μ after a barrier, Alg. 4):
        the instance's expiry index is rebuilt from what those groups hold; no state moves."""
        if assign is None and self.state.G != 1:
            raise ValueError("several key groups need an assignment of groups to instances")
        self.assign = assign
        j = self.j
        self._owns_all = assign is not None and all(a == j for a in assign)
        self._lheap = [(l, g) for g, sg in enumerate(self.groups)
                       if assign is None or assign[g] == j for l in sg]
        heapq.heapify(self._lheap)

    def _route(self, ks: Any, value: Any) -> list[tuple[Any, Any, int, dict]]:
        """``(key, value, g, σ_g)`` for the tuple's keys this instance owns (f_μ by group)."""
        pairs = key_pairs(ks, value)
        assign = self.assign
        if assign is None:
            sg = self.groups[0]
            return [(k, v, 0, sg) for k, v in pairs]
        G, groups = self.state.G, self.groups
        if G == 1:
            sg = groups[0]
            out = [(k, v, 0, sg) for k, v in pairs] if self._owns_all else []
        elif self._owns_all:
            out = [(k, v, g, groups[g]) for k, v in pairs for g in (hash(k) % G,)]
        else:
            j = self.j
            out = [(k, v, g, groups[g]) for k, v in pairs for g in (hash(k) % G,)
                   if assign[g] == j]
        hits = self.group_hits
        if hits is not None and out:
            # the load of each key group, for a balancing f_μ; one tuple in 8 is a fair
            # sample and keeps the count off the per-tuple path
            self._tick += 1
            if not self._tick & 7:
                for e in out:
                    hits[e[2]] += 1
        return out

    # -- Alg. 2 -------------------------------------------------------------------------------
    def process(self, ts: int, value: Any, i: int = 0) -> None:
        """processSN(t): updateW, expire and forward, then handleInputTuple."""
        if ts > self.W:
            self._update_w(ts)
        self._handle(ts, value, i)

    def _update_w(self, ts: int) -> None:
        """updateW (Alg. 2 L25–L29) for a tuple with ts > W: expire what it closes."""
        self.W = ts
        latest = ts - ts % self.op.WA  # latestWinL, tracked for every tuple (see finish)
        if latest > self._last_l:
            self._last_l = latest
        if self._lheap and self._lheap[0][0] + self.op.WS <= ts:
            self._expire(ts)
        elif self._pending and self._pending[0][0] <= ts:
            self._emit_pending(ts)

    @property
    def takes_runs(self) -> bool:
        """Whether :meth:`process_run` has a path faster than tuple at a time here; executors
        gather runs only then, so the general path pays nothing for them."""
        return self.op.batchable or self._columnar

    @property
    def _columnar(self) -> bool:
        # an A+ with a columnar f_MK whose instance sums per (window, key) (WT multi)
        return (self.op.columnar_min_run is not None and hasattr(self, "process_keyed")
                and getattr(self.op, "columns", None) is not None)

    def process_run(self, items: list[tuple[int, Any, int]]) -> None:
        """process(ts, value, i) for each item of a run of data tuples, by the fastest path
        giving the same σ and outputs: ``update_many`` (:meth:`process_batch`) if batchable,
        f_MK's columnar form (:meth:`_process_columnar`) for an A+ that has one, else (and
        for runs too short to pay a kernel's set-up) tuple at a time.

        A run lies between two watermarks or control tuples, timestamps non-decreasing;
        callers cut runs there and never reorder (issue #16). Afterwards W is the run's last
        timestamp and ``out`` holds the outputs in timestamp order, as after its last tuple.
        A failure is a :class:`~stretchflow.errors.RunTupleError` naming its tuple
        (``update_many``'s own, else the run's first: all a kernel over the run can say),
        which ``runtime.user_error`` reports as tuple at a time; stretchflow's errors pass."""
        n = len(items)
        if not n:
            return
        op = self.op
        if n >= op.min_run and op.batchable:
            try:
                self.process_batch(items)
            except (RunTupleError, StretchflowError):
                raise
            except Exception as e:
                raise RunTupleError(items[0][0], items[0][1], e) from e
            return
        cmin = op.columnar_min_run
        if cmin is not None and n >= cmin and items[0][0] >= self.W and self._columnar \
                and self._process_columnar(items):
            return
        process = self.process
        ts = v = None
        try:
            for ts, v, i in items:
                process(ts, v, i)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(ts, v, e) from e

    def process_rows(self, ts: Sequence[int], payloads: Sequence[Any], i: int = 0) -> None:
        """process(ts[r], payloads[r], i) for every r: a batch of rows from input ``i``
        (issue #32's batch-at-a-time path), timestamps non-decreasing and not below the
        watermark, no watermark or control tuple among them. Same σ and outputs as tuple at
        a time; a failure is a :class:`~stretchflow.errors.RunTupleError` naming its tuple.
        Here as a run (:meth:`process_run`); the A+ instances override it with one tight
        loop over the rows, the user's functions called with no engine step between them
        that could be done once per batch."""
        self.process_run(list(zip(ts, payloads, itertools.repeat(i))))

    def _process_columnar(self, items: list[tuple[int, Any, int]]) -> bool:
        """The run through f_MK's columnar form and ``process_keyed`` (the kernels the Spark
        engine uses: values summed per (window, key) by Arrow, f_U once per sum); False,
        having changed nothing, when ``columns`` refuses a payload, so the tuple-at-a-time
        path names the tuple. ``process_keyed`` is a method of the A+'s instance."""
        import numpy as np

        payloads = [v for _, v, _ in items]
        try:
            rows, keys, values = self.op.columns(payloads)  # type: ignore[attr-defined]
        except Exception:
            return False
        ts = np.fromiter([t for t, _, _ in items], dtype=np.int64, count=len(items))
        try:
            self.process_keyed(  # type: ignore[attr-defined]
                ts[np.asarray(rows, dtype=np.int64)], keys, values,
                first=int(ts[0]), last=int(ts[-1]))
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:
            raise RunTupleError(items[0][0], items[0][1], e) from e
        return True

    def process_batch(self, items: list[tuple[int, Any, int]]) -> None:
        """process(ts, value, i) for a run of data tuples (timestamps non-decreasing), through
        the operator's ``update_many`` when it is :attr:`OPlus.batchable`.

        The watermark moves to the run's first timestamp, each key's tuples of the run go to
        ``update_many`` in one call, then the watermark moves to the run's last timestamp.
        Between the tuples of a run the window set therefore does not slide: ``update_many``
        must give the outputs and final state that f_U on each tuple would, with f_S applied
        before it (for a purging f_S, its own per-tuple horizon). Outputs carry the closing time
        of the window the producing tuple fell in. Only WT ``single`` with Table I's f_O
        qualifies, where a slide emits nothing and k slides equal one."""
        op = self.op
        if not op.batchable or len(items) < op.min_run:
            for ts, v, i in items:
                self.process(ts, v, i)
            return
        ts0 = items[0][0]
        if ts0 > self.W:
            self._update_w(ts0)
        self.path = "runs"
        runs = self._runs(items)
        wa, ws_ = op.WA, op.WS
        l1 = ((ts0 - ws_) // wa + 1) * wa  # every window set sits at earliestWinL(ts0) now
        update_many = op.update_many
        for k, g, sg, run in runs:
            out = update_many(self._check_create(k, g, sg, l1), run)
            if out:
                for ts, p in out:
                    self._emit_later(((ts - ws_) // wa + 1) * wa + ws_, (p,))
        last = items[-1][0]
        if last > self.W:
            self._update_w(last)

    def _check_create(self, k: Hashable, g: int, sg: dict, l: int) -> WindowSet:
        """σ.check&Create(k, l) in group g (inlined in _handle, the per-tuple hot path)."""
        d = sg.get(l)
        if d is None:
            d = sg[l] = {}
            heapq.heappush(self._lheap, (l, g))
        w = d.get(k)
        if w is None:
            op = self.op
            w = d[k] = WindowSet(k, l, l + op.WS, [op.init() for _ in range(op.I)])
        return w

    def _runs(self, items: list[tuple[int, Any, int]]) -> list[tuple[Any, int, dict, Run]]:
        """``(key, g, σ_g, Run)`` per owned key of the run's tuples. Tuples whose f_MK returns
        the same (non-dict) object route identically, so while every tuple does, all keys
        share one Run: f_MK's routing is done once, not once per tuple."""
        op = self.op
        keys_of = op.keys
        first = items[0]
        ks0 = keys_of(first[1], first[2])
        if ks0 and not isinstance(ks0, dict):
            shared = Run()
            for ts, v, i in items:
                if keys_of(v, i) is not ks0:
                    break
                shared.ts.append(ts)
                shared.values.append(v)
                shared.inputs.append(i)
            else:
                routed = self._route(ks0, first[1])
                return [(k, g, sg, shared) for k, _, g, sg in routed]
        per_key: dict[Any, tuple[Any, int, dict, Run]] = {}
        for ts, v, i in items:
            ks = keys_of(v, i)
            if not ks:
                continue
            for k, val, g, sg in self._route(ks, v):
                e = per_key.get(k)
                if e is None:
                    e = per_key[k] = (k, g, sg, Run())
                run = e[3]
                run.ts.append(ts)
                run.values.append(val)
                run.inputs.append(i)
        return list(per_key.values())

    def advance(self, w: int) -> None:
        """An explicit watermark: expire what it closes, release outputs up to it."""
        if w > self.W:
            self.W = w
            self._expire(w)

    def finish(self) -> None:
        """End of input: every open window instance expires (DESIGN, Semantics)."""
        self._expire(math.inf)

    def saw_time(self, ts: float) -> None:
        """Records that the operator as a whole has seen a tuple at ``ts``, also when this
        instance did not: at the end of input a single window set keeps sliding up to the
        latest window any tuple fell in, whichever instance or channel read that tuple."""
        if ts == -math.inf:
            return  # nothing seen yet
        latest = ts - ts % self.op.WA
        if latest > self._last_l:
            self._last_l = latest

    def flush_pending(self) -> None:
        """Releases every held f_U output (an instance leaving the operator, Alg. 4)."""
        self._emit_pending(math.inf)

    def take(self) -> list[tuple[int, Any]]:
        """Outputs produced so far, in timestamp order; clears the buffer."""
        out, self.out = self.out, []
        return out

    # -- handleInputTuple (Alg. 2 L14–L23) -----------------------------------------------------
    def _handle(self, ts: int, value: Any, i: int) -> None:
        op = self.op
        ks = op.keys(value, i)
        if not ks:
            return
        routed = self._route(ks, value)
        if not routed:
            return
        wa, ws_ = op.WA, op.WS
        l1 = ((ts - ws_) // wa + 1) * wa  # earliestWinL
        l2 = l1 if op.WT == "single" else ts - ts % wa  # latestWinL
        update, init, n_in = op.update, op.init, op.I
        for l in range(l1, l2 + 1, wa):
            right = l + ws_
            for k, v, g, sg in routed:
                d = sg.get(l)
                if d is None:
                    d = sg[l] = {}
                    heapq.heappush(self._lheap, (l, g))
                w = d.get(k)
                if w is None:  # σ.check&Create(k, l)
                    w = d[k] = WindowSet(k, l, right, [init() for _ in range(n_in)])
                out = update(w, ts, v, i)
                if out:
                    self._emit_later(right, out)

    # -- expiry: Alg. 2 L27–L29 and forwardAndShift (L5–L12) ----------------------------------
    def _expire(self, wm: float) -> None:
        op = self.op
        heap, groups, ws_, wa = self._lheap, self.groups, op.WS, op.WA
        single = op.WT == "single"
        f_o = op.output
        # With Table I's f_O and f_S, k slides of a single window set equal one slide of k·WA:
        # nothing is emitted and the purge is monotone, so jump straight to the new position.
        collapse = single and f_o is None and (op.default_slide or op.slide_collapses)
        out = self.out
        while heap and heap[0][0] + ws_ <= wm:
            l, g = heapq.heappop(heap)  # ρ, the earliest left boundary in σ
            d = groups[g].pop(l)
            right = l + ws_
            if self._pending and self._pending[0][0] <= right:
                self._emit_pending(right)
            if f_o is not None:
                for w in d.values():
                    res = f_o(w)
                    if res:
                        for p in res:
                            out.append((right, p))
            if not single:
                continue  # WT = multi: σ.remove(k, 1)
            if wm == math.inf:
                if collapse or l + wa > self._last_l:
                    continue  # no tuple can fall in later positions: discard
                new_l = l + wa
            elif collapse:
                new_l = l + wa * ((wm - ws_ - l) // wa + 1)
            else:
                new_l = l + wa
            self._shift(d, g, new_l)
        if self._pending and self._pending[0][0] <= wm:
            self._emit_pending(wm)

    def _shift(self, d: dict, g: int, new_l: int) -> None:
        """σ.shift / σ.remove for the window sets of ``d`` moving to ``new_l`` (L7–L10)."""
        op = self.op
        slide, right = op.slide, new_l + op.WS
        target = None
        for k, w in d.items():
            w.l = new_l
            w.right = right
            slide(w)
            for state in w.states:
                if state:
                    break
            else:
                continue  # every ζ empty: σ.remove(k, 1)
            if target is None:
                sg = self.groups[g]
                target = sg.get(new_l)
                if target is None:
                    target = sg[new_l] = {}
                    heapq.heappush(self._lheap, (new_l, g))
            target[k] = w

    # -- output ordering ---------------------------------------------------------------------
    def _emit_later(self, ts: int, payloads: Iterable[Any]) -> None:
        """f_U outputs close at ``ts`` > W; hold them until the watermark reaches ``ts`` so
        the instance's output stays timestamp-sorted (Lemma 2) when f_O later emits for
        windows that close earlier."""
        for p in payloads:
            self._seq += 1
            heapq.heappush(self._pending, (ts, self._seq, p))

    def _emit_pending(self, upto: float) -> None:
        pending, out = self._pending, self.out
        if len(pending) > 16 and pending[-1][0] <= upto and max(pending)[0] <= upto:
            # all of them (a tumbling window's matches, as a join makes): one sort, in
            # the heap's pop order ((ts, seq), seq unique), not a sift-down per output. The
            # last leaf first: when some are held for later windows it usually is one, and
            # the scan of all is skipped
            pending.sort()
            out.extend([(ts, p) for ts, _, p in pending])
            pending.clear()
            return
        while pending and pending[0][0] <= upto:
            ts, _, p = heapq.heappop(pending)
            out.append((ts, p))
