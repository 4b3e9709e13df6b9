"""The engine registry: every engine's ``run`` takes exactly its spec's options, ``flow.run``
and the CLI check options against the specs in one line (the docs' tables of the specs:
test_docgen.py)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import stretchflow as sf
from stretchflow.engines import ENGINES
from stretchflow.errors import FlowDefinitionError

ENGINE_NAMES = sorted(ENGINES)


def tiny_flow() -> sf.Flow:
    flow = sf.Flow("tiny")
    flow.source(sf.io.iterable([{"ts": 1, "x": 1}])).map(lambda t: t).collect()
    return flow


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_run_signature_is_the_spec(engine):
    """An executor's ``run(flow, ...)`` has keyword parameters named exactly as its spec's
    options: the spec is the one place an option is declared (no ``**options`` catch-all)."""
    spec = ENGINES[engine]
    params = list(inspect.signature(spec.load()).parameters.values())
    assert params[0].name == "flow"
    rest = params[1:]
    names = [p.name for p in rest]
    assert sorted(names) == sorted(spec.option_names) and len(set(names)) == len(names)
    assert all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in rest)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_unknown_option_names_engine_and_accepted_options(engine):
    with pytest.raises(FlowDefinitionError) as e:
        tiny_flow().run(engine=engine, bogus=1)
    msg = str(e.value)
    assert "\n" not in msg and f"the {engine} engine does not take option 'bogus'" in msg
    assert "no engine has it" in msg
    accepted = msg.split("it accepts: ")[1].split(", ")
    assert accepted == list(ENGINES[engine].option_names)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_parallelism_is_accepted_by_every_spec(engine):
    assert ENGINES[engine].check({"parallelism": 2}) == {"parallelism": 2}
    with pytest.raises(FlowDefinitionError, match="parallelism must be a positive integer"):
        ENGINES[engine].check({"parallelism": 0})


def test_misplaced_option_names_the_engines_that_take_it():
    with pytest.raises(FlowDefinitionError) as e:
        tiny_flow().run(engine="vsn", scheduler="qst")
    assert "it applies to the ordered engine" in str(e.value)
    with pytest.raises(FlowDefinitionError, match="scheduler must be one of qst, lp, et, ct"):
        tiny_flow().run(engine="ordered", scheduler="fifo")


def test_cli_misplaced_flag_is_one_line_without_traceback(tmp_path):
    """(A subprocess: what a user sees, exit code and stderr included.)"""
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"ts": 1, "user": "u", "text": "a"}\n')
    proc = subprocess.run([sys.executable, "-m", "stretchflow", "run", "wordcount", "--input",
                           str(inp), "--output", str(tmp_path / "o.jsonl"), "--engine", "vsn",
                           "--scheduler", "qst"], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "--scheduler" in lines[0] and "vsn" in lines[0] and "ordered" in lines[0]
    assert not (tmp_path / "o.jsonl").exists()
