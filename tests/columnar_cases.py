"""What the columnar tests of every engine share (test_vsn_columnar, test_sn_columnar,
test_ordered_columnar): random tweets, the three window shapes, a flow from a file into one O+,
the reference engine's tuple path as the oracle, a bounded run, and a wordcount whose columnar
f_MK refuses some batches."""

from __future__ import annotations

import threading
from typing import Any

import orjson
from hypothesis import strategies as st

import stretchflow as sf
from conformance.contract import multiset
from stretchflow.io.sources import JsonLines
from stretchflow.queries.wordcount import paircount, wordcount

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


def bounded(fn: Any, seconds: float = 90) -> dict:
    """``fn()`` in a thread that must end within ``seconds`` (a hang fails, never stalls)."""
    box: dict = {}

    def go() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the run did not end within {seconds} s"
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
