"""The parent's side of the SN columnar path (executors/sn_columnar.py): a pulse it explodes
while channels start goes straight from the batch it read to the owners' parts (no Arrow IPC
round trip of its own), exactly the parts the channel would have sent; the run reports the
parent's CPU beside the channels' (where a run's CPU goes: issue #16)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from columnar_cases import QUERIES, WORDS, picky
from columnar_cases import flow_of as _flow
from columnar_cases import reference_multiset as _reference
from columnar_cases import write_rows as _write
from conformance.contract import checked_multiset, diff
from stretchflow.batch import Batch
from stretchflow.executors.sn_channel import group_assignment
from stretchflow.executors.sn_columnar_channel import Channel, pack, unpack

PROC = {"channels": "processes"}


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    monkeypatch.setattr("stretchflow.runtime.pump.COLUMNAR_BATCH", 37)
    monkeypatch.setattr("stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH", 37)


def _sent(op, p, explode):
    """What channel 0 of ``p`` sends its peers (and keeps) for one pulse, tables as rows."""
    sent = []
    ch = Channel(0, op, p, 16, group_assignment(p, 16), lambda o, m: sent.append((o, m)))
    explode(ch)

    def rows(part):
        if part is None or part[0] == "py":
            return part
        t = part[1] if part[0] == "table" else pa.ipc.open_stream(part[1]).read_all()
        return ("rows", t.to_pylist())

    kept = {s: (rows(part), wm) for s, (part, wm) in ch.pending.items()}
    stats = ch.stats()
    del stats["busy_s"]  # a duration
    return [(o, m[0], m[1], rows(m[2]), m[3]) for o, m in sent], kept, stats


@pytest.mark.parametrize("query", ["wordcount", "paircount", "picky"])
def test_exploding_a_batch_directly_sends_what_its_ipc_form_sends(query):
    # picky: its columnar form refuses batches with "zz" (the per-tuple pairs path)
    texts = [" ".join(WORDS[(t * k) % len(WORDS)] for k in range(4)) for t in range(60)]
    b = Batch([t * 9 for t in range(60)], table=pa.table({"text": texts}))
    factory = picky if query == "picky" else QUERIES[query]
    for p in (1, 3):
        direct = _sent(factory(), p, lambda ch: ch.explode_batch(4, b, b.last))
        via_ipc = _sent(factory(), p, lambda ch: ch.explode(("batch", 4, pack(b), b.last)))
        assert direct == via_ipc
        assert direct[2]["rows_exploded"] > 0 and len(direct[0]) == p - 1
        if query == "wordcount":  # the columnar form: combined rows as tables
            assert direct[2]["rows_combined"] > 0 and direct[1][4][0][0] == "rows"
    payloads = Batch([1, 2], payloads=[{"text": "a b"}, {"text": "b c"}])  # no table
    assert _sent(QUERIES["wordcount"](), 2, lambda ch: ch.explode_batch(1, payloads, 2)) \
        == _sent(QUERIES["wordcount"](), 2,
                 lambda ch: ch.explode(("batch", 1, pack(payloads), 2)))
    assert unpack(pack(payloads)).payloads == payloads.payloads


def test_the_parent_explodes_without_packing_its_batch(tmp_path, monkeypatch):
    """Every pulse exploded by the parent (no channel counts as started) and the parent's
    pack (the dealt batch's IPC form) refusing to run: the output is still the reference's."""
    rows = [{"ts": t * 7, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(5))}
            for t in range(800)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)

    def no_pack(batch):
        raise AssertionError("the parent packed a batch it explodes itself")

    monkeypatch.setattr("stretchflow.executors.sn_columnar.pack", no_pack)
    monkeypatch.setattr("stretchflow.executors.sn_columnar._Run._channel_ready",
                        lambda self, j: False)
    flow, col = _flow(path, QUERIES["wordcount"]())
    res = flow.run("sn", parallelism=2, **PROC)
    c = res.extra["columnar"]
    assert c["batches_exploded_in_parent"] == c["batches"] == -(-len(rows) // 37)
    got, want = checked_multiset(col), _reference(path, QUERIES["wordcount"])
    assert got == want, diff(got, want)


def test_the_parents_cpu_is_reported_beside_the_channels(tmp_path):
    rows = [{"ts": t * 7, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(5))}
            for t in range(800)]
    path = tmp_path / "in.jsonl"
    _write(path, rows)
    flow, _ = _flow(path, QUERIES["wordcount"]())
    cpu0 = time.process_time()
    res = flow.run("sn", parallelism=2, **PROC)
    cpu = time.process_time() - cpu0
    c = res.extra["columnar"]
    # this process's CPU over the executor's run: within what the whole call took
    assert 0 < c["parent_cpu_s"] <= cpu
    assert len(c["cpu_s"]) == 2 and all(x > 0 for x in c["cpu_s"])


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_the_merger_sorts_channels_runs_that_end_where_they_began(order):
    """Two channels' last answers [6, 9] and [6]: the merged batch starts and ends at 6 yet is
    out of order until sorted (a shortcut that took equal ends for one window end emitted
    6, 9, 6: the conformance suite's two-tuple input on sn, 2 channels)."""
    from stretchflow.executors.sn_columnar import _merge

    runs = [Batch([6, 9], table=pa.table({"k": [2, 2]})), Batch([6], table=pa.table({"k": [0]}))]
    merged = _merge([runs[i] for i in order])
    assert [ts for ts, _ in merged.items()] == [6, 6, 9]
    assert sorted(r["k"] for _, r in merged.items()) == [0, 2, 2]
    assert [r["k"] for ts, r in merged.items() if ts == 9] == [2]


def test_two_keys_on_two_channels_come_out_in_timestamp_order(tmp_path):
    import stretchflow as sf

    path = tmp_path / "in.jsonl"
    path.write_text('{"ts": 0, "k": 0, "src": 0}\n{"ts": 3, "k": 2, "src": 0}\n')
    for channels in ("threads", "processes"):
        flow = sf.Flow()
        out = flow.source(sf.io.jsonl(str(path))).aggregate(
            size=6, slide=3, keys=("k", "src"), **sf.count()).collect()
        res = flow.run("sn", parallelism=2, channels=channels)
        assert res.extra["paths"], res.extra.get("columnar_fallback")
        assert [ts for ts, _ in out.items] == [3, 6, 6, 9], (channels, out.items)
