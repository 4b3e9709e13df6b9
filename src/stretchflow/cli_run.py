"""What ``stretchflow run`` does around a run: load a flow file or a built-in query, show
progress (a rich bar on a terminal, a log line every few seconds off one; the live web view
with ``--ui``), report reconfigurations, deadline violations and what a stopped run left
behind. Split from :mod:`stretchflow.cli` (which parses the
flags) to keep each module readable."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import threading
from pathlib import Path
from typing import Any

from .errors import FlowDefinitionError, StretchflowError


class _LazyConsole:
    """rich's stderr Console, made on first use: importing rich.console costs about 0.1 s of
    every command (a whole run of 1 M bids on Parquet: 0.56 s with it, 0.45 s without), and
    a ``run -q`` that succeeds never prints. A plain line (``markup=False,
    highlight=False``: the run summary) to a stderr that is not a terminal is written as it
    is, without rich: a script or a pipe gets the same text, and a run whose summary is all
    it prints never pays the import."""

    _console: Any = None

    @property
    def is_terminal(self) -> bool:
        """rich's answer, without importing rich unless an environment variable that rich
        reads for it is set (its answer is then not isatty's)."""
        if _LazyConsole._console is None and not _RICH_TERMINAL_ENV.intersection(os.environ):
            return _is_terminal(sys.stderr)
        return bool(self.console().is_terminal)

    def print(self, *objects: Any, markup: bool | None = None, highlight: bool | None = None,
              **kw: Any) -> None:
        if (_LazyConsole._console is None and markup is False and highlight is False
                and not kw and not self.is_terminal):
            sys.stderr.write(" ".join(map(str, objects)) + "\n")
            sys.stderr.flush()
            return
        self.console().print(*objects, markup=markup, highlight=highlight, **kw)

    def console(self) -> Any:
        """The Console, made now if it is not yet (a progress bar draws on it)."""
        if _LazyConsole._console is None:
            from rich.console import Console

            # soft_wrap: a line is never cut at the width rich assumes off a terminal (80):
            # a summary or error line naming a long path stays one line a script can read
            _LazyConsole._console = Console(stderr=True, soft_wrap=True)
        return _LazyConsole._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console(), name)


err: Any = _LazyConsole()


#: what rich's Console reads to decide it writes to a terminal besides isatty
_RICH_TERMINAL_ENV = frozenset({"FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"})


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def load_app(path: Path, params: dict[str, str]) -> Any:
    """A user's flow file defines ``flow`` (a Flow) or ``build_flow(params) -> Flow``.

    A file that does not compile, or raises while it runs or while ``build_flow`` builds the
    flow, is one :class:`FlowDefinitionError` naming the file, the line and the exception
    (the interpreter's traceback through runpy says nothing more a user needs)."""
    from .flow import Flow, loading_app

    try:
        with loading_app(path):  # a flow.run() at import would run the flow twice
            ns = runpy.run_path(str(path), run_name="__stretchflow_app__")
    except (Exception, SystemExit) as e:  # SystemExit: a script-style file calling exit()
        raise FlowDefinitionError(app_error(path, e, "fails to load")) from e
    if "build_flow" in ns:
        try:
            flow = ns["build_flow"](params)
        except (StretchflowError, ValueError) as e:  # already says what is wrong
            raise FlowDefinitionError(f"{path.name}: build_flow: {e}") from e
        except Exception as e:
            raise FlowDefinitionError(app_error(path, e, "build_flow failed")) from e
    elif isinstance(ns.get("flow"), Flow):
        if params:
            raise ValueError(f"{path} defines `flow`; --param needs a build_flow(params)")
        flow = ns["flow"]
    else:
        raise ValueError(f"{path} must define `flow = stretchflow.Flow(...)` or "
                         f"`def build_flow(params): ... return flow`")
    if not isinstance(flow, Flow):
        raise ValueError(f"{path}: build_flow returned {type(flow).__name__}, not a Flow")
    return flow


