"""Helpers for tests that start threads: a deadlock fails the test instead of hanging it."""

import threading
import time
from collections.abc import Callable, Sequence

JOIN = 30.0  # seconds


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
