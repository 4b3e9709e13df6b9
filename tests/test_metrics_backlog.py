"""Backlog and checkpoint durations in a run's metrics (issue #18 item 2): an operator slower
than its source leaves tuples waiting in its input, and every engine that samples metrics says
how many (``backlog`` in the MetricsLog rows); each checkpoint's duration, write time and
bytes are measured and agree with what was committed on disk; the sn engine records latency."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import stretchflow as sf
from stretchflow.executors import ordered
from stretchflow.runtime.checkpoint import MANIFEST
from stretchflow.runtime.checkpoint_stats import CheckpointStats
from stretchflow.runtime.metrics import watching

N = 1_500


def slow_flow(n: int = N, sleep: float = 0.0004, out: Path | None = None) -> sf.Flow:
    """An aggregation whose update sleeps: ~0.6 s of work behind an unpaced source, so the
    operator's input fills up while the source runs ahead."""
    flow = sf.Flow("slow")

    def update(s: int, t: dict) -> int:
        time.sleep(sleep)  # the slow operator under test
        return s + 1

    agg = flow.source(sf.io.iterable([{"ts": i, "k": i % 7} for i in range(n)])).aggregate(
        size=100, slide=100, keys=lambda t: [t["k"]], init=lambda: 0, update=update,
        output=lambda k, s: {"k": k, "n": s})
    if out is None:
        agg.collect()
    else:
        agg.sink(out)
    return flow


def paced_count_flow(name: str, n: int, keys: int, rate: int, window: int) -> sf.Flow:
    """A count per key in tumbling windows of ``window`` ms over ``n`` records (one per ms of
    event time, ``keys`` keys in turn), the source paced at ``rate`` tuples/s: an operator
    that keeps up with its source."""
    flow = sf.Flow(name)
    src = sf.io.iterable([{"ts": i, "k": i % keys} for i in range(n)])
    src.at_rate(rate)
    flow.source(src).aggregate(size=window, slide=window, keys=lambda t: [t["k"]],
                               init=lambda: 0, update=lambda s, t: s + 1,
                               output=lambda k, s: {"k": k, "n": s}).collect()
    return flow


# engine -> options that make it sample metrics every 50 ms (sn samples for its controller;
# ordered has no option: the test sets its period)
SAMPLING = {
    "ordered": {"parallelism": 2},
    "vsn": {"metrics_interval": 0.05},
    "sn": {"metrics_interval": 0.05, "controller": "threshold", "max_parallelism": 1,
           "batch": 16, "capacity": 64},
    "slack": {"metrics_interval": 0.05, "capacity": 64},
}


@pytest.mark.parametrize("engine", sorted(SAMPLING))
def test_a_slow_operator_has_a_backlog(engine, monkeypatch):
    monkeypatch.setattr(ordered, "METRICS_PERIOD", 0.05)
    res = slow_flow().run(engine=engine, **SAMPLING[engine])
    rows = [r for r in res.extra["metrics"] if r["operator"] == "aggregate"]
    assert rows, f"{engine}: no metrics row for the aggregate"
    backlog = [r["backlog"] for r in rows]
    assert all(isinstance(b, int) for b in backlog), backlog
    # the source reads its 1 500 tuples in a few ms, the operator needs ~0.6 s: while it
    # works, what the source read and it has not consumed waits in its input
    assert max(backlog) > 0, f"{engine}: backlog never above 0: {backlog}"
    # never more than was read (entries: tuples plus watermarks and control tuples)
    assert max(backlog) <= 2 * N, backlog