def app_error(path: Path, e: BaseException, what: str) -> str:
    """``app.py: line 3: fails to load: ZeroDivisionError: division by zero``: the line is the
    innermost frame in the flow file itself (a syntax error's own line), else none."""
    line = None
    if isinstance(e, SyntaxError) and e.filename and Path(e.filename) == path:
        line = e.lineno
    else:
        tb = e.__traceback__
        target = str(path.resolve())
        while tb is not None:  # innermost frame of the file: where its code raised
            if str(Path(tb.tb_frame.f_code.co_filename).resolve()) == target:
                line = tb.tb_lineno
            tb = tb.tb_next
    if isinstance(e, SyntaxError):
        detail = f"{type(e).__name__}: {e.msg}"
    else:
        detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    detail = " ".join(detail.split())  # one line, whatever the message holds
    where = f"{path.name}: line {line}" if line is not None else path.name
    return f"{where}: {what}: {detail}"


def _output_files(flow: Any) -> list[str]:
    """The outputs of ``flow``'s sinks: file paths, and ``-`` for stdout."""
    from .io.sinks import Stdout

    names = []
    for _, sink in flow.sinks:
        if isinstance(sink, Stdout):
            names.append("-")
        elif isinstance(getattr(sink, "path", None), Path):
            names.append(str(sink.path))
    return names


def _file_state(name: str) -> tuple | None:
    """What tells whether a file was replaced or written: inode, size, mtime (None: none)."""
    if name == "-":
        return None
    try:
        st = Path(name).stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _stop_detail(flow: Any, outputs: dict[str, tuple | None], finished: bool) -> str:
    """``after 123,456 tuples in: nothing committed, out.jsonl unchanged``: the tuples the
    sources had read (their progress counters, updated every few thousand records) and, for
    each output, whether it is as before the run (a sink commits only when the run succeeds,
    so a stopped run leaves the previous file) or changed."""
    parts = []
    if flow is None:
        return "before the run started"
    counts = [getattr(n.spec, "read", None) for n in flow.nodes if n.kind == "source"]
    if counts and all(isinstance(c, int) for c in counts):
        parts.append(f"after {sum(counts):,} tuples in")
    if finished:
        parts.append("after the run completed")
    told = []
    for name, before in outputs.items():
        label = "stdout" if name == "-" else Path(name).name
        if name == "-":
            told.append("what reached stdout stays")
            continue
        now = _file_state(name)
        if now == before:
            told.append(f"{label} unchanged" if before is not None else f"no {label} written")
        else:
            told.append(f"{label} {'committed' if finished else 'changed'}")
    if not finished and all(_file_state(n) == b for n, b in outputs.items() if n != "-"):
        told.insert(0, "nothing committed")
    head = " ".join(parts)
    return f"{head}: {', '.join(told)}" if told else head


def query_flow(name: str, inputs: list[str], output: str | None, params: dict[str, str],
               engine: str, source_options: dict[str, Any] | None = None,
               stdin_format: str | None = None) -> Any:
    """A flow of built-in query ``name`` (the one registry, :data:`queries.QUERIES`) from
    ``inputs`` to ``output``; on the spark engine an input may also be a directory stream or
    Spark's rate source (:func:`stretchflow.spark.sources.open_input`). ``source_options``
    (``max_delay``, ``late``: :func:`event_time_options`) go to every input of a local
    engine; ``stdin_format`` is the format of an input ``-`` (``--format``)."""
    import stretchflow as sf

    from .queries import QUERIES

    q = QUERIES.get(name)
    if q is None:
        raise ValueError(f"unknown query {name!r}; queries: {', '.join(QUERIES)} (or a path "
                         f"to a flow file ending in .py)")
    if not inputs:
        raise ValueError(f"query {name!r} needs --input")
    if not output:
        raise ValueError(f"query {name!r} needs --output (a path, or - for stdout)")
    q.check_inputs(len(inputs))
    typed = q.parse_params(params)
    source_options = source_options or {}
    if engine == "spark":
        if source_options:
            raise ValueError(f"--{next(iter(source_options)).replace('_', '-')} applies to the "
                             f"local engines' inputs; on the spark engine a stream's lateness "
                             f"is Spark's watermark (docs/spark.md)")
        from .spark.sources import open_input
    else:
        from .io.endpoints import open_input
    if stdin_format is not None and "-" not in inputs:
        raise ValueError("--format is the format of --input - (standard input)")

    opts = dict(source_options)
    if opts.pop("follow", False):
        from .io.follow import follow as open_input  # a growing file or directory
    else:
        opts.pop("until", None)

    def source(p: str) -> Any:
        return open_input(p, format=stdin_format, **opts) if p == "-" else \
            open_input(p, **opts)

    flow = sf.Flow(name)
    q.build([flow.source(source(p)) for p in inputs], **typed).sink(output)
    return flow


