"""``stretchflow bench run memory`` (or ``stretchflow bench memory``): memory over time of a
keyed windowed aggregation at 10 M events and growing key cardinality, on every local engine,
whole processes (issue #33, item 4).

Why: a stream processor's memory must be bounded by its live state, not by the length of its
input. The state of a keyed aggregation over tumbling windows is one accumulator per key live
in the open window; when a window closes its state is freed. So over a stream whose keys come
from one fixed set, memory should rise while the first window fills and then stay flat, at a
level that grows with the keys per window, and never with the events seen. This benchmark
measures whether each engine does that, and at which key cardinality it stops doing it.

What runs: :mod:`.memory_flow`, a count and a sum per key over tumbling windows of event time
with lambdas (docs/api.md), as ``stretchflow run memory_flow.py --param ...`` with the engine
flags of :data:`.userflows.ENGINES` (bench speed's :data:`.speed.VARIANTS` and slack); the
engines :data:`ENGINES` (reference; vsn at parallelism 1 and 2; sn with 2 process channels;
ordered with 2 workers; slack). Its input (:func:`dataset`): N events (default 10 M) at
:data:`RATE` events per second of event time, so each 10 s window holds 1 M events, keys drawn
uniformly from K values (K = 10³ … 10⁶), a seeded Parquet file per (N, K) cached under
``~/.cache/stretchflow/memory`` (``$STRETCHFLOW_CACHE/memory``). At K = 10³ every window sees
every key; at 10⁶ a window of 10⁶ events sees about 63 % of them (1 - 1/e).

What is measured, per run (each a fresh process):

* the RSS of the whole process tree (the run's process and its descendants: sn's fork server
  and channel processes), sampled every :data:`SAMPLE_S` s from /proc
  (:func:`.peers.run_process`), kept as a series thinned to :data:`MAX_POINTS` points;
  the peak (the highest sample, or the run's process's own VmHWM at exit from :mod:`.peak` if
  higher: a peak between two samples); the RSS at 25/50/75/100 % of the run's time, each the
  highest sample in the tenth of the run that ends there (:func:`rss_at`: a point sample would
  land on a garbage collector's sawtooth or, at 100 %, on the run's teardown, when sn's
  channels have already exited); wall time and the run's own time;
* whether the output is right: its rows against the (window, key) pairs of the input,
  counted by numpy from the same Parquet file, and a digest of every row (window end, key,
  count, sum) against the same digest of the expected rows (:func:`expected`);
* state size: the distinct keys per window (numpy, from the input) — the (window, key)
  entries live when a window ends; and RSS per live key: (peak RSS at K - the same engine's
  peak at the smallest K) / keys per window at K, in bytes;
* growth: RSS at 100 % / RSS at 50 % of the run. The second half of the stream runs over the
  same key set as the first, so an engine whose memory is bounded by its state shows a ratio
  near 1. The rule (:data:`BOUND`): an engine is bounded at a K when every round's growth is
  at most 1.2; the verdict per engine is "bounded at every K" or the smallest K where it is
  not (:func:`verdict`).

Rounds (default 2) run every K and, per K, the engines in the order :func:`.common.rotation`
gives the round; each run inside :func:`.common.repeat_probe` (the load and the other
processes' CPU around it). Scalars are min/median/max over rounds (:func:`.common.summarize`).
The figure: RSS over time, one panel per K, one line per engine (the first round), and a
panel of peak RSS against K per engine (log x).

Summed RSS counts a page shared by several processes once per process (sn's channels are
forked from one fork server, their start-up pages shared copy-on-write), so sn's tree RSS is
an upper bound of the memory it holds.

Selection by environment variables (``bench run`` takes no parameters), recorded in the
JSON's parameters: ``MEMORY_ENGINES`` (comma-separated names of :data:`ENGINES`),
``MEMORY_KEYS`` (comma-separated K), ``MEMORY_EVENTS`` (N), ``MEMORY_ROUNDS``;
``MEMORY_PROGRESS=1`` prints a line per run on stderr. The rate of event time is fixed, so
fewer events are fewer windows (1 M events: one window, and no second half over the same
state). Quick (``--quick``): 20 000 events at
200 events/s of event time (10 windows of 10 s), K = 100 and 1 000, the reference and vsn at
parallelism 1, one round.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import nexmark
from .common import (
    env_list,
    repeat_probe,
    results_dir,
    rotation,
    say_progress,
    summarize,
    write_result,
)
from .peak import command
from .peers import run_process
from .speed import summary_own_s
from .userflows import ENGINES as ENGINE_FLAGS

NAME = "memory"
FLOW_FILE = Path(__file__).with_name("memory_flow.py")

#: the engine variants measured (names of :data:`.userflows.ENGINES`, whose flags they run)
ENGINES: tuple[str, ...] = ("reference", "vsn1", "vsn2", "sn2-processes", "ordered2", "slack")
QUICK_ENGINES: tuple[str, ...] = ("reference", "vsn1")
#: distinct keys of the input (K)
KEYS: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
QUICK_KEYS: tuple[int, ...] = (100, 1_000)
#: events of the input (N)
EVENTS = 10_000_000
QUICK_EVENTS = 20_000
#: events per second of event time: with :data:`WINDOW_MS`, a million events per window
RATE = 100_000
#: a quick run's rate: its 20 000 events span the same 10 windows as a full run's 10 M
QUICK_RATE = 200
#: the tumbling window (ms of event time)
WINDOW_MS = 10_000
ROUNDS = 2
#: values are drawn uniformly from [0, VALUES)
VALUES = 1_000
#: rows generated and written per Parquet row group (part of the data: :data:`VERSION`)
CHUNK = 1_000_000
#: bumped when the generated data change (old cache entries are then not reused)
VERSION = 1
#: the rule of bounded memory: every round's growth (RSS at 100 % / RSS at 50 %) at most this
#: (the margin of issue #31's memory target, :data:`.userflows.MEMORY_GROWTH`: a GC sawtooth
#: and the allocator's arenas move RSS by a few per cent, a leak of state by far more)
BOUND = 1.2
RULE = (f"bounded at a K when every round's growth (RSS at 100 % of the run / RSS at 50 %) "
        f"is at most {BOUND}; an engine is bounded when it is at every K measured, else "
        f"memory stops being bounded at the smallest K where it is not")
#: seconds between two RSS samples of a run's process tree
SAMPLE_S = 0.15
#: the most points of a run's RSS series kept in the JSON
MAX_POINTS = 200
#: fractions of a run's time at which its RSS is reported
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
#: the width of the stretch of a run ending at a fraction whose highest sample is its RSS
#: there (a tenth of the run)
AT_WIDTH = 0.1
#: the longest one run may take before it is killed and recorded as failed
TIMEOUT_S = 1800.0

Series = list[tuple[float, float]]


# -- pure logic ---------------------------------------------------------------------------------
def rss_at(series: Sequence[Sequence[float]], fraction: float,
           width: float = AT_WIDTH) -> float | None:
    """The RSS at ``fraction`` of a run: the highest sample of ``(t, rss)`` with ``t`` in
    ``((fraction - width) T, fraction T]``, ``T`` the last sample's time; if that stretch has
    no sample, the last sample before it (or the first sample, if none is); None for an empty
    series."""
    if not series:
        return None
    end = series[-1][0] * fraction
    start = series[-1][0] * (fraction - width)
    inside = [rss for t, rss in series if start < t <= end]
    if inside:
        return max(inside)
    before = [rss for t, rss in series if t <= end]
    return before[-1] if before else series[0][1]


def growth(series: Sequence[Sequence[float]]) -> float | None:
    """RSS at 100 % of the run / RSS at 50 % (:func:`rss_at`); None without samples."""
    half, end = rss_at(series, 0.5), rss_at(series, 1.0)
    if half is None or end is None or half <= 0:
        return None
    return end / half


def verdict(growth_by_keys: dict[int, list[float]], not_measured: Sequence[int] = (),
            bound: float = BOUND) -> dict[str, Any]:
    """An engine's verdict from every round's growth per K (:data:`RULE`): bounded when every
    round at every K measured is at most ``bound``; else the smallest K where one is not.
    ``not_measured``: the K whose runs failed or did not run (named, not counted as
    bounded)."""
    measured = sorted(k for k, gs in growth_by_keys.items() if gs)
    missing = sorted(set(not_measured) | {k for k, gs in growth_by_keys.items() if not gs})
    out: dict[str, Any] = {"bound": bound, "keys_measured": measured,
                           "keys_not_measured": missing}
    if not measured:
        return {**out, "bounded": None, "unbounded_from_keys": None,
                "text": "not measured"}
    over = [k for k in measured if max(growth_by_keys[k]) > bound]
    if over:
        worst = max(growth_by_keys[over[0]])
        return {**out, "bounded": False, "unbounded_from_keys": over[0],
                "worst_growth": worst,
                "text": f"not bounded from K = {over[0]:,} (a round's growth {worst:.3f} > "
                        f"{bound})"}
    text = f"bounded at every K measured (every round's growth <= {bound})"
    if missing:
        text += "; not measured at K = " + ", ".join(f"{k:,}" for k in missing)
    return {**out, "bounded": True, "unbounded_from_keys": None, "text": text}


def thin(series: Sequence[Sequence[float]], max_points: int = MAX_POINTS) -> Series:
    """At most ``max_points`` samples of ``series``, evenly spread by index, keeping the
    first, the last and the highest one (the peak takes the place of the kept sample nearest
    to it), in time order."""
    n = len(series)
    pts = [(float(t), float(r)) for t, r in series]
    if n <= max_points:
        return pts
    idx = sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
    peak = max(range(n), key=lambda i: pts[i][1])
    if peak not in idx:
        inner = idx[1:-1] or idx
        nearest = min(inner, key=lambda i: abs(i - peak))
        idx = sorted((set(idx) - {nearest}) | {peak})
    return [pts[i] for i in idx]


def window_stats(ts: np.ndarray, keys: np.ndarray, values: np.ndarray, n_keys: int,
                 window_ms: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per tumbling window (index ``ts // window_ms``) of these events, the count and the
    sum of values per key (arrays of length ``n_keys``)."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    w = ts // window_ms
    for win in np.unique(w):
        sel = w == win
        k = keys[sel]
        out[int(win)] = (np.bincount(k, minlength=n_keys).astype(np.int64),
                         np.bincount(k, weights=values[sel], minlength=n_keys).astype(np.int64))
    return out


# the digest's odd multipliers (splitmix64's and two large primes): any fixed odd constants do
_P = tuple(np.uint64(x) for x in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB,
                                  0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD))


def row_digest(ends: np.ndarray, keys: np.ndarray, counts: np.ndarray,
               sums: np.ndarray) -> int:
    """A digest of rows (window end, key, count, sum), independent of their order: the sum
    mod 2**64 of a mixed 64-bit hash of each row. Equal multisets of rows give equal
    digests; a row changed, lost or doubled changes it (but for a 2**-64 chance)."""
    with np.errstate(over="ignore"):
        h = ((ends.astype(np.uint64) * _P[0]) ^ (keys.astype(np.uint64) * _P[1])
             ^ (counts.astype(np.uint64) * _P[2]) ^ (sums.astype(np.uint64) * _P[3]))
        h ^= h >> np.uint64(31)
        h *= _P[4]
        h ^= h >> np.uint64(29)
        return int(h.sum(dtype=np.uint64))


def expected_rows(stats: dict[int, tuple[np.ndarray, np.ndarray]], window_ms: int
                  ) -> tuple[int, int, list[int]]:
    """(rows, digest, keys per window) of the output the flow must give for windows'
    per-key counts and sums (:func:`window_stats`): one row per (window, key) with a count,
    its ``ts`` the window's end."""
    rows = digest = 0
    per_window = []
    for win, (counts, sums) in sorted(stats.items()):
        seen = np.flatnonzero(counts)
        per_window.append(len(seen))
        rows += len(seen)
        ends = np.full(len(seen), (win + 1) * window_ms, dtype=np.int64)
        digest = (digest + row_digest(ends, seen, counts[seen], sums[seen])) % 2**64
    return rows, digest, per_window


