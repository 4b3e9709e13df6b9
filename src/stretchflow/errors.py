"""Errors a user sees: each names where (source or operator), what (the record) and why."""

from __future__ import annotations

from typing import Any


class StretchflowError(Exception):
    """Base class of stretchflow's own errors."""


class FlowDefinitionError(StretchflowError, ValueError):
    """A flow or operator was defined with invalid parameters."""


class SourceError(StretchflowError):
    """A source produced a record that cannot be processed.

    The message names the source, where the record is (file and line or row) and the reason.
    """

    def __init__(self, source: str, where: str, reason: str, record: Any = None):
        self.source = source
        self.where = where
        self.reason = reason
        self.record = record
        shown = _short(record)
        super().__init__(
            f"source {source!r}, {where}: {reason}" + (f"; record: {shown}" if shown else "")
        )


class OperatorError(StretchflowError):
    """A user function raised while an operator processed a tuple; the query stops."""

    def __init__(self, operator: str, ts: Any, payload: Any, cause: BaseException):
        self.operator = operator
        self.ts = ts
        self.payload = payload
        super().__init__(
            f"operator {operator!r} failed on tuple ts={ts!r} payload={_short(payload)}: "
            f"{type(cause).__name__}: {cause}"
        )


class RunTupleError(Exception):
    """Raised by an O+'s ``update_many`` to say which tuple of a run its failure came from,
    so that the executor's :class:`OperatorError` names that tuple, not the run's first."""

    def __init__(self, ts: Any, payload: Any, cause: BaseException):
        super().__init__(str(cause))
        self.ts = ts
        self.payload = payload
        self.cause = cause


class EngineUnavailableError(StretchflowError):
    """The requested execution engine is not available in this build."""


def _short(record: Any, limit: int = 300) -> str:
    if record is None:
        return ""
    text = repr(record)
    return text if len(text) <= limit else text[: limit - 3] + "..."
