"""The flow of ``stretchflow bench run memory`` (issue #33, "memory over time"), written as a
user writes one (docs/api.md): a keyed count and sum per tumbling window of event time, the
key, the update and the output given by lambdas. A flow file, run as a user runs one::

    stretchflow run memory_flow.py --param input=events.parquet --param output=out.jsonl \\
        --param size=10s [--engine vsn --parallelism 2]

The input has the columns ``ts`` (ms, non-decreasing), ``key`` (int) and ``value`` (int)
(:mod:`stretchflow_bench.memory` writes it). One output row per (window, key) seen in the
window: ``{"ts": the window's end, "key", "count", "sum"}``. Its state is one accumulator per
key live in the open window, so the state grows with the keys a window sees and is freed when
the window closes: what the benchmark watches.
"""

from __future__ import annotations

import stretchflow as sf

#: the window when ``--param size`` is not given (the benchmark passes its own)
DEFAULT_SIZE = "10s"


def build_flow(params: dict[str, str]) -> sf.Flow:
    """``input`` (Parquet or JSON Lines), ``output`` and the tumbling window ``size``."""
    flow = sf.Flow("memory-keyed-count")
    events = flow.source(sf.io.open_source(params["input"]))
    counts = events.aggregate(
        size=params.get("size", DEFAULT_SIZE),
        keys=lambda t: t["key"],
        # a tuple, not a list: an accumulator a user would not mutate in place
        init=lambda: (0, 0),
        update=lambda acc, t: (acc[0] + 1, acc[1] + t["value"]),
        output=lambda k, acc: {"key": k, "count": acc[0], "sum": acc[1]})
    counts.sink(params["output"])
    return flow
