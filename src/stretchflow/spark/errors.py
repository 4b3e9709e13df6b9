"""Spark's own output goes to a log file; Spark's failures become one line naming the cause.

A Spark run writes JVM log lines, Python worker tracebacks and Py4J errors by the dozen; on a
terminal they buried the one line that mattered, and a JVM killed by an OutOfMemoryError was
reported as ``[Errno 111] Connection refused`` (issue #17). So:

* the driver JVM (launched by :func:`launch_gateway`) writes its stdout and stderr — log4j's
  console appender, the JVM's own messages, the Python workers it starts — to
  :func:`log_path`, ``stretchflow-spark-<pid>.log`` in ``$STRETCHFLOW_SPARK_LOG_DIR`` or the
  system temp directory, one file per process (one session per process), kept after the run;
* the driver's Python side (Py4J's logger, PySpark's accumulator server) writes there too;
* :func:`explain` turns an exception of a Spark run into a :class:`SparkFailure` whose message
  is one line: the JVM ran out of memory, the JVM died, or Spark failed (its root cause),
  with the log's path. stretchflow's own errors (OperatorError, SourceError, ...) pass as
  they are while the JVM lives: they already say what went wrong.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO, Any

from ..errors import StretchflowError

#: The JVM's exit status after an uncaught OutOfMemoryError (Spark's SparkExitCode.OOM).
OOM_EXIT = 52

_log_file: IO[bytes] | None = None
_proc: Any = None  # the gateway's Popen (spark-submit exec's the JVM: its exit is the JVM's)
_driver_memory: str | None = None


class SparkFailure(StretchflowError):
    """Spark itself failed (not a user function or an input record); ``log`` is the file
    holding Spark's own log lines."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


def log_path() -> Path:
    """This process's Spark log: ``$STRETCHFLOW_SPARK_LOG_DIR`` (or the temp directory)
    ``/stretchflow-spark-<pid>.log``."""
    d = os.environ.get("STRETCHFLOW_SPARK_LOG_DIR") or tempfile.gettempdir()
    return Path(d) / f"stretchflow-spark-{os.getpid()}.log"


def _open_log() -> IO[bytes]:
    global _log_file
    if _log_file is None:
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        # unbuffered append: the JVM and this process both write to it, each line lands whole
        _log_file = open(path, "ab", buffering=0)  # noqa: SIM115 - open for the process
        handler = logging.StreamHandler(open(path, "a", buffering=1))  # noqa: SIM115
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in ("py4j", "pyspark"):
            lg = logging.getLogger(name)
            lg.addHandler(handler)
            lg.propagate = False
        # Py4J reports a lost connection with logging.exception() on the *root* logger (which
        # also gives root a stderr handler): a filter on root sends those records to the log
        logging.getLogger().addFilter(_Divert(handler))
    return _log_file


class _Divert(logging.Filter):
    """Passes a record logged from Py4J's or PySpark's code to ``handler`` instead."""

    def __init__(self, handler: logging.Handler):
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.pathname.replace(os.sep, "/")
        if "/py4j/" in path or "/pyspark/" in path:
            self.handler.handle(record)
            return False
        return True


def write_log(text: str) -> None:
    """Appends ``text`` to the log (a line from the driver's Python side)."""
    _open_log().write(text.encode("utf-8", "replace"))


def launch_gateway(conf: dict[str, str]) -> Any:
    """Starts the driver JVM with its output going to :func:`log_path` and registers it as
    PySpark's gateway, so that ``SparkSession.builder.getOrCreate()`` then uses it.

    ``conf`` is passed to spark-submit as PySpark itself would (``--conf k=v``): the settings
    that shape the JVM (``spark.driver.memory``, ``spark.driver.extraJavaOptions``) apply. A
    JVM that does not start is one :class:`SparkFailure` with the first line it logged."""
    global _proc, _driver_memory
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway as pyspark_launch

    if SparkContext._gateway is not None:  # started earlier in this process: reused
        return SparkContext._gateway
    log = _open_log()
    spark_conf = SparkConf(loadDefaults=False)
    for k, v in conf.items():
        spark_conf.set(k, v)
    _driver_memory = conf.get("spark.driver.memory")
    start = log_path().stat().st_size
    try:
        gateway = pyspark_launch(spark_conf, popen_kwargs={"stdout": log, "stderr": log})
    except Exception as e:
        # the JVM's first complaint says why ("Invalid maximum heap size: -Xmxbogus"); the
        # lines after it are generic ("Could not create the Java Virtual Machine")
        said = [ln.strip() for ln in _log_tail(start=start).splitlines()
                if ln.strip() and not ln.startswith("WARNING:")]
        why = said[0][:300] if said else _first_line(str(e))
        raise SparkFailure(f"Spark's JVM did not start: {why}; Spark's log: {log_path()}",
                           log_path()) from None
    _proc = getattr(gateway, "proc", None)
    SparkContext._ensure_initialized(gateway=gateway)
    return gateway


