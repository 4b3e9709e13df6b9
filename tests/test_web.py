"""The live view's back end (issue #18): /metrics during a paced run parses as Prometheus text
with the documented names and labels, /api/state, the self-contained report, the CLI flags
and the metrics hooks the view reads."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

import stretchflow as sf
from stretchflow import web
from stretchflow.cli import main
from stretchflow.errors import FlowDefinitionError, OperatorError
from stretchflow.runtime.control import RunControl
from stretchflow.runtime.metrics import MetricsLog, MetricsSampler, watching
from stretchflow.web.report import render_report
from threadutil import wait_until


def paced_flow(n: int = 12_000, rate: float = 6_000, tmp: Path | None = None) -> sf.Flow:
    """A paced aggregation. Read from a JSONL file when ``tmp`` is given: a file source
    updates its ``read`` counter while it reads (an iterable source only at its end)."""
    flow = sf.Flow("paced")
    records = [{"ts": i, "k": i % 50} for i in range(n)]
    if tmp is None:
        src = sf.io.iterable(records)
    else:
        path = tmp / "in.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        src = sf.io.jsonl(path)
    src.at_rate(rate)
    flow.source(src).aggregate(size=100, slide=50, keys=lambda t: [t["k"]], init=lambda: 0,
                               update=lambda s, t: s + 1,
                               output=lambda k, s: {"k": k, "n": s}).collect()
    return flow


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def run_in_thread(flow: sf.Flow, **options) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def go() -> None:
        try:
            out["result"] = flow.run(**options)
        except BaseException as e:  # noqa: BLE001 (handed to the test thread)
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def live_session(out: dict, timeout: float = 20.0) -> web.Session:
    def session() -> web.Session | None:
        if "error" in out:
            raise out["error"]
        return next(iter(web.active()), None)
    return wait_until(session, timeout, "a live session appears")


def scrape_when(session: web.Session, ready, timeout: float = 30.0) -> dict:
    """The session's /metrics families once ``ready(families)`` holds (scraped every 0.1 s)."""
    def scrape() -> dict | None:
        fams = families(get(session.url + "metrics"))
        return fams if ready(fams) else None
    return wait_until(scrape, timeout, "the metrics show the run under way", poll=0.1)


def total(fams: dict, name: str, operator: str) -> float:
    """The ``_total`` sample of counter ``name`` for ``operator`` (0 while it has none)."""
    fam = fams.get(name)
    return next((s.value for s in fam.samples if s.name.endswith("_total")
                 and s.labels["operator"] == operator), 0.0) if fam is not None else 0.0


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    web.close_all()


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_during_a_paced_run_parse_with_names_and_labels(tmp_path):
    flow = paced_flow(tmp=tmp_path)
    source = next(n.name for n in flow.nodes if n.kind == "source")
    t, out = run_in_thread(flow, engine="vsn", parallelism=1, max_parallelism=2,
                           reconfigure="11000:2", metrics_interval=0.1, ui=0)
    session = live_session(out)
    # the source has counted what it read (the file source counts per 4 096 tuples: at 6 000
    # tuples/s, after about 0.7 s) and the operator what it got
    fams = scrape_when(session, lambda f: total(f, "stretchflow_tuples_out", source) > 0
                       and total(f, "stretchflow_tuples_in", "aggregate") > 0)
    assert t.is_alive(), "the paced run should still be going"
    t.join(timeout=60)
    assert "error" not in out, out.get("error")
    par = fams["stretchflow_operator_parallelism"].samples
    assert [s.labels for s in par] == [{"flow": "paced", "operator": "aggregate"}]
    tout = {s.labels["operator"]: s.value for s in fams["stretchflow_tuples_out"].samples
            if s.name.endswith("_total")}
    # before the source read the 11 000th tuple the step cannot have applied (a loaded machine
    # may get there before the scrape: then either parallelism is possible)
    assert par[0].value == 1.0 if tout[source] < 11_000 else par[0].value in (1.0, 2.0)
    tin = {s.labels["operator"]: s for s in fams["stretchflow_tuples_in"].samples
           if s.name.endswith("_total")}
    assert set(tin) == {"aggregate", "sink collect"}
    assert tin["aggregate"].labels == {"flow": "paced", "operator": "aggregate",
                                       "instance": "all"}
    assert tin["aggregate"].value > 0
    assert 0 < tout[source] < 12_000  # read so far, mid-run
    busy = fams["stretchflow_operator_busy_ratio"].samples
    assert {s.labels["instance"] for s in busy} == {str(j) for j in range(int(par[0].value))}
    assert all(0.0 <= s.value <= 1.0 for s in busy)
    assert fams["stretchflow_latency_seconds"].type == "histogram"
    for name in ("stretchflow_operator_congestion_ratio", "stretchflow_reconfigurations",
                 "stretchflow_reconfiguration_duration_seconds"):
        assert name in fams
    # after the run the final state holds the reconfiguration and its duration
    fams = families(get(out["result"].extra["ui_url"] + "metrics"))
    rc = [s for s in fams["stretchflow_reconfigurations"].samples if s.name.endswith("_total")]
    assert [(s.labels["operator"], s.value) for s in rc] == [("aggregate", 1.0)]
    counts = [s for s in fams["stretchflow_reconfiguration_duration_seconds"].samples
              if s.name.endswith("_count")]
    assert [s.value for s in counts] == [1.0]
    tout = {s.labels["operator"]: s.value for s in fams["stretchflow_tuples_out"].samples
            if s.name.endswith("_total")}
    assert tout[source] == 12_000


