"""The ``stretchflow`` command: run, generate, bench, demo, queries, cat.

``stretchflow run QUERY --input PATH [--input PATH] --output PATH [--engine E]
[--param NAME=VALUE ...] [engine options]`` runs a built-in query (DESIGN.md, Built-in
queries; the registry :data:`stretchflow.queries.QUERIES`); ``stretchflow run app.py`` runs a
user's flow file. The engine options, their flags, help and validation come from the engine
specs (:mod:`stretchflow.engines`): nothing here knows which engine takes what.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .cli_run import (
    PROGRESS_EVERY,
    _file_state,
    _output_files,
    _run_with_progress,
    _stop_detail,
    add_event_time_flags,
    add_web_flags,
    err,
    event_time_options,
    load_app,
    print_deadline,
    print_reconfigurations,
    query_flow,
    web_options,
)
from .engines import (
    ENGINES,
    EngineSpec,
    Option,
    api_only_message,
    get_spec,
    options_by_name,
    unknown_option_message,
)
from .errors import FlowDefinitionError, StretchflowError
from .logs import LEVELS, cli_logging
from .runtime.signals import Interrupted, interrupt_on_signals

__all__ = ["BENCH_SUITES", "build_parser", "load_app", "main", "query_flow"]


def parse_params(pairs: list[str] | None) -> dict[str, str]:
    """``NAME=VALUE`` strings to a dict; a malformed one is an error naming it."""
    out: dict[str, str] = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name:
            raise ValueError(f"--param expects NAME=VALUE, got {p!r}")
        out[name.strip()] = value.strip()
    return out


def _flag_help(decls: list[tuple[EngineSpec, Option]]) -> str:
    """What a flag means, which engines take it and their defaults, e.g. ``scheduling
    heuristic (ordered; default qst)``; an engine that takes the option only from Python is
    named too."""
    cli = [(s, o) for s, o in decls if o.parse is not None]
    api = [s.name for s, o in decls if o.parse is None]
    defaults = {s.name: o.default for s, o in cli if o.default}
    where = ", ".join(s.name for s, _ in cli)
    if len(set(defaults.values())) == 1 and len(defaults) == len(cli):
        where += f"; default {next(iter(defaults.values()))}"
    elif defaults:
        where += "; default " + ", ".join(f"{e} {d}" for e, d in defaults.items())
    if api:
        where += f"; API only on {', '.join(api)}"
    return f"{cli[0][1].help} ({where})".replace("%", "%%")  # argparse formats help with %


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per option name that some engine takes from the command line (its spec has
    a ``parse``); values stay strings here and are parsed once the engine is known, so a
    flag the chosen engine does not take is reported as such, not as a bad value."""
    group = parser.add_argument_group(
        "engine options", "declared in stretchflow.engines; an option the chosen --engine "
        "does not take is an error naming the engines that do (docs/cli.md has the table)")
    for name, decls in options_by_name().items():
        cli = [o for _, o in decls if o.parse is not None]
        if not cli:
            continue
        choices = cli[0].choices if all(o.choices == cli[0].choices for o in cli) else None
        bare = {"nargs": "?", "const": cli[0].const} if cli[0].const is not None else {}
        group.add_argument(cli[0].flag, dest=name, metavar=cli[0].metavar, choices=choices,
                           action="append" if cli[0].repeat else "store",
                           help=_flag_help(decls), **bare)


