"""Unbounded inputs on Spark: Structured Streaming with ``transformWithStateInPandas``.

Scope: one O+ whose inputs are JSON Lines *directories* (growing streams of ``*.jsonl`` files,
read in name order: :mod:`.stream_files` stages them for Spark) or Spark's rate source, each
possibly through stateless operators, and whose sinks read the O+ (through stateless operators
or not).

Plan per input i: Spark's file source (text, ``maxFilesPerTrigger``) -> mapInArrow: parse,
validate, the fused stateless chain, f_MK, one row per *key group* ``g = stable_hash(key) % G``
owning a key of the tuple (SN duplication, STRETCH Alg. 1) -> ``withWatermark(et, "0 ms")``.
The inputs are unioned and grouped by g into ``transformWithStateInPandas``. With
``multipleWatermarkPolicy=min`` the query's watermark is the minimum over inputs of the
latest timestamp each has shown: exactly the readiness bound of a ScaleGate (journal
Definition 3), so the delay must be 0 for sorted sources — a positive delay only adds latency,
and rows are late only if a source goes back in time, which is reported as an error.

Per key group the processor keeps one pickled blob in a ValueState (RocksDB): the group's
O+ instance state and the rows not ready yet (ts above the watermark). On every call (new rows
or a timer) it runs the ready rows in (ts, input) order through the :class:`OPlusInstance` the
local executors use (Alg. 2 processSN), advances it to the watermark (f_O, f_S) and registers
one event-time timer at the group's next actionable time. One state get, one update and at
most one timer per group and micro-batch: each is a ~ms round trip to the JVM
(notes/SPARK.md), so their number must not grow with the number of keys.

End of input: a line ``{"ts": LAST, "__end__": true}`` in an input's directory (or staged by
the engine after ``until="idle:S"``, :mod:`.stream_files`); once every
input has ended, the watermark jumps to :data:`END_TS` and every group expires all its windows
(the local executors' rule); the marker goes to every group when that expiry needs the latest
ts of all inputs (``single`` window sets).

Output: append mode, one row per group call holding that call's outputs pickled together
(Spark's per-row costs are paid per group, not per output tuple); ``foreachBatch`` merges a
micro-batch's rows by ts on the driver and commits them as epoch ``batchId``
(:class:`~stretchflow.io.parts.EpochOutputs`): a file sink is a part directory, one part per
batch id renamed into place atomically, so a batch Spark replays (its commit was not logged)
replaces its own part — exactly once — and a resumed query continues the directory. An output
leaves in the batch whose watermark passes it: parts in id order are one ts-sorted stream.

Columnar path (A+ with a columnar f_MK, :mod:`.columnar`): one row per key group and batch,
its (ts, key, value) rows as Arrow IPC, fed to ``AggregateInstance.process_keyed``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from ..errors import FlowDefinitionError, OperatorError, SourceError, StretchflowError
from ..flow import Flow
from ..io.parts import EpochOutputs, sweep_spark_temps
from ..io.sources import RateSource
from ..operators.oplus import OPlus
from ..operators.stateless import apply_batch
from . import columnar, plan
from .session import temp_checkpoint
from .stream_files import (
    LiveInputs,
    OpenWindows,
    Reader,
    open_counts,
    parse_spark_until,
    stage_all,
    warn_open,
)
from .stream_files import json_reader as json_reader  # re-exported: tests and benches use it
from .stream_files import rate_reader as rate_reader

#: the timestamp of the end-of-input rows: 2**47 ms, about year 6400, beyond any real event
#: time and within Spark's timestamps
END_TS = 1 << 47
END_FIELD = "__end__"
#: for an O+ whose end-of-input expiry needs the latest ts of all inputs (``needs_last_ts``)
#: the end-of-input row goes to every key group: G is bounded for streaming
MAX_STREAM_GROUPS = 1 << 16

ROUTED_STREAM = "g int, ts long, i int, seq long, sub int, p binary, k binary"
#: the processor's output rows: one per group call, p the pickled [(ts, payload)] of its
#: outputs in ts order, ts the first of them, seq the group, n how many; w and nk: the
#: window sets and keys the group still holds (stream_files.OpenWindows)
OUT_SCHEMA = "ts long, seq long, n int, p binary, w int, nk int"


def end_marker(last_ts: int) -> str:
    """The JSON line that ends an input directory (``last_ts``: the input's latest ts)."""
    return f'{{"ts": {int(last_ts)}, "{END_FIELD}": true}}\n'



class _Rows:
    """Columns of :data:`ROUTED_STREAM` rows being built."""

    def __init__(self) -> None:
        self.cols: tuple[list, ...] = ([], [], [], [], [], [], [])

    def add(self, g: int, ts: int, i: int, sub: int, p: bytes, k: bytes, seq: int = 0) -> None:
        c = self.cols
        c[0].append(g), c[1].append(ts), c[2].append(i), c[3].append(seq), c[4].append(sub)
        c[5].append(p), c[6].append(k)

    def end(self, i: int, last_ts: int, groups: range) -> None:
        """End of input ``i``: the row's END_TS moves the watermark (one group is enough: the
        watermark is global and every group's timer fires); groups need the input's last ts
        only if end-of-input expiry depends on it (``groups``: all of them then)."""
        mark = plan.dumps((END_FIELD, last_ts))
        for g in groups:
            self.add(g, END_TS, i, 0, mark, b"")

    def batch(self) -> Any:
        import pyarrow as pa

        g, ts, i, seq, sub, p, k = self.cols
        return pa.RecordBatch.from_arrays(
            [pa.array(g, pa.int32()), pa.array(ts, pa.int64()), pa.array(i, pa.int32()),
             pa.array(seq, pa.int64()), pa.array(sub, pa.int32()), pa.array(p, pa.binary()),
             pa.array(k, pa.binary())],
            names=["g", "ts", "i", "seq", "sub", "p", "k"])


def stream_route_kernel(chain: list, op: OPlus, i: int, n_groups: int, read: Reader,
                        count: Any = None) -> Any:
    """mapInArrow function: the records ``read`` gives (JSON lines, rate rows) -> chain -> one
    row per key group owning a key of the tuple (the tuple pickled, with the keys the group
    owns); ``count``: a Spark accumulator of the records read (not blank lines, not end
    markers)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        buckets = plan.Buckets(n_groups, n_groups)  # bucket = key group
        ends = range(n_groups if plan.needs_last_ts(op) else 1)
        dumps = plan.dumps
        for batch in batches:
            rows = _Rows()
            k = 0
            for ts, rec, seq in read(batch):
                if rec is None:
                    rows.end(i, ts, ends)
                    continue
                k += 1
                outs = plan.chain_outputs(chain, ts, rec) if chain else [rec]
                for j, q in enumerate(outs):
                    parts = plan.route(op, q, i, ts, buckets)
                    if not parts:
                        continue
                    qb = dumps(q)
                    for g, part in parts.items():
                        rows.add(g, ts, i, j, qb, dumps(part), seq)
            if count is not None:
                count.add(k)
            yield rows.batch()

    return plan.gc_paused(run)


#: ``sub`` of a row holding an Arrow IPC stream of (ts, k, v) rows of one key group
COLUMNS = -1


def stream_explode_kernel(chain: list, op: Any, n_groups: int, read: Reader,
                          count: Any = None) -> Any:
    """mapInArrow function of the columnar path (:mod:`.columnar`, an A+ with a columnar f_MK,
    e.g. wordcount): records -> tuples -> chain -> f_MK's columnar form -> *one* row per
    key group and batch holding the group's (ts, key, value) rows as an Arrow IPC stream
    (``sub`` = :data:`COLUMNS`). The row's ts is the latest of its rows: the watermark
    Spark derives from these rows is the one it derives from one row per tuple."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        buckets = plan.Buckets(n_groups, n_groups)
        for batch in batches:
            rows = _Rows()
            ts_l: list[int] = []
            payloads: list[Any] = []
            k = 0  # records, for count
            for ts, rec, _ in read(batch):
                k += rec is not None
                if rec is None:
                    rows.end(0, ts, range(1))
                elif chain:
                    for q in plan.chain_outputs(chain, ts, rec):
                        ts_l.append(ts), payloads.append(q)
                else:
                    ts_l.append(ts), payloads.append(rec)
            if payloads:
                t_col, keys, values = columnar.explode(op, ts_l, payloads)
                table = pa.table({"ts": pa.array(t_col, pa.int64()), "k": keys,
                                  "v": pa.array(values, pa.int64())})
                for g, part in columnar.by_owner(table, buckets):
                    rows.add(g, _latest(part), 0, COLUMNS, columnar.ipc_bytes(part), b"")
            if count is not None:
                count.add(k)
            yield rows.batch()

    return plan.gc_paused(run)


def _latest(table: Any) -> int:
    """The latest ts of a (ts, k, v) table."""
    import pyarrow.compute as pc

    return pc.max(table.column("ts")).as_py()


_FIELDS = ("groups", "_lheap", "_pending", "_seq", "W", "_last_l")


def make_processor(op: OPlus, n_groups: int, n_inputs: int) -> Any:
    """A StatefulProcessor running ``op`` per key group (see the module docstring)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    ready = _ready_columns if columnar.applies(op) else _ready_rows

    class OPlusProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.blob = handle.getValueState("group", "blob binary")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            frames = list(rows)
            new = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            with plan.no_gc():  # unpickling a group's state allocates millions of objects
                out = list(self._step(int(key[0]), timerValues.getCurrentWatermarkInMs(), new))
            yield from out

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[Any]:
            with plan.no_gc():
                out = list(self._step(int(key[0]), timerValues.getCurrentWatermarkInMs(), None,
                                      fired=expiredTimerInfo.getExpiryTimeInMs()))
            yield from out

        def _step(self, g: int, wm: int, new: Any, fired: int | None = None) -> Iterator[Any]:
            current: list[Any] = [None]
            inst = plan.given_keys(op, current).instance()
            saved = self.blob.get()  # None when unset (one round trip, not two)
            if saved is not None:
                st = plan.loads(saved[0])
                for f, v in zip(_FIELDS, st["inst"], strict=True):
                    setattr(inst, f, v)
                buf, ends, timer = st["buf"], st["ends"], st["timer"]
            else:
                buf, ends, timer = None, {}, None
            if fired is not None and fired == timer:
                timer = None  # a fired timer is gone
            try:
                # the group's ready tuples through Alg. 2; buf: what is not ready yet, first:
                # the watermark at which it must be processed
                buf, first = ready(inst, current, buf, new, wm, ends)
                if wm >= END_TS:  # the min over inputs: every input has ended
                    if ends:
                        inst.saw_time(max(ends.values()))
                    inst.finish()
                else:
                    inst.advance(wm)
            except StretchflowError:
                raise
            except Exception as e:
                raise OperatorError(op.name, None, "<watermark>", e) from e
            out = inst.take()
            nxt = _next_event(inst, first)
            if timer is not None and timer != nxt:
                self.handle.deleteTimer(timer)
            if nxt is not None and nxt != timer:
                self.handle.registerTimer(nxt)
            if nxt is None and first is None:
                self.blob.clear()
            else:
                self.blob.update((plan.dumps({
                    "inst": [getattr(inst, f) for f in _FIELDS], "buf": buf, "ends": ends,
                    "timer": nxt}),))
            w, nk = open_counts(inst)
            # a row also without outputs: the driver learns what the group left open
            yield pd.DataFrame({"ts": [out[0][0] if out else 0], "seq": [g], "n": [len(out)],
                                "p": [plan.dumps(out)], "w": [w], "nk": [nk]})

        def close(self) -> None:
            pass

    return OPlusProcessor()


def _behind(i: int, ts: int, w: Any, p: Any) -> SourceError:
    return SourceError(f"input {i}", f"ts {ts}",
        f"timestamp {ts} is behind the watermark {w} (the input went back in time, or its "
        f"files were not written in ts order: each new file's name must sort after the earlier "
        f"ones and its records be later)", p)


def _ready_rows(inst: Any, current: list, buf: list | None, new: Any, wm: int,
                ends: dict) -> tuple[list, int | None]:
    """The tuple-at-a-time path: buffered and new rows in (ts, input, seq, sub) order, those
    with ts <= wm through ``inst.process`` with the keys the group owns; returns the rows
    left and the earliest ts among them."""
    buf = buf or []
    if new is not None and len(new):
        buf.extend(zip(new["ts"].tolist(), new["i"].tolist(), new["seq"].tolist(),
                       new["sub"].tolist(), new["p"].tolist(), new["k"].tolist(),
                       strict=True))
        buf.sort(key=lambda r: r[:4])
    k = 0
    for ts, i, _, _, raw, kb in buf:
        if ts > wm:
            break
        k += 1
        p = plan.loads(raw)
        if ts == END_TS:
            ends[i] = p[1]
            continue
        current[0] = plan.loads(kb)
        if ts < inst.W:
            raise _behind(i, ts, inst.W, p)
        try:
            inst.process(ts, p, i)
        except StretchflowError:
            raise
        except Exception as e:
            raise OperatorError(inst.op.name, ts, p, e) from e
    del buf[:k]
    return buf, (buf[0][0] if buf else None)


def _ready_columns(inst: Any, current: list, buf: bytes | None, new: Any, wm: int,
                   ends: dict) -> tuple[bytes | None, int | None]:
    """The columnar path: the group's buffered and new (ts, key, value) rows sorted by ts
    (stable: arrival order among equal ts), those with ts <= wm through
    ``AggregateInstance.process_keyed`` (Alg. 2 with the values of each (window, key)
    summed); returns the rows left (an Arrow IPC stream) and when they must be processed.

    That is not when the earliest becomes ready but when the first window it falls in
    closes, the right boundary of earliestWinL(ts): an A+ emits only at window expiry, so a
    ready row may wait in the buffer until then. The wake-up time moves once per window
    slide instead of every micro-batch, which spares a timer delete and register (two state
    server round trips) per group and batch."""
    import numpy as np
    import pyarrow as pa

    tables = [pa.ipc.open_stream(buf).read_all()] if buf is not None else []
    if new is not None and len(new):
        for i, sub, raw in zip(new["i"].tolist(), new["sub"].tolist(), new["p"].tolist(),
                               strict=True):
            if sub == COLUMNS:
                tables.append(pa.ipc.open_stream(raw).read_all())
            else:  # an end-of-input row
                ends[i] = plan.loads(raw)[1]
    if not tables:
        return None, None
    table = pa.concat_tables(tables)
    ts = table.column("ts").to_numpy()
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    n = int(np.searchsorted(ts, wm, side="right"))
    if n:
        if ts[0] < inst.W:
            k = int(order[0])
            raise _behind(0, int(ts[0]), inst.W, {"key": table.column("k")[k].as_py()})
        keys = table.column("k").take(pa.array(order[:n]))
        values = table.column("v").to_numpy()[order[:n]]
        try:
            inst.process_keyed(ts[:n], keys, values)
        except StretchflowError:
            raise
        except Exception as e:
            raise OperatorError(inst.op.name, None, "<a run of tuples>", e) from e
    if n == len(ts):
        return None, None
    rest = table.take(pa.array(order[n:]))
    op = inst.op
    return columnar.ipc_bytes(rest), ((int(ts[n]) - op.WS) // op.WA + 1) * op.WA + op.WS


def _next_event(inst: Any, first: int | None) -> int | None:
    """The earliest watermark at which the group has work: its buffered rows must be
    processed (``first``), a window expires, or a held f_U output is released."""
    cands = []
    if first is not None:
        cands.append(first)
    if inst._lheap:
        cands.append(inst._lheap[0][0] + inst.op.WS)
    if inst._pending:
        cands.append(inst._pending[0][0])
    return int(min(cands)) if cands else None


def is_stream_source(spec: Any) -> bool:
    """True for an input the streaming path reads: Spark's rate source, or a JSON Lines
    source on a directory (a growing stream of files)."""
    from ..io.sources import JsonLines

    return isinstance(spec, RateSource) or (isinstance(spec, JsonLines)
                                            and Path(spec.path).is_dir())


def stream_shape(flow: Flow) -> tuple[plan.Stage, plan.Feed]:
    """The one O+ stage and the sink feeds of a flow the streaming path can run."""
    stages, sink_feeds = plan.analyse(flow)
    if len(stages) != 1:
        raise FlowDefinitionError(
            f"the spark streaming path runs flows with exactly one O+, this one has "
            f"{len(stages)} (run bounded inputs as a batch job instead)")
    stage = stages[0]
    for f in stage.feeds:
        if not (f.producer.kind == "source" and is_stream_source(f.producer.spec)):
            raise FlowDefinitionError(
                f"spark streaming reads JSON Lines directories and Spark's rate source; input "
                f"{f.producer.name!r} is neither (give sf.io.jsonl(a_directory) or "
                f"sf.io.rate(rows_per_second))")
    for f in sink_feeds:
        if f.producer is not stage.node:
            raise FlowDefinitionError("spark streaming: every sink must read the O+ output")
    return stage, sink_feeds


def build_query(flow: Flow, spark: Any, n_groups: int, max_files: int,
                counts: list | None = None, paths: dict[int, str] | None = None) -> Any:
    """The streaming DataFrame of the O+ outputs, in the stream schema; ``counts[i]``: an
    accumulator of the records input i reads (None: not counted); ``paths[i]``: the staging
    directory Spark reads for directory input i (:mod:`.stream_files`; None: the input's
    directory itself, in Spark's modification-time order)."""
    from pyspark.sql import functions as F

    stage, _ = stream_shape(flow)
    if not 1 <= n_groups <= MAX_STREAM_GROUPS:
        raise FlowDefinitionError(
            f"spark streaming: key groups must be in 1..{MAX_STREAM_GROUPS}, got {n_groups}")
    op = stage.op
    parts = []
    for i, f in enumerate(stage.feeds):
        src = f.producer.spec
        if isinstance(src, RateSource):
            raw = (spark.readStream.format("rate")
                   .option("rowsPerSecond", src.rows_per_second).load().select("value"))
            read = rate_reader(src)
        else:
            raw = (spark.readStream.format("text").option("maxFilesPerTrigger", max_files)
                   .option("pathGlobFilter", "*.jsonl")
                   .load(paths[i] if paths and i in paths else str(src.path))
                   .select("value", F.input_file_name().alias("file")))
            read = json_reader(src.name, src.ts_field,
                               str(src.path) if paths and i in paths else None)
        c = counts[i] if counts else None
        kernel = (stream_explode_kernel(f.chain, op, n_groups, read, c) if columnar.applies(op)
                  else stream_route_kernel(f.chain, op, i, n_groups, read, c))
        routed = raw.mapInArrow(kernel, ROUTED_STREAM)
        # delay 0: sources are sorted, so the watermark is the latest ts (Definition 3)
        parts.append(routed.withColumn("et", F.timestamp_millis("ts"))
                     .withWatermark("et", "0 milliseconds"))
    u = parts[0]
    for other in parts[1:]:
        u = u.unionByName(other)
    # et only carries the watermark: the processor reads ts (and pandas could not hold END_TS
    # as a datetime64[ns])
    return u.drop("et").groupBy("g").transformWithStateInPandas(
        statefulProcessor=make_processor(op, n_groups, len(stage.feeds)),
        outputStructType=OUT_SCHEMA, outputMode="Append", timeMode="EventTime")


class StreamRun:
    """A running (or finished) streaming query writing a flow's sinks. ``until``: when the
    directory inputs end (:mod:`.stream_files`): None, the files present at the start;
    ``"marker"``, ``"idle:SECONDS"`` or ``"never"``: the query runs on and stages new files."""

    def __init__(self, flow: Flow, spark: Any, checkpoint: str | os.PathLike, n_groups: int,
                 max_files: int = 1, trigger: str | None = None, until: str | None = None):
        self.flow = flow
        self.spark = spark
        self.checkpoint = str(checkpoint)
        self.n_groups = n_groups
        self.max_files = max_files
        self.trigger = trigger
        self.until = until
        self.live_kind = parse_spark_until(until)[0]  # a bad until fails before Spark starts
        stage, self.sink_feeds = stream_shape(flow)
        #: Spark's rate source cannot run availableNow (it would end at once): queries reading
        #: it run on a processing-time trigger and end when the end-of-input watermark has run
        self.rate = any(isinstance(f.producer.spec, RateSource) for f in stage.feeds)
        self.dirs = [(i, f.producer.spec) for i, f in enumerate(stage.feeds)
                     if not isinstance(f.producer.spec, RateSource)]
        self.sources = [f.producer.name for f in stage.feeds]
        self.batches: list[dict[str, Any]] = []
        self.query: Any = None
        self.outputs: EpochOutputs | None = None
        self.counts: list[Any] = []
        self.inputs: LiveInputs | None = None
        self.open: OpenWindows | None = None

    def start(self) -> StreamRun:
        spark = self.spark
        spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
        if not self.counts:
            self.counts = [spark.sparkContext.accumulator(0) for _ in self.sources]
        outputs = self.outputs = self.outputs or EpochOutputs([s for _, s in self.flow.sinks])
        # the output's owner: the query id, kept in the checkpoint (any URI Spark takes)
        outputs.bind(lambda: str(self._started().id))
        sweep_spark_temps(self.checkpoint)  # after the output's lock (EpochOutputs) is held
        try:  # staged under the lock too: one run stages into a checkpoint at a time
            self.inputs, paths = stage_all(self.dirs, self.checkpoint, self.until)
            opened = self.open = OpenWindows(self.checkpoint)
            df = build_query(self.flow, spark, self.n_groups, self.max_files, self.counts,
                             paths)
        except BaseException:
            self.close_sinks()  # the output's lock: a file named out of order ends the run
            raise

        def write(batch_df: Any, batch_id: int) -> None:
            t0 = time.perf_counter()
            table = batch_df.toArrow()  # runs the micro-batch's Spark job
            t1 = time.perf_counter()
            n = sum(table.column("n").to_pylist())
            outs: list[list[tuple[int, Any]]] = [[] for _ in self.sink_feeds]
            if n:
                import pyarrow.compute as pc

                table = table.take(pc.sort_indices(table, sort_keys=[("ts", "ascending"),
                                                                     ("seq", "ascending")]))
                items: list[tuple[int, Any]] = []
                with plan.no_gc():  # as batch.write_sink: many new acyclic objects
                    for raw in table.column("p").to_pylist():
                        items.extend(plan.loads(raw))
                    items.sort(key=itemgetter(0))  # stable: sorted runs, merged by timsort
                    for j, feed in enumerate(self.sink_feeds):
                        out = items
                        for op in feed.chain:
                            out = apply_batch(op, out)
                        outs[j] = out
            with plan.no_gc():
                outputs.commit(batch_id, outs)  # also when empty: a replay may empty a part
            opened.update(zip(table.column("seq").to_pylist(), table.column("w").to_pylist(),
                                 table.column("nk").to_pylist(), strict=True))
            self.batches.append({"batch": batch_id, "outputs": n, "job_s": t1 - t0,
                                 "sink_s": time.perf_counter() - t1})

        w = df.writeStream.foreachBatch(write).option("checkpointLocation", self.checkpoint)
        if self.trigger is None and (self.rate or self.live_kind != "present"):
            w = w.trigger(processingTime="1 second" if self.rate else "500 milliseconds")
        elif self.trigger in (None, "availableNow"):
            w = w.trigger(availableNow=True)
        else:
            w = w.trigger(processingTime=self.trigger)
        self.query = None
        self.query = w.start()
        return self

    def _started(self) -> Any:  # the first batch may run before start() returns the query
        while self.query is None:
            time.sleep(0.005)
        return self.query

    def await_end(self, timeout: float | None = None) -> bool:
        """Waits for the query to finish (or ``timeout`` s); errors re-raised. An availableNow
        query finishes by itself; one on a processing-time trigger (a rate source, ``until``)
        is stopped once a micro-batch has run with the end-of-input watermark (all windows
        expired), new files staged meanwhile (:mod:`.stream_files`). True when it finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        live = self.rate or self.live_kind != "present"
        try:
            while True:
                # Spark refuses a zero timeout
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                if not live:  # without a timeout pyspark returns None, once terminated
                    return self.query.awaitTermination(left) is not False
                if self.query.awaitTermination(0.2 if left is None else min(0.2, left)):
                    return True
                if self.ended():
                    self.query.stop()
                    return True
                if self.inputs is not None:
                    self.inputs.poll()
                    self.inputs.watch(self.query.lastProgress, self.query.status)
                if deadline is not None and time.monotonic() >= deadline:
                    return False
        except Exception as e:
            err = plan.translate(e)
            if err is e:
                raise
            raise err from None

    def ended(self) -> bool:
        """True once a micro-batch has run with the end-of-input watermark."""
        from datetime import datetime

        p = self.query.lastProgress if self.query is not None else None
        wm = (_get(p, "eventTime") or {}).get("watermark") if p is not None else None
        if not wm:
            return False
        return datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() * 1000 >= END_TS

    def open_windows(self) -> tuple[int, int]:
        """(window sets, keys) the query's state still holds after its last batch."""
        return self.open.total() if self.open is not None else (0, 0)

    def stop(self) -> None:
        """Stops the query at a micro-batch boundary (its checkpoint stays valid)."""
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def close_sinks(self) -> None:
        if self.outputs is not None:
            self.outputs.close()
            self.outputs = None

    def records_in(self) -> dict[str, int]:
        """Records (not blank lines, end markers) each input read: a replayed batch twice."""
        return {name: c.value for name, c in zip(self.sources, self.counts, strict=True)}

    def progress(self) -> list[dict[str, Any]]:
        return list(self.query.recentProgress) if self.query is not None else []


def run_stream(flow: Flow, spark: Any, checkpoint: str | os.PathLike | None, n_groups: int,
               max_files: int = 1, until: str | None = None,
               timeout: float | None = None) -> dict[str, Any]:
    """Runs the streaming query to its end and closes the sinks: over the files present now
    (``until`` None, ``availableNow``) or as ``until`` says (:class:`StreamRun`); returns
    per-batch timings from the query's progress (``rows``: lines Spark read), ``tuples_in``:
    records read per input, ``open_windows``: ((key, window) states, keys) left open — a run
    that ends with some logs one WARNING saying how to close them. ``checkpoint`` None: a temporary
    one, removed whatever way the run ends. ``timeout``: stop after that many seconds
    (a FlowDefinitionError if the end was not reached: a bound for tests)."""
    for n in flow.nodes:
        if n.kind == "source" and isinstance(n.spec, RateSource) and n.spec.rows is None:
            raise FlowDefinitionError(
                f"input {n.name!r}: an unbounded rate source never ends; give rows=N, or "
                f"start a StreamRun and stop it yourself")
    with temp_checkpoint(checkpoint) as ckpt:
        run = StreamRun(flow, spark, ckpt, n_groups, max_files, until=until).start()
        try:
            done = run.await_end(timeout)
        finally:
            run.stop()
            run.close_sinks()
        if not done:
            raise FlowDefinitionError(f"spark streaming: the run did not reach its end "
                                      f"(until={until!r}) within {timeout} s")
        windows, keys = run.open_windows()
    warn_open(windows, keys)
    prog = run.progress()
    batches = [{"rows": _get(p, "numInputRows"),
                "duration_ms": _get(p, "durationMs").get("triggerExecution")} for p in prog]
    return {"batches": batches, "rows_in": sum(b["rows"] for b in batches),
            "tuples_in": run.records_in(), "open_windows": [windows, keys],
            "checkpoint": None if checkpoint is None else str(checkpoint)}


def _get(progress: Any, name: str) -> Any:
    """A field of a StreamingQueryProgress (an object in pyspark 4, a dict before)."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)
