"""The SN executor on any flow: chained O+ (one parallel region each), a three-input O+, a join
with a predicate, streams read by several consumers, stateless-only flows, several sinks, and
keys of any hashable type, on thread and process channels, with migrations; every sink gets
the reference executor's per-timestamp output multiset, timestamp-sorted."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import assert_same_as_reference, multiset, schedules
from stretchflow.elastic.consistent_hash import canonical_bytes, stable_hash
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.executors import sn
from stretchflow.executors.reference import run as run_reference
from stretchflow.operators.oplus import OPlus
from test_sn import _no_sn_threads

PROC = {"channels": "processes"}


def records(seed, n, keys=6, step=7):
    rnd = random.Random(seed)
    ts, out = 0, []
    for _ in range(n):
        ts += rnd.randrange(step)
        out.append({"ts": ts, "k": rnd.randrange(keys), "v": rnd.randrange(100)})
    return out


def _count(size, slide=None, key="k", name=None):
    return dict(size=size, slide=slide, keys=lambda t: {t[key]}, init=lambda: 0,
                update=lambda a, t: a + 1, output=lambda k, n: {key: k, "n": n}, name=name)


# -- the flows ---------------------------------------------------------------------------------
def chain_flow(flow, recs):
    """Two chained O+ with stateless operators before, between and after; the first O+'s
    output is read by two consumers (the second O+ and a sink)."""
    s = flow.source(sf.io.iterable(recs, name="src"))
    s = s.filter(lambda t: t["v"] % 7 != 0).map(lambda t: {**t, "v": t["v"] + 1})
    counts = s.aggregate(**_count(60, 20))
    first = counts.collect()
    parity = counts.map(lambda r: {**r, "p": r["k"] % 2}).aggregate(
        size=120, slide=60, keys=lambda r: {r["p"]}, init=lambda: 0,
        update=lambda a, r: a + r["n"], output=lambda p, total: {"p": p, "total": total})
    second = parity.flat_map(lambda r: [r, {**r, "copy": 1}]).filter(
        lambda r: r["total"] > 1).collect()
    return [first, second]


def _three_update(ws, ts, value, i):
    ws.states[i] += 1
    if i == 2 and ws.states[0]:  # f_U that emits
        return [{"k": ws.key, "hit": value["v"], "seen0": ws.states[0]}]
    return None


def three_input_flow(flow, a, b, c):
    """A three-input O+ reading a source (inline), an aggregate's output (another region) and
    a source also read by a sink (teed); its f_U emits."""
    op = OPlus(size=80, slide=40, inputs=3, keys=lambda t, i: {t["k"] % 3},
               init=lambda: 0, update=_three_update,
               output=lambda ws: [{"k": ws.key, "n": list(ws.states)}], name="three")
    s0 = flow.source(sf.io.iterable(a, name="a"))
    s1 = flow.source(sf.io.iterable(b, name="b")).aggregate(**_count(30))
    s2 = flow.source(sf.io.iterable(c, name="c"))
    raw = s2.map(lambda t: {**t, "raw": True}).collect()
    return [flow.oplus(op, s0, s1, s2).collect(), raw]


def join_flow(flow, recs):
    """A join with a predicate of two aggregates of one source (a diamond: the source is read
    by both, the join meets them again)."""
    s = flow.source(sf.io.iterable(recs, name="src"))
    left = s.aggregate(**_count(50, 25, name="left"))
    right = s.flat_map(lambda t: [t] * (1 + t["v"] % 2)).aggregate(
        size=50, slide=25, keys=lambda t: {t["k"]}, init=lambda: 0,
        update=lambda a, t: a + t["v"], output=lambda k, s: {"k": k, "sum": s}, name="right")
    joined = left.join(right, size=100, slide=50, keys=lambda r: {r["k"]},
                       predicate=lambda x, y: x["n"] * 10 <= y["sum"],
                       output=lambda x, y: {"k": x["k"], "n": x["n"], "sum": y["sum"]})
    return [joined.map(lambda r: {**r, "ratio": r["sum"] // max(1, r["n"])}).collect()]


def stateless_flow(flow, a, b):
    """No O+ at all: stateless operators between sources and sinks, several sinks."""
    s = flow.source(sf.io.iterable(a, name="a")).map(lambda t: {**t, "w": t["v"] * 2})
    out1 = s.filter(lambda t: t["k"] < 3).collect()
    out2 = flow.source(sf.io.iterable(b, name="b")).flat_map(lambda t: [t, t]).collect()
    return [out1, out2]


def frozenset_flow(flow, recs):
    s = flow.source(sf.io.iterable(recs, name="src"))
    return [s.aggregate(size=40, keys=lambda t: {frozenset({t["k"], t["v"] % 3}),
                                                 (t["k"], None, 1.5)},
                        init=lambda: 0, update=lambda a, t: a + 1,
                        output=lambda k, n: {"k": repr(sorted(k, key=repr))
                                             if isinstance(k, frozenset) else repr(k),
                                             "n": n}).collect()]


def compare(build, inputs, **options):
    """``build(flow, *inputs)`` on the reference and on sn: same per-timestamp multisets on
    every sink, timestamp-sorted, the same tuple counts."""

    def build_flow():
        flow = sf.Flow("f")
        return flow, build(flow, *inputs)

    return assert_same_as_reference(build_flow, "sn", check_counts=True, **options)


FLOWS = {
    "chain": (chain_flow, lambda seed: [records(seed, 400)]),
    "three": (three_input_flow, lambda seed: [records(seed, 200), records(seed + 1, 300),
                                              records(seed + 2, 150)]),
    "join": (join_flow, lambda seed: [records(seed, 300)]),
    "stateless": (stateless_flow, lambda seed: [records(seed, 100), records(seed + 1, 50)]),
    "frozenset": (frozenset_flow, lambda seed: [records(seed, 300)]),
}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(FLOWS)), st.integers(0, 10_000), st.integers(1, 5),
       st.sampled_from([1, 8, 256]),
       schedules(700, 6, max_steps=4))
def test_flows_match_reference_with_threads(name, seed, p0, batch, schedule):
    build, inputs = FLOWS[name]
    res = compare(build, inputs(seed), parallelism=p0, reconfigure=schedule,
                  batch=batch)
    n_ops = len(res.extra["parallelism"])
    assert len(res.extra["reconfigurations"]) == n_ops * len(schedule)
    assert {r["operator"] for r in res.extra["reconfigurations"]} <= set(res.extra["parallelism"])


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(FLOWS)), st.integers(0, 10_000), st.integers(1, 8),
       st.sampled_from([1, 5, 64]),
       schedules(700, 8, max_steps=8))
def test_flows_across_hundreds_of_schedules(name, seed, p0, batch, schedule):
    build, inputs = FLOWS[name]
    compare(build, inputs(seed), parallelism=p0, reconfigure=schedule, batch=batch,
            store="sqlite" if seed % 2 else "memory")


@pytest.mark.parametrize("name", sorted(FLOWS))
def test_flows_match_reference_with_processes(name):
    build, inputs = FLOWS[name]
    res = compare(build, inputs(7), parallelism=2, reconfigure=[(50, 3), (250, 1)], batch=16,
                  **PROC)
    assert res.extra["channels"] == "processes"
    if name != "stateless":
        applied = [r for r in res.extra["reconfigurations"] if r["applied"]]
        assert applied and all(r["groups_reassigned"] > 0 for r in applied)


def test_every_region_reconfigures():
    """A schedule step reaches every O+ (as the VSN engine reconfigures every O+)."""
    res = compare(chain_flow, [records(3, 400)], parallelism=1, reconfigure=[(100, 4)])
    assert res.extra["parallelism"] == {"aggregate": 4, "aggregate-2": 4}
    series = res.extra["parallelism_series"]
    assert [p for _, p in series["aggregate"]] == [1, 4]
    assert [p for _, p in series["aggregate-2"]] == [1, 4]
    first = [r for r in res.extra["reconfigurations"] if r["operator"] == "aggregate"]
    assert [(r["count"], r["applied"]) for r in first] == [(100, True)]


def test_a_controller_per_region():
    from test_sn_controller import Scripted

    ctl = Scripted([2, 3, 1, 2])
    res = compare(chain_flow, [records(5, 3000, step=2)], parallelism=1, controller=ctl,
                  metrics_interval=0.01, batch=4, pulse_ms=1)
    ops = {m["operator"] for m in res.extra["metrics"]}
    assert ops <= {"aggregate", "aggregate-2"} and "aggregate" in ops
    assert ctl.seen  # the first region got the object, the second a deep copy of it


@pytest.mark.parametrize("channels", [{}, PROC])
def test_a_user_error_in_a_second_region_names_it(channels):
    flow = sf.Flow("err")
    s = flow.source(sf.io.iterable(records(1, 300), name="src")).aggregate(**_count(20))

    def boom(a, r):
        if r["n"] > 2:
            raise ValueError("too many")
        return a + 1

    s.aggregate(size=40, keys=lambda r: {r["k"]}, init=lambda: 0, update=boom,
                name="second").collect()
    with pytest.raises(OperatorError) as e:
        sn.run(flow, parallelism=2, batch=8, **channels)
    assert e.value.operator == "second" and "too many" in str(e.value)
    _no_sn_threads(10)


# -- keys of any hashable type ---------------------------------------------------------------
def test_stable_hash_of_frozensets_ignores_order_and_follows_equality():
    a = frozenset(["x", "y", 3, (1, "z")])
    b = frozenset([(1, "z"), 3, "y", "x"])
    assert canonical_bytes(a) == canonical_bytes(b) and stable_hash(a) == stable_hash(b)
    assert stable_hash(frozenset({1, 2})) == stable_hash(frozenset({1.0, True + 1}))
    assert stable_hash(frozenset()) != stable_hash(())
    assert stable_hash(frozenset({(1, 2)})) != stable_hash(frozenset({1, 2}))
    assert stable_hash(frozenset({frozenset({1}), 2})) != stable_hash(frozenset({1, 2}))
    assert stable_hash((frozenset({"a"}), None)) == stable_hash((frozenset({"a"}), None))


def test_stable_hash_of_frozensets_is_the_same_in_another_process():
    import subprocess
    import sys

    keys = [frozenset({"apple", "kiwi", 7}), (frozenset({b"x", None}), 2.5)]
    code = ("from stretchflow.elastic.consistent_hash import stable_hash; "
            f"print([stable_hash(k) for k in {keys!r}])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345"}).stdout.strip()
    assert other == repr([stable_hash(k) for k in keys])


class _Opaque:
    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, _Opaque) and other.v == self.v


def test_a_key_type_without_a_stable_encoding_is_named():
    flow = sf.Flow("opaque")
    flow.source(sf.io.iterable(records(2, 20), name="src")).aggregate(
        size=10, keys=lambda t: {_Opaque(t["k"])}, init=lambda: 0,
        update=lambda a, t: a + 1, output=lambda k, n: {"k": k.v, "n": n}).collect()
    with pytest.raises(FlowDefinitionError, match="_Opaque"):
        sn.run(flow, parallelism=2, **PROC)
    ref, got = sf.Flow("r"), sf.Flow("t")  # threads hash in one process: any hashable key
    for f in (ref, got):
        f.source(sf.io.iterable(records(2, 20), name="src")).aggregate(
            size=10, keys=lambda t: {_Opaque(t["k"])}, init=lambda: 0,
            update=lambda a, t: a + 1, output=lambda k, n: {"k": k.v, "n": n}).collect()
    run_reference(ref)
    sn.run(got, parallelism=2)
    assert multiset(got.sinks[0][1].items) == multiset(ref.sinks[0][1].items)
