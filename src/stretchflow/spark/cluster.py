"""A Spark standalone cluster (one master, workers) started from the pyspark installation.

``with standalone(workers=1) as url: ...`` starts ``spark-class
org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` on 127.0.0.1 and
stops them on exit; ``url`` is the ``spark://`` master URL to pass as ``--master``. For a real
cluster start the same two classes on the machines (or use ``start-master.sh`` /
``start-worker.sh`` of a Spark distribution): docs/spark.md.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import EngineUnavailableError
from ..extras import require
from ..runtime.ports import free_port
from .session import check_java


def spark_home() -> Path:
    """The pyspark installation (it bundles Spark's jars and ``bin/spark-class``)."""
    pyspark = require("pyspark", "spark", "a standalone Spark cluster")
    return Path(pyspark.__file__).parent


def daemon_env(host: str, home: Path | None = None) -> dict[str, str]:
    """The environment of a master or worker JVM bound to ``host`` (an address of this
    machine): ``SPARK_LOCAL_IP`` is where it listens, and executors a worker starts run this
    interpreter's Python (``PYSPARK_PYTHON``), where stretchflow is installed."""
    home = home or spark_home()
    return dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable,
                SPARK_LOCAL_IP=host, SPARK_NO_DAEMONIZE="1")


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float,
              host: str = "127.0.0.1") -> None:
    """Waits until ``host:port`` accepts a connection; a clear error if ``proc`` (the process
    that should listen there) exits first or the time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise EngineUnavailableError(f"the Spark {what} exited with code {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(2.0)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)
    raise EngineUnavailableError(
        f"the Spark {what} did not listen on {host}:{port} in {timeout}s")


@contextmanager
def standalone(workers: int = 1, cores: int = 1, memory: str = "1g",
               timeout: float = 120.0) -> Iterator[str]:
    """Starts a standalone master and ``workers`` workers on 127.0.0.1; yields the master URL."""
    check_java()
    home = spark_home()
    env = daemon_env("127.0.0.1", home)
    cls = [str(home / "bin" / "spark-class")]
    port = free_port()
    procs: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            cls + ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                   str(port), "--webui-port", str(free_port())],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(master)
        wait_port(port, master, "master", timeout)
        url = f"spark://127.0.0.1:{port}"
        for _ in range(workers):
            procs.append(subprocess.Popen(
                cls + ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                       "--cores", str(cores), "--memory", memory, "--webui-port",
                       str(free_port())],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