def rss_per_live_key(peak_mb: float, base_peak_mb: float, keys_per_window: float) -> float:
    """Bytes of RSS per live (window, key) entry: the peak beyond the same engine's peak at
    the smallest K, over the keys a window holds."""
    return (peak_mb - base_peak_mb) * 2**20 / keys_per_window


# -- the input and the expected output ----------------------------------------------------------
def data_dir() -> Path:
    """Where generated inputs are cached: ``memory`` beside the user flows' cache
    (``$STRETCHFLOW_CACHE/memory`` or ``~/.cache/stretchflow/memory``)."""
    return nexmark.data_dir().parent / "memory"


def generate(path: Path, events: int, keys: int, rate: int, seed: int) -> None:
    """``events`` events (``ts`` = event i's second i / ``rate`` in ms, keys uniform in
    [0, ``keys``), values uniform in [0, :data:`VALUES`)), written with pyarrow a row group
    of :data:`CHUNK` rows at a time, so 10 M events never sit in memory at once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng([seed, keys])  # another K, another stream of draws
    schema = pa.schema([("ts", pa.int64()), ("key", pa.int64()), ("value", pa.int64())])
    with pq.ParquetWriter(str(path), schema) as writer:
        for off in range(0, events, CHUNK):
            n = min(CHUNK, events - off)
            ts = np.arange(off, off + n, dtype=np.int64) * 1000 // rate
            writer.write_table(pa.table({
                "ts": ts,
                "key": rng.integers(0, keys, n, dtype=np.int64),
                "value": rng.integers(0, VALUES, n, dtype=np.int64)}, schema=schema))


def dataset(events: int, keys: int, rate: int = RATE, seed: int = 1,
            directory: str | os.PathLike | None = None) -> Path:
    """The input of (``events``, ``keys``), generated on first use and cached
    (:func:`data_dir` unless ``directory``); written to a temporary name and renamed, so a
    cache entry is whole or absent."""
    d = Path(directory) if directory is not None else data_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"events-n{events}-k{keys}-r{rate}-s{seed}-v{VERSION}.parquet"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            generate(tmp, events, keys, rate, seed)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def expected(path: Path, keys: int, window_ms: int = WINDOW_MS) -> dict[str, Any]:
    """What the flow must output for the input ``path`` (:func:`expected_rows`), read a row
    group at a time; the input is sorted by ``ts``, so a window is complete once a row group
    starts past it."""
    import pyarrow.parquet as pq

    rows = digest = events = 0
    per_window: list[int] = []
    pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def close(upto: float) -> None:
        nonlocal rows, digest
        done = {w: pending.pop(w) for w in sorted(pending) if w < upto}
        r, d, pw = expected_rows(done, window_ms)
        rows, digest = rows + r, (digest + d) % 2**64
        per_window.extend(pw)

    for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK):
        ts, k, v = (batch.column(c).to_numpy() for c in ("ts", "key", "value"))
        events += len(ts)
        close(int(ts[0]) // window_ms)
        for w, (c, s) in window_stats(ts, k, v, keys, window_ms).items():
            if w in pending:
                pc, ps = pending[w]
                c, s = pc + c, ps + s
            pending[w] = (c, s)
    close(math.inf)
    return {"events": events, "windows": len(per_window), "rows": rows, "digest": digest,
            "keys_per_window": per_window}


def check_output(path: Path, want: dict[str, Any]) -> dict[str, Any]:
    """The output file (JSON Lines of ``ts``, ``key``, ``count``, ``sum``) against
    :func:`expected`: its rows, their digest and the total count (every event counted once).
    Read by pyarrow a block at a time, never row by row in Python."""
    import pyarrow as pa
    import pyarrow.json as pj

    rows = digest = total = 0
    why = None
    if path.exists() and path.stat().st_size > 0:
        try:
            reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=16 << 20))
            for batch in reader:
                cols = {c: batch.column(c).to_numpy() for c in ("ts", "key", "count", "sum")}
                rows += batch.num_rows
                total += int(cols["count"].sum())
                digest = (digest + row_digest(cols["ts"], cols["key"], cols["count"],
                                              cols["sum"])) % 2**64
        except (pa.ArrowInvalid, KeyError) as e:
            why = f"unreadable output: {type(e).__name__}: {str(e)[:300]}"
    out = {"rows_expected": want["rows"], "rows_out": rows,
           "digest_equal": digest == want["digest"], "count_total": total,
           "count_total_expected": want["events"]}
    out["correct"] = (why is None and rows == want["rows"] and out["digest_equal"]
                      and total == want["events"])
    if why:
        out["error"] = why
    return out


# -- one run ------------------------------------------------------------------------------------
def run_once(engine: str, data: Path, out: Path, want: dict[str, Any],
             window_ms: int = WINDOW_MS) -> dict[str, Any]:
    """One whole process of ``engine`` on ``data``: its memory over time and its output
    checked; a failure is a RuntimeError naming the engine and the reason."""
    peak_file = out.with_suffix(".peak")
    out.unlink(missing_ok=True)
    peak_file.unlink(missing_ok=True)
    cmd = command(peak_file, "stretchflow", "run", str(FLOW_FILE),
                  "--param", f"input={data}", "--param", f"output={out}",
                  "--param", f"size={window_ms}", *ENGINE_FLAGS[engine])
    r = run_process(cmd, TIMEOUT_S, interval=SAMPLE_S)
    if r["timed_out"]:
        raise RuntimeError(f"{engine}: ran longer than {TIMEOUT_S:.0f} s and was killed")
    if r["code"] != 0:
        raise RuntimeError(f"{engine}: exit code {r['code']}: {r['stderr'].strip()[-1500:]}")
    series = r["series"]
    if not series:
        raise RuntimeError(f"{engine}: no RSS sample (the run ended within "
                           f"{r['wall_s']:.2f} s)")
    sampled = max(rss for _, rss in series)
    # the run's own process's VmHWM at exit (bench/peak.py): a peak between two samples
    hwm = float(peak_file.read_text()) if peak_file.exists() else 0.0
    res = {"wall_s": r["wall_s"], "own_s": summary_own_s(engine, r["stdout"], r["stderr"]),
           "peak_rss_mb": max(sampled, hwm), "tree_peak_sampled_mb": sampled,
           "main_hwm_mb": hwm,
           "rss_at_mb": {str(round(f * 100)): rss_at(series, f) for f in FRACTIONS},
           "growth": growth(series), "samples": len(series), "series": thin(series),
           "output": check_output(out, want)}
    out.unlink(missing_ok=True)  # 10⁶ keys: hundreds of MB per run
    return res


# -- the selection and the run ------------------------------------------------------------------
def selection(quick: bool) -> dict[str, Any]:
    """What a run measures: ``MEMORY_*`` where set, else the defaults (quick: the quick
    ones)."""
    engines = env_list("MEMORY_ENGINES") or list(QUICK_ENGINES if quick else ENGINES)
    bad = [e for e in engines if e not in ENGINE_FLAGS]
    if bad:
        raise ValueError(f"MEMORY_ENGINES: unknown {bad}; known: {', '.join(ENGINE_FLAGS)}")
    keys = env_list("MEMORY_KEYS")
    events = os.environ.get("MEMORY_EVENTS")
    rounds = os.environ.get("MEMORY_ROUNDS")
    return {
        "engines": engines,
        "keys": sorted(int(k) for k in keys) if keys else list(QUICK_KEYS if quick else KEYS),
        "events": int(events) if events else (QUICK_EVENTS if quick else EVENTS),
        "rounds": int(rounds) if rounds else (1 if quick else ROUNDS),
        "rate": QUICK_RATE if quick else RATE,
        "window_ms": WINDOW_MS,
        "env": {k: v for k, v in os.environ.items() if k.startswith("MEMORY_")},
    }


def _summaries(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/max over rounds of a cell's scalars, and whether every output was right."""
    s: dict[str, Any] = {k: summarize([r[k] for r in runs])
                         for k in ("peak_rss_mb", "wall_s", "own_s")}
    gs = [r["growth"] for r in runs if r["growth"] is not None]
    s["growth"] = summarize(gs) if gs else None
    s["rss_at_mb"] = {f: summarize([r["rss_at_mb"][f] for r in runs
                                    if r["rss_at_mb"][f] is not None])
                      for f in runs[0]["rss_at_mb"]}
    s["correct"] = all(r["output"]["correct"] for r in runs)
    return s