def _parse(opt: Option, raw: str) -> Any:
    assert opt.parse is not None
    try:
        return opt.parse(raw)
    except ValueError as e:
        if opt.parse in (int, float):
            kind = "an integer" if opt.parse is int else "a number"
            raise ValueError(f"{opt.flag} expects {kind}, got {raw!r}") from None
        msg = str(e)  # parse_schedule's message names the option already
        raise ValueError(msg if opt.name in msg else f"{opt.flag} {raw}: {msg}") from None


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options set on the command line, parsed and checked against the chosen engine's
    spec (one line naming the flag, the engine, the engines that take it and what this one
    accepts, when it does not take a flag)."""
    spec = get_spec(args.engine)
    given: dict[str, Any] = {}
    for name in options_by_name():
        raw = getattr(args, name, None)
        if raw is None:
            continue
        opt = spec.option(name)
        if opt is None:
            raise FlowDefinitionError(unknown_option_message(spec, name, cli=True))
        if opt.parse is None:
            raise FlowDefinitionError(api_only_message(spec, name))
        value = [_parse(opt, r) for r in raw] if opt.repeat else _parse(opt, raw)
        try:
            given.update(spec.check({name: value}))
        except FlowDefinitionError as e:
            raise FlowDefinitionError(f"{opt.flag}: {e}") from None
    return given


def cmd_run(args: argparse.Namespace) -> int:
    """Runs a query or a flow file; SIGINT and SIGTERM stop it (:class:`Interrupted`, whose
    ``detail`` says what the run read and what became of its outputs)."""
    outputs: dict[str, tuple | None] = {}
    flow: Any = None
    finished = False
    with interrupt_on_signals() as watch:
        try:
            opts = engine_options(args)  # before anything is opened: a bad flag costs nothing
            if args.engine == "spark" and args.until is not None and not args.follow:
                opts["until"] = args.until  # directory streams (engines.py, spark's `until`)
            params = parse_params(args.param)
            target = args.query
            if target.endswith(".py") or Path(target).is_file():
                if args.input or args.output or event_time_options(args):
                    raise ValueError("a flow file defines its own sources and sinks; "
                                     "drop --input/--output/--max-delay/--late")
                flow = load_app(Path(target), params)
            else:
                flow = query_flow(target, args.input or [], args.output, params, args.engine,
                                  source_options=event_time_options(args),
                                  stdin_format=args.format)
            outputs = {name: _file_state(name) for name in _output_files(flow)}
            opts.update(web_options(args))
            result = _run_with_progress(flow, args.engine, opts, quiet=args.quiet,
                                        every=args.progress_every)
            finished = True
            if not args.quiet:
                err.print(f"{flow.name} on {result.summary()}", markup=False, highlight=False)
                print_reconfigurations(result)
                print_deadline(result)
            return 0
        except BaseException as e:
            if watch.received is None:
                raise
            # the signal, whatever a thread of the run reported after it (its queue aborted)
            stop = e if isinstance(e, Interrupted) else Interrupted(watch.received)
            stop.detail = _stop_detail(flow, outputs, finished)
            if stop is e:
                raise
            raise stop from e


def cmd_generate(args: argparse.Namespace) -> int:
    from .io.generators import generate

    params: dict[str, Any] = {}
    for k, v in parse_params(args.param).items():
        params[k] = _number(v)
    if args.rate is not None:
        params["rate"] = args.rate
    if args.engine == "spark":
        from .spark.sources import generate_with_spark

        paths = generate_with_spark(args.kind, rows=args.rows, seed=args.seed, out=args.out,
                                    master=args.master, **params)
        if not args.quiet:
            for p in paths:
                err.print(f"wrote {p}")
        return 0
    if args.master is not None:
        raise ValueError("--master applies to generate --engine spark only")
    if args.kind in ("store-sales", "web-clickstreams"):
        import pyarrow as pa

        from .io.generators import write_table
        from .workloads import tpcxbb

        make = tpcxbb.store_sales if args.kind == "store-sales" else tpcxbb.web_clickstreams
        write_table(pa.Table.from_pylist(make(args.rows, seed=args.seed, **params)), args.out)
        if not args.quiet:
            err.print(f"wrote {args.out}")
        return 0
    paths = generate(args.kind, rows=args.rows, seed=args.seed, out=args.out, **params)
    if not args.quiet:
        for p in paths:
            err.print(f"wrote {p}")
    return 0


def _number(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


#: ``stretchflow bench <suite>``: one suite per engine, named as the engine, running its
#: ``<engine>-*`` experiments (one name per concept, issue #15); the reference engine's
#: benchmark has its own command with its own options.
BENCH_SUITES = tuple(name for name in ENGINES if name != "reference")


def _bench_package() -> Any:
    """The benchmarks: ``stretchflow_bench``, a dev-only package at the top of a clone
    (``benchmarks/``), not part of the installed stretchflow. Absent, one error saying how to
    get it (the CLI prints it as one line, exit code 2)."""
    import importlib

    try:
        return importlib.import_module("stretchflow_bench")
    except ModuleNotFoundError as e:
        if e.name != "stretchflow_bench":
            raise  # the package is there but broken: its own error shows
        raise StretchflowError(
            "stretchflow bench: the benchmarks are a dev-only package (stretchflow-bench), not "
            "installed: from a clone of the repository run 'pip install -e benchmarks' (or "
            "'make venv')") from None


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    bench = _bench_package()
    BENCHMARKS, CROSS_ENGINE = bench.BENCHMARKS, bench.CROSS_ENGINE
    target = args.target
    if target == "list":
        for name, (what, paper, _) in BENCHMARKS.items():
            print(f"{name:22} {paper:12} {what}")
        return 0
    if target == "run":
        if not args.name or args.name not in BENCHMARKS:
            raise ValueError(f"bench run needs one of: {', '.join(BENCHMARKS)}")
        names = [args.name]
    elif target == "all":
        names = list(BENCHMARKS)
    elif target in BENCH_SUITES:
        names = [n for n in BENCHMARKS if n.startswith(f"{target}-")]
    elif target in CROSS_ENGINE:
        names = [target]
    elif target == "report":
        return _bench_report(args)
    elif target == "reference":
        from stretchflow_bench import reference

        with err.status("benchmark") as status:
            path = reference.run(query=args.query, rows=args.rows, seed=args.seed,
                                 repeats=args.repeats, out_dir=args.out,
                                 progress=lambda msg: status.update(msg))
        m = json.loads(path.read_text())["metrics"]
        err.print(
            f"reference {m['reference']['tuples_per_s']['median']:,.0f} tuples/s, "
            f"1T {m['1T']['tuples_per_s']['median']:,.0f} tuples/s, "
            f"ratio {m['ratio_reference_over_1T']['median']:.2f} (median of {args.repeats})"
        )
        print(path)
        return 0
    else:
        raise ValueError(f"unknown bench command {target!r}: use list, run NAME, all, "
                         f"reference, {', '.join(CROSS_ENGINE)}, report, or a suite: "
                         f"{', '.join(BENCH_SUITES)}")
    import time

    took = []
    with err.status("benchmark") as status:
        for k, name in enumerate(names, 1):
            status.update(f"{name} ({k}/{len(names)}){' --quick' if args.quick else ''}")
            t0 = time.perf_counter()
            print(BENCHMARKS[name][2](args.quick, args.out), flush=True)
            took.append((name, time.perf_counter() - t0))
    if len(took) > 1:
        err.print("took: " + ", ".join(f"{n} {s:.0f} s" for n, s in took)
                  + f"; total {sum(s for _, s in took):.0f} s")
    return 0


def _bench_report(args: argparse.Namespace) -> int:
    """``stretchflow bench report [--check] [--results DIR] [--doc FILE]``: renders the report
    blocks of docs/RESULTS.md from the JSON results; with ``--check`` writes nothing and exits
    2 with one line per block that is out of date."""
    from stretchflow_bench import report

    doc = Path(args.doc) if args.doc else report.DOC
    results = Path(args.results) if args.results else report.RESULTS
    if not doc.is_file():
        raise ValueError(f"bench report: no document {doc}")
    if not results.is_dir():
        raise ValueError(f"bench report: no results directory {results}")
    if args.check:
        stale = report.check(doc, results)
        for line in stale:
            print(line, file=sys.stderr)
        return 2 if stale else 0
    changed = report.update(doc, results)
    err.print(f"{doc}: {len(changed)} block(s) rewritten" + (f": {', '.join(changed)}"
                                                                if changed else ""))
    return 0


def cmd_spark(args: argparse.Namespace) -> int:
    """``stretchflow spark rescale CHECKPOINT N``: a stopped streaming query's state to N
    partitions (it restarts from there with ``run ... --checkpoint CHECKPOINT``)."""
    from .executors.spark import parse_conf
    from .spark.rescale import rescale, state_partitions
    from .spark.session import get_session

    if args.action != "rescale":
        raise ValueError(f"unknown spark command {args.action!r}: use rescale")
    before = state_partitions(args.checkpoint)
    spark = get_session(args.master, parse_conf(args.spark_conf))
    rescale(spark, args.checkpoint, args.partitions)
    err.print(f"{args.checkpoint}: state partitions {before} -> {args.partitions}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(rows=args.rows, seed=args.seed, out_dir=args.out)
    return 0


def cmd_cat(args: argparse.Namespace) -> int:
    """``stretchflow cat DIR [DIR ...]``: :func:`stretchflow.io.parts.cat_lines` on standard
    output. A bad path ends it with one error line and exit status 2 (:func:`_main`)."""
    import os

    from .io.parts import cat_lines

    out = sys.stdout.buffer
    try:
        for line in cat_lines(args.paths):
            out.write(line)
        out.flush()
    except BrokenPipeError:  # `stretchflow cat DIR | head`: the reader has what it wanted
        # stdout is gone: point it at /dev/null so the flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def cmd_queries(args: argparse.Namespace) -> int:
    from .queries import QUERIES

    for q in QUERIES.values():
        data = f"; generate: {q.data}" if q.data else ""
        print(f"{q.name:18} {q.summary}\n{'':18} in: {', '.join(q.input_fields)}; "
              f"out: {', '.join(q.output_fields)}{data}\n{'':18} params: "
              f"{q.describe_params()}")
    return 0


def _queries_epilog() -> str:
    from .queries import QUERIES

    return "built-in queries (stretchflow queries: inputs, outputs, parameters):\n" + "\n".join(
        f"  {q.name:18} {q.summary}" for q in QUERIES.values())


#: the run parser's epilog until help is printed: listing the queries' summaries imports every
#: query module (TPCx-BB's pulls in numpy), which a run that prints no help must not pay for
_EPILOG = "<built-in queries>"


class _RunHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Writes :func:`_queries_epilog` where the run parser's epilog is the placeholder: the
    text is made only when argparse formats help (``--help``, a usage error's usage is not
    help and shows no epilog)."""

    def add_text(self, text: str | None) -> None:
        super().add_text(_queries_epilog() if text is _EPILOG else text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stretchflow",
        description="Parallel, elastic, deterministic stream processing of windowed queries.",
    )
    p.add_argument("--version", action="version", version=f"stretchflow {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a built-in query or a flow file (app.py)",
                       epilog=_EPILOG, formatter_class=_RunHelpFormatter)
    r.add_argument("query", help="a built-in query (listed below) or path/to/app.py")
    r.add_argument("--input", action="append",
                   help="input file (JSONL, CSV, Parquet; .gz/.zst compressed), - for stdin, "
                        "an s3:// URL, a Spark output directory or redis://HOST:PORT/DB?stream="
                        "KEY (docs/inputs.md, docs/connectors.md); repeat for several inputs; "
                        "with --engine spark also a directory (a stream) or "
                        "rate:ROWS_PER_S[:ROWS] (Spark's rate source, tweet payloads)")
    r.add_argument("--format", choices=("jsonl", "csv", "jsonl.gz", "csv.gz", "jsonl.zst",
                                        "csv.zst"),
                   help="the format of --input - (standard input; default jsonl)")
    r.add_argument("--output", help="output file (.jsonl, .csv, .parquet), - for stdout, an "
                                    "s3:// URL or redis://HOST:PORT/DB?stream=KEY")
    r.add_argument("--engine", default="reference", choices=ENGINES,
                   help="the executor (default reference): " + "; ".join(
                       f"{e.name}: {e.summary}" for e in ENGINES.values()).replace("%", "%%"))
    r.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a query parameter (stretchflow queries lists them), or a string "
                        "build_flow(params) of a flow file receives")
    add_event_time_flags(r)
    add_engine_flags(r)
    add_web_flags(r)
    r.add_argument("-q", "--quiet", action="store_true",
                   help="no progress, no summary (errors, and the live view's URL with --ui, "
                        "still show)")
    r.add_argument("--progress-every", type=_seconds, default=PROGRESS_EVERY,
                   metavar="SECONDS",
                   help="off a terminal, a progress log line every SECONDS (default "
                        f"{PROGRESS_EVERY:g}; 0: none); on a terminal a progress bar shows")
    r.add_argument("--log-level", choices=LEVELS, default="info",
                   help="the library's log records shown on stderr (default info; debug "
                        "also shows sinks, sources, controller decisions and stops)")
    r.set_defaults(fn=cmd_run)

    g = sub.add_parser("generate",
                       help="generate a data set (tweets, bandjoin, trades, nexmark, ...)")
    g.add_argument("kind", choices=("tweets", "bandjoin", "trades", "nexmark", "store-sales",
                                    "web-clickstreams"))
    g.add_argument("--rows", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True, help="output path; extension picks the format")
    g.add_argument("--rate", type=float, help="tuples per second of event time")
    g.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="generator parameter (see docs/cli.md)")
    g.add_argument("--engine", default="local", choices=("local", "spark"),
                   help="spark: write Parquet through Spark (a directory of part files)")
    g.add_argument("--master", help="with --engine spark: the Spark master URL")
    g.add_argument("-q", "--quiet", action="store_true")
    g.set_defaults(fn=cmd_generate)

    b = sub.add_parser("bench", help="run a benchmark; writes JSON to benchmarks/results/ "
                                     "(bench report: docs/RESULTS.md's numbers from it)")
    b.add_argument("target", help="list | run NAME | all | reference | speed | peers | report | "
                                  f"{' | '.join(BENCH_SUITES)} (a suite)")
    b.add_argument("name", nargs="?", help="with run: the benchmark (see bench list)")
    b.add_argument("--quick", action="store_true", help="small inputs (a smoke test)")
    b.add_argument("--query", default="wordcount")
    b.add_argument("--rows", type=int, default=200_000)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
    b.add_argument("--check", action="store_true",
                   help="with report: write nothing; exit 2 naming every block of the document "
                        "that is out of date with the JSON")
    b.add_argument("--results", default=None, metavar="DIR",
                   help="with report: the JSON results (default benchmarks/results)")
    b.add_argument("--doc", default=None, metavar="FILE",
                   help="with report: the document to render (default docs/RESULTS.md)")
    b.set_defaults(fn=cmd_bench)

    d = sub.add_parser("demo", help="generate tweets and run two queries")
    d.add_argument("--rows", type=int, default=100_000)
    d.add_argument("--seed", type=int, default=7)
    d.add_argument("--out", default="out/demo")
    d.set_defaults(fn=cmd_demo)

    k = sub.add_parser("spark", help="spark engine tools: rescale a streaming checkpoint")
    k.add_argument("action", choices=("rescale",))
    k.add_argument("checkpoint", help="checkpoint directory of a stopped streaming query")
    k.add_argument("partitions", type=int, help="new number of state partitions")
    k.add_argument("--master")
    k.add_argument("--spark-conf", action="append", metavar="KEY=VALUE")
    k.set_defaults(fn=cmd_spark)

    c = sub.add_parser("cat", help="print a streaming output directory (part files) as one "
                       "JSON Lines stream, parts in order")
    c.add_argument("paths", nargs="+", metavar="DIR",
                   help="a part directory (or a .jsonl/.csv/.parquet file)")
    c.set_defaults(fn=cmd_cat)
    q = sub.add_parser("queries", help="list the built-in queries")
    q.set_defaults(fn=cmd_queries)
    return p


