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

Options are checked once, here, before a run starts: each option by its own ``check``, then
the options that depend on each other by the engine's ``settle`` (``checkpoint_every`` needs
``checkpoint``, a schedule within ``max_parallelism``, a controller built from its name and
``controller_options``, ...), every refusal a :class:`FlowDefinitionError`. The executor
receives :class:`Settings`: every option of its spec, checked, the defaults filled in
(:attr:`Option.value`). Every run goes through :func:`run` (``Flow.run``, and an executor's
own ``run(flow, **options)``, which hands its arguments to it), which also checks the flow
(``flow.validate()``) once.
"""

from __future__ import annotations

import copy
import importlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
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


def _integer(name: str, least: int) -> Callable[[Any], Any]:
    word = "positive" if least == 1 else "non-negative"

    def check(v: Any) -> Any:
        if isinstance(v, Mapping):  # per operator (slack's parallelism)
            return {k: check(x) for k, x in v.items()}
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise FlowDefinitionError(f"{name} must be a {word} integer, got {v!r}")
        return v
    return check


def _positive(name: str) -> Callable[[Any], Any]:
    return _integer(name, 1)


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
    #: the value the engine runs with when the option is left out (None: the engine derives
    #: it, see its ``settle``); per engine, so not part of the option's identity
    value: Any = field(default=None, compare=False)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _opt(name: str, help: str, parse: Callable[[str], Any] | None = str,  # noqa: A002
         check: Callable[[Any], Any] | None = None, default: str = "",
         choices: tuple[str, ...] | None = None, metavar: str | None = None,
         repeat: bool = False, const: str | None = None, value: Any = None) -> Option:
    if choices is not None and check is None:
        def check(v: Any, _c: tuple[str, ...] = choices, _n: str = name) -> Any:
            if v not in _c:
                raise FlowDefinitionError(f"{_n} must be one of {', '.join(_c)}; got {v!r}")
            return v
    return Option(name, help, parse, check, default, choices, metavar, repeat, const, value)


def _at(opt: Option, value: Any) -> Option:
    """``opt`` with the engine's own default ``value`` (an engine's copy of a common one)."""
    return replace(opt, value=value)


def _flag(name: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v is True or v is False:
            return v
        if v in ("on", "off"):
            return v == "on"
        raise FlowDefinitionError(f"{name} must be on or off (True or False), got {v!r}")
    return check


def _seconds_or_off(name: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0 \
                or not math.isfinite(v):
            raise FlowDefinitionError(f"{name} must be a number of seconds >= 0 (0: off), "
                                      f"got {v!r}")
        return v
    return check


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
                "(on: at any parallelism on the reference engine (not with checkpoints "
                "at parallelism > 1), vsn, and ordered (not with checkpoints), and on sn's "
                "process channels without "
                "reconfigurations or checkpoints), and batches of rows through the Python "
                "functions of the other Maps, Filters and one-input O+ (issue #32: on the "
                "reference engine, vsn, ordered (a line from one file source), and sn's "
                "channels (a line from one file source, without reconfigurations or "
                "checkpoints)), or everything tuple at a time (off)",
                choices=("on", "off"), default="on")
GIL_CORE = _opt("gil_core", "run the threads that may hold the GIL for most of their work "
                "(an O+'s instances calling Python functions, a source read as rows) on one "
                "CPU while they are measured taking turns at it, so a hand-over of the GIL does "
                "not move the running thread's data between cores; threads whose functions "
                "release the GIL (numpy) use more cores and stay free (runtime/gil_core.py; "
                "off: the scheduler places every thread)",
                _flag("gil_core"), _flag("gil_core"), default="on", choices=("on", "off"),
                value=True)
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


class Settings(Mapping[str, Any]):
    """An engine's options as its executor runs with them: every option of its spec, each
    checked (:meth:`EngineSpec.check`), the defaults filled in, and those that depend on each
    other checked together and resolved (the spec's ``settle``). Read as attributes
    (``s.parallelism``) or as a mapping; ``given`` holds the options the caller gave."""

    def __init__(self, values: dict[str, Any], given: dict[str, Any]):
        self._values = values
        self.given = given

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def set(self, **values: Any) -> None:
        """Sets resolved values (a spec's ``settle``, before the executor gets them)."""
        self._values.update(values)

    def __repr__(self) -> str:
        return f"Settings({self._values!r})"


@dataclass(frozen=True)
class EngineSpec:
    """An engine: its name, where its ``run`` lives, a one-line summary, its options, and
    ``settle``: the checks of options that depend on each other (and the values they
    resolve to), run once every option passed its own check."""

    name: str
    module: str
    summary: str
    options: tuple[Option, ...]
    settle: Callable[[Settings], None] | None = None

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

    def settings(self, options: Mapping[str, Any]) -> Settings:
        """``options`` checked (:meth:`check`), the defaults filled in, then settled: what
        the engine's executor runs with. Raises :class:`FlowDefinitionError`."""
        given = self.check(options)
        s = Settings({o.name: o.value for o in self.options} | given, given)
        if self.settle is not None:
            self.settle(s)
        return s


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


# -- the options that depend on each other: checked once, per engine ---------------------------
def _checkpointed(s: Settings) -> None:
    if s.checkpoint_every is not None and s.checkpoint is None:
        raise FlowDefinitionError("checkpoint_every needs checkpoint (the directory)")


def _controllers(s: Settings) -> None:
    """``controllers``: ``k -> the controller of the k-th elastic operator`` (or None), built
    from ``controller`` and ``controller_options``; an operator keeps state in its controller
    (levels, history), so a name makes one per operator and an object is deep-copied for every
    operator but the first."""
    ctl, opts = s.controller, s.controller_options
    if opts is not None and ctl is None:
        raise FlowDefinitionError("controller_options need a controller given by name")
    if ctl is None:
        s.set(controllers=lambda _k: None)
    elif isinstance(ctl, str):
        from .elastic import make_controller

        kw = dict(opts or {})
        try:
            make_controller(ctl, **kw)  # a bad name or option fails before the run
        except (TypeError, ValueError) as e:
            raise FlowDefinitionError(f"controller {ctl!r}: {e}") from None
        s.set(controllers=lambda _k: make_controller(ctl, **kw))
    else:
        if opts is not None:
            raise FlowDefinitionError("controller_options apply to a controller given by "
                                      "name; configure a Controller object directly")
        s.set(controllers=lambda k: ctl if k == 0 else copy.deepcopy(ctl))


def _settle_reference(s: Settings) -> None:
    _checkpointed(s)


def _settle_vsn(s: Settings) -> None:
    _checkpointed(s)
    _controllers(s)
    steps = list(s.reconfigure or ())
    n = s.max_parallelism or max([s.parallelism] + [p for _, p in steps])
    if any(p > n for _, p in steps):
        raise FlowDefinitionError(f"--reconfigure asks for more than max_parallelism={n}")
    if s.parallelism > n:
        raise FlowDefinitionError(f"need parallelism ({s.parallelism}) <= max_parallelism "
                                  f"({n})")
    s.set(max_parallelism=n, reconfigure=steps, control_hold=s.control_hold or None)


def _store(v: Any) -> Any:
    from .elastic.migration import StateStore

    if v in ("memory", "sqlite") or isinstance(v, StateStore):
        return v
    raise FlowDefinitionError(f"store must be one of memory, sqlite (or, in Python, a "
                              f"StateStore); got {v!r}")


def _settle_sn(s: Settings) -> None:
    _checkpointed(s)
    _controllers(s)
    steps = sorted(s.reconfigure or ())
    wanted = [s.parallelism] + [p for _, p in steps]
    # with a controller and no bound, room to scale out
    most = s.max_parallelism or (max(wanted) if s.controller is None else max(*wanted, 4))
    if any(not 1 <= p <= most for p in wanted):
        raise FlowDefinitionError(f"parallelism must be between 1 and max_parallelism={most}")
    store = s.store
    if s.channels == "processes":
        from .elastic.migration import SQLiteStateStore

        store = store or "sqlite"
        if store == "memory" or not isinstance(store, str | SQLiteStateStore):
            raise FlowDefinitionError("process channels migrate state through a file every "
                                      "process can open: use store='sqlite' (or an "
                                      "SQLiteStateStore)")
    s.set(max_parallelism=most, reconfigure=steps, store=store or "memory")


def _settle_ordered(s: Settings) -> None:
    _checkpointed(s)
    if s.parallelism is None:  # a worker per core
        s.set(parallelism=os.cpu_count() or 1)


def _slt_tuner(v: Any) -> Any:
    from .elastic.controller import Controller

    if not isinstance(v, Controller):
        raise FlowDefinitionError(f"the slack engine's controller is an SLT tuner object "
                                  f"(stretchflow.elastic.sltuner), got {v!r}")
    return v


def _settle_slack(s: Settings) -> None:
    _checkpointed(s)
    if s.checkpoint is not None:
        slts = list(s.slt.values()) if isinstance(s.slt, Mapping) else [s.slt]
        if s.controller is not None or any(x != math.inf for x in slts):
            raise FlowDefinitionError(
                "checkpoint: the slack engine checkpoints only with slt=inf and no controller "
                "(a finite SLT processes tuples out of timestamp order, so no cut is "
                "consistent and a resumed run could not equal an uninterrupted one)")


ENGINES: dict[str, EngineSpec] = {e.name: e for e in (
    EngineSpec(
        "reference", "stretchflow.executors.reference",
        "sequential and exact (STRETCH Alg. 2 on one thread): the oracle",
        (_at(PARALLELISM, 1), KEY_GROUPS,
         _at(COLUMNAR, "on"),
         CHECKPOINT,
         CHECKPOINT_EVERY),
        _settle_reference),
    EngineSpec(
        "vsn", "stretchflow.executors.vsn",
        "STRETCH's virtual shared-nothing threads: shared input, output and state; elastic",
        (_at(PARALLELISM, 1), MAX_PARALLELISM, KEY_GROUPS, _at(CAPACITY, 4096),
         _at(RECONFIGURE, ()), CONTROLLER, CONTROLLER_OPTIONS, _at(METRICS_INTERVAL, 1.0),
         _opt("on_start", "API only: called with the executor once its threads run (to "
              "reconfigure it from Python while it runs)", None),
         _opt("defer_gc", "API only: hold cyclic garbage collection during a "
              "reconfiguration (default True)", None, value=True),
         _opt("max_spread", "tuples an instance may read ahead of the slowest instance of "
              "its operator (0: no bound); bounds how long a reconfiguration waits", int,
              _integer("max_spread", 0),
              default="64 (2048 for an O+ whose kernels take runs)", metavar="N"),
         _opt("control_hold", "seconds ESG_in's sources wait at most from a control tuple "
              "until its switch is applied, so the instances need not win the GIL from them "
              "(0: no hold; docs/vsn.md)", float, _seconds_or_off("control_hold"),
              default="0.05", metavar="S", value=0.05),
         _opt("hold_switch", "lower the GIL switch interval from a reconfiguration request "
              "until its switch (runtime/switch_hold.py; docs/vsn.md)", _flag("hold_switch"),
              _flag("hold_switch"), default="off", choices=("on", "off"), value=False),
         GIL_CORE,
         _at(COLUMNAR, "on"),
         CHECKPOINT,
         CHECKPOINT_EVERY),
        _settle_vsn),
    EngineSpec(
        "sn", "stretchflow.executors.sn",
        "shared-nothing channels (threads or processes), splitter/merger, state migration",
        (_at(PARALLELISM, 1), MAX_PARALLELISM, _at(KEY_GROUPS, 128), CAPACITY,
         _at(RECONFIGURE, ()), CONTROLLER, CONTROLLER_OPTIONS, _at(METRICS_INTERVAL, 1.0),
         _opt("channels", "channels as threads or processes (multicore; state migrates "
              "through SQLite)", choices=("threads", "processes"), default="threads",
              value="threads"),
         _opt("store", "state store of migrations: memory or sqlite (processes: sqlite)",
              check=_store, choices=("memory", "sqlite"), default="memory for threads, "
              "sqlite for processes"),
         _opt("batch", "input tuples per splitter flush and watermark pulse", int,
              _positive("batch"), default="256", metavar="N", value=256),
         _opt("pulse_ms", "also flush when this many ms passed since the last flush", float,
              _positive_number("pulse_ms"), default="50", metavar="MS", value=50),
         _opt("start_method", "multiprocessing start method of process channels",
              choices=("forkserver", "spawn"), default="forkserver", value="forkserver"),
         _at(COLUMNAR, "on"),
         CHECKPOINT,
         CHECKPOINT_EVERY),
        _settle_sn),
    EngineSpec(
        "ordered", "stretchflow.executors.ordered",
        "a worker pool and a scheduler over the operators; order by serial numbers",
        (PARALLELISM, KEY_GROUPS, _at(CAPACITY, 1024),
         _opt("scheduler", "scheduling heuristic", choices=("qst", "lp", "et", "ct"),
              default="qst", value="qst"),
         _opt("reorder", "the reorder buffer", choices=("nonblocking", "lock"),
              default="nonblocking", value="nonblocking"),
         _opt("queue", "the queue of stateful stages", choices=("hybrid", "partitioned"),
              default="hybrid", value="hybrid"),
         _opt("time_slice", "seconds a worker runs one task", float,
              _positive_number("time_slice"), default="0.002", metavar="S", value=0.002),
         _opt("max_batch", "tuples per task slice", int, _positive("max_batch"),
              default="256", metavar="N", value=256),
         _opt("ct_window", "seconds of the CT heuristic's window", float,
              _positive_number("ct_window"), default="0.05", metavar="S", value=0.05),
         _opt("marker_every", "a latency marker every N tuples (0: none)", int,
              _integer("marker_every", 0), default="0", metavar="N", value=0),
         CHECKPOINT,
         CHECKPOINT_EVERY,
         _at(COLUMNAR, "on"),
         GIL_CORE),
        _settle_ordered),
    EngineSpec(
        "slack", "stretchflow.executors.slack",
        "latency-bounded determinism: Slack ScaleGates, SLTuner under a deadline",
        (_at(PARALLELISM, 1), _at(KEY_GROUPS, 64), _at(CAPACITY, 65536),
         _at(METRICS_INTERVAL, 0.5),
         _opt("controller", "the SLT tuner (a Controller answering SLTDecision); API only",
              None, _slt_tuner),
         _opt("deadline", "the query's latency deadline in ms (violations are counted)",
              float, _positive_number("deadline"), metavar="MS"),
         _opt("slt", "slack time of every SSG in event-time ms (default inf: exact)", float,
              metavar="MS", value=math.inf),
         _opt("checkpoint", "the checkpoint directory: checkpoints are written there and a "
              "run given a directory that holds one resumes from it (slt inf only; "
              "docs/checkpoints.md)", metavar="DIR"),
         CHECKPOINT_EVERY,
         GIL_CORE),
        _settle_slack),
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
              "the session: the process); in Python True or False", _flag("spark_ui"),
              _flag("spark_ui"), default="off", choices=("on", "off"), const="on"),
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


def settings(engine: str, options: Mapping[str, Any]) -> Settings:
    """``engine``'s :class:`Settings` for ``options`` (see :meth:`EngineSpec.settings`)."""
    return get_spec(engine).settings(options)


def given(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An executor's ``run(flow, ...)`` arguments (its ``locals()``) as the options its caller
    gave: the flow and what was left at None (the engine's default) left out."""
    return {k: v for k, v in arguments.items() if k != "flow" and v is not None}


def run(flow: Any, engine: str, options: Mapping[str, Any]) -> Any:
    """Checks ``flow`` and ``options`` (against ``engine``'s spec, once) and runs ``flow``
    on it: ``Flow.run`` and every executor's own ``run(flow, **options)`` come here."""
    spec = get_spec(engine)
    web = {o.name: options[o.name] for o in RUN_OPTIONS if options.get(o.name) is not None}
    flow.validate()
    s = spec.settings({k: v for k, v in options.items() if k not in web})
    log.debug("run %s on %s: options %s", flow.name, engine, s.given)
    result = _run_checked(flow, engine, spec, s, web)
    log.debug("run %s ended: %r", flow.name, result)
    return result


def _executor(spec: EngineSpec, s: Settings) -> Callable[[Any], Any]:
    """``flow -> RunResult``: the ``execute(flow, settings)`` beside the engine's ``run``
    (:meth:`EngineSpec.load`), or, for an engine that takes its options as keywords only
    (spark), that ``run(flow, **given options)``."""
    run = spec.load()
    execute = getattr(importlib.import_module(run.__module__), "execute", None)
    if execute is not None:
        return lambda flow: execute(flow, s)
    return lambda flow: run(flow, **s.given)


def _run_checked(flow: Any, engine: str, spec: EngineSpec, s: Settings,
                 web: dict[str, Any]) -> Any:
    if not web or web.get("ui") is False and "report" not in web:
        return _executor(spec, s)(flow)
    if engine not in LOCAL_ENGINES:
        raise FlowDefinitionError(f"ui and report watch a run in this process; the {engine} "
                                  f"engine does not take them (local engines: "
                                  f"{', '.join(LOCAL_ENGINES)})")
    from .web import watch  # only now: the web package loads http.server and prometheus_client

    with watch(flow, engine, ui=UI.check(web["ui"]) if "ui" in web else False,  # type: ignore[misc]
               ui_wait=bool(web.get("ui_wait")), report=web.get("report")) as session:
        return session.finish(_executor(spec, s)(flow))
