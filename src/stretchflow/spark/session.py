"""One SparkSession per process, with the settings the Spark engine relies on.

Starting a session costs 17–26 s on two cores (notes/SPARK.md), so a process starts one and
keeps it: :func:`get_session` returns the running session when its master matches, and asks
for the same master again is free. Asking for a *different* master in the same process is an
error (a JVM hosts one SparkContext).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

from ..errors import EngineUnavailableError
from ..extras import require
from . import errors

#: Settings every session gets (a user's ``--spark-conf`` overrides them).
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # reproducible physical plans: adaptive execution would coalesce shuffle partitions,
    # changing which partition holds which key group from one run to the next
    "spark.sql.adaptive.enabled": "false",
    # transformWithStateInPandas needs RocksDB (the default provider fails with
    # STORE_BACKEND_NOT_SUPPORTED_FOR_TWS); it also keeps large states off the JVM heap
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.ui.showConsoleProgress": "false",  # quiet by default
}

_LOG4J = """rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
"""


def _log4j_file(level: str) -> str:
    """A log4j2 configuration at ``level`` (Spark's default logs INFO while starting)."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"stretchflow-log4j2-{level.lower()}.properties")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(_LOG4J.format(level=level.lower()))
    return path

_session: Any = None
_master: str | None = None


def check_java() -> str:
    """The java executable Spark will start, or a clear error if there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        exe = os.path.join(home, "bin", "java")
        if os.path.exists(exe):
            return exe
        # Spark's launch scripts run $JAVA_HOME/bin/java whenever JAVA_HOME is set: a java on
        # the PATH would not be used, so the start would fail after a wait with a shell error
        raise EngineUnavailableError(
            f"the spark engine cannot start: JAVA_HOME={home} has no bin/java; point JAVA_HOME "
            f"at a Java 17 or 21 installation, or unset it to use the java on the PATH"
        )
    exe = shutil.which("java")
    if exe is None:
        raise EngineUnavailableError(
            "the spark engine needs a Java runtime (17 or 21) and none was found: install one "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return exe


def default_partitions(master: str) -> int:
    """Shuffle partitions (the state partitions of a streaming query): the cores of
    ``local[N]``/``local[*]``, else 4. One per core, as for the batch path: each partition of a
    stateful micro-batch pays a Python worker task and a RocksDB commit (~0.1-0.4 s on a
    local disk), so more partitions than cores cost time without adding parallelism
    (docs/spark.md); rescaling changes them later (``stretchflow spark rescale``)."""
    if master.startswith("local"):
        inner = master[master.find("[") + 1: master.find("]")] if "[" in master else "1"
        return (os.cpu_count() or 2) if inner in ("*", "") else int(inner.split(",")[0])
    return 4


def get_session(master: str | None = None, conf: dict[str, str] | None = None,
                app_name: str = "stretchflow", ui: bool = False) -> Any:
    """The process's SparkSession, started on first use with :data:`DEFAULT_CONF` + ``conf``.

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[*]``. Later calls with the same (or no)
    master return the running session; ``conf`` given then is applied when it is a runtime SQL
    setting, else it is an error to ask for it (it needs a new JVM). ``ui``: Spark's web UI
    on (``spark.ui.enabled``, off by default; :func:`ui_url` says where), which a running
    session started without it cannot turn on."""
    global _session, _master
    want = master or os.environ.get("SPARK_MASTER") or "local[*]"
    if _session is not None:
        if master is not None and want != _master:
            raise EngineUnavailableError(
                f"a Spark session on {_master!r} is already running in this process; one "
                f"session per process: cannot also start one on {want!r}"
            )
        if ui and ui_url(_session) is None:
            raise EngineUnavailableError(
                "spark_ui: the Spark session running in this process was started with its UI "
                "off, and the UI starts only with a session (one per process): ask for it in "
                "the process's first Spark run")
        for k, v in (conf or {}).items():
            try:
                _session.conf.set(k, v)
            except Exception as e:  # static conf: only settable at start
                raise EngineUnavailableError(
                    f"--spark-conf {k}={v} cannot change in a running session: {e}"
                ) from None
        return _session
    # the spark extra first: without pyspark, Java's check would be beside the point
    require("pyspark", "spark", "the spark engine")
    require("pandas", "spark", "the spark engine")
    check_java()
    # workers must run this interpreter, where stretchflow and its dependencies are installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = dict(DEFAULT_CONF)
    settings["spark.sql.shuffle.partitions"] = str(default_partitions(want))
    # the level of Spark's log file (errors.log_path), not of the terminal: Spark's output
    # never reaches the terminal, so WARN costs nothing there and helps explain a failure
    level = os.environ.get("STRETCHFLOW_SPARK_LOG", "WARN")
    settings["spark.driver.extraJavaOptions"] = (
        f"-Dlog4j2.configurationFile=file:{_log4j_file(level)}")
    settings.update(conf or {})
    if ui:  # asked for by name: wins over a --spark-conf spark.ui.enabled=false
        settings["spark.ui.enabled"] = "true"
        if want.startswith("local"):
            # Spark's UI listens on $SPARK_LOCAL_IP, else on every interface: a local run's
            # UI is for this machine only, like the live view (--ui). An address already set
            # is the user's choice; a cluster's driver must be reachable from its executors
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if want.startswith("local") and "spark.local.dir" not in settings:
        settings["spark.local.dir"] = _scratch_dir()
    settings["spark.master"] = want
    settings["spark.app.name"] = app_name
    # the JVM is started here, its stdout and stderr going to the log file; getOrCreate then
    # finds it running (PySpark would start it with the terminal as its stderr)
    _launch_gateway(settings)
    builder = SparkSession.builder.master(want).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        raise EngineUnavailableError(
            f"cannot start Spark on {want!r}: {errors.root_cause(str(e))}; Spark's log: "
            f"{errors.log_path()}") from e
    errors.quiet_accumulator_server(spark.sparkContext)
    spark.sparkContext.setLogLevel(level)
    _warm_up(spark)
    _session, _master = spark, want
    return spark


def ui_url(spark: Any) -> str | None:
    """The URL of ``spark``'s web UI (its port is Spark's: 4040, or the next free one), or
    None when the UI is off."""
    return spark.sparkContext.uiWebUrl


def _launch_gateway(settings: dict[str, str]) -> None:
    """Starts the JVM (:func:`errors.launch_gateway`) with Python's temporary directory set
    to a pid-named one of ours: PySpark's launcher makes a ``tmp*`` directory for the JVM's
    connection file and removes it after the JVM answers, so a driver SIGKILLed in between
    left it behind (bench kills counted 13 in 100 Spark cycles); the next run sweeps ours
    (runtime/tempdirs.py). The session starts before the run's threads, so changing
    ``tempfile.tempdir`` for this moment affects no one else."""
    import tempfile

    from ..runtime.tempdirs import make_tempdir

    own = make_tempdir("spark-gateway")
    before = tempfile.tempdir
    tempfile.tempdir = str(own)
    try:
        errors.launch_gateway(settings)
    finally:
        tempfile.tempdir = before
        shutil.rmtree(own, ignore_errors=True)


def _scratch_dir() -> str:
    """Spark's scratch space (its ``spark-*`` and ``blockmgr-*`` directories) for a local
    master, in a pid-named directory: a SIGKILLed JVM cannot remove its own, and the next run
    sweeps what a dead one left (runtime/tempdirs.py); removed at this process's exit."""
    import atexit

    from ..runtime.tempdirs import make_tempdir

    d = str(make_tempdir("spark"))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def _warm_up(spark: Any) -> None:
    """Runs a tiny two-stage Python job on every core, so that the first real job does not
    pay for starting the Python workers and importing pyarrow, numpy and stretchflow in them
    (4–10 s on two cores): part of starting the session, timed with it."""
    n = spark.sparkContext.defaultParallelism
    try:
        (spark.range(0, 4 * n, numPartitions=n).mapInArrow(_warm_kernel, "id long")
         .repartition(n, "id").mapInArrow(_warm_kernel, "id long").count())
    except Exception as e:  # not fatal here: the real job will report the cause
        errors.write_log(f"stretchflow: Spark warm-up failed: {errors.safe_str(e)}\n")


