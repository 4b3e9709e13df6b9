"""A run's sinks as one transaction: opened together, committed together when the run
succeeds, aborted together when it fails.

Every executor goes through :func:`sink_session` instead of calling ``open``/``close`` on its
sinks: a file sink writes a temporary file beside its target and only a commit renames it into
place (:mod:`stretchflow.io.sinks`), so a failed or interrupted run leaves the previous output
untouched and no partial output under the target's name.

Committing is two-phase: every sink is first *prepared* (flushed, synced, closed: whatever can
fail), and only when all are ready is each renamed onto its target. A run with several sinks
therefore publishes none of them when one cannot be written; only a failing rename (after the
others' succeeded) can leave some published and not the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..io.sinks import Sink

log = logging.getLogger(__name__)


class SinkSession:
    """Opens ``sinks``; ends them with :meth:`end` (commit, or abort on failure).

    As a context manager (``with sink_session(sinks): ...``): a normal exit commits unless
    ``failed()`` says the run failed; any exception (``BaseException``: errors,
    ``KeyboardInterrupt``, ``SystemExit``) aborts every sink and propagates. ``failed`` is for
    executors whose threads report errors to a :class:`~stretchflow.runtime.RunControl`
    raised only after the sinks are ended (``failed=lambda: control.error is not None``).
    """

    def __init__(self, sinks: Sequence[Sink], failed: Callable[[], bool] | None = None):
        self.sinks = list(sinks)
        self.failed = failed
        self._opened: list[Sink] = []
        self._ended = False

    def open(self) -> SinkSession:
        """Opens every sink; if one cannot be opened, aborts those opened (and it) and
        raises."""
        for s in self.sinks:
            self._opened.append(s)  # before open(): a half-opened sink is aborted too
            try:
                s.open()
            except BaseException as e:
                self._abort(e)
                raise
        log.debug("sinks opened: %s", _names(self.sinks))
        return self

    def end(self, error: BaseException | None = None) -> None:
        """Commits every sink, unless ``error`` is given or ``failed()`` is true: then aborts
        them. Once only; later calls do nothing."""
        if self._ended:
            return
        if error is None and (self.failed is None or not self.failed()):
            self.commit()
        else:
            self._abort(error)

    def commit(self) -> None:
        """Prepares every sink, then commits each; on a failure aborts what is not committed
        and raises."""
        if self._ended:
            return
        try:
            for s in self._opened:
                s.prepare()
            for s in self._opened:
                s.commit()
        except BaseException as e:
            self._abort(e)  # a sink already committed ignores its abort
            raise
        self._ended = True
        log.debug("sinks committed: %s", _names(self._opened))

    def abort(self) -> None:
        """Aborts every sink (errors removing temporary files are raised after all were
        tried)."""
        errors = self._abort(None)
        if errors:
            raise errors[0]

    def _abort(self, cause: BaseException | None) -> list[Exception]:
        # every sink is aborted even if one fails to; the run's own error (cause) stays the
        # one raised, with what could not be cleaned up in its notes
        self._ended = True
        log.debug("sinks aborted (%s): %s", "no error" if cause is None else
                  type(cause).__name__, _names(self._opened))
        errors: list[Exception] = []
        for s in self._opened:
            try:
                s.abort()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                if cause is not None:
                    cause.add_note(f"while aborting sink {s.name!r}: {e}")
        return errors

    def __enter__(self) -> SinkSession:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.end()
        else:
            self._abort(exc)


def _names(sinks: Sequence[Sink]) -> str:
    return ", ".join(str(getattr(s, "name", s)) for s in sinks) or "none"


def sink_session(sinks: Sequence[Sink],
                 failed: Callable[[], bool] | None = None) -> SinkSession:
    """``with sink_session(sinks): ...`` opens the sinks and commits them when the block ends
    normally (and ``failed()``, if given, is false), else aborts them all; see
    :class:`SinkSession`."""
    return SinkSession(sinks, failed)
