"""The shared-nothing (SN) executor: ``--engine sn``, channels as threads or processes.

Each O+ runs on N *channels*, each with its own private σ (no state is shared between
channels, unlike the VSN executor), as one *parallel region* (elastic-scaling §3) with its own
splitter, merger and migrations (:mod:`.sn_region`; the channels themselves are
:mod:`.sn_channel`, or processes of :mod:`.sn_process`). The structure follows
elastic-scaling §3–§6 and the STRETCH journal's Alg. 1 (forwardSN) and Alg. 2 (processSN).

Any flow of the Flow API runs: one region per O+, chained by what their mergers deliver
(:mod:`.sn_links`): the merger of one region feeds, through stateless operators, the splitter
of the next; an O+ with several inputs (sources, other regions) merges them by timestamp,
ties to the lower input index, as the reference executor. A source read only by one O+
(through stateless operators) is read inline by that region's splitter; any other source (read
by several consumers, or by sinks only) is read by a tap thread. Operators whose output reaches
no sink do not run, as in the reference executor.

A line from a sorted file through stateless operators to an A+ with columnar forms (and on
through stateless operators and A+ with columnar forms to the sinks) runs on whole Arrow
batches instead, on process or thread channels (:mod:`.sn_columnar`: the parent deals whole
batches round robin, as Arrow IPC to processes; the channels explode them, combine per (slice,
key) and shuffle the rows to each key's owner; the parent runs what follows the first A+ on
the merged windows; ``extra["paths"]`` says ``columnar``). Such a line whose A+ is made of
Python functions (lambdas) runs the same way on batches of rows (:mod:`.sn_rows`: the dealt
channel runs the stateless operators and f_MK, each key's owner its f_U and f_O;
``extra["paths"]`` says ``rows``). A reconfiguring or checkpointed run, or ``columnar="off"``,
takes the tuple path (``extra["columnar_fallback"]``).

``reconfigure`` and the controller apply to every region: a ``(COUNT, P)`` step migrates every
region to P channels once the run has read COUNT source tuples (the region whose splitter reads
all sources itself does it exactly after the COUNT-th tuple; a downstream region at the next
tuple it takes after that); a controller given by name runs once per region.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..elastic.controller import Controller
from ..elastic.migration import SQLiteStateStore, StateStore, open_store
from ..engines import Settings, given
from ..engines import run as run_engine
from ..flow import Flow, Node
from ..runtime import (
    RunControl,
    RunResult,
)
from ..runtime.drain import SinkDrain
from ..runtime.skeleton import Run
from ..runtime.tempdirs import make_tempdir
from .sn_channel import ChannelCore, group_assignment
from .sn_links import ChainLink, QueueLink, SinkLink, Tap, inline_input, queued_input
from .sn_region import Region

__all__ = ["ChannelCore", "group_assignment", "run"]

_QUEUE_BATCHES = 64  # default channel queue, in splitter batches (capacity = 64 × batch)
#: source tuples between two entries of the ingest clock (latency): vsn's source pump records
#: one per batch of 256 too; a sample is early by at most this many tuples' arrival time
CLOCK_EVERY = 256


def run(flow: Flow, parallelism: int | None = None, max_parallelism: int | None = None,
        key_groups: int | None = None, capacity: int | None = None,
        reconfigure: list[tuple[int, int]] | str | None = None,
        controller: str | Controller | None = None,
        controller_options: dict[str, Any] | None = None,
        metrics_interval: float | None = None, channels: str | None = None,
        store: str | StateStore | None = None, batch: int | None = None,
        pulse_ms: float | None = None, start_method: str | None = None,
        columnar: str | None = None, checkpoint: str | None = None,
        checkpoint_every: Any = None) -> RunResult:
    """Runs ``flow`` with every O+ on ``parallelism`` shared-nothing channels.

    Args:
        parallelism: channels of every O+ at the start.
        max_parallelism: upper bound for reconfigurations (default: the largest P requested,
            or, with a controller, ``max(parallelism, 4)``).
        key_groups: number of key groups G.
        capacity: tuples a channel queue holds before the splitter blocks (in whole
            batches: ``max(1, capacity // batch)``; default ``64 * batch``).
        reconfigure: ``[(COUNT, P), ...]``: after the COUNT-th tuple of all sources (0: before
            the first), migrate every O+ to P channels. Steps after the end of input are
            logged, not applied.
        controller: an elasticity controller deciding migrations at run time: ``"level"``
            (the SASO level controller, elastic-scaling Alg. 1–3), ``"threshold"`` (STRETCH's)
            or a :class:`~stretchflow.elastic.controller.Controller` (each further O+ gets a
            deep copy of it: a controller keeps per-operator state).
        controller_options: keyword options for a controller given by name, e.g.
            ``{"alpha": 0.5, "threshold": 0.2, "period": 5.0, "max_levels": 4}``.
        metrics_interval: seconds between two measurements handed to the controller (the
            level controller combines them into its own period, 5 s by default).
        channels: ``"threads"`` or ``"processes"`` (:mod:`.sn_process`).
        store: ``"memory"``, ``"sqlite"`` or a :class:`StateStore` for migrations (default
            memory for threads, sqlite for processes, which need an SQLite store).
        batch: input tuples per splitter flush / watermark pulse.
        pulse_ms: also flush (and pulse) when this much wall-clock time passed since the last
            flush, checked at each input tuple, so a slow source still gets its outputs out.
        start_method: multiprocessing start method of process channels (``"forkserver"`` or
            ``"spawn"``; never ``"fork"`` with threads running).
        columnar: ``"on"``: an A+ with columnar forms (``Aggregate.columnar``) reading a
            sorted, unpaced file source (through stateless operators; A+ with columnar forms
            and stateless operators after it) takes whole Arrow batches
            (:mod:`.sn_columnar`), an A+ of Python functions with WT multi batches of rows
            (:mod:`.sn_rows`); a reconfiguring or checkpointed run or another flow shape
            takes the tuple path, ``extra["columnar_fallback"]`` says why.
            ``"off"``: always the tuple path.
        checkpoint: a directory: checkpoints are taken there every ``checkpoint_every`` (N
            input tuples, ``"Ns"``, ``"Nms"``; default 10 s) and a run given a directory
            holding one resumes from it, at any parallelism (:mod:`.sn_checkpoint`,
            docs/checkpoints.md).
    """
    return run_engine(flow, "sn", given(locals()))


def execute(flow: Flow, s: Settings) -> RunResult:
    """Runs ``flow`` with checked settings ``s`` (:func:`stretchflow.engines.run`'s call)."""
    parallelism, key_groups, capacity = s.parallelism, s.key_groups, s.capacity
    max_parallelism, schedule, batch = s.max_parallelism, s.reconfigure, s.batch
    channels, start_method, checkpoint = s.channels, s.start_method, s.checkpoint
    interval = float(s.metrics_interval)
    pulse = float(s.pulse_ms) / 1000
    queue_size = _QUEUE_BATCHES if capacity is None else max(1, capacity // batch)
    ctl_given = s.controller is not None
    cp = _columnar_plan(flow, channels, s.columnar, bool(schedule) or ctl_given,
                        checkpoint is not None)
    if cp is not None and not isinstance(cp, str):
        return _run_columnar(flow, cp, parallelism=parallelism, key_groups=key_groups,
                             capacity=capacity, start_method=start_method,
                             max_parallelism=max_parallelism, channels=channels)
    state_store, own_store, state_dir = _open_store(s.store)
    ck = (checkpoint, s.checkpoint_every) if checkpoint is not None else None
    try:
        ex = _Executor(flow, state_store, parallelism=parallelism, n_groups=key_groups,
                       batch=batch, queue_size=queue_size, schedule=schedule, pulse=pulse,
                       make_controller=s.controllers, max_parallelism=max_parallelism,
                       interval=interval, channels=channels, start_method=start_method,
                       checkpoint=ck)
        ex.rt.at_end(ex.close_channels)
        ex.rt.execute(start=ex.start)
    finally:
        if own_store:
            state_store.close()
        if state_dir is not None:
            shutil.rmtree(state_dir, ignore_errors=True)
    regions = ex.regions
    log = [r for reg in regions for r in reg.log]
    routed = sum(reg.routed for reg in regions)
    sent = sum(reg.sent for reg in regions)
    ctl_names = {reg.name: reg.controller.name for reg in regions if reg.controller is not None}
    return ex.rt.result({name: c[0] for name, c in ex.counts.items()}, {
        "parallelism": {reg.name: reg.p for reg in regions},
        "reconfigurations": log,
        "controller": next(iter(ctl_names.values()), None),
        # the SN engine's own keys
        "channels": channels,
        "max_parallelism": max_parallelism,
        "key_groups": key_groups,
        "store": type(state_store).__name__,
        "tuples_routed": routed,
        "tuples_sent": sent,
        "duplication_factor": sent / routed if routed else 0.0,
        "migration_time_ms": sum(r["duration_ms"] for r in log if r["applied"]),
        "bytes_moved": sum(r["bytes_moved"] for r in log if r["applied"]),
        "blocked_s": sum(reg.blocked_total for reg in regions),
        "startup_s": ex.startup_s,
        "regions": {reg.name: reg.stats() for reg in regions},
        "paths": {reg.name: "sliced" if getattr(reg.op, "sliced", False) else "tuple"
                  for reg in regions},
        # why the pulse path (on columns or rows) did not take the run
        **({"columnar_fallback": {reg.name: cp for reg in regions}}
           if isinstance(cp, str) else {}),
    })


def _columnar_plan(flow: Flow, channels: str, columnar: str, reconfiguring: bool,
                   checkpointing: bool) -> Any:
    """:func:`.sn_columnar.plan` (process or thread channels: on columns, or on rows), or the
    reason the pulse path does not apply, or None when the flow has no O+."""
    if not any(n.kind == "oplus" for n in flow.nodes):
        return None
    if columnar != "on":
        return "columnar='off'"
    from . import sn_columnar

    return sn_columnar.plan(flow, reconfiguring=reconfiguring, checkpointing=checkpointing)


def _run_columnar(flow: Flow, cp: Any, *, parallelism: int, key_groups: int,
                  capacity: int | None, start_method: str,
                  max_parallelism: int, channels: str) -> RunResult:
    """The columnar path (:mod:`.sn_columnar`), reported as the tuple path reports a run."""
    from . import sn_columnar

    rt, out = sn_columnar.run_columnar(flow, cp, parallelism=parallelism, n_groups=key_groups,
                                       capacity=capacity, start_method=start_method,
                                       channels=channels)
    extra = out["extra"]
    name = cp.node.name
    return rt.result(out["tuples_in"], {
        **extra, "channels": channels, "max_parallelism": max_parallelism,
        "regions": {name: {"parallelism": parallelism,
                           "tuples_routed": extra["tuples_routed"],
                           "tuples_sent": extra["tuples_sent"],
                           "duplication_factor": extra["duplication_factor"],
                           "blocked_s": extra["blocked_s"]}}})


def _open_store(store: str | StateStore | None) -> tuple[StateStore, bool, Path | None]:
    """:func:`open_store`, with the file of ``store="sqlite"`` in a ``stretchflow-sn-<pid>-*``
    directory the caller removes (a killed run's is swept by the next one:
    :mod:`stretchflow.runtime.tempdirs`). Returns the store, whether the caller owns it, and
    the directory."""
    if store != "sqlite":
        return (*open_store(store), None)
    d = make_tempdir("sn")
    try:
        return SQLiteStateStore(d / "state.sqlite"), True, d
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise


class _Executor:
    """Builds the regions, taps and links of a flow (see the module docstring) and runs them."""

    def __init__(self, flow: Flow, store: StateStore, *, parallelism: int, n_groups: int,
                 batch: int, queue_size: int, schedule: list[tuple[int, int]], pulse: float,
                 make_controller: Callable[[int], Controller | None], max_parallelism: int,
                 interval: float, channels: str, start_method: str,
                 checkpoint: tuple[str, Any] | None = None):
        # the runtime's skeleton: threads, sinks, metrics, latency, checkpoints, the result
        self.rt = Run("sn", flow)
        self.run, self.metrics = self.rt.control, self.rt.metrics
        # latency (issue #18): when source tuples entered, measured at the sinks' drains
        self.clock, self.latency = self.rt.clock, self.rt.latency
        self.threads = self.rt.threads  # the regions add their channels' threads
        self.counts: dict[str, list[int]] = {}
        self.batch, self.pulse, self.queue_size = batch, pulse, queue_size
        self.startup_s = 0.0  # until every initial channel runs (process start, imports)
        self.ck: Any = None
        self.sink_index = {id(s): k for k, (_, s) in enumerate(flow.sinks)}
        self._plan(flow)
        ops = [n for n in flow.nodes if n.kind == "oplus" and n in self.live]
        if checkpoint is not None:
            from ..runtime.threaded_checkpoint import RunCheckpoints
            from .sn_checkpoint import SNCheckpoints

            self.ck = SNCheckpoints(RunCheckpoints(*checkpoint, flow, {"engine": "sn"},
                                                   [n.name for n in ops]))
            self.rt.checkpoints = self.ck.run
        try:
            self._build(ops, store, parallelism, n_groups, batch, queue_size, schedule, pulse,
                        make_controller, max_parallelism, interval, channels, start_method)
        except BaseException:
            if self.ck is not None:
                self.ck.run.end(False)
            raise

    def _build(self, ops: list[Node], store: StateStore, parallelism: int, n_groups: int,
               batch: int, queue_size: int, schedule: list[tuple[int, int]], pulse: float,
               make_controller: Callable[[int], Controller | None], max_parallelism: int,
               interval: float, channels: str, start_method: str) -> None:
        transports: list[Any] = [None] * len(ops)
        if channels == "processes" and ops:
            from . import sn_process  # only now: it is the module that imports multiprocessing

            specs = [n.spec for n in ops]
            transports = [sn_process.ProcessTransport(op, n_groups, start_method, preload=specs)
                          for op in specs]
        self.regions: list[Region] = []
        for k, node in enumerate(ops):
            region = Region(
                node.spec, parallelism=parallelism, n_groups=n_groups, batch=batch,
                queue_size=queue_size, schedule=list(schedule), store=store, pulse=pulse,
                run=self.run, metrics=self.metrics, threads=self.threads,
                inputs=self.inputs[node],
                others=[c for src, c in self.source_counters.items()
                        if src not in self.inline_sources.get(node, ())],
                transport=transports[k], controller=make_controller(k),
                max_parallelism=max_parallelism, interval=interval, index=k,
                n_regions=len(ops))
            self.region_of[node] = region
            self.regions.append(region)
            if self.ck is not None:
                region.checkpoints, region.node_name = self.ck, node.name
                group_of = (transports[k].group_of if transports[k] is not None
                            else functools.partial(_thread_group, n_groups))
                blobs = self.ck.restore(node.name, region.assign, n_groups, group_of)
                region.restore_blobs = dict(enumerate(blobs or ()))
        self._subscribe()

    # -- the plan ------------------------------------------------------------------------------
    def _plan(self, flow: Flow) -> None:
        """Who reads what: live nodes (those a sink reads, directly or not), inline sources,
        and for every node its readers."""
        live: set[Node] = set()
        todo = [node for node, _ in flow.sinks]
        while todo:
            node = todo.pop()
            if node not in live:
                live.add(node)
                todo.extend(node.inputs)
        self.live = live
        self.flow = flow
        # readers of each node: ("node", consumer, input index) or ("sink", sink)
        readers: dict[Node, list[tuple]] = {n: [] for n in flow.nodes}
        for n in flow.nodes:
            if n in live:
                for idx, up in enumerate(n.inputs):
                    readers[up].append(("node", n, idx))
        for node, sink in flow.sinks:
            readers[node].append(("sink", sink))
        self.readers = readers
        self.region_of: dict[Node, Region] = {}
        self.source_counters: dict[Node, list[int]] = {}
        self.inline_sources: dict[Node, set[Node]] = {}
        self.inputs: dict[Node, list[Callable[[], Iterator]]] = {
            n: [lambda: iter(())] * len(n.inputs) for n in flow.nodes if n.kind == "oplus"}
        self.taps: list[Node] = []
        for src in flow.nodes:
            if src.kind != "source" or src not in live:
                continue
            counter = self.counts.setdefault(src.name, [0])
            self.source_counters[src] = counter
            # read inline when the source's only reader is one O+ input, through stateless
            # operators that nothing else reads
            node, chain = src, []
            while len(readers[node]) == 1 and readers[node][0][0] == "node":
                _, consumer, idx = readers[node][0]
                if consumer.kind == "oplus":
                    self.inline_sources.setdefault(consumer, set()).add(src)
                    self.inputs[consumer][idx] = _inline_factory(self._items(src), chain, idx,
                                                                 counter)
                    break
                chain.append(consumer.spec)
                node = consumer
            else:
                self.taps.append(src)

    def _items(self, src: Node) -> Callable[[], Iterator]:
        """A source's items as its reader gets them (with checkpoints: with barriers, past
        the restored cut); called when the reader starts, once ``self.ck`` exists."""
        return lambda: self.clock.clocked(
            self.ck.run.items(src) if self.ck is not None else src.spec.items(), CLOCK_EVERY)

    def _drain(self, sink: Any) -> SinkDrain:
        """The drain of ``sink`` (its part, in a checkpointed run), measuring latency."""
        return self.rt.drain(self.sink_index[id(sink)])

    def _leaves(self, node: Node) -> int:
        n = 0
        for r in self.readers[node]:
            if r[0] == "sink" or r[1].kind == "oplus":
                n += 1
            else:
                n += self._leaves(r[1])
        return n

    def _links(self, node: Node, bounded: bool) -> list[Any]:
        """The subscribers of ``node``'s stream: sinks, region input queues, and stateless
        operators applied once for all their readers."""
        subs: list[Any] = []
        for r in self.readers[node]:
            if r[0] == "sink":
                subs.append(SinkLink(self._drain(r[1]), []))
                continue
            _, consumer, idx = r
            if consumer.kind == "oplus":
                link = QueueLink(self.run, self.queue_size if bounded else None)
                self.inputs[consumer][idx] = _queued_factory(self.run, link.q, idx)
                subs.append(link)
                continue
            below = self._links(consumer, bounded)
            if not below:
                continue
            if len(below) == 1 and isinstance(below[0], SinkLink):
                below[0].chain.insert(0, consumer.spec)  # a chain into one sink: no hop
                subs.append(below[0])
            else:
                subs.append(ChainLink(consumer.spec, below))
        return subs

    def _subscribe(self) -> None:
        for node, region in self.region_of.items():
            region.subscribers = self._links(node, self._leaves(node) == 1)
            region.forward_watermarks = any(not isinstance(s, SinkLink)
                                            for s in region.subscribers)
        for region in self.regions:  # the queues exist now: the region reads them
            region.inputs = self.inputs[self._node_of(region)]
        self.tap_threads = [
            Tap(self.run, src.spec if self.ck is None else self.ck.run.proxy(src),
                self.source_counters[src], self._links(src, self._leaves(src) == 1),
                self.batch, self.pulse, checkpoints=self.ck is not None)
            for src in self.taps]
        for tap in self.tap_threads:  # the tap's source pump records its batches' arrival
            tap.pump.clock = self.clock

    def _node_of(self, region: Region) -> Node:
        return next(n for n, r in self.region_of.items() if r is region)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the channels (and waits until every process channel has loaded the O+),
        then the splitters, mergers and taps (the skeleton's ``start``)."""
        t_start = time.perf_counter()
        for region in self.regions:
            if region.transport is not None:
                region.transport.open(region)
            for j in range(region.p):
                region.start_channel(j)
        for region in self.regions:
            if region.transport is not None:
                region.transport.wait_ready(region)
        self.startup_s = time.perf_counter() - t_start
        for region in self.regions:
            region.start()
        for tap in self.tap_threads:
            self.threads.append(tap.thread)
            tap.thread.start()

    def close_channels(self) -> None:
        """Ends every channel (a process channel's process too), after every thread."""
        failed = self.run.error is not None
        for region in getattr(self, "regions", ()):
            for ch in region.all_channels:
                ch.close(failed)


def _inline_factory(items: Callable[[], Iterator], chain: list, idx: int,
                    counter: list[int]) -> Callable[[], Iterator]:
    return lambda: inline_input(items(), chain, idx, counter)


def _thread_group(n_groups: int, key: Any) -> int:
    return hash(key) % n_groups  # a thread channel's key group (OPlusInstance's)


def _queued_factory(run: RunControl, q: Any, idx: int) -> Callable[[], Iterator]:
    return lambda: queued_input(run, q, [], idx)
