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
flow (:data:`HELD_WORDCOUNT`) holds its first task on worker 2 until the kill, so the kill
lands in it on any load (catching a running task by polling the driver's UI missed short
jobs in CI). The cluster tests are ``slow``: ``make test-slow`` runs
them (and CI), ``make test`` does not. Their runs are made once, in three drivers (a session
start is 20-40 s on two cores), by the ``scenario`` fixture, and each test checks its part
of what it recorded. Where namespaces cannot be made they are skipped, with the reason
:class:`HostsUnavailableError` gives.
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
    wait_executor,
)
from stretchflow.spark.rescale import state_partitions
from stretchflow.spark.streaming import end_marker
from threadutil import wait_until

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
                time.sleep(0.2)  # a bounded poll for the file
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

#: wordcount (120 s windows sliding by 60 s) whose tasks a test can hold on one host: while
#: the file ``params["hold"]`` exists, a task on the host at ``params["hold_on"]`` (its address
#: in that network namespace) that calls f_MK or f_U makes the file ``params["busy"]`` and
#: waits (a bounded poll) for the file to go. The test kills that host's worker once ``busy``
#: is there, so the kill lands in a running task by construction; a poll of the driver's
#: UI for a running task missed short jobs under load. Without ``hold`` it is plain wordcount.
HELD_WORDCOUNT = textwrap.dedent("""
    import os
    import socket
    import time
    from collections import Counter

    import stretchflow as sf


    def build_flow(params):
        hold, host, busy = params.get("hold"), params.get("hold_on"), params.get("busy")
        here = {}

        def held():
            if not (hold and os.path.exists(hold)):
                return
            if "ip" not in here:  # the address this process's packets to `host` leave from
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.connect((host, 9))
                    here["ip"] = s.getsockname()[0]
            if here["ip"] != host:
                return
            open(busy, "w").close()
            end = time.monotonic() + 300
            while os.path.exists(hold) and time.monotonic() < end:
                time.sleep(0.1)  # a bounded poll for the test's kill

        def keys(t):
            held()
            return Counter(t["text"].split())

        def update(n, c):
            held()
            return n + c

        flow = sf.Flow("held-wordcount")
        s = flow.source(sf.io.jsonl(params["input"], name="in0"))
        s.aggregate(size=120_000, slide=60_000, keys=keys, init=int, update=update,
                    output=lambda w, n: {"word": w, "count": n},
                    name="count").sink(params["output"])
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
            conf = c.driver_conf(events, cores=cores)
            if ui and s[0] != "run":  # `spark rescale` has no --spark-ui: the same setting
                conf["spark.ui.enabled"] = "true"
            argv += c.conf_args(conf)
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


def wait_file(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    wait_until(lambda: path.exists() or proc.poll() is not None, timeout,
               f"{path.name} is written", poll=0.2)
    assert path.exists(), f"the driver exited ({proc.returncode}) before {path.name}"


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


def held_on_worker_2(hold: Path, proc: subprocess.Popen, done: Path) -> None:
    """Waits until a task of the run :data:`HELD_WORDCOUNT` holds on worker 2 says so; an
    error if the driver exits or the step ends first (the hold is then never reached)."""
    busy = Path(f"{hold}.busy")
    wait_until(lambda: busy.exists() or proc.poll() is not None or done.exists(), 300,
               "a task is held on worker 2", poll=0.2)
    assert busy.exists(), (f"no task was held on worker 2 before the step ended (driver "
                           f"exit code {proc.poll()}, None: it runs)")


def parts(out: Path) -> list[tuple[int, dict]]:
    got = [(r["ts"], r) for r in read_parts(out)] if out.exists() else []
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    return got


def done_ms(d: Path, i: int) -> float:
    """When :data:`DRIVE` finished its step i (the ``done-<i>`` file's mtime, epoch ms): the
    next step's tasks launch after it."""
    return (d / f"done-{i}").stat().st_mtime * 1000


def between(events: list[dict], start_ms: float = 0, end_ms: float = float("inf")
            ) -> list[dict]:
    """The task events (by launch time) and executor events (by timestamp) of one driver's
    event log in [start_ms, end_ms): the part of the application one of its steps made."""
    def when(e: dict) -> float | None:
        return e["Task Info"].get("Launch Time") if "Task Info" in e else e.get("Timestamp")
    return [e for e in events if (t := when(e)) is not None and start_ms <= t < end_ms]


@pytest.fixture(scope="module")
def scenario(cluster, tmp_path_factory) -> dict:
    """The multi-host runs, in three drivers (a session start costs 20-40 s on two cores,
    and these runs used to start seven); what each test below checks is recorded here.

    Driver 1 (both workers): the batch flows; then a streaming wordcount (4 state partitions,
    one file per micro-batch; its first file closes windows, so its second micro-batch
    commits a part and six more follow) that loses worker 2 after its first committed part
    while a task runs there, and ends on worker 1; more files arrive, the checkpoint is
    rescaled to 1 partition and the query resumes on worker 1 (worker 2 still down).
    Driver 2 (worker 2 back; a new driver's first jobs spread over both workers): the last
    files and the end marker, rescale to 3 partitions and the query resumes on both.
    Driver 3: a batch wordcount loses worker 2 while a task runs there, worker 2 is started
    again, the application gets a new executor on it and the next job runs."""
    c = cluster
    for i in (1, 2):
        if not c.worker_running(i):
            c.start_worker(i)
    tmp = tmp_path_factory.mktemp("hosts")
    r: dict = {}
    # -- the inputs and the reference's outputs
    tw = tweets_file(tmp / "tw.jsonl", 1000)  # 2000 before: the size proves nothing here
    main(["generate", "bandjoin", "--rows", "600", "--seed", "2", "--rate", "20",
          "--out", str(tmp / "bj.jsonl"), "-q"])
    app = tmp / "chain.py"
    app.write_text(CHAIN_FLOW)
    runs = {
        "wordcount": ["run", "wordcount", "--input", str(tw)],
        "paircount": ["run", "paircount", "--input", str(tw), "--param", "size=20000",
                      "--param", "slide=10000"],
        "scalejoin": ["run", "scalejoin", "--input", str(tmp / "bj-left.jsonl"),
                      "--input", str(tmp / "bj-right.jsonl"), "--param", "window=10000",
                      "--param", "band=500"],
    }
    r["flows_want"] = {k: reference(tmp, k, run) for k, run in runs.items()}
    ref_chain = tmp / "ref-chain.jsonl"
    assert main(["run", str(app), "--param", f"input={tw}", "--param",
                 f"output={ref_chain}", "-q"]) == 0
    r["flows_want"]["chain"] = jsonl(ref_chain)
    flow_steps = [[*run, "--output", str(tmp / f"{k}.jsonl")] for k, run in runs.items()]
    flow_steps.append(["run", str(app), "--param", f"input={tw}", "--param",
                       f"output={tmp / 'chain.jsonl'}"])
    # ~43 min of event time (the generator's rate varies) for 120 s windows sliding by 60 s:
    # every run closes windows, so commits parts of its own
    stw = tweets_file(tmp / "stream.jsonl", 3200, rate=10)
    lines = stw.read_text().splitlines(keepends=True)
    last = json.loads(lines[-1])["ts"]
    held = tmp / "held.py"
    held.write_text(HELD_WORDCOUNT)

    def held_run(inp: Path, out: Path, hold: Path | None = None) -> list[str]:
        argv = ["run", str(held), "--param", f"input={inp}", "--param", f"output={out}"]
        if hold is not None:  # the flow holds a task on worker 2 while `hold` exists
            argv += ["--param", f"hold={hold}", "--param", f"hold_on={c.hosts['worker2']}",
                     "--param", f"busy={hold}.busy"]
        return argv

    def ref_held(name: str, inp: Path) -> dict:
        out = tmp / f"ref-{name}.jsonl"
        assert main([*held_run(inp, out), "-q"]) == 0
        return jsonl(out)

    r["stream_want"] = ref_held("stream", stw)
    big = tweets_file(tmp / "big.jsonl", 20_000, rate=200)
    r["big_want"] = ref_held("big", big)

    inp, out, ckpt = tmp / "in", tmp / "out.jsonl", tmp / "ckpt"
    hold1 = tmp / "hold-1"
    stream = [*held_run(inp, out, hold1), "--checkpoint", str(ckpt),
              "--max-files-per-trigger", "1"]
    half, three_q = len(lines) // 2, len(lines) * 3 // 4
    # the first file runs to the first line a window's size (120 s) or more after the first
    # one (11 min after it: the rate has a gap), so the watermark it leaves closes windows and
    # the next micro-batch commits the first part; the rest of the first half follows in 6
    # files, whose tasks the hold catches on worker 2
    t0 = json.loads(lines[0])["ts"]
    first = 1 + next(i for i, ln in enumerate(lines) if json.loads(ln)["ts"] >= t0 + 120_000)
    assert first < half // 2, first  # the data still has its early gap
    k = stream_files(inp, lines[:first], 1)
    k = stream_files(inp, lines[first:half], 6, start=k)

    # -- driver 1: steps 0-3 the flows, 4 the stream, 6-7 rescale to 1 and resume
    d1 = tmp / "d1"
    go1 = tmp / "rescale-to-1"
    proc = drive(c, [*flow_steps, stream, str(go1), ["spark", "rescale", str(ckpt), "1"],
                     stream], d1 / "events")
    try:
        wait_until(lambda: (out.exists() and committed_parts(out)) or proc.poll() is not None,
                   300, "a part is committed", poll=0.2)
        assert proc.poll() is None, f"driver 1 exited ({proc.returncode})"
        hold1.touch()  # the stream's next task on worker 2 waits for the kill
        held_on_worker_2(hold1, proc, d1 / "done-4")
        c.kill_worker(2)  # and it stays down until driver 2
        hold1.unlink()  # the task's retry on worker 1 goes on
        wait_file(d1 / "done-4", proc)
        r["first"] = parts(out)
        r["partitions_first"] = state_partitions(ckpt)
        k = stream_files(inp, lines[half:three_q], 2, start=k)
    finally:
        go1.touch()
    finish(c, proc)
    r["middle"] = parts(out)
    r["partitions_middle"] = state_partitions(ckpt)
    ev = read_events(d1 / "events")
    r["flows_events"] = between(ev, 0, done_ms(d1, 3))
    r["flows_got"] = {name: jsonl(tmp / f"{name}.jsonl") for name in r["flows_want"]}
    r["stream1_events"] = between(ev, done_ms(d1, 3), done_ms(d1, 4))
    r["stream2_events"] = between(ev, done_ms(d1, 4))

    # -- driver 2: rescale to 3 and resume on both workers
    c.start_worker(2)
    stream_files(inp, lines[three_q:], 2, start=k, end_ts=last)
    d2 = tmp / "d2"
    finish(c, drive(c, [["spark", "rescale", str(ckpt), "3"], stream], d2 / "events"))
    r["got"] = parts(out)
    r["partitions_last"] = state_partitions(ckpt)
    r["stream3_events"] = read_events(d2 / "events")

    # -- driver 3: the batch loss in a new session's first job after its warm-up; the next
    # job waits for worker 2's return and gets an executor there
    d3 = tmp / "d3"
    go, hold3 = tmp / "worker-2-is-back", tmp / "hold-3"
    hold3.touch()  # job a's first task on worker 2 waits for the kill
    proc = drive(c, [held_run(big, tmp / "a.jsonl", hold3), str(go),
                     held_run(big, tmp / "b.jsonl")], d3 / "events", ui=True)
    try:
        held_on_worker_2(hold3, proc, d3 / "done-0")
        r["killed"] = c.kill_worker(2)
        hold3.unlink()
        wait_file(d3 / "done-0", proc)
        r["loss_first"] = read_events(d3 / "events")  # job a has ended: events flushed
        c.start_worker(2)
        wait_executor(c.driver_ui, c.hosts["worker2"])
        r["back_ms"] = time.time() * 1000
    finally:
        go.touch()
    finish(c, proc)
    r["loss_all"] = read_events(d3 / "events")
    r["a"], r["b"] = jsonl(tmp / "a.jsonl"), jsonl(tmp / "b.jsonl")
    return r


@pytest.mark.slow
def test_batch_flows_run_across_hosts(cluster, scenario):
    """wordcount, paircount, scalejoin and a flow file with two chained O+ on the cluster give
    the reference's output; tasks ran on both workers and shuffle data crossed hosts."""
    for k, want in scenario["flows_want"].items():
        assert want, k
        assert scenario["flows_got"][k] == want, k
    ev = scenario["flows_events"]
    ran = task_hosts(ev)
    assert workers(cluster) <= set(ran), ran  # both workers ran tasks
    assert set(ran) <= workers(cluster)  # and no one else (the driver runs none)
    assert remote_shuffle_bytes(ev) > 0  # shuffle blocks fetched from the other host
    assert not failed_tasks(ev) and not removed_executors(ev)


@pytest.mark.slow
def test_lost_worker_in_a_batch_job_then_it_comes_back(cluster, scenario):
    """Worker 2's process tree is SIGKILLed while it runs a task of the job: the job ends on
    worker 1 with the reference's output, the event log shows the lost executor and the
    failed task; worker 2 is started again, the same application gets a new executor on it
    and the next job runs."""
    s = scenario
    assert len(s["killed"]) >= 3  # the worker JVM, its executor, the executor's Python
    assert s["a"] == s["big_want"] and s["b"] == s["big_want"]
    assert removed_executors(s["loss_first"]), "no executor removed"
    assert failed_tasks(s["loss_first"]), "no task failed with the worker"
    # the application got a new executor on the worker that came back. Whether the second
    # job's few short tasks use it is the scheduler's choice: once, registered 1 s before
    # the job, it got none of its 6 tasks (a new driver's jobs use both workers again:
    # the streaming and rescale tests check that)
    before, now = added_executors(s["loss_first"]), added_executors(s["loss_all"])
    assert before.keys() < now.keys()
    assert {now[k] for k in now.keys() - before.keys()} == {cluster.hosts["worker2"]}
    assert not failed_tasks(between(s["loss_all"], s["back_ms"]))


@pytest.mark.slow
def test_streaming_across_hosts_survives_a_lost_worker(cluster, scenario):
    """A streaming wordcount (one file per micro-batch) loses worker 2 in the middle of the
    query, after its first committed part, while a task runs there; the query ends on worker
    1. More files arrive and the query resumes from its checkpoint (on worker 1, then, with
    worker 2 back, on both); the parts of all runs, concatenated, equal the reference."""
    s = scenario
    assert s["first"]  # a part was committed before the loss
    e1 = s["stream1_events"]
    assert removed_executors(e1), "no executor removed"
    assert workers(cluster) <= set(task_hosts(e1))  # both ran tasks before the loss
    assert s["middle"][:len(s["first"])] == s["first"]  # the first run's parts are kept
    assert s["got"][:len(s["middle"])] == s["middle"]
    assert multiset(s["got"]) == s["stream_want"]
    e3 = s["stream3_events"]
    assert workers(cluster) <= set(task_hosts(e3)) and not failed_tasks(e3)


@pytest.mark.slow
def test_rescale_across_hosts(cluster, scenario):
    """The streaming wordcount's checkpoint (4 state partitions) is rescaled to 1 partition
    (``stretchflow spark rescale`` on the driver host) and the query resumes on one worker;
    then rescaled to 3 and resumed on two. The concatenated parts equal the reference and
    every earlier part is kept."""
    s = scenario
    assert s["first"] and s["partitions_first"] == 4
    assert s["partitions_middle"] == 1
    assert s["middle"][:len(s["first"])] == s["first"] and len(s["middle"]) > len(s["first"])
    assert set(task_hosts(s["stream2_events"])) == {cluster.hosts["worker1"]}
    assert s["partitions_last"] == 3
    assert s["got"][:len(s["middle"])] == s["middle"] and len(s["got"]) > len(s["middle"])
    assert multiset(s["got"]) == s["stream_want"]
    assert workers(cluster) <= set(task_hosts(s["stream3_events"]))


def test_the_results_block_reports_the_loss_from_the_json():
    """docs/RESULTS.md's spark-hosts-loss block: numbers from the result, the unavailable
    case says why."""
    from stretchflow_bench.report_hosts import _hosts_loss

    def s(med: float) -> dict:
        return {"min": med - 1, "median": med, "max": med + 1, "n": 2}

    runs = [{"variant": "undisturbed", "wall_s": w, "identical": True} for w in (6.0, 6.2, 5.9)]
    # the second kill came after its job's end: drawn, checked, not counted
    runs += [{"variant": "worker_lost", "wall_s": w, "identical": True, "kill_during_job": d}
             for w, d in ((9.5, True), (5.8, False), (9.1, True))]
    doc = {"parameters": {"workers": 2, "cores_per_worker": 1, "kill_range": [0.1, 0.7]},
           "metrics": {"rows": 40_000, "outputs": 123_456, "session_start_and_first_job_s": 33.3,
                       "undisturbed_s": s(6.1), "worker_lost_s": s(9.3),
                       "extra_s_difference_of_medians": 3.2, "ratio_of_medians": 9.3 / 6.1,
                       "outputs_identical": True, "kills_drawn": 3, "kills_landed": 2,
                       "executors_removed": 2,
                       "failed_tasks": {"ExecutorLostFailure": 2, "FetchFailed": 1},
                       "runs": runs}}
    text = _hosts_loss(doc)
    assert "| undisturbed | 6.1 (5.1–7.1) | 3 | yes |" in text
    assert "| worker 2 SIGKILLed during the job | 9.3 (8.3–10.3) | 2 | yes |" in text
    assert "**+3.2 s**" in text and "ratio of medians 1.52" in text
    assert "ExecutorLostFailure × 2, FetchFailed × 1" in text
    assert "drawn from 0.10–0.70" in text and "2 of 3 drawn kills landed (1 came after" in text
    assert "job(s) failed" not in text
    # a job that failed after its kill: counted apart, named, not in the table
    doc["metrics"]["jobs_failed"] = ["error: Spark failed: stage failure"]
    runs.append({"variant": "worker_lost", "wall_s": 4.0, "identical": None,
                 "kill_during_job": True, "job_failed": "error: Spark failed: stage failure"})
    text = _hosts_loss(doc)
    assert "| worker 2 SIGKILLed during the job | 9.3 (8.3–10.3) | 2 | yes |" in text
    assert "**1 job(s) failed** after a kill that landed" in text
    assert "error: Spark failed: stage failure" in text
    runs[4]["identical"] = False  # a late kill's wrong output is not hidden by the table
    doc["metrics"]["outputs_identical"] = False
    assert "Every run's output = reference: **no**" in _hosts_loss(doc)
    assert _hosts_loss({"metrics": {"unavailable": "no `ip`"}}) == \
        "Not measured on that machine: no `ip`."
