"""Helpers for tests that start threads or processes: they wait on conditions, never on a
sleep, and a deadlock or a lost wake-up fails the test instead of hanging it."""

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

JOIN = 30.0  # seconds
POLL = 0.01  # seconds between two looks at a condition

T = TypeVar("T")


def start(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def join_all(threads: Sequence[threading.Thread], timeout: float = JOIN) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads did not finish (deadlock?): {stuck}"


def within(cond: Callable[[], T], timeout: float, poll: float = POLL) -> T:
    """``cond()``'s first true value within ``timeout`` seconds, or its last (false) value."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got or time.monotonic() >= end:
            return got
        time.sleep(poll)


def wait_until(cond: Callable[[], T], timeout: float, what: str, poll: float = POLL) -> T:
    """``cond()``'s first true value; fails the test, naming ``what``, if it takes more than
    ``timeout`` seconds."""
    got = within(cond, timeout, poll)
    assert got, f"timed out after {timeout} s waiting until {what}"
    return got


_CONDITION_WAIT = threading.Condition.wait.__code__


def blocked(thread: threading.Thread) -> bool:
    """Whether ``thread`` is waiting on a :class:`threading.Condition` (so also in a blocking
    ``Event.wait``, ``Semaphore.acquire`` or ``queue.Queue`` call). A thread enters the wait
    holding the condition's lock and is a waiter before it lets go of it, so from then on
    whoever takes the lock and notifies wakes it: the point a test of a blocking call waits
    for before it unblocks the call."""
    frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
    return frame is not None and frame.f_code is _CONDITION_WAIT


def wait_blocked(thread: threading.Thread, timeout: float = JOIN) -> None:
    """Waits until ``thread`` blocks on a condition (:func:`blocked`); fails the test if it
    ends or does not block within ``timeout`` seconds."""
    wait_until(lambda: blocked(thread) or not thread.is_alive(), timeout,
               f"{thread.name} blocks")
    assert thread.is_alive(), f"{thread.name} ended instead of blocking"
