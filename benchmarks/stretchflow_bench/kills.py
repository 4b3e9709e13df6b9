"""``stretchflow bench run kills``: random kill-and-resume cycles, recorded (issue #17: "100
random kill-and-resume cycles per engine ... end with output identical to an uninterrupted
run, and no leftover process or file").

The tests run 20 cycles of the reference, vsn and sn engines (``tests/test_checkpoint_*.py``,
slow marker); a Spark streaming run starts a JVM (20-40 s on two cores), so its cycles cannot
run inside ``make test`` and are recorded here instead. The harness is the same for every
engine (``spark`` by default, ``reference``, ``vsn``, ``sn`` with process channels,
``ordered``, ``slack``):

1. the uninterrupted command once (its own output, checkpoint and TMPDIR), timed: ``full_s``;
2. per cycle, with a fresh output, checkpoint directory and TMPDIR (the child's ``TMPDIR``,
   where a local Spark session also keeps its scratch space, ``spark/session.py``): start the
   command with ``--checkpoint`` in its own session, SIGKILL its whole process group (the
   driver's JVM is in it) after a random delay — the cycle's first kill uniform in
   :data:`FIRST_KILL` x full_s, inside the measured run, a resumed run's uniform up to
   :data:`AGAIN` x full_s, widened 1.25x per kill in a row; 40 kills in a row fail the
   bench — and run the same command again until one exits 0. A cycle counts only when its
   first kill landed: a run that ended before it (or between the timeout and the signal) is
   drawn again (``missed_draws``), so every cycle is a kill and a resume;
3. compare the output with the uninterrupted run's as per-timestamp multisets of records (a
   Spark part directory through :func:`stretchflow.io.parts.read_parts`), and look for
   leftovers: a process of the run's session still alive (after every kill and after the
   completed run; waited for up to ``SETTLE_S``), a temporary file beside the output, in the
   part directory or in the checkpoint directory, a local engine's checkpoint not cleared, a
   ``stretchflow-*`` directory in the TMPDIR.

Spark's own scratch directories (``spark-*``, ``blockmgr-*``), which a SIGKILLed JVM cannot
remove, live in a pid-named ``stretchflow-spark-*`` directory that the next run sweeps (so one
left after the completed run is a leftover); any found directly in the TMPDIR are counted
apart (``spark_scratch_left``: a session given its own ``spark.local.dir`` would put them
there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from stretchflow.runtime import procfs

from .common import git_commit, repeat_probe, results_dir, summarize, write_result

NAME = "kills"
ENGINES = ("spark", "reference", "vsn", "sn", "ordered", "slack")
MANIFEST = "_checkpoint.json"  # stretchflow.runtime.checkpoint.MANIFEST (read, never written)
PARAMS = {"size": 60_000, "slide": 20_000}
#: kills in a row after which a cycle fails (the 41st run is never killed early enough)
MAX_KILLS_IN_ROW = 40
#: how long a killed or finished run's session may take to empty (an orphaned JVM or PySpark
#: worker notices its parent is gone through a closed pipe, not a signal)
SETTLE_S = 30.0
#: engine -> the delay bound of a resumed run's kill, in units of the uninterrupted run's wall
#: time: a Spark restart pays the JVM start again, so it gets as long as a whole first run
AGAIN = {"spark": 1.5, "reference": 1.0, "vsn": 2.0, "sn": 2.0, "ordered": 2.0, "slack": 2.0}
#: a cycle's first kill, as fractions of the uninterrupted run's measured time: drawn inside
#: the run (issue #33: a kill drawn up to 1.5x the run time missed 26-72 of 100 cycles)
FIRST_KILL = (0.02, 0.9)
#: draws a cycle may take before one lands (the run ended before its kill: drawn again)
MAX_DRAWS = 20
#: the uninterrupted run's bound (it is never killed before)
UNINTERRUPTED_TIMEOUT_S = 1800.0


class KillsError(RuntimeError):
    """A cycle could not complete (a run failed, or was killed too often in a row)."""


# -- inputs and commands ----------------------------------------------------------------------
def write_inputs(tmp: Path, rows: int, seed: int, files: int) -> tuple[Path, Path]:
    """The same tweets as one JSON Lines file (reference, vsn) and as a directory of ``files``
    files plus the end-of-input marker, mtimes increasing (Spark's file source reads in mtime
    order). Tweets at 10/s: the input spans rows/10 s of event time, so the 60 s windows
    sliding by 20 s close throughout the run and most micro-batches have output."""
    from stretchflow.io.generators import tweets
    from stretchflow.spark.streaming import end_marker

    recs = tweets(rows, seed=seed, rate=10, vocabulary=200).to_pylist()
    one = tmp / "tweets.jsonl"
    one.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    d = tmp / "tweets-dir"
    d.mkdir()
    step = -(-len(recs) // files)
    texts = [b"".join(orjson.dumps(r) + b"\n" for r in recs[i:i + step])
             for i in range(0, len(recs), step)] + [end_marker(recs[-1]["ts"]).encode()]
    base = time.time() - 10_000
    for k, text in enumerate(texts):
        p = d / f"f-{k:05d}.jsonl"
        p.write_bytes(text)
        os.utime(p, (base + k, base + k))
    return one, d


def command(engine: str, inputs: tuple[Path, Path], out: Path, ck: Path, tmpdir: Path,
            every: int) -> list[str]:
    """The ``stretchflow run`` command of one run of ``engine``, output ``out``, checkpoint
    ``ck``; ``every``: the local engine's checkpoint interval in tuples."""
    cmd = [sys.executable, "-m", "stretchflow.cli", "run", "wordcount", "-q",
           *(a for k, v in PARAMS.items() for a in ("--param", f"{k}={v}")),
           "--output", str(out), "--checkpoint", str(ck)]
    if engine == "spark":
        # one file per micro-batch: kills land between, inside and during commits of batches
        return cmd + ["--input", str(inputs[1]), "--engine", "spark",
                      "--max-files-per-trigger", "1",
                      "--spark-conf", "spark.sql.shuffle.partitions=2"]
    # tuple at a time: the columnar path checkpoints at most once per 16 384-tuple batch
    extra = {"reference": ["--columnar", "off"],
             "sn": ["--parallelism", "2", "--channels", "processes"]}.get(
        engine, ["--parallelism", "2"])
    return cmd + ["--input", str(inputs[0]), "--engine", engine, *extra,
                  "--checkpoint-every", str(every)]


