"""Executors: every one runs any Flow and gives the reference executor's output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import EngineUnavailableError

ENGINES = ("reference", "vsn", "sn", "ordered", "spark")
_PLANNED = {
    "vsn": "issue #3 (VSN executor)",
    "sn": "issue #4 (SN executor)",
    "ordered": "issue #7 (ordered multicore executor)",
    "spark": "issue #5 (Spark engine)",
}


def get_engine(name: str) -> Callable[..., Any]:
    """The ``run(flow, **options)`` function of an engine, or a clear error."""
    if name == "reference":
        from .reference import run

        return run
    if name in _PLANNED:
        raise EngineUnavailableError(
            f"engine {name!r} is not built yet ({_PLANNED[name]}); available: reference"
        )
    raise EngineUnavailableError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
