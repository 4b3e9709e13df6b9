"""The checkpoint bench's own logic (``stretchflow_bench.checkpoint``): the output checks, the
rest of the input after a cut, the tuple-count setting and the child that records the run's
checkpoints. The measurement itself runs in ``bench all --quick`` (tests/test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretchflow_bench.checkpoint import (
    _cli,
    _every,
    _run_once,
    file_digest,
    multiset_digest,
    rest_of_input,
)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


A = '{"ts":1,"word":"a","count":1}'
B = '{"ts":1,"word":"b","count":2}'
C = '{"ts":2,"word":"a","count":1}'


def test_multiset_digest_ignores_order_within_a_timestamp_only(tmp_path):
    base = multiset_digest(_write(tmp_path / "x", [A, B, C]))
    assert multiset_digest(_write(tmp_path / "y", [B, A, C])) == base
    # the same bytes in the file, but record b moved to another timestamp's group
    moved = '{"ts":2,"word":"b","count":2}'
    assert multiset_digest(_write(tmp_path / "z", [A, C, moved])) != base
    # a record twice is not the same multiset as once
    assert multiset_digest(_write(tmp_path / "w", [A, A, B, C])) != base
    assert multiset_digest(_write(tmp_path / "v", [A, B])) != base
    # the byte check does see the order
    assert file_digest(tmp_path / "y") != file_digest(tmp_path / "x")


def test_multiset_digest_refuses_time_going_back_and_non_records(tmp_path):
    with pytest.raises(ValueError, match=r"back, line 3: ts 1 after ts 2"):
        multiset_digest(_write(tmp_path / "back", [A, C, B]))
    with pytest.raises(ValueError, match=r"junk, line 2: not an output record"):
        multiset_digest(_write(tmp_path / "junk", [A, '{"word":"a","ts":1}']))


def test_rest_of_input_keeps_the_tuples_after_the_cut_ties_excluded(tmp_path):
    src = _write(tmp_path / "in.jsonl", [json.dumps({"ts": t, "text": str(t)})
                                         for t in (1, 2, 2, 3, 5)])
    assert rest_of_input(src, tmp_path / "rest.jsonl", 2) == 2
    assert [json.loads(x)["ts"] for x in (tmp_path / "rest.jsonl").read_text().splitlines()] \
        == [3, 5]


def test_every_turns_fractions_of_the_input_into_tuple_counts():
    assert _every("N/5", 1_250_000) == "250000"
    assert _every("N/8", 4) == "1"  # never a checkpoint every 0 tuples
    assert _every("1s", 10) == "1s" and _every(None, 10) is None


def test_child_reports_the_checkpoints_the_cli_run_took(tmp_path):
    from stretchflow.io.generators import tweets, write_table

    data = tmp_path / "t.jsonl"
    write_table(tweets(3000, seed=3), data)
    plain = _run_once(_cli(data, tmp_path / "a.jsonl", ["--columnar", "off"], None, None),
                      tmp_path)
    ck = _run_once(_cli(data, tmp_path / "b.jsonl", ["--columnar", "off"], tmp_path / "ck",
                        "1000"), tmp_path)
    assert plain["tuples_in"] == ck["tuples_in"] == 3000
    assert plain["checkpoints"] is None
    # every 1 000 tuples, looked at every 1 000: cuts after 1 000, 2 000 and 3 000 tuples
    # read (the last one's barrier still passes through the query before the end of input)
    assert ck["checkpoints"] == 3
    assert file_digest(tmp_path / "a.jsonl") == file_digest(tmp_path / "b.jsonl")


def test_child_failure_names_the_command(tmp_path):
    with pytest.raises(RuntimeError, match=r"stretchflow run wordcount --input .*nope.jsonl"):
        _run_once(_cli(tmp_path / "nope.jsonl", tmp_path / "o.jsonl", [], None, None), tmp_path)
