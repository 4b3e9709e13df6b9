"""Event time for disordered input (issue #19, docs/event-time.md): bounded out-of-orderness
(``max_delay``) and late tuples (``late="error" | "drop" | "side"``) on every local engine.

* Input shuffled so that no tuple arrives more than D ms of event time after a later one,
  read with ``max_delay >= D``, gives exactly the output of the timestamp-sorted input.
* With a smaller ``max_delay``, the late tuples — computed here by brute force from the
  definition (ts below the largest earlier ts minus ``max_delay``) — are exactly those the
  ``late="side"`` stream carries, at the watermark they were found behind; the main output is
  that of the sorted on-time tuples; ``late="drop"`` counts as many; all alike on every engine
  and parallelism.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import stretchflow as sf
from stretchflow.queries import build_query

from .contract import QUERY_PARAMS, Variant, canonical, multiset, query_inputs, require

#: the local engines at parallelism 1 and above (spark: tests below, slow)
ENGINES = [
    ("reference", {}),
    ("vsn", {"parallelism": 1}),
    ("vsn", {"parallelism": 3}),
    ("sn", {"parallelism": 2, "channels": "threads"}),
    ("ordered", {"parallelism": 1, "scheduler": "qst"}),
    ("ordered", {"parallelism": 2, "scheduler": "lp"}),
    ("slack", {"parallelism": 2}),
]
ENGINE_IDS = [f"{e}-" + "-".join(f"{v}" for v in o.values()) if o else e for e, o in ENGINES]
#: queries with one and with two sources, an O+ whose order of ties matters (the wordcount
#: aggregates commute, scalejoin's counter does not)
QUERIES = ("wordcount", "scalejoin")


def shuffled(recs: list[dict], d: int, seed: int) -> list[dict]:
    """``recs`` (ts-sorted) in an arrival order where each tuple comes at ts + a random delay
    in [0, d] ms: a tuple then arrives at most d ms of event time after any later one."""
    rnd = random.Random(seed)
    keyed = [(r["ts"] + rnd.randint(0, d), i, r) for i, r in enumerate(recs)]
    return [r for _, _, r in sorted(keyed, key=lambda k: (k[0], k[1]))]


def ts_sorted(arrival: list[dict]) -> list[dict]:
    """What a source must release: timestamp order, ties in arrival order (stable sort)."""
    return sorted(arrival, key=lambda r: r["ts"])


def brute_force_late(arrival: list[dict], max_delay: int) -> list[tuple[int, dict]]:
    """The late tuples by the definition, quadratically: record i is late when its ts is
    below W_i = (largest ts of records 0..i-1) − max_delay; it is reported at W_i."""
    out = []
    for i, r in enumerate(arrival):
        if i and r["ts"] < max(a["ts"] for a in arrival[:i]) - max_delay:
            out.append((max(a["ts"] for a in arrival[:i]) - max_delay, r))
    return out


def inputs(query: str, seed: int) -> list[list[dict]]:
    return query_inputs(query, seed, 60 if query == "scalejoin" else 150)


def build(query: str, ins: list[list[dict]], *, side: bool = False, **source_kw: Any
          ) -> tuple[sf.Flow, sf.io.Collector, list[sf.io.Collector]]:
    """Built-in ``query`` over ``ins`` (one in-memory source per list, with ``source_kw``);
    with ``side``, each source's late stream collected as is."""
    flow = sf.Flow(query)
    streams = [flow.source(sf.io.iterable(recs, name=f"in{i}", **source_kw))
               for i, recs in enumerate(ins)]
    out = build_query(query, streams, **QUERY_PARAMS[query]).collect()
    late = [s.late().collect() for s in streams] if side else []
    return flow, out, late


def sorted_output(query: str, ins: list[list[dict]]) -> dict:
    flow, out, _ = build(query, ins)
    flow.run("reference")
    return multiset(out)


def assert_sorted_ts(items: list[tuple[int, Any]], what: str) -> None:
    tss = [ts for ts, _ in items]
    assert tss == sorted(tss), f"{what}: output goes back in time"


