"""The executor skeleton: everything a run is around an engine's own algorithm, once.

As a task in Flink's runtime (an operator sees its elements, watermarks and end of input; the
task owns the threads, the failures and the wrapping of user errors), an executor is its
paper's algorithm plus a few hooks; :class:`Run` does the rest:

* **threads**: :meth:`Run.thread` makes them under the run's
  :class:`~stretchflow.runtime.RunControl` (the first error wins; every other thread stops
  through the abort hooks the executor registered); :meth:`Run.execute` starts them, joins
  them (also those started while the run goes on: SN's migrations start channels), and on a
  failure or an interrupt stops the run and waits for every started thread, naming in the
  error any that did not stop; the threads that run Python for most of their work share one
  core while they take turns at the GIL (``python=True``, :mod:`.gil_core`);
* **sinks**: opened as one transaction before the threads start and committed when every
  thread has ended without an error (else aborted), or, with checkpoints, held in the
  checkpoint directory and published at the end (:mod:`.threaded_checkpoint`); each sink is
  written through :meth:`Run.drain`, the one sink drain (:mod:`.drain`);
* **metrics**: one :class:`~stretchflow.runtime.metrics.MetricsSampler` per run
  (:meth:`Run.sample`) or per operator whose algorithm acts on a decision at its own points
  (SN's splitter ticks it);
* **latency**: the ingest clock the sources record and the recorder the drains measure into,
  one definition for every engine (:mod:`.result`);
* **the result**: :meth:`Run.result` assembles the keys every engine reports the same way
  (tuples out, ``latency_ms``, ``latency_series``, ``metrics``, ``parallelism_series``,
  ``checkpoints``, ``checkpoint_log``); the executor adds its own.

What each executor plugs in (the functions a reader looks for):

==========  ==================================================================================
reference   ``_compile`` (one iterator per sink: sources, stateless operators, O+ by Alg. 2 on
            merged inputs, ``_Barriers`` at checkpoints), pulled by the drain
            (:meth:`Run.execute` with ``body``: no threads of its own)
vsn         ``VSNExecutor._source`` (a source into its inlets, by the runtime's
            :class:`~stretchflow.runtime.SourcePump`), ``VSNInstance.run`` (processVSN,
            Alg. 4), ``VSNExecutor._sink`` (ESG_out's hand-overs), ``_measure`` and
            ``_apply_decision`` (the controller's reconfiguration by control tuples,
            ``vsn_operator``), ``VSNCheckpoints.at_barrier``
sn          ``_Executor.start`` (channels, splitters, mergers and taps: ``sn_region.Region``,
            forwardSN and the merger, migration; ``sn_links``), ``Region._measure`` and
            ``Region._decided`` (ticked by the splitter between flushes),
            ``SNCheckpoints.region_snapshot``
ordered     ``_Executor._worker`` (the scheduler's worker loop: source stage, stateless,
            stateful and O+ stages, reorder buffers), ``_Executor._to_sinks`` (the line's end
            to the drains), ``_measure``, ``OrderedCheckpoints.at_barrier``
slack       ``slack_inlet.write_source`` (a source thread, the writer of the SSG inlets),
            ``_Run.reader_thread`` (the SSGOperator's processing threads),
            ``_Run.sink_thread``, ``slack_monitor.Monitor.measure`` (Eq. 1/2 and the SLT
            Setter, as the run's metrics sampler), ``SlackCheckpoints.at_barrier``
==========  ==================================================================================
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .control import RunControl
from .drain import SinkDrain
from .gil_core import PythonCore, python_core
from .latency import IngestClock, LatencyRecorder
from .metrics import MetricsLog, MetricsSampler
from .result import RunResult
from .sinks import sink_session

log = logging.getLogger(__name__)

#: seconds a failed run waits, in all, for its started threads to stop (each is woken by the
#: abort hooks; one blocked where no hook reaches, e.g. in a user's source, is named instead)
STOP_WAIT = 10.0

#: the longest the main thread waits in one join before it runs Python again, so a signal's
#: handler runs within this long of the signal whichever thread the kernel handed it to
JOIN_SLICE = 0.2

__all__ = ["JOIN_SLICE", "STOP_WAIT", "Run", "controller_name"]


class Run:
    """One run of ``flow`` on ``engine`` (see the module doc).

    ``checkpoints`` is the run's checkpoint object, or None: anything with ``drain(k,
    **kw)`` (a sink's drain into its held output), ``end(ok)`` (publish on success, release
    the directory either way) and ``extra()`` (its result keys).
    ``measures`` says which of the common keys the engine reports: ``"latency"`` (its sinks'
    drains measure output latency) and ``"metrics"`` (it samples metrics).
    ``gil_core``: the threads made with ``python=True`` share one CPU while measured taking
    turns at the GIL (:mod:`.gil_core`).
    """

    def __init__(self, engine: str, flow: Any, checkpoints: Any = None,
                 measures: tuple[str, ...] = ("latency", "metrics"), gil_core: bool = False):
        self.engine = engine
        self.flow = flow
        self.sinks = [s for _, s in flow.sinks]
        self.control = RunControl()
        self.metrics = MetricsLog()
        self.clock = IngestClock()
        self.latency = LatencyRecorder()
        self.checkpoints = checkpoints
        self.measures = measures
        self.threads: list[threading.Thread] = []
        self.samplers: list[tuple[MetricsSampler, bool]] = []
        self.t0 = time.perf_counter()
        self.elapsed = 0.0
        self._at_end: list[Callable[[], None]] = []
        #: the threads that may share one CPU, and the measurements that decide when (None:
        #: never pinned)
        cpu = python_core(gil_core)
        self.python_core = PythonCore(cpu) if cpu is not None else None
        # each thread's end, waited for instead of Thread.join (see _join_stopped)
        self._ended: dict[threading.Thread, threading.Event] = {}

    # -- what an executor asks for --------------------------------------------------------------
    def thread(self, fn: Callable[..., Any], *args: Any, name: str,
               python: bool = False) -> threading.Thread:
        """A thread of the run running ``fn(*args)`` (an error fails the run), started and
        joined by :meth:`execute`. Made while the run goes on, it must be started by its
        maker (and is joined all the same). ``python``: it holds the GIL for most of its
        work (the user's functions tuple by tuple, a parser in Python), so it runs on the
        run's Python core while the measurements say the run's such threads take turns."""
        if python and self.python_core is not None:
            fn = self.python_core.wrap(fn, name)
        ended = threading.Event()
        t = self.control.thread(fn, *args, name=name, ended=ended)
        self.threads.append(t)
        self._ended[t] = ended
        return t

    def drain(self, k: int, measure: bool = True) -> SinkDrain:
        """Sink ``k``'s drain: into the sink, or its held output in a checkpointed run;
        measuring latency unless ``measure`` is False."""
        kw: dict[str, Any] = ({"clock": self.clock, "latency": self.latency}
                              if measure and "latency" in self.measures else {})
        if self.checkpoints is not None:
            return self.checkpoints.drain(k, **kw)
        return SinkDrain(self.sinks[k], **kw)

    def sample(self, period: float, measure: Callable[[], list[tuple[str, Any]]],
               controller: Any = None, apply: Callable[[str, Any], None] | None = None,
               thread: bool = True, final: bool = False) -> MetricsSampler:
        """A metrics sampler of the run (:class:`MetricsSampler`'s arguments); with
        ``thread`` its periods run on a thread from the start to the end of the run (with
        ``final``, the last period, cut short by the end, is measured too), else the
        executor ticks it."""
        sampler = MetricsSampler(self.control, self.metrics, period, measure, controller,
                                 apply)
        if thread:
            self.samplers.append((sampler, final))
        return sampler

    def at_end(self, fn: Callable[[], None]) -> None:
        """Calls ``fn()`` when the run ends, whatever happened, before the sinks end."""
        self._at_end.append(fn)

    # -- the run --------------------------------------------------------------------------------
    def execute(self, start: Callable[[], None] | None = None,
                started: Callable[[], None] | None = None,
                body: Callable[[], None] | None = None,
                finished: Callable[[], bool] | None = None,
                begin: Callable[[float], None] | None = None) -> float:
        """Runs: opens the sinks, calls ``begin(t0)`` at the run's start ``t0``
        (``time.perf_counter()``: what the executor records at time 0), starts the threads
        (``start()``, or every thread made so far), the samplers, then calls ``started()``;
        runs ``body()`` on this thread if given; joins every thread; ends the samplers, the
        ``at_end`` calls, the sinks and the checkpoints; raises the run's first error.
        ``finished()`` (if given) says whether the threads' work reached the end of input:
        threads that all ended short of it with no error fail the run. Returns the elapsed
        seconds."""
        control = self.control
        session = None
        if self.checkpoints is None:  # committed below unless a thread failed
            session = sink_session(self.sinks, failed=lambda: control.error is not None).open()
        self.t0 = self.metrics.t0 = self.latency.t0 = time.perf_counter()
        try:  # from here on, whatever stops the run (a signal too) ends the sinks below
            if begin is not None:
                begin(self.t0)
            if start is None:
                for t in list(self.threads):
                    t.start()
            else:
                start()
            for s, _ in self.samplers:
                s.start()
            if self.python_core is not None and self.python_core.names:
                self.python_core.start()
            if started is not None:
                started()
            if body is not None:
                body()
            self._join()
            if finished is not None and not finished() and control.error is None:
                control.fail(RuntimeError(f"the {self.engine} run's threads ended before "
                                          f"the end of its input"))
        except BaseException as e:  # noqa: BLE001 - a start, body or join failed or was interrupted
            control.fail(e)
            self._join_stopped()
        finally:
            if self.python_core is not None:
                self.python_core.stop()
            try:
                for s, final in self.samplers:
                    s.stop(final)
            except BaseException as e:  # noqa: BLE001 - a controller's error fails the run
                control.fail(e)
            for fn in self._at_end:
                fn()
            if session is not None:
                session.end()
            if self.checkpoints is not None:
                self.checkpoints.end(control.error is None)
        self.elapsed = time.perf_counter() - self.t0
        control.raise_error()
        return self.elapsed

    def _join(self) -> None:
        # threads may be added while joining (SN's migrations start channels): join until
        # no new one is left. Each join is cut into JOIN_SLICE waits: a SIGINT or SIGTERM
        # that the kernel hands to another thread only flags CPython's handler, which runs
        # when this (main) thread next runs Python, so a join without a timeout held the
        # signal until the run ended on its own (a slack run under load read on to its end)
        joined = 0
        while joined < len(self.threads):
            t = self.threads[joined]
            if t.ident is not None:
                while not self._ended_within(t, JOIN_SLICE):
                    pass
            joined += 1

    def _ended_within(self, t: threading.Thread, timeout: float) -> bool:
        """Waits up to ``timeout`` s for thread ``t`` to end; whether it has. A thread of
        :meth:`thread` is waited for on its own event, not by ``Thread.join``: in CPython
        3.11 a join that a signal handler's exception interrupts releases the lock of the
        thread it waited for while that thread still runs, and marks it stopped, so a later
        join (the one in :meth:`_join_stopped`) returned at once for a running thread."""
        ended = self._ended.get(t)
        if ended is not None:
            return ended.wait(timeout)
        t.join(timeout)  # a thread an executor made itself
        return not t.is_alive()

    def _join_stopped(self) -> None:
        """The run failed: waits up to :data:`STOP_WAIT` s in all for the started threads
        (the abort hooks wake them); one still running is named in the error."""
        deadline = time.monotonic() + STOP_WAIT
        alive = []
        for t in list(self.threads):
            if t.ident is not None and t is not threading.current_thread():
                if not self._ended_within(t, max(0.0, deadline - time.monotonic())):
                    alive.append(t.name)
        if alive:
            msg = (f"thread(s) {', '.join(alive)} of the {self.engine} run did not stop "
                   f"within {STOP_WAIT:.0f} s of the failure (left running as daemons)")
            log.warning(msg)
            if self.control.error is not None:
                self.control.error.add_note(msg)

    # -- what the run reports -------------------------------------------------------------------
    def result(self, tuples_in: Mapping[str, int], extra: Mapping[str, Any]) -> RunResult:
        """The run's :class:`RunResult`: the common keys of runtime/result.py this run
        measured, then the executor's ``extra``."""
        common: dict[str, Any] = {}
        if "metrics" in self.measures:
            common["parallelism_series"] = {k: list(v)
                                            for k, v in self.metrics.parallelism.items()}
            common["metrics"] = self.metrics.rows
        if "latency" in self.measures:
            common["latency_ms"] = self.latency.summary()
            common["latency_series"] = self.latency.series()
        if self.checkpoints is not None:
            common.update(self.checkpoints.extra())
        if self.python_core is not None and self.python_core.names:
            common["gil_core"] = self.python_core.report()
        return RunResult(engine=self.engine, elapsed=self.elapsed, tuples_in=dict(tuples_in),
                         tuples_out={s.name: s.count for s in self.sinks},
                         extra={**common, **extra})


def controller_name(controller: Any) -> str | None:
    """``extra["controller"]``: a controller's name (its class's if it has none), or None."""
    if controller is None:
        return None
    return getattr(controller, "name", None) or type(controller).__name__
