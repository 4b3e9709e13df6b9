"""SN process channels on whole Arrow batches (issue #16, executors/sn_columnar.py): the splitter
explodes each batch once and sends every channel its rows as Arrow IPC, the channels run the
columnar sliced A+'s kernels, and the output is the reference's (its tuple path, as oracle) at
1-3 channels and any number of key groups, for wordcount and paircount, for batches the
columnar f_MK refuses, with the same failing tuple named; runs the path does not cover take the
tuple path and say why; a channel that dies stops the run without a hang."""

from __future__ import annotations

import os
import threading

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stretchflow as sf
from columnar_cases import (
    QUERIES,
    WORDS,
    failing_tuple_case,
    fallback_matches_reference,
    tweets,
)
from columnar_cases import bounded as _bounded
from columnar_cases import flow_of as _flow
from columnar_cases import marked as _marked
from columnar_cases import picky as _picky
from columnar_cases import reference_multiset as _reference
from columnar_cases import write_rows as _write
from conformance.contract import checked_multiset, diff, multiset
from stretchflow.errors import OperatorError
from stretchflow.executors import sn
from stretchflow.executors.sn_channel import group_assignment
from stretchflow.executors.sn_columnar_channel import pack
from stretchflow.io.sources import JsonLines
from stretchflow.operators.aggregate import Aggregate
from stretchflow.operators.columnar_kernels import key_groups
from stretchflow.queries.wordcount import tokens_of, wordcount

PROC = {"channels": "processes"}
SETTINGS = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    # many source batches (pulses) per example, so windows close at batch boundaries
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 37)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 37)


@SETTINGS
@given(rows=tweets(), query=st.sampled_from(sorted(QUERIES)), p=st.integers(1, 3),
       groups=st.sampled_from([1, 5, 128]))
def test_same_output_as_the_reference(tmp_path, rows, query, p, groups):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, QUERIES[query])
    flow, col = _flow(path, QUERIES[query]())
    res = flow.run("sn", parallelism=p, key_groups=groups, **PROC)
    assert res.extra["paths"] == {flow.nodes[1].name: "columnar"}
    assert "columnar_fallback" not in res.extra
    assert res.total_in == len(rows)
    got = checked_multiset(col)
    assert got == want, diff(got, want)


