"""A throwaway Redis server: Debian's ``redis-server`` (installed by
``tools/install-system.sh``) on a free port of 127.0.0.1, without persistence, its files in a
given directory, stopped and waited for on exit. For the tests and benchmarks of the Redis
Streams connector (:mod:`stretchflow.io.redis_streams`), which start their own server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import StretchflowError
from ..runtime.ports import free_port

#: how long a server may take to answer PING
START_S = 20.0


class RedisServerMissing(StretchflowError):
    """``redis-server`` is not installed."""


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
            c.sendall(b"PING\r\n")
            return c.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server(workdir: str | Path) -> Iterator[str]:
    """Starts a server with its files in ``workdir``; yields its URL
    (``redis://127.0.0.1:PORT/0``); stops it when the block ends."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RedisServerMissing("redis-server is missing: run tools/install-system.sh (as "
                                 "root) to install Debian's redis-server")
    work = Path(workdir)
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(work), "--daemonize", "no", "--logfile", str(work / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_S
        while not _pong(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = work / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise StretchflowError(f"redis-server did not start on port {port}: {tail}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
