"""The renderer of docs/RESULTS.md's ``spark-hosts-loss`` block (issue #21): what a lost
worker costs a batch job on a cluster of separate hosts (:mod:`stretchflow_bench.spark_hosts`).
"""

from __future__ import annotations

from .report_tables import Doc, f1, f2, n0, renderer, spread, table


@renderer("spark-hosts-loss", "spark-hosts-loss")
def _hosts_loss(d: Doc) -> str:
    m = d["metrics"]
    if "unavailable" in m:
        return f"Not measured on that machine: {m['unavailable']}."
    p = d["parameters"]
    rows = []
    for name, label in (("undisturbed", "undisturbed"),
                        ("worker_lost", "worker 2 SIGKILLed during the job")):
        runs = [r for r in m["runs"] if r["variant"] == name
                and (name == "undisturbed" or (r["kill_during_job"] and "job_failed" not in r))]
        rows.append([label, spread(m[f"{name}_s"], f1), str(len(runs)),
                     "yes" if all(r["identical"] for r in runs) else "**no**"])
    late = m["kills_drawn"] - m["kills_landed"]
    jobs_failed = m.get("jobs_failed", [])
    failed = ", ".join(f"{k} × {v}" for k, v in sorted(m["failed_tasks"].items())) or "none"
    return (f"Batch wordcount of {n0(m['rows'])} tweets ({n0(m['outputs'])} outputs) on "
            f"{p['workers']} workers of {p['cores_per_worker']} core each and a driver, each in "
            f"its own network namespace; one driver session for all runs (session start and "
            f"first job {f1(m['session_start_and_first_job_s'])} s, not counted). Worker 2's "
            f"process tree is SIGKILLed at a time drawn from {f2(p['kill_range'][0])}–"
            f"{f2(p['kill_range'][1])} × the undisturbed median so far; a kill counts only "
            f"when it landed during the job (the job outlived it): {m['kills_landed']} of "
            f"{m['kills_drawn']} drawn kills landed"
            + (f" ({late} came after the job's end: not in the table, their outputs still "
               f"checked)" if late else "") + "."
            + (f" **{len(jobs_failed)} job(s) failed** after a kill that landed (no output "
               f"written; not in the table): {jobs_failed[0]}" if jobs_failed else "") + "\n\n"
            + table(["run", "wall s, median (min–max)", "runs",
                     "output = reference"], rows)
            + f"\n\nExtra wall time with a lost worker: "
            f"**{m['extra_s_difference_of_medians']:+.1f} s** "
            f"(difference of medians, landed kills only; ratio of medians "
            f"{f2(m['ratio_of_medians'])}). Every run's output = reference: "
            f"{'yes' if m['outputs_identical'] else '**no**'}. "
            f"Executors removed: {m['executors_removed']}; failed tasks (retried): {failed}.")


#: the blocks this module registers (report.py imports it by this name)
RENDERED = ("spark-hosts-loss",)
