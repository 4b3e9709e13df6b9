"""One name per concept (issue #15): every benchmark is named after the engine it measures
(``<engine>-*``, run by ``stretchflow bench <engine>``), the committed result files carry their
own names, and the docs' relative links survive the renames (``docs/ssg.md`` → ``slack.md``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stretchflow.cli import BENCH_SUITES, main
from stretchflow.engines import ENGINES
from stretchflow_bench import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def test_every_benchmark_is_named_after_an_engine_and_every_suite_is_an_engine():
    from stretchflow_bench import CROSS_ENGINE

    # a benchmark belongs to one engine's suite, or compares every engine (CROSS_ENGINE)
    assert {name.split("-")[0] for name in BENCHMARKS if name not in CROSS_ENGINE} \
        <= set(ENGINES)
    assert set(CROSS_ENGINE) <= set(BENCHMARKS)
    assert set(BENCH_SUITES) == set(ENGINES) - {"reference"}
    for suite in BENCH_SUITES:
        assert any(name.startswith(f"{suite}-") for name in BENCHMARKS), suite


def test_the_slack_suite_and_no_ssg_suite():
    assert [n for n in BENCHMARKS if n.startswith("slack-")] == [
        "slack-overhead", "slack-estimators", "slack-tuning-zipf", "slack-tuning-constant"]
    # SSG is the slack engine's buffer, not an engine: no benchmark or suite is named after it
    assert not [n for n in BENCHMARKS if n.startswith("ssg")]


def test_bench_ssg_is_no_longer_a_suite(capsys):
    assert main(["bench", "ssg"]) == 2
    assert "vsn, sn, ordered, slack, spark" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_committed_result_names_itself_and_its_plot(path):
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == path.stem and path.stem in BENCHMARKS
    if "plot" in doc:
        assert doc["plot"] == f"{path.stem}.png" and (RESULTS / doc["plot"]).exists()


def test_relative_links_of_the_docs_resolve():
    docs = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
            *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for md in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text()):
            if "://" not in target and not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken
    assert (ROOT / "docs" / "slack.md").exists() and not (ROOT / "docs" / "ssg.md").exists()


def test_every_suite_module_registers_its_benchmarks():
    """A module named in ``SUITES`` brings its own ``BENCHMARKS`` into the registry."""
    import importlib

    import stretchflow_bench

    for module in stretchflow_bench.SUITES:
        own = importlib.import_module(f"stretchflow_bench.{module}").BENCHMARKS
        assert own and all(BENCHMARKS[n] is e for n, e in own.items()), module
