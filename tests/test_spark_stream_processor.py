"""The streaming path's Python side (routing kernels and the per-key-group
``StatefulProcessor``) driven by a simulation of Structured Streaming, without a Spark
session, against the reference executor.

The simulation keeps what the processor relies on: the input split into micro-batches; the
watermark of batch k is the latest row ts of batches before it (delay 0, initially 0); each
key group with rows gets ``handleInputRows``, then every registered event-time timer at or
below the watermark fires (``handleExpiredTimer``) and is removed; state and timers live per
group across batches; a last no-data batch runs once the watermark has reached the end rows.
Random inputs, batch cuts and key-group counts check both routes (the columnar one for
wordcount, the tuple-at-a-time one for paircount and a wordcount without ``columns``) and
the processor's wake-up times: a group that gets no rows must still emit when its windows
close, and every output must leave in the micro-batch whose watermark reaches its ts.
"""

import json

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset, per_tuple
from stretchflow.errors import SourceError
from stretchflow.io.sources import rate_tweet
from stretchflow.queries.wordcount import paircount, wordcount
from stretchflow.spark import columnar, plan, streaming


class FakeValueState:
    def __init__(self, store: dict, key: int):
        self.store, self.key = store, key

    def get(self):
        return self.store.get(self.key)

    def exists(self):
        return self.key in self.store

    def update(self, value):
        self.store[self.key] = value

    def clear(self):
        self.store.pop(self.key, None)


class FakeHandle:
    """One group's view of the state store and its timers (the processor is re-inited per
    call here; Spark re-inits it per partition and batch)."""

    def __init__(self, store: dict, timers: dict, key: int):
        self.store, self.timers, self.key = store, timers, key

    def getValueState(self, name, schema):
        return FakeValueState(self.store, self.key)

    def registerTimer(self, t):
        self.timers.setdefault(self.key, set()).add(t)

    def deleteTimer(self, t):
        self.timers.get(self.key, set()).discard(t)


class Values:
    def __init__(self, wm=None, expiry=None):
        self.wm, self.expiry = wm, expiry

    def getCurrentWatermarkInMs(self):
        return self.wm

    def getExpiryTimeInMs(self):
        return self.expiry


def simulate(op, items, cuts, n_groups):
    """Outputs of the streaming plan of ``op`` over ``items`` (JSON lines in files) cut into
    micro-batches."""
    lines = [json.dumps({"ts": ts, **p}) for ts, p in items]
    lines.append(streaming.end_marker(items[-1][0]).strip())
    bounds = sorted({0, len(lines), *(c % len(lines) for c in cuts)})
    batches = [pa.RecordBatch.from_pydict({"value": lines[a:b], "file": ["f"] * (b - a)})
               for a, b in zip(bounds, bounds[1:], strict=False)]
    return run_batches(op, batches, streaming.json_reader("in0", "ts"), n_groups)


def run_batches(op, batches, read, n_groups):
    """The processor over the routed rows of ``batches`` (one micro-batch each, then one
    without data)."""
    kernel = (streaming.stream_explode_kernel([], op, n_groups, read)
              if columnar.applies(op) else
              streaming.stream_route_kernel([], op, 0, n_groups, read))
    store, timers, out = {}, {}, []
    prev_wm, wm, seen = -1, 0, 0

    def call(g, rows=None, expiry=None):
        proc = streaming.make_processor(op, n_groups, 1)
        proc.init(FakeHandle(store, timers, g))
        if rows is None:
            res = proc.handleExpiredTimer((g,), Values(wm), Values(expiry=expiry))
        else:
            res = proc.handleInputRows((g,), iter([rows]), Values(wm))
        for df in res:
            for raw in df["p"]:
                for ts, q in plan.loads(raw):
                    # emitted in the first batch whose watermark reaches it: the sink then
                    # sees a ts-sorted stream across micro-batches
                    assert prev_wm < ts <= wm, (prev_wm, ts, wm)
                    out.append((ts, q))

    for batch in [*batches, None]:  # the last: no data, the watermark reaches the end rows
        rows = []
        if batch:
            rows = [r for b in kernel(iter([batch])) for r in b.to_pylist()]
        df = pd.DataFrame(rows, columns=["g", "ts", "i", "seq", "sub", "p", "k"])
        for g, grp in df.groupby("g"):
            call(int(g), grp.reset_index(drop=True))
        for g in sorted(timers):
            for t in sorted(timers[g]):
                if t <= wm:
                    timers[g].discard(t)
                    call(g, expiry=t)
        seen = max([seen, *(r["ts"] for r in rows)])
        prev_wm, wm = wm, seen
    assert not any(timers.values()), "a timer was left registered after the end"
    assert not store, "a group kept state after the end"
    return out


