"""The ``stretchflow`` command: run, generate, bench, demo, queries.

``stretchflow run QUERY --input PATH [--input PATH] --output PATH [--engine E]
[--parallelism N] [--max-parallelism N] [--param NAME=VALUE ...] [--reconfigure SCHEDULE]
[--controller NAME]`` runs a built-in query (DESIGN.md, Built-in queries);
``stretchflow run app.py`` runs a user's flow file.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from . import __version__
from .errors import StretchflowError
from .executors import ENGINES

err = Console(stderr=True)


def parse_params(pairs: list[str] | None) -> dict[str, str]:
    """``NAME=VALUE`` strings to a dict; a malformed one is an error naming it."""
    out: dict[str, str] = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name:
            raise ValueError(f"--param expects NAME=VALUE, got {p!r}")
        out[name.strip()] = value.strip()
    return out


def parse_schedule(text: str | None) -> list[tuple[int, int]]:
    """``COUNT:P,COUNT:P``: after the COUNT-th input tuple, request parallelism P."""
    if not text:
        return []
    steps = []
    for part in text.split(","):
        count, sep, par = part.partition(":")
        try:
            if not sep:
                raise ValueError
            c, p = int(count), int(par)
        except ValueError:
            raise ValueError(f"--reconfigure expects COUNT:P[,COUNT:P...], got {part!r}") from None
        if c < 0 or p < 1:
            raise ValueError(f"--reconfigure: COUNT must be >= 0 and P >= 1, got {part!r}")
        steps.append((c, p))
    return steps


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options the chosen engine receives; the reference engine is sequential."""
    opts: dict[str, Any] = {}
    spark_flags = (("--master", args.master), ("--spark-conf", args.spark_conf),
                   ("--key-groups", args.key_groups), ("--checkpoint", args.checkpoint))
    if args.engine != "ordered":
        for flag, value in (("--reorder", args.reorder), ("--queue", args.queue)):
            if value is not None:
                raise ValueError(f"{flag} applies to the ordered engine only")
    if args.engine != "slack":
        for flag, value in (("--deadline", args.deadline), ("--slt", args.slt)):
            if value is not None:
                raise ValueError(f"{flag} applies to the slack engine only")
    if args.engine not in ("vsn", "slack") and args.capacity is not None:
        raise ValueError("--capacity applies to the vsn and slack engines only")
    if args.engine in ("vsn", "slack") and args.capacity is not None:
        if args.capacity < 1:
            raise ValueError(f"--capacity must be at least 1, got {args.capacity}")
        opts["capacity"] = args.capacity
    if args.engine != "spark":
        for flag, value in spark_flags:
            if value is not None:
                raise ValueError(f"{flag} applies to the spark engine only")
    else:
        for flag, value in (("--max-parallelism", args.max_parallelism),
                            ("--reconfigure", args.reconfigure),
                            ("--controller", args.controller), ("--scheduler", args.scheduler),
                            ("--channels", args.channels)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to the spark engine "
                                 f"(rescale a streaming query with `stretchflow spark rescale`)")
        if args.master is not None:
            opts["master"] = args.master
        if args.spark_conf:
            from .executors.spark import parse_conf

            opts["conf"] = parse_conf(args.spark_conf)
        if args.key_groups is not None:
            opts["key_groups"] = args.key_groups
        if args.parallelism is not None:
            opts["partitions"] = args.parallelism
        if args.checkpoint is not None:
            opts["checkpoint"] = args.checkpoint
        return opts
    if args.engine == "reference":
        for flag, value, default in (("--parallelism", args.parallelism, None),
                                     ("--max-parallelism", args.max_parallelism, None),
                                     ("--reconfigure", args.reconfigure, None),
                                     ("--controller", args.controller, None),
                                     ("--scheduler", args.scheduler, None),
                                     ("--channels", args.channels, None)):
            if value != default and not (flag == "--parallelism" and value == 1):
                raise ValueError(f"{flag} does not apply to the sequential reference engine")
        return opts
    if args.engine == "ordered":
        for flag, value in (("--max-parallelism", args.max_parallelism),
                            ("--reconfigure", args.reconfigure),
                            ("--controller", args.controller)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to the ordered engine")
        if args.parallelism is not None:
            opts["workers"] = args.parallelism
        opts["scheduler"] = args.scheduler or "qst"
        if args.reorder is not None:
            opts["reorder"] = args.reorder
        if args.queue is not None:
            opts["queue"] = args.queue
        return opts
    if args.engine == "slack":
        for flag, value in (("--max-parallelism", args.max_parallelism),
                            ("--reconfigure", args.reconfigure),
                            ("--controller", args.controller), ("--channels", args.channels),
                            ("--scheduler", args.scheduler)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to the slack engine")
        if args.parallelism is not None:
            opts["readers"] = args.parallelism
        if args.deadline is not None:
            opts["deadline_ms"] = args.deadline
        if args.slt is not None:
            opts["slt"] = args.slt
        return opts
    if args.scheduler is not None:
        raise ValueError("--scheduler applies to the ordered engine only")
    if args.channels is not None:
        if args.engine != "sn":
            raise ValueError("--channels applies to the sn engine only")
        opts["channels"] = args.channels
    if args.parallelism is not None:
        opts["parallelism"] = args.parallelism
    if args.max_parallelism is not None:
        opts["max_parallelism"] = args.max_parallelism
    if args.reconfigure:
        opts["reconfigure"] = parse_schedule(args.reconfigure)
    if args.controller:
        opts["controller"] = args.controller
    return opts


def load_app(path: Path, params: dict[str, str]) -> Any:
    """A user's flow file defines ``flow`` (a Flow) or ``build_flow(params) -> Flow``."""
    from .flow import Flow

    ns = runpy.run_path(str(path), run_name="__stretchflow_app__")
    if "build_flow" in ns:
        flow = ns["build_flow"](params)
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


def cmd_run(args: argparse.Namespace) -> int:
    import stretchflow as sf

    from .queries import QUERIES, build_query

    opts = engine_options(args)
    params = parse_params(args.param)
    target = args.query
    if target.endswith(".py") or Path(target).is_file():
        if args.input or args.output:
            raise ValueError("a flow file defines its own sources and sinks; "
                             "drop --input/--output")
        flow = load_app(Path(target), params)
    elif target.startswith("tpcxbb-"):
        flow = _tpcxbb_flow(target, args, params)
    else:
        q = QUERIES.get(target)
        if q is None:
            raise ValueError(f"unknown query {target!r}; queries: {', '.join(QUERIES)}, "
                             f"tpcxbb-q1..q4, tpcxbb-q15 (or a path to a flow file ending "
                             f"in .py)")
        if not args.input:
            raise ValueError(f"query {target!r} needs --input")
        if not args.output:
            raise ValueError(f"query {target!r} needs --output (a path, or - for stdout)")
        typed = q.parse_params(params)
        flow = sf.Flow(target)
        if args.engine == "spark":
            from .spark.sources import open_input

            streams = [flow.source(open_input(p)) for p in args.input]
        else:
            streams = [flow.source(sf.io.open_source(p)) for p in args.input]
        build_query(target, streams, **typed).sink(args.output)
    result = _run_with_progress(flow, args.engine, opts, quiet=args.quiet)
    if not args.quiet:
        err.print(
            f"[bold]{flow.name}[/] on {args.engine}: {result.total_in:,} tuples in, "
            f"{sum(result.tuples_out.values()):,} out, {result.elapsed:.2f} s, "
            f"{result.throughput:,.0f} tuples/s"
        )
        print_metrics(result)
    return 0


def _tpcxbb_flow(target: str, args: argparse.Namespace, params: dict[str, str]) -> Any:
    """A TPCx-BB streaming query of the ordered-multicore paper (docs/ordered.md) over one
    generated input (``stretchflow generate store-sales|web-clickstreams``)."""
    import stretchflow as sf

    from .workloads import tpcxbb

    q = tpcxbb.QUERIES.get(target)
    if q is None:
        raise ValueError(f"unknown query {target!r}; TPCx-BB queries: "
                         f"{', '.join(tpcxbb.QUERIES)}")
    if not args.input or len(args.input) != 1 or not args.output:
        raise ValueError(f"query {target!r} reads one --input and needs --output")
    kw: dict[str, Any] = {}
    for k, v in params.items():
        try:
            kw[k] = tuple(int(x) for x in v.split(",")) if "," in v else int(v)
        except ValueError:
            raise ValueError(f"query {target!r}: --param {k} expects an integer or a "
                             f"comma-separated list of integers, got {v!r}") from None
    flow = sf.Flow(target)
    q.build(flow.source(sf.io.open_source(args.input[0])), **kw).sink(args.output)
    return flow


def print_metrics(result: Any) -> None:
    """Latency and reconfigurations of a parallel run (stderr)."""
    extra = result.extra
    lat = extra.get("latency_ms")
    if lat and lat.get("samples"):
        err.print(f"latency: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms "
                  f"({lat['samples']:,} samples)")
    if "parallelism" in extra:
        err.print("final parallelism: " + ", ".join(f"{k} {v}" for k, v in
                                                     extra["parallelism"].items()))
    for r in extra.get("reconfigurations", []):
        if r["applied"]:
            err.print(f"reconfiguration {r['operator']} epoch {r['epoch']}: "
                      f"{r['parallelism_before']} -> {r['parallelism_after']} in "
                      f"{r['duration_ms']:.2f} ms (at ts {r['trigger_ts']})")
        else:
            err.print(f"reconfiguration {r['operator']} epoch {r['epoch']} to "
                      f"{r['parallelism_after']}: not applied ({r['note']})")


def _run_with_progress(flow: Any, engine: str, opts: dict[str, Any], quiet: bool) -> Any:
    if quiet or not err.is_terminal:
        return flow.run(engine=engine, **opts)
    sources = [n.spec for n in flow.nodes if n.kind == "source"]
    done = threading.Event()
    with err.status("starting") as status:
        def poll() -> None:
            while not done.wait(0.5):
                status.update(f"{flow.name}: {sum(s.read for s in sources):,} tuples read")

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            return flow.run(engine=engine, **opts)
        finally:
            done.set()
            t.join()


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


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from .bench import BENCHMARKS

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
    elif target in ("vsn", "sn", "ordered", "ssg", "spark"):
        names = [n for n in BENCHMARKS if n.startswith(f"{target}-")]
    elif target == "reference":
        from .bench import reference

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
                         f"reference, or a suite: vsn, sn, ordered, ssg, spark")
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


def cmd_queries(args: argparse.Namespace) -> int:
    from .queries import QUERIES

    for q in QUERIES.values():
        params = " ".join(f"{k}={v}" for k, v in q.params.items()) or "-"
        print(f"{q.name:16} {q.summary}\n{'':16} in: {', '.join(q.input_fields)}; "
              f"out: {', '.join(q.output_fields)}; params: {params}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stretchflow",
        description="Parallel, elastic, deterministic stream processing of windowed queries.",
    )
    p.add_argument("--version", action="version", version=f"stretchflow {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a built-in query or a flow file (app.py)")
    r.add_argument("query", help="wordcount | paircount | longest-hashtag | scalejoin | "
                                 "forward | path/to/app.py")
    r.add_argument("--input", action="append", help="input file (JSONL, CSV, Parquet); "
                                                    "repeat for several inputs; with --engine "
                                                    "spark also a directory (a stream) or "
                                                    "rate:ROWS_PER_S[:ROWS] (Spark's rate "
                                                    "source, tweet payloads)")
    r.add_argument("--output", help="output file (.jsonl, .csv, .parquet) or - for stdout")
    r.add_argument("--engine", default="reference", choices=ENGINES)
    r.add_argument("--parallelism", type=int)
    r.add_argument("--max-parallelism", type=int)
    r.add_argument("--param", action="append", metavar="NAME=VALUE")
    r.add_argument("--reconfigure", metavar="SCHEDULE",
                   help="COUNT:P,...: after the COUNT-th input tuple request parallelism P")
    r.add_argument("--controller", help="elasticity controller (threshold, level)")
    r.add_argument("--channels", choices=("threads", "processes"),
                   help="sn engine: threads (default) or processes (multicore; state migrates "
                        "through SQLite)")
    r.add_argument("--scheduler", choices=("qst", "lp", "et", "ct"),
                   help="ordered engine: scheduling heuristic (default qst); --parallelism "
                        "sets its worker threads")
    r.add_argument("--master", help="spark engine: master URL (local[*], spark://host:7077, "
                                    "yarn, k8s://...)")
    r.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                   help="spark engine: a Spark setting (repeat)")
    r.add_argument("--key-groups", type=int, metavar="G",
                   help="spark engine: key groups (default 4 x partitions)")
    r.add_argument("--checkpoint", help="spark engine, directory inputs (streaming): the "
                                        "checkpoint directory (reuse it to resume)")
    r.add_argument("--reorder", choices=("nonblocking", "lock"),
                   help="ordered engine: the reorder buffer (default nonblocking)")
    r.add_argument("--queue", choices=("hybrid", "partitioned"),
                   help="ordered engine: the queue of stateful stages (default hybrid)")
    r.add_argument("--deadline", type=float, metavar="MS",
                   help="slack engine: the query's latency deadline in ms (reported)")
    r.add_argument("--slt", type=float, metavar="MS",
                   help="slack engine: the slack time of every SSG (default inf: exact)")
    r.add_argument("--capacity", type=int, metavar="N",
                   help="vsn and slack engines: tuples each ESG/SSG holds before its writers "
                        "block (flow control; default 4096 for vsn, 65536 for slack)")
    r.add_argument("-q", "--quiet", action="store_true")
    r.set_defaults(fn=cmd_run)

    g = sub.add_parser("generate", help="generate a data set (tweets, bandjoin, trades)")
    g.add_argument("kind", choices=("tweets", "bandjoin", "trades", "store-sales",
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

    b = sub.add_parser("bench", help="run a benchmark; writes JSON to benchmarks/results/")
    b.add_argument("target", help="list | run NAME | all | reference | vsn | sn | ordered | "
                                  "ssg | spark (a suite)")
    b.add_argument("name", nargs="?", help="with run: the benchmark (see bench list)")
    b.add_argument("--quick", action="store_true", help="small inputs (a smoke test)")
    b.add_argument("--query", default="wordcount")
    b.add_argument("--rows", type=int, default=200_000)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
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

    q = sub.add_parser("queries", help="list the built-in queries")
    q.set_defaults(fn=cmd_queries)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (StretchflowError, ValueError, OSError) as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
