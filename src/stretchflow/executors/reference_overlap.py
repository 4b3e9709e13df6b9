"""The reference executor's read ahead and write behind, each on a thread of its own (issue #16).

A columnar flow on the reference engine is read → compute → write, and each of the three is
mostly Arrow kernels (the JSON reader, the token split and hash, the sink's string joins), which
release the GIL: run one after the other on one thread, a 2-core machine idles a core most of
the run. :func:`read_ahead` reads a source's next batch while the flow computes;
:class:`WriteBehind` makes a sink's calls on a thread while the flow computes the next output.

Nothing changes but when the work is done: one thread each, first in first out, so the sink
gets the same calls in the same order and writes the same bytes. Errors cross over in order: a
read error is raised where the serial reader would have raised it, after the batches before it;
a write error at the next call to the sink or at the end of the drain. Every wait is bounded
(:data:`TICK`), so a signal reaches the run's thread and a dead thread is noticed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: the longest a wait lasts before it looks again (a signal, a thread that died)
TICK = 0.2
_END = object()


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(items: Iterator[Any], name: str, depth: int = 1) -> Iterator[Any]:
    """``items`` in order, read by a thread at most ``depth`` items ahead of the one the caller
    holds (depth 1: the next batch is read while the caller processes this one — two batches
    alive, not one); an error of ``items`` is raised after the items before it. Closing this
    generator stops the thread (once it has the item it is reading) and closes ``items``."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    slots = threading.Semaphore(depth)  # items read and not yet taken by the caller
    stop = threading.Event()

    def read() -> None:
        it = iter(items)
        try:
            while True:
                while not slots.acquire(timeout=TICK):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                try:
                    x = next(it)
                except StopIteration:
                    q.put(_END)
                    return
                q.put(x)
        except BaseException as e:  # noqa: BLE001 - raised again on the reading side, in order
            q.put(_Raised(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=read, name=name, daemon=True)
    t.start()
    try:
        while True:
            try:
                x = q.get(timeout=TICK)
            except queue.Empty:
                if not t.is_alive() and q.empty():
                    raise RuntimeError(f"{name}: the reading thread ended early") from None
                continue
            if x is _END:
                return
            if type(x) is _Raised:
                raise x.error
            slots.release()  # taken: the thread may read the next one meanwhile
            yield x
    finally:
        stop.set()
        t.join(timeout=TICK)


class WriteBehind:
    """A sink's ``write(items)`` and ``write_batch(batch)`` made in order on a thread, at most
    ``depth`` calls handed over and not done (depth 1: the next output is computed while this
    one is written — two alive, not one). ``with WriteBehind(...) as w:`` starts it; the end of
    the block waits for every call and raises the first error of one (or, on leaving by an
    exception, drops the calls not made yet and returns at once)."""

    def __init__(self, write: Callable[[Any], None], write_batch: Callable[[Any], None],
                 name: str, depth: int = 1) -> None:
        self._calls = (write, write_batch)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth)
        self._error: BaseException | None = None
        self._drop = False
        self._t = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while True:
            try:
                job = self._q.get(timeout=TICK)
            except queue.Empty:
                if self._drop:
                    return
                continue
            if job is _END:
                return
            try:
                if self._error is None and not self._drop:
                    self._calls[job[0]](job[1])
            except BaseException as e:  # noqa: BLE001 - raised on the run's thread
                self._error = e
            finally:
                self._slots.release()

    def _put(self, job: Any) -> None:
        while not self._slots.acquire(timeout=TICK):
            if self._error is not None:
                raise self._error
            if not self._t.is_alive():
                raise RuntimeError(f"{self._t.name}: the writing thread ended") from None
        if self._error is not None:
            self._slots.release()
            raise self._error
        self._q.put(job)

    def write(self, items: Any) -> None:
        self._put((0, items))

    def write_batch(self, batch: Any) -> None:
        self._put((1, batch))

    def __enter__(self) -> WriteBehind:
        self._t.start()
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:  # the run failed: what is not written yet never will be
            self._drop = True
            # the call under way ends before the sink is aborted (the thread drops the rest
            # and ends); a write stuck for longer is left to the daemon thread
            self._t.join(timeout=5 * TICK)
            return
        self._q.put(_END)
        try:
            while self._t.is_alive():
                self._t.join(timeout=TICK)
        except BaseException:  # a signal while waiting: the sink is aborted next
            self._drop = True
            raise
        if self._error is not None:
            raise self._error
