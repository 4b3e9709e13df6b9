"""A script that runs its flow on process channels at its top level, without
``if __name__ == "__main__":`` (the README's ten-line flow as a user first writes it): the
channels start without running the script again, so it gives the reference's output, with
nothing leaked; what the channels then cannot load is said in one line
(:mod:`stretchflow.runtime.script_main`)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from stretchflow.runtime.script_main import _guarded
from threadutil import group_gone

FLOW = '''\
import dataclasses
import stretchflow as sf

@dataclasses.dataclass(frozen=True)
class Tag:
    name: str

flow = sf.Flow("longest-tweet-per-hashtag")
tweets = flow.source(sf.io.jsonl("tweets.jsonl"))
{extra}longest = tweets.aggregate(
    size="60min", slide="30min",
    keys=lambda t: {{w for w in t["text"].split() if w.startswith("#")}},
    init=int, update=lambda chars, t: max(chars, len(t["text"])),
    output=lambda tag, chars: {{"hashtag": tag, "chars": chars}})
longest.sink("longest.jsonl")
{run}
'''

TAGS = ["#a", "#b", "#c", "#d", "#e"]


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    with (tmp_path / "tweets.jsonl").open("w") as f:
        for i in range(600):
            text = " ".join(["w" * (i % 17)] + TAGS[i % 5: i % 5 + 1 + i % 3])
            f.write(json.dumps({"ts": i * 60_000, "text": text}) + "\n")
    return tmp_path


def _run_script(workdir: Path, run: str, extra: str = "") -> tuple[subprocess.CompletedProcess,
                                                                   Counter]:
    """Runs the flow as ``python script.py`` in a session of its own; every process it
    started (channels, fork server, resource tracker) must be gone after it."""
    script = workdir / "script.py"
    script.write_text(FLOW.format(run=run, extra=extra))
    (workdir / "longest.jsonl").unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=workdir, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()  # only if the test failed on a timeout
    assert group_gone(proc.pid), "a process of the script's run outlived it"
    assert "leaked" not in err, err
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    path = workdir / "longest.jsonl"
    rows = path.read_text().splitlines() if path.exists() else []
    return done, Counter(rows)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_unguarded_script_on_process_channels_gives_the_reference_output(workdir, start_method):
    ref, want = _run_script(workdir, 'flow.run(engine="reference")')
    assert ref.returncode == 0, ref.stderr
    done, got = _run_script(workdir, "print(flow.run(engine=\"sn\", channels=\"processes\", "
                                     f"parallelism=2, start_method={start_method!r}))")
    assert done.returncode == 0, done.stderr
    assert got == want and want
    # the script ran once: one summary, not one more per channel
    assert done.stdout.count("tuples in") == 1, done.stdout


def test_unguarded_run_in_a_function_called_at_top_level(workdir):
    ref, want = _run_script(workdir, 'flow.run(engine="reference")')
    done, got = _run_script(workdir, textwrap.dedent('''\
        def main():
            return flow.run(engine="sn", channels="processes", parallelism=2)
        main()'''))
    assert done.returncode == 0, done.stderr
    assert got == want and want


def test_guarded_script_still_loads_its_own_classes_in_the_channels(workdir):
    # behind the guard the channels run the script as __mp_main__, as multiprocessing does,
    # so a record holding an instance of a class the script defines reaches them
    extra = 'tweets = tweets.map(lambda t: {**t, "tag": Tag("x")})\n'
    ref, want = _run_script(workdir, 'flow.run(engine="reference")', extra)
    done, got = _run_script(workdir, 'if __name__ == "__main__":\n    flow.run(engine="sn", '
                                     'channels="processes", parallelism=2)', extra)
    assert done.returncode == 0, done.stderr
    assert got == want and want


def test_unguarded_script_whose_records_hold_its_classes_is_told_to_add_the_guard(workdir):
    extra = 'tweets = tweets.map(lambda t: {**t, "tag": Tag("x")})\n'
    done, got = _run_script(workdir, 'flow.run(engine="sn", channels="processes", '
                                     'parallelism=2)', extra)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert ('script.py: line 17: flow.run() is not under `if __name__ == "__main__":`' in last
            and "Can't get attribute 'Tag'" in last and "put the run under that guard" in last)
    assert not got  # nothing committed


@pytest.mark.parametrize("source, line, guarded", [
    ('x = 1\nrun()\n', 2, False),
    ('if __name__ == "__main__":\n    run()\n', 2, True),
    ("if '__main__' == __name__:\n    run()\n", 2, True),
    ('if __name__ != "__main__":\n    pass\nelse:\n    run()\n', 4, True),
    ('if __name__ != "__main__":\n    run()\n', 2, False),
    ('if __name__ == "__main__":\n    pass\nelse:\n    run()\n', 4, False),
    ('try:\n    if __name__ == "__main__":\n        run(\n            1)\nfinally:\n    pass\n',
     4, True),
    ('if debug:\n    run()\n', 2, False),
])
def test_main_guard_detection(source, line, guarded):
    assert _guarded(ast.parse(source).body, line) is guarded
