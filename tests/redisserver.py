"""The tests' Redis server (:func:`stretchflow.io.redis_server.redis_server`): a missing
redis-server fails the test — the project installs it (``make test`` runs
tools/install-system.sh), so a missing one is a broken set-up, never a silently skipped
connector."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stretchflow.io import redis_server as rs


@contextmanager
def redis_server(tmp: Path) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: run tools/install-system.sh (as root) to "
                    "install Debian's redis-server")
    with rs.redis_server(tmp) as url:
        yield url