def add_event_time_flags(parser: argparse.ArgumentParser) -> None:
    """``--max-delay`` and ``--late``: how the inputs of a built-in query treat disorder
    (docs/event-time.md)."""
    group = parser.add_argument_group(
        "event time", "disordered input (local engines; docs/event-time.md)")
    group.add_argument("--max-delay", metavar="DURATION",
                       help="bounded out-of-orderness of every input: tuples up to DURATION "
                            "behind the latest timestamp are reordered (e.g. 5s, 250ms)")
    group.add_argument("--late", choices=("error", "drop"),
                       help="a tuple behind the watermark: error (default) or drop (counted "
                            "and reported)")
    group.add_argument("--follow", action="store_true",
                       help="follow each --input as it grows: a JSON Lines file or a directory "
                            "of them in name order (docs/inputs-live.md)")
    group.add_argument("--until", default=None, metavar="marker|idle:SECONDS|never",
                       help="with --follow (and for the spark engine's directory inputs), "
                            "when the input ends: at an __end__ marker line (default), after "
                            "SECONDS without new data, or never (Ctrl-C)")


def event_time_options(args: argparse.Namespace) -> dict[str, Any]:
    """The source options ``--max-delay`` and ``--late`` give (none when not given)."""
    out: dict[str, Any] = {}
    spark = getattr(args, "engine", None) == "spark"
    if getattr(args, "until", None) is not None and not getattr(args, "follow", False):
        if spark:  # the spark engine's directory streams: its `until` option (cli.cmd_run)
            return {}
        raise ValueError("--until applies with --follow (or to the spark engine's directory "
                         "inputs)")
    if getattr(args, "follow", False):
        out["follow"] = True
        until = args.until or "marker"
        out["until"] = None if until == "never" else until
    if getattr(args, "max_delay", None) is not None:
        out["max_delay"] = args.max_delay
    if getattr(args, "late", None) is not None:
        out["late"] = args.late
    return out


def print_reconfigurations(result: Any) -> None:
    """Each reconfiguration of the run, one line (RunResult.summary() counts them)."""
    for r in result.extra.get("reconfigurations", []):
        at = f" (at ts {r['trigger_ts']})" if r.get("trigger_ts") is not None else ""
        if r["applied"]:
            err.print(f"reconfiguration {r['operator']} epoch {r['epoch']}: "
                      f"{r['parallelism_before']} -> {r['parallelism_after']} in "
                      f"{r['duration_ms']:.2f} ms{at}", markup=False, highlight=False)
        else:
            err.print(f"reconfiguration {r['operator']} epoch {r['epoch']} to "
                      f"{r['parallelism_after']}: not applied ({r.get('note', '')})",
                      markup=False, highlight=False)


def print_deadline(result: Any) -> None:
    """``deadline 50 ms: 12 of 3,400 intervals violated (0.35%), worst 81.2 ms``: the slack
    engine's count of measuring intervals whose end-to-end latency reached the deadline
    (``extra["violations"]`` of ``extra["intervals"]``; worst: ``e2e_latency_ms["max"]``).
    Nothing for a run without a deadline."""
    deadline = result.extra.get("deadline_ms")
    if deadline is None or "violations" not in result.extra:
        return
    n, total = result.extra["violations"], result.extra.get("intervals", 0)
    worst = (result.extra.get("e2e_latency_ms") or {}).get("max")
    head = f"deadline {deadline:g} ms: "
    if not total:
        line = head + "no interval measured (the run ended before the first)"
    elif n:
        line = head + f"{n:,} of {total:,} intervals violated ({100 * n / total:.2f}%)"
        if worst is not None:
            line += f", worst {worst:.1f} ms"
    else:
        line = head + f"none of {total:,} intervals violated"
        if worst is not None:
            line += f" (worst {worst:.1f} ms)"
    err.print(line, markup=False, highlight=False)


#: seconds between two progress log lines off a terminal (``--progress-every``)
PROGRESS_EVERY = 5.0


