"""The docs list the engine specs: docs/cli.md's and docs/api.md's option tables are generated
from :data:`stretchflow.engines.ENGINES` by the doc writer of the dev package
(``python -m stretchflow_bench.docgen``), so they cannot drift from the options the engines
accept."""

from __future__ import annotations

import pytest

from stretchflow.engines import ENGINES
from stretchflow_bench import docgen


def test_options_table_has_every_option_of_every_engine():
    table = docgen.options_table()
    for spec in ENGINES.values():
        for opt in spec.options:
            row = next(r for r in table.splitlines() if r.startswith(f"| `{opt.name}` |")
                       and spec.name in r.split("|")[3].replace(" ", "").split(","))
            assert (opt.flag in row) == (opt.parse is not None), (spec.name, opt.name)
    one = docgen.options_table("ordered")
    assert "`--scheduler {qst,lp,et,ct}`" in one and "--master" not in one


@pytest.mark.parametrize("doc", docgen.DOCUMENTS)
def test_docs_list_the_options_from_the_specs(doc):
    """docs/cli.md and docs/api.md hold the generated block; when an engine's spec changes,
    ``python -m stretchflow_bench.docgen`` rewrites them."""
    text = (docgen.DOCS / doc).read_text(encoding="utf-8")
    assert docgen.block() in text, \
        f"docs/{doc} is out of date: run python -m stretchflow_bench.docgen"
    assert docgen.render(text) == text


def test_docgen_render_replaces_only_the_block():
    text = f"before\n{docgen.BEGIN}\nstale\n{docgen.END}\nafter\n"
    out = docgen.render(text)
    assert out.startswith("before\n") and out.endswith("\nafter\n") and "stale" not in out
    with pytest.raises(ValueError, match="options:begin"):
        docgen.render("no block")
