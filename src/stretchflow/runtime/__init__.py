"""The executor runtime: what every engine shares around its own algorithm.

An executor keeps its hot loop and its paper's algorithm (ESG/VSN, the SN splitter and merger,
the ordered scheduler, the SSG); everything around it lives here, once:

* :mod:`.result`: :class:`RunResult` and its one documented ``extra`` schema;
* :mod:`.control`: run control (the first error wins, then every thread stops; one
  :class:`Stopped` exception; abort hooks for buffers, barriers and child processes), and the
  one wrapper that turns a user function's exception into an :class:`OperatorError`;
* :mod:`.latency`: the ingest clock and the latency recorder (percentiles from one place, for
  the whole run, no sample cap);
* :mod:`.metrics`: the metrics log and the sampler thread that feeds every controller;
* :mod:`.pump`: the source pump (batching, live sources, the ``--reconfigure`` schedule's
  counting);
* :mod:`.drain`: the one sink drain (runs of tuples, whole batches, a barrier hook for
  checkpoints, output latency measured per hand-over);
* :mod:`.sinks`: a run's sinks as one transaction (:func:`sink_session`: opened together,
  committed when the run succeeds, aborted when it fails).

Like Flink's task runtime (an operator sees only its elements and watermarks; the task owns
threads, failures and the wrapping of user errors), an executor asks the runtime for threads
and reports failures to it; it never writes its own "first error wins" again.

Batches: a batch is a list of ``(ts, payload)`` items in timestamp order, watermarks included
as ``(w, WATERMARK)``; a control tuple (a reconfiguration, later a checkpoint barrier) is an
item like any other whose payload is a :class:`Barrier`, so it may split a batch and keeps its
per-tuple position.
"""

from .control import Barrier, RunControl, Stopped, raise_user_error, user_error
from .drain import SINK_BATCH, SinkDrain
from .latency import IngestClock, LatencyRecorder, percentiles
from .metrics import MetricsLog, MetricsSampler
from .pump import ReconfigureSchedule, SourcePump, is_live
from .result import RunResult
from .sinks import SinkSession, sink_session

__all__ = [
    "SINK_BATCH", "Barrier", "IngestClock", "LatencyRecorder", "MetricsLog", "MetricsSampler",
    "ReconfigureSchedule", "RunControl", "RunResult", "SinkDrain", "SinkSession", "SourcePump",
    "Stopped", "is_live", "percentiles", "raise_user_error", "sink_session", "user_error",
]