def test_rows_are_split_between_channels_not_copied(tmp_path, monkeypatch):
    # every pulse dealt to its channel, none exploded by the parent while channels start
    monkeypatch.setattr("stretchflow.executors.sn_columnar._Run._channel_ready",
                        lambda self, j: True)
    rows = [{"ts": t * 7, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(5))}
            for t in range(2000)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    tokens = sum(sum(tokens_of(r["text"]).values()) for r in rows)
    flow, col = _flow(path, QUERIES["wordcount"]())
    res = flow.run("sn", parallelism=3, key_groups=16, **PROC)
    c = res.extra["columnar"]
    # batch seq is exploded by channel (seq - 1) % 3 into one row per token occurrence,
    # combined per (slice, word) of the batch, and each combined row goes to the one channel
    # owning its word: sent to another channel unless the exploding one owns it
    assign = group_assignment(3, 16)
    combined = shuffled = 0
    for seq, b in enumerate(JsonLines(path).batches(37), 1):
        pairs = {(ts - ts % 500, w) for ts, p in b.items() for w in tokens_of(p["text"])}
        combined += len(pairs)
        words = sorted({w for _, w in pairs})
        owner = dict(zip(words, (assign[g] for g in key_groups([pa.array(words)], 16)),
                         strict=True))
        shuffled += sum(owner[w] != (seq - 1) % 3 for _, w in pairs)
    assert c["rows_exploded"] == tokens and c["batches_exploded_in_parent"] == 0
    assert (c["rows_combined"], c["rows_shuffled"]) == (combined, shuffled)
    assert 0 < shuffled < combined < tokens
    assert res.extra["duplication_factor"] == 1.0
    assert c["ipc_bytes_to_channels"] > 0 and c["ipc_bytes_from_channels"] > 0
    assert c["batches"] == -(-len(rows) // 37)
    assert len(c["busy_s"]) == 3 and len(c["cpu_s"]) == 3
    assert all(x > 0 for x in c["cpu_s"])  # reported by every channel process itself
    assert checked_multiset(col) == _reference(path, QUERIES["wordcount"])


def test_pulses_the_parent_explodes_while_channels_start(tmp_path, monkeypatch):
    """A pulse whose channel has not started is exploded by the parent and its parts sent to
    the owners: here every pulse, or every other one (channel 1 never counts as started)."""
    rows = [{"ts": t * 7, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(5))}
            for t in range(1000)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    tokens = sum(sum(tokens_of(r["text"]).values()) for r in rows)
    want = _reference(path, QUERIES["paircount"])
    pulses = -(-len(rows) // 37)
    for p, ready, by_parent in ((1, set(), pulses), (2, {0}, pulses // 2), (3, set(), pulses)):
        monkeypatch.setattr("stretchflow.executors.sn_columnar._Run._channel_ready",
                            lambda self, j, ready=ready: j in ready)
        flow, col = _flow(path, QUERIES["paircount"]())
        res = flow.run("sn", parallelism=p, **PROC)
        c = res.extra["columnar"]
        assert c["batches_exploded_in_parent"] == by_parent
        assert c["rows_exploded"] > tokens  # paircount: pairs at distance 1 and 2
        got = checked_multiset(col)
        assert got == want, diff(got, want)


@SETTINGS
@given(rows=tweets(), p=st.integers(1, 3), groups=st.sampled_from([1, 64]))
def test_batches_the_columnar_form_refuses(tmp_path, rows, p, groups):
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, _picky)
    flow, col = _flow(path, _picky())
    res = flow.run("sn", parallelism=p, key_groups=groups, **PROC)
    assert res.extra["paths"] == {"wordcount": "columnar"}
    got = checked_multiset(col)
    assert got == want, diff(got, want)


def test_a_failing_tuple_is_named_as_tuple_at_a_time(tmp_path):
    path, want = failing_tuple_case(tmp_path)
    for p in (1, 3):
        flow, _ = _flow(path, QUERIES["wordcount"]())
        box = _bounded(lambda flow=flow, p=p: flow.run("sn", parallelism=p, **PROC))
        got = box.get("error")
        assert isinstance(got, OperatorError), box
        assert (got.ts, got.payload) == (want.ts, want.payload)


def _marked_rows():
    rows = [{"ts": t, "text": "a b c"} for t in range(0, 3000, 3)]
    rows[600] = {"ts": rows[600]["ts"], "text": "q q q q q q q", "mark": 1}
    return rows


def test_a_user_error_in_a_channel_process_is_named(tmp_path):
    path = tmp_path / "in.jsonl"
    _write(path, _marked_rows())

    def update(a, n):
        if n == 7:
            raise ZeroDivisionError("boom")
        return a + n

    flow, _ = _flow(path, _marked(update))
    box = _bounded(lambda: flow.run("sn", parallelism=2, **PROC))
    err = box.get("error")
    assert isinstance(err, OperatorError), box
    assert err.operator == "marked" and err.ts == 1800 and err.payload["mark"] == 1
    assert isinstance(err.__cause__, ZeroDivisionError)


def test_a_channel_process_that_dies_stops_the_run(tmp_path):
    path = tmp_path / "in.jsonl"
    _write(path, _marked_rows())

    def update(a, n):
        if n == 7:
            os._exit(3)  # no exception, no message: the process just vanishes
        return a + n

    flow, col = _flow(path, _marked(update))
    box = _bounded(lambda: flow.run("sn", parallelism=2, **PROC))
    assert isinstance(box.get("error"), RuntimeError), box
    assert "exited (code 3)" in str(box["error"])
    import multiprocessing as mp

    assert not [c for c in mp.active_children() if c.name.startswith("sn-channel")]
    assert not [t for t in threading.enumerate() if t.name.startswith("sn-")]


@pytest.mark.parametrize(("opts", "reason"), [
    ({"reconfigure": [(100, 2)], **PROC}, "reconfiguring"),
    ({"controller": "threshold", **PROC}, "reconfiguring"),
    ({"checkpoint": "CK", **PROC}, "checkpointed"),
    ({"columnar": "off", **PROC}, "columnar='off'"),
])
def test_runs_the_path_does_not_cover_take_tuples_and_say_why(tmp_path, opts, reason):
    fallback_matches_reference(tmp_path, "sn", reason, **opts)


def test_a_source_without_batches_or_another_shape_takes_tuples(tmp_path):
    rows = [{"ts": t * 5, "text": "a b"} for t in range(300)]
    flow = sf.Flow()
    flow.source(sf.io.iterable(rows)).oplus(QUERIES["wordcount"]()).collect()
    res = sn.run(flow, parallelism=2, **PROC)
    assert "no batches" in res.extra["columnar_fallback"]["wordcount"]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    flow = sf.Flow()
    counted = flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]())
    counted.collect()
    counted.map(lambda p: p).collect()  # two readers of the A+: not one line
    res = sn.run(flow, parallelism=2, **PROC)
    assert "one source" in res.extra["columnar_fallback"]["wordcount"]
    with pytest.raises(Exception, match="columnar"):
        sn.run(flow, columnar="maybe")


def test_empty_input_and_a_bad_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"")
    flow, col = _flow(path, QUERIES["wordcount"]())
    res = flow.run("sn", parallelism=2, **PROC)
    assert res.extra["paths"] == {"wordcount": "columnar"} and col.items == []
    rows = [{"ts": t, "text": "a b"} for t in range(0, 900, 3)]
    lines = [orjson.dumps(r) for r in rows]
    lines[200] = b'{"ts": 600, "text": '  # cut short: the source names the line
    path.write_bytes(b"\n".join(lines) + b"\n")
    flow, _ = _flow(path, QUERIES["wordcount"]())
    with pytest.raises(Exception) as want:
        flow.run("reference", columnar="off")
    flow, _ = _flow(path, QUERIES["wordcount"]())
    box = _bounded(lambda: flow.run("sn", parallelism=2, **PROC))
    assert type(box.get("error")) is type(want.value), box
    assert str(box["error"]) == str(want.value)


