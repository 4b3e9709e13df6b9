"""Run control: the first error wins, then every thread of the run stops.

Every threaded executor used to write this itself (an error field under a lock, a stop event,
its own "stopped" exception, its own list of things to abort). One :class:`RunControl` per run
now holds the first error and runs the abort hooks the executor registered — aborting its
buffers (ESG, SSG), breaking its barriers, terminating its child processes — exactly once,
so that no thread stays blocked after another failed. Correct without the GIL: the error and
the hooks are read and written under a lock, and hooks run outside it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from ..errors import OperatorError, RunTupleError, StretchflowError

log = logging.getLogger(__name__)

_SLICE = 0.1  # seconds a blocking put/get waits before checking whether the run stopped
#: seconds an operator's thread waits at a barrier of its operator (a reconfiguration's, a
#: checkpoint's) for the others before the run fails with a broken barrier
BARRIER_TIMEOUT = 120.0


class Stopped(Exception):
    """Raised in a thread whose run was stopped (another thread failed, or the run was
    aborted): the thread just exits; the run reports the first error, not this."""


class Barrier:
    """The payload of a control tuple: an epoch barrier travelling in a batch at its own
    position. A VSN reconfiguration's ⟨e*, O*, f_μ*⟩ subclasses it, and so does a checkpoint's
    barrier (the same cut with another action)."""

    __slots__ = ("epoch",)

    def __init__(self, epoch: int):
        self.epoch = epoch


class CheckpointBarrier(Barrier):
    """The payload of a checkpoint's control tuple ``(cut + 0.5, barrier)``: epoch ``epoch``
    covers every input tuple with ts <= ``cut`` (:mod:`stretchflow.runtime.checkpoint`)."""

    __slots__ = ("cut",)

    def __init__(self, epoch: int, cut: int):
        super().__init__(epoch)
        self.cut = cut

    def __repr__(self) -> str:
        return f"CheckpointBarrier(epoch={self.epoch}, cut={self.cut})"


def user_error(operator: str, ts: Any, payload: Any, e: BaseException) -> BaseException:
    """The exception a run reports for ``e`` raised while ``operator`` processed a tuple:
    stretchflow's own errors (a source's, an upstream operator's) already name their origin
    and pass unchanged; a :class:`RunTupleError` names the tuple of a run that failed; any
    other exception of a user function becomes an :class:`OperatorError`."""
    if isinstance(e, StretchflowError | Stopped):
        return e
    if isinstance(e, RunTupleError):
        return OperatorError(operator, e.ts, e.payload, e.cause)
    if ts is None:
        payload = "<end of input>"
    return OperatorError(operator, ts, payload, e)


def chained_user_error(operator: str, ts: Any, payload: Any, e: BaseException
                       ) -> BaseException:
    """:func:`user_error` for ``e``, chained to the user's own exception (a
    :class:`RunTupleError`'s cause) as ``raise ... from`` chains it, or ``e`` itself when it
    already names its origin: for a failure that is raised later, where it is handed on."""
    err = user_error(operator, ts, payload, e)
    if err is not e:
        err.__cause__ = e.cause if isinstance(e, RunTupleError) else e
    return err


def raise_user_error(operator: str, ts: Any, payload: Any, e: BaseException) -> NoReturn:
    """Raises :func:`chained_user_error` for ``e``."""
    raise chained_user_error(operator, ts, payload, e)


class RunControl:
    """Shared by the threads of one run: the first error, the stop flag and the abort hooks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self._hooks: list[Callable[[BaseException], Any]] = []

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    def on_abort(self, hook: Callable[[BaseException], Any]) -> None:
        """Calls ``hook(error)`` once when the run fails (at once if it already has)."""
        with self._lock:
            err = self.error if self.stop.is_set() else None
            if err is None:
                self._hooks.append(hook)
                return
        hook(err)

    def record(self, e: BaseException) -> bool:
        """Keeps ``e`` if it is the run's first error (without stopping); True if it was."""
        if isinstance(e, Stopped):
            return False
        with self._lock:
            if self.error is None:
                self.error = e
                return True
            return False

    def fail(self, e: BaseException) -> None:
        """Records ``e`` (if first) and stops the run: every abort hook runs once."""
        self.record(e)
        with self._lock:
            if self.stop.is_set():
                return
            self.stop.set()
            hooks, self._hooks = self._hooks, []
            err = self.error if self.error is not None else e
        # DEBUG: the run raises this error to its caller, who reports it; the record says
        # when the stop began and which thread saw it first
        log.debug("run stopping (%s, in thread %s): %s", type(err).__name__,
                  threading.current_thread().name, err)
        for hook in hooks:
            try:
                hook(err)
            except Exception:  # noqa: BLE001, S110  # an abort must reach every other hook
                pass

    def guard(self, fn: Callable[..., Any], *args: Any,
              ended: threading.Event | None = None) -> Callable[[], None]:
        """``fn(*args)`` as a thread target: :class:`Stopped` ends it quietly, any other
        exception fails the run; ``ended`` (if given) is set once that is done."""
        def target() -> None:
            try:
                fn(*args)
            except Stopped:
                pass
            except BaseException as e:  # noqa: BLE001
                self.fail(e)
            finally:
                if ended is not None:
                    ended.set()
        return target

    def thread(self, fn: Callable[..., Any], *args: Any, name: str,
               ended: threading.Event | None = None) -> threading.Thread:
        """A daemon thread running ``fn(*args)`` under :meth:`guard` (``ended``: set when
        it is done, its error, if any, recorded)."""
        return threading.Thread(target=self.guard(fn, *args, ended=ended), name=name,
                                daemon=True)

    def raise_error(self) -> None:
        """Raises the run's first error, if any (call after joining the threads)."""
        if self.error is not None:
            raise self.error

    # -- blocking calls that give up once the run is stopped -------------------------------------
    def put(self, q: Any, item: Any) -> None:
        """``q.put(item)`` on a bounded queue (``queue.Queue`` or a multiprocessing queue)
        whose reader may have died: waits in slices (blocking, no spinning) and raises
        :class:`Stopped` once the run is stopped."""
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                q.put(item, timeout=_SLICE)
                return
            except queue.Full:
                continue

    def get(self, q: Any) -> Any:
        """``q.get()``, raising :class:`Stopped` once the run is stopped."""
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                return q.get(timeout=_SLICE)
            except queue.Empty:
                continue

    def wait(self, barrier: threading.Barrier) -> int:
        """``barrier.wait()``; a broken barrier (the run failed) raises :class:`Stopped`."""
        try:
            return barrier.wait()
        except threading.BrokenBarrierError:
            raise Stopped from None

    def wait_at(self, barrier: threading.Barrier, what: str,
                timeout: float = BARRIER_TIMEOUT) -> None:
        """An operator's thread at ``barrier`` (``what`` names it in an error): a barrier
        broken because the run failed ends the thread quietly (:class:`Stopped`); one broken
        otherwise (its timeout) fails the run naming it."""
        try:
            barrier.wait(timeout)
        except threading.BrokenBarrierError:
            if self.error is not None:
                raise Stopped from None
            raise RuntimeError(f"{what} broke") from None

    def track(self, barrier: threading.Barrier) -> threading.Barrier:
        """Aborts ``barrier`` when the run fails, so nobody waits at it forever."""
        self.on_abort(lambda _e: barrier.abort())
        return barrier
