"""Keys, joins, durations and run results that do what users expect (issue #18).

A key function returning a str, bytes, number or tuple means that one key; a set, list, dict
or other iterable still means several (:mod:`stretchflow.operators.keys`). The flows here run
on every local engine and are compared with outputs computed by hand, not only with the
reference engine (which the conformance suite, ``one-key-results``, compares them with).
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import textwrap
from collections import Counter, namedtuple
from datetime import date, timedelta

import pytest

import stretchflow as sf
from stretchflow.errors import FlowDefinitionError
from stretchflow.eventtime import parse_duration
from stretchflow.flow import loading_app
from stretchflow.operators.join import Join
from stretchflow.operators.keys import one_key
from stretchflow.operators.oplus import OPlus
from stretchflow.queries import get_query
from stretchflow.runtime.result import RunResult

ENGINES = [("reference", {}), ("vsn", {"parallelism": 2}), ("sn", {"parallelism": 2}),
           ("ordered", {"parallelism": 2}), ("slack", {"parallelism": 2})]
ENGINE_IDS = [e for e, _ in ENGINES]

USERS = ("ann", "bob", "alice", "al")
# 40 clicks in 4 tumbling windows of 100 ms; users cycle, so every window sees all four
CLICKS = [{"ts": 10 * i, "user": USERS[i % 4], "page": i % 3, "n": i} for i in range(40)]


def count_by(keys, rows=CLICKS, engine="reference", opts=None) -> Counter:
    """{(window end, key): tuples} of an A+ counting per key over tumbling 100 ms windows."""
    flow = sf.Flow("count")
    out = flow.source(sf.io.iterable(rows)).aggregate(
        size=100, keys=keys, init=int, update=lambda n, t: n + 1,
        output=lambda k, n: {"key": k, "n": n}).collect()
    flow.run(engine, **(opts or {}))
    return Counter({(ts, p["key"]): p["n"] for ts, p in out.items})


def by_hand(key_of) -> Counter:
    """What counting per key means: each tuple once per key of ``key_of(t)`` (a set)."""
    c: Counter = Counter()
    for t in CLICKS:
        for k in key_of(t):
            c[(t["ts"] // 100 * 100 + 100, k)] += 1
    return c


# -- what a key function's result means --------------------------------------------------------
Point = namedtuple("Point", "x y")


@pytest.mark.parametrize("result,keys", [
    ("alice", {"alice"}), (b"ab", {b"ab"}), (7, {7}), (2.5, {2.5}), (True, {True}),
    (("a", 1), {("a", 1)}), (Point(1, 2), {Point(1, 2)}), (date(2024, 1, 2), {date(2024, 1, 2)}),
    ("", {""}), (0, {0}),
])
def test_one_key_results_become_a_set_of_one(result, keys):
    assert one_key(result) == keys


@pytest.mark.parametrize("result", [
    {"a", "b"}, frozenset({1}), ["a", "b", "a"], {"a": 2}, Counter("aab"), set(), [], None,
])
def test_several_key_results_pass_unchanged(result):
    assert one_key(result) is result


def test_a_generator_still_means_several_keys():
    gen = (w for w in "x y".split())
    assert one_key(gen) is gen


# -- on every engine ----------------------------------------------------------------------------
@pytest.mark.parametrize("engine,opts", ENGINES, ids=ENGINE_IDS)
def test_a_str_key_groups_by_the_whole_string(engine, opts):
    got = count_by(lambda t: t["user"], engine=engine, opts=opts)
    assert got == by_hand(lambda t: {t["user"]})
    assert {k for _, k in got} == set(USERS)  # not the letters a, l, i, c, e, n, b, o


@pytest.mark.parametrize("engine,opts", ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("name,keys,want", [
    ("bytes", lambda t: t["user"].encode(), lambda t: {t["user"].encode()}),
    ("int", lambda t: t["page"], lambda t: {t["page"]}),
    ("zero-is-a-key", lambda t: t["page"] * 0, lambda t: {0}),
    ("tuple", lambda t: (t["user"], t["page"]), lambda t: {(t["user"], t["page"])}),
    ("set", lambda t: {t["user"], t["page"]}, lambda t: {t["user"], t["page"]}),
    ("list", lambda t: [t["user"], t["user"], t["page"]], lambda t: {t["user"], t["page"]}),
    ("chars-by-choice", lambda t: set(t["user"]), lambda t: set(t["user"])),
    ("none-for-some", lambda t: t["user"] if t["page"] else None,
     lambda t: {t["user"]} if t["page"] else set()),
])
def test_key_results_mean_the_same_on_every_engine(engine, opts, name, keys, want):
    assert count_by(keys, engine=engine, opts=opts) == by_hand(want)


@pytest.mark.parametrize("engine,opts", ENGINES, ids=ENGINE_IDS)
def test_a_dict_still_gives_per_key_values(engine, opts):
    flow = sf.Flow("sum")
    out = flow.source(sf.io.iterable(CLICKS)).aggregate(
        size=100, keys=lambda t: {t["user"]: t["n"], "all": 1}, init=int,
        update=lambda acc, v: acc + v, output=lambda k, n: {"key": k, "n": n}).collect()
    flow.run(engine, **opts)
    got = {(ts, p["key"]): p["n"] for ts, p in out.items}
    want: Counter = Counter()
    for t in CLICKS:
        end = t["ts"] // 100 * 100 + 100
        want[(end, t["user"])] += t["n"]
        want[(end, "all")] += 1
    assert got == dict(want)


class ByUser(OPlus):
    """An O+ subclass whose own f_MK returns a str: one key, as for a ``keys=`` function."""

    def __init__(self) -> None:
        super().__init__(size=100, init=int, name="by-user",
                         update=lambda ws, ts, t, i: ws.states.__setitem__(0, ws.states[0] + 1),
                         output=lambda ws: [{"key": ws.key, "n": ws.states[0]}])

    def keys(self, t, i):
        return t["user"]


class RawLetters(ByUser):
    """``keys_iterable``: the subclass promises an iterable of keys, so a str is iterated."""

    keys_iterable = True

    def keys(self, t, i):
        return t["user"]


@pytest.mark.parametrize("engine,opts", ENGINES, ids=ENGINE_IDS)
def test_an_oplus_subclass_keys_method_means_one_key_too(engine, opts):
    flow = sf.Flow("sub")
    out = flow.source(sf.io.iterable(CLICKS)).oplus(ByUser()).collect()
    flow.run(engine, **opts)
    assert Counter({(ts, p["key"]): p["n"] for ts, p in out.items}) == \
        by_hand(lambda t: {t["user"]})


def test_keys_iterable_skips_the_check():
    assert RawLetters().keys({"user": "al"}, 0) == "al"
    assert ByUser().keys({"user": "al"}, 0) == {"al"}


def test_builtin_traffic_join_keys_by_area_not_a_tuple():
    from stretchflow.queries.traffic import congestion_join

    op = congestion_join()
    assert op.keys({"area": "north"}, 0) == {"north"}


# -- joins with a key function per side ------------------------------------------------------
ORDERS = [{"ts": 5 * i, "user": USERS[i % 4], "order": i} for i in range(20)]
PROFILES = [{"ts": 5 * i + 1, "name": USERS[i % 4], "age": 20 + i} for i in range(20)]


def join_pairs(engine: str, opts: dict, **keys) -> Counter:
    flow = sf.Flow("j")
    a = flow.source(sf.io.iterable(ORDERS, name="orders"))
    b = flow.source(sf.io.iterable(PROFILES, name="profiles"))
    out = a.join(b, size=40, output=lambda o, p: (o["order"], p["age"]), **keys).collect()
    flow.run(engine, **opts)
    return Counter(out.items)


@pytest.mark.parametrize("engine,opts", ENGINES, ids=ENGINE_IDS)
def test_join_left_and_right_keys(engine, opts):
    got = join_pairs(engine, opts, left_keys=lambda o: o["user"], right_keys=lambda p: p["name"])
    want = Counter((o["ts"] // 40 * 40 + 40, (o["order"], p["age"]))
                   for o in ORDERS for p in PROFILES
                   if o["user"] == p["name"] and o["ts"] // 40 == p["ts"] // 40)
    assert got == want and got


def test_join_keys_for_both_sides_still_works():
    one = join_pairs("reference", {}, keys=lambda t: t.get("user", t.get("name")))
    two = join_pairs("reference", {}, left_keys=lambda o: o["user"],
                     right_keys=lambda p: p["name"])
    assert one == two


@pytest.mark.parametrize("kw,msg", [
    ({}, "left_keys and right_keys missing"),
    ({"left_keys": len}, "right_keys missing"),
    ({"right_keys": len}, "left_keys missing"),
    ({"keys": len, "left_keys": len, "right_keys": len}, "not both"),
    ({"keys": len, "right_keys": len}, "not both"),
])
def test_join_takes_exactly_one_form_of_keys(kw, msg):
    with pytest.raises(FlowDefinitionError, match=msg):
        Join(size=10, name="j", **kw)
    flow = sf.Flow()
    a, b = flow.source(sf.io.iterable([])), flow.source(sf.io.iterable([]))
    with pytest.raises(FlowDefinitionError, match=msg):
        a.join(b, size=10, **kw)


# -- durations ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,ms", [
    (timedelta(minutes=2), 120_000), (timedelta(milliseconds=250), 250),
    ("1 minute", 60_000), ("10 seconds", 10_000), ("1.5s", 1_500), ("2min", 120_000),
    ("250ms", 250), ("1h", 3_600_000), ("2 hours", 7_200_000), ("1h 30min", 5_400_000),
    ("1h30m", 5_400_000), ("0.5 s", 500), (" 3 Days ", 259_200_000), ("1w", 604_800_000),
    ("400", 400), (400, 400),
])
def test_durations(value, ms):
    assert parse_duration(value) == ms


@pytest.mark.parametrize("value,why", [
    ("5 parsecs", "unknown unit 'parsecs'"), ("1.0005s", "1000.5 ms is not a whole"),
    ("-3s", "such as"), ("", "such as"), ("12 34", "a number needs a unit"),
    (True, "such as"), (1.5, "float"), (timedelta(microseconds=10), "whole"),
    (-5, "negative"), ("1h x", "such as"),
])
def test_bad_durations_are_one_clear_error_naming_the_value(value, why):
    with pytest.raises(ValueError) as e:
        parse_duration(value)
    text = str(e.value)
    assert repr(value) in text and why in text and "\n" not in text


def test_the_api_takes_every_duration_form():
    def run(size, slide) -> list:
        flow = sf.Flow()
        out = flow.source(sf.io.iterable(CLICKS)).aggregate(
            size=size, slide=slide, keys=lambda t: t["user"], init=int,
            update=lambda n, t: n + 1, output=lambda k, n: (k, n)).collect()
        flow.run()
        return sorted(out.items)

    assert run("0.2s", timedelta(milliseconds=100)) == run(200, 100) == run("200 ms", "100ms")
    assert len(run("0.2s", "0.1 seconds")) > 0


def test_query_params_take_durations():
    q = get_query("wordcount")
    assert q.parse_params({"size": "2min", "slide": "1 minute"}) == \
        {"size": 120_000, "slide": 60_000}
    assert q.parse_params({"size": "90000"})["size"] == 90_000
    with pytest.raises(ValueError, match=r"bad value '2 parsecs' for size.*unknown unit"):
        q.parse_params({"size": "2 parsecs"})
    assert "size=120000 (duration)" in q.describe_params()
    assert get_query("tpcxbb-q4").parse_params({"session": "30min"})["session"] == 1_800_000


# -- run results print short ------------------------------------------------------------------
def test_run_result_repr_is_one_short_line_never_the_samples():
    res = RunResult("vsn", 2.0, {"s": 10_000}, {"out": 10}, extra={
        "latency_ms": {"p50": 1.25, "p99": 7.5, "max": 9.0, "samples": 50_000},
        "latency_series": [(0.1 * i, 1.0) for i in range(4000)],
        "metrics": [{"operator": "agg", "time": i} for i in range(3000)],
        "parallelism": {"agg": 3}, "checkpoints": 4,
        "reconfigurations": [
            {"applied": True, "parallelism_before": 2, "parallelism_after": 3},
            {"applied": False, "parallelism_before": 3, "parallelism_after": 4}]})
    r = repr(res)
    assert "\n" not in r and len(r) < 200, r
    assert r.startswith("<RunResult vsn: 10,000 in; 10 out; 2.000 s; 5,000/s; p50 1.2 ms")
    assert "parallelism agg 3" in r and "1 reconfigurations" in r and "4 checkpoints" in r
    text = str(res)
    assert "reconfigurations: 1 applied of 2 requested (2→3)" in text
    assert "checkpoints: 4 taken" in text and "p99 7.5 ms" in text
    # the GIL line (a threaded run of Python functions) is the one long line allowed
    assert len(text) < 400 + len(res.gil_note() or "") and repr([res]) == f"[{r}]"


def test_a_real_vsn_result_prints_short():
    flow = sf.Flow()
    rows = [{"ts": i, "user": USERS[i % 4]} for i in range(800)]
    flow.source(sf.io.iterable(rows)).aggregate(
        size=100, keys=lambda t: t["user"], init=int, update=lambda n, t: n + 1).collect()
    res = flow.run("vsn", parallelism=2)
    assert res.extra["latency_ms"]["samples"] > 0
    assert len(repr(res)) < 250 and len(str(res)) < 500


# -- a flow file that also runs as a script ------------------------------------------------------
GUARDED = """
import stretchflow as sf