@pytest.mark.parametrize("engine,options", ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("query", QUERIES)
def test_max_delay_covering_the_shuffle_gives_the_sorted_output(query, engine, options):
    d = 700
    for seed in (1, 2):
        arrival = [shuffled(recs, d, seed + i) for i, recs in enumerate(inputs(query, seed))]
        assert any(a != ts_sorted(a) for a in arrival), "the shuffle changed nothing"
        want = sorted_output(query, [ts_sorted(a) for a in arrival])
        for max_delay in (d, f"{d + 300}ms"):
            flow, out, _ = build(query, arrival, max_delay=max_delay)
            flow.run(engine, **options)
            assert_sorted_ts(out.items, f"{engine} {options}")
            assert multiset(out) == want, f"{engine} {options} max_delay={max_delay}"


@pytest.mark.parametrize("engine,options", ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("query", QUERIES)
def test_late_tuples_are_those_behind_the_watermark(query, engine, options):
    d, max_delay, seed = 900, 150, 3
    arrival = [shuffled(recs, d, seed + i) for i, recs in enumerate(inputs(query, seed))]
    want_late = [brute_force_late(a, max_delay) for a in arrival]
    assert all(want_late), "the test needs late tuples on every source"
    on_time = [[r for r in a if all(r is not lr for _, lr in wl)]
               for a, wl in zip(arrival, want_late, strict=True)]
    want = sorted_output(query, [ts_sorted(a) for a in on_time])

    flow, out, late = build(query, arrival, side=True, late="side", max_delay=max_delay)
    result = flow.run(engine, **options)
    assert multiset(out) == want, f"{engine} {options}: main output"
    for i, (col, wl) in enumerate(zip(late, want_late, strict=True)):
        # the side stream: exactly the late records, unchanged, in arrival order, each at
        # the watermark it was behind (which never goes back)
        assert [(ts, canonical(p)) for ts, p in col.items] == \
               [(w, canonical(r)) for w, r in wl], f"{engine} {options}: late stream in{i}"
    assert result.extra["late"] == {f"in{i}": len(wl) for i, wl in enumerate(want_late)}

    flow, out, _ = build(query, arrival, late="drop", max_delay=max_delay)
    result = flow.run(engine, **options)
    assert multiset(out) == want, f"{engine} {options}: main output with late='drop'"
    assert result.extra["late"] == {f"in{i}": len(wl) for i, wl in enumerate(want_late)}


def test_late_error_names_source_record_ts_and_watermark():
    arrival = [{"ts": 10}, {"ts": 50}, {"ts": 20}]
    flow, _, _ = build("wordcount", [[{**r, "text": "a"} for r in arrival]], max_delay=25)
    with pytest.raises(sf.SourceError, match=r"source 'in0', record 3: late tuple: "
                       r"timestamp 20 is behind the watermark 25") as e:
        flow.run("vsn", parallelism=2)
    assert "\n" not in str(e.value)


def test_late_stream_can_be_processed_and_flow_default_applies():
    """A flow's ``late=`` is the default of sources that do not say; the late stream is a
    stream like any other (here windowed and counted)."""
    arrival = [{"ts": t, "text": "a"} for t in (0, 100, 30, 250, 40, 90, 260, 120, 255)]
    flow = sf.Flow("late", late="side")
    s = flow.source(sf.io.iterable(arrival, name="in", max_delay=50))
    assert s.late() is s.late()  # one late stream per source
    n = s.late().aggregate(size=100, keys=lambda t: "late", init=int,
                           update=lambda c, t: c + 1, output=lambda k, c: c).collect()
    s.map(lambda t: t["ts"]).collect()
    # late at W = max ts seen - 50: 30 at W 50; 40 and 90 at W 200 (after 250); 120 at W 210
    # (after 260); 255 is not late (255 >= 210). Windows of 100 ms: [0, 100) 1, [200, 300) 3
    for engine in ("reference", "vsn", "slack"):
        result = flow.run(engine, parallelism=2) if engine != "reference" else flow.run()
        assert result.extra["late"] == {"in": 4}
        assert sorted(n.items) == [(100, 1), (300, 3)], engine
        n.items.clear()


def test_late_side_needs_a_rereadable_deterministic_source():
    flow = sf.Flow("f")
    one_shot = flow.source(sf.io.iterable(iter([{"ts": 1}]), late="side", max_delay=5))
    with pytest.raises(sf.FlowDefinitionError, match="cannot be read twice"):
        one_shot.late()
    idle = flow.source(sf.io.iterable([{"ts": 1}], name="live", late="side", max_delay=5,
                                      idle_timeout="1s"))
    with pytest.raises(sf.FlowDefinitionError, match="'live'.*idle timeout"):
        idle.late()
    plain = flow.source(sf.io.iterable([{"ts": 1}], name="plain"))
    with pytest.raises(sf.FlowDefinitionError, match="late='error'.*late='side'"):
        plain.late()
    with pytest.raises(sf.FlowDefinitionError, match="not a source stream"):
        plain.map(lambda t: t).late()
    with pytest.raises(ValueError, match="source 'x': late must be one of"):
        sf.io.iterable([], name="x", late="ignore")
    with pytest.raises(ValueError, match="source 'x': max_delay: cannot read duration"):
        sf.io.iterable([], name="x", max_delay="soon")


@pytest.mark.slow
@pytest.mark.parametrize("query", QUERIES)
def test_spark_batch_agrees(query):
    """The Spark engine's batch path reads sources through ``Source.items`` too."""
    require(Variant("spark", "spark"))
    d, max_delay, seed = 900, 150, 3
    arrival = [shuffled(recs, d, seed + i) for i, recs in enumerate(inputs(query, seed))]
    flow, out, late = build(query, arrival, side=True, late="side", max_delay=max_delay)
    flow.run("reference")
    want, want_late = multiset(out), [multiset(c) for c in late]
    flow, out, late = build(query, arrival, side=True, late="side", max_delay=max_delay)
    flow.run("spark", parallelism=2)
    assert multiset(out) == want
    assert [multiset(c) for c in late] == want_late


# -- the source's stream, item by item --------------------------------------------------------
def test_items_with_max_delay_hold_release_and_watermark():
    arrival = [{"ts": t} for t in (5, 9, 7, 4, 14, 9, 8, 20)]
    src = sf.io.iterable(arrival, max_delay=5, late="drop")
    W = sf.eventtime.WATERMARK
    # W: 0, 4 (nothing to release; 4 == W is on time), 9 (releases 4..9, the last at W: no
    # watermark item), then 9 == W on time, 8 < 9 late, 15 (releases 9, 14); end: 20
    assert list(src.items()) == [
        (0, W), (4, W), (4, {"ts": 4}), (5, {"ts": 5}), (7, {"ts": 7}), (9, {"ts": 9}),
        (9, {"ts": 9}), (14, {"ts": 14}), (15, W), (20, {"ts": 20})]
    assert src.late_seen == 1
    side = sf.io.LateSource(sf.io.iterable(arrival, max_delay=5, late="side"))
    assert [it for it in side.items() if it[1] is not W] == [(9, {"ts": 8})]


def test_explicit_watermarks_and_max_delay_share_one_watermark():
    W = sf.eventtime.WATERMARK
    data = [{"ts": 3}, sf.Watermark(10), {"ts": 12}, {"ts": 9}, {"ts": 30}, sf.Watermark(20)]
    src = sf.io.iterable(data, max_delay=15, late="drop")
    # 3 -> W -12; Watermark(10) -> 10 (releases 3); 12 held; 9 < 10 late; 30 -> W 15
    # (releases 12); Watermark(20) -> 20, passed on as given; end: 30
    assert list(src.items()) == [(-12, W), (3, {"ts": 3}), (10, W), (12, {"ts": 12}), (15, W),
                                 (20, W), (30, {"ts": 30})]
    assert src.late_seen == 1


def test_sorted_source_with_late_drop_drops_what_goes_back():
    src = sf.io.iterable([{"ts": 1}, {"ts": 5}, {"ts": 5}, {"ts": 2}, {"ts": 6}], late="drop")
    assert [ts for ts, _ in src.items()] == [1, 5, 5, 6]
    assert src.late_seen == 1


def test_idle_timeout_releases_what_is_held():
    """Nothing arrives after ts 40 until the consumer has seen the held tuples: only the
    idle timeout can release them (max_delay 1000 would hold them to the end)."""
    import threading

    seen = threading.Event()

    def live():
        yield from ({"ts": t} for t in (10, 40, 20))
        assert seen.wait(30), "the idle timeout released nothing"
        yield {"ts": 35}  # behind the idle watermark (40): late
        yield {"ts": 50}

    src = sf.io.iterable(live, max_delay=1000, idle_timeout="50ms", late="drop")
    got = []
    for ts, p in src.items():
        got.append((ts, p))
        if ts == 40 and p is not sf.eventtime.WATERMARK:
            seen.set()
    data = [ts for ts, p in got if p is not sf.eventtime.WATERMARK]
    assert data == [10, 20, 40, 50]
    assert src.late_seen == 1


def test_idle_timeout_passes_the_reader_error_on():
    def broken():
        yield {"ts": 1}
        raise RuntimeError("disk gone")

    src = sf.io.iterable(broken, max_delay=10, idle_timeout="1s", name="b")
    with pytest.raises(sf.SourceError, match="source 'b', record 2: the iterable raised "
                       "RuntimeError: disk gone"):
        list(src.items())


# -- timestamps ---------------------------------------------------------------------------------
def test_timestamps_from_iso_strings_datetimes_and_functions():
    from datetime import UTC, datetime, timedelta, timezone

    base = 1_704_067_200_000  # 2024-01-01T00:00:00Z
    recs = [{"t": "2024-01-01T00:00:00Z"}, {"t": "2024-01-01T01:00:00.250+01:00"},
            {"t": datetime(2024, 1, 1, 0, 0, 1)},  # naive: UTC
            {"t": datetime(2024, 1, 1, 0, 0, 2, 999, tzinfo=timezone(timedelta(hours=-2)))
             - timedelta(hours=2)}]
    assert [ts for ts, _ in sf.io.iterable(recs, ts="t").items()] == \
           [base, base + 250, base + 1000, base + 2000]
    fn = sf.io.iterable([{"when": {"at": "2024-01-01T00:00:03"}}, {"when": {"at": base}}],
                        ts=lambda r: r["when"]["at"], sorted=False)
    assert [ts for ts, _ in fn.items()] == [base, base + 3000]
    assert datetime.fromtimestamp(base / 1000, UTC).isoformat().startswith("2024-01-01T00")


def test_timestamp_errors_are_one_line():
    for bad, what in (({"ts": "noon"}, "'noon'"), ({"ts": 1.5}, "1.5"), ({"ts": True}, "True")):
        with pytest.raises(sf.SourceError, match=r"record 1: timestamp 'ts' must be an integer "
                           r"\(ms\), an ISO-8601 string or a datetime, got " + what) as e:
            list(sf.io.iterable([bad], name="s").items())
        assert "\n" not in str(e.value)
    with pytest.raises(sf.SourceError, match="record 1: timestamp function failed: KeyError"):
        list(sf.io.iterable([{"a": 1}], ts=lambda r: r["b"]).items())


def test_files_with_iso_timestamps_batches_agree_with_items(tmp_path):
    """A sorted file whose ts is not an int: the batch path falls back to the tuple path's
    per-record code, so its tuples are those of items(); with max_delay there are no
    batches (the tuple path reorders)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    lines = [f'{{"ts": "2024-01-01T00:00:{s:02d}Z", "v": {s}}}' for s in range(0, 40, 3)]
    p = tmp_path / "iso.jsonl"
    p.write_text("\n".join(lines) + "\n")
    src = sf.io.jsonl(p)
    items = list(src.items())
    assert [ts for ts, _ in items] == [1_704_067_200_000 + s * 1000 for s in range(0, 40, 3)]
    assert [it for b in src.batches() for it in b.items()] == items
    assert sf.io.jsonl(p, max_delay="2s").batches() is None
    c = tmp_path / "f.csv"
    pcsv.write_csv(pa.table({"when_s": [3, 1, 2, 9], "v": [1, 2, 3, 4]}), c)
    csv = sf.io.csv(c, ts=lambda r: r["when_s"] * 1000, max_delay="5s")
    assert [(ts, p["v"]) for ts, p in csv.items() if p is not sf.eventtime.WATERMARK] == \
           [(1000, 2), (2000, 3), (3000, 1), (9000, 4)]