text = st.lists(st.sampled_from(["a", "b", "c", "dd", "e f", " "]), max_size=5).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 7), text), min_size=1, max_size=40),
       st.lists(st.integers(0, 60), max_size=6), st.integers(1, 7),
       st.sampled_from(["columnar", "tuples", "pairs"]))
def test_stream_processor_equals_reference(steps, cuts, n_groups, route):
    op = wordcount(8, 4) if route != "pairs" else paircount(8, 4, distance=2)
    if route == "tuples":
        op.columns = None
    assert columnar.applies(op) == (route == "columnar")
    ts, items = 1, []
    for dt, t in steps:
        ts += dt
        items.append((ts, {"text": t}))
    assert multiset(simulate(op, items, cuts, n_groups)) == multiset(per_tuple(op, items))


def test_a_group_without_rows_emits_when_its_windows_close():
    """The group of "a" gets rows only in the first batch: its windows [-5, 5) and [0, 10)
    must close on its timers, in the batches whose watermarks (6, then 12) reach them."""
    op = wordcount(10, 5)
    assert plan.Buckets(64, 64).of("a") != plan.Buckets(64, 64).of("b")
    items = [(1, {"text": "a"}), (2, {"text": "b"}), (6, {"text": "b"}), (12, {"text": "b"}),
             (30, {"text": "b"})]
    for route in ("columnar", "tuples"):
        if route == "tuples":
            op.columns = None
        assert multiset(simulate(op, items, [1, 2, 3, 4], 64)) == \
            multiset(per_tuple(op, items))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 60), st.sampled_from([300, 1000, 4000]), st.lists(st.integers(0, 90),
       max_size=5), st.integers(1, 5), st.booleans(), st.booleans())
def test_rate_source_stream_equals_reference(rows, rate, cuts, n_groups, pairs, shuffle):
    """Spark's rate source: micro-batches are ranges of values, each spread over partitions
    (``shuffle``: out of order inside a batch), rows past ``rows`` keep coming and must be
    dropped, the end of input comes after the last row wherever it falls."""
    op = paircount(8, 4, distance=2) if pairs else wordcount(8, 4)
    src = sf.io.rate(rate, rows=rows, payload="tweet")
    bounds = sorted({0, rows + 7, *(c % (rows + 7) for c in cuts)})
    batches = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        vals = list(range(a, b))
        if shuffle:
            vals = vals[1::2] + vals[::2]  # two partitions' rows, one after the other
        batches.append(pa.RecordBatch.from_pydict({"value": pa.array(vals, pa.int64())}))
    got = run_batches(op, batches, streaming.rate_reader(src), n_groups)
    assert multiset(got) == multiset(per_tuple(op, list(src.items())))


def test_rate_reader_drops_rows_past_the_end_and_marks_the_end_once():
    src = sf.io.rate(2000, rows=5, payload="tweet")
    batch = pa.RecordBatch.from_pydict({"value": pa.array([5, 0, 3, 4, 7], pa.int64())})
    got = list(streaming.rate_reader(src)(batch))
    assert [(ts, seq) for ts, _, seq in got] == [(0, 0), (1, 3), (2, 4), (2, 0)]
    assert [rec is None for _, rec, _ in got] == [False, False, False, True]
    assert got[1][1] == {**rate_tweet(3), "ts": 1}
    # the local engines see the same tuples
    assert [(ts, p) for ts, p in src.items()][3] == (1, {**rate_tweet(3), "ts": 1})


def test_rate_source_rejects_bad_settings_and_payloads():
    with pytest.raises(ValueError, match="rows_per_second must be >= 1"):
        sf.io.rate(0)
    with pytest.raises(ValueError, match="rows must be >= 1"):
        sf.io.rate(10, rows=0)
    with pytest.raises(ValueError, match="unknown payload 'tweets'"):
        sf.io.rate(10, payload="tweets")
    with pytest.raises(SourceError, match=r"source 'rate', row 0: payload\(0\) must return a "
                                          r"dict, got int"):
        list(sf.io.rate(10, rows=2, payload=lambda v: v).items())
    assert rate_tweet(7) == rate_tweet(7) and rate_tweet(7) != rate_tweet(8)