flow = sf.Flow("f")
counts = flow.source(sf.io.iterable([{"ts": i, "user": "ab"[i % 2]} for i in range(10)]))
counts.aggregate(size=5, keys=lambda t: t["user"], init=int,
                 update=lambda n, t: n + 1).sink("out.jsonl")
if __name__ == "__main__":
    print(flow.run())
"""


def test_a_guarded_flow_file_runs_once_either_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "app.py"
    path.write_text(textwrap.dedent(GUARDED))
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("reference: 10 tuples in, 4 out") == 1
    with loading_app(path):  # what `stretchflow run app.py` does: the flow is not run here
        ns = runpy.run_path(str(path), run_name="__stretchflow_app__")
    assert isinstance(ns["flow"], sf.Flow)


def test_an_unguarded_run_while_loading_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the flow writes out.jsonl where it runs
    path = tmp_path / "app.py"
    path.write_text(textwrap.dedent(GUARDED).replace('if __name__ == "__main__":\n    ', ""))
    with loading_app(path), pytest.raises(FlowDefinitionError) as e:
        runpy.run_path(str(path), run_name="__stretchflow_app__")
    assert str(path) in str(e.value) and 'if __name__ == "__main__":' in str(e.value)
    runpy.run_path(str(path), run_name="__main__")  # outside the loader it just runs
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 4


def test_a_wrapped_key_function_pickles_without_the_learnt_types(tmp_path):
    """A key type learnt in this process (here from a module a worker cannot import) must not
    travel with a pickled f_MK: Spark workers failed to unpickle every later task (CI)."""
    import subprocess
    import sys

    import cloudpickle

    from stretchflow.operators.keys import one_key, one_key_fn

    mod = tmp_path / "helper_types_mod.py"
    mod.write_text("class UserId(int):\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import helper_types_mod

        assert one_key(helper_types_mod.UserId(3)) == {3}  # learnt: UserId is one key
        blob = cloudpickle.dumps(one_key_fn(lambda t: t["user"]))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("helper_types_mod", None)
    assert b"helper_types_mod" not in blob
    code = ("import cloudpickle, sys; f = cloudpickle.loads(sys.stdin.buffer.read()); "
            "print(sorted(f({'user': 'ann'})))")
    r = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                       cwd="/", check=True)
    assert r.stdout.decode().strip() == "['ann']"
