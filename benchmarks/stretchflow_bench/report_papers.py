"""The renderers of docs/RESULTS.md's blocks that set our measurements beside a paper's
reported values: the paper's numbers come from the result's ``parameters.paper`` (written by
the benchmark with their section and figure), never typed into RESULTS.md."""

from __future__ import annotations

from typing import Any

from .report_tables import Doc, f1, f2, n0, renderer, spread, table

_SHAPES = {"q1-wordcount": "Q1 wordcount (§8.1)", "q1-paircount": "Q1 paircount d = 3 (§8.1)",
           "q2-forward": "Q2 Op. 15 forward (§8.2)",
           "q3-scalejoin": "Q3 ScaleJoin band join (§8.3)"}
_VARIANTS = {"vsn1": "stretchflow vsn, Π = 1", "vsn2": "stretchflow vsn, Π = 2",
             "flink1": "PyFlink, parallelism 1", "flink2": "PyFlink, parallelism 2",
             "flinksql1": "PyFlink SQL interval join (one instance)"}


def _paper_q1(p: dict[str, Any]) -> str:
    gain, lat = p["throughput_gain_pct"], p["latency_change_pct"]
    parts = [f"{k} {gain[k]:+d} % throughput, {lat[k]:+d} % latency" for k in gain]
    return f"{p['cite']}: STRETCH vs Flink " + "; ".join(parts)


def _paper_q2(p: dict[str, Any]) -> str:
    s, fl, r, lat = (p["stretch_tuples_per_s"], p["flink_tuples_per_s"],
                     p["stretch_over_flink"], p["latency_ms"])
    return (f"{p['cite']}: STRETCH {n0(s['lowest_pi'])} → {n0(s['highest_pi'])} t/s and Flink "
            f"{n0(fl['lowest_pi'])} → {n0(fl['highest_pi'])} t/s as Π grows, STRETCH "
            f"{r['min']}–{r['max']}× Flink; latency STRETCH < {lat['stretch_below']} ms, "
            f"Flink > {lat['flink_above']} ms")


def _paper(shape: str, paper: dict[str, Any]) -> str:
    p = paper.get("q1-wordcount" if shape.startswith("q1-") else shape)  # one Fig. 6 for Q1
    if not p:
        return "—"
    if shape.startswith("q1-"):
        return _paper_q1(p)
    if shape == "q2-forward":
        return _paper_q2(p)
    return f"{p['cite']}: {p['compares']}"


def _latency(s: dict[str, Any]) -> str:
    lat = s.get("latency_ms")
    if not lat or not lat.get("n"):
        return "not measured"
    return f"p50 {f1(lat['p50'])}, p99 {f1(lat['p99'])} ({n0(lat['n'])} samples)"


def _correct(s: dict[str, Any]) -> str:
    c = s["correctness"]
    ok = ("yes" if c["correct"] else
          f"**no**: {n0(c['missing_rows'])} rows missing, {n0(c['extra_rows'])} extra")
    ok += f" ({c['rounds_correct']} of {c['rounds']} rounds)"
    if s.get("sorted_per_instance") is False:
        ok += "; **not in ts order** per instance"
    if s.get("single_instance_join"):
        ok += f"; join {', '.join(s.get('plan_joins') or [])} on one instance"
    return ok


@renderer("stretchflow-vs-flink", "stretchflow-vs-flink")
def _vs_flink(d: Doc) -> str:
    m, p = d["metrics"], d["parameters"]
    paper = p.get("paper") or {}
    out = [f"{p['rounds']} rounds, variants alternating, whole processes; PyFlink: "
           f"{m.get('pyflink', 'not recorded')}. Paper's setup: {paper.get('setup', '—')}."]
    for shape, title in _SHAPES.items():
        sm = m.get(shape)
        if not isinstance(sm, dict):
            continue
        rows = []
        for v, label in _VARIANTS.items():
            s = sm.get(v)
            if isinstance(s, str):
                # not installed: the reason is in the first line; a failure's is cut short
                why = s.split(":")[0] if s.startswith("not installed") else (
                    s.replace("\n", " ").replace("|", "/")[:160])
                rows.append([label, why, "—", "—", "—"])
                continue
            if not isinstance(s, dict):
                continue
            # PyFlink's own time includes the mini-cluster's start where it has no span
            mark = " †" if s.get("own_kind", "").startswith("elapsed") else ""
            rows.append([label, spread(s["tuples_per_s_own"]) + mark, spread(s["wall_s"], f2),
                         _latency(s), _correct(s)])
        ratios = [f"vsn Π = {k[3]} / PyFlink {k[3]}: {f2(r['own_s'])}× (own time; median of "
                  f"per-round ratios {spread(r['own_s_per_round'], f2)}), {f2(r['wall_s'])}× "
                  f"(whole process)"
                  for k, r in sorted(sm.get("throughput_ratios", {}).items())]
        out.append(
            f"**{title}**, {n0(sm['tuples_in'])} tuples in, {n0(sm['rows_out'])} out:\n\n"
            + table(["variant", "tuples/s (own time): median (min–max)",
                     "whole process, s: median (min–max)", "latency, ms",
                     "output = reference's"], rows)
            + ("\n\n† its own time is the program's elapsed time, the start of Flink's "
               "mini-cluster and Python workers included: compare whole processes."
               if any(isinstance(sm.get(v), dict) and sm[v].get("own_kind", "").startswith(
                   "elapsed") for v in _VARIANTS) else "")
            + "\n\nRatio of medians, > 1: stretchflow faster than PyFlink with Python "
              "functions (every record crosses the JVM–Python bridge; not Flink in the JVM, "
              "which the nexmark block measures): "
            + ("; ".join(ratios) if ratios else "not measured") + ".\n\n"
            + "Paper: " + _paper(shape, paper) + ".")
    return "\n\n".join(out)
