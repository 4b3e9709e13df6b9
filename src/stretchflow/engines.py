"""The engine registry: every engine declares its options once, here, in one vocabulary.

``Flow.run``, the CLI's flags, their help and their validation, and docs/api.md and
docs/cli.md all come from these specs; an executor's ``run(flow, **options)`` receives only
options its spec declares (a test checks each signature against its spec). The registry sits
below both :mod:`stretchflow.flow` and the executors and imports an executor only when it runs,
by module name, so there is no import circle between them.

One name per concept, on every engine that has it:

``parallelism``      instances of each O+ (vsn and slack threads, sn channels, ordered workers,
                     Spark partitions)
``max_parallelism``  the most instances a reconfiguration or controller may ask for
``key_groups``       G, the key groups keys hash to; f_μ moves groups, never single keys
``capacity``         tuples a buffer between threads holds before its writers block
``reconfigure``      ``[(COUNT, P), ...]``: after the COUNT-th input tuple request P instances
``controller``       the elasticity controller (a name or an object)
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import EngineUnavailableError, FlowDefinitionError

log = logging.getLogger(__name__)


def parse_schedule(text: str | list[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """``COUNT:P,COUNT:P``: after the COUNT-th input tuple, request parallelism P (a list of
    pairs passes through, checked)."""
    if not text:
        return []
    parts = text.split(",") if isinstance(text, str) else list(text)
    steps = []
    for part in parts:
        try:
            if isinstance(part, str):
                count, sep, par = part.partition(":")
                if not sep:
                    raise ValueError
                c, p = int(count), int(par)
            else:
                c, p = (int(x) for x in part)
        except (TypeError, ValueError):
            raise FlowDefinitionError(
                f"reconfigure expects COUNT:P[,COUNT:P...], got {part!r}") from None
        if c < 0 or p < 1:
            raise FlowDefinitionError(
                f"reconfigure: COUNT must be >= 0 and P >= 1, got {part!r}")
        steps.append((c, p))
    return sorted(steps)


def _positive(name: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, Mapping):  # per operator (slack's parallelism)
            return {k: check(x) for k, x in v.items()}
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise FlowDefinitionError(f"{name} must be a positive integer, got {v!r}")
        return v
    return check


def _positive_number(name: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise FlowDefinitionError(f"{name} must be a positive number, got {v!r}")
        return v
    return check


def _checkpoint_every(v: Any) -> Any:
    from .runtime.checkpoint import parse_every

    return parse_every(v)


@dataclass(frozen=True)
class Option:
    """One option: its name (``--name-with-dashes`` on the command line), what it means,
    how a command-line string becomes a value (``parse``; None: API only), how a value is
    checked (``check`` returns the value to pass on or raises), and its default as the
    engine applies it (documentation; the engine applies it when the option is left out)."""

    name: str
    help: str
    parse: Callable[[str], Any] | None = str
    check: Callable[[Any], Any] | None = None
    default: str = ""
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    repeat: bool = False  # on the command line: the flag may be given several times
    const: str | None = None  # on the command line: the value of the bare flag (no value)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _opt(name: str, help: str, parse: Callable[[str], Any] | None = str,  # noqa: A002
         check: Callable[[Any], Any] | None = None, default: str = "",
         choices: tuple[str, ...] | None = None, metavar: str | None = None,
         repeat: bool = False, const: str | None = None) -> Option:
    if choices is not None and check is None:
        def check(v: Any, _c: tuple[str, ...] = choices, _n: str = name) -> Any:
            if v not in _c:
                raise FlowDefinitionError(f"{_n} must be one of {', '.join(_c)}; got {v!r}")
            return v
    return Option(name, help, parse, check, default, choices, metavar, repeat, const)


# -- the common vocabulary ---------------------------------------------------------------------
PARALLELISM = _opt("parallelism", "instances of each O+", int, _positive("parallelism"),
                   metavar="N")
MAX_PARALLELISM = _opt("max_parallelism", "the most instances a reconfiguration or a "
                       "controller may ask for", int, _positive("max_parallelism"), metavar="N")
KEY_GROUPS = _opt("key_groups", "key groups G that keys hash to (f_μ moves groups)", int,
                  _positive("key_groups"), metavar="G")
CAPACITY = _opt("capacity", "tuples a buffer between threads holds before its writers block "
                "(flow control)", int, _positive("capacity"), metavar="N")
RECONFIGURE = _opt("reconfigure", "COUNT:P,...: after the COUNT-th input tuple of all sources "
                   "request parallelism P", parse_schedule, parse_schedule, metavar="SCHEDULE")
CONTROLLER = _opt("controller", "elasticity controller: threshold or level (or, in Python, a "
                  "Controller object)", str, metavar="NAME")
CONTROLLER_OPTIONS = _opt("controller_options", "keyword options of a controller given by "
                          "name, e.g. {'threshold': 0.2}", None)
# the same meaning on every local engine (docs/checkpoints.md; the slack engine declares its own
# CHECKPOINT to say it needs slt inf)
CHECKPOINT = _opt("checkpoint", "the checkpoint directory: checkpoints are written there and a "
                  "run given a directory that holds one resumes from it, at any parallelism "
                  "(docs/checkpoints.md)", metavar="DIR")
CHECKPOINT_EVERY = _opt("checkpoint_every", "how often to checkpoint: N (input tuples), Ns or "
                        "Nms (seconds of processing time)", _checkpoint_every, _checkpoint_every,
                        default="10s", metavar="EVERY")
COLUMNAR = _opt("columnar", "batches through Arrow kernels for an O+ that has columnar forms "
                "(on: at parallelism 1 on the reference engine, at any on vsn and ordered "
                "(not with checkpoints), and on sn's process channels without "
                "reconfigurations or checkpoints) or tuple at a "
                "time (off)", choices=("on", "off"), default="on")
METRICS_INTERVAL = _opt("metrics_interval", "seconds between two measurements (metrics, "
                        "controller calls)", float, _positive_number("metrics_interval"),
                        metavar="S")


# -- run options: taken by engines.run for every local engine, never passed to an executor ------
def _ui(v: Any) -> Any:
    if v is True or v is False:
        return v
    if isinstance(v, int) and 0 <= v <= 65535:
        return v
    raise FlowDefinitionError(f"ui must be True, False or a port number 0-65535 (0: a free "
                              f"port), got {v!r}")


UI = _opt("ui", "serve a live web view of the run on 127.0.0.1 (True or 0: a free port; or "
          "PORT) with a Prometheus /metrics endpoint (docs/live-view.md)", None, _ui,
          default="off", metavar="PORT")
UI_WAIT = _opt("ui_wait", "after the run, keep serving its final state until Ctrl-C (the "
               "CLI's --ui does unless stdin is not a terminal)", None, default="False")
REPORT = _opt("report", "write a self-contained HTML report of the run to FILE at its end",
              str, metavar="FILE")
RUN_OPTIONS = (UI, UI_WAIT, REPORT)
LOCAL_ENGINES = ("reference", "vsn", "sn", "ordered", "slack")


@dataclass(frozen=True)
class EngineSpec:
    """An engine: its name, where its ``run`` lives, a one-line summary and its options."""

    name: str
    module: str
    summary: str
    options: tuple[Option, ...]

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def option(self, name: str) -> Option | None:
        for o in self.options:
            if o.name == name:
                return o
        return None

    def load(self) -> Callable[..., Any]:
        """The engine's ``run(flow, **options)``."""
        return importlib.import_module(self.module).run

    def check(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Options checked against this spec; an unknown or misplaced one is one line naming
        the engine, the engines that take it and the options this one accepts."""
        out: dict[str, Any] = {}
        for name, value in options.items():
            opt = self.option(name)
            if opt is None:
                raise FlowDefinitionError(unknown_option_message(self, name))
            if value is None:
                continue  # left out: the engine's default
            out[name] = opt.check(value) if opt.check is not None else value
        return out


def engines_taking(name: str) -> list[str]:
    """The engines whose spec declares option ``name``."""
    return [e.name for e in ENGINES.values() if e.option(name) is not None]


def unknown_option_message(spec: EngineSpec, name: str, cli: bool = False) -> str:
    """One line: ``spec``'s engine does not take ``name``, which engines do, and what it
    accepts (``cli``: as command-line flags, the API-only options left out)."""
    takers = engines_taking(name)
    api = []
    if cli:  # the engines that take it from Python only are named apart
        api = [e for e in takers if ENGINES[e].option(name).parse is None]  # type: ignore[union-attr]
        takers = [e for e in takers if e not in api]
    where = (f"it applies to the {', '.join(takers)} engine{'s' if len(takers) > 1 else ''}"
             if takers else "no engine has it")
    if api:
        where += f"; API only on {', '.join(api)}"
    if cli:
        shown = f"option {Option(name, '').flag}"
        accepted = ", ".join(o.flag for o in spec.options if o.parse is not None) or "none"
    else:
        shown = f"option {name!r}"
        accepted = ", ".join(spec.option_names) or "none"
    return (f"the {spec.name} engine does not take {shown} ({where}); "
            f"it accepts: {accepted}")


def api_only_message(spec: EngineSpec, name: str) -> str:
    """One line: ``spec``'s option ``name`` has no command-line form (a Python object)."""
    opt = spec.option(name)
    assert opt is not None and opt.parse is None
    return (f"{opt.flag} is API only on the {spec.name} engine: pass {name}=... to "
            f"flow.run(engine={spec.name!r}, ...) ({opt.help})")


def options_by_name() -> dict[str, list[tuple[EngineSpec, Option]]]:
    """Every option name across the engines, in first-declared order, with each engine that
    declares it and its declaration there (the CLI's flags and the docs' tables)."""
    out: dict[str, list[tuple[EngineSpec, Option]]] = {}
    for spec in ENGINES.values():
        for o in spec.options:
            out.setdefault(o.name, []).append((spec, o))
    return out


def _spark_on_off(v: Any) -> bool:
    """The spark engine's ``spark_ui``: on/off from the command line, a bool from Python."""
    if v is True or v is False:
        return v
    if v in ("on", "off"):
        return v == "on"
    raise FlowDefinitionError(f"spark_ui must be on or off (True or False), got {v!r}")


def _spark_until(v: Any) -> Any:
    """The spark engine's ``until``: io.follow's syntax (None: the files present now)."""
    from .io.follow import parse_until

    if v is not None:
        try:
            parse_until(v)
        except ValueError:
            raise FlowDefinitionError(
                f"until must be 'marker', 'idle:SECONDS' (SECONDS > 0) or 'never' (unset: the "
                f"files present at the start), got {v!r}") from None
    return v


ENGINES: dict[str, EngineSpec] = {e.name: e for e in (
    EngineSpec(
        "reference", "stretchflow.executors.reference",
        "sequential and exact (STRETCH Alg. 2 on one thread): the oracle",
        (PARALLELISM, KEY_GROUPS,
         COLUMNAR,
         CHECKPOINT,
         CHECKPOINT_EVERY)),
    EngineSpec(
        "vsn", "stretchflow.executors.vsn",
        "STRETCH's virtual shared-nothing threads: shared input, output and state; elastic",
        (PARALLELISM, MAX_PARALLELISM, KEY_GROUPS, CAPACITY, RECONFIGURE, CONTROLLER,
         CONTROLLER_OPTIONS, METRICS_INTERVAL,
         _opt("on_start", "API only: called with the executor once its threads run (to "
              "reconfigure it from Python while it runs)", None),
         _opt("defer_gc", "API only: hold cyclic garbage collection during a "
              "reconfiguration (default True)", None),
         _opt("max_spread", "tuples an instance may read ahead of the slowest instance of "
              "its operator (0: no bound); bounds how long a reconfiguration waits", int,
              default="64 (2048 for an O+ whose kernels take runs)", metavar="N"),
         COLUMNAR,
         CHECKPOINT,
         CHECKPOINT_EVERY)),
    EngineSpec(
        "sn", "stretchflow.executors.sn",
        "shared-nothing channels (threads or processes), splitter/merger, state migration",
        (PARALLELISM, MAX_PARALLELISM, KEY_GROUPS, CAPACITY, RECONFIGURE, CONTROLLER,
         CONTROLLER_OPTIONS, METRICS_INTERVAL,
         _opt("channels", "channels as threads or processes (multicore; state migrates "
              "through SQLite)", choices=("threads", "processes"), default="threads"),
         _opt("store", "state store of migrations: memory or sqlite (processes: sqlite)",
              choices=("memory", "sqlite"), default="memory for threads, sqlite for "
              "processes"),
         _opt("batch", "input tuples per splitter flush and watermark pulse", int,
              _positive("batch"), default="256", metavar="N"),
         _opt("pulse_ms", "also flush when this many ms passed since the last flush", float,
              _positive_number("pulse_ms"), default="50", metavar="MS"),
         _opt("start_method", "multiprocessing start method of process channels",
              choices=("forkserver", "spawn"), default="forkserver"),
         COLUMNAR,
         CHECKPOINT,
         CHECKPOINT_EVERY)),
    EngineSpec(
        "ordered", "stretchflow.executors.ordered",
        "a worker pool and a scheduler over the operators; order by serial numbers",
        (PARALLELISM, KEY_GROUPS, CAPACITY,
         _opt("scheduler", "scheduling heuristic", choices=("qst", "lp", "et", "ct"),
              default="qst"),
         _opt("reorder", "the reorder buffer", choices=("nonblocking", "lock"),
              default="nonblocking"),
         _opt("queue", "the queue of stateful stages", choices=("hybrid", "partitioned"),
              default="hybrid"),
         _opt("time_slice", "seconds a worker runs one task", float,
              _positive_number("time_slice"), default="0.002", metavar="S"),
         _opt("max_batch", "tuples per task slice", int, _positive("max_batch"),
              default="256", metavar="N"),
         _opt("ct_window", "seconds of the CT heuristic's window", float,
              _positive_number("ct_window"), default="0.05", metavar="S"),
         _opt("marker_every", "a latency marker every N tuples (0: none)", int,
              default="0", metavar="N"),
         CHECKPOINT,
         CHECKPOINT_EVERY,
         COLUMNAR)),
    EngineSpec(
        "slack", "stretchflow.executors.slack",
        "latency-bounded determinism: Slack ScaleGates, SLTuner under a deadline",
        (PARALLELISM, KEY_GROUPS, CAPACITY, METRICS_INTERVAL,
         _opt("controller", "the SLT tuner (a Controller answering SLTDecision); API only",
              None),
         _opt("deadline", "the query's latency deadline in ms (violations are counted)",
              float, _positive_number("deadline"), metavar="MS"),
         _opt("slt", "slack time of every SSG in event-time ms (default inf: exact)", float,
              metavar="MS"),
         _opt("checkpoint", "the checkpoint directory: checkpoints are written there and a "
              "run given a directory that holds one resumes from it (slt inf only; "
              "docs/checkpoints.md)", metavar="DIR"),
         CHECKPOINT_EVERY)),
    EngineSpec(
        "spark", "stretchflow.executors.spark",
        "PySpark batch or Structured Streaming, on local[*] or a cluster",
        (PARALLELISM, KEY_GROUPS,
         _opt("master", "Spark master URL (local[*], spark://host:7077, yarn, k8s://...)",
              metavar="URL"),
         _opt("spark_conf", "a Spark setting KEY=VALUE (repeat the flag); in Python a dict",
              metavar="KEY=VALUE", repeat=True),
         _opt("checkpoint", "directory inputs (streaming): the checkpoint directory (reuse "
              "it to resume)", metavar="DIR"),
         _opt("max_files_per_trigger", "files per micro-batch of a directory stream", int,
              _positive("max_files_per_trigger"), default="1", metavar="N"),
         _opt("spark_ui", "Spark's web UI, its URL printed at the start (it lives as long as "
              "the session: the process); in Python True or False", _spark_on_off,
              _spark_on_off, default="off", choices=("on", "off"), const="on"),
         _opt("native", "bounded flows of column expressions as Spark's own DataFrame "
              "operations, no Python worker (on), or every O+ through Python workers (off)",
              choices=("on", "off"), default="on"),
         # API only: the CLI's --until (cli_run.add_event_time_flags) maps to it
         _opt("until", "directory streams: when the input ends: marker, idle:SECONDS or never "
              "(the query runs on, staging new files in name order); unset: the files present "
              "at the start", None, _spark_until, metavar="marker|idle:SECONDS|never"))),
)}


def get_spec(name: str) -> EngineSpec:
    spec = ENGINES.get(name)
    if spec is None:
        raise EngineUnavailableError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
    return spec


def get_engine(name: str) -> Callable[..., Any]:
    """The ``run(flow, **options)`` function of an engine, or a clear error."""
    return get_spec(name).load()


def run(flow: Any, engine: str, options: Mapping[str, Any]) -> Any:
    """Checks ``options`` against ``engine``'s spec and runs ``flow`` on it."""
    spec = get_spec(engine)
    web = {o.name: options[o.name] for o in RUN_OPTIONS if options.get(o.name) is not None}
    checked = spec.check({k: v for k, v in options.items() if k not in web})
    log.debug("run %s on %s: options %s", flow.name, engine, checked)
    result = _run_checked(flow, engine, spec, checked, web)
    log.debug("run %s ended: %r", flow.name, result)
    return result


def _run_checked(flow: Any, engine: str, spec: EngineSpec, checked: dict[str, Any],
                 web: dict[str, Any]) -> Any:
    if not web or web.get("ui") is False and "report" not in web:
        return spec.load()(flow, **checked)
    if engine not in LOCAL_ENGINES:
        raise FlowDefinitionError(f"ui and report watch a run in this process; the {engine} "
                                  f"engine does not take them (local engines: "
                                  f"{', '.join(LOCAL_ENGINES)})")
    from .web import watch  # only now: the web package loads http.server and prometheus_client

    with watch(flow, engine, ui=UI.check(web["ui"]) if "ui" in web else False,  # type: ignore[misc]
               ui_wait=bool(web.get("ui_wait")), report=web.get("report")) as session:
        return session.finish(spec.load()(flow, **checked))
