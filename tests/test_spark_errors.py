"""Spark failures as one line and exit 2, Spark's own output in a log file (issue #17).

The CLI cases run ``stretchflow run --engine spark`` as child processes (what a user sees on
the terminal is the point), all started at once by one module fixture, three at a time: each
starts its own JVM (~15-25 s). They are marked slow, as every test that starts Spark. The
first tests need no Spark: they check how exceptions are read, with a stand-in JVM process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stretchflow.errors import EngineUnavailableError, OperatorError, SourceError
from stretchflow.spark import errors
from stretchflow.spark.session import check_java


# -- reading exceptions, without Spark -----------------------------------------------------
class _Proc:
    """Stands in for the gateway's Popen: ``code`` is what poll() returns."""

    def __init__(self, code: int | None):
        self.code = code

    def poll(self) -> int | None:
        return self.code


def _py4j_error(message: str) -> Exception:
    """An exception as Py4J raises it (the module is what marks it as Spark's)."""
    cls = type("Py4JJavaError", (Exception,), {"__module__": "py4j.protocol"})
    return cls(message)


@pytest.fixture
def fake_jvm(monkeypatch, tmp_path):
    monkeypatch.setenv("STRETCHFLOW_SPARK_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(errors, "_driver_memory", "512m")

    def set_code(code: int | None, log: str = "") -> Path:
        monkeypatch.setattr(errors, "_proc", _Proc(code))
        errors.log_path().write_text(log)
        return errors.log_path()
    return set_code


def test_jvm_out_of_memory_is_one_line_naming_the_log(fake_jvm):
    log = fake_jvm(52, "18:17:43 ERROR Executor: Exception in task 0.0\n"
                       "java.lang.OutOfMemoryError: Java heap space\n\tat x.y(Z.java:1)\n")
    got = errors.explain(ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(got, errors.SparkFailure) and got.log == log
    msg = str(got)
    assert "\n" not in msg and "Connection refused" not in msg
    assert msg.startswith("Spark's JVM ran out of memory and exited (code 52) (Java heap space)")
    assert "now 512m" in msg and msg.endswith(f"Spark's log: {log}")


def test_jobs_cancelled_by_a_dying_jvm_wait_for_its_exit(fake_jvm):
    """A JVM dying of an OutOfMemoryError cancels its jobs ("SparkContext was shut down")
    before it exits: the explanation waits for the exit and reads the log, instead of
    reporting a plain Spark failure (CI saw that race once)."""
    log = fake_jvm(None, "java.lang.OutOfMemoryError: Java heap space\n")
    proc = errors._proc

    def exits() -> None:
        time.sleep(0.3)  # the JVM exits after its jobs were cancelled: the race under test
        proc.code = 52

    t = threading.Thread(target=exits)
    t.start()
    got = errors.explain(_py4j_error("org.apache.spark.SparkException: Job 1 cancelled "
                                     "because SparkContext was shut down"))
    t.join()
    assert str(got).startswith("Spark's JVM ran out of memory and exited (code 52)"), got
    assert got.log == log


def test_jvm_killed_and_a_failure_after_it(fake_jvm):
    log = fake_jvm(-9, "18:00:00 WARN Utils: something\n\tat a.b(C.java:2)\n")
    msg = str(errors.explain(_py4j_error("Answer from Java side is empty")))
    assert msg == f"the Spark JVM died (killed by signal 9); see {log}"
    fake_jvm(137)
    assert str(errors.explain(_py4j_error("x"))) == f"the Spark JVM died (exit code 137); see {log}"
    # once the JVM is gone, even stretchflow's own error is explained by its death
    assert "the Spark JVM died" in str(errors.explain(ValueError("later")))


def test_errors_that_say_enough_pass_while_the_jvm_runs(fake_jvm):
    fake_jvm(None)
    assert errors.explain(OperatorError("op", 1, {"v": 0}, ZeroDivisionError("z"))) is None
    assert errors.explain(SourceError("s", "line 2", "malformed JSON")) is None
    assert errors.explain(KeyError("a bug of ours")) is None
    # a worker's OperatorError re-raised from Spark's exception keeps it as context only
    try:
        try:
            raise _py4j_error("An error occurred while calling o155.getResult.")
        except Exception:
            raise OperatorError("op", 1, None, ValueError("v")) from None
    except OperatorError as e:
        assert errors.explain(e) is None


def test_live_spark_error_names_its_root_cause(fake_jvm):
    log = fake_jvm(None)
    java = ("An error occurred while calling o42.count.\n: org.apache.spark.SparkException: "
            "Job aborted due to stage failure: Task 0 failed\n\tat org.apache.spark.x(X.scala:1)"
            "\nCaused by: java.io.FileNotFoundException: /data/part-0 (No such file)\n"
            "\tat java.io.FileInputStream.open(Native Method)\n")
    msg = str(errors.explain(_py4j_error(java)))
    assert msg == (f"Spark failed: java.io.FileNotFoundException: /data/part-0 (No such file); "
                   f"Spark's log: {log}")
    python = ("An exception was thrown from the Python worker:\nTraceback (most recent call "
              "last):\n  File \"w.py\", line 3, in f\n    raise KeyError('k')\nKeyError: 'k'\n")
    assert errors.root_cause(python) == "KeyError: 'k'"
    # OutOfMemoryError reported by a live JVM (a task's, caught): still said as memory
    oom = "org.apache.spark.SparkException: Job aborted\nCaused by: java.lang.OutOfMemoryError"
    assert str(errors.explain(_py4j_error(oom))).startswith("Spark's JVM ran out of memory: ")


def test_java_home_pointing_nowhere(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(EngineUnavailableError, match=r"JAVA_HOME=.*no-jdk has no bin/java"):
        check_java()


# -- the CLI, as child processes ------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent

APP_RAISES = """
import stretchflow as sf

flow = sf.Flow("app")
src = flow.source(sf.io.iterable([{"ts": 1, "v": 1}, {"ts": 2, "v": 0}]))
src.aggregate(size=10, keys=lambda t: {1 // t["v"]}, init=int,
              update=lambda n, t: n + 1, name="divide").sink(OUT)
"""

# a Python worker kills the JVM that started it (its daemon's parent): a JVM that dies for a
# reason Spark does not log, as the kernel's OOM killer would kill it
APP_KILLS_JVM = """
import os
import signal

import stretchflow as sf


def kill_jvm(t):
    if t["v"] == 2:
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "java":
                    os.kill(pid, signal.SIGKILL)
                    break
    return t


flow = sf.Flow("app")
src = flow.source(sf.io.iterable([{"ts": 1, "v": 1}, {"ts": 2, "v": 2}]))
src.map(kill_jvm).aggregate(size=10, keys=lambda t: {"all"}, init=int,
                            update=lambda n, t: n + 1, name="count").sink(OUT)
"""


def _tweets(path: Path, n: int) -> Path:
    words = ["lorem", "ipsum", "dolor", "sit", "amet"]
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(words[(i + k) % 5] for k in range(1 + i % 4))
            f.write(json.dumps({"ts": 1000 * i, "user": f"u{i % 7}", "text": text}) + "\n")
    return path


def _cases(d: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    d.mkdir()
    tweets = _tweets(d / "tweets.jsonl", 200)
    bad = d / "bad.jsonl"
    bad.write_text('{"ts": 1, "text": "a"}\n{"ts": 2, "text": \n')
    big = d / "big.jsonl"
    with open(big, "w") as f:  # one 50 MB record: more than a 512 MB JVM can hold in copies
        f.write(json.dumps({"ts": 1, "user": "u", "text": "a b"}) + "\n")
        f.write(json.dumps({"ts": 2, "user": "u", "text": " ".join(["lorem"] * 8_333_333)})
                + "\n")
    apps = {}
    for name, text in (("raises", APP_RAISES), ("kills", APP_KILLS_JVM)):
        apps[name] = d / f"app_{name}.py"
        apps[name].write_text(textwrap.dedent(text.replace("OUT", repr(str(d / f"{name}.jsonl")))))

    def wc(inp: Path, *extra: str) -> list[str]:
        return ["wordcount", "--input", str(inp), "--output", str(d / f"{inp.stem}-out.jsonl"),
                *extra]

    return {
        "ok": (wc(tweets), {}),
        "operator": ([str(apps["raises"])], {}),
        "malformed": (wc(bad), {}),
        "oom": (wc(big, "--spark-conf", "spark.driver.memory=512m"), {}),
        "killed": ([str(apps["kills"])], {}),
        "no-start": (wc(tweets, "--spark-conf", "spark.driver.memory=bogus"), {}),
        "no-java": (wc(tweets), {"JAVA_HOME": str(d / "no-jdk")}),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each case's (return code, stderr, log directory), the CLI run in a child process."""
    base = tmp_path_factory.mktemp("spark-errors")
    cases = _cases(base / "in")

    def run(name: str) -> tuple[int, str, Path]:
        args, env_extra = cases[name]
        logs = base / f"logs-{name}"
        env = {**os.environ, "STRETCHFLOW_SPARK_LOG_DIR": str(logs), **env_extra}
        env.pop("STRETCHFLOW_SPARK_LOG", None)
        cmd = [sys.executable, "-m", "stretchflow.cli", "run", *args, "--engine", "spark",
               "--master", "local[1]"]
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        return p.returncode, p.stderr, logs

    with ThreadPoolExecutor(3) as pool:  # three JVMs at a time: ~1 GB each
        return dict(zip(cases, pool.map(run, cases), strict=True))


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _named_log(line: str, logs: Path) -> Path:
    """The log file the error line names: it is this run's, it exists and Spark wrote it."""
    found = list(logs.glob("stretchflow-spark-*.log"))
    assert len(found) == 1, found
    assert line.endswith(str(found[0])), line
    return found[0]




@pytest.mark.slow
def test_success_prints_only_the_summary(runs):
    code, stderr, logs = runs["ok"]
    assert code == 0, stderr[-3000:]
    summary, named = stderr.strip().splitlines()  # the summary, and where Spark's log went
    assert summary.startswith("wordcount on spark: 200 tuples in")
    (log,) = logs.glob("stretchflow-spark-*.log")
    assert named == f"spark log: {log}"
    text = log.read_text()  # the JVM's start-up warning, Spark's own WARN lines
    assert "jdk.incubator.vector" in text or " WARN " in text, text[:2000]


@pytest.mark.slow
def test_user_function_error(runs):
    code, stderr, logs = runs["operator"]
    assert code == 2
    assert _one_line(stderr) == ("error: operator 'divide' failed on tuple ts=2 payload="
                                 "{'ts': 2, 'v': 0}: ZeroDivisionError: integer division or "
                                 "modulo by zero")
    (log,) = logs.glob("stretchflow-spark-*.log")
    assert "ZeroDivisionError" in log.read_text()  # Spark's account of the failed task


@pytest.mark.slow
def test_malformed_record(runs):
    code, stderr, _ = runs["malformed"]
    assert code == 2
    assert "bad.jsonl:2: malformed JSON" in _one_line(stderr)


@pytest.mark.slow
def test_out_of_memory(runs):
    code, stderr, logs = runs["oom"]
    assert code == 2
    line = _one_line(stderr)
    assert line.startswith("error: Spark's JVM ran out of memory"), line
    assert "spark.driver.memory=..., now 512m" in line
    assert "java.lang.OutOfMemoryError" in _named_log(line, logs).read_text()


@pytest.mark.slow
def test_jvm_killed(runs):
    code, stderr, logs = runs["killed"]
    assert code == 2
    line = _one_line(stderr)
    assert line.startswith("error: the Spark JVM died (killed by signal 9"), line
    assert _named_log(line, logs).stat().st_size > 0


@pytest.mark.slow
def test_jvm_does_not_start(runs):
    code, stderr, logs = runs["no-start"]
    assert code == 2
    line = _one_line(stderr)
    assert line.startswith("error: Spark's JVM did not start"), line
    assert "Invalid maximum heap size" in line  # the JVM's own reason, from the log
    assert "-Xmxbogus" in _named_log(line, logs).read_text()


@pytest.mark.slow
def test_no_java(runs):
    code, stderr, _ = runs["no-java"]
    assert code == 2
    assert "no-jdk has no bin/java" in _one_line(stderr)
