"""Stream slicing for combinable aggregates (issue #16; Scotty, Traub et al., EDBT 2019):
a sliced A+ gives exactly the unsliced A+'s window instances and outputs, whichever way tuples
reach it (process, advance, process_keyed, finish), over shared σ with changing key-group
assignments, through the engines, and across Spark's state save/restore."""

from __future__ import annotations

import functools
import math
import operator
import pickle
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset, schedules
from stretchflow.operators.aggregate import (
    Aggregate,
    AggregateInstance,
    count,
    max_of,
    mean_of,
    min_of,
    sum_of,
)
from stretchflow.operators.oplus import OPlusInstance, SharedState
from stretchflow.operators.slicing import NEXT, SlicedAggregateInstance
from stretchflow.queries.longest_hashtag import longest_hashtag
from stretchflow.queries.wordcount import paircount, wordcount

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def windows(draw):
    """(WS, WA) with WA <= WS: WS a multiple of WA, or not (gcd slices), or equal."""
    wa = draw(st.integers(1, 7))
    ws = draw(st.one_of(st.integers(1, 5).map(lambda m: m * wa), st.integers(wa, 25)))
    return ws, wa


@st.composite
def streams(draw, max_size=40):
    """Records with non-decreasing ts (ties, small steps and gaps longer than a window) and
    keys from a small alphabet, as ``(ts, record)``."""
    ts = draw(st.integers(-30, 30))
    items = []
    for _ in range(draw(st.integers(0, max_size))):
        ts += draw(st.one_of(st.just(0), st.integers(1, 4), st.integers(20, 80)))
        ks = draw(st.lists(st.sampled_from("abcde"), max_size=3))
        items.append((ts, {"ts": ts, "ks": ks, "v": draw(st.integers(-5, 9))}))
    return items


# the aggregates: (init, update, combine) over a record's value v; concat does not commute
AGGS = {
    "sum": (int, lambda a, t: a + t["v"], operator.add),
    "max": (lambda: -math.inf, lambda a, t: max(a, t["v"]), max),
    "concat": (tuple, lambda a, t: a + (t["v"],), operator.add),
}


def make(ws, wa, agg, sliced, window_type="multi"):
    init, update, combine = AGGS[agg]
    return Aggregate(size=ws, slide=wa, keys=lambda t: t["ks"], init=init, update=update,
                     output=lambda k, acc: {"k": k, "acc": acc}, window_type=window_type,
                     combine=combine if sliced else None)


def feed(inst, items, marks=()):
    """process every tuple (explicit watermarks ``marks`` before some), then finish; the
    outputs, checked to come in timestamp order."""
    got = []
    marks = dict(marks)
    for n, (ts, p) in enumerate(items):
        if n in marks:
            inst.advance(min(ts, marks[n]))
            got += inst.take()
        inst.process(ts, p)
        got += inst.take()
    inst.finish()
    got += inst.take()
    assert [t for t, _ in got] == sorted(t for t, _ in got)
    return got


def brute(items, ws, wa, agg):
    """Every window instance [l, l+WS) with a tuple of key k, its fold."""
    init, update, _ = AGGS[agg]
    out = []
    lefts = {l for ts, _ in items for l in range(ts - ws + 1, ts + 1) if l % wa == 0}
    for l in lefts:
        inside = [p for ts, p in items if l <= ts < l + ws]
        for k in {k for p in inside for k in p["ks"]}:
            acc = init()
            for p in inside:
                if k in p["ks"]:
                    acc = update(acc, p)
            out.append((l + ws, {"k": k, "acc": acc}))
    return out


@SETTINGS
@given(windows(), streams(), st.sampled_from(sorted(AGGS)),
       st.lists(st.tuples(st.integers(0, 40), st.integers(-40, 200)), max_size=4))
def test_sliced_equals_unsliced_and_brute_force(win, items, agg, marks):
    ws, wa = win
    sliced = make(ws, wa, agg, True)
    assert sliced.sliced == (wa < ws)
    inst = sliced.instance()
    if wa < ws:
        assert isinstance(inst, SlicedAggregateInstance) and inst.path == "sliced"
    got = feed(inst, items, marks)
    want = feed(make(ws, wa, agg, False).instance(), items, marks)
    assert multiset(got) == multiset(want) == multiset(brute(items, ws, wa, agg))


