"""The live web view of a run and its Prometheus endpoint (issue #18; docs/live-view.md).

:func:`watch` wraps one run (``engines.run`` calls it for ``ui=`` / ``report=``): it makes the
:class:`~stretchflow.web.state.RunState`, subscribes it to the run's metrics
(:func:`stretchflow.runtime.metrics.watching`), serves it on 127.0.0.1 when asked, and at the
end writes the HTML report and, with ``ui_wait``, keeps serving the final state until Ctrl-C.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..runtime.metrics import watching
from ..runtime.signals import Interrupted
from .state import RunState

__all__ = ["RunState", "Session", "active", "close_all", "watch"]

log = logging.getLogger(__name__)


class Session:
    """One watched run: its state, its server (None without ``ui``) and what to do at the
    end."""

    def __init__(self, state: RunState, server: Any, report: str | None):
        self.state = state
        self.server = server
        self.report = report

    @property
    def url(self) -> str | None:
        return None if self.server is None else self.server.url

    def finish(self, result: Any) -> Any:
        """The run returned ``result``: the state takes its final numbers; returns it."""
        self.state.finish(result)
        result.extra["ui_url"] = self.url  # tests and scripts find the port here
        return result


def _say(line: str) -> None:
    """Logs ``line`` (the URL, the report's path) at INFO. The CLI's handler shows INFO. A
    library caller who asked for ``ui=True`` must see the URL too, yet with logging left
    unconfigured Python drops INFO records (its last-resort handler shows WARNING and above):
    then, as werkzeug does for its "Running on" line, the record goes to stderr through a
    handler of its own. Once an application configures logging, its configuration decides."""
    if log.hasHandlers():
        log.info(line)
    elif log.getEffectiveLevel() <= logging.WARNING:
        # WARNING is the root's default level, not a choice to hide INFO records; a level
        # set above it (ERROR) is one, and is obeyed
        record = log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None)
        handler = logging.StreamHandler(sys.stderr)
        handler.handle(record)
        handler.flush()


@contextmanager
def watch(flow: Any, engine: str, ui: bool | int = False, ui_wait: bool = False,
          report: str | None = None, stop: threading.Event | None = None) -> Iterator[Session]:
    """Watches the run made inside the block. ``ui``: True or a port (0 or True: a free
    one); ``ui_wait``: after the block, serve until Ctrl-C (or ``stop`` is set);
    ``report``: write the HTML report there at the end (a failed run's too)."""
    from .server import WebServer

    state = RunState(flow, engine)
    server = None
    if ui is not False:
        server = WebServer(state, 0 if ui is True else int(ui))
        server.start()
        _say(f"live view: {server.url} (Prometheus metrics at {server.url}metrics)")
    session = Session(state, server, report)
    state.start()
    with _LOCK:
        _ACTIVE.append(session)
    try:
        with watching(state.attach):
            yield session
    except BaseException as e:
        state.fail(e)
        raise
    finally:
        state.stop()
        with _LOCK:
            _ACTIVE.remove(session)
        try:
            if report is not None:
                from .report import write_report

                _say(f"report: {write_report(report, state.snapshot())}")
            if server is not None and ui_wait:
                _say(f"live view: the run ended; serving its final state at {server.url} "
                       f"until Ctrl-C")
                try:
                    (stop or threading.Event()).wait()
                except (KeyboardInterrupt, Interrupted):
                    pass
        finally:
            if server is not None:
                if ui_wait:
                    server.close()
                else:  # the final state stays up until the process exits (daemon thread)
                    with _LOCK:
                        _OPEN.append(server)


_LOCK = threading.Lock()
_OPEN: list[Any] = []
_ACTIVE: list[Session] = []


def active() -> list[Session]:
    """The watched runs going on in this process now (a notebook or a test finds the live
    view's URL here while ``flow.run(ui=True)`` blocks in another thread)."""
    with _LOCK:
        return list(_ACTIVE)


def close_all() -> None:
    """Closes the servers of finished runs that still serve their final state (tests, or a
    long-lived process that ran many flows with ``ui=True``)."""
    with _LOCK:
        servers = list(_OPEN)
        _OPEN.clear()
    for s in servers:
        s.close()


atexit.register(close_all)
