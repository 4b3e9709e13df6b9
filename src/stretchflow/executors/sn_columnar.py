"""SN process channels on whole Arrow batches: the columnar sliced A+ split across processes
(issue #16, Deliver 2).

When the SN engine runs an A+ with columnar forms (``Aggregate.columnar``) on process channels,
reading a source that gives batches (``Source.batches``: a sorted, unpaced file) and written
only by sinks, no tuple is pickled:

* **Splitter** (a thread of the parent, STRETCH Alg. 1 on a batch): reads Arrow batches,
  applies f_MK's columnar form once (the explode: rows, key columns, values), computes each
  row's key group with :func:`~stretchflow.operators.columnar_kernels.key_groups` (a hash of
  the key's value in numpy, the same in every process; computed on the batch's distinct keys
  when the key is one column) and its channel by f_μ (the consistent-hashing assignment of
  :func:`.sn_channel.group_assignment`), and sends every channel its rows — (slice, key
  columns, value; one key column dictionary-encoded) — as one Arrow IPC stream. A tuple is
  never duplicated: each of its rows goes to the one channel owning its key. Every channel
  gets every pulse (possibly with no rows) and the batch's last timestamp as watermark.
* **Channels** (processes, Alg. 2 on a batch): each runs a
  :class:`~stretchflow.operators.columnar.ColumnarSlicedInstance` (one instance owning all the
  keys it is sent): per-(slice, key) partials by the same kernels as the reference engine's
  columnar path, windows combined when the watermark passes their right boundary and sent
  back as one Arrow IPC table per pulse (f_O's columnar form, timestamps beside it).
* **Merger** (a thread of the parent): takes the channels' replies pulse by pulse (each
  channel answers every pulse, in order), merges them by timestamp and writes the sinks'
  batches — the reference's output, in timestamp order.

A batch the columnar f_MK refuses (a payload without a string ``text``, say) is exploded tuple
at a time in the splitter (f_MK per tuple, so its error names the tuple) and its (key, value)
pairs travel pickled to their channels, which apply f_U into the same instance's dict slices
(the columnar instance combines both kinds of slice, as on the reference engine).

Not on this path (the run takes the tuple path and ``extra["columnar_fallback"]`` says why):
thread channels, ``columnar="off"``, reconfiguration (``reconfigure`` or a controller: the
partials are not migrated), checkpoints, and any flow other than one source → this A+ → sinks.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from ..batch import Batch, arrow_ints, int_numpy
from ..flow import Flow, Node
from ..operators.aggregate_instance import _MISSING
from ..operators.columnar import ColumnarSlicedInstance, key_arrays
from ..operators.columnar_kernels import key_groups
from ..operators.keys import key_pairs
from ..runtime import (
    IngestClock,
    LatencyRecorder,
    RunControl,
    Stopped,
    raise_user_error,
    user_error,
)
from ..runtime.pump import write_batch
from ..runtime.tempdirs import sweep_stale
from . import vsn_batches
from .sn_channel import group_assignment
from .sn_process import (
    ProcessChannel,
    ProcessTransport,
    _preload_modules,
    channel_io,
    report_error,
    stable_group_function,
)

__all__ = ["ColumnarPlan", "plan", "run_columnar"]

_TS = "__stretchflow_ts"  # the timestamp column of an output table on its way back
_QUEUE_BATCHES = 16  # default channel queue, in source batches (vsn_batches.COLUMNAR_BATCH)


class ColumnarPlan:
    """What the columnar SN path runs: the A+ node, its source node, the source's batches."""

    def __init__(self, node: Node, source: Node, batches: Iterator[Batch]):
        self.node, self.source, self.batches = node, source, batches