@SETTINGS
@given(windows(), streams(max_size=25), st.sampled_from(sorted(AGGS)))
def test_sigma_view_follows_the_unsliced_state(win, items, agg):
    """After every tuple, the window instances the sliced state stands for are exactly the
    unsliced σ (same windows, same keys, same accumulators), and the state is only slices of
    width gcd(WS, WA), each held until its last window expires."""
    ws, wa = win
    a, b = make(ws, wa, agg, True).instance(), make(ws, wa, agg, False).instance()
    width = math.gcd(ws, wa)
    for ts, p in items:
        a.process(ts, p)
        b.process(ts, p)
        assert a.sigma == b.sigma
        if isinstance(a, SlicedAggregateInstance):
            slices = [s for s in a.groups[0] if s != NEXT]
            # a slice stays exactly while its latest window is open
            assert all(s % width == 0 and (s - s % wa) + ws > a.W for s in slices)
            assert len(a._lheap) == (1 if slices else 0)


@SETTINGS
@given(windows(), streams(), st.integers(1, 6), st.integers(1, 3),
       st.lists(st.tuples(st.integers(0, 40), st.integers(1, 3)), max_size=4))
def test_shared_sigma_with_reassigned_groups(win, items, n_groups, n_inst, moves):
    """Instances sharing σ (VSN, Alg. 4) over G key groups; at some tuples f_μ changes (every
    instance takes its new groups, as after a barrier): together they emit what one unsliced
    instance emits, and each indexes only the groups it owns."""
    ws, wa = win
    op = make(ws, wa, "concat", True)
    sigma = SharedState(n_groups)
    assign = [g % n_inst for g in range(n_groups)]
    insts = [op.instance(sigma, j, list(assign)) for j in range(n_inst)]
    moves = dict(moves)
    got = []
    for n, (ts, p) in enumerate(items):
        if n in moves:
            assign = [(g * moves[n] + n) % n_inst for g in range(n_groups)]
            for inst in insts:
                inst.set_assignment(list(assign))
        for inst in insts:
            inst.process(ts, p)
            got += inst.take()
    for inst in insts:
        assert all(assign[g] == inst.j for _, g in inst._lheap)
        inst.finish()
        got += inst.take()
    want = feed(make(ws, wa, "concat", False).instance(), items)
    assert multiset(got) == multiset(want)


def _explode(items):
    ts, keys, values = [], [], []
    for t, p in items:
        for k in p["ks"]:
            ts.append(t), keys.append(k), values.append(p["v"])
    return ts, keys, values


@SETTINGS
@given(windows(), streams(), st.lists(st.integers(1, 9), min_size=1, max_size=5),
       st.integers(1, 4), st.integers(1, 2))
def test_process_keyed_feeds_slices(win, items, cuts, n_groups, n_inst):
    """Runs through process_keyed (the columnar path Spark and local columnar runs use),
    over shared key groups: the unsliced per-tuple outputs."""
    ws, wa = win
    items = [(t, dict(p, ks=sorted(set(p["ks"])))) for t, p in items]  # a set of keys
    def adder(combine):  # f_MK gives each key the value that f_U adds
        return Aggregate(size=ws, slide=wa, keys=lambda t: dict.fromkeys(t["ks"], t["v"]),
                         init=int, update=operator.add, combine=combine,
                         output=lambda k, acc: {"k": k, "acc": acc})

    op = adder(operator.add)
    sigma = SharedState(n_groups)
    assign = [g % n_inst for g in range(n_groups)] if n_groups > 1 or n_inst > 1 else None
    insts = [op.instance(sigma, j, assign) for j in range(n_inst)]
    got, a, c = [], 0, 0
    while a < len(items):
        run = items[a:a + cuts[c % len(cuts)]]
        a, c = a + len(run), c + 1
        ts, keys, values = _explode(run)
        for inst in insts:
            inst.process_keyed(ts, pa.array(keys, pa.string()), values, first=run[0][0],
                               last=run[-1][0])
            got += inst.take()
    for inst in insts:
        assert inst.path == ("sliced" if op.sliced else "columnar" if items else "tuple")
        inst.finish()
        got += inst.take()
    want = feed(adder(None).instance(), items)
    assert multiset(want) == multiset(brute(items, ws, wa, "sum"))
    assert multiset(got) == multiset(want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows(), streams(), st.integers(0, 40), st.integers(1, 4))
def test_state_saved_and_restored_mid_stream(win, items, cut, n_groups):
    """Spark's streaming state keeps an instance's fields pickled between micro-batches
    (spark/streaming.py's _FIELDS), and SN migration pickles σ_g: a fresh instance given the
    unpickled fields continues exactly."""
    ws, wa = win
    op = make(ws, wa, "concat", True)
    fields = ("groups", "_lheap", "_pending", "_seq", "W", "_last_l")
    first = op.instance()
    got = []
    for ts, p in items[:cut]:
        first.process(ts, p)
        got += first.take()
    saved = pickle.dumps([getattr(first, f) for f in fields])
    second = op.instance()
    for f, v in zip(fields, pickle.loads(saved), strict=True):
        setattr(second, f, v)
    got += feed(second, items[cut:])
    assert multiset(got) == multiset(feed(make(ws, wa, "concat", False).instance(), items))