def run(quick: bool = False, out_dir: str | os.PathLike | None = None, seed: int = 1,
        progress: Callable[[str], None] | None = None) -> Path:
    """Measures the selection (:func:`selection`) and writes ``memory.json`` and
    ``memory.png``; returns the JSON's path."""
    t_start = time.perf_counter()
    sel = selection(quick)
    say = say_progress("MEMORY_PROGRESS", progress)
    engines, window = sel["engines"], sel["window_ms"]
    cells: dict[str, dict[str, Any]] = {}
    inputs: dict[int, tuple[Path, dict[str, Any]]] = {}
    for k in sel["keys"]:
        say(f"memory: the input of {sel['events']:,} events, K = {k:,}")
        data = dataset(sel["events"], k, sel["rate"], seed)
        want = expected(data, k, window)
        inputs[k] = (data, want)
        kpw = want["keys_per_window"]
        cells[str(k)] = {"keys": k, "input": data.name, "events": want["events"],
                         "windows": want["windows"], "rows_expected": want["rows"],
                         "keys_per_window": {"max": max(kpw), "mean": sum(kpw) / len(kpw),
                                             "min": min(kpw), "per_window": kpw},
                         "runs": {e: [] for e in engines}, "failed": {}}
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp_s:
        tmp = Path(tmp_s)
        for r in range(sel["rounds"]):
            for k in sel["keys"]:
                cell = cells[str(k)]
                data, want = inputs[k]
                for e in rotation(engines, r):
                    if e in cell["failed"]:
                        continue  # failed in an earlier round: not run again
                    say(f"memory K = {k:,}: round {r + 1}/{sel['rounds']}, {e}")
                    try:
                        with repeat_probe() as probe:
                            res = run_once(e, data, tmp / f"out-{k}-{e}.jsonl", want, window)
                    except RuntimeError as err:
                        # recorded, and the other engines and K still run
                        cell["failed"][e] = f"failed in round {r + 1}: {str(err)[-1500:]}"
                        continue
                    res["round"], res["probe"] = r + 1, probe
                    cell["runs"][e].append(res)
    for cell in cells.values():
        cell["engines"] = {e: _summaries(rs) for e, rs in cell["runs"].items() if rs}
    metrics = {"cells": cells, **derived(cells, engines), "bound": BOUND, "rule": RULE,
               "total_s": time.perf_counter() - t_start}
    params = {
        "quick": quick, "seed": seed, **sel, "sample_s": SAMPLE_S, "max_points": MAX_POINTS,
        "at_width": AT_WIDTH, "bound": BOUND,
        "engines_flags": {e: " ".join(ENGINE_FLAGS[e]) for e in engines},
        "flow": "stretchflow_bench/memory_flow.py: count and sum per key over tumbling "
                f"{window / 1000:g} s windows of event time, lambdas (keys, init, update, "
                "output), run as `stretchflow run memory_flow.py --param ...`",
        "data": f"Parquet per (N, K), seeded (numpy): ts = i * 1000 // rate ms, key uniform in "
                f"[0, K), value uniform in [0, {VALUES}); cached under {data_dir()}",
        "rss": f"summed VmRSS of the run's process tree every {SAMPLE_S} s (/proc); a page "
               "shared by processes (sn's forked channels) counts once per process; "
               "peak_rss_mb: the highest sample or the run's process's VmHWM at exit, the "
               f"higher; series thinned to at most {MAX_POINTS} points",
        "rss_at": f"RSS at f of the run: the highest sample in the last {AT_WIDTH:g} of the "
                  "run's time before f (the time of the last sample is 100 %)",
        "growth": "RSS at 100 % / RSS at 50 % of the run, per round",
        "rss_per_live_key": "(median peak RSS at K - the same engine's median peak at the "
                            "smallest K) / the most keys a window holds at K, bytes",
        "output": "rows and an order-independent digest of (window end, key, count, sum) "
                  "against the same computed by numpy from the input; the counts' total "
                  "against the events",
    }
    png = draw(metrics, results_dir(out_dir) / f"{NAME}.png", quick)
    return write_result(NAME, params, metrics, out_dir, plot=png.name)


