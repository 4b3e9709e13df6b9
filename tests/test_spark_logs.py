"""Spark runs print only stretchflow's own lines; Spark's go to a log file; ``spark_ui`` turns
Spark's web UI on and says its URL (issue #18 item 3).

The end-to-end tests start two Spark processes (a CLI run and a Python API run, in parallel:
~1 GB each) and are marked slow; the option's parsing and the running-session rule are checked
without Spark.
"""

import json
import os
import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from stretchflow.engines import get_spec
from stretchflow.errors import EngineUnavailableError, FlowDefinitionError
from stretchflow.spark import session

ROOT = Path(__file__).resolve().parents[1]
#: every line a Spark run may print on stderr: the CLI's summary, its progress lines (off a
#: terminal), the UI's address, and the log's path (once the summary names it)
OURS = ("wordcount on spark: ", "progress: ", "spark UI: http://", "spark log: ")
#: lines of Spark's that used to reach the terminal (issue #18), each must be in the log
SPARKS = ("WARN NativeCodeLoader", "Python worker")
RUN_TIMEOUT = 300  # s: a whole run, session start (20-40 s on a loaded machine) included


def test_spark_ui_option_parses_on_off_and_bools():
    spec = get_spec("spark")
    assert spec.check({"spark_ui": "on"}) == {"spark_ui": True}
    assert spec.check({"spark_ui": "off"}) == {"spark_ui": False}
    assert spec.check({"spark_ui": True}) == {"spark_ui": True}
    with pytest.raises(FlowDefinitionError, match="spark_ui must be on or off.*'yes'"):
        spec.check({"spark_ui": "yes"})
    with pytest.raises(FlowDefinitionError, match="does not take option 'spark_ui'"):
        get_spec("vsn").check({"spark_ui": True})


def test_ui_cannot_be_turned_on_in_a_running_session_without_it(monkeypatch):
    running = SimpleNamespace(sparkContext=SimpleNamespace(uiWebUrl=None),
                              conf=SimpleNamespace(set=lambda k, v: None))
    monkeypatch.setattr(session, "_session", running)
    monkeypatch.setattr(session, "_master", "local[2]")
    assert session.get_session() is running  # without the UI: the running session
    with pytest.raises(EngineUnavailableError, match="started with its UI off"):
        session.get_session(ui=True)
    running.sparkContext.uiWebUrl = "http://127.0.0.1:4040"
    assert session.get_session(ui=True) is running


def _tweets_dir(d: Path, files: int, per_file: int) -> Path:
    """A directory stream of tweets: ``files`` files with increasing mtimes, then the end."""
    words = ["lorem", "ipsum", "dolor", "sit", "amet"]
    d.mkdir()
    i = 0
    for j in range(files):
        p = d / f"part{j:03d}.jsonl"
        with open(p, "w") as f:
            for _ in range(per_file):
                text = " ".join(words[(i + k) % 5] for k in range(1 + i % 4))
                f.write(json.dumps({"ts": 1000 * i, "user": f"u{i % 7}", "text": text}) + "\n")
                i += 1
        os.utime(p, (1_000_000 + j, 1_000_000 + j))  # read in this order (notes/SPARK.md)
    end = d / "zend.jsonl"
    end.write_text(json.dumps({"ts": 1000 * (i - 1), "__end__": True}) + "\n")
    os.utime(end, (1_000_000 + files, 1_000_000 + files))
    return d


API_RUN = """
import json, sys
import stretchflow as sf
from stretchflow.queries import build_query
from stretchflow.spark.sources import open_input

flow = sf.Flow("wordcount")
build_query("wordcount", [flow.source(open_input(sys.argv[1]))]).sink(sys.argv[2])
r = flow.run(engine="spark", master="local[1]", spark_ui=True)
print(json.dumps({k: r.extra.get(k) for k in ("spark_log", "spark_ui", "mode")}))
"""


class _Run:
    """A child process whose stderr is read line by line as it comes; ``on_ui(url)`` is called
    with the Spark UI's URL as soon as the run prints it (the UI lives as long as the run)."""

    def __init__(self, cmd: list[str], logs: Path, on_ui=None):
        env = {**os.environ, "STRETCHFLOW_SPARK_LOG_DIR": str(logs)}
        env.pop("STRETCHFLOW_SPARK_LOG", None)
        self.logs, self.on_ui = logs, on_ui
        self.lines: list[str] = []
        self.ui_status: object = None
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def wait(self) -> "_Run":
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(self.proc.stdout.read()),
                                  daemon=True)
        reader.start()
        # the bound: a run still going after RUN_TIMEOUT is killed (only this test's child),
        # which ends its stderr and so the loop below
        watchdog = threading.Timer(RUN_TIMEOUT, self.proc.kill)
        watchdog.start()
        try:
            for line in self.proc.stderr:  # ends when the child exits
                self.lines.append(line.rstrip("\n"))
                if line.startswith("spark UI: ") and self.on_ui is not None:
                    self.ui_status = self.on_ui(line.split(": ", 1)[1].strip())
            self.proc.wait(timeout=30)
        finally:
            watchdog.cancel()
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=30)
        reader.join(timeout=30)
        self.stdout = out[0] if out else ""
        return self


