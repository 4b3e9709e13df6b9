"""O+ semantics (journal §4.2, Table I, Alg. 2; Appendices C–E)."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.operators.aggregate import Aggregate
from stretchflow.operators.oplus import OPlus
from stretchflow.queries.longest_hashtag import longest_hashtag

MIN = 60_000


def hm(h, m):
    return (h * 60 + m) * MIN


def run_flow(records_per_input, make_op):
    flow = sf.Flow("t")
    streams = [flow.source(sf.io.iterable(recs, name=f"in{i}"))
               for i, recs in enumerate(records_per_input)]
    col = streams[0].oplus(make_op(), *streams[1:]).collect()
    flow.run()
    return col.items


# -- Appendix E: the A+ of Op. 9 on the 09:58 tweet --------------------------------------------

def test_appendix_e_trace():
    """Execution Trace 16: processSN(⟨09:58, [C, "hi #red #pink"]⟩) with WA = 30 min,
    WS = 60 min, after ⟨09:50, [B, "hello #pink"]⟩."""
    op = longest_hashtag(size="60min", slide="30min")
    inst = op.instance()
    inst.process(hm(9, 50), {"user": "B", "text": "hello #pink"})
    # initial state of the trace: σ = {⟨11, 09:00, pink⟩, ⟨11, 09:30, pink⟩}
    assert inst.sigma == {hm(9, 0): {"#pink": 11}, hm(9, 30): {"#pink": 11}}
    assert inst.W == hm(9, 50)
    inst.process(hm(9, 58), {"user": "C", "text": "hi #red #pink"})
    assert inst.W == hm(9, 58)  # updateW
    # final state: red and pink at 09:00 and 09:30, each 13 characters
    assert inst.sigma == {
        hm(9, 0): {"#pink": 13, "#red": 13},
        hm(9, 30): {"#pink": 13, "#red": 13},
    }
    assert inst.take() == []  # nothing has expired yet
    inst.advance(hm(10, 0))  # the watermark reaches the right boundary 10:00
    assert sorted(inst.take(), key=repr) == sorted(
        [(hm(10, 0), {"hashtag": "#red", "chars": 13}),
         (hm(10, 0), {"hashtag": "#pink", "chars": 13})], key=repr)
    assert list(inst.sigma) == [hm(9, 30)]


def test_theorem2_map_plus_aggregate_equals_aplus():
    """Corollary 1 / Appendix C: a Map emitting one tuple per hashtag followed by an A keyed
    by that single key computes what the A+ computes."""
    tweets = [
        {"ts": hm(9, 10), "user": "A", "text": "#pink is #nice"},
        {"ts": hm(9, 50), "user": "B", "text": "hello #pink"},
        {"ts": hm(9, 58), "user": "C", "text": "hi #red #pink"},
        {"ts": hm(10, 40), "user": "D", "text": "#red again and again"},
    ]
    a_plus = run_flow([tweets], lambda: longest_hashtag(size="60min", slide="30min"))

    flow = sf.Flow("corollary1")
    m = flow.source(sf.io.iterable(tweets)).flat_map(  # Alg. 7
        lambda t: [{"h": w, "n": len(t["text"])} for w in t["text"].split() if w[0] == "#"])
    col = m.aggregate(size="60min", slide="30min", keys=lambda t: {t["h"]}, init=int,
                      update=lambda acc, t: max(acc, t["n"]),
                      output=lambda h, n: {"hashtag": h, "chars": n}).collect()
    flow.run()
    assert multiset(a_plus) == multiset(col.items)
    assert (hm(10, 0), {"hashtag": "#pink", "chars": 14}) in a_plus


# -- WT single and multi ---------------------------------------------------------------------

@st.composite
def stream_and_window(draw):
    ws = draw(st.integers(1, 30))
    wa = draw(st.integers(1, ws))
    n = draw(st.integers(0, 40))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 7, 45]), min_size=n, max_size=n))
    ts, recs = draw(st.integers(0, 10)), []
    for g in gaps:
        ts += g
        recs.append({"ts": ts, "k": draw(st.sampled_from("abc")), "v": draw(st.integers(0, 9))})
    return recs, wa, ws


def _agg(window_type, wa, ws, fn=lambda acc, t: acc + t["v"]):
    return lambda: Aggregate(size=ws, slide=wa, keys=lambda t: {t["k"], "all"}, init=int,
                             update=fn, output=lambda k, acc: {"k": k, "acc": acc},
                             window_type=window_type)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream_and_window())
def test_single_and_multi_give_identical_aggregates(p):
    recs, wa, ws = p
    multi = run_flow([recs], _agg("multi", wa, ws))
    single = run_flow([recs], _agg("single", wa, ws))
    assert multiset(multi) == multiset(single)
    # and both equal a brute force over window instances
    brute = []
    lefts = {l for r in recs for l in range(r["ts"] - ws + 1, r["ts"] + 1) if l % wa == 0}
    for l in lefts:
        inside = [r for r in recs if l <= r["ts"] < l + ws]
        for k in {r["k"] for r in inside} | ({"all"} if inside else set()):
            acc = sum(r["v"] for r in inside if k in (r["k"], "all"))
            brute.append((l + ws, {"k": k, "acc": acc}))
    assert multiset(multi) == multiset(brute)
    assert [ts for ts, _ in multi] == sorted(ts for ts, _ in multi)


# -- a J+ (I = 2) against brute force ----------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(stream_and_window(), stream_and_window(), st.sampled_from(["single", "multi"]))
def test_join_matches_brute_force(left, right, wt):
    lrecs, wa, ws = left
    rrecs = right[0]
    if wt == "single":
        wa = 1  # a single window set shifts by WA: pairs within WS of each other meet once
    make = lambda: sf.Join(size=ws, slide=wa, keys=lambda t: {t["k"]},  # noqa: E731
                           predicate=lambda a, b: a["v"] <= b["v"],
                           output=lambda a, b: {"l": a["ts"], "r": b["ts"]},
                           window_type=wt)
    got = run_flow([lrecs, rrecs], make)
    brute = []
    for a in lrecs:
        for b in rrecs:
            if a["k"] != b["k"] or a["v"] > b["v"]:
                continue
            common = [l for l in range(max(a["ts"], b["ts"]) - ws + 1, min(a["ts"], b["ts"]) + 1)
                      if l % wa == 0]
            if wt == "single":
                common = common[:1]  # the pair meets in the window set when the later arrives
                if common:
                    later = max(a["ts"], b["ts"])
                    common = [((later - ws) // wa + 1) * wa]
            for l in common:
                brute.append((l + ws, {"l": a["ts"], "r": b["ts"]}))
    assert multiset(got) == multiset(brute)
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)


# -- f_U outputs and f_O outputs interleave in timestamp order ----------------------------------

class EmitBoth(OPlus):
    """f_U emits into every window the tuple falls in; f_O emits at expiry."""

    def __init__(self):
        super().__init__(size=10, slide=3, keys=lambda t, i: {t["k"]}, init=list)

    def update(self, ws, ts, value, i):
        ws.states[i].append(ts)
        return [("u", ws.key, ws.l, ts)]

    def output(self, ws):
        return [("o", ws.key, ws.l, len(ws.states[0]))]


@settings(max_examples=100, deadline=None)
@given(stream_and_window())
def test_outputs_are_timestamp_sorted(p):
    recs = p[0]
    got = run_flow([recs], EmitBoth)
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    n_u = sum(1 for _, x in got if x[0] == "u")
    assert n_u == sum(len(list(range(((r["ts"] - 10) // 3 + 1) * 3, r["ts"] // 3 * 3 + 1, 3)))
                      for r in recs)
    for ts, x in got:
        assert ts == x[2] + 10  # every output carries its window's right boundary


# -- Table I defaults --------------------------------------------------------------------------

def test_table1_defaults_store_tuples_and_emit_nothing():
    op = OPlus(size=10, slide=5, keys=lambda t, i: {"k"})
    inst = op.instance()
    inst.process(1, "a")
    inst.process(7, "b")
    assert inst.sigma[0]["k"].states == [[(1, "a"), (7, "b")]]
    assert inst.sigma[5]["k"].states == [[(7, "b")]]
    inst.finish()
    assert inst.take() == [] and inst.sigma == {}


def test_single_window_slides_and_purges():
    op = OPlus(size=10, slide=5, keys=lambda t, i: {"k"}, window_type="single",
               output=lambda ws: [[v for _, v in ws.states[0]]])
    inst = op.instance()
    for ts, v in [(1, "a"), (7, "b"), (12, "c")]:
        inst.process(ts, v)
    inst.finish()
    # [-5,5): a  [0,10): a b  [5,15): b c  [10,20): c
    assert inst.take() == [(5, ["a"]), (10, ["a", "b"]), (15, ["b", "c"]), (20, ["c"])]


def test_keys_as_list_are_a_set():
    op = Aggregate(size=10, keys=lambda t: t.split(), init=int, update=lambda a, t: a + 1,
                   output=lambda k, a: (k, a))
    inst = op.instance()
    inst.process(1, "x x y")
    inst.finish()
    assert sorted(inst.take()) == [(10, ("x", 1)), (10, ("y", 1))]


def test_keys_as_dict_give_per_key_values():
    op = Aggregate(size=10, keys=lambda t: Counter(t.split()), init=int,
                   update=lambda a, n: a + n, output=lambda k, a: (k, a))
    inst = op.instance()
    inst.process(1, "x x y")
    inst.finish()
    assert sorted(inst.take()) == [(10, ("x", 2)), (10, ("y", 1))]


def test_empty_key_set_creates_nothing():
    op = Aggregate(size=10, keys=lambda t: set(), init=int, update=lambda a, t: a + 1)
    inst = op.instance()
    inst.process(1, "x")
    assert inst.sigma == {}


@settings(max_examples=100, deadline=None)
@given(stream_and_window(), st.integers(1, 5), st.integers(1, 9), st.sampled_from(["single",
                                                                                  "multi"]))
def test_instances_sharing_sigma_split_the_work(p, n, n_groups, wt):
    """n instances over one shared σ (Alg. 4's setting), each owning the key groups f_μ gives
    it and reading every tuple, together emit exactly what one instance emits."""
    from stretchflow.operators.oplus import SharedState

    recs, wa, ws = p
    make = _agg(wt, wa, ws)
    one = make().instance()
    op = make()
    sigma = SharedState(n_groups)
    assign = [g % n for g in range(n_groups)]
    insts = [op.instance(sigma, j, assign) for j in range(n)]
    for r in recs:
        one.process(r["ts"], r)
        for inst in insts:
            inst.process(r["ts"], r)
    # every window set sits in its key's group, and each instance indexes only its own groups
    for g, sg in enumerate(sigma.groups):
        for windows in sg.values():
            assert all(hash(k) % n_groups == g for k in windows)
    for inst in insts:
        assert all(assign[g] == inst.j for _, g in inst._lheap)
    assert sum(len(inst._lheap) for inst in insts) == sum(len(sg) for sg in sigma.groups)
    one.finish()
    for inst in insts:
        inst.finish()
    together = [item for inst in insts for item in inst.take()]
    assert multiset(together) == multiset(one.take())


@pytest.mark.parametrize("kw,msg", [
    ({"size": 10, "slide": 20}, "must not exceed"),
    ({"size": 0}, "positive"),
    ({"size": 10, "window_type": "tumbling"}, "window_type"),
    ({"size": 10, "inputs": 0}, "at least one input"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(FlowDefinitionError, match=msg):
        OPlus(keys=lambda t, i: {1}, **kw)


def test_operator_count_must_match_inputs():
    flow = sf.Flow()
    s = flow.source(sf.io.iterable([]))
    with pytest.raises(FlowDefinitionError, match="I=2"):
        flow.oplus(sf.Join(size=5, keys=lambda t: {1}), s)


def test_user_function_error_names_operator_and_tuple():
    flow = sf.Flow()
    s = flow.source(sf.io.iterable([{"ts": 1, "x": 1}, {"ts": 2, "x": 0}]))
    s.aggregate(size=5, keys=lambda t: {1}, init=int, update=lambda a, t: a + 1 / t["x"],
                name="divider").collect()
    with pytest.raises(OperatorError, match=r"divider.*ts=2.*'x': 0.*ZeroDivisionError"):
        flow.run()


def test_output_function_error_at_end_of_input():
    flow = sf.Flow()
    s = flow.source(sf.io.iterable([{"ts": 1}]))
    s.aggregate(size=5, keys=lambda t: {1}, init=int, update=lambda a, t: a,
                output=lambda k, a: 1 / 0, name="bad-output").collect()
    with pytest.raises(OperatorError, match="bad-output.*end of input"):
        flow.run()
