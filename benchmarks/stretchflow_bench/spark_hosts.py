"""``spark-hosts-loss``: what losing a worker costs a Spark batch job (issue #21).

A cluster of separate hosts (:func:`stretchflow.spark.hosts.netns_cluster`: a master, two
workers of one core each and the driver, each in its own network namespace) runs the same
batch wordcount again and again in **one** driver process (:data:`SERVE`: one session, so the
20-40 s session start is paid once and measured apart). Cycles alternate an undisturbed run
and a run during which worker 2's process tree is SIGKILLed at a time drawn (seeded) from
``kill_range`` × the undisturbed median so far; after each kill the worker is started again
and the bench waits until the application has an executor on it once more (outside the timed
region) and runs one untimed job, so that the next undisturbed run does not pay the new
executor's cold start. A kill *landed* when the job outlived it (its own time, taken in the
driver from after the job was sent, is longer than the delay of the kill): only cycles whose
kill landed count, and cycles are drawn until ``repeats`` have landed or ``3 × repeats`` kills
were drawn (issue #33: a kill after the job's end measures an idle worker's restart, not a
loss). Every run's output is compared with the reference executor's (line multisets). The
driver times each job around ``cli.main`` (the session already running); each repeat is wrapped in
:func:`~stretchflow_bench.common.repeat_probe` (1-minute load, other processes' CPU).

Where network namespaces cannot be made (not root, no iproute2), the result says so
(``metrics.unavailable``) instead of numbers.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from stretchflow.runtime import procfs

from .common import repeat_probe, summarize, write_result

#: the driver: runs each JSON argv read from stdin with ``cli.main`` in this one process and
#: answers ``@@{"rc": .., "s": ..}`` (anything else on stdout is not an answer)
SERVE = textwrap.dedent("""
    import json, sys, time
    from stretchflow.cli import main
    for line in sys.stdin:
        t0 = time.perf_counter()
        try:
            rc = main(json.loads(line))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        print("@@" + json.dumps({"rc": rc, "s": time.perf_counter() - t0}), flush=True)
