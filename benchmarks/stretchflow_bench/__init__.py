"""Benchmarks: each writes JSON (machine, versions, parameters, min/median/max metrics) and a
PNG plot to ``benchmarks/results/``. ``BENCHMARKS`` is what ``stretchflow bench list`` shows.

A dev-only package (``benchmarks/`` of a clone: ``pip install -e benchmarks``), not part of the
installed stretchflow; ``stretchflow bench`` imports it when it is there. A benchmark registers
by an entry ``name -> (what it measures, the paper's experiment, run(quick, out_dir) -> JSON
path)``: in :data:`BENCHMARKS` below, or in a module's own ``BENCHMARKS`` with the module named
in :data:`SUITES`; a name that is not ``<engine>-*`` is also listed in :data:`CROSS_ENGINE` for
``stretchflow bench NAME`` to run it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import write_result


def _reference(quick: bool, out_dir: str | None) -> Path:
    from . import reference

    return reference.run(rows=20_000 if quick else 200_000, repeats=1 if quick else 3,
                         out_dir=out_dir, quick=quick)


def _vsn(kind: str) -> Callable[[bool, str | None], Path]:
    def run(quick: bool, out_dir: str | None) -> Path:
        from . import vsn

        fn, full, small = {
            "reconfiguration": (vsn.reconfiguration, {"cycles": 13}, {"cycles": 1}),
            "reconfiguration-rows": (vsn.reconfiguration_rows, {},
                                     {"events": 20_000, "gap": 1_000, "repeats": 1}),
            "forward": (vsn.forward, {}, {"rows": 5000, "parallelisms": (1, 2), "repeats": 1}),
            "wordcount": (vsn.wordcount_vs_reference, {}, {"rows": 20_000, "repeats": 1}),
            "scalejoin": (vsn.scalejoin, {}, {"rows": 2000, "window": 30_000, "repeats": 1}),
        }[kind]
        kw = small if quick else full
        return write_result(f"vsn-{kind}", {"quick": quick, **_jsonable(kw)}, fn(**kw),
                            out_dir)

    return run


def _elastic(kind: str) -> Callable[[bool, str | None], Path]:
    def run(quick: bool, out_dir: str | None) -> Path:
        from . import elastic

        fn, small = {
            "hedge": (elastic.hedge, {"seconds": 15.0, "max_rate": 600.0}),
            "q5": (elastic.scalejoin_phases, {"seconds": 20.0, "window": 10_000,
                                              "min_phase_s": 5.0, "max_phase_s": 10.0}),
        }[kind]
        kw = small if quick else {}
        return write_result(f"vsn-{kind}", {"quick": quick, **kw}, fn(**kw), out_dir)

    return run


def _speed(quick: bool, out_dir: str | None) -> Path:
    from . import speed

    return speed.run(quick=quick, out_dir=out_dir)


def _checkpoint(quick: bool, out_dir: str | None) -> Path:
    from . import checkpoint

    return checkpoint.run(quick=quick, out_dir=out_dir)


def _kills(quick: bool, out_dir: str | None) -> Path:
    from . import kills

    return kills.run(quick=quick, out_dir=out_dir)


def _live(quick: bool, out_dir: str | None) -> Path:
    from . import live

    return live.run(quick=quick, out_dir=out_dir)


def _peers(quick: bool, out_dir: str | None) -> Path:
    from . import peers

    return peers.run(quick=quick, out_dir=out_dir)


def _flink(quick: bool, out_dir: str | None) -> Path:
    from . import flink

    return flink.run(quick=quick, out_dir=out_dir)


def _userflows(quick: bool, out_dir: str | None) -> Path:
    from . import userflows

    return userflows.run(quick=quick, out_dir=out_dir)


def _userflows_10m(quick: bool, out_dir: str | None) -> Path:
    from . import userflows

    return userflows.run(quick=quick, out_dir=out_dir, name="userflows-10m",
                         **({} if quick else userflows.TEN_M))


def _userflows_spark(quick: bool, out_dir: str | None) -> Path:
    from . import userflows

    return userflows.run(quick=quick, out_dir=out_dir, name="userflows-spark",
                         **({"engines": ["spark"], "forms": ["expr"]} if quick
                            else userflows.SPARK_1M))


def _model(quick: bool, out_dir: str | None) -> Path:
    from . import model

    return model.run(quick=quick, out_dir=out_dir)


def _jsonable(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()}


#: name -> (what it measures, the paper's experiment, run(quick, out_dir) -> JSON path)
BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    "reference-wordcount": ("reference executor vs a hand-written loop (1T)", "issue #2",
                            _reference),
    "vsn-reconfiguration": ("VSN reconfiguration time, 1..16 instances and back",
                            "STRETCH Q4", _vsn("reconfiguration")),
    "vsn-reconfiguration-rows": ("VSN reconfiguration time with batches of rows in flight: "
                                 "a lambda user flow at full speed, 1..8 instances and back",
                                 "STRETCH Q4, issue #32", _vsn("reconfiguration-rows")),
    "vsn-forward": ("Op. 15 throughput and latency vs parallelism", "STRETCH Q2",
                    _vsn("forward")),
    "vsn-wordcount": ("VSN at parallelism 1 vs the reference executor", "STRETCH Q1",
                      _vsn("wordcount")),
    "vsn-scalejoin": ("ScaleJoin comparisons/s vs parallelism, with a 1T join", "STRETCH Q3",
                      _vsn("scalejoin")),
    "vsn-q5": ("ScaleJoin over phases of random rates, threshold controller, over time",
               "STRETCH Q5", _elastic("q5")),
    "vsn-hedge": ("hedge self-join on bursty trades, threshold controller, over time",
                  "STRETCH Q6", _elastic("hedge")),
    "speed": ("the pane loop (1T), reference, vsn, sn, ordered and spark, whole processes",
              "issue #16", _speed),
    "checkpoint": ("checkpoint overhead (every 1 s, every N tuples) and restore after "
                   "SIGKILL, whole processes", "issue #17", _checkpoint),
    "kills": ("random SIGKILL-and-resume cycles: output identical, nothing left behind "
              "(spark streaming; reference, vsn)", "issue #17", _kills),
    "live": ("first-window latency of a followed file: a writer process, reference and vsn "
             "vs a hand-written loop", "issue #19", _live),
    "peers": ("streamz, Bytewax, PyFlink, Spark DataFrames vs stretchflow, own venvs",
              "issue #20", _peers),
    "stretchflow-vs-flink": ("vsn vs PyFlink at Π = 1, 2 on the Q1–Q3 shapes, whole processes",
                             "STRETCH Q1–Q3, issue #20", _flink),
    "userflows": ("NEXMark-shaped user flows (lambdas and column expressions) on every engine "
                  "vs a hand-written loop and Polars, whole processes (USERFLOWS_* select)",
                  "issues #31, #32", _userflows),
    "userflows-10m": ("the user flows at 10 M events: hot items and mean price, lambdas and "
                      "column expressions, JSON Lines and Parquet, on the reference, vsn, sn "
                      "and ordered, whole processes", "issues #31, #32", _userflows_10m),
    "userflows-spark": ("the user flows' column expressions on the spark engine beside Spark's "
                        "native DataFrame query, 1 M events, own time", "issue #31",
                        _userflows_spark),
    "stretchflow-model": ("the DEBS'19 performance model of VSN and SN: measured costs, "
                          "predicted vs measured throughput at Π = 1, 2",
                          "STRETCH conference §8, §9.1 (Fig. 3, 4a)", _model),
}


#: modules of this package that define their own ``BENCHMARKS`` (same entries as above) next to
#: their code; a new benchmark module adds its name here and its entries are registered
SUITES: tuple[str, ...] = ("sn", "ordered", "slack", "spark", "memory", "latency_load",
                          "nexmark_suite")


def _register_suites() -> None:
    """The experiments of :data:`SUITES`, each defined next to its code."""
    for module in SUITES:
        suite = importlib.import_module(f".{module}", __name__)
        for name, entry in suite.BENCHMARKS.items():
            if name in BENCHMARKS:
                raise RuntimeError(f"benchmark {name!r} is defined twice")
            BENCHMARKS[name] = entry


_register_suites()

#: experiments named after what they measure, not an engine (they compare engines, or measure
#: a feature on every engine that has it: checkpoint); ``stretchflow bench NAME`` runs one
CROSS_ENGINE: tuple[str, ...] = ("speed", "peers", "checkpoint", "kills", "live",
                                 "stretchflow-vs-flink", "stretchflow-model", "userflows",
                                 "userflows-10m", "userflows-spark", "memory",
                                 "latency-load", "nexmark", "nexmark-1m")
