"""The engine-option tables of docs/cli.md and docs/api.md, generated from the engine specs.

Each document holds the generated text between ``<!-- options:begin -->`` and
``<!-- options:end -->``; ``python -m stretchflow_bench.docgen`` rewrites both blocks from
:data:`stretchflow.engines.ENGINES` and ``python -m stretchflow_bench.docgen --check`` exits 1 when
a document differs (``tests/test_engines.py`` fails then too), so the docs cannot drift from
the options the engines accept.
"""

from __future__ import annotations

import sys

from stretchflow.engines import ENGINES, Option, options_by_name

from .common import ROOT

BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"
DOCS = ROOT / "docs"
DOCUMENTS = ("cli.md", "api.md")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(engine: str | None) -> list[tuple[Option, list[str]]]:
    """One row per distinct declaration of an option (``controller`` is a name on vsn and sn
    but an API-only object on slack), with the engines sharing it."""
    rows: list[tuple[Option, list[str]]] = []
    for decls in options_by_name().values():
        for spec, opt in decls:
            if engine is not None and spec.name != engine:
                continue
            for o, engines in rows:
                if o == opt:
                    engines.append(spec.name)
                    break
            else:
                rows.append((opt, [spec.name]))
    return rows


def metavar(opt: Option) -> str:
    """How the flag's value is shown: its metavar, its choices, or its name in capitals."""
    if opt.metavar:
        return opt.metavar
    if opt.choices:
        return "{" + ",".join(opt.choices) + "}"
    return opt.name.upper()


def meaning(opt: Option) -> str:
    """The option's help, with its choices when it has them."""
    text = opt.help
    if opt.choices:
        text += f" (one of {', '.join(opt.choices)})"
    return text


def options_table(engine: str | None = None) -> str:
    """A Markdown table of the options of every engine (or of ``engine``): option, flag,
    engines, default, meaning. A default of — is the engine's own (see its page)."""
    lines = ["| option | flag | engines | default | meaning |", "|---|---|---|---|---|"]
    for opt, engines in _rows(engine):
        flag = f"`{opt.flag} {metavar(opt)}`" if opt.parse else "API only"
        if opt.parse and opt.repeat:
            flag += " (repeat)"
        lines.append(f"| `{opt.name}` | {flag} | {', '.join(engines)} | "
                     f"{_cell(opt.default) or '—'} | {_cell(meaning(opt))} |")
    return "\n".join(lines) + "\n"


def engines_table() -> str:
    """A Markdown table of the engines: name, summary and the options each takes."""
    lines = ["| engine | what it is | options |", "|---|---|---|"]
    for spec in ENGINES.values():
        lines.append(f"| `{spec.name}` | {_cell(spec.summary)} | "
                     f"{', '.join(f'`{n}`' for n in spec.option_names) or '—'} |")
    return "\n".join(lines) + "\n"


def block() -> str:
    """The generated text both documents hold between the markers."""
    return (f"{BEGIN}\n<!-- generated from src/stretchflow/engines.py by "
            f"`python -m stretchflow_bench.docgen`; do not edit by hand -->\n\n"
            f"{engines_table()}\n{options_table()}{END}")


def render(text: str) -> str:
    """``text`` with its options block replaced by the generated one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[:start] + block() + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    """Rewrites the blocks of docs/cli.md and docs/api.md; ``--check``: only compare."""
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for name in DOCUMENTS:
        path = DOCS / name
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new, encoding="utf-8")
    if stale:
        print(("out of date: " if check else "rewrote: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
