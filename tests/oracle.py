"""The oracle every executor is tested against: the reference executor's output, compared as
per-timestamp multisets (DESIGN.md, Semantics)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import stretchflow as sf
from conformance.contract import canonical
from stretchflow.queries import build_query


def multiset(items: list[tuple[int, Any]]) -> Counter:
    """Output tuples as a multiset of (ts, payload), payloads made hashable the one way the
    conformance suite does (dicts by their items, sets by their members, at any depth)."""
    return Counter((ts, canonical(p)) for ts, p in items)


def run_query(query: str, inputs: list[list[dict]], params: dict[str, Any],
              engine: str = "reference", **options: Any) -> tuple[list, Any]:
    """Built-in ``query`` over in-memory ``inputs`` on ``engine``: (outputs, run result)."""
    flow = sf.Flow(query)
    streams = [flow.source(sf.io.iterable(recs, name=f"in{i}"))
               for i, recs in enumerate(inputs)]
    col = build_query(query, streams, **params).collect()
    res = flow.run(engine=engine, **options)
    return col.items, res


def same_as_reference(query: str, inputs: list[list[dict]], params: dict[str, Any],
                      engine: str, check_counts: bool = False, **options: Any) -> Any:
    """Asserts ``engine`` gives the reference's outputs, timestamp-sorted (and, with
    ``check_counts``, the same tuples in and out per source and sink); returns its result."""
    ref, ref_res = run_query(query, inputs, params)
    got, res = run_query(query, inputs, params, engine, **options)
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got), "output not ts-sorted"
    assert multiset(got) == multiset(ref)
    if check_counts:
        assert res.tuples_in == ref_res.tuples_in
        assert res.tuples_out == ref_res.tuples_out
    return res


def per_tuple(op: Any, items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """One instance of O+ ``op`` (Alg. 2) over ``items`` tuple by tuple, then end of input:
    the outputs an executor-free reference gives."""
    inst = op.instance()
    for ts, p in items:
        inst.process(ts, p)
    inst.finish()
    return inst.take()