def test_a_paced_fast_operator_has_less_backlog_than_a_slow_one():
    """The measure tells the two apart: the same operator without the sleep, its source
    paced, keeps (nearly) nothing waiting."""
    flow = paced_count_flow("fast", n=600, keys=7, rate=3_000, window=100)
    fast = [r["backlog"] for r in flow.run(engine="vsn", metrics_interval=0.05)
            .extra["metrics"]]
    slow = [r["backlog"] for r in slow_flow().run(engine="vsn", metrics_interval=0.05)
            .extra["metrics"]]
    assert fast and slow
    assert sorted(fast)[len(fast) // 2] < max(slow) / 4, (fast, slow)


# -- checkpoint durations -------------------------------------------------------------------------
class OnDisk:
    """At each commit (called right after the manifest is written, before anything else
    changes the directory), what the directory holds."""

    def __init__(self, path: Path):
        self.path = path
        self.seen: list[dict] = []

    def on_checkpoint(self, stats: CheckpointStats, rec: dict) -> None:
        man = (self.path / MANIFEST).read_bytes()
        m = json.loads(man)
        self.seen.append({"epoch": m["epoch"], "cut": m["cut"],
                          "bytes": (self.path / m["state"]).stat().st_size + len(man),
                          "rec": dict(rec)})


def run_checkpointed(engine: str, tmp_path: Path, **options) -> tuple[sf.RunResult, OnDisk]:
    ck = tmp_path / "ck"
    disk = OnDisk(ck)

    def seen(obj: object) -> None:
        if isinstance(obj, CheckpointStats):
            obj.listeners.append(disk)

    with watching(seen):
        res = slow_flow(N, 0.0003, tmp_path / "out.jsonl").run(
            engine=engine, checkpoint=str(ck), checkpoint_every=300, **options)
    return res, disk


@pytest.mark.parametrize("engine", ["reference", "vsn", "sn", "ordered", "slack"])
def test_each_checkpoint_is_measured_as_committed(engine, tmp_path):
    res, disk = run_checkpointed(engine, tmp_path)
    assert res.extra["checkpoints"] >= 2, res.extra["checkpoints"]  # every 300 of 1 500 tuples
    # one record per manifest the directory held, in commit order, with its epoch and cut
    assert len(disk.seen) == res.extra["checkpoints"]
    for d in disk.seen:
        assert (d["rec"]["epoch"], d["rec"]["cut"]) == (d["epoch"], d["cut"])
        # what the checkpoint wrote: its state file and its manifest, byte for byte
        assert d["rec"]["bytes"] == d["bytes"]
    epochs = [d["epoch"] for d in disk.seen]
    assert epochs == sorted(set(epochs))
    for d in disk.seen:
        rec = d["rec"]
        # the write is part of the checkpoint, which starts earlier (barrier injected)
        assert 0 < rec["write_ms"] <= rec["duration_ms"]
    # each checkpoint happens inside the run: none lasts longer than the run
    assert all(d["rec"]["duration_ms"] / 1000 <= res.elapsed for d in disk.seen)
    times = [d["rec"]["time"] for d in disk.seen]
    assert times == sorted(times)


@pytest.mark.parametrize("engine", ["vsn", "sn", "ordered", "slack"])
def test_checkpoint_log_in_the_result(engine, tmp_path):
    res, disk = run_checkpointed(engine, tmp_path)
    log = res.extra["checkpoint_log"]
    assert [r["epoch"] for r in log] == [d["epoch"] for d in disk.seen]
    assert len(log) == res.extra["checkpoints"]
    assert all(r["duration_ms"] > 0 and r["bytes"] > 0 for r in log)
    assert sum(r["write_ms"] for r in log) / 1000 <= res.elapsed


def test_sn_records_latency():
    flow = paced_count_flow("lat", n=4_000, keys=5, rate=8_000, window=50)
    t0 = time.perf_counter()
    res = flow.run(engine="sn", parallelism=2)
    wall_ms = (time.perf_counter() - t0) * 1000
    lat = res.extra["latency_ms"]
    # 80 windows of 5 keys: outputs throughout the paced run (~0.5 s), sampled per batch
    assert lat["samples"] >= 20, lat
    # a latency is the time from an input entering to an output leaving: inside the run
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] < wall_ms, (lat, wall_ms)
    assert 0 < len(res.extra["latency_series"]) <= lat["samples"]
