"""A real S3 API server for the tests: moto's server mode on 127.0.0.1, a free port, in a
thread of the test process (so it dies with it), started and stopped with bounded waits.

``s3_server()`` is a context manager yielding the endpoint URL; tests skip when moto is not
installed (``pip install 'moto[server]'``, in the dev extras).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

START_TIMEOUT = 30.0  # seconds: the server binds its socket in well under one


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    starter = threading.Thread(target=server.start, daemon=True)
    starter.start()
    starter.join(START_TIMEOUT)  # ThreadedMotoServer.start waits without a bound
    if starter.is_alive():
        raise RuntimeError(f"moto's S3 server did not start within {START_TIMEOUT:g} s")
    host, port = server.get_host_and_port()
    with socket.create_connection((host, port), timeout=START_TIMEOUT):
        pass  # accepting connections
    try:
        yield f"http://{host}:{port}"
    finally:
        stopper = threading.Thread(target=server.stop, daemon=True)
        stopper.start()
        stopper.join(START_TIMEOUT)
