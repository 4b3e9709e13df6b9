"""Jobs run in order on one thread of their own, their first error raised on the owner's thread.

Two parts of the reference engine hand work to a thread while their own thread goes on: the
write-behind of a sink (:class:`~stretchflow.executors.reference_overlap.WriteBehind`: a sink's
calls made while the flow computes its next output) and the checkpoint's asynchronous phase
(:class:`~stretchflow.runtime.checkpoint_drain.Committer`: fsyncs, renames and manifests
written while the drain goes on). Both need the same thing, which :class:`OrderedJobs` is:

- the jobs run one at a time in the order they were submitted (a sink's bytes, a checkpoint's
  commit point after the parts it names);
- the first job that fails stops every later one: each later job is *discarded* (its
  ``discard`` callback runs instead, to release what the job would have taken over), because
  a later write could name what failed; the failure is raised on the owner's thread at its
  next :meth:`~OrderedJobs.submit` or at :meth:`~OrderedJobs.finish` — the exception object
  itself, so its type and message are those of the job and its traceback still holds the job's
  frames (the owner's frames are added in front as it is raised again);
- an optional bound on the jobs handed over and not done (``depth``), for memory: a job holds
  its input (a batch) alive until it has run. :meth:`~OrderedJobs.submit` then blocks, in
  waits of :data:`TICK` so that a signal reaches the owner's thread (a wait on a lock without
  a timeout is not interrupted) and a failed job or a dead thread is noticed;
- an end that waits (:meth:`~OrderedJobs.finish`, bounded or not) and one that drops the jobs
  not started (:meth:`~OrderedJobs.abort`, when the owner fails): either way the thread is
  told to end, so nothing is left running once the job under way returns.

A job that never returns cannot be stopped (Python has no way to kill a thread): the thread is
a daemon, the bounded waits give up with an error naming the job under way, and the process
can still exit.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import StretchflowError

#: the longest a wait lasts before it looks again (a signal, a failed job, a thread that died)
TICK = 0.2
#: how long :meth:`OrderedJobs.abort` waits for the job under way: a failed run's sink is
#: aborted next, better once the job writing to it has returned
ABORT_WAIT = 5 * TICK
_END = None  # handed to the thread after the last job: it ends there


class JobsTimeout(StretchflowError):
    """:meth:`OrderedJobs.finish` waited its whole timeout and jobs are still not done."""


def _describe(fn: Any) -> str:
    if fn is None:
        return "none, between two jobs"
    fn = getattr(fn, "func", fn)  # a functools.partial: the function it calls
    return getattr(fn, "__qualname__", None) or repr(fn)


class OrderedJobs:
    """One daemon thread named ``name`` running the jobs submitted (callables without
    arguments) in order; at most ``depth`` jobs handed over and not done (None: no bound).
    The thread starts here; :meth:`finish` or :meth:`abort` ends it, and so does leaving a
    ``with`` block (finish on a normal exit, abort when the block raised).

    Submitting may be done from several threads (the jobs then run in the order their
    :meth:`submit` calls took them); :meth:`finish` and :meth:`abort` belong to the owner."""

    def __init__(self, name: str, depth: int | None = None) -> None:
        if depth is not None and depth < 1:
            raise ValueError(f"{name}: the depth of the jobs in flight must be at least 1, "
                             f"not {depth}")
        self.name = name
        #: the first failure of a job (or of a discard callback); None while all went well
        self.error: BaseException | None = None
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth) if depth is not None else None
        self._dropping = False  # abort: the jobs not started are discarded, not run
        self._ended = False  # _END is in the queue: no job is taken after it
        self._current: Any = None  # the job under way, named when a wait times out
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the jobs' thread --------------------------------------------------------------------
    def _run(self) -> None:
        q = self._q
        while True:
            job = q.get()  # the owner always ends with _END (finish, abort): no wait to bound
            if job is _END:
                return
            fn, discard = job
            self._current = fn
            try:
                if self.error is None and not self._dropping:
                    try:
                        fn()
                    except BaseException:
                        if discard is not None:
                            discard()  # what the failed job left (a part not renamed)
                        raise
                elif discard is not None:
                    discard()
            except BaseException as e:  # noqa: BLE001 - raised on the owner's thread
                if self.error is None:
                    self.error = e
            finally:
                self._current = None
                if self._slots is not None:
                    self._slots.release()

    # -- the owner's side --------------------------------------------------------------------
    def check(self) -> None:
        """Raises the first failure of a job, if any (the same exception object each time)."""
        if self.error is not None:
            raise self.error

    def submit(self, fn: Callable[[], Any], discard: Callable[[], Any] | None = None) -> None:
        """Runs ``fn()`` on the thread after every job submitted before; ``discard()`` instead
        when an earlier job failed or the jobs were aborted, and after ``fn`` when ``fn``
        fails (to release what ``fn`` would have taken over). Raises the first failure of an
        earlier job instead of taking the job (then neither ``fn`` nor ``discard`` is called:
        the job is still the caller's). With a depth, waits for a job in flight to end."""
        self.check()
        if self._ended:
            raise RuntimeError(f"{self.name}: a job was submitted after the end of the jobs")
        slots = self._slots
        if slots is not None:
            while not slots.acquire(timeout=TICK):
                self.check()
                if not self._thread.is_alive():
                    raise RuntimeError(f"{self.name}: the thread running the jobs ended")
            if self.error is not None:  # failed while this call waited for its slot
                slots.release()
                raise self.error
        self._q.put((fn, discard))

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._q.put(_END)

    def finish(self, timeout: float | None = None) -> None:
        """Waits for every job submitted and the thread's end (at most ``timeout`` seconds;
        None: as long as the jobs take), then raises the first failure of a job, if any.
        Raises :class:`JobsTimeout`, naming the job under way, when the time is up (the thread
        then goes on with its jobs: call again to wait more, or :meth:`abort`)."""
        self._end()
        t = self._thread
        deadline = None if timeout is None else time.monotonic() + timeout
        while t.is_alive():
            wait = TICK if deadline is None else min(TICK, deadline - time.monotonic())
            if wait <= 0:
                raise JobsTimeout(
                    f"{self.name}: the jobs did not finish within {timeout:g} s (under way: "
                    f"{_describe(self._current)}; {self._q.qsize() - 1} more queued)")
            t.join(wait)  # in steps of TICK: a signal reaches the owner's thread meanwhile
        self.check()

    def abort(self, wait: float = ABORT_WAIT) -> None:
        """Drops the jobs not started (their ``discard`` callbacks run on the thread, in
        order) and waits at most ``wait`` seconds for the job under way and the thread's end.
        Raises nothing: the owner is failing already (:attr:`error` holds a job's failure)."""
        self._dropping = True
        self._end()
        self._thread.join(wait)

    def close(self, timeout: float | None = None) -> None:
        """:meth:`finish`; when that is interrupted (a signal on the owner's thread, the time
        up) the jobs not started are dropped, as by :meth:`abort`. A failure of a job is
        raised as by :meth:`finish`, the thread having ended."""
        try:
            self.finish(timeout)
        except BaseException:
            self.abort()
            raise

    @property
    def alive(self) -> bool:
        """Whether the thread is still running (a job, or waiting for one)."""
        return self._thread.is_alive()

    def __enter__(self) -> OrderedJobs:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:  # the owner failed: what is not done yet never will be
            self.abort()
            return
        self.close()
