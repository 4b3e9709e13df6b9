"""A free TCP port on 127.0.0.1, for the servers the project starts itself (a local Spark
cluster, a test Redis server)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no socket holds now (the OS picks it; another process may take it before the
    caller binds, which the callers' start-up checks report)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
