"""Spark across hosts (issue #21): a master, two workers and the driver in separate network
namespaces (stretchflow.spark.hosts), joined by a bridge, each with its own address.

Every run is a ``stretchflow run ... --engine spark --master spark://MASTER:7077`` driven from
the ``driver`` namespace (:data:`DRIVE` runs several in one process: one session start), and
its output is compared with the reference executor's (per-timestamp multisets). What ran where
comes from the driver's event log (``spark.eventLog.enabled``): every task's host, the bytes a
task fetched from another host's executor (``Remote Bytes Read``: the shuffle crossed the
bridge), the tasks that failed and the executors removed. The event log is written by the
driver and outlives it, unlike its UI; a worker's executor stderr would not say which tasks
it ran at the default log level.

A lost worker is SIGKILLed (its whole process tree) while a task of the flow runs on it: the
driver's UI (``--spark-ui``) lists the executors' active tasks, and job 0 is the session's
warm-up. The cluster tests are ``slow`` (each starts one or more drivers, 20-40 s each on two
cores); ``make test`` runs them. Where namespaces cannot be made they are skipped, with the
reason :class:`HostsUnavailableError` gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conformance.contract import multiset
from stretchflow.cli import main
from stretchflow.io.parts import committed_parts, read_parts
from stretchflow.spark.hosts import (
    HostsUnavailableError,
    added_executors,
    failed_tasks,
    netns_cluster,
    read_events,
    remote_shuffle_bytes,
    removed_executors,
    task_hosts,
    wait_busy,
    wait_executor,
)
from stretchflow.spark.streaming import end_marker

#: runs each ``stretchflow`` argv of argv[1] (JSON) in one process, so one Spark session, and
#: makes the file ``done-<i>`` in directory argv[2] after step i; a string in the list is a
#: file to wait for (bounded) before going on
DRIVE = textwrap.dedent("""
    import json, os, sys, time
    from stretchflow.cli import main
    for i, step in enumerate(json.loads(sys.argv[1])):
        if isinstance(step, str):
            end = time.monotonic() + 300
            while not os.path.exists(step):
                if time.monotonic() > end:
                    sys.exit("timed out waiting for " + step)
                time.sleep(0.2)
            continue
        rc = main(step)
        if rc:
            sys.exit(rc)
        open(os.path.join(sys.argv[2], f"done-{i}"), "w").close()
""")

#: a user flow with two chained O+: wordcount, then per window the total and the largest
#: count by count parity (tests/conformance/flows.py's chain)
CHAIN_FLOW = textwrap.dedent("""
    from collections import Counter

    import stretchflow as sf


    def build_flow(params):
        flow = sf.Flow("chain")
        s = flow.source(sf.io.jsonl(params["input"], name="in0"))
        counts = s.aggregate(size=20_000, slide=10_000, keys=lambda t: Counter(t["text"].split()),
                             init=int, update=lambda n, c: n + c,
                             output=lambda w, n: {"word": w, "count": n}, name="count")
        summary = counts.aggregate(
            size=40_000, slide=20_000, keys=lambda t: {t["count"] % 2}, init=lambda: (0, 0),
            update=lambda acc, t: (acc[0] + t["count"], max(acc[1], t["count"])),
            output=lambda parity, acc: {"parity": parity, "total": acc[0], "max": acc[1]},
            name="summary")
        summary.sink(params["output"])
        return flow
""")


# -- the skip path: no Spark, no namespaces ---------------------------------------------------

def test_no_ip_command_is_a_clear_error(tmp_path):
    with pytest.raises(HostsUnavailableError, match=r"no `/nonexistent/ip` \(iproute2\)"):
        with netns_cluster(ip="/nonexistent/ip"):
            pass


def test_refused_namespaces_name_the_command_and_the_reason(tmp_path):
    """An ``ip`` that fails as an unprivileged one does: the error quotes the command and
    its message, and nothing is left in the temporary directory's parent."""
    fake = tmp_path / "ip"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *link\\ add*) "
                    "echo 'RTNETLINK answers: Operation not permitted' >&2; exit 2;; esac\n")
    fake.chmod(0o755)
    mine = f"stretchflow-sf{os.getpid():x}-*"
    before = set(Path(tempfile.gettempdir()).glob(mine))
    with pytest.raises(HostsUnavailableError) as e:
        with netns_cluster(ip=str(fake)):
            pass
    msg = str(e.value)
    assert "network namespaces unavailable" in msg and "link add" in msg
    assert "Operation not permitted" in msg
    assert set(Path(tempfile.gettempdir()).glob(mine)) == before  # its temp dir was removed


