"""The renderer of docs/RESULTS.md's ``nexmark`` block (:mod:`stretchflow_bench.nexmark_suite`,
issue #33 items 1 and 2): per NEXMark query and system, throughput on own time, start-up
apart, whether every output was right, and per query the best stretchflow engine against the
best stream processor and the best bounded peer, with the interval of the ratio over rounds.
Every number comes from the JSON."""

from __future__ import annotations

from typing import Any

from .report_tables import (
    Doc,
    f1,
    f2,
    n0,
    ratio_interval,
    ratio_of_medians,
    renderer,
    spread,
    table,
)

#: the peers that run the query as a stream (event-time windows closed by watermarks); the
#: others (Polars, DuckDB) compute it on the whole file at once
STREAM_PROCESSORS = ("flink-sql", "spark-ss", "bytewax2")


def rate(x: float) -> str:
    """Events per second: ``1.23 M`` from a million, else ``456 k``."""
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:,.0f} k".replace(",", " ")


def _spread(s: Doc, fmt: Any) -> str:
    """``median (min–max)``, or the one value of one round."""
    return fmt(s["median"]) if s.get("n") == 1 else spread(s, fmt)


def _over(summaries: list[Doc], key: str) -> Doc:
    """min, median of the medians, and max of ``key`` over several cells' summaries."""
    meds = sorted(x[key]["median"] for x in summaries)
    return {"min": min(x[key]["min"] for x in summaries), "median": meds[len(meds) // 2],
            "max": max(x[key]["max"] for x in summaries)}


def _own_systems(d: Doc) -> list[str]:
    return [s for s in d["parameters"]["systems"] if s in d["parameters"]["own_flags"]]


def _peers(d: Doc) -> list[str]:
    return [s for s in d["parameters"]["systems"] if s in d["parameters"]["peers"]]


def _cell(cell: dict[str, Any], system: str) -> str:
    """A system's throughput in a cell, or why there is none."""
    if system in cell["unsupported"]:
        return "not expressible"
    if system in cell["not_run"]:
        return "not run"
    if system in cell["failed"]:
        why = cell["failed"][system]
        return "timed out" if "timed out" in why else "failed"
    s = cell["systems"].get(system)
    if s is None:
        return "not run"
    text = _spread(s["events_per_s"], rate)
    if not s["correct"]:
        text += " **(wrong output)**"
    return text


def _best(cell: dict[str, Any], systems: list[str]) -> str | None:
    """The system with the highest median throughput among ``systems`` with a right output."""
    ok = [s for s in systems if s in cell["systems"] and cell["systems"][s]["correct"]]
    return max(ok, key=lambda s: cell["systems"][s]["events_per_s"]["median"], default=None)


def _versus(cell: dict[str, Any], own: list[str], peers: list[str]) -> list[str]:
    """The best stretchflow engine against the best peer: the ratio of median throughputs
    and its conservative interval over rounds."""
    a, b = _best(cell, own), _best(cell, peers)
    if a is None or b is None:
        return [a or "–", b or "–", "–", "–"]
    sa, sb = cell["systems"][a]["events_per_s"], cell["systems"][b]["events_per_s"]
    r = ratio_of_medians(sa, sb)
    iv = ratio_interval(sa, sb)
    who = f"stretchflow {f2(r)}×" if r >= 1 else f"{b} {f2(1 / r)}×"
    if iv["n"] < 2:
        span = "one run each: no interval"
    else:
        span = f"{f2(iv['min'])}–{f2(iv['max'])}"
    return [a, b, who, span]


def _reasons(d: Doc, kind: str) -> list[str]:
    """``system, query: reason`` of every unsupported (or failed) cell, one line each."""
    lines = []
    for c in d["metrics"]["cells"].values():
        for s, why in c[kind].items():
            why_s = " ".join(why.split())[:300]  # stderr on one line
            lines.append(f"- {s}, {c['format']} {c['query'].upper()}: {why_s}")
    return lines


@renderer("nexmark", "nexmark")
def _nexmark(d: Doc) -> str:
    return _block(d)


@renderer("nexmark-1m", "nexmark-1m")
def _nexmark_1m(d: Doc) -> str:
    return _block(d)


def _block(d: Doc) -> str:
    m, p = d["metrics"], d["parameters"]
    own, peers = _own_systems(d), _peers(d)
    systems = [*own, *peers]
    w = p["windows"]
    head = (f"NEXMark Q0–Q8 (`stretchflow run nexmark-qN`, docs/nexmark.md) on "
            f"{n0(p['events'])} events of `stretchflow generate nexmark` (seed {p['seed']}), "
            f"windows of {f1(w['window'] / 1000)} s (Q5 every {f1(w['slide'] / 1000)} s), "
            f"{p['rounds']} round(s), systems rotating, each run a whole process. stretchflow: "
            + ", ".join(f"`{s}` (`{p['own_flags'][s]}`)" for s in own) + ".")
    if p["peers"]:
        head += " Peers, each in its own venv: " + "; ".join(
            f"`{s}` ({q['note']}; `{q['program']}`, {', '.join(q['requirements'])})"
            for s, q in p["peers"].items()) + "."
    if p.get("quick"):
        head += (" **Quick run**: a smoke test, not a result (runs of a fraction of a second "
                 "are start-up).")
    parts = [head]
    for fmt in p["formats"]:
        cells = [c for c in m["cells"].values() if c["format"] == fmt]
        if not cells:
            continue
        rows = [[c["query"].upper(), n0(c["events_in"]), *(_cell(c, s) for s in systems)]
                for c in cells]
        parts.append(f"**{fmt}**: throughput on own time, events read per second (the "
                     "streams the query reads / own time): median (min–max) over rounds\n\n"
                     + table(["query", "events in", *systems], rows))
        start_rows = []
        for s in systems:
            runs = [c["systems"][s] for c in cells if s in c["systems"]]
            if runs:
                start_rows.append([s, spread(_over(runs, "startup_s"), f1),
                                   f"{n0(max(r['startup_share']['max'] for r in runs) * 100)} %",
                                   spread(_over(runs, "peak_rss_mb"))])
        parts.append(f"**{fmt}**: start-up (wall − own time: interpreter, imports, JVM, "
                     "session or cluster), over every query and round: median (min–max); its "
                     "largest share of a run's wall time; peak RSS of the process tree, MiB\n\n"
                     + table(["system", "start-up, s", "largest share of wall",
                              "peak RSS, MiB"], start_rows))
        streaming = [s for s in peers if s in STREAM_PROCESSORS]
        bounded = [s for s in peers if s not in STREAM_PROCESSORS]
        for group, what in ((streaming, "stream processor"), (bounded, "bounded peer")):
            if not (own and group):
                continue
            vs = [[c["query"].upper(), *_versus(c, own, group)] for c in cells]
            parts.append(f"**{fmt}**: the fastest stretchflow engine against the fastest "
                         f"{what} ({', '.join(group)}; right outputs only): who is faster, "
                         "by the ratio of median throughputs, and the conservative interval "
                         "over rounds (min of one / max of the other … max / min)\n\n"
                         + table(["query", "stretchflow", what, "faster", "interval"], vs))
    wrong = [f"{s}, {c['format']} {c['query'].upper()}"
             for c in m["cells"].values() for s, v in c["systems"].items() if not v["correct"]]
    parts.append("Every output right (against the reference engine's output of the same "
                 "input: a digest, else row by row with float fields within a relative 1e-9; "
                 "the reference is checked against a brute force in tests/test_nexmark.py): "
                 + ("yes" if not wrong else "**no**: " + "; ".join(wrong)) + ".")
    unsupported = _reasons(d, "unsupported")
    if unsupported:
        parts.append("Not expressible with the peer's native operators (the program's own "
                     "reason):\n\n" + "\n".join(unsupported))
    failed = _reasons(d, "failed")
    if failed:
        parts.append("Failed or timed out (not run again in later rounds):\n\n"
                     + "\n".join(failed))
    return "\n\n".join(parts)
