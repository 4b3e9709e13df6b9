"""The self-contained HTML report: the live page with its script and styles inlined and the
run's final state embedded, so it opens from disk with no server and no network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .server import static_text


def render_report(snapshot: dict[str, Any]) -> str:
    """The page, one file: ``snapshot`` in a JSON script element the page reads instead of
    polling ``/api/state``."""
    page = static_text("index.html")
    # "</" inside the JSON would end the script element early: escape it as JSON allows
    data = json.dumps(snapshot).replace("</", "<\\/")
    css = static_text("style.css")
    js = static_text("app.js").replace("</script", "<\\/script")
    page = page.replace('<link rel="stylesheet" href="/static/style.css">',
                        f"<style>\n{css}\n</style>")
    page = page.replace('<script src="/static/app.js"></script>',
                        f'<script id="embedded-state" type="application/json">{data}</script>\n'
                        f"<script>\n{js}\n</script>")
    return page


def write_report(path: str | Path, snapshot: dict[str, Any]) -> Path:
    """Writes the report to ``path`` (its folder must exist); returns the path."""
    p = Path(path)
    try:
        p.write_text(render_report(snapshot), encoding="utf-8")
    except OSError as e:
        raise OSError(f"report {p}: cannot write: {e.strerror or e}") from e
    return p
