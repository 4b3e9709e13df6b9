"""The renderer of docs/RESULTS.md's ``latency-load`` block (:mod:`stretchflow_bench.latency_load`,
issue #33 item 3): per query, each engine's capacity (unpaced, and live: the source paced
beyond it), and per engine and offered load the achieved rate and the delay percentiles from
each tuple's scheduled send time, medians over the rounds, every number from the JSON."""

from __future__ import annotations

from typing import Any

from .report_tables import Doc, f1, ms, n0, renderer, spread, table

_QUERY_LABELS = {
    "currency": "currency conversion (NEXMark Q1, a lambda map: one output per bid)",
    "window_count": "bids per auction in tumbling 1 s windows (lambdas; a window's outputs "
                    "measured from the scheduled time of the tuple that closed it)",
}


def _spread(s: dict[str, Any]) -> str:
    """``median (min–max)``, or the one value of a single round."""
    return spread(s) if s.get("n", 1) > 1 else n0(s["median"])


def _med(s: dict[str, Any] | None, fmt: Any = ms) -> str:
    return "–" if not s else fmt(s["median"])


def _achieved(cell: dict[str, Any]) -> str:
    got = _med(cell.get("achieved_tuples_per_s"), n0)
    if cell.get("truncated"):
        sent = [x["sent"] / x["tuples"] for x in cell["runs"]]
        got += f" (**truncated**: {n0(min(sent) * 100)} % sent by the deadline)"
    if not cell.get("outputs_ok", True):
        got += " **(outputs incomplete)**"
    return got


def _query(q: str, body: dict[str, Any], p: dict[str, Any]) -> str:
    caps, rows = [], []
    for e, eng in body["engines"].items():
        cap = eng.get("capacity") or {}
        if "tuples_per_s" in cap:
            caps.append(f"{e} {_spread(cap['tuples_per_s'])} t/s, live "
                        f"{_spread(cap['live_tuples_per_s'])}")
        if eng.get("not_run"):
            caps.append(f"{e} **{eng['not_run'].splitlines()[0][:300]}**")
        for cell in (eng.get("levels") or {}).values():
            if not cell.get("runs"):
                continue
            d = cell["delay_ms"]
            rows.append([e, f"{cell['fraction']:.0%}", n0(cell["offered_tuples_per_s"]),
                         _achieved(cell), _med(d["p50"]), _med(d["p99"]), _med(d["p99_9"]),
                         _med(d["max"]), _med(cell.get("cores_busy"), lambda x: f"{x:.2f}"),
                         _med(cell.get("peak_rss_mb"), n0)])
    rounds = p["capacity_rounds"]
    head = (f"**{q}**: {_QUERY_LABELS.get(q, q)}. Capacity C (source unpaced), median "
            f"(min–max) of {rounds} round(s), tuples/s of the engine's own time (tuple 0's "
            f"hand-over to the last output); live: the rate achieved with the source paced at "
            f"{f1(p['live_overload'])} x C (a paced source takes the engines' live path): "
            + "; ".join(caps) + "."
            + "".join(f" Note, {e}: {n}." for e, n in (body.get("notes") or {}).items()))
    return head + "\n\n" + table(
        ["engine", "load (% of C)", "offered t/s", "achieved t/s", "p50 ms", "p99 ms",
         "p99.9 ms", "max ms", "cores busy", "peak RSS MB"], rows)


@renderer("latency-load", "latency-load")
def _latency_load(d: Doc) -> str:
    m, p = d["metrics"], d["parameters"]
    flags = "; ".join(f"{e}: `{f}`" for e, f in p["engines_flags"].items())
    base = "its capacity C" if p.get("base", "unpaced") == "unpaced" else \
        "its **live** capacity (`LATENCY_BASE=live`)"
    intro = (f"Each local engine ({flags}) offered {', '.join(f'{f:.0%}' for f in p['fractions'])}"
             f" of {base} for {f1(p['seconds'])} s a level, open-loop, "
             f"{p['rounds']} round(s), engines rotating; whole `stretchflow run` processes of "
             f"`latency_load_flow.py`, a generated NEXMark-like bid source paced by "
             f"`at_rate`. The delay is measured from each tuple's **scheduled** send time "
             f"(t0 + i / rate; coordinated omission corrected: a late source sends at once and "
             f"never moves its schedule), to the hand-over of its output to the sink; tuples "
             f"due in the first {f1(p['warmup_s'])} s (warm-up) are left out. Percentiles "
             f"from 1 % log buckets, medians over the rounds. A level's source stops at "
             f"{f1(p['deadline_s'])} s: a truncated level's percentiles are lower bounds. "
             f"Spark streaming is not measured here.")
    return intro + "\n\n" + "\n\n".join(_query(q, body, p) for q, body in m["queries"].items())
