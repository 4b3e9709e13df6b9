"""The renderers of docs/RESULTS.md's report blocks (:mod:`stretchflow_bench.report`) for the
machine, the reference and the VSN results, and the formatting they share with
:mod:`stretchflow_bench.report_more` (SN, ordered, slack, Spark, speed). Each renderer turns
one or more result JSONs into Markdown, with numbers formatted from the JSON only.

Every block opens with its sources: the file, when it was measured, the commit and whether the
machine was quiet (a measured property, :func:`stretchflow_bench.common.quiet`; "not measured"
for results that predate the probes). A ratio computed here from two medians says "ratio of
medians"; a ratio the benchmark summarized per repeat says "median of per-round ratios". A target's
verdict (:func:`verdict`) is met only when every round is past the target, with the per-round
range beside it (issue #33); where the JSON keeps only min/median/max per variant, over the
conservative interval of the ratio (:func:`ratio_interval`); one run has no interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import Results

Doc = dict[str, Any]


class ReportError(ValueError):
    """A results file or RESULTS.md that cannot be rendered: names the file, the place and
    the reason."""

RENDERERS: dict[str, Callable[[Results], str]] = {}


# ---- formatting ---------------------------------------------------------------------------

def n0(x: float) -> str:
    """An integer with spaces between thousands, as the docs write them (94 892)."""
    return f"{x:,.0f}".replace(",", " ")


def f1(x: float) -> str:
    return f"{x:.1f}"


def f2(x: float) -> str:
    return f"{x:.2f}"


def f3(x: float) -> str:
    return f"{x:.3f}"


def ms(x: float) -> str:
    """Milliseconds: one decimal below 100, whole above."""
    return f1(x) if x < 100 else n0(x)


def mega(x: float) -> str:
    return f"{x / 1e6:,.0f} M".replace(",", " ")


def spread(s: Doc, fmt: Callable[[float], str] = n0) -> str:
    """``median (min–max)`` of a min/median/max summary."""
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def ratio_of_medians(a: Doc, b: Doc) -> float:
    return a["median"] / b["median"]


#: what :func:`verdict` judges: per-round values (a list), a min/median/max summary of them
#: (its min and max are the extreme rounds; ``n`` the number of rounds), or one number (one run)
Values = float | Sequence[float] | Mapping[str, Any]


def _extremes(values: Values) -> tuple[float, float, int]:
    """``(lowest, highest, rounds)`` of :data:`Values`."""
    if isinstance(values, Mapping):
        lo, hi = float(values["min"]), float(values["max"])
        n = values.get("n")
        return lo, hi, int(n) if n is not None else (1 if lo == hi else 2)
    if isinstance(values, int | float):
        return float(values), float(values), 1
    got = [float(v) for v in values]
    if not got:
        raise ValueError("a verdict needs at least one value")
    return min(got), max(got), len(got)


def _shown(x: float, target: float, fmt: Callable[[float], str]) -> str:
    """``x`` as ``fmt`` writes it, with more decimals where ``fmt`` would write the target
    for a value that is not the target (0.895 against 0.90 must not read 0.90)."""
    s = fmt(x)
    if x != target and s == fmt(target):
        for k in range(3, 10):
            s = f"{x:.{k}f}"
            if s != f"{target:.{k}f}":
                break
    return s


def verdict(values: Values, target: float, higher_is_better: bool = True, *,
            fmt: Callable[[float], str] = f2, unit: str = "", per: str = "per round") -> str:
    """A target's verdict over every round (issue #33): **met** only when every round's value
    is past ``target`` (``>=`` it, or ``<=`` it when lower is better), with the per-round
    range beside it; **not met** when the range crosses the target or lies wholly short of
    it. One value (one run, or a summary with ``n`` = 1) has no interval: it is never called
    met, only "met in the one run measured". ``per`` names the range ("per round", "per run",
    "conservative interval" for :func:`ratio_interval`); ``unit`` follows every number."""
    lo, hi, n = _extremes(values)
    sign = "≥" if higher_is_better else "≤"
    goal = f"target {sign} {fmt(target)}{unit}"

    def past(x: float) -> bool:
        return x >= target if higher_is_better else x <= target

    if n == 1:
        ok = "met" if past(lo) else "not met"
        return (f"**{ok} in the one run measured** ({_shown(lo, target, fmt)}{unit}, {goal}; "
                f"one run: no interval)")
    rng = f"{per} {_shown(lo, target, fmt)}–{_shown(hi, target, fmt)}{unit}"
    worst, best = (lo, hi) if higher_is_better else (hi, lo)
    if past(worst):
        return f"**met** ({rng}, {goal})"
    if past(best):
        return f"**not met**: {rng} crosses the target {fmt(target)}{unit}"
    return (f"**not met**: {rng}, wholly {'short of' if higher_is_better else 'over'} the "
            f"{goal}")


def ratio_interval(a: Doc, b: Doc) -> dict[str, float]:
    """The conservative interval of the ratio ``a / b`` where the JSON keeps only each side's
    min/median/max over its rounds, not the rounds themselves: [min_a / max_b, max_a /
    min_b], which holds every ratio any pairing of the two sides' rounds could give. The same
    interval serves a lower-is-better ratio (:func:`verdict` then needs its max past the
    target). A summary for :func:`verdict`, with ``per="conservative interval"``; one run on
    each side is one run."""
    return {"min": a["min"] / b["max"], "median": a["median"] / b["median"],
            "max": a["max"] / b["min"], "n": max(a.get("n", 2), b.get("n", 2))}


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def when(doc: Doc) -> str:
    t = doc.get("time", "")
    return f"{t[:10]} {t[11:16]} UTC" if len(t) >= 16 else "time not recorded"


def _loads(doc: Doc) -> list[float]:
    """The 1-minute load averages a result recorded (speed's per-round list, or the probes)."""
    from .common import find_probes

    found: list[float] = []

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            if "loadavg_1min" in o and isinstance(o["loadavg_1min"], list):
                for r in o["loadavg_1min"]:  # speed's {"before", "after"} rounds, or bare
                    if isinstance(r, dict):
                        found.extend(r[k] for k in ("before", "after") if k in r)
                    elif isinstance(r, int | float):
                        found.append(r)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(doc["metrics"])
    for p in find_probes(doc["metrics"]):
        found += [p["load_before"], p["load_after"]]
    return found


def quiet_of(doc: Doc) -> bool | None:
    """Whether ``doc``'s machine was quiet, by today's :func:`.common.quiet` over the probes it
    recorded (so that every result is judged by one rule, also one written before the rule's
    last change), else the flag it was written with."""
    from .common import find_probes, quiet

    q = quiet(find_probes(doc.get("metrics") or {}))
    return doc.get("quiet") if q is None else q


def source(name: str, doc: Doc | None) -> str:
    """One line naming a block's source file and what it says about the run."""
    if doc is None:
        return (f"*Not measured*: `benchmarks/results/{name}.json` does not exist "
                f"(`stretchflow bench run {name}` writes it).")
    commit = doc.get("commit")
    commit_s = f"commit `{commit[:10]}`" if commit else "commit not recorded"
    if commit and doc.get("commit_dirty"):
        commit_s += " (with uncommitted changes)"
    q = quiet_of(doc)
    quiet_s = {True: "quiet: yes (measured)", False: "quiet: **no** (measured)",
               None: "quiet: not measured"}[q if q in (True, False) else None]
    loads = _loads(doc)
    if loads:
        quiet_s += f", 1-min load {f1(min(loads))}–{f1(max(loads))}"
    from .common import find_probes

    others = [p["other_cpu_s"] / p["wall_s"] for p in find_probes(doc["metrics"])
              if p.get("other_cpu_s") is not None and p.get("wall_s")]
    if others:
        quiet_s += f", other processes' CPU up to {n0(max(others) * 100)} % of a repeat's wall"
    return f"Source: `{name}.json`, {when(doc)}, {commit_s}, {quiet_s}."


def renderer(block: str, *sources: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Registers ``fn(*docs) -> Markdown`` as block ``block`` over the results ``sources``.
    With one source that was never run the block says so; with several, ``fn`` gets None for
    the missing ones and skips their rows."""
    def wrap(fn: Callable[..., str]) -> Callable[..., str]:
        def render(results: Results) -> str:
            docs = [results.get(s) for s in sources]
            head = "\n".join(source(s, d) for s, d in zip(sources, docs, strict=True)) + "\n"
            if all(d is None for d in docs):
                return head
            # a figure is shown when its result names it or the bench wrote NAME.png beside it
            figures = "".join(
                f"\n\n![{s}](../benchmarks/results/{png})"
                for s, d in zip(sources, docs, strict=True)
                if d is not None and (png := d.get("plot") or f"{s}.png")
                and (results.directory / png).exists())
            try:
                return head + "\n" + fn(*docs) + figures
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                files = ", ".join(f"{results.directory / s}.json"
                                  for s, d in zip(sources, docs, strict=True) if d is not None)
                raise ReportError(f"{files}: block {block!r} cannot be rendered: "
                                  f"{type(e).__name__} {e}") from e
        RENDERERS[block] = render
        return fn
    return wrap


# ---- the machine --------------------------------------------------------------------------

def _machine(results: Results) -> str:
    seen: dict[str, list[str]] = {}
    for name in results.names():
        m = (results.get(name) or {}).get("machine") or {}
        gil = "with the GIL" if m.get("gil_enabled", True) else "free-threaded"
        key = (f"{m.get('cpus')} CPUs, {m.get('implementation')} {m.get('python')} {gil}, "
               + ", ".join(f"{k} {v}" for k, v in sorted((m.get("versions") or {}).items())))
        seen.setdefault(key, []).append(name)
    if not seen:
        return "*Not measured*: no results in the results directory.\n"
    rows = [[k, str(len(v))] for k, v in seen.items()]
    return table(["machine and versions (from each JSON)", "results"], rows) + "\n"


RENDERERS["machine"] = _machine


def _provenance(results: Results) -> str:
    """Which commit each result was measured at and whether the machine was quiet (issue #33,
    item 6: every result re-run at one commit on a quiet machine). One row per commit, newest
    result first; a result with no commit, or measured with uncommitted changes, is its own
    row, so what is left to re-run can be read off this table."""
    rows: dict[tuple[str, bool], list[tuple[str, str, Any]]] = {}
    for name in results.names():
        doc = results.get(name) or {}
        commit = doc.get("commit") or ""
        key = (commit[:10], bool(commit and doc.get("commit_dirty")))
        rows.setdefault(key, []).append((doc.get("time", ""), name, quiet_of(doc)))
    if not rows:
        return "*Not measured*: no results in the results directory.\n"

    def label(key: tuple[str, bool]) -> str:
        commit, dirty = key
        if not commit:
            return "not recorded"
        return f"`{commit}`" + (" with uncommitted changes" if dirty else "")

    def quiet_names(found: list[tuple[str, str, Any]], q: Any) -> str:
        names = sorted(n for _, n, qq in found if qq is q)
        return ", ".join(names) if names else "–"

    def dates(found: list[tuple[str, str, Any]]) -> str:
        first, last = min(t for t, _, _ in found)[:10], max(t for t, _, _ in found)[:10]
        return first if first == last else f"{first} – {last}"

    order = sorted(rows, key=lambda k: max(t for t, _, _ in rows[k]), reverse=True)
    out = [[label(k), dates(rows[k]),
            str(len(rows[k])), quiet_names(rows[k], True), quiet_names(rows[k], False),
            quiet_names(rows[k], None)] for k in order]
    return table(["commit", "measured", "results", "quiet: yes", "quiet: no",
                  "quiet: not measured"], out) + "\n"


RENDERERS["provenance"] = _provenance


# ---- reference and VSN --------------------------------------------------------------------

@renderer("reference-wordcount", "reference-wordcount")
def _reference(d: Doc) -> str:
    m, p = d["metrics"], d["parameters"]
    ref, one = m["reference"], m["1T"]
    rom = ratio_of_medians(ref["tuples_per_s"], one["tuples_per_s"])
    rows = [[label, spread(r["tuples_per_s"]), f"{n0(r['peak_rss_mb']['median'])} MB"]
            for label, r in (("reference executor", ref), ("1T loop", one))]
    rows += [["**reference / 1T**, ratio of medians", f"**{f2(rom)}**", ""],
             ["reference / 1T, median of per-repeat ratios",
              spread(m["ratio_reference_over_1T"], f2), ""]]
    return (f"{n0(p['rows'])} generated tweets (seed {p['seed']}), {p['query']}, "
            f"{p['repeats']} repeats; outputs identical: {d.get('outputs_identical')}.\n\n"
            + table([f"median of {p['repeats']} (min–max)", "tuples/s", "peak RSS"], rows))


@renderer("vsn-reconfiguration", "vsn-reconfiguration")
def _reconfiguration(d: Doc) -> str:
    m = d["metrics"]
    cap = m["capacity"]["tuples_per_s"]
    rows = []
    loads_of = (("70%", "70 % of C"), ("120%", "120 % of C"), ("full", "full speed"))
    # the wait for the slowest instance (control tuple in ESG_in to the last instance at the
    # barrier, Reconfiguration.phases_ms): a column only for JSON that has it
    phased = any((loads[ld].get("phases_ms") or {}).get("reach")
                 for loads in m["variants"].values() for ld, _ in loads_of)
    for name, loads in m["variants"].items():
        for load, label in loads_of:
            s = loads[load]
            dur = s["duration_ms"]
            rows.append([name, label, f"{s['applied']} of {s['requested']}",
                         f"{f2(dur['p50'])} ms", f"{f2(dur['p99'])} ms", f"{f1(dur['max'])} ms"])
            if phased:
                reach = (s.get("phases_ms") or {}).get("reach")
                rows[-1].append(f"{f2(reach['p50'])} / {f2(reach['p99'])} ms" if reach else "–")
    default = next(v for k, v in m["variants"].items() if "default" in k)
    p99s = [default[ld]["duration_ms"]["p99"] for ld, _ in loads_of]
    return (f"{m['query']}, parallelism {' → '.join(map(str, m['steps']))} (repeated), a "
            f"reconfiguration every {n0(m['gap_tuples'])} tuples; one instance's capacity C = "
            f"{n0(cap['median'])} tuples/s ({n0(cap['min'])}–{n0(cap['max'])}), calibrated in "
            f"the run; 70 % stepping to 120 % of C in one run, full speed in another. "
            f"Target p99 ≤ 5 ms at every load (default max_spread; p99 "
            f"{' / '.join(f2(x) for x in p99s)} ms at {' / '.join(lb for _, lb in loads_of)}), "
            f"judged on the worst load's: "
            f"{verdict(max(p99s), 5.0, higher_is_better=False, unit=' ms')}.\n\n"
            + table(["max_spread", "load", "applied", "p50", "p99", "max"]
                    + (["to the last instance: p50 / p99"] if phased else []), rows))


@renderer("vsn-reconfiguration-rows", "vsn-reconfiguration-rows")
def _reconfiguration_rows(d: Doc) -> str:
    return "\n\n".join(_reconfiguration_rows_of(m) for m in d["metrics"]["flows"].values())


def _reconfiguration_rows_of(m: dict[str, Any]) -> str:
    rows = []
    for k, r in enumerate(m["stepping"]):
        a = r["all"]["duration_ms"]
        ops = "; ".join(f"{op} {f2(s['duration_ms']['p50'])} / {f2(s['duration_ms']['p99'])}"
                        for op, s in r["operators"].items())
        rows.append([str(k + 1), f"{r['all']['applied']} of {r['all']['requested']}",
                     f"{f2(a['p50'])} ms", f"{f2(a['p99'])} ms", f"{f1(a['max'])} ms", ops,
                     f"{f2(r['elapsed_s'])} s", f"{f2(m['fixed'][k]['elapsed_s'])} s",
                     "yes" if r["output_identical"] and m["fixed"][k]["output_identical"]
                     else "**no**"])
    return (f"{m['flow']} with lambdas over {n0(m['events'])} NEXMark bids ({m['input']}, read as "
            f"batches of rows), full speed; every O+ stepping "
            f"{' → '.join(map(str, m['steps']))} (repeated), a reconfiguration every "
            f"{n0(m['gap_tuples'])} source tuples, {m['reconfigurations_per_run']} per "
            f"operator and run; {m['repeats']} round(s), each with the same flow at parallelism 1 "
            f"without reconfigurations, alternating. Target p99 ≤ 5 ms with batches in flight "
            f"(every run): "
            f"{verdict(m['p99_ms'], 5.0, higher_is_better=False, unit=' ms', per='p99 per run')}"
            f".\n\n"
            + table(["run", "applied", "p50", "p99", "max", "per operator: p50 / p99 (ms)",
                     "run time, stepping", "run time, fixed Π = 1",
                     "outputs = reference"], rows))


@renderer("vsn-forward", "vsn-forward")
def _forward(d: Doc) -> str:
    rows = []
    for par, r in d["metrics"].items():
        paced, full = r["latency_ms_paced"], r["latency_ms_at_full_speed"]
        rows.append([par, n0(r["throughput_tuples_per_s"]),
                     f"{f1(paced['p50'])} / {f1(paced['p99'])} ms at {n0(r['paced_rate'])} t/s",
                     f"{n0(full['p50'])} / {n0(full['p99'])} ms"])
    return table(["Π", "throughput at full speed (tuples/s)", "latency live: p50 / p99",
                  "latency at full speed: p50 / p99"], rows)


@renderer("vsn-wordcount", "vsn-wordcount")
def _vsn_wordcount(d: Doc) -> str:
    m = d["metrics"]
    ref, vsn = m["tuples_per_s"]["reference"], m["tuples_per_s"]["vsn1"]
    rom = ratio_of_medians(vsn, ref)
    rows = [["reference", spread(ref)], ["VSN, Π = 1", spread(vsn)],
            ["**VSN / reference**, ratio of medians", f"**{f2(rom)}**"],
            ["VSN / reference, median of per-round ratios",
             spread(m["ratio_vsn1_over_reference"], f2)]]
    return (f"{n0(m['rows'])} tweets, {ref['n']} alternating runs. Target VSN ≥ 0.7× the "
            f"reference, met only when every round's ratio (VSN / the same round's reference) "
            f"is past it: {verdict(m['ratio_vsn1_over_reference'], 0.7)}.\n\n"
            + table(["", "tuples/s, median (min–max)"], rows))


@renderer("vsn-scalejoin", "vsn-scalejoin")
def _scalejoin(d: Doc) -> str:
    m = d["metrics"]
    c = {k: m[k]["comparisons_per_s"] for k in ("1T", "1T-runs", "vsn1", "vsn2")}
    rom = ratio_of_medians(c["vsn2"], c["vsn1"])
    per_round = m["speedup_vs_vsn1"]["vsn2"]
    k = m["kernel_alone"]
    rows = [["1T", spread(c["1T"], mega)], ["1T-runs", spread(c["1T-runs"], mega)],
            ["VSN Π = 1", spread(c["vsn1"], mega)
             + f": {f2(m['vsn1_over_1T_runs'])}× 1T-runs (ratio of medians)"],
            ["VSN Π = 2", spread(c["vsn2"], mega)],
            ["**speed-up Π = 2 / Π = 1**, ratio of medians", f"**{f2(rom)}**"],
            ["speed-up Π = 2 / Π = 1, median of per-round ratios", spread(per_round, f2)],
            ["the kernel alone, 2 threads / 1 thread, same run", f2(k["ratio_2_over_1"])]]
    return (f"{m['repeats']} rounds, every variant once per round; {n0(m['rows_per_stream'])} "
            f"tuples per stream, window {n0(m['window_ms'] / 1000)} s, {m['keys']} storage keys, "
            f"{m['comparisons'] / 1e9:.1f}·10⁹ comparisons, {n0(m['matches'])} matches. "
            f"Target Π = 2 ≥ 1.6× Π = 1, met only when every round's speed-up (Π = 2 / the "
            f"same round's Π = 1) is past it: {verdict(per_round, 1.6)}.\n\n"
            + table(["", "comparisons/s, median (min–max)"], rows))


def _elastic_rows(m: Doc) -> list[list[str]]:
    lat = m["latency_ms"]

    def lat_fmt(x: float) -> str:
        # each value in its own unit: a run whose p99 is seconds may have a p50 of ms
        return f"{f1(x)} ms" if x < 1000 else f"{x / 1000:.1f} s"

    reconf = m.get("reconfiguration_ms") or []
    rows = [["tuples", f"{n0(m['rows'])} in {n0(m['event_time_span_s'])} s of event time; "
                       f"wall {f1(m['wall_s'])} s"],
            ["latency", f"p50 {lat_fmt(lat['p50'])}, p99 {lat_fmt(lat['p99'])}, "
                        f"max {lat_fmt(lat['max'])}"],
            ["reconfigurations", f"{m['reconfigurations']}"
             + (f", each {ms(min(reconf))}–{ms(max(reconf))} ms" if reconf else "")],
            ["output pairs", n0(m["outputs"])]]
    changes = []
    series = m.get("metrics") or []
    for prev, cur in zip(series, series[1:], strict=False):
        if cur["parallelism"] != prev["parallelism"]:
            changes.append(f"{prev['parallelism']} → {cur['parallelism']} at "
                           f"{n0(cur['time'])} s ({n0(cur['input_rate'])} t/s)")
    if changes and len(changes) <= 12:
        rows.append(["parallelism changes (decision, input rate)", "; ".join(changes)])
    return rows


@renderer("vsn-q5", "vsn-q5")
def _q5(d: Doc) -> str:
    m = d["metrics"]
    th = m.get("thresholds") or {}
    return (f"Rates from [{n0(m['min_rate'])}, {n0(m['max_rate'])}] t/s, WS = "
            f"{n0(m['window_ms'] / 1000)} s, up to {m['max_parallelism']} instances"
            + (f", thresholds {n0(th['lower'] * 100)} / {n0(th['target'] * 100)} / "
               f"{n0(th['upper'] * 100)} %" if th else "") + ".\n\n"
            + table(["", "measured"], _elastic_rows(m)))


@renderer("vsn-hedge", "vsn-hedge")
def _hedge(d: Doc) -> str:
    m = d["metrics"]
    rows = [r for r in _elastic_rows(m) if not r[0].startswith("parallelism")]
    return (f"max_rate {n0(m['max_rate'])} t/s, WS = {n0(m['window_ms'] / 1000)} s, up to "
            f"{m['max_parallelism']} instances.\n\n" + table(["", "measured"], rows))

