"""Takes docs/img/live-view.png: the live view of an elastic vsn run, caught while it runs,
after its reconfigurations (1 -> 3 -> 2 instances) reached the timeline.

    .venv/bin/python tools/screenshot.py [--out docs/img/live-view.png]

Needs Debian's chromium (tools/install-system.sh) and playwright in the venv.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import stretchflow as sf
from stretchflow import web

CHROMIUM = "/usr/bin/chromium"


def build_flow(tmp: Path, n: int, rate: float) -> sf.Flow:
    path = tmp / "tweets.jsonl"
    path.write_text("".join(json.dumps({"ts": i, "tag": f"#t{i % 97}", "len": i % 140}) + "\n"
                            for i in range(n)))
    flow = sf.Flow("longest-per-hashtag")
    flow.source(sf.io.jsonl(path, name="tweets").at_rate(rate)).aggregate(
        size=200, slide=100, keys=lambda t: [t["tag"]], init=lambda: 0,
        update=lambda s, t: max(s, t["len"]),
        output=lambda k, s: {"tag": k, "len": s}, name="longest").collect()
    return flow


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img/live-view.png")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as d:
        flow = build_flow(Path(d), 36_000, 6_000)  # 6 s of input
        out: dict = {}

        def go() -> None:
            try:
                out["result"] = flow.run(engine="vsn", parallelism=1, max_parallelism=4,
                                         reconfigure="9000:3,24000:2", metrics_interval=0.1,
                                         ui=True)
            except BaseException as e:  # noqa: BLE001 (reported below)
                out["error"] = e

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            run = threading.Thread(target=go, daemon=True)
            run.start()
            while not web.active() and "error" not in out:
                time.sleep(0.02)
            if "error" in out:
                raise out["error"]
            page.goto(web.active()[0].url)
            # both reconfigurations on the timeline, the run still going on
            page.wait_for_function(
                "document.querySelectorAll('#timeline li.event.reconfiguration').length >= 2",
                timeout=30_000)
            page.wait_for_timeout(1200)  # a few more periods after the second change
            status = page.text_content("#status")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
            run.join(timeout=60)
            web.close_all()
    if "error" in out:
        raise out["error"]
    print(f"{args.out}: taken while the run was {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
