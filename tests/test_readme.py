"""The README's example flow runs as written."""

import re
from pathlib import Path

from stretchflow.io.generators import tweets, write_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_flow(tmp_path, monkeypatch, capsys):
    code = re.search(r"## A flow in ten lines\n\n```python\n(.*?)```", README.read_text(),
                     re.S).group(1)
    monkeypatch.chdir(tmp_path)
    write_table(tweets(3000, seed=2), tmp_path / "tweets.jsonl")
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    # print(result) is RunResult.summary(): its first line names the engine and the counts
    first = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"reference: 3,000 tuples in, [\d,]+ out, [\d.]+ s, [\d,]+ tuples/s",
                        first), first
    lines = (tmp_path / "longest.jsonl").read_text().splitlines()
    assert lines and all('"hashtag":"#' in line for line in lines)


def test_readme_example_as_a_flow_file_runs_once(tmp_path, monkeypatch, capsys):
    """Saved as a file and given to ``stretchflow run``, the example runs once, with the
    command line's options (its own ``flow.run()`` is guarded by ``__main__``)."""
    from stretchflow.cli import main

    code = re.search(r"## A flow in ten lines\n\n```python\n(.*?)```", README.read_text(),
                     re.S).group(1)
    monkeypatch.chdir(tmp_path)
    write_table(tweets(3000, seed=2), tmp_path / "tweets.jsonl")
    (tmp_path / "app.py").write_text(code)
    assert main(["run", "app.py", "--engine", "vsn", "--parallelism", "2"]) == 0
    out = capsys.readouterr()
    assert "reference:" not in out.out + out.err  # the file's own run did not happen
    lines = (tmp_path / "longest.jsonl").read_text().splitlines()
    assert lines and all('"hashtag":"#' in line for line in lines)