def test_next_window_skips_gaps_and_windows_already_emitted():
    """WS = 6, WA = 4: slices of width 2. A slice outlives its first window; the group's
    next window is recorded with the slices, so a rebuilt heap does not emit twice."""
    op = make(6, 4, "sum", True)
    inst = op.instance()
    inst.process(1, {"ks": ["a"], "v": 1})  # slice 0, in windows [-4, 2) and [0, 6)
    assert inst.groups[0] == {0: {"a": 1}, NEXT: -4} and inst._lheap == [(-4, 0)]
    inst.process(3, {"ks": ["a"], "v": 3})  # W = 3 closes [-4, 2); slice 2
    assert inst.take() == [(2, {"k": "a", "acc": 1})]
    # slice 0 stays for [0, 6), which is next: [-4, 2) must not come again
    assert inst.groups[0] == {0: {"a": 1}, 2: {"a": 3}, NEXT: 0}
    inst.process(5, {"ks": ["a"], "v": 5})  # slice 4, also in [4, 10)
    inst.set_assignment(None)  # the heap rebuilt from σ alone, as after a migration
    assert inst._lheap == [(0, 0)]
    inst.advance(6)
    assert inst.take() == [(6, {"k": "a", "acc": 9})]
    assert inst.groups[0] == {4: {"a": 5}, NEXT: 4}
    inst.process(40, {"ks": ["a"], "v": 1})  # [4, 10) closes; windows up to [32, 38) empty
    assert inst.take() == [(10, {"k": "a", "acc": 5})]
    assert inst.groups[0] == {40: {"a": 1}, NEXT: 36}
    inst.finish()
    assert inst.take() == [(42, {"k": "a", "acc": 1}), (46, {"k": "a", "acc": 1})]
    assert inst.groups[0] == {} and inst._lheap == []


def test_paths_recorded():
    assert not wordcount(10, 10).sliced  # tumbling: a window is its own slice
    tumbling = wordcount(10, 10).instance()
    assert type(tumbling) is AggregateInstance and tumbling.path == "tuple"
    tumbling.process_keyed([1], pa.array(["a"]), [1])
    assert tumbling.path == "columnar"
    for op in (wordcount(10, 5), paircount(10, 5), longest_hashtag(10, 5)):
        assert op.sliced and op.slice_width == 5
        assert op.instance().path == "sliced"
    single = wordcount(10, 5)
    single.WT = "single"
    assert not single.sliced and type(single.instance()) is OPlusInstance


def _tweets(draw_items):
    return [{"ts": ts, "text": " ".join(p["ks"] + ["#" + k for k in p["ks"][:1]])}
            for ts, p in draw_items]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows(), streams(), st.sampled_from(["wordcount", "paircount", "longest"]))
def test_builtin_queries_slice_to_the_same_counts(win, items, which):
    ws, wa = win
    recs = _tweets(items)
    build = {"wordcount": wordcount, "paircount": paircount,
             "longest": longest_hashtag}[which]
    sliced = build(ws, wa)
    plain = build(ws, wa)
    plain.combine = None
    pairs = [(r["ts"], r) for r in recs]
    assert multiset(feed(sliced.instance(), pairs)) == multiset(feed(plain.instance(), pairs))


# -- through the engines ----------------------------------------------------------------------
def _flow(recs, ws, wa, combine):
    flow = sf.Flow("sliced")
    s = flow.source(sf.io.iterable(recs, name="in"))
    op = Aggregate(size=ws, slide=wa, keys=lambda t: t["ks"], init=tuple,
                   update=lambda a, t: a + (t["v"],), combine=combine,
                   output=lambda k, acc: {"k": k, "acc": acc})
    col = flow.oplus(op, s).collect()
    return flow, col


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), windows(), streams(max_size=30),
       st.sampled_from([("vsn", {}), ("sn", {"channels": "threads"})]))
def test_engines_with_reconfiguration_give_the_unsliced_reference(data, win, items, engine):
    ws, wa = win
    recs = [p for _, p in items]
    schedule = data.draw(schedules(len(recs), 3), label="reconfigure")
    ref_flow, ref = _flow(recs, ws, wa, None)
    ref_flow.run("reference")
    flow, col = _flow(recs, ws, wa, operator.add)
    name, opts = engine
    flow.run(name, parallelism=2, max_parallelism=3, key_groups=8, reconfigure=schedule,
             **opts)
    tss = [t for t, _ in col.items]
    assert tss == sorted(tss)
    assert multiset(col) == multiset(ref)