def test_state_endpoint_has_graph_series_and_the_reconfiguration():
    res = paced_flow(6_000, 20_000).run(engine="vsn", parallelism=1, max_parallelism=3,
                                        reconfigure="2000:3", metrics_interval=0.05, ui=True)
    state = json.loads(get(res.extra["ui_url"] + "api/state"))
    assert state["flow"] == "paced" and state["engine"] == "vsn"
    assert state["status"] == "finished"
    names = [(n["name"], n["kind"], n["inputs"]) for n in state["nodes"]]
    assert names == [("iterable", "source", []), ("aggregate", "oplus", ["iterable"]),
                     ("sink collect", "sink", ["aggregate"])]
    agg = state["series"]["aggregate"]
    assert [p for p in agg["parallelism"] if p is not None][0] == 1
    assert [p for p in agg["parallelism"] if p is not None][-1] == 3
    reconf = [e for e in state["events"] if e["kind"] == "reconfiguration"]
    assert [e["text"] for e in reconf] == ["aggregate: 1 -> 3 instances"]
    assert 0 <= reconf[0]["t"] <= state["elapsed"]
    assert state["nodes"][0]["totals"]["out"] == 6_000
    assert state["latency_summary"]["samples"] > 0 and state["latency"]["t"]
    assert get(res.extra["ui_url"]).startswith("<!doctype html>")
    assert "function render" in get(res.extra["ui_url"] + "static/app.js")
    with pytest.raises(urllib.error.HTTPError):
        get(res.extra["ui_url"] + "static/../state.py")


def test_report_is_self_contained(tmp_path):
    path = tmp_path / "run.html"
    paced_flow(3_000, 30_000).run(engine="vsn", parallelism=2, report=str(path))
    html = path.read_text()
    assert not re.search(r"https?://", html)
    assert not re.search(r'(src|href)\s*=', html)  # nothing loaded from anywhere
    data = re.search(r'<script id="embedded-state" type="application/json">(.*?)</script>',
                     html, re.S)
    assert data is not None
    state = json.loads(data.group(1))
    assert state["flow"] == "paced" and state["status"] == "finished"
    assert "function render" in html and "#charts" in html


def test_report_escapes_closing_tags_in_the_state():
    snap = {"flow": "</script><b>x", "nodes": []}
    html = render_report(snap)
    data = re.search(r'<script id="embedded-state" type="application/json">(.*?)</script>',
                     html, re.S)
    assert json.loads(data.group(1))["flow"] == "</script><b>x"


def test_reference_engine_report_and_failed_run(tmp_path):
    path = tmp_path / "ref.html"
    flow = sf.Flow("boom")
    flow.source(sf.io.iterable([{"ts": i} for i in range(10)])).map(
        lambda t: 1 / (t["ts"] - 5)).collect()
    with pytest.raises(OperatorError, match="ZeroDivisionError"):
        flow.run(report=str(path))
    state = json.loads(re.search(r'type="application/json">(.*?)</script>', path.read_text(),
                                 re.S).group(1))
    assert state["status"].startswith("failed: OperatorError: operator 'map' failed")


def test_ui_option_errors():
    with pytest.raises(FlowDefinitionError, match="ui must be True, False or a port"):
        paced_flow(10).run(engine="vsn", ui="yes")
    with pytest.raises(FlowDefinitionError, match="spark engine does not take them"):
        paced_flow(10).run(engine="spark", ui=True)
    res = paced_flow(10).run(engine="vsn", ui=False)  # off: no server, nothing added
    assert "ui_url" not in res.extra


def test_cli_ui_and_report(tmp_path, capsys):
    app = tmp_path / "app.py"
    app.write_text(
        "import stretchflow as sf\n"
        "flow = sf.Flow('cliflow')\n"
        "flow.source(sf.io.iterable([{'ts': i, 'k': i % 5} for i in range(3000)]))"
        ".aggregate(size=10, slide=10, keys=lambda t: [t['k']], init=lambda: 0,"
        " update=lambda s, t: s + 1, output=lambda k, s: {'k': k, 'n': s}).collect()\n")
    report = tmp_path / "r.html"
    assert main(["run", str(app), "--engine", "vsn", "--ui", "--no-ui-wait", "--report",
                 str(report), "-q"]) == 0
    errs = capsys.readouterr().err
    assert re.search(r"live view: http://127\.0\.0\.1:\d+/ \(Prometheus metrics at", errs)
    assert f"report: {report}" in errs
    assert '"flow": "cliflow"' in report.read_text()
    with pytest.raises(SystemExit):
        main(["run", str(app), "--ui", "http"])
    assert "--ui expects a port number, got 'http'" in capsys.readouterr().err


