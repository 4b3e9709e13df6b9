"""What every built-in generator checks its arguments with, and the event time it starts at
(shared by :mod:`stretchflow.io.generators` and the workloads it registers, which it imports:
here, not there, so no import circle)."""

from __future__ import annotations

DEFAULT_START = 1538352000000
"""2018-10-01T00:00:00Z in epoch milliseconds."""


def check(condition: bool, message: str) -> None:
    """A ValueError with ``message`` unless ``condition``."""
    if not condition:
        raise ValueError(message)


def check_prob(name: str, value: float) -> None:
    check(0.0 <= value <= 1.0, f"{name} must be in [0, 1], got {value!r}")


def check_rows(rows: int) -> None:
    check(int(rows) == rows and rows >= 0, f"rows must be a non-negative integer, got {rows!r}")
