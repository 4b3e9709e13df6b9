"""The columnar form of an additive A+ (``Aggregate.columns``, ``AggregateInstance.
process_columns`` / ``process_keyed``) against the tuple-at-a-time O+, and the Spark batch
path built on it (explode kernel -> shuffle by key -> keyed kernel), without a Spark session.

The columnar form must give the same σ and outputs as ``process`` on each tuple for any
input: any texts (every whitespace code point ``str.split`` knows), any timestamps, window
sizes that are or are not multiples of the slide, runs cut anywhere, keys spread over
several instances by key group.
"""

import sys

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.contract import multiset, per_tuple
from stretchflow.errors import OperatorError
from stretchflow.operators.oplus import SharedState
from stretchflow.queries.wordcount import token_columns, wordcount
from stretchflow.spark import columnar, plan

WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1)
              if not 0xD800 <= c <= 0xDFFF and ("a" + chr(c) + "b").split() == ["a", "b"]]


def test_token_columns_split_like_str_split_on_every_code_point():
    """Arrow's split against str.split on 'a?b', '?' and ' ?x ' for every code point ?."""
    chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    # (lone surrogates cannot be encoded: the tuple-at-a-time fallback takes them)
    for form in ("a{}b", "{}", " {}x "):
        texts = [form.format(ch) for ch in chars]
        rows, keys, _ = token_columns([{"text": t} for t in texts])
        want_rows, want_keys = [], []
        for r, t in enumerate(texts):
            for k in t.split():
                want_rows.append(r)
                want_keys.append(k)
        assert rows.tolist() == want_rows, form
        assert keys.to_pylist() == want_keys, form


text = st.lists(st.sampled_from(["a", "b", "cc", "", "  ", "\t", "\x1c", "\u3000", "\x85",
                                 "é", "a\u2028b"]), max_size=6).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 4), text), max_size=40),
       st.sampled_from([(10, 10), (10, 5), (10, 3), (7, 2), (4, 4)]),
       st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_process_columns_equals_process(steps, window, cuts):
    size, slide = window
    op = wordcount(size, slide)
    ts, items = 0, []
    for dt, t in steps:
        ts += dt
        items.append((ts, {"text": t}))
    want = per_tuple(op, items)
    inst = op.instance()
    got, a, k = [], 0, 0
    while a < len(items):
        run = items[a:a + cuts[k % len(cuts)]]
        a, k = a + len(run), k + 1
        inst.process_columns([t for t, _ in run], [p for _, p in run])
        got += inst.take()
    inst.finish()
    got += inst.take()
    assert multiset(got) == multiset(want)
    assert [t for t, _ in got] == sorted(t for t, _ in got)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 3), text), max_size=30), st.integers(1, 5),
       st.integers(1, 3))
def test_process_keyed_over_key_groups_equals_process(steps, groups, n_inst):
    """Instances sharing σ, each owning some key groups, together give the single
    instance's outputs (every row reaches every instance; each keeps the keys it owns)."""
    op = wordcount(6, 3)
    ts, items = 0, []
    for dt, t in steps:
        ts += dt
        items.append((ts, {"text": t}))
    want = per_tuple(op, items)
    sigma = SharedState(groups)
    assign = [g % n_inst for g in range(groups)]
    insts = [op.instance(sigma, j, assign) for j in range(n_inst)]
    got = []
    if items:
        t_col, keys, values = columnar.explode(op, [t for t, _ in items],
                                               [p for _, p in items])
        for inst in insts:
            inst.process_keyed(t_col, keys, values, first=items[0][0], last=items[-1][0])
    for inst in insts:
        inst.finish()
        got += inst.take()
    assert multiset(got) == multiset(want)


def test_process_keyed_rejects_time_going_back():
    inst = wordcount(10, 5).instance()
    inst.process(20, {"text": "a"})
    with pytest.raises(ValueError, match="non-decreasing"):
        inst.process_keyed([5], pa.array(["a"]), [1])


