"""The renderer of docs/RESULTS.md's block for the DEBS'19 performance-model validation
(``stretchflow-model``, :mod:`stretchflow_bench.model`): the model's measured inputs, its
predictions beside the measurements at Π = 1, 2, the relative errors, the predictions beyond
Π = 2 (labelled as predictions only) and the paper's own statement of its accuracy."""

from __future__ import annotations

from .report_tables import Doc, f1, f2, n0, renderer, spread, table

_ENGINES = (("vsn", "VSN (vsn, threads)"), ("sn", "SN (sn, thread channels)"))


def _pct(x: float) -> str:
    return f"{round(x * 100):+d} %"  # never "-0 %"


@renderer("stretchflow-model", "stretchflow-model")
def _model(d: Doc) -> str:
    m = d["metrics"]
    inp, ov = m["inputs_us"], m["overheads_us"]
    rows_in = []
    for eng, label in _ENGINES:
        x = "d_C" if eng == "vsn" else "d_R"
        skip = f"{f2(ov['vsn']['d_skip'])}" if eng == "vsn" else "—"
        rows_in.append([
            label, f2(inp[eng]["d_I"]), f2(inp[eng]["d_P"]), f2(inp[eng]["d_O"]), skip,
            f"{f2(ov[eng][x]['coef_over_d_I'])} (Table 1: {ov[eng][x]['table1_coef_over_d_I']})",
            f"{f2(ov[eng]['d_M']['coef_over_d_I'])} "
            f"(Table 1: {ov[eng]['d_M']['table1_coef_over_d_I']})"])
    rows_cmp = []
    for eng, label in _ENGINES:
        for p in ("1", "2"):
            c = m["compare"][f"{eng}{p}"]
            loaded = (f"{n0(c['loaded'])} ({_pct(c['rel_error_loaded'])}) on "
                      f"{spread(c['available_cores'], f2)} CPUs" if "loaded" in c else "—")
            rows_cmp.append([label, p, spread(m["measured"][f"{eng}{p}"]["tuples_per_s"]),
                             f"{n0(c['paper'])} ({_pct(c['rel_error_paper'])})",
                             f"{n0(c['machine'])} ({_pct(c['rel_error_machine'])})", loaded])
        s = m["compare"][f"{eng}_speedup_2_over_1"]
        rows_cmp.append([label, "2 / 1", f"{f2(s['measured_ratio_of_medians'])}× "
                         "(ratio of medians)", f"{f2(s['paper'])}×", f"{f2(s['machine'])}×",
                         ""])
    only = [str(p) for p in m["predicted_only_p"]]
    rows_pred = [[label]
                 + [f"{n0(m['predicted'][eng]['paper'][p])} / "
                    f"{n0(m['predicted'][eng]['machine'][p])}" for p in only]
                 for eng, label in _ENGINES]
    acc = d["parameters"]["paper_accuracy"]
    runs = m["measured"]["vsn1"]["tuples_per_s"]["n"]
    return (
        f"Synthetic per-tuple-cost aggregate ({n0(m['keys'])} keys, {n0(m['window_ms'])} ms "
        f"tumbling window, SHA-256 over {m['work_kib']} KiB per tuple, "
        f"{f1(m['work_alone_us'])} CPU µs alone), {n0(m['rows'])} tuples per measured run, "
        f"{runs} alternating rounds; inputs calibrated on {n0(m['calib_rows'])} tuples. "
        f"Costs are CPU µs per input tuple of each stage's threads. The paper's d^I was "
        f"{acc['paper_d_I_ms']} ms.\n\n"
        + table(["engine", "d^I", "d^P", "d^O", "d^skip", "d^C or d^R slope / d^I",
                 "d^M slope / d^I"], rows_in)
        + "\n\nPredicted vs measured throughput (tuples/s; relative error = (predicted − "
        "measured) / measured). *paper*: §8's max over the stages with these costs, each "
        f"stage on its own core; *machine*: also bounded by the GIL and {m['cores']} cores; "
        "*loaded*: the machine bound on the CPUs each run had (all minus other processes' "
        "CPU time during it), median over runs.\n\n"
        + table(["engine", "Π", "measured, median (min–max)", "predicted, paper (error)",
                 "predicted, machine (error)", "predicted, loaded (error)"], rows_cmp)
        + f"\n\n**Prediction only** (not measurable on {m['cores']} cores), paper / machine "
        "tuples/s:\n\n"
        + table(["engine", *(f"Π = {p}" for p in only)], rows_pred)
        + f"\n\nThe paper's own accuracy ({acc['citation']}): no number; “{acc['claim']}”.")
