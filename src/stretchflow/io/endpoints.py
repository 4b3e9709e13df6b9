"""Where a flow reads and writes, by name: a file (:func:`~stretchflow.io.sources.open_source`,
:func:`~stretchflow.io.sinks.open_sink`: paths, ``-``, ``s3://``) or a message bus
(``redis://HOST:PORT/DB?stream=KEY``: :mod:`stretchflow.io.redis_streams`). What ``--input``,
``--output`` and ``Stream.sink("...")`` take. Kept apart from the file modules so that the
connectors, which build on :class:`Source` and :class:`Sink`, are not imported by them."""

from __future__ import annotations

import os
from typing import Any

from .sinks import Sink, open_sink
from .sources import Source, open_source

_BUS = ("redis://", "rediss://")


def _is_bus(spec: Any) -> bool:
    return isinstance(spec, str) and spec.lower().startswith(_BUS)


def open_input(spec: str | os.PathLike, **kw: Any) -> Source:
    """A source for ``spec``: a Redis stream URL, else :func:`open_source`'s files."""
    if _is_bus(spec):
        from .redis_streams import from_url

        return from_url(str(spec), **kw)
    return open_source(spec, **kw)


def open_output(spec: str | os.PathLike) -> Sink:
    """A sink for ``spec``: a Redis stream URL, else :func:`open_sink`'s files."""
    if _is_bus(spec):
        from .redis_streams import sink_from_url

        return sink_from_url(str(spec))
    return open_sink(spec)
