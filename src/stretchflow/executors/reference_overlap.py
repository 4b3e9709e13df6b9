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
from functools import partial
from typing import Any

from ..runtime.ordered_jobs import TICK, OrderedJobs

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
    exception, drops the calls not made yet and returns at once). The thread and its order,
    bound and errors are :class:`~stretchflow.runtime.ordered_jobs.OrderedJobs`'."""

    def __init__(self, write: Callable[[Any], None], write_batch: Callable[[Any], None],
                 name: str, depth: int = 1) -> None:
        self._write, self._write_batch = write, write_batch
        self._name, self._depth = name, depth
        self._jobs: OrderedJobs | None = None

    def write(self, items: Any) -> None:
        self._started().submit(partial(self._write, items))

    def write_batch(self, batch: Any) -> None:
        self._started().submit(partial(self._write_batch, batch))

    def _started(self) -> OrderedJobs:
        if self._jobs is None:
            raise RuntimeError(f"{self._name}: a write before the write-behind was entered")
        return self._jobs

    def __enter__(self) -> WriteBehind:
        # the thread starts here, not in __init__: one never entered leaves no thread behind
        self._jobs = OrderedJobs(self._name, self._depth)
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        # a failed run: the call under way ends (bounded wait) before the sink is aborted and
        # the rest are dropped; a normal end waits for every call (a signal drops the rest)
        self._started().__exit__(kind, *rest)