def test_process_columns_falls_back_to_the_tuple_path_on_bad_payloads():
    """A payload the columnar f_MK rejects goes through process(), which raises what the
    tuple-at-a-time operator raises (executors name the tuple); valid surrogate-free texts
    before it are counted as usual."""
    op = wordcount(10, 10)
    inst = op.instance()
    with pytest.raises(KeyError):
        inst.process_columns([1, 2], [{"text": "a"}, {"txt": "b"}])
    inst = op.instance()
    inst.process_columns([1, 2], [{"text": "a \ud800"}, {"text": "a"}])  # not UTF-8
    inst.finish()
    assert multiset(inst.take()) == multiset([(10, {"word": "a", "count": 2}),
                                              (10, {"word": "\ud800", "count": 1})])


def run_columnar_kernels(op, items, groups, partitions):
    """The columnar batch plan with Spark's shuffle done in Python."""
    src = plan.chunks_batch(pa, [(ts, n, 0, p) for n, (ts, p) in enumerate(items)])
    kernel = columnar.explode_kernel([], op, groups, list(range(partitions)))
    rows = [r for b in kernel(iter([src, src.slice(0, 0)])) for r in b.to_pylist()]
    got = []
    for part in range(partitions):
        mine = [r for r in rows if r["b"] == part]
        for r in mine:
            blob = pa.ipc.open_stream(r["p"]).read_all()
            assert all(plan.Buckets(groups, partitions).of(k) == part
                       for k in blob.column("k").to_pylist())
        batches = [pa.RecordBatch.from_pylist(mine[k:k + 2], schema=pa.schema(
            [("dest", pa.int32()), ("b", pa.int32()), ("p", pa.binary())]))
            for k in range(0, len(mine), 2)]
        for out in columnar.keyed_kernel(op, None)(iter(batches[::-1])):  # any order
            for raw in out.column("p").to_pylist():
                got.extend((ts, q) for ts, _, _, q in plan.loads(raw))
    return got


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 4), text), min_size=1, max_size=40),
       st.integers(1, 9), st.integers(1, 4))
def test_columnar_kernels_equal_process(steps, groups, partitions):
    op = wordcount(8, 4)
    ts, items = 0, []
    for dt, t in steps:
        ts += dt
        items.append((ts, {"text": t}))
    assert columnar.applies(op)
    assert multiset(run_columnar_kernels(op, items, groups, partitions)) == \
        multiset(per_tuple(op, items))


def test_explode_kernel_names_the_failing_tuple():
    op = wordcount(10, 10)
    src = plan.chunks_batch(pa, [(1, 0, 0, {"text": "a"}), (2, 1, 0, {"txt": "b"})])
    with pytest.raises(OperatorError, match=r"operator 'wordcount' failed on tuple ts=2 "
                                            r".*KeyError"):
        list(columnar.explode_kernel([], op, 4, [0, 1])(iter([src])))
    src = plan.chunks_batch(pa, [(1, 0, 0, {"text": "a \ud800"})])
    with pytest.raises(OperatorError, match=r"ts=1 .*surrogate"):
        list(columnar.explode_kernel([], op, 4, [0, 1])(iter([src])))


def test_token_columns_on_many_random_batches():
    """Random batches of whitespace-heavy texts (Arrow 26's split can mishandle the trailing
    whitespace of a batch's last string: token_columns must not)."""
    import random

    rnd = random.Random(7)
    alphabet = ["a", "b", "cc", "", "  ", "\t", "\x1c", "\u3000", "\x85", "é", "a\u2028b"]
    for _ in range(3000):
        texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
                 for _ in range(rnd.randint(1, 30))]
        rows, keys, _ = token_columns([{"text": t} for t in texts])
        assert keys.to_pylist() == [w for t in texts for w in t.split()], texts
        assert rows.tolist() == [r for r, t in enumerate(texts) for _ in t.split()], texts
