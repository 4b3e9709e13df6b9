"""``--engine spark``: runs a Flow on Apache Spark (see :mod:`stretchflow.spark`).

``run(flow, parallelism=None, key_groups=None, master=None, spark_conf=None)`` runs a flow with
bounded inputs as a batch job — Spark's own DataFrame operations where the flow is declarative
(:mod:`stretchflow.spark.native`), else Python workers; :func:`stretchflow.spark.streaming.
run_stream` runs it as a Structured Streaming query over growing inputs.

Spark's own output (the JVM's log, its Python workers' messages, Py4J's) goes to a log file,
never to the terminal (:mod:`stretchflow.spark.errors`); the result's ``extra["spark_log"]``
names it. The one line a run says itself is Spark's UI address when the UI is on.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from ..errors import FlowDefinitionError
from ..flow import Flow
from ..runtime.result import RunResult

log = logging.getLogger(__name__)


def parse_conf(pairs: list[str] | dict[str, str] | None) -> dict[str, str]:
    """``k=v`` strings (``--spark-conf``) or a dict, as a dict; a malformed pair is an error."""
    if pairs is None:
        return {}
    if isinstance(pairs, dict):
        return {str(k): str(v) for k, v in pairs.items()}
    out: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"--spark-conf expects KEY=VALUE, got {p!r}")
        out[k.strip()] = v.strip()
    return out


def is_streaming(flow: Flow) -> bool:
    """True when a source is a JSON Lines directory (a growing stream of files) or Spark's
    rate source."""
    from ..spark.streaming import is_stream_source

    return any(n.kind == "source" and is_stream_source(n.spec) for n in flow.nodes)


def run(flow: Flow, parallelism: int | None = None, key_groups: int | None = None,
        master: str | None = None, spark_conf: Any = None, checkpoint: str | None = None,
        max_files_per_trigger: int = 1, spark_ui: bool | None = None,
        until: str | None = None, native: str = "on") -> RunResult:
    """Runs ``flow`` to the end of its inputs on Spark.

    ``master``: a Spark master URL (``local[*]`` by default, ``spark://host:7077``, ``yarn``,
    ``k8s://…``); ``spark_conf``: extra Spark settings (a dict or ``KEY=VALUE`` strings);
    ``parallelism``: Spark partitions of each O+
    (batch default: the cores, ``defaultParallelism``; streaming: the state partitions,
    ``spark.sql.shuffle.partitions``); ``key_groups``: G, the key groups keys hash
    to (default 4 × partitions). The session is started once per process and reused.

    Sources that are JSON Lines *directories* or Spark's rate source (``sf.io.rate``) make it a
    Structured Streaming query: over the files present now (``availableNow``,
    ``max_files_per_trigger`` files per micro-batch), or over the rate source's ``rows`` rows
    (a micro-batch per second), checkpointed in ``checkpoint`` (a fresh temporary directory if
    None; reuse one to resume a stopped query). Its state has ``spark.sql.shuffle.partitions``
    partitions. Directory inputs are read in file-name order (:mod:`stretchflow.spark.
    stream_files`); ``until``: ``"marker"``, ``"idle:SECONDS"`` or ``"never"`` keeps the query
    running on new files until that end (None: the files present at the start). A run that
    ends with windows open logs one WARNING saying how many and how to close them.

    ``spark_ui``: Spark's web UI on (off by default: it costs memory and a port), its URL
    said at the start (``spark UI: http://...``) and kept in ``extra["spark_ui"]``; it lives
    as long as the session, i.e. the process.

    ``native``: a bounded flow of column expressions runs as Spark's own DataFrame operations
    (:mod:`stretchflow.spark.native`; ``"off"``: through Python workers as any flow);
    ``extra["spark_native"]`` says per operator which way it ran and why.

    A failure of Spark itself (its JVM out of memory or dead, a Spark error) is one
    :class:`stretchflow.spark.errors.SparkFailure` naming the cause and Spark's log file
    (where all of Spark's output goes); a user function's or an input's error is the same
    OperatorError or SourceError as on the local engines."""
    from ..spark.errors import explain

    try:
        return _run(flow, parallelism, key_groups, master, spark_conf, checkpoint,
                    max_files_per_trigger, bool(spark_ui), until, native == "on")
    except Exception as e:
        failure = explain(e)
        if failure is None:
            raise
        raise failure from None  # the cause is in Spark's log; e stays as __context__


def _run(flow: Flow, parallelism: int | None, key_groups: int | None, master: str | None,
         spark_conf: Any, checkpoint: str | None, max_files_per_trigger: int,
         spark_ui: bool, until: str | None = None, native: bool = True) -> RunResult:
    from ..spark import native as native_plan
    from ..spark.errors import log_path
    from ..spark.session import get_session, ui_url

    t0 = time.perf_counter()
    spark = get_session(master, parse_conf(spark_conf), ui=spark_ui)
    t_session = time.perf_counter() - t0
    url = ui_url(spark)  # on when asked for, or by --spark-conf spark.ui.enabled=true
    if url is not None:
        _say(f"spark UI: {url}")
    streaming = is_streaming(flow)
    # batch: one partition per core — every partition a tuple's keys reach gets a copy, so
    # more partitions than cores only add copies; streaming: the state partitions
    P = parallelism or (int(spark.conf.get("spark.sql.shuffle.partitions")) if streaming
                       else spark.sparkContext.defaultParallelism)
    G = key_groups or 4 * P
    if P < 1 or G < 1:
        raise FlowDefinitionError(f"partitions ({P}) and key groups ({G}) must be >= 1")
    t1 = time.perf_counter()
    extra: dict[str, Any] = {"session_start_s": t_session, "partitions": P, "key_groups": G,
                             "master": spark.sparkContext.master,
                             "spark_log": str(log_path()),  # Spark's own output
                             "spark_ui": url}
    if streaming:
        from ..spark.streaming import run_stream

        # without --checkpoint, run_stream uses a temporary one and removes it on every exit
        info = run_stream(flow, spark, checkpoint, G, max_files_per_trigger, until=until)
        tuples_in = info["tuples_in"]  # records per input: no blank lines, no end markers
        extra.update(mode="streaming", checkpoint=info["checkpoint"], batches=info["batches"],
                     open_windows=info["open_windows"])
    else:
        if checkpoint is not None or until is not None:
            raise FlowDefinitionError(f"--{'checkpoint' if until is None else 'until'} applies "
                                      f"to streaming (directory) inputs")
        # Spark's own operations where the flow is declarative, else the Python O+
        info = native_plan.run(flow, spark, G, P, native)
        tuples_in = info["tuples_in"]
        extra.update(mode="batch", driver_read_s=info["driver_read_s"])
        if info["native"] is not None:  # which operators ran natively, why not the others
            extra["spark_native"] = info["native"]
    elapsed = time.perf_counter() - t1
    return RunResult(engine="spark", elapsed=elapsed, tuples_in=tuples_in,
                     tuples_out={s.name: s.count for _, s in flow.sinks}, extra=extra)


def _say(line: str) -> None:
    """Logs ``line`` at INFO, where the CLI's handler shows it. A library caller who asked
    for the UI must see its URL too, yet unconfigured logging drops INFO records: then it goes
    to stderr through a handler of its own (as the live view's URL does, stretchflow.web)."""
    if log.hasHandlers():
        log.info(line)
    elif log.getEffectiveLevel() <= logging.WARNING:  # WARNING: the default, not a choice
        handler = logging.StreamHandler(sys.stderr)
        handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None))
        handler.flush()