def derived(cells: dict[str, dict[str, Any]], engines: Sequence[str]) -> dict[str, Any]:
    """What the cells say together: RSS per live key, the verdict per engine, whether every
    output was right."""
    ks = sorted(cells, key=int)
    per_key: dict[str, dict[str, float]] = {}
    bases: dict[str, int] = {}
    verdicts: dict[str, dict[str, Any]] = {}
    for e in engines:
        here = [k for k in ks if e in cells[k]["engines"]]
        if here:
            bases[e] = int(here[0])
            base = cells[here[0]]["engines"][e]["peak_rss_mb"]["median"]
            per_key[e] = {k: rss_per_live_key(cells[k]["engines"][e]["peak_rss_mb"]["median"],
                                              base, cells[k]["keys_per_window"]["max"])
                          for k in here[1:]}
        by_k = {int(k): [r["growth"] for r in cells[k]["runs"][e] if r["growth"] is not None]
                for k in ks}
        verdicts[e] = verdict(by_k, [int(k) for k in ks if e in cells[k]["failed"]])
    checked = [s["correct"] for c in cells.values() for s in c["engines"].values()]
    failed = {f"{e}, K = {int(k):,}": why for k in ks for e, why in cells[k]["failed"].items()}
    return {"rss_per_live_key_bytes": per_key, "rss_per_live_key_base": bases,
            "verdicts": verdicts, "all_correct": bool(checked) and all(checked),
            "failed": failed}