def test_metrics_log_listeners_and_decisions():
    seen: list = []
    with watching(seen.append):
        log = MetricsLog()
    assert seen == [log]
    assert MetricsLog() not in seen  # outside the block: not announced
    calls: list = []
    log.listeners.append(SimpleNamespace(
        on_row=lambda r: calls.append(("row", r["operator"])),
        on_parallelism=lambda o, t, p: calls.append(("par", o, p)),
        on_decision=lambda e: calls.append(("dec", e["operator"], e["parallelism"]))))
    m = SimpleNamespace(time=0.1, parallelism=2, input_rate=10.0, throughput=9.0,
                        congestion=0.0, per_instance_load=(0.5, 0.25), extras={"backlog": 7})
    controller = SimpleNamespace(observe=lambda _m: SimpleNamespace(parallelism=3,
                                                                    reason="busy"))
    applied: list = []
    sampler = MetricsSampler(RunControl(), log, 1.0, lambda: [("op", m)], controller,
                             lambda op, d: applied.append((op, d.parallelism)))
    sampler.tick()
    log.parallelism_changed("op", 3)
    log.parallelism_changed("op", 3)  # no change: no call
    assert calls == [("row", "op"), ("dec", "op", 3), ("par", "op", 3)]
    assert applied == [("op", 3)]
    assert log.rows[0]["backlog"] == 7
    assert log.decisions[0]["reason"] == "busy"


def test_metrics_with_backlog_and_checkpoint_durations(tmp_path):
    """A checkpointed paced run: /metrics mid-run parses with the backlog gauge and the
    checkpoint histogram; at the end the histogram counts every checkpoint the run wrote and
    the state's timeline marks each."""
    flow = sf.Flow("ckpaced")
    src = sf.io.iterable([{"ts": i, "k": i % 50} for i in range(8_000)])
    src.at_rate(8_000)
    flow.source(src).aggregate(size=100, slide=50, keys=lambda t: [t["k"]], init=lambda: 0,
                               update=lambda s, t: s + 1,
                               output=lambda k, s: {"k": k, "n": s}).sink(tmp_path / "o.jsonl")
    t, out = run_in_thread(flow, engine="vsn", parallelism=1, metrics_interval=0.1,
                           checkpoint=str(tmp_path / "ck"), checkpoint_every="150ms", ui=0)
    session = live_session(out)
    # the first sample is in (the backlog gauge has its operator)
    fams = scrape_when(session, lambda f: "stretchflow_operator_backlog_tuples" in f
                       and f["stretchflow_operator_backlog_tuples"].samples
                       and "stretchflow_checkpoint_duration_seconds" in f)
    assert t.is_alive(), "the paced run should still be going"
    t.join(timeout=60)
    assert "error" not in out, out.get("error")
    backlog = fams["stretchflow_operator_backlog_tuples"]
    assert backlog.type == "gauge"
    assert [s.labels for s in backlog.samples] == [{"flow": "ckpaced", "operator": "aggregate"}]
    assert fams["stretchflow_checkpoint_duration_seconds"].type == "histogram"
    res = out["result"]
    n = res.extra["checkpoints"]
    assert n >= 2, n  # ~1 s paced, a cut every 150 ms
    fams = families(get(res.extra["ui_url"] + "metrics"))
    h = {s.name: s for s in fams["stretchflow_checkpoint_duration_seconds"].samples
         if not s.name.endswith("_bucket")}
    assert h["stretchflow_checkpoint_duration_seconds_count"].value == n
    log = res.extra["checkpoint_log"]
    assert h["stretchflow_checkpoint_duration_seconds_sum"].value == pytest.approx(
        sum(r["duration_ms"] for r in log) / 1000)
    inf = [s for s in fams["stretchflow_checkpoint_duration_seconds"].samples
           if s.labels.get("le") == "+Inf"]
    assert [s.value for s in inf] == [n]
    total = [s.value for s in fams["stretchflow_checkpoints"].samples
             if s.name.endswith("_total")]
    assert total == [n]
    written = [s.value for s in fams["stretchflow_checkpoint_written_bytes"].samples
               if s.name.endswith("_total")]
    assert written == [sum(r["bytes"] for r in log)]
    state = json.loads(get(res.extra["ui_url"] + "api/state"))
    marks = [e for e in state["events"] if e["kind"] == "checkpoint"]
    assert len(marks) == n == len(state["checkpoint_log"])
    assert all(0 <= e["t"] <= state["elapsed"] for e in marks)
