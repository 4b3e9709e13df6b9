"""SIGINT and SIGTERM as an exception in the main thread while a run is going on.

Python turns SIGINT into ``KeyboardInterrupt`` but leaves SIGTERM at its default action: the
process dies on the spot, no ``finally`` runs, so a sink's temporary file, the sn engine's
state directory and its channel processes outlive it. Inside :func:`interrupt_on_signals` both
signals raise :class:`Interrupted` in the main thread instead. It derives from
``BaseException`` (as ``KeyboardInterrupt`` does) so that ``except Exception`` in user code
does not swallow it, while every executor's ``except BaseException`` path fails the run: its
threads stop, its sinks abort (the previous output stays), its child processes are terminated
and its temporary files removed, as for any other failure.

A second signal while that cleanup runs means the user does not want to wait: the process
exits at once with the same status (what is left behind then is what a SIGKILL leaves; the sn
engine sweeps its own stale directories on its next run, and its channels watch their parent).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Interrupted", "interrupt_on_signals", "signals_deferred"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

log = logging.getLogger(__name__)


class Interrupted(BaseException):
    """A run stopped by a signal (SIGINT, SIGTERM): ``signum``, ``name`` and the process
    exit status a shell expects (``128 + signum``: 130, 143)."""

    def __init__(self, signum: int, detail: str = ""):
        super().__init__(signum)
        self.signum = signum
        self.detail = detail  # what the run read and committed, for the one line a CLI prints

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return f"stopped by {self.name}"


#: signals that arrived inside :func:`signals_deferred`, raised when it ends (main thread only)
_deferred: list[int] = []
_defer_depth = 0


@contextmanager
def signals_deferred() -> Iterator[None]:
    """A section the first SIGINT/SIGTERM must not interrupt: its :class:`Interrupted` is
    raised when the section ends. Starting a child process is such a section: interrupted
    between the fork server's fork and the reply with the pid, the parent would not know its
    child, drop the queues the child is still unpickling, and the child would die with a
    traceback on the shared stderr. Only the main thread's handler ever raises, so
    elsewhere this changes nothing."""
    global _defer_depth
    main = threading.current_thread() is threading.main_thread()
    if main:
        _defer_depth += 1
    try:
        yield
    finally:
        if main:
            _defer_depth -= 1
            if _defer_depth == 0 and _deferred:
                signum = _deferred.pop()
                _deferred.clear()
                raise Interrupted(signum)


class SignalWatch:
    """What :func:`interrupt_on_signals` saw: the first signal (``received``), if any."""

    def __init__(self) -> None:
        self.received: int | None = None

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None and _defer_depth:
            self.received = signum
            _deferred.append(signum)  # raised when the section ends (signals_deferred)
            return
        if self.received is not None:
            # the second signal: the user will not wait for the cleanup of the first
            try:
                os.write(2, f"stopped by {signal.Signals(signum).name} again: exiting without "
                            f"cleanup\n".encode())
            finally:
                os._exit(128 + signum)
        self.received = signum
        log.debug("%s received: stopping the run", signal.Signals(signum).name)
        raise Interrupted(signum)


@contextmanager
def interrupt_on_signals(signals: tuple[int, ...] = _SIGNALS) -> Iterator[SignalWatch]:
    """Within the block, each of ``signals`` raises :class:`Interrupted` in the main thread
    (a second one exits the process at once); the previous handlers are restored after it.
    A signal the process was told to ignore stays ignored (a shell starts a background job
    with SIGINT ignored, and Python keeps it so). Outside the main thread (where Python
    cannot install handlers) it changes nothing."""
    watch = SignalWatch()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return
    old = {s: signal.signal(s, watch._handler) for s in signals
           if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield watch
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sys.stderr.flush()