# -- the cluster ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("pyspark")
    ctx = netns_cluster(workers=2, cores_per_worker=1)
    try:
        c = ctx.__enter__()
    except HostsUnavailableError as e:
        pytest.skip(f"multi-host Spark tests: {e}")
    try:
        yield c
    finally:
        ctx.__exit__(None, None, None)


@pytest.fixture
def cl(cluster):
    """The module's cluster with both workers running (a failed test may have left one
    killed)."""
    for i in (1, 2):
        if not cluster.worker_running(i):
            cluster.start_worker(i)
    return cluster


def drive(c, steps: list, events: Path, ui: bool = False, cores: int | None = None
          ) -> subprocess.Popen:
    """Starts :data:`DRIVE` on the driver host. Every command gets the cluster's master; a
    ``run`` also ``--engine spark -q``. The driver's settings (events to ``events``, ``cores``
    executor cores to wait for) go to the first command only: it starts the process's
    session, and a later command may not restate settings a running session cannot change."""
    argvs: list = []
    for s in steps:
        if isinstance(s, str):
            argvs.append(s)
            continue
        first = not any(isinstance(a, list) for a in argvs)
        argv = [*s, "--master", c.master_url]
        if s[0] == "run":
            argv += ["--engine", "spark", "-q", *(["--spark-ui"] if ui and first else [])]
        if first:
            argv += c.conf_args(c.driver_conf(events, cores=cores))
        argvs.append(argv)
    return c.run_on("driver", [sys.executable, "-c", DRIVE, json.dumps(argvs),
                               str(events.parent)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(c, proc: subprocess.Popen, timeout: float = 480) -> None:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if proc.returncode != 0:
        logs = sorted((c.tmp / "logs").glob("*.log"))
        tail = logs[-1].read_text(errors="replace")[-3000:] if logs else ""
        pytest.fail(f"driver exited {proc.returncode}: {err[-2000:]}\nSpark log: {tail}")


def jsonl(path: Path) -> dict:
    return multiset((r["ts"], r) for r in map(json.loads, path.read_text().splitlines()))


def reference(tmp_path: Path, name: str, run: list[str]) -> dict:
    out = tmp_path / f"ref-{name}.jsonl"
    assert main([*run, "--output", str(out), "-q"]) == 0
    return jsonl(out)


def tweets_file(path: Path, rows: int, seed: int = 1, rate: int = 20) -> Path:
    assert main(["generate", "tweets", "--rows", str(rows), "--seed", str(seed),
                 "--rate", str(rate), "--out", str(path), "-q"]) == 0
    return path


def workers(c) -> set[str]:
    return {c.hosts["worker1"], c.hosts["worker2"]}


@pytest.mark.slow
def test_batch_flows_run_across_hosts(cl, tmp_path):
    """wordcount, paircount, scalejoin and a flow file with two chained O+ on the cluster give
    the reference's output; tasks ran on both workers and shuffle data crossed hosts."""
    tw = tweets_file(tmp_path / "tw.jsonl", 2000)
    main(["generate", "bandjoin", "--rows", "600", "--seed", "2", "--rate", "20",
          "--out", str(tmp_path / "bj.jsonl"), "-q"])
    app = tmp_path / "chain.py"
    app.write_text(CHAIN_FLOW)
    runs = {
        "wordcount": ["run", "wordcount", "--input", str(tw)],
        "paircount": ["run", "paircount", "--input", str(tw), "--param", "size=20000",
                      "--param", "slide=10000"],
        "scalejoin": ["run", "scalejoin", "--input", str(tmp_path / "bj-left.jsonl"),
                      "--input", str(tmp_path / "bj-right.jsonl"), "--param", "window=10000",
                      "--param", "band=500"],
    }
    want = {k: reference(tmp_path, k, r) for k, r in runs.items()}
    ref_chain = tmp_path / "ref-chain.jsonl"
    assert main(["run", str(app), "--param", f"input={tw}", "--param",
                 f"output={ref_chain}", "-q"]) == 0
    steps = [[*r, "--output", str(tmp_path / f"{k}.jsonl")] for k, r in runs.items()]
    steps.append(["run", str(app), "--param", f"input={tw}", "--param",
                  f"output={tmp_path / 'chain.jsonl'}"])
    events = tmp_path / "events"
    finish(cl, drive(cl, steps, events))
    for k in runs:
        assert want[k], k
        assert jsonl(tmp_path / f"{k}.jsonl") == want[k], k
    assert jsonl(ref_chain)
    assert jsonl(tmp_path / "chain.jsonl") == jsonl(ref_chain)
    ev = read_events(events)
    ran = task_hosts(ev)
    assert workers(cl) <= set(ran), ran  # both workers ran tasks
    assert set(ran) <= workers(cl)  # and no one else (the driver runs none)
    assert remote_shuffle_bytes(ev) > 0  # shuffle blocks fetched from the other host
    assert not failed_tasks(ev) and not removed_executors(ev)


@pytest.mark.slow
def test_lost_worker_in_a_batch_job_then_it_comes_back(cl, tmp_path):
    """Worker 2's process tree is SIGKILLed while it runs a task of the job: the job ends on
    worker 1 with the reference's output, the event log shows the lost executor and the
    failed task; worker 2 is started again, the same application gets a new executor on it
    and the next job runs."""
    tw = tweets_file(tmp_path / "tw.jsonl", 20_000, rate=200)
    run = ["run", "wordcount", "--input", str(tw)]
    want = reference(tmp_path, "wc", run)
    go = tmp_path / "worker-2-is-back"
    events = tmp_path / "events"
    proc = drive(cl, [[*run, "--output", str(tmp_path / "a.jsonl")], str(go),
                           [*run, "--output", str(tmp_path / "b.jsonl")]], events, ui=True)
    try:
        wait_busy(cl.driver_ui, cl.hosts["worker2"], 300,
                  alive=lambda: proc.poll() is None)
        killed = cl.kill_worker(2)
        assert len(killed) >= 3  # the worker JVM, its executor, the executor's Python
        wait_file(tmp_path / "done-0", proc)
        first = read_events(events)  # the first job has ended: its events are flushed
        cl.start_worker(2)
        wait_executor(cl.driver_ui, cl.hosts["worker2"])
        back_ms = time.time() * 1000
    finally:
        go.touch()
    finish(cl, proc)
    assert jsonl(tmp_path / "a.jsonl") == want
    assert jsonl(tmp_path / "b.jsonl") == want
    assert removed_executors(first), "no executor removed"
    assert failed_tasks(first), "no task failed with the worker"
    # the application got a new executor on the worker that came back. Whether the second
    # job's few short tasks use it is the scheduler's choice: once, registered 1 s before
    # the job, it got none of its 6 tasks (a new driver's jobs use both workers again:
    # the streaming and rescale tests check that)
    before, now = added_executors(first), added_executors(read_events(events))
    assert before.keys() < now.keys()
    assert {now[k] for k in now.keys() - before.keys()} == {cl.hosts["worker2"]}
    assert not failed_tasks([e for e in read_events(events)
                             if e.get("Task Info", {}).get("Launch Time", 0) >= back_ms])


def wait_file(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the driver exited ({proc.returncode}) before {path.name}"
        assert time.monotonic() < end, f"no {path.name} within {timeout} s"
        time.sleep(0.2)


def stream_files(d: Path, recs: list[str], files: int, start: int = 0,
                 end_ts: int | None = None) -> int:
    """Files f-N.jsonl in name order (the engine stages them in that order), the end marker
    last when ``end_ts`` is given; returns the next N."""
    d.mkdir(parents=True, exist_ok=True)
    step = -(-len(recs) // files)
    k = start
    for j in range(0, len(recs), step):
        (d / f".f-{k:05d}.tmp").write_text("".join(recs[j:j + step]))
        (d / f".f-{k:05d}.tmp").rename(d / f"f-{k:05d}.jsonl")
        k += 1
    if end_ts is not None:
        (d / f"f-{k:05d}.jsonl").write_text(end_marker(end_ts))
        k += 1
    return k


def parts(out: Path) -> list[tuple[int, dict]]:
    got = [(r["ts"], r) for r in read_parts(out)] if out.exists() else []
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    return got


def stream_case(tmp_path: Path, rows: int, rate: int = 50) -> tuple[list[str], dict, int]:
    tw = tweets_file(tmp_path / "tw.jsonl", rows, rate=rate)
    lines = tw.read_text().splitlines(keepends=True)
    last = json.loads(lines[-1])["ts"]
    return lines, reference(tmp_path, "wc", ["run", "wordcount", "--input", str(tw)]), last


@pytest.mark.slow
def test_streaming_across_hosts_survives_a_lost_worker(cl, tmp_path):
    """A streaming wordcount (one file per micro-batch) loses worker 2 in the middle of the
    query, after its first committed part, while a task runs there; the query ends on worker
    1. Worker 2 comes back, more files arrive and the query resumes from its checkpoint on
    both workers; the parts of both runs, concatenated, equal the reference."""
    lines, want, last = stream_case(tmp_path, 6000)
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    half = len(lines) * 2 // 3
    k = stream_files(inp, lines[:half], 8)
    run = ["run", "wordcount", "--input", str(inp), "--output", str(out), "--checkpoint",
           str(ckpt), "--max-files-per-trigger", "1"]
    ev1, ev2 = tmp_path / "events1", tmp_path / "events2"
    proc = drive(cl, [run], ev1, ui=True)
    end = time.monotonic() + 300
    while not (out.exists() and committed_parts(out)) and proc.poll() is None:
        assert time.monotonic() < end, "no part committed in 300 s"
        time.sleep(0.2)
    wait_busy(cl.driver_ui, cl.hosts["worker2"], 300,
              alive=lambda: proc.poll() is None)
    cl.kill_worker(2)
    finish(cl, proc)
    first = parts(out)
    e1 = read_events(ev1)
    assert removed_executors(e1), "no executor removed"
    assert workers(cl) <= set(task_hosts(e1))  # both ran tasks before the loss

    cl.start_worker(2)
    stream_files(inp, lines[half:], 3, start=k, end_ts=last)
    finish(cl, drive(cl, [run], ev2))
    got = parts(out)
    assert got[:len(first)] == first  # the first run's parts are kept
    assert multiset(got) == want
    e2 = read_events(ev2)
    assert workers(cl) <= set(task_hosts(e2)) and not failed_tasks(e2)


@pytest.mark.slow
def test_rescale_across_hosts(cl, tmp_path):
    """A streaming wordcount on two workers (4 state partitions) is stopped; its checkpoint
    is rescaled to 1 partition (``stretchflow spark rescale`` on the driver host) and the
    query resumes on one worker; then rescaled to 3 and resumed on two. The concatenated
    parts equal the reference and every earlier part is kept."""
    from stretchflow.spark.rescale import state_partitions

    # 300 s of event time: each third closes windows (120 s, sliding by 60 s) of its own
    lines, want, last = stream_case(tmp_path, 3000, rate=10)
    inp, out, ckpt = tmp_path / "in", tmp_path / "out.jsonl", tmp_path / "ckpt"
    third = len(lines) // 3
    run = ["run", "wordcount", "--input", str(inp), "--output", str(out), "--checkpoint",
           str(ckpt), "--max-files-per-trigger", "1"]
    k = stream_files(inp, lines[:third], 2)
    finish(cl, drive(cl, [run], tmp_path / "ev1"))
    before = parts(out)
    assert before and state_partitions(ckpt) == 4
    cl.kill_worker(2)  # one host less
    k = stream_files(inp, lines[third:2 * third], 2, start=k)
    rescale = ["spark", "rescale", str(ckpt), "1"]
    finish(cl, drive(cl, [rescale, run], tmp_path / "ev2", cores=1))
    assert state_partitions(ckpt) == 1
    middle = parts(out)
    assert middle[:len(before)] == before and len(middle) > len(before)
    assert set(task_hosts(read_events(tmp_path / "ev2"))) == {cl.hosts["worker1"]}

    cl.start_worker(2)
    stream_files(inp, lines[2 * third:], 2, start=k, end_ts=last)
    rescale[3] = "3"
    finish(cl, drive(cl, [rescale, run], tmp_path / "ev3"))
    assert state_partitions(ckpt) == 3
    got = parts(out)
    assert got[:len(middle)] == middle
    assert multiset(got) == want
    assert workers(cl) <= set(task_hosts(read_events(tmp_path / "ev3")))


def test_the_results_block_reports_the_loss_from_the_json():
    """docs/RESULTS.md's spark-hosts-loss block: numbers from the result, the unavailable
    case says why."""
    from stretchflow.bench.report_hosts import _hosts_loss

    def s(med: float) -> dict:
        return {"min": med - 1, "median": med, "max": med + 1, "n": 2}

    runs = [{"variant": v, "wall_s": w, "identical": True}
            for v, w in (("undisturbed", 6.0), ("worker_lost", 9.5), ("undisturbed", 6.2),
                         ("worker_lost", 9.1))]
    doc = {"parameters": {"workers": 2, "cores_per_worker": 1, "kill_fraction": 0.5},
           "metrics": {"rows": 40_000, "outputs": 123_456, "session_start_and_first_job_s": 33.3,
                       "undisturbed_s": s(6.1), "worker_lost_s": s(9.3),
                       "extra_s_difference_of_medians": 3.2, "ratio_of_medians": 9.3 / 6.1,
                       "kills_during_job": 2, "executors_removed": 2,
                       "failed_tasks": {"ExecutorLostFailure": 2, "FetchFailed": 1},
                       "runs": runs}}
    text = _hosts_loss(doc)
    assert "| worker 2 SIGKILLed | 9.3 (8.3–10.3) | 2 | yes |" in text
    assert "**+3.2 s**" in text and "ratio of medians 1.52" in text
    assert "ExecutorLostFailure × 2, FetchFailed × 1" in text and "in 2 of 2 runs" in text
    assert _hosts_loss({"metrics": {"unavailable": "no `ip`"}}) == \
        "Not measured on that machine: no `ip`."
