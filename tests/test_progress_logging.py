"""Progress, logging and deadline lines (issue #18): the progress model (percent of input from
bytes, rate and ETA on a fake clock, parallelism from the run's MetricsLog), the CLI's
off-terminal progress lines, ``--deadline``'s violations line, a library run that logs and
prints nothing, and no ``print`` in library modules."""

from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path

import pytest

import stretchflow as sf
from stretchflow.cli import main
from stretchflow.cli_run import print_deadline
from stretchflow.runtime.metrics import MetricsLog
from stretchflow.runtime.progress import RunProgress, Snapshot, fd_position, format_line
from stretchflow.runtime.result import RunResult

SRC = Path(sf.__file__).parent


def _jsonl(path: Path, rows: int) -> Path:
    path.write_text("".join(json.dumps({"ts": i, "k": i % 3}) + "\n" for i in range(rows)))
    return path


def _flow(*sources: object, name: str = "f") -> sf.Flow:
    flow = sf.Flow(name)
    for s in sources:
        flow.source(s).collect()
    return flow


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_fraction_is_bytes_read_over_the_file_size_summed_over_sources(tmp_path):
    a = sf.io.open_source(_jsonl(tmp_path / "a.jsonl", 100))
    b = sf.io.open_source(_jsonl(tmp_path / "b.jsonl", 300))
    size_a, size_b = a.path.stat().st_size, b.path.stat().st_size
    pos = {a.path: size_a, b.path: size_b // 2}  # a read to its end, b half
    model = RunProgress(_flow(a, b), position=lambda p: pos.get(p))
    assert model.known
    assert model.fraction() == pytest.approx((size_a + size_b // 2) / (size_a + size_b))
    # a file not open: 0 before its source read anything, all of it once it has (closed)
    pos.clear()
    assert model.fraction() == 0.0
    a.read, b.read = 100, 300
    assert model.fraction() == 1.0


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux /proc")
def test_fd_position_is_where_this_process_reads_the_file(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", 200)
    assert fd_position(path) is None
    with open(path, "rb") as f:
        f.seek(1234)
        assert fd_position(path) == 1234
        model = RunProgress(_flow(sf.io.open_source(path)))
        assert model.fraction() == pytest.approx(1234 / path.stat().st_size)


def test_rate_and_eta_from_a_fake_clock(tmp_path):
    src = sf.io.open_source(_jsonl(tmp_path / "a.jsonl", 1000))
    size = src.path.stat().st_size
    pos = {src.path: 0}
    clock = FakeClock()
    model = RunProgress(_flow(src, name="wc"), clock=clock, position=lambda p: pos.get(p))
    first = model.sample()
    assert (first.tuples, first.rate, first.eta, first.fraction) == (0, None, None, 0.0)
    clock.t += 2.0
    src.read, pos[src.path] = 400, size * 2 // 5  # 200 tuples/s, 20% of the file per second
    s = model.sample()
    assert s.rate == pytest.approx(200.0)
    assert s.fraction == pytest.approx(0.4, abs=1e-3)
    assert s.eta == pytest.approx(3.0, rel=0.01)  # 60% left at 20%/s
    assert s.elapsed == pytest.approx(2.0)
    # the rate is smoothed: one second at 1,000 tuples/s moves it part of the way only
    clock.t += 1.0
    src.read += 1000
    s2 = model.sample()
    assert 200.0 < s2.rate < 1000.0


def test_unknown_size_has_a_rate_but_no_percent_or_eta():
    src = sf.io.iterable([{"ts": i} for i in range(10)])
    clock = FakeClock()
    model = RunProgress(_flow(src), clock=clock)
    assert not model.known
    model.sample()
    clock.t += 0.5
    src.read = 50
    s = model.sample()
    assert (s.fraction, s.eta) == (None, None)
    assert s.rate == pytest.approx(100.0)
    assert format_line(s) == "progress: f 50 tuples, 100 t/s"


def test_parquet_counts_rows_from_its_footer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist([{"ts": i} for i in range(80)]), path)
    src = sf.io.open_source(path)
    model = RunProgress(_flow(src))
    src.read = 20
    assert model.fraction() == pytest.approx(0.25)


def test_parallelism_comes_from_the_runs_metrics_log(tmp_path):
    model = RunProgress(_flow(sf.io.iterable([])))
    with model.watching():
        log = MetricsLog()  # an executor makes it inside the run: announced to watchers
    log.parallelism_changed("O1", 2)
    log.parallelism_changed("O1", 4)
    log.parallelism_changed("O2", 1)
    assert model.sample().parallelism == {"O1": 4, "O2": 1}
    outside = MetricsLog()  # made outside the block: another run's, not watched
    outside.parallelism_changed("O9", 3)
    assert "O9" not in model.parallelism()


def test_the_progress_line_format():
    s = Snapshot("wordcount", 9.0, 123456, 78900.4, 0.456, 3.2, {"O1": 2, "O2": 3})
    assert format_line(s) == ("progress: wordcount 123,456 tuples (45.6%), 78,900 t/s, "
                              "ETA 3 s, parallelism O1=2, O2=3")


def _paced_app(tmp_path: Path, rows: int = 1200, rate: int = 1000) -> Path:
    data = _jsonl(tmp_path / "in.jsonl", rows)
    app = tmp_path / "app.py"
    app.write_text(
        "import stretchflow as sf\n"
        f"src = sf.io.open_source({str(data)!r})\n"
        f"src.rate = {rate}\n"
        "flow = sf.Flow('paced')\n"
        "flow.source(src).aggregate(size=100, slide=100, keys=lambda t: [t['k']],"
        " init=lambda: 0, update=lambda s, t: s + 1,"
        " output=lambda k, s: {'k': k, 'n': s})"
        f".sink({str(tmp_path / 'out.jsonl')!r})\n")
    return app


def test_off_a_terminal_the_cli_logs_a_progress_line_every_interval(tmp_path, capsys):
    app = _paced_app(tmp_path)  # 1,200 tuples at 1,000/s: about 1.2 s
    assert main(["run", str(app), "--progress-every", "0.2"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("progress: ")]
    assert len(lines) >= 3, err
    for line in lines:
        assert re.fullmatch(r"progress: paced [\d,]+ tuples \(\d+\.\d%\)(, [\d,]+ t/s)?"
                            r"(, ETA \d+ s)?", line), line
    percents = [float(re.search(r"\((\d+\.\d)%\)", x).group(1)) for x in lines]
    # the readers read ahead (1 MiB): a small file's percent is 100 from the first line on;
    # test_fraction_is_bytes_read_over_the_file_size_summed_over_sources checks the sum
    assert percents == sorted(percents)
    assert "paced on reference: 1,200 tuples in" in err  # the summary stays


def test_on_a_terminal_a_rich_bar_shows_rate_percent_and_parallelism(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from stretchflow import cli_run

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    monkeypatch.setattr(cli_run._LazyConsole, "_console", console)
    src = sf.io.open_source(_jsonl(tmp_path / "in.jsonl", 9000))
    src.rate = 6000  # 1.5 s: the bar refreshes every 0.5 s
    flow = sf.Flow("bar")
    flow.source(src).aggregate(size=100, slide=100, keys=lambda t: [t["k"]], init=lambda: 0,
                               update=lambda s, t: s + 1,
                               output=lambda k, s: {"k": k, "n": s}).collect()
    res = cli_run._run_with_progress(flow, "vsn", {"parallelism": 2}, quiet=False)
    assert res.total_in == 9000
    shown = buf.getvalue()
    # (a file this small is read ahead whole: 100% at once, so no ETA; the model's tests
    # check the ETA)
    assert re.search(r"bar ━+ \d:\d\d:\d\d [\d,]+ tuples, \d+\.\d%, [\d,]+ t/s"
                     r"(, ETA \d+ s)?, parallelism aggregate=2", shown), shown


def test_no_progress_line_for_a_run_shorter_than_the_interval_nor_with_q(tmp_path, capsys):
    app = _paced_app(tmp_path, rows=300)  # about 0.3 s
    assert main(["run", str(app), "--progress-every", "30"]) == 0
    err = capsys.readouterr().err
    assert "progress:" not in err and "paced on reference" in err
    assert main(["run", str(app), "--progress-every", "0.05", "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_log_level_debug_shows_the_runs_life_and_warning_hides_progress(tmp_path, capsys):
    app = _paced_app(tmp_path, rows=400)
    assert main(["run", str(app), "--log-level", "debug", "--progress-every", "0.1"]) == 0
    err = capsys.readouterr().err
    assert "debug: stretchflow.runtime.sinks: sinks committed: " in err
    assert "progress: paced" in err
    assert main(["run", str(app), "--log-level", "warning", "--progress-every", "0.1"]) == 0
    err = capsys.readouterr().err
    assert "progress:" not in err and "paced on reference" in err
    assert not logging.getLogger("stretchflow").handlers  # main removed its handler


def test_deadline_prints_the_violations_of_the_slack_engine(tmp_path, capsys):
    app = _paced_app(tmp_path, rows=1500, rate=1500)
    # a deadline no interval can meet: every measured interval violates it (an interval in
    # which the operators read nothing, such as the tail after the input ended, measures no
    # latency and is not counted: under load it used to show as "2 of 3 violated")
    assert main(["run", str(app), "--engine", "slack", "--deadline", "0.0001",
                 "--progress-every", "0"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"^deadline 0\.0001 ms: ([\d,]+) of ([\d,]+) intervals violated "
                  r"\(100\.00%\), worst \d+\.\d ms$", err, re.M)
    assert m and m.group(1) == m.group(2), err


@pytest.mark.parametrize("extra,expected", [
    ({"deadline_ms": 50.0, "violations": 12, "intervals": 3400,
      "e2e_latency_ms": {"max": 81.23}},
     "deadline 50 ms: 12 of 3,400 intervals violated (0.35%), worst 81.2 ms"),
    ({"deadline_ms": 50.0, "violations": 0, "intervals": 40, "e2e_latency_ms": {"max": 9.0}},
     "deadline 50 ms: none of 40 intervals violated (worst 9.0 ms)"),
    ({"deadline_ms": 50.0, "violations": 0, "intervals": 0},
     "deadline 50 ms: no interval measured (the run ended before the first)"),
    ({"deadline_ms": None, "violations": 0, "intervals": 40}, None),
])
def test_deadline_line(extra, expected, capsys):
    print_deadline(RunResult("slack", 1.0, extra=extra))
    err = capsys.readouterr().err
    assert err == ("" if expected is None else expected + "\n")


def test_a_library_run_prints_nothing_and_logs(tmp_path, capsys, caplog):
    data = _jsonl(tmp_path / "in.jsonl", 500)
    flow = sf.Flow("lib")
    flow.source(sf.io.open_source(data)).sink(str(tmp_path / "out.jsonl"))
    with caplog.at_level(logging.DEBUG, logger="stretchflow"):
        flow.run(engine="vsn", parallelism=2)
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "")
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    out_path = tmp_path / "out.jsonl"
    assert ("stretchflow.runtime.sinks", f"sinks opened: {out_path}") in messages, messages
    assert ("stretchflow.runtime.sinks", f"sinks committed: {out_path}") in messages
    assert ("stretchflow.runtime.pump", "source in.jsonl ended: 500 tuples (in batches)"
            ) in messages or ("stretchflow.runtime.pump", "source in.jsonl ended: 500 tuples"
                              ) in messages


def _ui_flow() -> sf.Flow:
    flow = sf.Flow("ui")
    flow.source(sf.io.iterable([{"ts": i} for i in range(50)])).collect()
    return flow


def test_the_live_view_url_is_a_log_record(caplog, capsys):
    from stretchflow import web

    with caplog.at_level(logging.INFO, logger="stretchflow"):
        res = _ui_flow().run(engine="vsn", ui=True, ui_wait=False)
    web.close_all()
    assert [r.getMessage() for r in caplog.records if r.name == "stretchflow.web"] == [
        f"live view: {res.extra['ui_url']} (Prometheus metrics at {res.extra['ui_url']}metrics)"]
    assert capsys.readouterr().err == ""  # logging is configured: nothing printed besides


def test_with_logging_unconfigured_a_library_caller_still_sees_the_url(monkeypatch, capsys):
    from stretchflow import web

    # no handler anywhere (pytest puts its own on the root logger; cut that path off)
    monkeypatch.setattr(logging.getLogger("stretchflow"), "propagate", False)
    res = _ui_flow().run(engine="vsn", ui=True, ui_wait=False)
    web.close_all()
    assert capsys.readouterr().err == (f"live view: {res.extra['ui_url']} (Prometheus metrics "
                                       f"at {res.extra['ui_url']}metrics)\n")
    # a level above WARNING set by the application is obeyed
    monkeypatch.setattr(logging.getLogger("stretchflow"), "level", logging.ERROR)
    _ui_flow().run(engine="vsn", ui=True, ui_wait=False)
    web.close_all()
    assert capsys.readouterr().err == ""


#: modules that are command-line code (they print what a command outputs). A command whose
#: work is in a library module still prints from here (``stretchflow cat``: cli.cmd_cat writes
#: what io.parts.cat_lines yields): no library function is an exception
CLI_MODULES = ("cli.py", "cli_run.py", "demo.py", "__main__.py")


def _prints(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, enclosing function)`` of each ``print(...)`` outside
    ``if __name__ == "__main__":`` blocks."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            func = node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "print"):
            found.append((node.lineno, func))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "")
    return found


def test_no_library_module_prints():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in CLI_MODULES:
            continue
        for line, func in _prints(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{rel}:{line} ({func or 'module'})")
    assert offenders == [], "library modules log (logging.getLogger(__name__)), never print"


def test_the_print_check_finds_a_print():
    code = ("def f():\n    print('x')\n"
            "if __name__ == '__main__':\n    print('ok')\n")
    assert _prints(ast.parse(code)) == [(2, "f")]


def test_cli_logging_rejects_an_unknown_level():
    from stretchflow.logs import cli_logging

    with pytest.raises(ValueError, match="--log-level expects one of debug, info"), \
            cli_logging("loud"):
        pass


def test_a_summary_off_a_terminal_is_written_as_it_is_without_rich(tmp_path):
    # the run summary is a plain line: written without importing rich (~50 ms of every run),
    # the text unchanged (brackets and colons are not markup or emoji codes)
    import subprocess
    import sys

    data = tmp_path / "in [x]:smile:.jsonl"
    data.write_text("".join(json.dumps({"ts": i, "text": f"w{i % 7} x"}) + "\n"
                            for i in range(500)))
    code = ("import runpy, sys\n"
            "sys.argv = ['stretchflow', 'run', 'wordcount', '--input', sys.argv[1], "
            "'--output', sys.argv[2]]\n"
            "try:\n    runpy.run_module('stretchflow', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('rich' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(data), str(tmp_path / "o.jsonl")],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items()
                               if k not in ("FORCE_COLOR", "TTY_COMPATIBLE",
                                            "TTY_INTERACTIVE")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert re.search(r"^wordcount on reference: 500 tuples in, [\d,]+ out", proc.stderr, re.M)


def test_a_plain_line_makes_no_console(monkeypatch, capsys):
    from stretchflow import cli_run

    monkeypatch.setattr(cli_run._LazyConsole, "_console", None)
    cli_run.err.print("a [bold]b[/] :smile:", markup=False, highlight=False)
    assert capsys.readouterr().err == "a [bold]b[/] :smile:\n"
    assert cli_run._LazyConsole._console is None  # no console made for a plain line


def test_the_bar_draws_on_the_stderr_console_even_before_it_was_made(monkeypatch, tmp_path):
    # is_terminal no longer makes the console: the bar must make it, not fall back to rich's
    # global console (stdout)
    from stretchflow import cli_run

    monkeypatch.setattr(cli_run._LazyConsole, "_console", None)
    model = RunProgress(_flow(sf.io.open_source(_jsonl(tmp_path / "a.jsonl", 10))))
    bar = cli_run._Bar(model, "starting")
    assert bar.progress.console is cli_run._LazyConsole._console is not None
    assert bar.progress.console.stderr
