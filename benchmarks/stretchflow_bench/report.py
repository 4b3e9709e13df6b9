"""``stretchflow bench report``: the numbers of docs/RESULTS.md, generated from the JSON results.

RESULTS.md keeps its prose; every table or number block in it sits between
``<!-- report:NAME -->`` and ``<!-- /report:NAME -->`` and is the output of the renderer
``NAME`` (:data:`stretchflow_bench.report_tables.RENDERERS`, filled by ``report_tables``
and ``report_more``) over ``benchmarks/results/*.json``.
:func:`update` rewrites the blocks; :func:`check` lists the blocks that differ from what it
would write, so a test fails when RESULTS.md is out of date with the JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# imported for their renderers (the SN, ordered, slack and Spark blocks, the papers' blocks,
# the user flows)
from . import (  # noqa: F401, E501
    report_hosts,
    report_latency,
    report_memory,
    report_model,
    report_more,
    report_nexmark,
    report_papers,
    report_userflows,
)
from .common import ROOT
from .report_tables import RENDERERS, ReportError

__all__ = ["DOC", "RESULTS", "ReportError", "Results", "check", "render_blocks", "update"]

RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "RESULTS.md"

_BLOCK = re.compile(r"<!-- report:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /report:(?P=name) -->",
                    re.S)
_OPEN = re.compile(r"<!-- (/?)report:([\w.-]+) -->")


@dataclass
class Results:
    """The result documents of one results directory, read once each; a benchmark that was
    never run has no file and :meth:`get` returns None for it."""

    directory: Path
    _docs: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def get(self, name: str) -> dict[str, Any] | None:
        if name not in self._docs:
            path = self.directory / f"{name}.json"
            if not path.exists():
                self._docs[name] = None
            else:
                try:
                    doc = json.loads(path.read_text())
                except (OSError, ValueError) as e:
                    raise ReportError(f"{path}: not a readable JSON result: {e}") from e
                if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
                    raise ReportError(f"{path}: a result needs a 'metrics' object")
                self._docs[name] = doc
        return self._docs[name]

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.directory.glob("*.json"))


def render_blocks(text: str, results: Results, doc: str | Path = "RESULTS.md"
                  ) -> tuple[str, list[str]]:
    """``text`` with every report block replaced by its renderer's output, and the names of
    the blocks whose content changed. An unknown renderer name or an unclosed block is a
    :class:`ReportError` naming the document, the line and the block."""
    opened: list[tuple[str, int]] = []
    for m in _OPEN.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        closing, name = m.group(1) == "/", m.group(2)
        if not closing:
            if name not in RENDERERS:
                raise ReportError(f"{doc}:{line}: block {name!r} has no renderer "
                                  f"(known: {', '.join(sorted(RENDERERS))})")
            if opened:
                raise ReportError(f"{doc}:{line}: block {name!r} opens inside block "
                                  f"{opened[-1][0]!r} (line {opened[-1][1]})")
            opened.append((name, line))
        elif not opened or opened[-1][0] != name:
            raise ReportError(f"{doc}:{line}: closing marker of {name!r} without its opening")
        else:
            opened.pop()
    if opened:
        raise ReportError(f"{doc}:{opened[-1][1]}: block {opened[-1][0]!r} is never closed")

    stale: list[str] = []

    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        # a blank line before the closing marker ends a table in every Markdown renderer
        body = RENDERERS[name](results).rstrip("\n") + "\n\n"
        if body != m.group("body"):
            stale.append(name)
        return f"<!-- report:{name} -->\n{body}<!-- /report:{name} -->"

    return _BLOCK.sub(replace, text), stale


def check(doc: Path = DOC, results_dir: Path = RESULTS) -> list[str]:
    """One line per block of ``doc`` that differs from what :func:`update` would write
    (empty when the document is up to date)."""
    _, stale = render_blocks(doc.read_text(), Results(results_dir), doc)
    return [f"{doc}: block {name!r} is out of date with {results_dir} "
            f"(run `stretchflow bench report`)" for name in stale]


def update(doc: Path = DOC, results_dir: Path = RESULTS) -> list[str]:
    """Rewrites every block of ``doc`` from ``results_dir``; returns the blocks it changed."""
    text = doc.read_text()
    new, stale = render_blocks(text, Results(results_dir), doc)
    if new != text:
        doc.write_text(new)
    return stale


def block_names(doc: Path = DOC) -> list[str]:
    """The renderers ``doc`` uses, in order."""
    return [m.group("name") for m in _BLOCK.finditer(doc.read_text())]
