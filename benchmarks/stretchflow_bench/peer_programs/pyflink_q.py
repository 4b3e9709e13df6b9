"""PyFlink programs for the STRETCH journal's Q2 and Q3 shapes (§8.2, §8.3), run by
``stretchflow bench stretchflow-vs-flink`` (stretchflow_bench/flink.py) in the PyFlink venv.

``python pyflink_q.py SHAPE LEFT RIGHT OUTPUT [parallelism=N] [window=MS] [band=N]
[watermark_ms=MS] [api=datastream|sql] [keys=N]``

* ``forward`` (Q2, Op. 15 in a shared-nothing engine): the two inputs are read by two
  sources, stamped with the wall clock (µs) as they enter, given event time with a
  monotonous-timestamps watermark each and unioned; ``key_by(ts mod 1000)`` (the key
  stretchflow's Forward uses) partitions them over ``parallelism`` instances of a
  ``KeyedProcessFunction`` that buffers each tuple in keyed state and emits it when the
  watermark (the minimum of both inputs') passes its timestamp: the instances merge both
  inputs in timestamp order, as the paper's SN setup does (§8: "input tuples are
  merged-sorted"). The writer chained behind it appends ``{"ts": τ + 1, payload}`` (the same
  row stretchflow's forward writes) to one part file per instance and keeps per-tuple latency
  (wall clock at the write minus the stamp at entry). Rows are written inside Flink, not
  collected through the Py4J gateway, whose per-row cost would dominate (docs/peers.md).
* ``scalejoin`` (Q3), ``api=datastream`` (default): ScaleJoin in shared-nothing form over
  ``keys`` logical instances (:func:`run_scalejoin_datastream`).
* ``scalejoin`` (Q3), ``api=sql``: Flink SQL interval join of the two tables on event time,
  ``L.rt BETWEEN R.rt - window AND R.rt + window`` and ``|x - a| <= band AND |y - b| <= band``,
  output ``(max(tsL, tsR) + 1, left id, right id)`` as stretchflow's ScaleJoin writes. The
  predicate has no equality, so Flink's planner cannot hash-partition the join: it runs on one
  instance whatever ``parallelism`` says (the paper's reason, §8.3, for not running Q3 on
  Flink). Matches are rare (one per ~227 000 comparisons), so they are collected.

Prints one JSON line: ``elapsed_s`` (the program's own time, mini-cluster start included),
``rows_out``, ``settings``; for ``forward`` ``span_s`` (first entry stamp to last write),
``latency_ms`` (p50/p99/max/n over every tuple) and ``sorted_per_instance``; for the
DataStream ``scalejoin`` ``span_s`` (an instance's first tuple in to the end of the last
timer of any instance).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time


def _pct(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    n = len(v)
    if not n:
        return {"n": 0}
    return {"p50": v[n // 2], "p99": v[min(n - 1, int(n * 0.99))], "max": v[-1], "n": n}


def _read(path: str, side: int) -> list[tuple[int, int, int, str]]:
    """(input, ts, id, payload without ts as a JSON object's text) per line."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                ts = r.pop("ts")
                rows.append((side, ts, r["id"], json.dumps(r, separators=(",", ":"))))
    return rows


def run_forward(left: str, right: str, out: str, parallelism: int,
                watermark_ms: int) -> dict:
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.functions import FlatMapFunction, KeyedProcessFunction
    from pyflink.datastream.state import ListStateDescriptor

    parts = tempfile.mkdtemp(prefix="pyflink-forward-", dir=os.path.dirname(out) or ".")

    class _Ts(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[1]

    class _SortForward(KeyedProcessFunction):
        """Op. 15 in SN: buffer per key, emit in timestamp order once the watermark (the
        minimum over both inputs) has passed."""

        def open(self, runtime_context):
            self.buf = runtime_context.get_list_state(
                ListStateDescriptor("buf", Types.PICKLED_BYTE_ARRAY()))

        def process_element(self, value, ctx):
            self.buf.add(value)
            ctx.timer_service().register_event_time_timer(value[1])

        def on_timer(self, timestamp, ctx):
            due, rest = [], []
            for t in self.buf.get():
                (due if t[1] <= timestamp else rest).append(t)
            if rest:
                self.buf.update(rest)
            else:
                self.buf.clear()
            due.sort(key=lambda t: (t[1], t[0]))
            yield from due

    class _Writer(FlatMapFunction):
        """The sink, chained to the instance: one part file per instance, the latency of
        every tuple, whether its timestamps never went down."""

        def open(self, runtime_context):
            idx = runtime_context.get_index_of_this_subtask()
            self.path = os.path.join(parts, f"part-{idx}")
            self.f = open(self.path + ".jsonl", "w")
            self.lat: list[float] = []
            self.first_in = None
            self.last_out = 0
            self.last_ts = None
            self.sorted = True

        def flat_map(self, value):
            side, ts, _ident, payload, stamp = value
            self.f.write(f'{{"ts":{ts + 1},{payload[1:]}\n')
            now = time.time_ns() // 1000
            self.lat.append((now - stamp) / 1000)
            self.first_in = stamp if self.first_in is None else min(self.first_in, stamp)
            self.last_out = now
            if self.last_ts is not None and ts < self.last_ts:
                self.sorted = False
            self.last_ts = ts
            return []

        def close(self):
            self.f.close()
            with open(self.path + ".stats", "w") as f:
                json.dump({"lat": self.lat, "first_in": self.first_in,
                           "last_out": self.last_out, "sorted": self.sorted}, f)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_python_executable(sys.executable)  # else the workers run `python` from PATH
    env.get_config().set_auto_watermark_interval(watermark_ms)
    row = Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG(), Types.STRING()])
    stamped = Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG(), Types.STRING(),
                           Types.LONG()])
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_Ts())

    def source(path: str, side: int):
        # each source is one instance (as stretchflow's two inputs are read by one thread
        # each); the stamp is taken as the tuple enters the pipeline
        return (env.from_collection(_read(path, side), type_info=row)
                .map(lambda t: (*t, time.time_ns() // 1000), output_type=stamped)
                .assign_timestamps_and_watermarks(strategy))

    (source(left, 0).union(source(right, 1))
     .key_by(lambda t: t[1] % 1000, key_type=Types.LONG())
     .process(_SortForward(), output_type=stamped)
     .flat_map(_Writer(), output_type=Types.STRING())
     .print())  # nothing reaches it: the writer emits no rows
    env.execute("stretchflow-q2-forward")
    rows = 0
    lat: list[float] = []
    first, last, ordered = None, 0, True
    with open(out, "w") as f:
        for part in sorted(glob.glob(os.path.join(parts, "part-*.jsonl"))):
            with open(part) as p:
                for line in p:
                    f.write(line)
                    rows += 1
            with open(part[:-len(".jsonl")] + ".stats") as s:
                st = json.load(s)
            lat += st["lat"]
            if st["first_in"] is not None:
                first = st["first_in"] if first is None else min(first, st["first_in"])
            last = max(last, st["last_out"])
            ordered &= st["sorted"]
    for leftover in glob.glob(os.path.join(parts, "*")):
        os.unlink(leftover)
    os.rmdir(parts)
    return {"rows_out": rows, "latency_ms": _pct(lat), "sorted_per_instance": ordered,
            "span_s": (last - first) / 1e6 if first is not None else None}


def run_scalejoin_datastream(left: str, right: str, out: str, parallelism: int, window: int,
                             band: int, keys: int, watermark_ms: int) -> dict:
    """ScaleJoin in shared-nothing form: every tuple is copied to each of ``keys`` logical
    instances (``flat_map``, ``key_by(k)``: the SN duplication of Corollary 1); each buffers
    its tuples in keyed state until the watermark passes them, then takes them in
    (ts, input, id) order -- the same order in every key -- and, as Op. 10's f_U, purges
    the opposite store to ts - window, compares with it (numpy, both band attributes) and
    stores the tuple if the key's tuple counter says it is its turn (counter mod keys): each
    tuple is stored by one key, so each pair is found once, by the later tuple. The stores are
    numpy columns in the instance's memory, not Flink state (pickling a whole window per tuple
    would be the cost measured); the pending tuples are Flink keyed state with event-time
    timers, as in ``forward``."""
    import numpy as np
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.functions import KeyedProcessFunction
    from pyflink.datastream.state import ListStateDescriptor

    class _Ts(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[2]

    class _Store:
        __slots__ = ("ts", "uv", "ids")

        def __init__(self) -> None:
            self.ts = np.zeros(0, dtype=np.int64)
            self.uv = np.zeros((2, 0))
            self.ids = np.zeros(0, dtype=np.int64)

    parts = tempfile.mkdtemp(prefix="pyflink-scalejoin-", dir=os.path.dirname(out) or ".")

    class _Join(KeyedProcessFunction):
        def open(self, runtime_context):
            self.buf = runtime_context.get_list_state(
                ListStateDescriptor("pending", Types.PICKLED_BYTE_ARRAY()))
            self.stores: dict = {}  # key -> (counter, left store, right store)
            # the instance's busy span: its first tuple in to the end of its last timer
            self.stats = os.path.join(parts, f"span-{runtime_context.get_index_of_this_subtask()}")
            self.first_in = None
            self.last_out = None

        def close(self):
            with open(self.stats, "w") as f:
                json.dump({"first_in": self.first_in, "last_out": self.last_out}, f)

        def process_element(self, value, ctx):
            if self.first_in is None:
                self.first_in = time.time()
            self.buf.add(value)
            ctx.timer_service().register_event_time_timer(value[2])

        def on_timer(self, timestamp, ctx):
            due, rest = [], []
            for t in self.buf.get():
                (due if t[2] <= timestamp else rest).append(t)
            if rest:
                self.buf.update(rest)
            else:
                self.buf.clear()
            key = ctx.get_current_key()
            st = self.stores.setdefault(key, [0, _Store(), _Store()])
            for k, side, ts, ident, u, v in sorted(due, key=lambda t: (t[2], t[1], t[3])):
                st[0] += 1
                opp = st[2 - side]
                if len(opp.ts):
                    head = int(np.searchsorted(opp.ts, ts - window))
                    if head:
                        opp.ts, opp.uv, opp.ids = opp.ts[head:], opp.uv[:, head:], opp.ids[head:]
                    hit = (np.abs(opp.uv[0] - u) <= band) & (np.abs(opp.uv[1] - v) <= band)
                    for other in opp.ids[hit].tolist():
                        yield (ts + 1, ident, other) if side == 0 else (ts + 1, other, ident)
                if st[0] % keys == k:
                    mine = st[1 + side]
                    mine.ts = np.append(mine.ts, ts)
                    mine.uv = np.append(mine.uv, [[u], [v]], axis=1)
                    mine.ids = np.append(mine.ids, ident)
            self.last_out = time.time()

    def rows(path: str, side: int) -> list:
        a, b = ("x", "y") if side == 0 else ("a", "b")
        with open(path) as f:
            return [(side, r["ts"], r["id"], float(r[a]), float(r[b]))
                    for r in map(json.loads, f) if r]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_python_executable(sys.executable)
    env.get_config().set_auto_watermark_interval(watermark_ms)
    src_t = Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG(), Types.DOUBLE(),
                         Types.DOUBLE()])
    keyed_t = Types.TUPLE([Types.INT(), Types.INT(), Types.LONG(), Types.LONG(), Types.DOUBLE(),
                           Types.DOUBLE()])
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_Ts())

    def source(path: str, side: int):
        return (env.from_collection(rows(path, side), type_info=src_t)
                .flat_map(lambda t: [(k, *t) for k in range(keys)], output_type=keyed_t)
                .assign_timestamps_and_watermarks(strategy))

    matches = (source(left, 0).union(source(right, 1))
               .key_by(lambda t: t[0], key_type=Types.INT())
               .process(_Join(), output_type=Types.TUPLE([Types.LONG(), Types.LONG(),
                                                          Types.LONG()])))
    n = 0
    with open(out, "w") as f, matches.execute_and_collect() as results:
        for ts, lid, rid in results:  # matches are rare: collecting them is cheap
            f.write(json.dumps({"ts": ts, "left": lid, "right": rid}) + "\n")
            n += 1
    spans = []
    for path in glob.glob(os.path.join(parts, "span-*")):
        with open(path) as f:
            spans.append(json.load(f))
        os.unlink(path)
    os.rmdir(parts)
    firsts = [x["first_in"] for x in spans if x["first_in"] is not None]
    lasts = [x["last_out"] for x in spans if x["last_out"] is not None]
    return {"rows_out": n, "span_s": max(lasts) - min(firsts) if firsts and lasts else None}


