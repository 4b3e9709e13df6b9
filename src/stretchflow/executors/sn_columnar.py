"""SN process channels on whole Arrow batches: the columnar sliced A+ split across processes
(issues #16, #31).

When the SN engine runs a flow that is one line -- a source that gives batches
(``Source.batches``: a sorted, unpaced file) -> stateless operators -> an A+ with columnar
forms (``Aggregate.columnar``: wordcount's hand-written ones, or a declarative aggregate's
count, sum, min, max, mean, top_k) -> stateless operators and further A+ with columnar forms
-> sinks -- on process channels, no tuple is pickled and the parent does no per-row work:

* **Dealer** (a thread of the parent): reads the source's Arrow batches and deals them whole,
  round robin, to the channels (one Arrow IPC stream each, timestamps beside the payloads):
  batch ``seq`` (a *pulse*, from 1) to channel ``(seq - 1) % p``, with its last timestamp as
  watermark (every later tuple is at or after it). At most ``queue_size`` pulses are in flight
  (dealt, not yet written): the flow control.
* **Channels** (processes, or threads of the parent with ``channels="threads"``: the same core,
  batches and parts handed over in-process; :mod:`.sn_columnar_channel`): the dealt channel
  explodes its batch
  (f_MK's columnar form), combines it per (slice, key), and sends every channel the combined
  rows of the key groups f_μ gives it — channel to channel, the SN paper's shuffle — and each
  channel runs a :class:`~stretchflow.operators.columnar.ColumnarSlicedInstance` over the keys
  it owns, applying parts in pulse order and answering every pulse with the windows it closed.
  State stays key-partitioned (shared nothing): only the explode is spread round robin.
* **Merger** (a thread of the parent): once every channel answered a pulse (a window closes in
  the output only when every channel has passed its end: the min across channels), merges the
  answers by timestamp, runs them through the nodes after the A+ (:class:`Downstream`) and
  writes the sinks' batches — the reference's output, in timestamp order.

The stateless operators before the A+ run on each dealt batch (their columnar form,
``batch_fn``, on its table; tuple by tuple on its payloads otherwise), in the channels
(:data:`PRE_IN_CHANNELS`) or in the dealer. The nodes after the A+ run in the parent, on
each pulse's merged windows: stateless operators so, an A+ as one
:class:`~stretchflow.operators.columnar.ColumnarSlicedInstance` (parallelism 1, reported in
``parallelism``: hot items' second A+ reads a few rows per window), advanced to the pulse's
watermark. ``extra["paths"]`` names every operator's path; ``extra["columnar"]`` counts the
pulses exploded tuple at a time (``pulses_tuple``) and the downstream A+'s batches taken
tuple at a time (``batches_tuple``).

A batch the columnar f_MK refuses (a payload without a string ``text``, say) is exploded tuple
at a time by its channel (f_MK per tuple, so its error names the tuple) and its (key, value)
pairs travel pickled to their owners, which apply f_U into the same instance's dict slices.

The same dealer, merger and peer shuffle run a line whose O+ are not all columnar, when its
first O+ is an A+ with WT multi, on batches of rows (``ColumnarPlan.rows``; the channels are
:class:`~.sn_rows.RowChannel`: the stateless operators and f_MK where the batch was dealt, f_U
and f_O in each key's owner; JSON Lines dealt unparsed, :mod:`.sn_raw_lines`; the nodes after
the A+ as their own instances in the parent). A user's failure in a channel is answered in
pulse order and the merger raises the earliest (:class:`~.sn_columnar_channel.PulseChannel`).

Not on this path (the run takes the tuple path and ``extra["columnar_fallback"]`` says why):
``columnar="off"``, reconfiguration (``reconfigure`` or a controller: the
partials are not migrated), checkpoints, and any flow other than such a line (several sources,
a node read twice, sinks on several nodes, a stateful operator, an A+ without columnar forms).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from ..batch import Batch, arrow_ints
from ..flow import Flow, Node
from ..io.sources import read_batches
from ..operators.stateless import over_batch, through_batch
from ..runtime import RunControl, Stopped, pump
from ..runtime.control import raise_user_error
from ..runtime.skeleton import Run
from ..runtime.tempdirs import sweep_stale
from ..sorted_runs import merge_runs
from . import sn_rows
from .plan import columnar_batch, line_readers, readers_of
from .sn_channel import group_assignment
from .sn_columnar_channel import Channel, PulseChannel, channel_main, keep, pack, unpack
from .sn_process import ProcessChannel, ProcessTransport, _preload_modules, import_error, ship
from .sn_raw_lines import raw_lines
from .sn_rows import RowChannel, rows_capable

__all__ = ["ColumnarPlan", "plan", "run_columnar"]

_QUEUE_BATCHES = 16  # default pulses in flight a channel, in batches of pump.COLUMNAR_BATCH
#: the stateless operators between the source and the A+ run in the channels (True), on the
#: batch dealt to each, or in the parent's dealer before it deals (False): measured in
#: docs/sn.md's columnar section
PRE_IN_CHANNELS = True


class ColumnarPlan:
    """What the pulse path runs: the O+ node its channels run, its source node and the
    source's batches, the stateless nodes between them (``pre``) and the nodes after it, up
    to the sinks (``post``: stateless operators and O+, run by the parent on the merged
    windows, :class:`Downstream`). ``rows``: the O+ runs on rows, its Python functions in
    the channels (:mod:`.sn_rows`), else on columns."""

    def __init__(self, node: Node, source: Node, batches: Iterator[Batch], size: int,
                 pre: list[Node] | None = None, post: list[Node] | None = None,
                 rows: bool = False):
        self.node, self.source, self.batches = node, source, batches
        #: tuples a source batch holds
        self.size = size
        self.pre, self.post = pre or [], post or []
        self.rows = rows


def plan(flow: Flow, *, reconfiguring: bool, checkpointing: bool) -> ColumnarPlan | str:
    """The pulse path for ``flow`` with ``columnar="on"`` (the SN executor checks that, and
    that the flow has an O+): on columns when every O+ of the line has columnar forms, on
    rows (:mod:`.sn_rows`) when the first is an A+ with WT multi; or why neither."""
    if reconfiguring:
        return "a reconfiguring run (reconfigure or controller): partials are not migrated"
    if checkpointing:
        return "a checkpointed run: partials are not snapshotted"
    line = _line(flow)
    if isinstance(line, str):
        return line
    source, chain = line
    first = next(i for i, n in enumerate(chain) if n.kind == "oplus")
    node, pre, post = chain[first], chain[:first], chain[first + 1:]
    for n in pre + post:
        if n.kind == "stateful":
            return f"the stateful operator {n.name!r} takes tuples"
    rows = not all(getattr(n.spec, "columnar", False) for n in chain if n.kind == "oplus")
    if rows and not rows_capable(node.spec):
        if getattr(node.spec, "columnar", False):
            return next(f"the O+ {n.name!r} after the first has no columnar forms, and "
                        f"{node.name!r} takes no rows" for n in post if n.kind == "oplus"
                        and not getattr(n.spec, "columnar", False))
        return (f"the first O+ {node.name!r} has no columnar forms and is not an A+ with WT "
                "multi (rows)")
    size = sn_rows.ROWS_BATCH if rows else columnar_batch(source, line_readers([source, *chain]))
    it = read_batches(source.spec, size, not rows)
    if it is None:
        return "a source that gives no batches (not a sorted, unpaced file)"
    return ColumnarPlan(node, source, it, size, pre, post, rows)


_LINE = ("a flow other than one line: one source -> operators, each read by the next only "
         "-> sinks on the last")


def _line(flow: Flow) -> tuple[Node, list[Node]] | str:
    """The flow as one source and the nodes after it, each read only by the next and sinks
    only on the last, with an O+ among them; or why it is not such a line."""
    sources = [n for n in flow.nodes if n.kind == "source"]
    if len(sources) != 1 or not flow.sinks:
        return _LINE
    readers = readers_of(flow, sinks=False)
    sunk = {id(n) for n, _ in flow.sinks}
    chain: list[Node] = []
    node = sources[0]
    while id(node) not in sunk:
        nxt = readers[node]
        if len(nxt) != 1 or len(nxt[0].inputs) != 1:
            return _LINE
        node = nxt[0]
        chain.append(node)
    if readers[node] or len(sunk) != 1 or len(chain) + 1 != len(flow.nodes) or \
            not any(n.kind == "oplus" for n in chain):
        return _LINE
    return sources[0], chain


class Downstream:
    """The nodes after the channels' O+, run by the parent on each pulse's merged windows (one
    batch): stateless operators (:func:`~stretchflow.operators.stateless.over_batch`: their
    columnar form, else their function over the rows), an O+ as one instance each
    (parallelism 1: the windows of a window, hot items' arg max, are few rows) — a
    :class:`~stretchflow.operators.columnar.ColumnarSlicedInstance` on columns, the O+'s own
    instance on rows (``process_rows``) — advanced to the pulse's watermark: every channel has
    passed it, so every later window of the first O+ ends after it."""

    def __init__(self, nodes: list[Node], rows: bool = False):
        self.rows = rows
        self.steps = [(n.spec, None if n.kind != "oplus" else n.spec.instance() if rows
                       else n.spec.columnar_instance()) for n in nodes]

    def push(self, batch: Batch | None, wm: int | None) -> Batch | None:
        """One pulse's windows (``wm`` None: the last, then every O+ finishes) through the
        nodes; what reaches the sinks."""
        for op, inst in self.steps:
            if inst is None:
                if batch is not None and len(batch):
                    batch, err = over_batch(op, batch)
                    if err is not None:
                        raise err
                continue
            try:
                if batch is not None and len(batch):
                    if self.rows:
                        inst.process_rows(batch.ts_list(), batch.payloads)
                    else:
                        inst.process_batch(batch)
                if wm is None:
                    inst.finish()
                else:
                    inst.advance(wm)
            except Exception as e:  # noqa: BLE001 - named by its batch's first tuple
                if batch is not None and len(batch):
                    raise_user_error(op.name, batch.first, batch.payloads[0], e)
                raise_user_error(op.name, wm, "<watermark>", e)
            if self.rows:
                out = inst.take()
                batch = Batch.of_items(out) if out else None
            else:
                batch = inst.take_batch()
        return batch

    def counts(self) -> dict[str, dict[str, int]]:
        return {op.name: dict(inst.batch_counts) for op, inst in self.steps
                if inst is not None and not self.rows}


# -- the parent: dealer, merger, lifecycle -----------------------------------------------------
class _PeerChannel(ProcessChannel):
    """A :class:`ProcessChannel` whose process also gets every channel's input queue (its
    peers', for the shuffle): :meth:`attach` once all channels' queues exist."""

    def attach(self, peers: list[Any]) -> None:
        t = self.transport
        # as ProcessChannel.__init__ decides it (sn_process: PR_SET_PDEATHSIG)
        pdeathsig = t.start_method == "forkserver" or threading.get_ident() == t.owner
        self.proc = t.ctx.Process(
            target=channel_main, name=f"sn-channel-{self.j}", daemon=True,
            args=(t.blob, self.j, t.G, list(t.assign), peers, self.inq, self.resq, pdeathsig,
                  t.pre_blobs, t.kind, t.source_blob))
        self.attached = True

    def start(self) -> None:
        if not getattr(self, "attached", False):  # the base's process runs the tuple channel
            raise RuntimeError(f"sn columnar channel {self.j} started before attach()")
        super().start()


class _Transport(ProcessTransport):
    """Process channels running :func:`.sn_columnar_channel.channel_main` (no store) with
    channels of ``kind``."""

    def __init__(self, op: Any, n_groups: int, start_method: str, assign: list[int],
                 pre: list[Any], kind: type[PulseChannel], source: Any = None):
        super().__init__(op, n_groups, start_method)
        self.store_path, self.assign, self.kind = "", assign, kind
        # the source, for the lines the channels parse (sn_raw_lines)
        self.source_blob = ship(source) if source is not None else None
        self.pre_blobs = [ship(o) for o in pre]  # the stateless operators before the A+
        if start_method == "forkserver":  # channels fork with Arrow and the channel loaded
            # (pyarrow.compute too: the explode's kernels import it, once in the server
            # rather than in every channel on its first batch)
            self.ctx.set_forkserver_preload(_preload_modules([op, *pre]) + [
                __name__, "stretchflow.executors.sn_columnar_channel", kind.__module__,
                "pyarrow", "pyarrow.compute"])

    def channel(self, ex: Any, j: int) -> _PeerChannel:
        return _PeerChannel(self, ex, j)


class _ThreadChannel:
    """A channel as a thread of the parent (``channels="threads"``): the same
    :class:`~.sn_columnar_channel.Channel` core and loop, its messages and parts handed over
    in-process as they are (no IPC; the Arrow kernels release the GIL)."""

    def __init__(self, r: _Run, j: int):
        import queue

        self.r, self.j = r, j
        self.q: queue.Queue = queue.Queue()  # unbounded, as a process channel's (see _Host)
        self.ready = threading.Event()
        self.ready.set()  # nothing to load
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        t = self.r.run.thread(self._serve, name=f"sn-channel-{self.r.op.name}-{self.j}")
        self.threads.append(t)
        t.start()

    def _serve(self) -> None:
        r = self.r
        chans = r.host.channels
        ch = r.kind(self.j, r.op, r.p, r.G, r.assign, lambda o, msg: chans[o].q.put(msg),
                    r.pre_there, ipc=False)
        t0 = time.thread_time()
        final = ch.serve(lambda: r.run.get(self.q), r.host.outq.put)
        if final is not None:  # else it answered a failure, its last word
            final[3]["cpu_s"] = time.thread_time() - t0
            r.host.outq.put(final)

    def close(self, failed: bool) -> None:
        pass


class _Host:
    """What :class:`ProcessChannel` and :meth:`ProcessTransport.wait_ready` read of a region.
    ``queue_size`` 0: every queue is unbounded (a channel's also takes its peers' parts, and
    a put that blocks could deadlock two channels); the dealer's window bounds them."""

    def __init__(self, run: RunControl, name: str, assign: list[int]):
        import queue

        self.run, self.name, self.queue_size, self.assign = run, name, 0, assign
        self.outq: queue.Queue = queue.Queue()
        self.channels: dict[int, ProcessChannel] = {}


class _Run:
    def __init__(self, rt: Run, cp: ColumnarPlan, parallelism: int, n_groups: int,
                 window: int, start_method: str, channels: str = "processes"):
        self.rt = rt  # the runtime's skeleton: threads, sinks, latency, the result
        self.op = cp.node.spec
        self.cp = cp
        self.p, self.G, self.window = parallelism, n_groups, window
        self.run = rt.control
        self.assign = group_assignment(parallelism, n_groups)
        self.host = _Host(self.run, self.op.name, self.assign)
        pre = [n.spec for n in cp.pre]
        # the stateless operators before the A+ run where f_MK does (PRE_IN_CHANNELS: in
        # the channels, on the batch dealt to each), or in the dealer before it deals
        self.pre_here = [] if PRE_IN_CHANNELS else pre
        self.pre_there = pre if PRE_IN_CHANNELS else []
        self.threads = channels == "threads"
        #: the channels' kind: on rows (the O+'s Python functions) or on columns
        self.kind: type[PulseChannel] = RowChannel if cp.rows else Channel
        if cp.rows and not self.threads and (PRE_IN_CHANNELS or not pre):
            # JSON Lines dealt unparsed: the channels parse them (sn_raw_lines)
            raw = raw_lines(cp.source.spec, sn_rows.ROWS_BATCH)
            if raw is not None:
                cp.batches = raw
        self.transport = None if self.threads else _Transport(
            self.op, n_groups, start_method, self.assign, self.pre_there, self.kind,
            cp.source.spec if cp.rows else None)
        self.pack = keep if self.threads else pack
        self.down = Downstream(cp.post, cp.rows)
        self.clock = rt.clock
        self.drains = [rt.drain(k) for k in range(len(rt.sinks))]
        self.read = self.pulses = self.written = self.parent_pulses = 0
        self.local: PulseChannel | None = None  # explodes pulses while their channel starts
        self.bytes_out = self.bytes_in = 0
        self.source_error: BaseException | None = None  # the source's, raised by the merger
        self.blocked = self.startup_s = 0.0
        self.stats: list[dict] = [{} for _ in range(parallelism)]
        self.chans: list[Any] = []
        self._progress = threading.Condition()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """The skeleton's ``start``: the channels' queues, the dealer and merger threads,
        then the channel processes (waiting until each has loaded the O+)."""
        run, host, rt = self.run, self.host, self.rt
        t0 = time.perf_counter()
        run.on_abort(lambda _e: self._wake())
        for j in range(self.p):  # the queues first: the dealer fills them meanwhile
            ch = _ThreadChannel(self, j) if self.transport is None else \
                self.transport.channel(host, j)
            host.channels[j] = ch
            self.chans.append(ch)
        if self.transport is not None:
            for ch in self.chans:
                ch.attach([c.inq for c in self.chans])
        # the dealer reads the first batches while the channel processes start (a fork
        # server's start-up imports the engine and Arrow: the longest step)
        for fn, role in ((self._dealer, "dealer"), (self._merger, "merger")):
            rt.thread(fn, name=f"sn-{role}-{self.op.name}").start()
        for ch in self.chans:
            if run.stop.is_set():
                break
            ch.start()
            rt.threads.extend(ch.threads)
        if self.transport is not None:
            self.transport.wait_ready(host)
        self.startup_s = time.perf_counter() - t0

    def close(self) -> None:
        """Ends the channels' processes, after every thread (the skeleton's ``at_end``)."""
        failed = self.run.error is not None
        for ch in self.chans:
            ch.close(failed)

    def _wake(self) -> None:
        with self._progress:
            self._progress.notify_all()

    # -- dealer -----------------------------------------------------------------------------
    def _dealer(self) -> None:
        run, chans = self.run, self.host.channels
        seq = 0
        for b in self._read():
            if run.stop.is_set():
                raise Stopped
            if not len(b):
                continue
            self.clock.record(b.first)
            self.read += len(b)
            wm = b.last  # the source's: a filter may leave the batch empty, not its watermark
            for op in self.pre_here:
                if not len(b):
                    break
                b = through_batch(op, b)
            self._wait_window(seq)
            seq += 1
            j = (seq - 1) % self.p
            if self._channel_ready(j):
                packed = self.pack(b)
                if packed is not None and packed[0] == "ipc":
                    self.bytes_out += len(packed[1])
                elif packed is not None and packed[0] == "raw":
                    self.bytes_out += len(b.chunk)
                chans[j].q.put(("batch", seq, packed, wm))
            else:
                self._explode_here(seq, b, wm)
            self.clock.record(wm)
        self.pulses = seq
        for ch in chans.values():
            ch.q.put(("end", seq))

    def _read(self) -> Iterator[Any]:
        """The source's batches; a failure of the source (a bad record: the batch reader
        gives the records before it first) ends the input there, and the merger raises it
        once every pulse before it is written (:meth:`_check_source`), so that a user's
        failure on an earlier tuple wins, as on the reference."""
        it = iter(self.cp.batches)
        while True:
            try:
                b = next(it)
            except StopIteration:
                return
            except Exception as e:  # noqa: BLE001 - raised by the merger, in input order
                self.source_error = e
                return
            yield b

    def _channel_ready(self, j: int) -> bool:
        """Whether channel ``j``'s process has started (loaded the O+)."""
        return self.host.channels[j].ready.is_set()

    def _explode_here(self, seq: int, b: Batch, wm: int) -> None:
        """Pulse ``seq`` exploded by the parent, its parts sent to their owners: only while
        the channel it is dealt to is still starting (a fork server's start-up imports the
        engine and Arrow), so that time is not lost; the owners cannot tell the difference."""
        chans = self.host.channels

        def send(o: int, msg: tuple) -> None:
            part = msg[2]
            if part is not None and part[0] == "ipc":
                self.bytes_out += len(part[1])
            chans[o].q.put(msg)

        if self.local is None:
            self.local = self.kind(-1, self.op, self.p, self.G, self.assign, send,
                                   self.pre_there, ipc=self.transport is not None,
                                   source=self.cp.source.spec)
        self.local.explode_batch(seq, b, wm)
        self.parent_pulses += 1

    def _wait_window(self, seq: int) -> None:
        """Blocks while ``window`` pulses are in flight (dealt, not yet written)."""
        if seq - self.written < self.window:
            return
        t0 = time.perf_counter()
        with self._progress:
            while seq - self.written >= self.window:
                if self.run.stop.is_set():
                    raise Stopped
                self._progress.wait(0.1)
        self.blocked += time.perf_counter() - t0

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
                m0 = msgs[0]
                seq = m0[4] if m0[0] == "out" else m0[2] if m0[0] == "failed" else None
                if seq is None and self.source_error is not None:
                    raise self.source_error  # every pulse before it is written
                if any(m[0] == "failed" for m in msgs) or (
                        self.local is not None and seq in self.local.failures):
                    self._failed(seq, msgs)
                for m in msgs:
                    if m[0] == "final":
                        finals += 1
                        self.stats[m[1]] = m[3]
                self._write([m[2] for m in msgs if m[2] is not None],
                            msgs[0][3] if msgs[0][0] == "out" else None)
                if msgs[0][0] == "out":
                    with self._progress:
                        self.written = msgs[0][4]
                        self._progress.notify_all()

    def _failed(self, seq: int, msgs: list[tuple]) -> None:
        """Every channel answered a pulse, some with a user's failure: raises the earliest
        (:class:`~.sn_columnar_channel.PulseChannel`: by timestamp, an owner's before the
        explode's at one timestamp, then by channel), with one the parent met exploding the
        pulse while its channel started."""
        fails = [(m[3], m[1], m[4]) for m in msgs if m[0] == "failed"]
        local = self.local.failures.get(seq) if self.local is not None else None
        if local is not None:
            fails.append((local[0], -1, local[1]))
        _, j, err = min(fails, key=lambda f: (f[0], f[1]))
        raise import_error(j, err) if isinstance(err, tuple) else err

    def _write(self, packed: list[tuple], wm: int | None) -> None:
        """One pulse's windows of every channel, merged by timestamp, through the nodes
        after the A+ (:class:`Downstream`; ``wm`` the pulse's watermark, None for the last)
        to every sink."""
        for pk in packed:
            if pk[0] == "ipc":
                self.bytes_in += len(pk[1])
        bs = [unpack(pk) for pk in packed]
        batch = None if not bs else bs[0] if len(bs) == 1 else _merge(bs)
        if self.down.steps:
            batch = self.down.push(batch, wm)
        if batch is None or not len(batch):
            return
        item = [(batch.last, batch)]
        for d in self.drains:
            d.take(item)
            d.flush()


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
            # one window end (the usual pulse) or channels' runs already in order: no sort.
            # (Equal first and last timestamps do not say that: [6, 9] + [6] ends as it began.)
            if bool((ts[1:] >= ts[:-1]).all()):
                return Batch(ts, table=table)
            order = np.argsort(ts, kind="stable")
            return Batch(ts[order], table=table.take(arrow_ints(order)))
    if not any(b.has_table for b in bs):  # rows: concatenated when already in order
        ts = np.concatenate([b.ts for b in bs])
        if bool((ts[1:] >= ts[:-1]).all()):
            return Batch(ts, payloads=[p for b in bs for p in b.payloads])
    items = merge_runs([b.items() for b in bs], itemgetter(0))
    return Batch.of_items(items)


def run_columnar(flow: Flow, cp: ColumnarPlan, *, parallelism: int, n_groups: int,
                 capacity: int | None, start_method: str,
                 channels: str = "processes") -> tuple[Run, dict[str, Any]]:
    """Runs the columnar path; returns the run's skeleton (for its result) and what the run
    reports: the counts and the SN engine's ``extra`` keys that apply."""
    # flow control counts tuples: ``capacity`` source tuples per channel, in whole source
    # batches (at least two), as pulses in flight across the channels; by default 16 batches
    # a channel, so that the dealer can read ahead while the channel processes start
    if capacity is None:  # a wide source batch counts as the narrow batches it holds
        queue_size = max(2, _QUEUE_BATCHES * pump.COLUMNAR_BATCH
                         // max(cp.size, pump.COLUMNAR_BATCH))
    else:
        queue_size = max(2, capacity // cp.size)
    # this path makes no migration store, but sweeps what killed sn runs left (as the tuple
    # path does when it makes its store): a stale directory is removed by the next sn run
    sweep_stale("sn")
    # the common keys this path reports: latency (its parallelism is fixed, metrics none)
    rt = Run("sn", flow, measures=("latency",))
    r = _Run(rt, cp, parallelism, n_groups, queue_size * parallelism, start_method, channels)
    cpu0 = time.process_time()
    rt.at_end(r.close)
    rt.execute(start=r.start)
    # the parent's CPU over the run, all its threads (reading, dealing, exploding while the
    # channels start, the relays, merging and writing): beside the channels' cpu_s, where the
    # run's CPU went (a whole-process CPU/wall from outside counts the parent alone: the
    # channels are the fork server's children, not the parent's)
    parent_cpu = time.process_time() - cpu0
    name = cp.node.name
    # what ran how: on columns, the channels' A+ (its pulses exploded tuple at a time, if
    # any, in "pulses_tuple"), each A+ after it as the parent's columnar instance (its
    # batches taken tuple at a time in "batches_tuple"), a stateless operator on its table
    # where it has a columnar form (batch_fn), else tuple by tuple on the batch's payloads;
    # on rows, every operator over the batches' rows ("rows")
    if cp.rows:
        paths = {n.name: "rows" for n in (*cp.pre, cp.node, *cp.post)}
    else:
        paths = {n.name: ("columnar" if getattr(n.spec, "batch_fn", None) is not None
                          else "tuple") for n in cp.pre + cp.post if n.kind != "oplus"}
        paths.update({n.name: "columnar" for n in (cp.node, *cp.post) if n.kind == "oplus"})
    # the parent's counts are those of pulses it exploded while their channel started (its
    # rows sent to a channel count as shuffled: they cross a process boundary)
    stats = [*r.stats, r.local.stats() if r.local is not None else {}]
    # rows_exploded: f_MK's rows; rows_combined: after the per-batch combine; rows_shuffled:
    # combined rows a channel sent to another; on rows, entries: f_MK's (row, key) pairs,
    # entries_shuffled: those sent to another channel (ipc_bytes_*: the parent's own IPC,
    # batches dealt and windows back)
    counted = (("entries", "entries_shuffled") if cp.rows else
               ("rows_exploded", "rows_combined", "rows_shuffled", "pulses_columnar",
                "pulses_tuple"))
    pulses = {"batches": r.pulses, "batches_exploded_in_parent": r.parent_pulses,
              **{k: sum(s.get(k, 0) for s in stats) for k in counted},
              **({} if cp.rows else
                 {"batches_tuple": {n: c["tuple"] for n, c in r.down.counts().items()}}),
              "pre_in": "channels" if PRE_IN_CHANNELS else "parent",
              "ipc_bytes_to_channels": r.bytes_out,
              "ipc_bytes_from_channels": r.bytes_in,
              "busy_s": [s.get("busy_s", 0.0) for s in r.stats],
              "cpu_s": [s.get("cpu_s", 0.0) for s in r.stats],
              "parent_cpu_s": parent_cpu,
              "parent_explode_s": stats[-1].get("busy_s", 0.0)}
    return rt, {
        "tuples_in": {cp.source.name: r.read},
        "extra": {
            "paths": paths,
            # the A+ after the first run in the parent: one instance each
            "parallelism": {name: parallelism, **{n.name: 1 for n in cp.post
                                                  if n.kind == "oplus"}},
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
            "rows" if cp.rows else "columnar": pulses,
        },
    }