# -- processes --------------------------------------------------------------------------------
def session_members(sid: int) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every live process of session ``sid`` (``/proc``);
    zombies excluded (dead, only not yet reaped by their parent)."""
    found = []
    for pid in procfs.pids():
        rest = procfs.stat_fields(pid)
        try:
            if rest is None or int(rest[3]) != sid or rest[0] == "Z":
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        found.append((pid, rest[0], cmdline[:200]))
    return found


def settle(sid: int) -> list[str]:
    """Waits up to ``SETTLE_S`` for session ``sid`` to have no live process; returns the ones
    still alive then (each then SIGKILLed, so that one leftover does not spoil later cycles)."""
    deadline = time.monotonic() + SETTLE_S
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [f"process {pid} ({state}) alive {SETTLE_S:.0f} s after its run ended: {cmd}"
            for pid, state, cmd in left]


def has_checkpoint(engine: str, ck: Path) -> bool:
    """Whether a resume would find a checkpoint: a committed micro-batch in Spark's
    ``commits/``, or a local engine's manifest."""
    if engine == "spark":
        commits = ck / "commits"
        return commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir())
    return (ck / MANIFEST).is_file()


def run_until_done(cmd: list[str], env: dict[str, str], engine: str, ck: Path, log: Path,
                   first: float, again: float, rng: random.Random | None,
                   stats: dict[str, Any]) -> None:
    """Starts ``cmd`` in its own session and SIGKILLs its process group after a random delay,
    again and again until a run exits 0 (see the module's docstring); counts into ``stats``
    and appends leftover processes to ``stats["leftovers"]``. Raises KillsError when a run
    fails or after ``MAX_KILLS_IN_ROW`` kills in a row. ``rng`` None: the uninterrupted run,
    killed only after ``UNINTERRUPTED_TIMEOUT_S`` (then a KillsError too)."""
    for row in range(MAX_KILLS_IN_ROW + 1):
        with open(log, "wb") as err:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err, env=env, start_new_session=True)
        if rng is None:
            delay = UNINTERRUPTED_TIMEOUT_S
        elif row == 0:  # the cycle's first kill: inside the measured run time
            delay = rng.uniform(*FIRST_KILL) * first
        else:
            delay = rng.uniform(0.0, again * 1.25 ** row)
        try:
            rc = p.wait(delay)
        except subprocess.TimeoutExpired:
            if rng is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise KillsError(f"bench kills: the uninterrupted {engine} run took more than "
                                 f"{UNINTERRUPTED_TIMEOUT_S:.0f} s: {' '.join(cmd)}") from None
            members = session_members(p.pid)
            stats["kills_with_jvm"] += any("java" in c.split(" ", 1)[0] for _, _, c in members)
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
            if rc == 0:  # it ended between the timeout and the signal: the kill missed
                stats["leftovers"] += settle(p.pid)
                return
            stats["kills"] += 1
            stats["kills_with_checkpoint"] += has_checkpoint(engine, ck)
            stats["leftovers"] += settle(p.pid)
            stats["restarts"] += 1
            continue
        stats["leftovers"] += settle(p.pid)
        if rc != 0:
            raise KillsError(f"bench kills: {engine} run exited with {rc} after "
                             f"{stats['kills']} kills: {' '.join(cmd)}\n"
                             f"{log.read_text(errors='replace')[-2000:]}")
        return
    raise KillsError(f"bench kills: {engine}: killed {MAX_KILLS_IN_ROW + 1} times in a row "
                     f"without completing: {' '.join(cmd)}")


