"""The channel process of the SN columnar path (:mod:`.sn_columnar`): it explodes the source
batches the parent deals it, combines them per (slice, key), shuffles each combined row to the
channel owning its key group, and runs a columnar sliced A+ instance over the rows it owns.

Per source batch (a *pulse*, numbered from 1; batch ``seq`` is dealt to channel
``(seq - 1) % p``):

* **Explode** (the dealt channel; STRETCH Alg. 1's f_MK, on a batch): the stateless operators
  before the A+ run on the batch (``pre``), then f_MK's columnar form
  (:mod:`~stretchflow.operators.column_forms`) gives each row's keys and state; the form's
  fold combines them per (slice, key) — Hazelcast Jet's accumulate step, done where the batch
  was exploded, so what crosses processes is one row per distinct (slice, key) of the batch,
  not one per token (a combined row adds to the owner's slice what its rows would have; a
  float sum or mean, whose additions must follow the tuple path's order, sends its rows
  unfolded, and the owner folds a slice once it is complete); the combined keys' groups
  come from :func:`~stretchflow.operators.columnar_kernels.key_groups` (a hash of the key's
  value, the same in every process) and their channel from f_μ (``assign``). Every channel
  gets one *part* of every pulse — its rows as an Arrow IPC stream, or nothing — straight
  from the dealt channel (a peer queue each), its own part without a copy.
* **Own** (every channel; Alg. 2 on a batch): parts are applied in pulse order (a peer's part
  for a later pulse waits until the earlier ones came: a sliced instance opens its first window
  from the first slice it sees, so slices must come in time order), then the watermark
  advances to the pulse's last timestamp: every row of every earlier pulse is in, so a window
  ending there is complete in this channel. Each channel answers every pulse, in order, with
  the windows it closed (an IPC table, timestamps beside it): the parent's merger writes a
  pulse once every channel answered it, which is the min across channels of the ESG.

A batch f_MK's columnar form refuses (or whose keys :func:`key_groups` cannot hash: floats) is
exploded tuple at a time by the dealt channel (f_MK per tuple, so an error names the tuple);
its (key, value) pairs travel pickled to their owners, which apply f_U into the instance's
dict slices (the columnar instance combines both kinds of slice, as on the reference engine).
"""

from __future__ import annotations

import math
import pickle
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ..batch import Batch, arrow_ints, int_numpy
from ..errors import OperatorError, RunTupleError, StretchflowError
from ..operators.aggregate_instance import _MISSING
from ..operators.column_forms import Refused, form_of, partial, plain_column
from ..operators.columnar import ColumnarSlicedInstance
from ..operators.columnar_kernels import key_groups
from ..operators.keys import key_pairs
from ..operators.stateless import over_batch
from ..runtime import raise_user_error, user_error
from ..runtime.control import chained_user_error
from .sn_process import channel_io, report_error, stable_group_function

__all__ = ["Channel", "PulseChannel", "channel_main", "keep", "pack", "unpack"]

_TS = "__stretchflow_ts"  # the timestamp column of a batch crossing processes


