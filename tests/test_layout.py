"""The package's layout: no import circle (lazy imports in functions count too), and the flow
API reaches the engines through their registry. Read from the source with ``ast``; nothing is
run. There is no cap on a module's length: a module holds one idea and is split by idea, not
by a line count (a cap made files split where the count ran out, not where the ideas part)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "src" / "stretchflow"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    return mods


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for type hints only, which
    never run)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its text (at run time)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg
                for _ in range(node.level - 1):
                    base = base.rsplit(".", 1)[0]
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in found if m in mods and m != name}


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_circle():
    assert import_cycles() == []


def test_the_checker_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "stretchflow"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from . import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .d import D\n")
    (pkg / "d.py").write_text("from .c import x\n")  # c -> d for type hints only: no circle
    monkeypatch.setattr(__import__(__name__), "PKG", pkg)
    assert import_cycles() == [["stretchflow.a", "stretchflow.b"]]


def test_the_flow_api_does_not_import_an_executor():
    """flow.py reaches the engines through the registry, which loads them by name."""
    mods = _modules()
    assert not {m for m in _imports("stretchflow.flow", mods["stretchflow.flow"], mods)
                if m.startswith("stretchflow.executors")}
    assert not {m for m in _imports("stretchflow.engines", mods["stretchflow.engines"], mods)
                if m.startswith("stretchflow.executors")}