def _run_with_progress(flow: Any, engine: str, opts: dict[str, Any], quiet: bool,
                       every: float = PROGRESS_EVERY) -> Any:
    """Runs ``flow``, showing its progress (:mod:`stretchflow.runtime.progress`): on a
    terminal a rich bar, refreshed twice a second; off one a log line every ``every``
    seconds (none for a shorter run; none with ``every`` 0). ``quiet``: neither."""
    from .engines import LOCAL_ENGINES

    # a Spark run reads in the JVM: this process sees no counter to show (Spark's own UI
    # does); a terminal still gets the bar's elapsed time
    local = engine in LOCAL_ENGINES
    if quiet or (not err.is_terminal and not (every > 0 and local)):
        return flow.run(engine=engine, **opts)
    from .runtime.progress import RunProgress

    model = RunProgress(flow)
    done = threading.Event()
    if err.is_terminal:
        view = _Bar(model, "starting" if local else f"running on {engine}")
        period = 0.5
    else:
        view = _LogLines(model)
        period = every

    def poll() -> None:
        while not done.wait(period):
            if local:
                view.update()

    with view, model.watching():
        t = threading.Thread(target=poll, name="progress", daemon=True)
        t.start()
        try:
            return flow.run(engine=engine, **opts)
        finally:
            done.set()
            t.join()


class _LogLines:
    """Off a terminal: each update is one INFO record ``progress: ...`` (the CLI's handler
    writes it on stderr; ``--log-level warning`` hides it)."""

    def __init__(self, model: Any):
        import logging

        self.model = model
        self.log = logging.getLogger("stretchflow.progress")

    def __enter__(self) -> _LogLines:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self) -> None:
        from .runtime.progress import format_line

        self.log.info(format_line(self.model.sample()))


class _Bar:
    """On a terminal: a rich Progress line — flow name, tuples read, rate, a bar with the
    percent of input and ETA when the input's size is known (a pulsing bar otherwise),
    current parallelism, elapsed time."""

    def __init__(self, model: Any, status: str):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.model = model
        self.progress = Progress(
            # markup off: a flow's name or an operator's may hold [brackets]
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(bar_width=20), TimeElapsedColumn(),  # before the status, which may be cut
            TextColumn("{task.fields[status]}", markup=False),
            console=err.console(), transient=True)
        self.task = self.progress.add_task(model.name, total=1000 if model.known else None,
                                           status=status)

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self) -> None:
        from .runtime.progress import format_eta, format_parallelism

        s = self.model.sample()
        parts = [f"{s.tuples:,} tuples"]
        if s.fraction is not None:
            parts.append(f"{100 * s.fraction:.1f}%")
        if s.rate is not None:
            parts.append(f"{s.rate:,.0f} t/s")
        if s.eta is not None:
            parts.append(f"ETA {format_eta(s.eta)}")
        if s.parallelism:
            parts.append(f"parallelism {format_parallelism(s.parallelism)}")
        self.progress.update(self.task, status=", ".join(parts),
                             completed=None if s.fraction is None else 1000 * s.fraction)


def add_web_flags(parser: argparse.ArgumentParser) -> None:
    """``--ui [PORT]``, ``--ui-wait``/``--no-ui-wait`` and ``--report FILE``: the run options
    every local engine takes (:data:`stretchflow.engines.RUN_OPTIONS`; docs/live-view.md)."""
    group = parser.add_argument_group(
        "live view", "watch the run in a browser (local engines; docs/live-view.md)")
    group.add_argument("--ui", nargs="?", const=0, type=_port, metavar="PORT",
                       help="serve a live web view and Prometheus /metrics on 127.0.0.1:PORT "
                            "(no PORT: a free one, printed)")
    group.add_argument("--ui-wait", action=argparse.BooleanOptionalAction, default=None,
                       help="after the run, keep serving its final state until Ctrl-C "
                            "(default: when stdin is a terminal)")
    group.add_argument("--report", metavar="FILE",
                       help="write a self-contained HTML report of the run to FILE")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ui expects a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--ui expects a port 0-65535, got {port}")
    return port


def web_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options of ``--ui``, ``--ui-wait`` and ``--report`` (none when not given)."""
    out: dict[str, Any] = {}
    if args.ui is not None:
        out["ui"] = args.ui
        wait = args.ui_wait
        out["ui_wait"] = sys.stdin.isatty() if wait is None else wait
    elif args.ui_wait:
        raise FlowDefinitionError("--ui-wait applies with --ui only")
    if args.report:
        out["report"] = args.report
    return out