def plan(flow: Flow, *, reconfiguring: bool, checkpointing: bool) -> ColumnarPlan | str:
    """The columnar path for ``flow`` on process channels with ``columnar="on"`` (the SN
    executor checks those, and that the flow has an A+ with columnar forms), or why not."""
    ops = [n for n in flow.nodes if n.kind == "oplus"]
    if reconfiguring:
        return "a reconfiguring run (reconfigure or controller): partials are not migrated"
    if checkpointing:
        return "a checkpointed run: partials are not snapshotted"
    sources = [n for n in flow.nodes if n.kind == "source"]
    node = ops[0]
    if (len(ops) != 1 or len(sources) != 1 or len(flow.nodes) != 2
            or node.inputs != [sources[0]] or not flow.sinks
            or any(n is not node for n, _ in flow.sinks)):
        return "a flow other than one source -> one A+ -> sinks"
    batches = getattr(sources[0].spec, "batches", None)
    it = batches(vsn_batches.COLUMNAR_BATCH) if batches is not None else None
    if it is None:
        return "a source that gives no batches (not a sorted, unpaced file)"
    return ColumnarPlan(node, sources[0], it)


# -- Arrow IPC both ways ----------------------------------------------------------------------
def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write(table)
    return sink.getvalue().to_pybytes()


def _read(data: bytes) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _pack(batch: Batch | None) -> tuple | None:
    """A channel's windows for the parent: an IPC table with the timestamps as a column, or
    (windows the columnar instance combined in Python: keys Arrow cannot hold) pickled."""
    if batch is None or not len(batch):
        return None
    if batch.has_table:
        return ("ipc", _ipc(batch.table.append_column(_TS, arrow_ints(batch.ts))))
    return ("py", batch.ts.tolist(), list(batch.payloads))


def _unpack(packed: tuple) -> Batch:
    if packed[0] == "py":
        return Batch(packed[1], payloads=packed[2])
    table = _read(packed[1])
    i = table.schema.get_field_index(_TS)
    return Batch(int_numpy(table.column(i)), table=table.remove_column(i))


# -- the channel process ------------------------------------------------------------------------
class _Channel:
    """Alg. 2 on pulses of exploded rows: one columnar sliced instance over this channel's
    keys (see the module doc)."""

    def __init__(self, j: int, op: Any):
        self.j, self.op = j, op
        if not op.columnar:
            raise ValueError(f"{op.name}: not an A+ with columnar forms")
        self.inst = _ChannelInstance(op)
        self.seq = 0

    def rows(self, msg: tuple) -> tuple:
        _, seq, payload, wm = msg
        if seq != self.seq + 1:  # every pulse reaches every channel, in order
            raise RuntimeError(f"sn channel {self.j}: pulse {seq} after pulse {self.seq}")
        self.seq = seq
        t0 = time.perf_counter()
        if payload is not None:
            if payload[0] == "ipc":
                self._add_rows(_read(payload[1]), payload[2])
            else:
                self._add_pairs(payload[1])
        try:
            self.inst.advance(wm)
        except Exception as e:  # noqa: BLE001 - f_O's columnar form, named by the watermark
            raise_user_error(self.op.name, wm, "<watermark>", e)
        return ("out", self.j, _pack(self.inst.take_batch()), wm, seq,
                time.perf_counter() - t0)

    def _add_rows(self, table: Any, base: int) -> None:
        """Rows ``(s, k0.., [v])`` from the splitter: slice numbers from ``base``, key
        columns, values (absent: all 1)."""
        import numpy as np

        names = table.column_names
        n = table.num_rows
        starts = base + int_numpy(table.column("s")) * self.op.slice_width
        keys = [table.column(c).combine_chunks() for c in names if c.startswith("k")]
        values = int_numpy(table.column("v")) if "v" in names else np.ones(n, np.int64)
        # the reference's accumulate step (operators/columnar.py) on rows exploded upstream;
        # a slice start stands for its rows' timestamps (it lies in the same slice)
        self.inst._accumulate(starts, np.arange(n, dtype=np.int64),
                              keys[0] if len(keys) == 1 else tuple(keys), values)

    def _add_pairs(self, tuples: list[tuple[int, Any, list]]) -> None:
        """f_U per (slice, key) for the pairs of tuples the columnar f_MK refused, into the
        instance's dict slices (the sliced instance's handleInputTuple, keys given)."""
        inst, op = self.inst, self.op
        update, init, width = op.user_update, op.user_init, op.slice_width
        sg = inst.groups[0]
        for ts, v, pairs in tuples:
            s = ts - ts % width
            d = sg.get(s)
            if d is None:
                d = inst._entry(sg, s, 0)
            try:
                for k, x in pairs:
                    acc = d.get(k, _MISSING)
                    d[k] = update(init() if acc is _MISSING else acc, x)
            except Exception as e:  # noqa: BLE001 - a user's f_U: named by its tuple
                raise_user_error(op.name, ts, v, e)

    def end(self) -> tuple:
        t0 = time.perf_counter()
        try:
            self.inst.finish()
        except Exception as e:  # noqa: BLE001
            raise_user_error(self.op.name, None, None, e)
        return ("final", self.j, _pack(self.inst.take_batch()), time.perf_counter() - t0)