# -- outputs and leftovers --------------------------------------------------------------------
def records(path: Path) -> list[tuple[int, bytes]]:
    """The output as (ts, record) pairs in output order, each record canonical JSON (sorted
    keys): a part directory through the parts reader, a file line by line. Raises ValueError
    naming the output and record when one has no integer ts."""
    from stretchflow.io.parts import read_parts

    if path.is_dir():
        it: Any = read_parts(path)
    else:
        it = (orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())
    got = []
    for n, r in enumerate(it, 1):
        if not isinstance(r, dict) or not isinstance(r.get("ts"), int):
            raise ValueError(f"bench kills: {path}, record {n}: no integer ts: {r!r:.200}")
        got.append((r["ts"], orjson.dumps(r, option=orjson.OPT_SORT_KEYS)))
    return got


def same_output(got: list[tuple[int, bytes]], want: list[tuple[int, bytes]]) -> bool:
    """Equal per-timestamp multisets, and ``got`` ts-sorted (one stream, as every engine's)."""
    ts = [t for t, _ in got]
    return ts == sorted(ts) and sorted(got) == sorted(want)


def leftover_files(engine: str, out: Path, ck: Path, tmpdir: Path) -> list[str]:
    """Temporary files beside ``out``, in its part directory and in the checkpoint directory;
    a local engine's checkpoint not cleared; ``stretchflow-*`` directories in the TMPDIR."""
    from stretchflow.io.parts import is_temp

    left = [f"temp file beside the output: {f.name}" for f in out.parent.iterdir()
            if f.name.startswith(".")]
    if out.is_dir():
        left += [f"temp file in the part directory: {f.name}" for f in out.iterdir()
                 if is_temp(f.name) or ".tmp" in f.name]
    if ck.exists():
        left += [f"temp file in the checkpoint: {f.relative_to(ck)}" for f in ck.rglob("*")
                 if ".tmp" in f.name]
        if engine != "spark" and (ck / MANIFEST).exists():
            left.append("checkpoint not cleared after the completed run")
    left += [f"temp directory in TMPDIR: {d.name}" for d in tmpdir.iterdir()
             if d.name.startswith("stretchflow-") and d.is_dir()]
    return left


