"""What the columnar tests of every engine share (test_vsn_columnar, test_sn_columnar,
test_ordered_columnar): random tweets, the three window shapes, a flow from a file into one O+,
the reference engine's tuple path as the oracle, a bounded run, and a wordcount whose columnar
f_MK refuses some batches."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.errors import OperatorError
from stretchflow.io.sources import JsonLines
from stretchflow.operators.aggregate import Aggregate
from stretchflow.queries.wordcount import paircount, token_columns, tokens_of, wordcount

#: tokens with the cases a tokenizer gets wrong: empty, tabs, runs of spaces, Unicode spaces and
#: line separators, a hashtag; "zz" is the token _picky refuses
WORDS = ["a", "b", "c", "é", "x\ty", "", "  a  ", "b\u3000c", "d\u2028e", "#h", "zz"]
QUERIES = {"wordcount": lambda: wordcount(size=2000, slide=500),
           "tumbling": lambda: wordcount(size=700, slide=700),
           "paircount": lambda: paircount(size=1500, slide=500, distance=2)}


@st.composite
def tweets(draw: Any, max_size: int = 300) -> list[dict]:
    ts = draw(st.integers(0, 50))
    rows = []
    for _ in range(draw(st.integers(1, max_size))):
        ts += draw(st.one_of(st.just(0), st.integers(1, 40), st.integers(100, 900)))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=5)))
        rows.append({"ts": ts, "text": text})
    return rows


def write_rows(path: Any, rows: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def words_file(tmp_path: Any, n: int = 400) -> Any:
    """``n`` tweets 5 ms apart, three of WORDS each, as a JSON Lines file."""
    rows = [{"ts": t * 5, "text": " ".join(WORDS[(t * k) % len(WORDS)] for k in range(3))}
            for t in range(n)]
    path = tmp_path / "in.jsonl"
    write_rows(path, rows)
    return path


def failing_tuple_case(tmp_path: Any) -> tuple[Any, OperatorError]:
    """A file where tokens_of fails on two tuples (a number has no split), and the
    OperatorError the reference's tuple path raises for it: the tuple every engine must name."""
    rows = [{"ts": t, "text": "a b"} for t in range(0, 2000, 10)]
    rows[150] = {"ts": rows[150]["ts"], "text": 5}
    rows[170] = {"ts": rows[170]["ts"], "text": 6}
    path = tmp_path / "in.jsonl"
    write_rows(path, rows)
    flow, _ = flow_of(path, QUERIES["wordcount"]())
    with pytest.raises(OperatorError) as want:
        flow.run("reference", columnar="off")
    return path, want.value


def fallback_matches_reference(tmp_path: Any, engine: str, reason: str, **opts: Any) -> None:
    """A wordcount from :func:`words_file` into a file sink, run on ``engine`` at parallelism
    2 with ``opts`` (checkpoint="CK": a checkpoint directory), takes tuples, names ``reason``
    in ``columnar_fallback`` and writes the reference's output."""
    path = words_file(tmp_path)
    flow = sf.Flow()
    out = tmp_path / "out.jsonl"
    flow.source(JsonLines(path)).oplus(QUERIES["wordcount"]()).sink(str(out))
    if opts.get("checkpoint") == "CK":  # a checkpointed run writes a file sink
        opts = {**opts, "checkpoint": str(tmp_path / "ck")}
    res = flow.run(engine, parallelism=2, **opts)
    assert res.extra["paths"] == {"wordcount": "sliced"}
    assert reason in res.extra["columnar_fallback"]["wordcount"]
    recs = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    got = multiset((r.pop("ts"), r) for r in recs)
    assert got == reference_multiset(path, QUERIES["wordcount"])


def flow_of(path: Any, op: Any) -> tuple[sf.Flow, Any]:
    flow = sf.Flow()
    col = flow.source(JsonLines(path)).oplus(op).collect()
    return flow, col


def reference_collector(path: Any, op_factory: Any) -> Any:
    """The reference engine's tuple path (an oracle independent of Arrow); its collector."""
    flow, col = flow_of(path, op_factory())
    flow.run("reference", columnar="off")
    return col


def reference_multiset(path: Any, op_factory: Any) -> Any:
    return multiset(reference_collector(path, op_factory))


def bounded(fn: Any, seconds: float = 90, what: str = "the run") -> dict:
    """``fn()`` in a thread that must end within ``seconds`` (a hang fails, never stalls): a
    box with its ``result`` or its ``error``. test_sn's ``_run_bounded`` is this too."""
    box: dict = {}

    def go() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{what} did not end within {seconds} s"
    return box


def picky() -> Any:
    """wordcount whose columnar f_MK refuses every batch holding the token "zz": those batches
    go tuple at a time into the same σ, combined with the Arrow partials."""
    op = wordcount(size=2000, slide=500)
    columns = op.columns

    def refuse_zz(payloads: Any) -> Any:
        texts = (payloads.column("text").to_pylist() if hasattr(payloads, "column")
                 else [p["text"] for p in payloads])
        if any("zz" in t.split() for t in texts):
            raise ValueError("not this batch")
        return columns(payloads)

    op.columns = refuse_zz
    return op


def marked(update: Any) -> Aggregate:
    """wordcount whose columnar f_MK refuses a batch with a ``mark`` field (so f_U runs tuple
    at a time on it; on sn's process channels, in the channel process) and whose f_U is
    ``update``."""
    def columns(payloads: Any) -> Any:
        names = payloads.column_names if hasattr(payloads, "column_names") else \
            {k for p in payloads for k in p}
        if "mark" in names:
            raise ValueError("marked")
        return token_columns(payloads)

    return Aggregate(size=2000, slide=500, keys=lambda t: tokens_of(t["text"]), init=int,
                     update=update, output=lambda w, n: {"word": w, "count": n},
                     name="marked", columns=columns, combine=lambda a, b: a + b,
                     output_columns=("word", "count"))


def recording(calls: list) -> Aggregate:
    """wordcount (2 s windows sliding by 0.5 s) whose columnar f_MK appends (the calling
    thread's name, the batch's first ts) to ``calls`` at every call."""
    op = wordcount(size=2000, slide=500)
    columns = op.columns

    def recorded(payloads: Any) -> Any:
        calls.append((threading.current_thread().name, payloads.column("ts")[0].as_py()))
        return columns(payloads)

    op.columns = recorded
    return op
