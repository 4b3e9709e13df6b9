"""PyFlink: Flink SQL ``HOP`` window table-valued function on event time (``sql``) or the
DataStream API's ``SlidingEventTimeWindows`` (``datastream``), in a local mini-cluster.

``python pyflink_wc.py QUERY INPUT OUTPUT size=MS slide=MS [distance=N] [api=sql|datastream]
[parallelism=N]``

SQL: a ``filesystem``/``json`` table whose event time is ``TO_TIMESTAMP_LTZ(ts, 3)`` with
``WATERMARK FOR rt AS rt`` (the input is sorted; Flink's watermark is the largest timestamp
minus 1 ms, so ties are never late); tokens (or pairs) come from a Python table function
(``str.split()``, as stretchflow tokenizes), and
``TABLE(HOP(... DESCRIPTOR(rt), INTERVAL WA, INTERVAL WS)) GROUP BY window_start,
window_end, key`` counts them. Flink's hopping windows start at multiples of WA since the
epoch; the output ``ts`` is ``window_end``. Rows are collected to this process and written
as JSON Lines. DataStream: the same tokens from a ``flat_map``, keyed by token, counted by a
``reduce`` in ``SlidingEventTimeWindows`` with a monotonous-timestamps watermark strategy.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _pairs(text: str, distance: int | None) -> list[tuple[str, str]]:
    w = text.split()
    n = len(w)
    span = n if distance is None else distance
    return [(w[i], w[j]) for i in range(n) for j in range(i + 1, min(n, i + span + 1))]


def _ms(dt: datetime) -> int:
    if dt.tzinfo is None:  # the session time zone is UTC
        dt = dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // timedelta(milliseconds=1)


def _interval(ms: int) -> str:
    return f"INTERVAL '{ms // 1000}.{ms % 1000:03d}' SECOND(3)"


def run_sql(query: str, inp: str, out, size: int, slide: int, distance: int | None,
            parallelism: int) -> int:
    from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment
    from pyflink.table.udf import udtf

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.local-time-zone", "UTC")
    conf.set("python.executable", sys.executable)  # the workers: this venv's python
    env.execute_sql(f"""
        CREATE TABLE tweets (ts BIGINT, `text` STRING,
                             rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
        WITH ('connector' = 'filesystem', 'path' = '{inp}', 'format' = 'json')""")
    if query == "wordcount":
        @udtf(result_types=[DataTypes.STRING()])
        def tokens(text):
            return [(w,) for w in (text or "").split()]

        env.create_temporary_function("tokens", tokens)
        keys, lateral = "word", "LATERAL TABLE(tokens(`text`)) AS T(word)"
    else:
        @udtf(result_types=[DataTypes.STRING(), DataTypes.STRING()])
        def pairs(text):
            return _pairs(text or "", distance)

        env.create_temporary_function("pairs", pairs)
        keys, lateral = "`first`, `second`", "LATERAL TABLE(pairs(`text`)) AS T(`first`, `second`)"
    env.execute_sql(f"CREATE TEMPORARY VIEW items AS SELECT rt, {keys} FROM tweets, {lateral}")
    result = env.execute_sql(f"""
        SELECT window_end, {keys}, COUNT(*) AS c
        FROM TABLE(HOP(TABLE items, DESCRIPTOR(rt), {_interval(slide)}, {_interval(size)}))
        GROUP BY window_start, window_end, {keys}""")
    rows = 0
    with result.collect() as results:
        for r in results:
            if query == "wordcount":
                rec = {"ts": _ms(r[0]), "word": r[1], "count": r[2]}
            else:
                rec = {"ts": _ms(r[0]), "first": r[1], "second": r[2], "count": r[3]}
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            rows += 1
    return rows


def run_datastream(query: str, inp: str, out, size: int, slide: int, distance: int | None,
                   parallelism: int) -> int:
    from pyflink.common import Duration, Types, WatermarkStrategy
    from pyflink.common.time import Time
    from pyflink.common.watermark_strategy import TimestampAssigner
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import SlidingEventTimeWindows

    class _Ts(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[1]

    class _End(ProcessWindowFunction):
        """The window's end as the row's ts, beside the reduced count."""

        def process(self, key, context, elements):
            for k, _ts, n in elements:
                yield context.window().end, k, n

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_python_executable(sys.executable)  # else the workers run `python` from PATH
    lines = env.from_collection(_read_lines(inp), type_info=Types.STRING())

    def items(line):
        t = json.loads(line)
        keys = t["text"].split() if query == "wordcount" else [
            json.dumps(p) for p in _pairs(t["text"], distance)]
        return [(k, t["ts"], 1) for k in keys]

    typ = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()])
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
                .with_timestamp_assigner(_Ts()))
    counted = (lines.flat_map(items, output_type=typ)
               .assign_timestamps_and_watermarks(strategy)
               .key_by(lambda x: x[0], key_type=Types.STRING())
               .window(SlidingEventTimeWindows.of(Time.milliseconds(size),
                                                  Time.milliseconds(slide)))
               .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]), window_function=_End(),
                       output_type=Types.TUPLE([Types.LONG(), Types.STRING(), Types.LONG()])))
    rows = 0
    with counted.execute_and_collect() as results:
        for end, k, n in results:
            if query == "wordcount":
                rec = {"ts": end, "word": k, "count": n}
            else:
                first, second = json.loads(k)
                rec = {"ts": end, "first": first, "second": second, "count": n}
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            rows += 1
    return rows


def _read_lines(path: str) -> list[str]:
    with open(path) as f:
        return [line for line in f if line.strip()]


def main(argv: list[str]) -> None:
    query, inp, outp, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    size, slide = int(kw.pop("size")), int(kw.pop("slide"))
    raw = kw.pop("distance", "3")
    distance = None if raw == "inf" else int(raw)
    api = kw.pop("api", "sql")
    parallelism = int(kw.pop("parallelism", "2"))
    if kw:
        raise SystemExit(f"pyflink_wc: unknown parameters {sorted(kw)}")
    if query not in ("wordcount", "paircount") or api not in ("sql", "datastream"):
        raise SystemExit(f"pyflink_wc: unknown query {query!r} or api {api!r}")
    t0 = time.perf_counter()
    fn = run_sql if api == "sql" else run_datastream
    with open(outp, "w") as out:
        rows = fn(query, inp, out, size, slide, distance, parallelism)
    print(json.dumps({"elapsed_s": time.perf_counter() - t0, "rows_out": rows,
                      "settings": {"api": api, "parallelism": parallelism}}))


if __name__ == "__main__":
    main(sys.argv[1:])