# -- the figure ---------------------------------------------------------------------------------
def draw(metrics: dict[str, Any], path: Path, quick: bool) -> Path:
    """One panel per K: the first round's RSS over time, one line per engine (a wrong
    output's line dashed); a last panel: median peak RSS against K per engine, min–max as
    error bars, log x."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    cells = metrics["cells"]
    ks = sorted(cells, key=int)
    engines = [e for e in ENGINE_FLAGS if any(e in cells[k]["runs"] for k in ks)]
    colors = dict(zip(engines, plt.get_cmap("tab10").colors, strict=False))
    panels = len(ks) + 1
    ncols = min(panels, 3)
    nrows = math.ceil(panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), dpi=110,
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, k in zip(flat, ks, strict=False):
        cell = cells[k]
        for e in engines:
            runs = cell["runs"].get(e) or []
            if not runs:
                continue
            first = runs[0]
            ts, rss = zip(*first["series"], strict=True)
            ax.plot(ts, rss, color=colors[e], lw=1.2, label=e,
                    ls="-" if first["output"]["correct"] else "--")
        ax.set_title(f"K = {int(k):,}: {cell['keys_per_window']['max']:,} keys per window",
                     fontsize=9)
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel("tree RSS (MiB)")
        ax.grid(True, alpha=0.3)
    if ks:
        flat[0].legend(fontsize=7)
    ax = flat[len(ks)]
    for e in engines:
        xs, med, lo, hi = [], [], [], []
        for k in ks:
            s = cells[k]["engines"].get(e)
            if s is None:
                continue
            p = s["peak_rss_mb"]
            xs.append(int(k))
            med.append(p["median"])
            lo.append(p["median"] - p["min"])
            hi.append(p["max"] - p["median"])
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", ms=4, capsize=3,
                        color=colors[e], label=e)
    ax.set_xscale("log")
    ax.set_xlabel("distinct keys K")
    ax.set_ylabel("peak tree RSS (MiB; median, min-max)")
    ax.set_title("peak RSS against K", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    for extra in flat[panels:]:
        extra.set_visible(False)
    fig.suptitle(f"memory over time: count and sum per key, tumbling windows, "
                 f"{next(iter(cells.values()))['events']:,} events" if cells else "memory",
                 fontsize=10)
    return save_figure(plt, fig, path, quick)


def _run(quick: bool, out_dir: str | None) -> Path:
    return run(quick=quick, out_dir=out_dir)


#: name -> (what it measures, the issue, run(quick, out_dir) -> JSON path)
BENCHMARKS: dict[str, tuple[str, str, Callable[[bool, str | None], Path]]] = {
    NAME: ("memory over time of a keyed windowed count with lambdas at 10 M events and "
           "10³…10⁶ keys: tree RSS series, peak, growth over the second half, state size, "
           "whole processes on every local engine (MEMORY_* select)", "issue #33", _run),
}
