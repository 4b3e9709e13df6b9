"""The renderer of docs/RESULTS.md's ``memory`` block (:mod:`stretchflow_bench.memory`, issue
#33 item 4): per key cardinality K and engine, the peak RSS of the run's process tree, its
growth over the second half of the run, the state size (keys per window) and the RSS per live
key, the verdict per engine under the benchmark's rule, and whether every output was right.
Every number comes from the JSON; the verdicts are the ones the benchmark computed."""

from __future__ import annotations

from typing import Any

from .report_tables import Doc, f1, f3, n0, renderer, spread, table


def _engines(d: Doc) -> list[str]:
    return list(d["parameters"]["engines"])


def _cell_value(cell: dict[str, Any], engine: str, fmt: Any) -> str:
    """``fmt`` of the engine's summary in this cell, or why there is none."""
    if engine in cell.get("failed", {}):
        return "failed"
    s = cell["engines"].get(engine)
    if s is None:
        return "not run"
    return fmt(s) + ("" if s["correct"] else " **(wrong output)**")


def _growth(s: dict[str, Any], bound: float) -> str:
    g = s.get("growth")
    if g is None:
        return "–"
    text = spread(g, f3)  # three decimals: 1.204 is above the bound of 1.2, 1.20 would not say
    return f"**{text}**" if g["max"] > bound else text


def _verdict(v: dict[str, Any]) -> str:
    """The benchmark's verdict in the docs' number format."""
    missing = v.get("keys_not_measured") or []
    if v["bounded"] is None:
        return "not measured"
    if v["bounded"]:
        text = f"bounded at every K measured (every round's growth ≤ {f1(v['bound'])})"
        if missing:
            text += "; not measured at K = " + ", ".join(n0(k) for k in missing)
        return text
    return (f"**not bounded from K = {n0(v['unbounded_from_keys'])}** (a round's growth "
            f"{f3(v['worst_growth'])} > {f1(v['bound'])})")


def _per_key(m: dict[str, Any], engine: str, k: str) -> str:
    base = m["rss_per_live_key_base"].get(engine)
    if base is not None and int(k) == base:
        return "base"
    v = m["rss_per_live_key_bytes"].get(engine, {}).get(k)
    return "–" if v is None else n0(v)


@renderer("memory", "memory")
def _memory(d: Doc) -> str:
    m, p = d["metrics"], d["parameters"]
    cells = m["cells"]
    ks = sorted(cells, key=int)
    engines = _engines(d)
    bound = m["bound"]
    first = cells[ks[0]]
    windows = f"{first['windows']} window" + ("" if first["windows"] == 1 else "s")
    flags = ", ".join(f"`{e}` (`{p['engines_flags'][e]}`)" for e in engines)
    head = (f"Count and sum per key with lambdas (`memory_flow.py`) over tumbling "
            f"{f1(p['window_ms'] / 1000)} s windows of event time; {n0(p['events'])} events at "
            f"{n0(p['rate'])} events/s of event time ({windows}), keys "
            f"uniform over K = {', '.join(n0(int(k)) for k in ks)}; engines "
            f"{flags}; "
            f"{p['rounds']} round(s), engines rotating, each run a whole process "
            f"(`stretchflow run`). RSS: the summed RSS of the run's process tree sampled "
            f"every {p['sample_s']} s (sn's channel processes included; a page they share "
            f"counts once per process).")
    if p.get("quick"):
        head += (" **Quick run**: a smoke test, not a result (runs of about a second are "
                 "mostly start-up, so their growth says nothing about state).")
    peak_rows = [[n0(int(k)), *(_cell_value(cells[k], e, lambda s: spread(s["peak_rss_mb"]))
                                for e in engines)] for k in ks]
    wall_rows = [[n0(int(k)), *(_cell_value(cells[k], e, lambda s: spread(s["wall_s"], f1))
                                for e in engines)] for k in ks]
    growth_rows = [[n0(int(k)), *(_cell_value(cells[k], e, lambda s: _growth(s, bound))
                                  for e in engines)] for k in ks]
    state_rows = [[n0(int(k)), n0(cells[k]["keys_per_window"]["max"]),
                   n0(cells[k]["rows_expected"]), *(_per_key(m, e, k) for e in engines)]
                  for k in ks]
    verdicts = "\n".join(f"- `{e}`: {_verdict(m['verdicts'][e])}" for e in engines
                         if e in m["verdicts"])
    failed = m.get("failed") or {}
    right = ("yes" if m["all_correct"] else "**no**") + (
        f"; {len(failed)} engine(s) failed at some K, not run again there: "
        # a failure's reason is stderr: on one line, so that it stays in the sentence
        + "; ".join(f"{where}: {' '.join(why.split())[:300]}" for where, why in failed.items())
        if failed else "")
    return (head + "\n\n"
            + "Peak RSS of the process tree, MiB: median (min–max) over rounds\n\n"
            + table(["K", *engines], peak_rows) + "\n\n"
            + "Growth over the second half: RSS at 100 % of the run / RSS at 50 % (each the "
              f"highest sample in the last {p['at_width'] * 100:g} % of the run's time before it), "
              f"median (min–max); bold: a round above {f1(bound)}\n\n"
            + table(["K", *engines], growth_rows) + "\n\n"
            + "State size: the distinct keys of the fullest window (the (window, key) entries "
              "live when it ends), the output rows, and RSS per live key: (median peak RSS at "
              "K - the same engine's at the smallest K) / keys per window, bytes\n\n"
            + table(["K", "keys per window", "output rows", *engines], state_rows) + "\n\n"
            + "Wall time of the whole process, s: median (min–max)\n\n"
            + table(["K", *engines], wall_rows) + "\n\n"
            + f"Where memory stops being bounded (rule: {m['rule']}):\n\n" + verdicts + "\n\n"
            + "Every output right (its rows and a digest of every (window end, key, count, "
              f"sum) against numpy's from the same input; the counts' total against the "
              f"events): {right}.")