def _interval(ms: int) -> str:
    return f"INTERVAL '{ms // 1000}.{ms % 1000:03d}' SECOND(3)"


def run_scalejoin(left: str, right: str, out: str, parallelism: int, window: int,
                  band: int) -> dict:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.local-time-zone", "UTC")
    env.execute_sql(f"""
        CREATE TABLE L (ts BIGINT, id BIGINT, x BIGINT, y BIGINT,
                        rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
        WITH ('connector' = 'filesystem', 'path' = '{left}', 'format' = 'json')""")
    env.execute_sql(f"""
        CREATE TABLE R (ts BIGINT, id BIGINT, a BIGINT, b BIGINT, c DOUBLE, d BOOLEAN,
                        rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
        WITH ('connector' = 'filesystem', 'path' = '{right}', 'format' = 'json')""")
    query = f"""
        SELECT GREATEST(L.ts, R.ts) + 1 AS ts, L.id AS l_id, R.id AS r_id
        FROM L, R
        WHERE L.rt BETWEEN R.rt - {_interval(window)} AND R.rt + {_interval(window)}
          AND ABS(L.x - R.a) <= {band} AND ABS(L.y - R.b) <= {band}"""
    plan = env.explain_sql(query)
    # which join the planner chose, and whether it had to gather it onto one instance
    physical = plan.split("== Optimized Execution Plan ==")[-1]
    joins = sorted({w.split("(")[0] for w in physical.split()
                    if w.split("(")[0] in ("IntervalJoin", "Join", "WindowJoin", "TemporalJoin")})
    rows = 0
    with open(out, "w") as f, env.execute_sql(query).collect() as results:
        for r in results:
            f.write(json.dumps({"ts": r[0], "left": r[1], "right": r[2]}) + "\n")
            rows += 1
    return {"rows_out": rows, "plan_joins": joins,
            "single_instance_join": "Exchange(distribution=[single])" in physical}


