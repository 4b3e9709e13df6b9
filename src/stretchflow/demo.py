"""``stretchflow demo``: generate tweets, run longest-hashtag and wordcount, summarize."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

import stretchflow as sf

from .io.generators import tweets, write_table
from .queries import build_query


def run_demo(rows: int = 100_000, seed: int = 7, out_dir: str = "out/demo",
             console: Console | None = None) -> dict[str, dict]:
    console = console or Console()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "tweets.jsonl"
    with console.status(f"generating {rows} tweets"):
        write_table(tweets(rows, seed=seed), data)
    console.print(f"generated [bold]{rows}[/] tweets into {data}")
    summary = {}
    for query in ("longest-hashtag", "wordcount"):
        flow = sf.Flow(query)
        result = build_query(query, [flow.source(sf.io.jsonl(data))])
        collected = result.collect()
        result.sink(out / f"{query}.jsonl")
        with console.status(f"running {query} on the reference engine"):
            res = flow.run()
        summary[query] = {"result": res, "items": collected.items}
    table = Table(title="stretchflow demo (reference engine)")
    for col in ("query", "tuples in", "rows out", "seconds", "tuples/s"):
        table.add_column(col, justify="right" if col != "query" else "left")
    for query, s in summary.items():
        r = s["result"]
        table.add_row(query, f"{r.total_in:,}", f"{len(s['items']):,}", f"{r.elapsed:.2f}",
                      f"{r.throughput:,.0f}")
    console.print(table)
    longest: dict[str, int] = {}
    for _, p in summary["longest-hashtag"]["items"]:
        longest[p["hashtag"]] = max(longest.get(p["hashtag"], 0), p["chars"])
    tags = sorted(longest.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    console.print("hashtags with the longest texts (over all windows): " + ", ".join(
        f"{tag} {chars} chars" for tag, chars in tags))
    words = summary["wordcount"]["items"]
    if words:
        per_window: dict[int, int] = {}
        for ts, p in words:
            per_window[ts] = per_window.get(ts, 0) + p["count"]
        busiest = max(per_window, key=per_window.__getitem__)
        top = sorted((p for ts, p in words if ts == busiest), key=lambda p: -p["count"])[:5]
        console.print(f"top words of the window ending at {busiest}: " + ", ".join(
            f"{p['word']} ({p['count']})" for p in top))
    console.print(f"outputs written to {out}/")
    return summary