# -- batches across processes: Arrow IPC, or pickled payloads -----------------------------------
def ipc(table: Any) -> bytes:
    """``table`` as one Arrow IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write(table)
    return sink.getvalue().to_pybytes()


def read_ipc(data: bytes) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def pack(batch: Batch | None) -> tuple | None:
    """A batch for another process: an IPC table with the timestamps as a column, or (no
    table: payloads Arrow cannot hold) the timestamps and payloads pickled; None if empty."""
    if batch is None or not len(batch):
        return None
    if type(batch) is not Batch:  # the dealer's unparsed lines (sn_raw_lines)
        return ("raw", batch)
    if batch.has_table:
        return ("ipc", ipc(batch.table.append_column(_TS, arrow_ints(batch.ts))))
    return ("py", batch.ts_list(), list(batch.payloads))


def keep(batch: Batch | None) -> tuple | None:
    """A batch for a thread of this process (thread channels): itself; None if empty."""
    if batch is None or not len(batch):
        return None
    return ("batch", batch)


def unpack(packed: tuple) -> Batch:
    if packed[0] == "batch" or packed[0] == "raw":
        return packed[1]
    if packed[0] == "py":
        return Batch(packed[1], payloads=packed[2])
    table = read_ipc(packed[1])
    i = table.schema.get_field_index(_TS)
    return Batch(int_numpy(table.column(i)), table=table.remove_column(i))


# -- the channel --------------------------------------------------------------------------------
class PulseChannel(ABC):
    """What every channel of the pulse paths does, whatever its instance (:class:`Channel`
    here, on columns; :class:`~.sn_rows.RowChannel`, on rows): explode the pulses dealt to it
    into every owner's part, apply its own parts in pulse order, answer every pulse. A
    subclass gives :meth:`_parts` (a batch into parts), :meth:`_apply` (a part into the
    instance), :meth:`_close` (the watermark: the windows it closes, packed) and
    :meth:`_finish`. ``send(o, msg)`` puts a part on channel ``o``'s queue (never called for
    this channel).

    A user function that fails does not stop the channel at once: the earliest failure of the
    input wins (the reference's tuple). A failure while exploding pulse ``seq`` (a stateless
    operator before the O+, f_MK) still sends the owners the parts of the rows before it and
    is answered when the channel reaches ``seq``; a failure while applying ``seq`` (f_U, f_O)
    is answered then. The answer is ``("failed", j, seq, (ts, row, phase), error)``, the
    channel's last: the parent's merger, once every channel answered ``seq``, raises the
    earliest of the pulse's failures (by timestamp, then by row of the pulse's batch where the
    channel knows it, then an owner's before the explode's: at one timestamp the explode's
    failing row comes after every row an owner applied)."""

    def __init__(self, j: int, op: Any, p: int, n_groups: int, assign: list[int],
                 send: Any, pre: Sequence[Any] = (), ipc: bool = True, source: Any = None):
        self.j, self.op, self.p, self.G = j, op, p, n_groups
        self.source = source  # the source spec, for the lines a channel parses
        #: the stateless operators applied to a dealt batch before f_MK (Map/Filter on the
        #: table through ``batch_fn``, else their function over the rows); ``ipc`` False:
        #: parts and answers stay in this process (thread channels)
        self.pre, self.ipc = list(pre), ipc
        self.pack = pack if ipc else keep
        self.assign, self.send = assign, send
        self.pending: dict[int, tuple] = {}  # pulse -> (part, watermark), not yet applied
        self.applied = 0  # pulses applied, in order
        self.total: int | None = None  # pulses in the run, once the parent said "end"
        self.busy = 0.0
        #: pulse -> ((ts, row, phase), error) of the earliest failure met at it (exploding it,
        #: before it is applied; applying it)
        self.failures: dict[int, tuple[tuple, Any]] = {}
        self.failed = False  # answered a pulse with its failure: the channel is done

    @property
    def done(self) -> bool:
        return self.failed or (self.total is not None and self.applied == self.total)

    # -- explode: a dealt batch into every owner's part ---------------------------------------
    def explode(self, msg: tuple) -> None:
        _, seq, packed, wm = msg
        self.explode_batch(seq, unpack(packed) if packed is not None else None, wm)

    def explode_batch(self, seq: int, batch: Batch | None, wm: int) -> None:
        """Pulse ``seq`` (``batch``, watermark ``wm``) into every owner's part (the parent
        calls this directly on the batch it read: no IPC round trip of its own)."""
        t0 = time.perf_counter()
        for op in self.pre:  # the stateless operators between the source and the O+
            if batch is None or not len(batch):
                break
            batch, err = over_batch(op, batch)  # the rows before a failure go on
            if err is not None:
                self.fail(seq, err, 1)
        parts: list[tuple | None] = [None] * self.p
        if batch is not None and len(batch):
            try:
                parts = self._parts(batch, seq)
            except (RunTupleError, OperatorError) as e:  # f_MK on a refused batch
                self.fail(seq, named(self.op.name, e), 1)
        for o, part in enumerate(parts):
            if o == self.j:
                self.pending[seq] = (part, wm)
            else:
                self.send(o, ("part", seq, self._wire(part), wm))
        self.busy += time.perf_counter() - t0

    def _wire(self, part: tuple | None) -> tuple | None:
        """A part as it travels to another channel (the same part: pickled by the queue)."""
        return part

    def fail(self, seq: int, err: BaseException, phase: int, row: float = math.inf) -> None:
        """Records a user's failure at pulse ``seq`` (an :class:`OperatorError` naming its
        tuple; ``phase`` 1 exploding, 0 applying; ``row`` its row in the pulse's batch where
        known), if earlier than the one recorded there: by timestamp, row, phase."""
        key = (_ts_key(err), row, phase)
        have = self.failures.get(seq)
        if have is None or key < have[0]:
            self.failures[seq] = (key, _exported(err) if self.ipc else err)

    # -- own: parts in pulse order, then the watermark ---------------------------------------
    def receive(self, msg: tuple) -> None:
        _, seq, part, wm = msg
        if seq <= self.applied or seq in self.pending:
            raise RuntimeError(f"sn channel {self.j}: pulse {seq} twice")
        self.pending[seq] = (part, wm)

    def ready(self) -> list[tuple]:
        """Replies for the pulses that can be applied now (the next ones in order); a
        failure's answer is the last."""
        out = []
        while not self.failed and self.applied + 1 in self.pending:
            seq = self.applied + 1
            part, wm = self.pending.pop(seq)
            t0 = time.perf_counter()
            packed = None
            try:
                if part is not None:
                    self._apply(part)
                try:
                    packed = self._close(wm)
                except (RunTupleError, StretchflowError):
                    raise
                except Exception as e:  # noqa: BLE001 - f_O, named by the watermark
                    raise user_error(self.op.name, wm, "<watermark>", e) from e
            except (RunTupleError, OperatorError) as e:
                self.fail(seq, named(self.op.name, e), 0, self._row_of(part, e))
            self.applied = seq
            self.busy += time.perf_counter() - t0
            failure = self.failures.pop(seq, None)
            if failure is not None:
                self.failed = True
                out.append(("failed", self.j, seq, *failure))
                break
            out.append(("out", self.j, packed, wm, seq))
        return out

    def end(self) -> tuple:
        t0 = time.perf_counter()
        try:
            packed = self._finish()
        except Exception as e:  # noqa: BLE001
            raise_user_error(self.op.name, None, None, e)
        self.busy += time.perf_counter() - t0
        return ("final", self.j, packed, self.stats())

    def serve(self, get: Any, put: Any) -> tuple | None:
        """The channel's loop: ``batch`` (dealt by the parent), ``part`` (from the peer that
        exploded a pulse) and ``end`` messages from ``get()``, replies to ``put``, until every
        pulse is applied; returns the final reply (not put), or None once it answered a
        failure."""
        while not self.done:
            msg = get()
            kind = msg[0]
            if kind == "batch":
                self.explode(msg)
            elif kind == "part":
                self.receive(msg)
            else:  # "end"
                self.total = msg[1]
            for reply in self.ready():
                put(reply)
        return None if self.failed else self.end()

    # -- what a channel kind gives ---------------------------------------------------------------
    @abstractmethod
    def _parts(self, b: Batch, seq: int) -> list[tuple | None]:
        """Every channel's part of the batch of pulse ``seq`` (None: nothing for it)."""

    @abstractmethod
    def _apply(self, part: tuple) -> None:
        """This channel's part of a pulse into its instance."""

    @abstractmethod
    def _close(self, wm: int) -> tuple | None:
        """updateW at a pulse's watermark ``wm``: the windows it closed, packed."""

    @abstractmethod
    def _finish(self) -> tuple | None:
        """The end of input: every window left, packed."""

    def _row_of(self, part: tuple | None, e: BaseException) -> float:
        """The row of the pulse's batch a failure applying ``part`` came from, if known."""
        return math.inf

    def stats(self) -> dict[str, Any]:
        return {"busy_s": self.busy}