class _ChannelInstance(ColumnarSlicedInstance):
    """The reference's columnar sliced instance, taking a key column that travelled
    dictionary-encoded as it is: :func:`.columnar_kernels.sum_by` groups by its codes
    (``dictionary_encode`` of a dictionary array hashes nothing) and gives the partials
    plain key columns of the dictionary's type, as for any other batch."""

    def _key_columns(self, keys: Any) -> dict[str, Any]:
        import pyarrow as pa

        arrays = key_arrays(keys)
        if not all(pa.types.is_dictionary(a.type) for a in arrays):
            return super()._key_columns(keys)
        plain = [a.type.value_type for a in arrays]
        if self._key_types is None:
            self._key_types = plain
        if plain != self._key_types:  # another type than the first batch's: cast as usual
            return super()._key_columns(tuple(a.dictionary_decode() for a in arrays))
        return {f"k{i}": a for i, a in enumerate(arrays)}


def _columnar_main(blob: bytes, j: int, n_groups: int, assign: list[int], store_path: str,
                   inq: Any, outq: Any, pdeathsig: bool = True) -> None:
    """A columnar channel process (the signature of :func:`.sn_process._channel_main`, which
    :class:`ProcessChannel` starts): pulses of rows until ``end``."""
    import pickle

    put, get = channel_io(inq, outq, pdeathsig)
    try:
        ch = _Channel(j, pickle.loads(blob))
        put(("ready", j))
        while True:
            msg = get()
            if msg[0] == "rows":
                put(ch.rows(msg))
            else:  # "end"
                put(ch.end())
                return
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        report_error(put, j, e)
        raise SystemExit(1) from None


class _Transport(ProcessTransport):
    """Process channels running :func:`_columnar_main` (no migration store)."""

    main = staticmethod(_columnar_main)

    def __init__(self, op: Any, n_groups: int, start_method: str):
        super().__init__(op, n_groups, start_method)
        self.store_path = ""
        if start_method == "forkserver":  # channels fork with Arrow and this module loaded
            self.ctx.set_forkserver_preload(_preload_modules([op]) + [__name__, "pyarrow"])


class _Host:
    """What :class:`ProcessChannel` and :meth:`ProcessTransport.wait_ready` read of a region."""

    def __init__(self, run: RunControl, name: str, queue_size: int, assign: list[int]):
        import queue

        self.run, self.name, self.queue_size, self.assign = run, name, queue_size, assign
        self.outq: queue.Queue = queue.Queue(maxsize=queue_size * 4)
        self.channels: dict[int, ProcessChannel] = {}