def main(argv: list[str]) -> None:
    shape, left, right, outp, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    parallelism = int(kw.pop("parallelism", "1"))
    window = int(kw.pop("window", "30000"))
    band = int(kw.pop("band", "10"))
    watermark_ms = int(kw.pop("watermark_ms", "20"))
    api = kw.pop("api", "datastream")
    keys = int(kw.pop("keys", "8"))
    if kw:
        raise SystemExit(f"pyflink_q: unknown parameters {sorted(kw)}")
    left, right, outp = (os.path.abspath(p) for p in (left, right, outp))
    t0 = time.perf_counter()
    if shape == "forward":
        rep = run_forward(left, right, outp, parallelism, watermark_ms)
        settings = {"api": "datastream", "parallelism": parallelism,
                    "watermark_interval_ms": watermark_ms}
    elif shape == "scalejoin" and api == "sql":
        rep = run_scalejoin(left, right, outp, parallelism, window, band)
        settings = {"api": "sql", "parallelism": parallelism, "window_ms": window,
                    "band": band}
    elif shape == "scalejoin":
        rep = run_scalejoin_datastream(left, right, outp, parallelism, window, band, keys,
                                       watermark_ms)
        settings = {"api": "datastream", "parallelism": parallelism, "window_ms": window,
                    "band": band, "keys": keys, "watermark_interval_ms": watermark_ms}
    else:
        raise SystemExit(f"pyflink_q: unknown shape {shape!r} (forward, scalejoin)")
    print(json.dumps({"elapsed_s": time.perf_counter() - t0, **rep, "settings": settings}))


if __name__ == "__main__":
    main(sys.argv[1:])