def _error_line(msg: str, plain: bool = False) -> None:
    """One line on stderr: ``error: msg`` (or ``msg`` as is); the message is escaped, as a
    ``[...]`` in it (a list, a key) is text, not console markup."""
    from rich.markup import escape

    err.print(msg if plain else f"[bold red]error:[/] {escape(msg)}", markup=not plain,
              highlight=False, soft_wrap=True)


def _error_message(e: Exception) -> str | None:
    """The one line an error of a command prints, or None for an unexpected one. A Spark
    failure (its JVM out of memory or dead, a Py4J error) is said as such with its log file —
    not as the ``Connection refused`` a dead JVM leaves — whichever command ran Spark."""
    if "stretchflow.spark.errors" in sys.modules:  # imported when a Spark session starts
        from .spark.errors import explain

        failure = explain(e)
        if failure is not None:
            return str(failure)
    if isinstance(e, (StretchflowError, ValueError, OSError)):
        return str(e)
    return None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expects a number of seconds >= 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with cli_logging(getattr(args, "log_level", "info")):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    try:
        return args.fn(args)
    except Exception as e:
        msg = _error_message(e)
        if msg is None:
            raise  # a bug: its traceback shows
        _error_line(msg)
        return 2
    except Interrupted as e:
        _error_line(f"{e} {e.detail}".rstrip() if e.detail else str(e), plain=True)
        return e.exit_code
    except KeyboardInterrupt:  # a SIGINT outside a run (or a run not in the main thread)
        _error_line("stopped by SIGINT", plain=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
