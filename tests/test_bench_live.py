"""The live bench's own logic (``stretchflow_bench.live``): when the watermark passes a window
end, the hand-written baseline's windows, and a small run end to end (every variant delivers
every window the input passes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretchflow_bench.live import VARIANTS, _handwritten, _p99, passed_times, run


def test_passed_is_the_write_holding_the_first_record_at_or_after_the_end() -> None:
    ts = [0, 400, 999, 1000, 1500, 2600, 2700]
    # writes: records 0-1 at t=10, 2-3 at t=11, 4 at t=12, 5-6 at t=13
    marks = [(1, 10.0), (3, 11.0), (4, 12.0), (6, 13.0)]
    # end 1000: record 3 (ts 1000, not 999); ends 2000 and 3000? 2000 by record 5 (ts 2600)
    assert passed_times(ts, marks, size=2000, slide=1000) == {1000: 11.0, 2000: 13.0}
    # records from ts 5: the first end is the first multiple of slide after it
    assert passed_times([5, 10, 20], [(2, 1.0)], size=10, slide=10) == {10: 1.0, 20: 1.0}


def test_p99_is_an_order_statistic() -> None:
    assert _p99([float(i) for i in range(1, 101)]) == 99.0
    assert _p99([3.0, 1.0, 2.0]) == 3.0


def test_handwritten_emits_each_window_with_words(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    recs = [{"ts": t, "text": "a b"} for t in (0, 500, 1200, 2100)]
    p.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in recs)
                  + b'{"ts": 0, "__end__": true}\n')
    reached = _handwritten(p, size=2000, slide=1000, poll=0.01)
    # ends 1000 and 2000 are passed by records; 3000 and 4000 close at the end of input
    assert sorted(reached) == [1000, 2000, 3000, 4000]


@pytest.mark.slow
def test_small_run_measures_every_variant(tmp_path: Path) -> None:
    path = run(out_dir=tmp_path, rate=200, seconds=3.0, repeats=1, poll=0.02)
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "live"
    for v in VARIANTS:
        m = doc["metrics"][v]
        # ts 0..2 995 at 200/s: window ends 1 000 and 2 000 are passed by the input
        assert m["windows"] == 2, v
        assert m["repeats"][0]["windows_without_output"] == 0
        assert m["delay_s"]["min"] <= m["delay_s"]["median"] <= m["delay_s"]["max"]
        assert "load_before" in m["repeats"][0]["probe"]