def quiet_accumulator_server(sc: Any) -> None:
    """PySpark's accumulator server prints a traceback on stderr when a connection breaks
    (the JVM died): it goes to the log instead."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(request: Any, client_address: Any) -> None:
        write_log(f"accumulator server: request from {client_address} failed:\n"
                  f"{traceback.format_exc()}")

    server.handle_error = handle_error


def jvm_exit_code(wait: float = 0.0) -> int | None:
    """The driver JVM's exit status, or None while it runs (or when not known); waits up to
    ``wait`` s for it to end (a JVM dying of an OutOfMemoryError breaks its connections before
    it exits)."""
    if _proc is None:
        return None
    deadline = time.monotonic() + wait
    while True:
        code = _proc.poll()
        if code is not None or time.monotonic() >= deadline:
            return code
        time.sleep(0.1)


def _log_tail(size: int = 1 << 16, start: int = 0) -> str:
    """The log's last ``size`` bytes, from ``start`` at the earliest."""
    try:
        with open(log_path(), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(start, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return text.strip()[:300]


def _chain_text(e: BaseException) -> str:
    """The messages of ``e`` and the exceptions it was raised from."""
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"{type(cur).__module__}.{type(cur).__name__}: {safe_str(cur)}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(parts)


def safe_str(e: BaseException) -> str:
    """``str(e)``, which for a Py4JJavaError asks the JVM for its stack trace: a dead JVM
    makes that raise, leaving Py4J's own summary."""
    try:
        return str(e)
    except Exception:
        return str(getattr(e, "errmsg", "") or "")


def _is_spark_error(e: BaseException) -> bool:
    """Raised by PySpark or Py4J (anywhere in the chain), or a broken connection to the JVM."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        mod = type(cur).__module__
        if mod.startswith(("py4j", "pyspark")) or (
                isinstance(cur, ConnectionError) and _proc is not None):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


_OOM = re.compile(r"java\.lang\.OutOfMemoryError(?::\s*([^\n]+))?")
_JAVA_CAUSE = re.compile(r"^(?:Caused by: )?((?:[a-z]\w*\.)+[A-Z][\w$]*(?:Exception|Error)"
                         r"(?:: .*)?)$", re.M)
_PY_CAUSE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)(?:: .*)?)$", re.M)


def root_cause(text: str) -> str:
    """One line saying why Spark failed, from an exception's text: the last Python
    exception line of a Python worker's traceback, else the innermost Java ``Caused by``, else
    the first line."""
    if "Traceback (most recent call last)" in text:
        tb = text[text.index("Traceback (most recent call last)"):]
        tb = tb.split("\n\tat ")[0].split("JVM stacktrace")[0]
        found = _PY_CAUSE.findall(tb)
        if found:
            return found[-1].strip()[:300]
    found = _JAVA_CAUSE.findall(text)
    if found:
        return found[-1].strip()[:300]
    return _first_line(text)


def explain(e: BaseException) -> SparkFailure | None:
    """One-line :class:`SparkFailure` for an exception of a Spark run, or None when ``e`` says
    enough as it is (a stretchflow error while the JVM runs) or is not Spark's (a bug:
    its traceback should show).

    * the JVM exited, or Spark reports an ``OutOfMemoryError``: "Spark's JVM ran out of
      memory" (with the driver memory to raise) or "the Spark JVM died (exit code N)";
    * any other PySpark / Py4J error: "Spark failed: ROOT CAUSE".
    Each names the log file, which holds Spark's own account."""
    if isinstance(e, SparkFailure) or (_proc is None and not _is_spark_error(e)):
        return None
    code = jvm_exit_code()
    if isinstance(e, StretchflowError) and code is None:
        return None  # says what went wrong (a worker's OperatorError, re-raised from Spark's)
    spark = _is_spark_error(e)
    if not spark and code is None:
        return None  # not Spark's, while the JVM runs
    text = _chain_text(e)
    if code is None and (_broken(e) or _SHUT_DOWN in text):
        # a dying JVM breaks its connections, or cancels its jobs ("SparkContext was shut
        # down"), before it exits: give it a few seconds (CI once saw the cancellation
        # reported as a plain Spark failure while the JVM was still dying of OOM)
        code = jvm_exit_code(wait=10.0)
    log = log_path()
    oom = _OOM.search(text)
    if code is not None and oom is None:
        oom = _OOM.search(_log_tail())
    if oom is not None or code == OOM_EXIT:
        what = (oom.group(1) or "").strip() if oom is not None else ""
        mem = _driver_memory or "the default 1g"
        died = f" and exited (code {code})" if code is not None else ""
        return SparkFailure(
            f"Spark's JVM ran out of memory{died}" + (f" ({what})" if what else "")
            + f": give it more (--spark-conf spark.driver.memory=..., now {mem}; "
            f"spark.executor.memory on a cluster) or use smaller records; Spark's log: {log}",
            log)
    if code is not None:
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        # the log's last lines are the broken connections' tracebacks: the cause, if Spark
        # saw it at all, is further up, so the line only names the file
        return SparkFailure(f"the Spark JVM died ({how}); see {log}", log)
    return SparkFailure(f"Spark failed: {root_cause(text)}; Spark's log: {log}", log)


#: what Spark says of a job when its context (the driver JVM) goes away under it
_SHUT_DOWN = "because SparkContext was shut down"


def _broken(e: BaseException) -> bool:
    """The connection to the JVM broke: a Py4J error that is not a Java exception (Py4J raises
    a bare ``Py4JError`` when the answer never came), a socket error, or an
    OutOfMemoryError (which makes the JVM exit)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionError) or type(cur).__name__ in (
                "Py4JError", "Py4JNetworkError"):
            return True
        cur = cur.__cause__ or cur.__context__
    text = _chain_text(e)
    return any(s in text for s in ("Py4JNetworkError", "Answer from Java side is empty",
                                   "Error while sending or receiving", "OutOfMemoryError"))