def _get(url: str) -> object:
    """The HTTP status of ``url`` (Spark redirects / to /jobs/), or the error."""
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status
    except Exception as e:  # reported by the assertion, with the run's stderr
        return repr(e)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A CLI run on Spark's rate source with ``--spark-ui on`` (its UI asked for while it
    runs), and a Python run on a directory stream with ``spark_ui=True``; in parallel."""
    base = tmp_path_factory.mktemp("spark-logs")
    stream = _tweets_dir(base / "stream", files=3, per_file=40)
    # 50 rows/s: 4 s of input, not 10 (20/s); the UI is asked for as soon as the run prints
    # its address, before the query starts, so the run outlives the request either way
    cli = [sys.executable, "-m", "stretchflow.cli", "run", "wordcount",
           "--input", "rate:50:200", "--output", str(base / "cli.jsonl"),
           "--engine", "spark", "--master", "local[1]", "--spark-ui"]
    api = [sys.executable, "-c", API_RUN, str(stream), str(base / "api.jsonl")]
    todo = {"cli": _Run(cli, base / "logs-cli", on_ui=_get),
            "api": _Run(api, base / "logs-api")}
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(todo, pool.map(_Run.wait, todo.values()), strict=True))


def _only_ours(run: _Run) -> None:
    assert run.proc.returncode == 0, "\n".join(run.lines[-60:])
    strays = [ln for ln in run.lines if not ln.startswith(OURS)]
    assert not strays, "\n".join(strays[:40])


def _the_log(run: _Run) -> Path:
    """The run's one log file, which holds Spark's lines that once reached the terminal."""
    (log,) = run.logs.glob("stretchflow-spark-*.log")
    text = log.read_text()
    for s in SPARKS:
        assert s in text, (s, text[:3000])
    return log


@pytest.mark.slow
def test_cli_streaming_run_prints_its_summary_and_the_ui_only(runs):
    run = runs["cli"]
    _only_ours(run)
    assert any(ln.startswith("wordcount on spark: 200 tuples in") for ln in run.lines)
    (ui,) = [ln for ln in run.lines if ln.startswith("spark UI: ")]
    # a local run's UI is for this machine only (SPARK_LOCAL_IP=127.0.0.1)
    assert urlsplit(ui.split(": ", 1)[1]).hostname in ("localhost", "127.0.0.1"), ui
    assert run.ui_status == 200, (run.ui_status, run.lines)  # answered during the run
    _the_log(run)


@pytest.mark.slow
def test_api_run_names_its_log_and_ui_and_prints_nothing_of_spark(runs):
    run = runs["api"]
    _only_ours(run)
    extra = json.loads(run.stdout.strip().splitlines()[-1])
    assert extra["mode"] == "streaming"
    assert Path(extra["spark_log"]) == _the_log(run)
    # a library caller who asked for the UI is told where it is, logging left unconfigured
    assert run.lines == [f"spark UI: {extra['spark_ui']}"]


def test_pysparks_gateway_temp_dir_is_one_the_next_run_sweeps(monkeypatch, tmp_path):
    """PySpark's launcher makes a ``tmp*`` directory for the JVM's connection file; a driver
    SIGKILLed before it is removed left it (bench kills: 13 in 100 Spark cycles). It is now
    made inside a pid-named ``stretchflow-spark-gateway-*`` directory, removed after the
    launch, and swept by a later run when its process is dead."""
    import tempfile

    from stretchflow.runtime.tempdirs import sweep_stale
    from stretchflow.spark import errors, session

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def launch(settings):
        made = tempfile.mkdtemp()  # what pyspark.java_gateway does
        seen.append(Path(made))

    monkeypatch.setattr(errors, "launch_gateway", launch)
    session._launch_gateway({})
    (made,) = seen
    assert made.parent.name.startswith(f"stretchflow-spark-gateway-{os.getpid()}-")
    assert not made.parent.exists()  # removed once the JVM answered
    assert tempfile.gettempdir() == str(tmp_path)  # restored
    # a dead process's directory (what a SIGKILL leaves) is swept by the next run
    dead = tmp_path / "stretchflow-spark-gateway-999999999-x"
    (dead / "tmpabc").mkdir(parents=True)
    assert sweep_stale("spark-gateway", str(tmp_path)) == [dead]