# -- the parent: splitter, merger, lifecycle ---------------------------------------------------
class _Run:
    def __init__(self, flow: Flow, cp: ColumnarPlan, parallelism: int, n_groups: int,
                 queue_size: int, start_method: str):
        import numpy as np

        self.op = cp.node.spec
        self.cp = cp
        self.p, self.G = parallelism, n_groups
        self.sinks = [s for _, s in flow.sinks]
        self.run = RunControl()
        self.assign = group_assignment(parallelism, n_groups)
        self._owner = np.asarray(self.assign, dtype=np.int64)
        self.host = _Host(self.run, self.op.name, queue_size, self.assign)
        self.transport = _Transport(self.op, n_groups, start_method)
        self.clock, self.latency = IngestClock(), LatencyRecorder()
        self.read = self.rows = self.pulses = 0
        self.bytes_out = self.bytes_in = 0
        self.blocked = self.startup_s = 0.0
        self.busy = [0.0] * parallelism
        self._py_group = stable_group_function(n_groups)
        self._key_groups: dict[Any, int] = {}

    # -- lifecycle --------------------------------------------------------------------------
    def execute(self) -> None:
        run, host = self.run, self.host
        threads: list[Any] = []
        chans: list[ProcessChannel] = []
        t0 = time.perf_counter()
        try:
            for j in range(self.p):  # the queues first: the splitter fills them meanwhile
                ch = self.transport.channel(host, j)
                host.channels[j] = ch
                chans.append(ch)
            # the splitter reads and explodes the first batches while the channel processes
            # start (a fork server's start-up imports the engine and Arrow: the longest step)
            for fn, role in ((self._splitter, "splitter"), (self._merger, "merger")):
                t = run.thread(fn, name=f"sn-{role}-{self.op.name}")
                t.start()
                threads.append(t)
            for ch in chans:
                if run.stop.is_set():
                    break
                ch.start()
                threads.extend(ch.threads)
            self.transport.wait_ready(host)
            self.startup_s = time.perf_counter() - t0
        except BaseException as e:
            run.fail(e)
        finally:
            try:
                for t in threads:
                    t.join()
            except BaseException as e:  # interrupted while waiting: stop everything, wait
                run.fail(e)
                for t in threads:
                    t.join()
            failed = run.error is not None
            for ch in chans:
                ch.close(failed)
        run.raise_error()

    def _send(self, q: Any, msg: Any) -> None:
        import queue

        try:
            q.put_nowait(msg)
        except queue.Full:
            t0 = time.perf_counter()
            self.run.put(q, msg)
            self.blocked += time.perf_counter() - t0

    # -- splitter ---------------------------------------------------------------------------
    def _splitter(self) -> None:
        run, chans = self.run, self.host.channels
        seq = 0
        for b in self.cp.batches:
            if run.stop.is_set():
                raise Stopped
            if not len(b):
                continue
            self.clock.record(b.first)
            self.read += len(b)
            parts = self._partition(b)
            seq += 1
            wm = b.last  # every later tuple is at or after it: a watermark for every channel
            for j, ch in chans.items():
                self._send(ch.q, ("rows", seq, parts[j], wm))
            self.clock.record(b.last)
        self.pulses = seq
        for ch in chans.values():
            run.put(ch.q, ("end",))

    def _partition(self, b: Batch) -> list[tuple | None]:
        """Each channel's rows of batch ``b`` (see the module doc), or None for no rows."""
        import numpy as np

        op = self.op
        try:
            rows, keys, values = op.columns(b.table if b.has_table else b.payloads)
        except Exception:  # noqa: BLE001 - the tuple path names the tuple it fails on
            return self._partition_pairs(b)
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return [None] * self.p
        cols = key_arrays(keys)
        # a row's slice is all the channel needs of its timestamp (its windows follow from
        # the slice: operators/slicing.py): sent as slice numbers from the batch's first
        # slice, int32, and the values only when they are not all 1 (a count's)
        width = op.slice_width
        t = b.ts[rows]
        sl = t - t % width
        base = int(sl.min())
        num = (sl - base) // width
        small = int(num.max()) < 2**31
        ts = num.astype(np.int32) if small else num
        values = np.asarray(values, dtype=np.int64)
        ones = bool((values == 1).all())
        self.rows += len(rows)
        names = ["s"] + [f"k{i}" for i in range(len(cols))] + ([] if ones else ["v"])
        if self.p == 1:
            return [self._rows_msg(names, [_ints(ts), *cols, *_vals(values, ones)], base)]
        try:
            chan, cols = self._channels_of(cols)
        except TypeError:  # a key type key_groups cannot hash (a float): per key, in Python
            self.rows -= len(rows)
            return self._partition_pairs(b)
        out: list[tuple | None] = []
        for j in range(self.p):
            sel = np.flatnonzero(chan == j)
            if not len(sel):
                out.append(None)
                continue
            out.append(self._rows_msg(names, [_ints(ts[sel]),
                                              *[_take(c, sel) for c in cols],
                                              *_vals(values[sel], ones)], base))
        return out

    def _rows_msg(self, names: list[str], arrays: list[Any], base: int) -> tuple:
        import pyarrow as pa

        data = _ipc(pa.Table.from_arrays(arrays, names=names))
        self.bytes_out += len(data)
        return ("ipc", data, base)

    def _channels_of(self, cols: list[Any]) -> tuple[Any, list[Any]]:
        """The channel of every row (f_μ of its key group), and the key columns to send.
        One key column is dictionary-encoded: its groups are hashed once per distinct key
        of the batch (a word repeats many times), and each channel is sent the codes of its
        rows with the batch's dictionary, not a copy of every string (the channel decodes
        them: that work is split between the channels, not done by the splitter)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        owner = self._owner
        if len(cols) != 1:
            return owner[key_groups(cols, self.G)], cols
        enc = pc.dictionary_encode(cols[0])
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        chan = owner[key_groups([enc.dictionary], self.G)][int_numpy(enc.indices)]
        return chan, [enc]

    def _partition_pairs(self, b: Batch) -> list[tuple | None]:
        """A batch the columnar f_MK refused: f_MK tuple at a time (an error names the
        tuple), each (key, value) pair to the channel owning its key."""
        op = self.op
        keys_of = op.user_keys
        per: list[list] = [[] for _ in range(self.p)]
        for ts, v in b.items():
            try:
                ks = keys_of(v)
            except Exception as e:  # noqa: BLE001 - a user's f_MK
                err = user_error(op.name, ts, v, e)
                if err is e:
                    raise
                raise err from e
            if not ks:
                continue
            by: dict[int, list] = {}
            for k, x in key_pairs(ks, v):
                by.setdefault(self.assign[self._group_of(k)], []).append((k, x))
            for j, pairs in by.items():
                per[j].append((ts, v, pairs))
                self.rows += len(pairs)
        return [("py", t) if t else None for t in per]

    def _group_of(self, k: Any) -> int:
        """A key's group as :meth:`_channels_of` gives it for the same key in a column, or,
        for a key Arrow cannot hold (never in a column), its stable hash's."""
        g = self._key_groups.get(k)
        if g is None:
            import pyarrow as pa

            try:
                cols = [pa.array([c]) for c in k] if type(k) is tuple else [pa.array([k])]
                g = int(key_groups(cols, self.G)[0])
            except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError):
                g = self._py_group(k)
            if len(self._key_groups) < 1 << 16:
                self._key_groups[k] = g
        return g

    # -- merger -----------------------------------------------------------------------------
    def _merger(self) -> None:
        run, p = self.run, self.p
        pending: list[deque] = [deque() for _ in range(p)]
        finals = 0
        while finals < p:
            msg = run.get(self.host.outq)
            pending[msg[1]].append(msg)
            while all(pending):
                msgs = [d.popleft() for d in pending]
                for m in msgs:
                    if m[0] == "final":
                        finals += 1
                        self.busy[m[1]] += m[3]
                    else:
                        self.busy[m[1]] += m[5]
                self._write([m[2] for m in msgs if m[2] is not None])

    def _write(self, packed: list[tuple]) -> None:
        """One pulse's windows of every channel, merged by timestamp, to every sink."""
        if not packed:
            return
        for pk in packed:
            if pk[0] == "ipc":
                self.bytes_in += len(pk[1])
        bs = [_unpack(pk) for pk in packed]
        batch = bs[0] if len(bs) == 1 else _merge(bs)
        for sink in self.sinks:
            write_batch(sink, batch)
        ts = batch.ts[:: max(1, len(batch) // 16)].tolist()
        self.latency.measure_outputs(self.clock, [(t, None) for t in ts])


def _take(col: Any, sel: Any) -> Any:
    """Rows ``sel`` (numpy int64, ascending) of a key column; of a dictionary column, its
    codes over the same dictionary."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_dictionary(col.type) and col.indices.type == pa.int32():
        codes = np.frombuffer(col.indices.buffers()[1], np.int32, len(col), col.offset)[sel]
        idx = pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes)])
        return pa.DictionaryArray.from_arrays(idx, col.dictionary)
    return col.take(arrow_ints(sel))


def _ints(a: Any) -> Any:
    """A numpy int32 or int64 array as an Arrow array sharing its memory."""
    import numpy as np
    import pyarrow as pa

    if a.dtype == np.int32:
        a = np.ascontiguousarray(a)
        return pa.Array.from_buffers(pa.int32(), len(a), [None, pa.py_buffer(a)])
    return arrow_ints(a)


def _vals(values: Any, ones: bool) -> list[Any]:
    return [] if ones else [arrow_ints(values)]


def _merge(bs: list[Batch]) -> Batch:
    """Batches each in timestamp order as one (a stable merge: equal timestamps keep the
    channels' order)."""
    import numpy as np
    import pyarrow as pa

    if all(b.has_table for b in bs):
        try:
            table = pa.concat_tables([b.table for b in bs], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            table = None
        if table is not None:
            ts = np.concatenate([b.ts for b in bs])
            order = np.argsort(ts, kind="stable")
            return Batch(ts[order], table=table.take(arrow_ints(order)))
    items = list(heapq.merge(*[b.items() for b in bs], key=itemgetter(0)))
    return Batch.of_items(items)


def run_columnar(flow: Flow, cp: ColumnarPlan, *, parallelism: int, n_groups: int,
                 capacity: int | None, start_method: str) -> dict[str, Any]:
    """Runs the columnar path (the sinks are open); returns what the run reports: the
    counts and the SN engine's ``extra`` keys that apply."""
    # flow control counts tuples: ``capacity`` source tuples per channel queue, in whole
    # source batches (at least two); by default 16 batches, so that the splitter can read
    # ahead while the channel processes start
    queue_size = (_QUEUE_BATCHES if capacity is None
                  else max(2, capacity // vsn_batches.COLUMNAR_BATCH))
    # this path makes no migration store, but sweeps what killed sn runs left (as the tuple
    # path does when it makes its store): a stale directory is removed by the next sn run
    sweep_stale("sn")
    r = _Run(flow, cp, parallelism, n_groups, queue_size, start_method)
    r.execute()
    name = cp.node.name
    return {
        "tuples_in": {cp.source.name: r.read},
        "extra": {
            "paths": {name: "columnar"},
            "parallelism": {name: parallelism},
            "parallelism_series": {name: [(0.0, parallelism)]},
            "reconfigurations": [],
            "metrics": [],
            "controller": None,
            "key_groups": n_groups,
            "store": None,
            "tuples_routed": r.read,
            "tuples_sent": r.read,  # a tuple's rows are split between channels, not copied
            "duplication_factor": 1.0 if r.read else 0.0,
            "migration_time_ms": 0.0,
            "bytes_moved": 0,
            "blocked_s": r.blocked,
            "startup_s": r.startup_s,
            "latency_ms": r.latency.summary(),
            "latency_series": r.latency.series(),
            "columnar": {"batches": r.pulses, "rows_sent": r.rows,
                         "ipc_bytes_to_channels": r.bytes_out,
                         "ipc_bytes_from_channels": r.bytes_in,
                         "busy_s": r.busy},
        },
    }
