"""The command line's logging set-up (issue #18): the library only logs
(``log = logging.getLogger(__name__)`` in each module, no handler, no print); the CLI installs
one handler on the ``stretchflow`` logger that writes plain one-line records to stderr.

Levels the library uses: INFO for what a user asked to see (the live view's URL, a report
written, the CLI's off-terminal progress lines), DEBUG for the run's life (sinks opened and
committed, sources ended, controller decisions, parallelism changes, the reason a run stops).
The CLI's default level is INFO, so its output stays what it was; ``--log-level debug`` shows
the run's life.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

LEVELS = ("debug", "info", "warning", "error")


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (a rich
    progress display swaps it for a proxy that prints above the bar; pytest's capsys swaps
    it too), not the stream of the moment it was made."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # noqa: ANN001
        pass


class OneLine(logging.Formatter):
    """An INFO record is its message alone (``live view: http://...``, ``progress: ...``:
    lines users read); other levels say theirs (``debug: stretchflow.runtime.sinks: ...``).
    A multi-line message, or an exception, is folded onto the one line."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            msg += f": {type(e).__name__}: {e}"
        msg = " ".join(msg.split())
        if record.levelno == logging.INFO:
            return msg
        return f"{record.levelname.lower()}: {record.name}: {msg}"


@contextmanager
def cli_logging(level: str = "info") -> Iterator[logging.Handler]:
    """Within the block, records of the ``stretchflow`` loggers at ``level`` and above go to
    stderr, one line each; the handler and the level are removed again at the end (``main``
    runs many times in one process under tests)."""
    if level not in LEVELS:
        raise ValueError(f"--log-level expects one of {', '.join(LEVELS)}, got {level!r}")
    logger = logging.getLogger("stretchflow")
    handler = _Stderr()
    handler.setFormatter(OneLine())
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper()))
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
