"""What each checkpoint of a run cost (issue #18): its duration, write time and bytes.

:class:`~stretchflow.runtime.checkpoint.Checkpointer` notes when the first source put the
barrier of epoch e into the flow (:meth:`CheckpointStats.injected`) and, once the manifest
naming the checkpoint is committed, the whole checkpoint (:meth:`CheckpointStats.committed`):
``duration_ms`` from barrier injected to manifest committed (what a checkpoint delays a
resume point by), ``write_ms`` of that spent serializing and writing the state file and the
manifest (the rest is the barrier travelling through the flow and the sinks committing their
parts), ``bytes`` written (state file plus manifest). The records go to
``RunResult.extra["checkpoint_log"]``; the object is announced to the run's watchers
(:func:`stretchflow.runtime.metrics.announce`) so the live view and /metrics read it while the
run goes on. A module of its own: the web state imports it without the checkpoint machinery.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class CheckpointStats:
    """Per-checkpoint records of one run, in commit order."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        self._lock = threading.Lock()
        self._injected: dict[int, float] = {}
        self.records: list[dict[str, Any]] = []
        # objects with on_checkpoint(record), called outside the lock by the committing thread
        self.listeners: list[Any] = []
        from .metrics import announce  # the live view reads it while the run goes on

        announce(self)

    def injected(self, epoch: int) -> None:
        """The barrier of ``epoch`` entered the flow (the first source's counts: the
        checkpoint starts then)."""
        now = time.perf_counter()
        with self._lock:
            self._injected.setdefault(epoch, now)

    def dropped(self, epoch: int) -> None:
        """Epoch ``epoch`` will never be written (a branch of the flow has ended)."""
        with self._lock:
            self._injected.pop(epoch, None)

    def committed(self, epoch: int, cut: int, write_start: float, nbytes: int
                  ) -> dict[str, Any]:
        """Checkpoint ``epoch`` is committed now; its writing began at ``write_start``
        (perf_counter) and wrote ``nbytes``."""
        now = time.perf_counter()
        with self._lock:
            # a checkpoint whose injection was not seen (never today) starts at its write
            start = min(self._injected.pop(epoch, write_start), write_start)
            for e in [e for e in self._injected if e < epoch]:  # superseded, never written
                del self._injected[e]
            rec = {"epoch": epoch, "cut": cut, "time": round(now - self.t0, 4),
                   "duration_ms": round((now - start) * 1000.0, 3),
                   "write_ms": round((now - write_start) * 1000.0, 3), "bytes": nbytes}
            self.records.append(rec)
        for listener in list(self.listeners):
            listener.on_checkpoint(self, rec)
        return rec

    def log(self) -> list[dict[str, Any]]:
        """A copy of the records (what ``RunResult.extra["checkpoint_log"]`` holds)."""
        with self._lock:
            return [dict(r) for r in self.records]