def named(operator: str, e: BaseException) -> BaseException:
    """A user's failure (a :class:`RunTupleError` naming its tuple, or an
    :class:`OperatorError`) as the run reports it, chained to the user's own exception."""
    return chained_user_error(operator, None, None, e)


def _ts_key(err: BaseException) -> float:
    ts = getattr(err, "ts", None)
    return ts if isinstance(ts, int | float) else math.inf


def _exported(err: BaseException) -> tuple:
    """A failure as it crosses to the parent (:func:`.sn_process.import_error` rebuilds it)."""
    from .sn_process import _export

    try:
        raise err
    except BaseException as e:  # noqa: BLE001 - for its traceback
        return _export(e)


class Channel(PulseChannel):
    """A columnar channel: its :class:`ColumnarSlicedInstance`, the combined rows of the keys
    it owns."""

    def __init__(self, j: int, op: Any, p: int, n_groups: int, assign: list[int],
                 send: Any, pre: Sequence[Any] = (), ipc: bool = True, source: Any = None):
        import numpy as np

        if not getattr(op, "columnar", False):
            raise ValueError(f"{op.name}: not an A+ with columnar forms")
        super().__init__(j, op, p, n_groups, assign, send, pre, ipc, source)
        self.form = form_of(op)
        # pulses exploded through the columnar form and tuple at a time (the run summary)
        self.columnar_pulses = self.tuple_pulses = 0
        self._owner = np.asarray(assign, dtype=np.int64)
        self.inst = ColumnarSlicedInstance(op)
        # rows: f_MK's, after the per-batch combine, and combined rows sent to another process
        self.exploded = self.combined = self.shuffled = 0
        self._py_group = stable_group_function(n_groups)
        self._key_groups: dict[Any, int] = {}

    def _wire(self, part: tuple | None) -> tuple | None:
        if part is not None and part[0] == "table" and self.ipc:
            return ("ipc", ipc(part[1]), part[2])
        return part

    def _parts(self, b: Batch, seq: int) -> list[tuple | None]:
        """Every channel's part of batch ``b``: rows ``(s, k0.., v)`` of the keys it owns,
        combined per (slice, key) by the form's fold — or, for a float sum or mean
        (``pregroup`` False: its additions wait for the whole slice, in time order), the
        exploded rows as they are — a table (IPC only when it leaves this process), pairs,
        or None."""
        import numpy as np
        import pyarrow as pa

        form = self.form
        cols = form.explode(b)
        if cols is None:  # refused: the tuple path names the tuple it fails on
            return self._pairs(b)
        rows, keys, v = cols
        if not len(v):
            self.columnar_pulses += 1
            return [None] * self.p
        try:
            t = b.ts if rows is None else b.ts[np.asarray(rows, dtype=np.int64)]
            t = t - t % self.op.slice_width
            raw = not form.pregroup(v)
            sl, ks, vs = (t, keys, v) if raw else form.fold(keys, v, t)
            chan = self._owner[key_groups(ks, self.G)] if self.p > 1 else None
        except (Refused, OverflowError, TypeError, ValueError, UnicodeError):
            # a key type key_groups cannot hash (a float), a fold that cannot be exact:
            # tuple at a time (f_MK and f_U per tuple), as the reference's instance does
            return self._pairs(b)
        except (RunTupleError, StretchflowError):
            raise
        except Exception as e:  # as the reference's columnar instance names a batch it fails
            raise RunTupleError(b.first, b.payloads[0], e) from e
        self.columnar_pulses += 1
        self.exploded += len(v)
        self.combined += len(vs)
        table = pa.Table.from_arrays([arrow_ints(np.asarray(sl, dtype=np.int64)), *ks, vs],
                                     names=["s", *[f"k{i}" for i in range(len(ks))], "v"])
        if chan is None:
            return [("table", table, raw)]
        out: list[tuple | None] = []
        for o in range(self.p):
            sel = np.flatnonzero(chan == o)
            if not len(sel):
                out.append(None)
                continue
            out.append(("table", table.take(arrow_ints(sel)), raw))
            if o != self.j:
                self.shuffled += len(sel)
        return out

    def _pairs(self, b: Batch) -> list[tuple | None]:
        """A batch the columnar f_MK refused: f_MK tuple at a time (an error names the
        tuple), each (key, value) pair to the channel owning its key."""
        keys_of = self.op.user_keys
        per: list[list] = [[] for _ in range(self.p)]
        for ts, v in b.items():
            try:
                ks = keys_of(v)
            except Exception as e:  # noqa: BLE001 - a user's f_MK
                err = user_error(self.op.name, ts, v, e)
                if err is e:
                    raise
                raise err from e
            if not ks:
                continue
            by: dict[int, list] = {}
            for k, x in key_pairs(ks, v):
                by.setdefault(self.assign[self._group_of(k)], []).append((k, x))
            for o, pairs in by.items():
                per[o].append((ts, v, pairs))
                self.exploded += len(pairs)
                if o != self.j:
                    self.shuffled += len(pairs)
        self.tuple_pulses += 1
        return [("py", t) if t else None for t in per]

    def _group_of(self, k: Any) -> int:
        """A key's group as :func:`key_groups` gives it for the same key in a column, or, for
        a key Arrow cannot hold (never in a column), its stable hash's."""
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

    # -- own: a part into the instance, the watermark ------------------------------------------
    def _apply(self, part: tuple) -> None:
        if part[0] == "py":
            self._add_pairs(part[1])
        else:
            self._add_rows(part[1] if part[0] == "table" else read_ipc(part[1]), part[2])

    def _close(self, wm: int) -> tuple | None:
        self.inst.advance(wm)
        return self.pack(self.inst.take_batch())

    def _finish(self) -> tuple | None:
        self.inst.finish()
        return self.pack(self.inst.take_batch())

    def _add_rows(self, table: Any, raw: bool) -> None:
        """Rows ``(s, k0.., v)``, ascending by slice: each slice's run is a partial as the
        reference's accumulate step makes it (combined per key where the batch was exploded,
        or ``raw`` rows a float sum or mean folds once its slice is complete), added to the
        instance in pulse order, hence in time order."""
        import numpy as np

        inst = self.inst
        keys = [plain_column(table.column(c)) for c in table.column_names if c.startswith("k")]
        cols = list(inst._key_columns(keys).values())
        v = plain_column(table.column("v"))
        try:
            inst._state_type(v)  # the type the tuple path's dict slices convert to
        except Refused:  # ints after floats: the window combines them in Python
            pass
        sl = int_numpy(table.column("s"))
        cut = np.flatnonzero(sl[1:] != sl[:-1]) + 1
        sg = inst.groups[0]
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(sl)].tolist(), strict=True):
            inst._add_part(sg, int(sl[a]), partial([c.slice(a, b - a) for c in cols],
                                                   v.slice(a, b - a)), raw)

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

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "rows_exploded": self.exploded,
                "rows_combined": self.combined, "rows_shuffled": self.shuffled,
                "pulses_columnar": self.columnar_pulses, "pulses_tuple": self.tuple_pulses}


