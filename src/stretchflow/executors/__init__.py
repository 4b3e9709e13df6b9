"""Executors: every one runs any Flow and gives the reference executor's output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import EngineUnavailableError

ENGINES = ("reference", "vsn", "sn", "ordered", "spark", "slack")
_PLANNED: dict[str, str] = {}


def get_engine(name: str) -> Callable[..., Any]:
    """The ``run(flow, **options)`` function of an engine, or a clear error."""
    if name == "reference":
        from .reference import run

        return run
    if name == "vsn":
        from .vsn import run

        return run
    if name == "ordered":
        from .ordered import run

        return run
    if name == "sn":
        from .sn import run

        return run
    if name == "spark":
        from .spark import run

        return run
    if name == "slack":
        from .slack import run

        return run
    if name in _PLANNED:
        raise EngineUnavailableError(
            f"engine {name!r} is not built yet (planned in {_PLANNED[name]}); "
            f"available engines: {', '.join(ENGINES)}"
        )
    raise EngineUnavailableError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