def test_slack_engine_folds_per_slice_like_the_sliced_instance():
    """The slack engine runs an A+ through the generic instance (stored tuples, f_O folds
    them at expiry); for a sliced A+ it folds per slice and combines, so a float sum — whose
    combine is not exactly associative — gives the reference's bits."""
    mags = [0.1, 1e15, 0.3, -1e15, 0.7, 1.1, 3e-3]
    recs = [{"ts": n // 3, "ks": ["a"], "v": mags[n % 7] * (1 + n / 1000)} for n in range(90)]

    def build():
        flow = sf.Flow("f")
        s = flow.source(sf.io.iterable(recs, name="in"))
        col = flow.oplus(Aggregate(size=12, slide=4, keys=lambda t: t["ks"],
                                   output=lambda k, acc: {"k": k, "acc": acc},
                                   **sum_of(lambda t: t["v"])), s).collect()
        return flow, col

    ref_flow, ref = build()
    ref_flow.run("reference")
    # the case matters: somewhere a tuple-by-tuple fold rounds differently from slices
    # (reduce, not sum: Python 3.12's sum compensates float rounding)
    folds = {l + 12: functools.reduce(operator.add,
                                      [r["v"] for r in recs if l <= r["ts"] < l + 12], 0)
             for l in range(-8, 30, 4)}
    assert any(folds[t] != p["acc"] for t, p in ref.items)
    flow, col = build()
    flow.run("slack", parallelism=2)
    assert multiset(col) == multiset(ref)


# -- built-in accumulators --------------------------------------------------------------------
@SETTINGS
@given(windows(), streams())
def test_builtin_accumulators_match_brute_force(win, items):
    ws, wa = win
    of = operator.itemgetter("v")
    cases = {"count": (count(), len), "sum": (sum_of(of), sum), "min": (min_of(of), min),
             "max": (max_of(of), max),
             "mean": (mean_of(of, output=lambda k, m: {"k": k, "acc": m}),
                      lambda vs: sum(vs) / len(vs))}
    for name, (kwargs, fn) in cases.items():
        kw = dict(kwargs)
        kw.setdefault("output", lambda k, acc: {"k": k, "acc": acc})
        op = Aggregate(size=ws, slide=wa, keys=lambda t: t["ks"], **kw)
        assert op.sliced == (wa < ws)
        want = []
        for right, p in brute(items, ws, wa, "concat"):
            want.append((right, {"k": p["k"], "acc": fn(p["acc"])}))
        got = feed(op.instance(), items)
        assert multiset(got) == multiset(want), name


def test_builtin_accumulators_pickle_and_default_output():
    for part in (count(), sum_of(), min_of(), max_of(), mean_of()):
        for f in part.values():
            # module-level classes and functions, no closures: plain pickle ships them
            assert pickle.loads(pickle.dumps(f)).__class__ is f.__class__
    op2 = Aggregate(size=4, slide=2, keys=lambda t: {t["k"]: t["v"]}, **mean_of())
    inst = op2.instance()
    for ts, v in ((0, 1), (1, 2), (3, 6)):
        inst.process(ts, {"k": "x", "v": v})
    inst.finish()
    assert inst.take() == [(2, {"key": "x", "value": 1.5}), (4, {"key": "x", "value": 3.0}),
                           (6, {"key": "x", "value": 6.0})]


def test_mean_sum_of_values_f_mk_gives():
    """``of`` defaults to the value f_U receives: a dict f_MK's per-key value."""
    op = Aggregate(size=10, slide=5, keys=lambda t: Counter(t.split()),
                   output=lambda k, n: (k, n), **sum_of())
    inst = op.instance()
    inst.process(1, "x x y")
    inst.process(6, "x")
    inst.finish()
    assert sorted(inst.take()) == [(5, ("x", 2)), (5, ("y", 1)), (10, ("x", 3)),
                                   (10, ("y", 1)), (15, ("x", 1))]


@pytest.mark.parametrize("agg", ["sum", "concat"])
def test_slices_are_left_intact_by_expiry(agg):
    """A slice's accumulators are combined into a window's result without being changed: the
    next windows that hold the slice combine them again."""
    op = make(9, 3, agg, True)
    inst = op.instance()
    for ts in range(0, 30):
        inst.process(ts, {"ks": ["a", "b"][: 1 + ts % 2], "v": ts})
    inst.finish()
    assert multiset(inst.take()) == multiset(brute(
        [(ts, {"ks": ["a", "b"][: 1 + ts % 2], "v": ts}) for ts in range(30)], 9, 3, agg))
