"""The live view end to end in a real headless browser (issue #18): Debian's chromium, driven
by Playwright, loads the page of a paced elastic vsn run, sees its charts update while the run
goes on and the reconfiguration appear on the timeline.

Chromium comes from the project's set-up (tools/install-system.sh); a machine without it
fails here, loudly, rather than skipping: the view is a deliverable, not an extra.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import stretchflow as sf
from stretchflow import web
from test_web import live_session

CHROMIUM = "/usr/bin/chromium"


def _browser_or_fail():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run tools/install-system.sh (as root) to install "
                    f"Debian's chromium for the browser tests")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed in the venv: pip install playwright "
                    "(the browser itself comes from tools/install-system.sh)")
    return sync_playwright


def paced_elastic_flow(tmp: Path, n: int, rate: float) -> sf.Flow:
    path = tmp / "in.jsonl"  # a file source: its read counter moves while it reads
    path.write_text("".join(json.dumps({"ts": i, "k": i % 50}) + "\n" for i in range(n)))
    flow = sf.Flow("live")
    flow.source(sf.io.jsonl(path).at_rate(rate)).aggregate(
        size=100, slide=50, keys=lambda t: [t["k"]], init=lambda: 0,
        update=lambda s, t: s + 1, output=lambda k, s: {"k": k, "n": s}).collect()
    return flow


def test_live_view_updates_and_shows_the_reconfiguration(tmp_path):
    sync_playwright = _browser_or_fail()
    # 6 s at 4,000 tuples/s (room for a slow page load on a loaded machine); the
    # reconfiguration after ~3 s, once the page shows the run
    flow = paced_elastic_flow(tmp_path, 24_000, 4_000)
    out: dict = {}

    def go() -> None:
        try:
            out["result"] = flow.run(engine="vsn", parallelism=1, max_parallelism=2,
                                     reconfigure="12000:2", metrics_interval=0.1, ui=True)
        except BaseException as e:  # noqa: BLE001 (handed to the test thread)
            out["error"] = e

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)  # before the run: slow start
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            run = threading.Thread(target=go, daemon=True)
            run.start()
            page.goto(live_session(out).url)
            page.wait_for_function("Number(document.body.dataset.updates || 0) >= 1",
                                   timeout=10_000)
            assert page.text_content("#flow-name") == "live"
            first = int(page.get_attribute("#chart-throughput", "data-points") or 0)
            # the charts grow while the run goes on
            page.wait_for_function(
                f"Number(document.getElementById('chart-throughput').dataset.points) > {first}"
                f" && document.body.dataset.status === 'running'", timeout=10_000)
            assert page.text_content("#status") == "running"
            assert "aggregate" in page.text_content("#graph")
            # the reconfiguration on the timeline, while the run still goes on or at its end
            item = page.wait_for_selector("#timeline li.event.reconfiguration", timeout=20_000)
            assert "aggregate: 1 -> 2 instances" in item.text_content()
            page.wait_for_function("document.body.dataset.status === 'finished'",
                                   timeout=20_000)
            assert page.text_content(".node.oplus .par") == "2"
            assert "reconfigurations: 1 applied" in page.text_content("#summary")
        finally:
            browser.close()
            run.join(timeout=30)
            web.close_all()
    assert "error" not in out, out.get("error")


def test_a_missing_browser_fails_naming_the_install_script(monkeypatch):
    monkeypatch.setattr(__import__(__name__), "CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(pytest.fail.Exception, match="tools/install-system.sh"):
        _browser_or_fail()