def channel_main(blob: bytes, j: int, n_groups: int, assign: list[int], peers: list[Any],
                 inq: Any, outq: Any, pdeathsig: bool = True,
                 pre: Sequence[bytes] = (), kind: type[PulseChannel] | None = None,
                 source: bytes | None = None) -> None:
    """A channel process of a pulse path (``kind``: :class:`Channel` by default, or
    :class:`~.sn_rows.RowChannel`): ``batch`` (dealt by the parent), ``part`` (from the peer
    that exploded a pulse) and ``end`` messages, until every pulse is applied; ``peers`` are
    every channel's input queue (unbounded: a put never blocks, so two channels shuffling to
    each other cannot deadlock; the parent bounds the pulses in flight)."""
    put, get = channel_io(inq, outq, pdeathsig)

    def send(o: int, msg: tuple) -> None:
        peers[o].put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    try:
        ch = (kind or Channel)(j, pickle.loads(blob), len(peers), n_groups, assign, send,
                               [pickle.loads(b) for b in pre],
                               source=pickle.loads(source) if source else None)
        put(("ready", j))
        final = ch.serve(get, put)
        if final is not None:  # else it answered a failure, its last word
            final[3]["cpu_s"] = time.process_time()  # this process's CPU (forked: from zero)
            put(final)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        report_error(put, j, e)
        raise SystemExit(1) from None
