"""Lowering CPython's GIL switch interval while a reconfiguration is under way.

A thread that wants the interpreter lock waits up to ``sys.getswitchinterval()`` (5 ms by
default) before it asks the thread holding it to drop it. An instance of a VSN operator
that must reach a control tuple can thus wait one interval per hand-over for the lock held
by a source, the sink or another instance. :class:`SwitchHold` lowers the interval (to
:data:`SWITCH_INTERVAL`) from a reconfiguration request until its switch is applied, so
those hand-overs come sooner, and then puts back what was there.

The interval is process-wide, so — like :class:`~stretchflow.runtime.gc_hold.GCHold` — the
holds of every operator and executor in the process are counted together: the first hold
lowers the interval, the last release restores it. Only what the hold set is restored: an
interval that was already at or below the hold's value is left alone, and one that someone
else changed while the hold was on (the current value is no longer the one the hold set)
is theirs and is kept.

Example:
    >>> import sys
    >>> before = sys.getswitchinterval()
    >>> hold = SwitchHold(0.0002)
    >>> with hold:
    ...     sys.getswitchinterval() < before
    True
    >>> sys.getswitchinterval() == before
    True
"""

from __future__ import annotations

import sys

from .gc_hold import CountedHold

#: seconds: the switch interval while a reconfiguration is under way (CPython's default is
#: 0.005; much lower and the threads spend their time handing the lock over)
SWITCH_INTERVAL = 0.0005


class SwitchHold(CountedHold):
    """A counted hold that lowers ``sys.setswitchinterval`` to ``interval`` seconds."""

    def __init__(self, interval: float = SWITCH_INTERVAL) -> None:
        if not interval > 0:
            raise ValueError(f"SwitchHold: the interval must be > 0 seconds, got {interval!r}")
        super().__init__()
        self.interval = interval
        self._previous = 0.0
        self._set = 0.0

    def _on(self) -> bool:
        previous = sys.getswitchinterval()
        if previous <= self.interval:  # already as low: nothing to set, nothing to restore
            return False
        self._previous = previous
        sys.setswitchinterval(self.interval)
        # CPython rounds the value to microseconds: compare with what it reads back
        self._set = sys.getswitchinterval()
        return True

    def _off(self) -> None:
        if sys.getswitchinterval() == self._set:  # changed since by someone else: theirs
            sys.setswitchinterval(self._previous)


#: the process's hold: the switch interval is process-wide, so every executor shares one count
SWITCH_HOLD = SwitchHold()

__all__ = ["SWITCH_HOLD", "SWITCH_INTERVAL", "SwitchHold"]
