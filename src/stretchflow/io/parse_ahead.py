"""Chunks of a file parsed on several threads at once, handed out in the file's order.

Arrow's JSON parser releases the GIL but runs a chunk of one block (1 MiB, what the columnar
path reads at a time) on the calling thread: one chunk after another, a JSON Lines file is
parsed on one core, and that parse was most of an expression flow's time on JSON Lines
(issue #31; py-spy: two thirds of the reading thread's time). :func:`ordered_map` parses
the next chunks on a small pool of threads while the caller works on the current one, so the
parse of a file uses every core and its output order is the file's.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: the parsing threads: one per core up to 4 (each holds a chunk and its table: memory grows
#: with them, and beyond a few the reading and the consumer are the limit, not the parse)
WORKERS = max(1, min(4, os.cpu_count() or 1))


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = WORKERS,
                name: str = "stretchflow-parse") -> Iterator[Any]:
    """``fn(x)`` for each ``x`` of ``items``, in order, computed on ``workers`` threads: while
    the caller holds one result, the next ``workers`` are being computed (so at most
    ``workers + 1`` items alive at once: memory stays bounded). An error of ``fn`` is raised
    at its item's place, after the results before it; an error of ``items`` likewise.
    Closing the generator cancels what has not started and lets the threads end (a call
    under way finishes on its own: Python cannot stop a thread). ``workers <= 1``: on the
    calling thread, no pool."""
    if workers <= 1:
        for x in items:
            yield fn(x)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    pending: deque[Future] = deque()
    it = iter(items)
    try:
        while True:
            try:
                x = next(it)
            except StopIteration:
                break
            except BaseException:
                while pending:  # the results before the failed read first
                    yield pending.popleft().result()
                raise
            pending.append(pool.submit(fn, x))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
