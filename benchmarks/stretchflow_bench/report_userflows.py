"""The renderer of docs/RESULTS.md's ``userflows`` block (:mod:`stretchflow_bench.userflows`,
issues #31 and #32): per size, flow and format, each variant's speed against the loop and
against Polars (ratios of medians, whole process), peak RSS, the engine's own cost per tuple,
and the issues' targets, met or missed by how much (the verdicts the benchmark computed from
the per-round ratios)."""

from __future__ import annotations

from typing import Any

from .report_tables import Doc, f2, n0, renderer, spread, table

#: column order of the engine variants (the benchmark's ENGINES)
_ENGINES = ("reference", "reference2", "vsn1", "vsn2", "sn1-processes", "sn2-processes",
            "ordered1", "ordered2", "slack", "spark")


def _ratio(cell: dict[str, Any], variant: str, key: str) -> str:
    """A variant's ratio of medians (wall), or why there is none."""
    s = cell["variants"].get(variant)
    if s is None:
        if variant in cell.get("failed", {}):
            return "failed"
        return "–"
    if key not in s:
        return "–"
    mark = "" if s["correct"] else " **(wrong output)**"
    return f2(s[key]["wall_s"]) + mark


def _pair(cell: dict[str, Any], engine: str, key: str) -> str:
    """``λ x · e y``: the lambda and expression forms' ratios."""
    got = [f"{sym} {_ratio(cell, f'{engine}/{form}', key)}"
           for form, sym in (("lambda", "λ"), ("expr", "e"))
           if f"{engine}/{form}" in cell["variants"] or f"{engine}/{form}" in cell["failed"]]
    return " · ".join(got) if got else "–"


def _engines(cells: list[dict[str, Any]]) -> list[str]:
    seen = {v.split("/")[0] for c in cells for v in (*c["variants"], *c["failed"])
            if "/" in v}
    return [e for e in _ENGINES if e in seen]


def _speed_table(cells: list[dict[str, Any]]) -> str:
    engines = _engines(cells)
    rows = []
    for c in cells:
        vs = c["variants"]
        pol = c.get("polars")
        rows.append([f"{c['flow']}, {c['format']}", spread(vs["loop"]["wall_s"], f2),
                     (f"{_ratio(c, pol, 'vs_loop_of_medians')} ({pol.split('-')[1]})"
                      if pol else "not run"),
                     *(_pair(c, e, "vs_loop_of_medians") for e in engines),
                     _ratio(c, "calls", "vs_loop_of_medians") if "calls" in vs else "–"])
    return table(["flow, input", "loop, s: median (min–max)", "Polars (its API)", *engines,
                  "calls loop"], rows)


def _polars_table(cells: list[dict[str, Any]]) -> str:
    engines = _engines(cells)
    rows = []
    for c in cells:
        pol = c.get("polars")
        if pol is None:
            continue
        rows.append([f"{c['flow']}, {c['format']}", spread(c["variants"][pol]["wall_s"], f2),
                     *(_pair(c, e, "vs_polars_of_medians") for e in engines)])
    return table(["flow, input", "Polars, s: median (min–max)", *engines], rows) if rows \
        else "Polars was not run."


def _rss_table(cells: list[dict[str, Any]]) -> str:
    engines = _engines(cells)
    rows = []
    for c in cells:
        rss = {v: n0(s["peak_rss_mb"]["median"]) for v, s in c["variants"].items()}
        rows.append([f"{c['flow']}, {c['format']}", rss["loop"],
                     rss[c["polars"]] if c.get("polars") else "–",
                     *(" · ".join(f"{sym} {rss.get(f'{e}/{form}', '–')}" for form, sym
                                  in (("lambda", "λ"), ("expr", "e"))) for e in engines)])
    return table(["flow, input", "loop", "Polars", *engines], rows)


def _own_cost(cells: list[dict[str, Any]]) -> str:
    rows = [[f"{c['flow']}, {c['format']}", v.split("/")[0], spread(s, f2)]
            for c in cells for v, s in c.get("own_cost_us_per_tuple", {}).items()]
    if not rows:
        return ""
    return ("The engine's own cost per input tuple (issue #32): its own time minus the calls "
            "loop's (the same lambdas called as the engine calls them), per tuple, per round; "
            "µs, median (min–max):\n\n"
            + table(["flow, input", "engine (lambda form)", "µs per tuple"], rows))


def _spark_table(cells: list[dict[str, Any]]) -> str:
    """Spark's native DataFrame query beside the spark engine's expression flow: own times
    (the session's start apart), their ratio per round, whole processes."""
    from .userflows import _per_round

    rows = []
    for c in cells:
        sql, ex = c["variants"].get("spark-sql"), c["variants"].get("spark/expr")
        if sql is None or ex is None:
            continue
        per = _per_round(c, "spark-sql", "spark/expr", "own_s")
        rows.append([f"{c['flow']}, {c['format']}", spread(sql["own_s"], f2),
                     spread(sql["startup_s"], f2) if "startup_s" in sql else "–",
                     spread(ex["own_s"], f2),
                     f2(sql["own_s"]["median"] / ex["own_s"]["median"])
                     + (f" ({f2(per['min'])}–{f2(per['max'])})" if per else ""),
                     f"{f2(sql['wall_s']['median'])} · {f2(ex['wall_s']['median'])}"])
    if not rows:
        return ""
    return ("Spark (local[2]): the spark engine's expression flow beside Spark's native "
            "DataFrame query of it, own time in s, median (min–max), each session's start "
            "apart (> 1 in the ratio: the flow is faster; the target, within 1.5×, is 0.67):"
            "\n\n" + table(["flow, input", "Spark SQL, own s", "its session start, s",
                            "spark engine, expressions, own s",
                            "SQL's / the flow's, of medians (per round)",
                            "whole process, s: SQL · flow"], rows))