def _warm_kernel(batches: Any) -> Any:
    import numpy  # noqa: F401
    import pyarrow.compute  # noqa: F401

    from . import columnar, plan  # noqa: F401

    yield from batches


@contextlib.contextmanager
def temp_checkpoint(checkpoint: str | os.PathLike | None) -> Iterator[str]:
    """``checkpoint`` as it is, or (None) a new temporary directory removed when the block
    ends, whichever way: ``finally`` covers errors and Ctrl-C, atexit an exit that skips it
    (``sys.exit`` from a signal handler)."""
    if checkpoint is not None:
        yield str(checkpoint)
        return
    import atexit

    from ..runtime.tempdirs import make_tempdir

    # pid-named: one a SIGKILL leaves behind is swept by the next run (runtime/tempdirs.py)
    tmp = str(make_tempdir("ckpt"))

    def remove() -> None:
        shutil.rmtree(tmp, ignore_errors=True)

    atexit.register(remove)
    try:
        yield tmp
    finally:
        remove()
        atexit.unregister(remove)


def stop_session() -> None:
    """Stops the process's session (tests, or before a process exits)."""
    global _session, _master
    if _session is not None:
        _session.stop()
    _session = _master = None


# -- where Spark's hash partitioner sends an integer ------------------------------------------
def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3Hash`` of an IntegerType value (Murmur3_x86_32.hashInt), signed."""
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = seed ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_tokens(n: int) -> list[int]:
    """``tokens[b]``: an int that ``repartition(n, col)`` sends to partition ``b``.

    Rows carry the token of their bucket as the partitioning column, so bucket b lands in
    partition b and buckets never share a partition (which hashing the bucket number itself
    would not guarantee). Correctness never depends on this: a partition processes each row
    for the bucket the row names, whichever partition it lands in."""
    tokens: list[int | None] = [None] * n
    left, v = n, 0
    while left:
        b = spark_int_hash(v) % n  # Python's % is pmod for a positive n
        if tokens[b] is None:
            tokens[b] = v
            left -= 1
        v += 1
    return tokens  # type: ignore[return-value]