def spark_scratch(tmpdir: Path) -> list[str]:
    """Spark's scratch directories in ``spark.local.dir`` (a SIGKILLed JVM cannot remove
    them)."""
    return sorted(d.name for d in tmpdir.iterdir()
                  if d.is_dir() and d.name.startswith(("spark-", "blockmgr-")))


def other_temp(tmpdir: Path) -> list[str]:
    """What else is in the TMPDIR: neither a ``stretchflow-*`` entry (the kept Spark log and
    log4j settings are files; a directory is a leftover) nor Spark's scratch; e.g. a
    library's ``tmp*`` directory a killed run could not remove. Recorded, not judged."""
    return sorted(d.name for d in tmpdir.iterdir() if not d.name.startswith(
        ("stretchflow-", "spark-", "blockmgr-")))


# -- one engine -------------------------------------------------------------------------------
def run_engine(engine: str, cycles: int, inputs: tuple[Path, Path], rows: int, tmp: Path,
               seed: int, progress: Callable[[str], None] | None = None,
               on_cycle: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The uninterrupted run and ``cycles`` kill-and-resume cycles of ``engine``; after each
    cycle ``on_cycle`` gets the summary of the cycles so far (a partial result to write)."""
    every = max(1, rows // 12)
    work = tmp / engine
    work.mkdir()

    def dirs(name: str) -> tuple[Path, Path, Path, dict[str, str]]:
        d = work / name
        (d / "out").mkdir(parents=True)
        (d / "tmp").mkdir()
        return d / "out" / "out.jsonl", d / "ck", d / "tmp", dict(os.environ,
                                                                  TMPDIR=str(d / "tmp"))

    out, ck, tmpdir, env = dirs("uninterrupted")
    t0 = time.perf_counter()
    stats0: dict[str, Any] = {"kills": 0, "kills_with_checkpoint": 0, "kills_with_jvm": 0,
                              "restarts": 0, "leftovers": []}
    run_until_done(command(engine, inputs, out, ck, tmpdir, every), env, engine, ck,
                   work / "uninterrupted.log", 0.0, 0.0, None, stats0)
    full = time.perf_counter() - t0
    want = records(out)
    stats0["leftovers"] += leftover_files(engine, out, ck, tmpdir)
    if not want:
        raise KillsError(f"bench kills: the uninterrupted {engine} run wrote no output")
    shutil.rmtree(work / "uninterrupted")
    first, again = full, AGAIN[engine] * full
    rng = random.Random(seed)
    per: list[dict[str, Any]] = []
    for c in range(1, cycles + 1):
        # a cycle counts only when its first kill landed (the run was still going): a run that
        # ended first is not a kill-and-resume cycle, and the cycle is drawn again
        draws, carried = 0, []  # what a run that ended first left behind still counts
        while draws < MAX_DRAWS:
            draws += 1
            out, ck, tmpdir, env = dirs(f"cycle-{c}")
            stats: dict[str, Any] = {"kills": 0, "kills_with_checkpoint": 0,
                                     "kills_with_jvm": 0, "restarts": 0, "leftovers": []}
            with repeat_probe() as probe:
                run_until_done(command(engine, inputs, out, ck, tmpdir, every), env, engine,
                               ck, work / "cycle.log", first, again, rng, stats)
            if stats["kills"]:
                break
            carried += [f"(a run that ended before its kill) {x}" for x in
                        stats["leftovers"] + leftover_files(engine, out, ck, tmpdir)]
            shutil.rmtree(work / f"cycle-{c}")
        if not stats["kills"]:
            raise KillsError(f"bench kills: {engine} cycle {c}: the run ended before its kill "
                             f"in {MAX_DRAWS} draws (uninterrupted run {full:.2f} s)")
        stats["draws"] = draws
        stats["leftovers"] = carried + stats["leftovers"]
        identical = same_output(records(out), want)
        stats["leftovers"] += leftover_files(engine, out, ck, tmpdir)
        per.append({"cycle": c, **stats, "identical": identical,
                    "spark_scratch_left": len(spark_scratch(tmpdir)),
                    "other_temp_left": other_temp(tmpdir),
                    "wall_s": probe["wall_s"], "probe": probe})
        shutil.rmtree(work / f"cycle-{c}")
        if progress:
            progress(f"kills: {engine} cycle {c}/{cycles}: {stats['kills']} kills "
                     f"({stats['kills_with_checkpoint']} with a checkpoint), identical "
                     f"{identical}, leftovers {len(stats['leftovers'])}, "
                     f"{probe['wall_s']:.0f} s, load {probe['load_after']:.2f}")
        if on_cycle is not None and c < cycles:
            on_cycle(_summary(engine, per, cycles, rows, every, full, want, first, again,
                              stats0))
    return _summary(engine, per, cycles, rows, every, full, want, first, again, stats0)


def _summary(engine: str, per: list[dict[str, Any]], cycles: int, rows: int, every: int,
             full: float, want: Any, first: float, again: float, stats0: dict[str, Any]
             ) -> dict[str, Any]:
    """One engine's entry of kills.json over the cycles done (``per``) of ``cycles``."""
    commit, dirty = git_commit()
    return {
        "cycles": len(per),
        "cycles_planned": cycles,
        "complete": len(per) == cycles,
        "commit": commit,  # an engine's entry may come from another run than the others'
        "commit_dirty": dirty,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
        "checkpoint_every": None if engine == "spark" else every,
        "uninterrupted_s": full,
        "output_records": len(want),
        "delay_bounds_s": {"first": first, "again": again},
        **{k: sum(x[k] for x in per) for k in
           ("kills", "kills_with_checkpoint", "kills_with_jvm", "restarts",
            "spark_scratch_left")},
        # every cycle had a kill that landed (its first); draws beyond one per cycle were runs
        # that ended before their kill, not counted as cycles
        "cycles_with_kill": sum(x["kills"] > 0 for x in per),
        "missed_draws": sum(x.get("draws", 1) - 1 for x in per),
        "identical_cycles": sum(x["identical"] for x in per),
        "identical": all(x["identical"] for x in per),
        "other_temp_left": sorted({n for x in per for n in x["other_temp_left"]}),
        "leftovers": [f"uninterrupted: {s}" for s in stats0["leftovers"]]
        + [f"cycle {x['cycle']}: {s}" for x in per for s in x["leftovers"]],
        "wall_s": summarize([x["wall_s"] for x in per]),
        "load_1min": summarize([x["probe"]["load_before"] for x in per]),
        "per_cycle": per,
    }


def run(quick: bool = False, out_dir: str | os.PathLike | None = None,
        engines: tuple[str, ...] | None = None, cycles: dict[str, int] | None = None,
        rows: int | None = None, seed: int = 1,
        progress: Callable[[str], None] | None = None) -> Path:
    """Records the cycles of ``engines`` (quick: reference 3 cycles and spark 1 on a small
    input; else spark 100) into ``kills.json`` and ``kills.png``; returns the JSON's path.
    Raises KillsError (after writing the JSON) when a cycle's output differs or something
    was left behind."""
    if engines is None:
        engines = ("reference", "spark") if quick else ("spark",)
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        raise ValueError(f"bench kills: unknown engine(s) {bad}: use {', '.join(ENGINES)}")
    want = {e: (cycles or {}).get(e, (3 if e != "spark" else 1) if quick else 100)
            for e in engines}
    rows = rows if rows is not None else (600 if quick else 2000)
    if rows < 100 or min(want.values()) < 1:
        raise ValueError(f"bench kills: rows must be >= 100 and cycles >= 1, got rows={rows}, "
                         f"cycles={want}")
    # a full run keeps the entries of the engines it does not run (each entry says its own
    # commit and time): the spark cycles take hours and are run apart from the local ones
    kept = {} if quick else _previous(out_dir, seed, engines)
    metrics: dict[str, Any] = {}

    def write(partial: dict[str, Any] | None = None, engine: str | None = None) -> Path:
        m = {**kept, **metrics, **({engine: partial} if engine and partial else {})}
        params = {"quick": quick, "engines": list(m), "cycles": {e: v["cycles"] for e, v in
                                                                 m.items()},
                  "cycles_planned": {e: v.get("cycles_planned", v["cycles"])
                                     for e, v in m.items()},
                  "rows": {e: v["rows"] for e, v in m.items()}, "seed": seed,
                  "query": "wordcount", **PARAMS,
                  "first_kill": FIRST_KILL, "again": AGAIN, "max_draws": MAX_DRAWS,
                  "settle_s": SETTLE_S, "max_kills_in_row": MAX_KILLS_IN_ROW,
                  "kill": "SIGKILL to the run's process group (started in its own session)"}
        ok = all(v["identical"] and not v["leftovers"] for v in m.values())
        plot(m, results_dir(out_dir) / f"{NAME}.png", quick)
        return write_result(NAME, params, m, out_dir, plot=f"{NAME}.png",
                            outputs_identical=ok, complete=all(v.get("complete", True)
                                                               for v in m.values()))

    with tempfile.TemporaryDirectory(prefix="sf-bench-kills-") as tmp_s:
        tmp = Path(tmp_s)
        inputs = write_inputs(tmp, rows, seed, files=3 if quick else 8)
        for e in engines:
            # the JSON is rewritten after every cycle: a run stopped early (hours of spark
            # cycles) still records the cycles it did, marked incomplete
            metrics[e] = run_engine(e, want[e], inputs, rows, tmp, seed, progress,
                                    on_cycle=lambda part, e=e: write(part, e))
            write()
    path = write()
    ok = all(m["identical"] and not m["leftovers"] for m in metrics.values())
    if not ok:
        raise KillsError(f"bench kills: a cycle's output differs or it left something behind "
                         f"(results in {path})")
    return path


def _previous(out_dir: str | os.PathLike | None, seed: int,
              engines: tuple[str, ...]) -> dict[str, Any]:
    """The complete entries of other engines in an existing full-run kills.json with the
    same seed (each entry records its own rows, commit and time)."""
    path = results_dir(out_dir) / f"{NAME}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    p = doc.get("parameters", {})
    if p.get("quick") or p.get("seed") != seed:
        return {}
    return {e: {"commit": doc.get("commit"), "time": doc.get("time"), **m}
            for e, m in doc.get("metrics", {}).items()
            if e not in engines and m.get("complete", True)}


def plot(metrics: dict[str, Any], path: Path, quick: bool) -> Path:
    """Kills per cycle (bars), those that found a checkpoint on disk darker, per engine."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(6.4, 2.4 * len(metrics) + 0.6),
                             dpi=110, squeeze=False)
    for ax, (engine, m) in zip(axes[:, 0], metrics.items(), strict=True):
        cyc = [x["cycle"] for x in m["per_cycle"]]
        ax.bar(cyc, [x["kills"] for x in m["per_cycle"]], color="tab:gray", label="kills")
        ax.bar(cyc, [x["kills_with_checkpoint"] for x in m["per_cycle"]], color="tab:blue",
               label="... that found a checkpoint")
        ax.set_title(f"{engine}: {m['identical_cycles']}/{m['cycles']} identical, "
                     f"{len(m['leftovers'])} leftovers, {m['kills']} kills", fontsize=9)
        ax.set_ylabel("kills")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("cycle")
    return save_figure(plt, fig, path, quick)


def main(argv: list[str] | None = None) -> int:
    """``python -m stretchflow_bench.kills [--engine E]... [--cycles N] [--rows N] [--quick]``:
    the bench with the engines and cycles chosen, progress on stderr."""
    ap = argparse.ArgumentParser(prog="python -m stretchflow_bench.kills")
    ap.add_argument("--engine", action="append", choices=ENGINES)
    ap.add_argument("--cycles", type=int, default=None, help="cycles per engine")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    engines = tuple(a.engine) if a.engine else None
    cycles = {e: a.cycles for e in ENGINES} if a.cycles is not None else None
    path = run(quick=a.quick, out_dir=a.out, engines=engines, cycles=cycles, rows=a.rows,
               seed=a.seed, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(path)
    print(json.dumps({e: {k: m[k] for k in ("cycles", "kills", "kills_with_checkpoint",
                                            "restarts", "identical", "leftovers")}
                      for e, m in json.loads(path.read_text())["metrics"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