""")


class _Driver:
    """The :data:`SERVE` process on the cluster's driver host."""

    def __init__(self, c: Any, events: Path, log: Path) -> None:
        self.c = c
        self.conf = [*c.conf_args(c.driver_conf(events)), "--spark-ui"]
        self.log = log
        with open(log, "ab") as err:
            self.proc = c.run_on("driver", [sys.executable, "-c", SERVE],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                 text=True)
        self.first = True

    def send(self, inp: Path, out: Path) -> None:
        argv = ["run", "wordcount", "--input", str(inp), "--output", str(out), "--engine",
                "spark", "--master", self.c.master_url, "-q"]
        if self.first:  # the settings start the session; a running one may not restate them
            argv += self.conf
            self.first = False
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> float:
        """The job's time; a failed job stops the bench."""
        rc, s = self.outcome()
        if rc != 0:
            raise RuntimeError(f"spark-hosts-loss: the driver's run failed (exit {rc}): "
                               f"{self._tail()}")
        return s

    def outcome(self) -> tuple[int, float]:
        """The job's exit code and time (a job that lost a worker may fail: the caller
        records it)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                got = json.loads(line[2:])
                return int(got["rc"]), float(got["s"])
        raise RuntimeError(f"spark-hosts-loss: the driver exited: {self._tail()}")

    def last_error(self) -> str:
        """The driver's last ``error:`` line (the one line a failed run prints)."""
        lines = [x for x in self.log.read_text(errors="replace").splitlines()
                 if x.startswith("error:")]
        return lines[-1][:400] if lines else "(no error line)"

    def _tail(self) -> str:
        logs = sorted((self.c.tmp / "logs").glob("*.log"))
        spark = logs[-1].read_text(errors="replace")[-1500:] if logs else ""
        return self.log.read_text(errors="replace")[-1500:] + spark

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system, with reaped children) of ``pids``, from ``/proc``."""
    import os

    fields = (procfs.stat_fields(pid) for pid in pids)
    total = sum(procfs.cpu_ticks(f) for f in fields if f is not None)
    return total / os.sysconf("SC_CLK_TCK")


def worker_loss(rows: int = 20_000, repeats: int = 3,
                kill_range: tuple[float, float] = (0.1, 0.7), seed: int = 1) -> dict[str, Any]:
    """Undisturbed and worker-loss runs of a batch wordcount, alternating, until ``repeats``
    kills have landed; see the module."""
    import stretchflow as sf
    from stretchflow.errors import EngineUnavailableError
    from stretchflow.io.generators import tweets, write_table
    from stretchflow.queries import build_query
    from stretchflow.spark.hosts import (
        failed_tasks,
        netns_cluster,
        read_events,
        removed_executors,
        wait_executor,
    )

    try:
        ctx = netns_cluster(workers=2, cores_per_worker=1)
        c = ctx.__enter__()
    except EngineUnavailableError as e:
        return {"unavailable": str(e)}
    try:
        work = c.tmp / "bench"
        work.mkdir()
        inp = work / "tweets.jsonl"
        write_table(tweets(rows, seed=seed, rate=200), inp)
        ref = work / "ref.jsonl"
        flow = sf.Flow("wordcount")  # what `stretchflow run wordcount` builds
        build_query("wordcount", [flow.source(sf.io.jsonl(inp))]).sink(str(ref))
        flow.run("reference")
        want = Counter(ref.read_text().splitlines())
        driver = _Driver(c, work / "events", work / "driver.log")
        try:
            t0 = time.perf_counter()
            driver.send(inp, work / "first.jsonl")
            first_job_s = driver.answer()
            session_and_first_s = time.perf_counter() - t0
            runs: list[dict[str, Any]] = []
            draw = random.Random(seed)
            r = landed = 0
            while landed < repeats and r < 3 * repeats:
                for variant in ("undisturbed", "worker_lost"):
                    out = work / f"{variant}-{r}.jsonl"
                    run: dict[str, Any] = {"variant": variant, "repeat": r}
                    with repeat_probe() as probe:
                        driver.send(inp, out)
                        if variant == "worker_lost":
                            base = statistics.median(x["wall_s"] for x in runs
                                                     if x["variant"] == "undisturbed")
                            run["kill_at_s"] = draw.uniform(*kill_range) * base
                            time.sleep(run["kill_at_s"])
                            gone = _cpu_s(c.host_pids("worker2"))
                            run["processes_killed"] = len(c.kill_worker(2))
                        if variant == "worker_lost":
                            rc, run["wall_s"] = driver.outcome()
                            if rc != 0:  # the job failed: recorded, never dropped
                                run["job_failed"] = driver.last_error()
                        else:
                            run["wall_s"] = driver.answer()
                    if variant == "worker_lost":
                        # the probe counts our live descendants' CPU at its start and end:
                        # the killed ones' CPU vanished in between, which would read as other
                        # processes' work. Their CPU just before the kill is put back.
                        run["killed_cpu_s"] = gone
                        probe["own_cpu_s"] += gone
                        if probe.get("other_cpu_s") is not None:
                            probe["other_cpu_s"] = max(0.0, probe["other_cpu_s"] - gone)
                    run["probe"] = probe
                    # a failed run writes nothing (its output file never appears)
                    run["identical"] = (None if "job_failed" in run
                                        else Counter(out.read_text().splitlines()) == want)
                    if variant == "worker_lost":
                        # the job outlived the kill: the loss hit it, not the idle session
                        # (the driver's clock starts after the send, so this never counts
                        # a kill that came after the job's end)
                        run["kill_during_job"] = run["wall_s"] > run["kill_at_s"]
                        # the timed samples: a failed job's time says nothing of the loss
                        landed += run["kill_during_job"] and "job_failed" not in run
                        c.start_worker(2)
                        wait_executor(c.driver_ui, c.hosts["worker2"])
                        # one untimed job on the new executor: the next undisturbed run
                        # would otherwise pay its cold JVM (without it, at 9e7b48b, the
                        # undisturbed runs took 1.5-5.5 s and the median lost-worker run,
                        # on the one warm worker, less than the undisturbed median)
                        warm = work / "warm.jsonl"
                        driver.send(inp, warm)
                        driver.answer()
                        warm.unlink()
                    out.unlink(missing_ok=True)
                    runs.append(run)
                r += 1
        finally:
            driver.close()
        events = read_events(work / "events")
        u = [x["wall_s"] for x in runs if x["variant"] == "undisturbed"]
        # only the kills that landed: one after the job's end cost the job nothing; a job
        # that failed has no time to compare (it is counted apart)
        landed_runs = [x for x in runs if x.get("kill_during_job")]
        k = [x["wall_s"] for x in landed_runs if "job_failed" not in x]
        if not k:
            raise RuntimeError(f"spark-hosts-loss: none of {r} kills landed during a job that "
                               f"then finished (undisturbed runs took "
                               f"{sorted(round(x, 1) for x in u)} s; jobs failed: "
                               f"{[x['job_failed'] for x in runs if 'job_failed' in x]})")
        return {
            "rows": rows, "outputs": sum(want.values()),
            "session_start_and_first_job_s": session_and_first_s,
            "first_job_s": first_job_s,
            "undisturbed_s": summarize(u), "worker_lost_s": summarize(k),
            "extra_s_difference_of_medians": statistics.median(k) - statistics.median(u),
            "ratio_of_medians": statistics.median(k) / statistics.median(u),
            "outputs_identical": all(x["identical"] for x in runs if x["identical"] is not None),
            "kills_drawn": r, "kills_landed": len(landed_runs),
            "jobs_failed": [x["job_failed"] for x in runs if "job_failed" in x],
            "executors_removed": len(removed_executors(events)),
            "failed_tasks": dict(Counter(failed_tasks(events))),
            "runs": runs,
        }
    finally:
        ctx.__exit__(None, None, None)


def _plot(path: Path, m: dict[str, Any], quick: bool) -> None:
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    if "unavailable" in m:
        ax.text(0.5, 0.5, "not measured:\n" + textwrap.fill(m["unavailable"], 60),
                ha="center", va="center", fontsize=8, transform=ax.transAxes)
        ax.set_axis_off()
    else:
        names = ("undisturbed", "worker_lost")
        for i, name in enumerate(names):
            s = m[f"{name}_s"]
            ax.bar(i, s["median"], color=("tab:blue", "tab:red")[i])
            ax.errorbar(i, s["median"], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                        color="black", capsize=6)
            runs = [x for x in m["runs"] if x["variant"] == name]
            xs = [x["wall_s"] for x in runs if name == "undisturbed"
                  or (x["kill_during_job"] and "job_failed" not in x)]
            ax.plot([i] * len(xs), xs, "k.", alpha=0.6)
            failed = [x["wall_s"] for x in runs if "job_failed" in x]
            if failed:
                ax.plot([i] * len(failed), failed, "x", color="tab:red",
                        label="job failed after the kill (not in the bar)")
            late = [x["wall_s"] for x in runs if name != "undisturbed"
                    and not x["kill_during_job"] and "job_failed" not in x]
            if late:  # drawn, but the job had ended: not in the bar
                ax.plot([i] * len(late), late, "x", color="grey",
                        label="kill after the job's end (not counted)")
            if failed or late:
                ax.legend(fontsize=7, loc="upper left")
        ax.set_xticks(range(2), ["undisturbed", "worker 2 SIGKILLed"])
        ax.set_ylabel("batch wordcount wall time (s), median, min-max")
        ax.set_title(f"{m['rows']} tweets, 2 workers x 1 core; extra "
                     f"{m['extra_s_difference_of_medians']:.1f} s (difference of medians)",
                     fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    save_figure(plt, fig, path, quick)


def run(quick: bool, out_dir: str | None) -> Path:
    params: dict[str, Any] = ({"rows": 4_000, "repeats": 1, "kill_range": (0.1, 0.7)} if quick
                              else {"rows": 40_000, "repeats": 5, "kill_range": (0.1, 0.7)})
    m = worker_loss(**params)
    path = write_result("spark-hosts-loss", {**params, "quick": quick, "workers": 2,
                                             "cores_per_worker": 1,
                                             "hosts": "network namespaces"}, m, out_dir)
    _plot(path.with_suffix(".png"), m, quick)
    return path