def test_keys_key_groups_cannot_hash_go_per_key(tmp_path):
    """A columnar f_MK with float keys (no numpy hash): those batches are split per key in
    Python, with the same output."""
    import numpy as np
    import pyarrow as pa

    def make():
        def columns(payloads):
            xs = (payloads.column("x").to_pylist() if hasattr(payloads, "column")
                  else [p["x"] for p in payloads])
            return np.arange(len(xs)), pa.array([float(x) for x in xs]), np.ones(len(xs),
                                                                                np.int64)

        return Aggregate(size=100, slide=50, keys=lambda t: float(t["x"]), init=int,
                         update=lambda a, v: a + 1, output=lambda k, n: {"x": k, "n": n},
                         name="floats", columns=columns, combine=lambda a, b: a + b,
                         output_columns=("x", "n"))

    path = tmp_path / "in.jsonl"
    _write(path, [{"ts": t, "x": t % 7 / 2} for t in range(400)])
    want = _reference(path, make)
    flow, col = _flow(path, make())
    res = flow.run("sn", parallelism=2, **PROC)
    assert res.extra["paths"] == {"floats": "columnar"}
    assert checked_multiset(col) == want


def test_two_sinks_read_the_windows(tmp_path):
    rows = [{"ts": t * 11, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(4))}
            for t in range(500)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    flow = sf.Flow()
    counts = flow.source(JsonLines(path)).oplus(QUERIES["paircount"]())
    a, b = counts.collect(), counts.collect()
    res = flow.run("sn", parallelism=2, **PROC)
    assert res.extra["paths"] == {"paircount": "columnar"}
    want = _reference(path, QUERIES["paircount"])
    assert checked_multiset(a) == want and checked_multiset(b) == want


# -- the channels' side without processes: parts in any order -------------------------------------
def _pulses(rows, size):
    """``rows`` as source batches of ``size`` (pulses 1..), each with its watermark."""
    from stretchflow.batch import Batch

    out = []
    for i in range(0, len(rows), size):
        chunk = rows[i:i + size]
        b = Batch([r["ts"] for r in chunk], table=pa.table({"text": [r["text"] for r in chunk]}))
        out.append((len(out) + 1, pack(b), chunk[-1]["ts"]))
    return out


@SETTINGS
@given(rows=tweets(max_size=200), query=st.sampled_from(sorted(QUERIES)), p=st.integers(1, 3),
       groups=st.sampled_from([1, 5, 128]), seed=st.randoms(use_true_random=False))