def _by(x: float) -> str:
    """A factor a target is missed by: two decimals, three where two would read 1.00."""
    return f"{x:.3f}×" if x < 1.005 else f"{x:.2f}×"


def _missed_text(missed: list[dict[str, Any]]) -> str:
    """``missed in 3, worst first: flow/input variant 2.10× (per round 0.31–0.40), ...``:
    the worst with its per-round range, the others by their factor only."""
    if not missed:
        return ""
    w = missed[0]
    head = (f"{w['flow']}/{w['format']} {w['variant']} by {_by(w['missed_by'])} (per round "
            f"{f2(w['value']['min'])}–{f2(w['value']['max'])}, target "
            f"{f2(w['threshold'])})")
    rest = [f"{t['flow']}/{t['format']} {t['variant']} {_by(t['missed_by'])}"
            for t in missed[1:]]
    return f"missed in {len(missed)}, worst first: " + ", ".join([head, *rest])


def _targets(d: Doc) -> str:
    from .userflows import TARGETS

    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for t in d["metrics"]["targets"]:
        by.setdefault((t["target"], t["size"]), []).append(t)
    rows = []
    for (tid, size), ts in by.items():
        met = [t for t in ts if t["verdict"] == "met"]
        missed = sorted((t for t in ts if t["verdict"] == "missed"),
                        key=lambda t: -t["missed_by"])
        other: dict[str, int] = {}  # not measured, failed, wrong output: cells per reason
        for t in ts:
            if t["verdict"] not in ("met", "missed"):
                other[t["verdict"]] = other.get(t["verdict"], 0) + 1
        measured = len(met) + len(missed)
        detail = [*([_missed_text(missed)] if missed else []),
                  *(f"{why}: {k} cell{'s' if k > 1 else ''}" for why, k in other.items())]
        rows.append([TARGETS.get(tid, tid), n0(size),
                     f"{len(met)} of {measured}" + (" (every cell)" if measured and
                                                     len(met) == len(ts) else ""),
                     "; ".join(detail) or "–"])
    return table(["target", "events", "met in (cells measured)",
                  "missed by (worst first), or why not measured"], rows)


@renderer("userflows-spark", "userflows-spark")
@renderer("userflows-10m", "userflows-10m")
@renderer("userflows", "userflows")
def _userflows(d: Doc) -> str:
    m = d["metrics"]
    p = d["parameters"]
    out = [f"Selection: flows {', '.join(p['flows'])}; forms {', '.join(p['forms'])} "
           f"(λ lambda, e column expressions); engines {', '.join(p['engines'])}; "
           f"{p['rounds']} round(s), alternating; {n0(m['total_s'])} s in all."
           + (f" No expression API: {m['no_expression_api']}." if m.get("no_expression_api")
              else "")]
    for size in p["sizes"]:
        cells = [c for c in m["cells"] if c["size"] == size]
        if not cells:
            continue
        out.append(f"**{n0(size)} events.** Speed against the loop, whole process, ratio of "
                   f"medians (> 1: faster than the loop):\n\n" + _speed_table(cells))
        out.append("Speed against Polars (its faster API per cell), whole process, ratio of "
                   "medians (> 1: faster than Polars; the target 1.25× slower is 0.80):\n\n"
                   + _polars_table(cells))
        out.append("Peak RSS of the run's own process, MB (median):\n\n" + _rss_table(cells))
        cost = _own_cost(cells)
        if cost:
            out.append(cost)
        spark = _spark_table(cells)
        if spark:
            out.append(spark)
        out += [f"{c['flow']}, {c['format']}: its key function cost "
                f"{spread(c['keys_us_per_call'], f2)} µs per call (median (min–max) over the "
                "rounds, measured by the loop's process); its loop calls the flow's own "
                "functions, so its own-cost row is against that loop."
                for c in cells if c.get("keys_us_per_call")]
        reasons: dict[tuple[str, str], list[str]] = {}  # (flow, why) -> variants not run
        for c in cells:
            for v, why in c["skipped"].items():
                got = reasons.setdefault((c["flow"], why), [])
                if v not in got:
                    got.append(v)
        skipped = [f"{flow}: {', '.join(vs)} ({why})" for (flow, why), vs in reasons.items()]
        failed = [f"{c['flow']}/{c['format']} {v}: {why[:300]}" for c in cells
                  for v, why in c["failed"].items()]
        wrong = [f"{c['flow']}/{c['format']} {v}: {s['output']['missing_rows']} rows "
                 f"missing, {s['output']['extra_rows']} extra" for c in cells
                 for v, s in c["variants"].items() if not s["correct"]]
        notes = []
        if skipped:
            notes.append("Not run: " + "; ".join(skipped) + ".")
        if failed:
            notes.append("Failed: " + "; ".join(failed) + ".")
        notes.append("Outputs: every variant's, every round, against the loop's "
                     "(per-timestamp multisets, float fields within a relative 1e-9): "
                     + ("**wrong**: " + "; ".join(wrong) if wrong else "all equal") + ".")
        out.append(" ".join(notes))
    out.append("Targets (issues #31, #32), verdicts over the per-round ratios (met only when "
               "every round is past the target):\n\n" + _targets(d))
    return "\n\n".join(out)
