"""Start-up of ``stretchflow run`` (issue #16): the query registry is lazy — a run imports only
the query it runs, the parser builds no epilog until help is printed — and the reference
executor's read-ahead and write-behind threads (executors/reference_overlap.py) keep order and
errors, and stop."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from stretchflow.executors.reference_overlap import WriteBehind, read_ahead
from threadutil import blocked, wait_blocked, wait_until, within

QUERY_MODULES = ("stretchflow.queries.", "stretchflow.workloads.")


def _imported_after(code: str) -> list[str]:
    """The query and workload modules a fresh interpreter holds after running ``code``."""
    probe = (f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(m for m in sys.modules "
             f"if m.startswith({QUERY_MODULES!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_run_imports_only_the_query_it_runs(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"ts": i * 1000, "user": "u", "text": f"a b{i % 3}"})
                           + "\n" for i in range(50)))
    out = tmp_path / "o.jsonl"
    code = ("from stretchflow.cli import main\n"
            f"assert main(['run', 'wordcount', '--input', {str(src)!r}, '--output', "
            f"{str(out)!r}, '--param', 'size=4000', '--param', 'slide=2000', '-q']) == 0")
    # the light query modules the package imports itself; no join, band kernel or TPCx-BB
    assert _imported_after(code) == ["stretchflow.queries.longest_hashtag",
                                     "stretchflow.queries.wordcount"]
    assert out.read_text().count("\n") > 0


def test_parser_builds_without_importing_queries():
    assert _imported_after("from stretchflow.cli import build_parser\nbuild_parser()") == []


def test_help_epilog_is_made_when_help_is_printed(capsys):
    from stretchflow.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--help"])
    out = capsys.readouterr().out
    assert "built-in queries (stretchflow queries" in out
    assert "  tpcxbb-q15         TPCx-BB Q15: categories" in out
    assert "<built-in queries>" not in out


def test_registry_names_in_order_and_lookups():
    from stretchflow.queries import QUERIES, get_query

    names = list(QUERIES)
    assert names[:3] == ["wordcount", "paircount", "longest-hashtag"]
    assert names[-10:] == ["tpcxbb-q15", *(f"nexmark-q{i}" for i in range(9))]
    assert len(QUERIES) == len(names) == 21
    assert "hedge" in QUERIES and "nope" not in QUERIES
    assert QUERIES.get("nope") is None
    with pytest.raises(KeyError):
        QUERIES["nope"]
    assert QUERIES["paircount"] is QUERIES["paircount"]  # made once
    assert QUERIES["paircount"].params == {"size": 120_000, "slide": 60_000, "distance": 3}
    assert QUERIES["tpcxbb-q15"].data == "store-sales"
    with pytest.raises(ValueError, match="unknown query 'nope'; queries: wordcount, paircount"):
        get_query("nope")


def test_operators_import_from_the_package():
    import stretchflow.queries as q
    from stretchflow.queries import QUERIES, Forward, Hedge, longest_hashtag, wordcount
    from stretchflow.queries.hedge import Hedge as H
    from stretchflow.queries.longest_hashtag import longest_hashtag as lh
    from stretchflow.queries.scalejoin import Forward as F
    from stretchflow.queries.wordcount import wordcount as w

    QUERIES["longest-hashtag"], QUERIES["wordcount"]  # noqa: B018 - imports their modules
    # the functions, not the submodules of the same name
    assert (Hedge, Forward, wordcount, longest_hashtag) == (H, F, w, lh)
    assert (q.wordcount, q.longest_hashtag) == (w, lh)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        q.nothing  # noqa: B018


# -- read ahead, write behind ------------------------------------------------------------------

def _named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def _gone(prefix: str, bound: float = 5.0) -> bool:
    return within(lambda: not _named(prefix), bound)


def test_read_ahead_keeps_order_and_raises_after_the_items_before():
    def items():
        yield from range(5)
        raise ValueError("line 6: bad")

    got = []
    with pytest.raises(ValueError, match="line 6: bad"):
        for x in read_ahead(items(), "t-ra-1"):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert _gone("t-ra-1")


def test_read_ahead_reads_at_most_depth_ahead_and_stops_when_closed():
    read = []
    closed = []

    def items():
        try:
            for i in range(100):
                read.append(i)
                yield i
        finally:
            closed.append(True)

    it = read_ahead(items(), "t-ra-2", depth=1)
    assert next(it) == 0
    [reader] = _named("t-ra-2")  # started by the first next()
    # the caller holds 0, the thread has read 1 and waits for the caller to take it
    wait_until(lambda: read == [0, 1] and blocked(reader), 5, "the thread waits after 1")
    assert read == [0, 1]
    assert next(it) == 1
    wait_until(lambda: read == [0, 1, 2] and blocked(reader), 5, "the thread waits after 2")
    assert read == [0, 1, 2]
    it.close()
    assert _gone("t-ra-2")
    assert closed == [True]


def test_write_behind_calls_in_order_and_waits_at_the_end():
    calls = []

    def slow(kind):
        def call(x):
            time.sleep(0.01)  # a slow write: the calls queue up behind it
            calls.append((kind, x))
        return call

    with WriteBehind(slow("w"), slow("b"), "t-wb-1") as w:
        for i in range(6):
            (w.write if i % 2 else w.write_batch)(i)
    assert calls == [("b", 0), ("w", 1), ("b", 2), ("w", 3), ("b", 4), ("w", 5)]
    assert _gone("t-wb-1")


def test_write_behind_hands_over_the_next_call_when_the_last_is_done():
    started, release = threading.Event(), threading.Event()
    done = []

    def write(x):
        started.set()
        release.wait(10)
        done.append(x)

    with WriteBehind(write, write, "t-wb-4") as w:
        w.write(0)
        assert started.wait(5)
        handed = threading.Event()
        t = threading.Thread(target=lambda: (w.write(1), handed.set()))
        t.start()
        wait_blocked(t)
        assert not handed.is_set()  # depth 1: write(0) under way, so write(1) waits
        release.set()
        assert handed.wait(5)
        t.join(5)
    assert done == [0, 1]
    assert _gone("t-wb-4")


def test_write_behind_raises_a_write_error_on_the_run_thread():
    def write(x):
        if x == 2:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):  # at a later call or at the end
        with WriteBehind(write, write, "t-wb-2") as w:
            for i in range(50):
                w.write(i)
                time.sleep(0.005)  # paced: the error usually comes at a later call
    assert _gone("t-wb-2")


def test_write_behind_drops_pending_calls_when_the_run_fails():
    calls = []
    started, release = threading.Event(), threading.Event()

    def write(x):
        started.set()
        release.wait(10)
        calls.append(x)

    with pytest.raises(RuntimeError, match="compute failed"):
        with WriteBehind(write, write, "t-wb-3", depth=4) as w:
            for i in range(4):
                w.write(i)
            assert started.wait(5)
            raise RuntimeError("compute failed")  # while write(0) is under way
    release.set()
    assert _gone("t-wb-3")
    assert calls == [0]  # the call under way ends; the queued ones are dropped