def test_channels_apply_parts_in_pulse_order_whatever_order_they_come(tmp_path, rows, query, p,
                                                                     groups, seed):
    """p :class:`Channel` objects wired by lists instead of queues; every channel's messages
    are delivered in a random order (a peer's part of a later pulse before an earlier one's):
    each channel answers every pulse once, in order, with windows in timestamp order, and
    together they give the reference's output."""
    from stretchflow.executors.sn_columnar_channel import Channel, unpack

    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, QUERIES[query])
    inbox: list[list] = [[] for _ in range(p)]
    assign = group_assignment(p, groups)
    chans = [Channel(j, QUERIES[query](), p, groups, assign,
                     lambda o, m: inbox[o].append(m)) for j in range(p)]
    pulses = _pulses(rows, 23)
    for seq, packed, wm in pulses:
        inbox[(seq - 1) % p].append(("batch", seq, packed, wm))
    got, answered = [], [[] for _ in range(p)]
    while any(inbox):
        j = seed.choice([j for j in range(p) if inbox[j]])
        msg = inbox[j].pop(seed.randrange(len(inbox[j])))
        (chans[j].explode if msg[0] == "batch" else chans[j].receive)(msg)
        for kind, jj, out, _wm, seq in chans[j].ready():
            assert (kind, jj) == ("out", j)
            answered[j].append(seq)
            if out is not None:
                b = unpack(out)
                assert list(b.ts) == sorted(b.ts)
                got.extend(b.items())
    for ch in chans:
        ch.total = len(pulses)
        assert ch.done and not ch.pending
        _, _, out, stats = ch.end()
        got.extend(unpack(out).items() if out is not None else [])
        assert stats["rows_combined"] <= stats["rows_exploded"]
    assert answered == [list(range(1, len(pulses) + 1))] * p
    assert multiset(got) == want, diff(multiset(got), want)


def test_a_pulse_that_comes_twice_is_an_error():
    from stretchflow.executors.sn_columnar_channel import Channel

    ch = Channel(0, wordcount(size=100, slide=50), 2, 4, group_assignment(2, 4), None)
    ch.receive(("part", 2, None, 10))
    assert ch.ready() == []  # pulse 1 first
    with pytest.raises(RuntimeError, match="pulse 2 twice"):
        ch.receive(("part", 2, None, 10))
    ch.receive(("part", 1, None, 5))
    assert [r[4] for r in ch.ready()] == [1, 2]
    with pytest.raises(RuntimeError, match="pulse 1 twice"):
        ch.receive(("part", 1, None, 5))


# -- the channels as processes: one lagging, one dying, a small window ---------------------------
def _lagging(lag_channel):
    """wordcount whose columnar f_MK sleeps in channel process ``lag_channel`` (so the other
    channels run ahead and get its parts late) and exits the process (code 4) on a batch
    holding the token "die" there."""
    op = wordcount(size=2000, slide=500)

    def columns(payloads, _columns=op.columns):
        import multiprocessing as mp
        import time

        if mp.current_process().name == f"sn-channel-{lag_channel}":
            if any("die" in t.split() for t in payloads.column("text").to_pylist()):
                os._exit(4)
            time.sleep(0.01)  # the lagging channel
        return _columns(payloads)

    op.columns = columns
    return op


def test_a_lagging_channel_gives_the_same_output(tmp_path):
    rows = [{"ts": t * 13, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(4))}
            for t in range(1500)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    want = _reference(path, QUERIES["wordcount"])
    for p, capacity in ((2, None), (3, 37)):  # capacity 37: 2 pulses a channel in flight
        flow, col = _flow(path, _lagging(1))
        res = flow.run("sn", parallelism=p, capacity=capacity, **PROC)
        assert res.extra["paths"] == {"wordcount": "columnar"}
        got = checked_multiset(col)
        assert got == want, diff(got, want)


def test_a_channel_that_dies_while_exploding_stops_the_run(tmp_path, monkeypatch):
    # every pulse dealt to its channel (none exploded by the parent while channels start)
    monkeypatch.setattr("stretchflow.executors.sn_columnar._Run._channel_ready",
                        lambda self, j: True)
    rows = [{"ts": t * 13, "text": "a b c"} for t in range(1500)]
    rows[900]["text"] = "a die"  # in pulse 25 (batches of 37): channel 0 explodes it
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    for p in (2, 3):
        flow, _ = _flow(path, _lagging(0))
        box = _bounded(lambda flow=flow, p=p: flow.run("sn", parallelism=p, **PROC))
        err = box.get("error")
        assert isinstance(err, RuntimeError), box
        assert "exited (code 4)" in str(err)
        import multiprocessing as mp

        assert not [c for c in mp.active_children() if c.name.startswith("sn-channel")]
        assert not [t for t in threading.enumerate() if t.name.startswith("sn-")]
