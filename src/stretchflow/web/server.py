"""The live view's HTTP server: stdlib ``http.server`` in a daemon thread on 127.0.0.1.

Routes: ``/`` the page, ``/static/NAME`` its assets (shipped in the package, no network),
``/api/state`` the run's state as JSON, ``/metrics`` the Prometheus text. Bound to the loopback
address only: the view shows a run's internals and takes no authentication.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from .prom import registry_for, render
from .state import RunState

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}


def static_text(name: str) -> str:
    """A file of the package's ``static/`` folder."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def _handler(state: RunState, registry: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # a request per half second would flood the run's terminal

        def _send(self, body: bytes, ctype: str, status: int = HTTPStatus.OK) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(static_text("index.html").encode(), _TYPES[".html"])
            elif path.startswith("/static/"):
                name = path[len("/static/"):]
                ext = name[name.rfind("."):] if "." in name else ""
                if "/" in name or ext not in _TYPES:
                    self._send(b"not found", "text/plain", HTTPStatus.NOT_FOUND)
                    return
                try:
                    body = static_text(name).encode()
                except FileNotFoundError:
                    self._send(b"not found", "text/plain", HTTPStatus.NOT_FOUND)
                    return
                self._send(body, _TYPES[ext])
            elif path == "/api/state":
                self._send(json.dumps(state.snapshot()).encode(), "application/json")
            elif path == "/metrics":
                body, ctype = render(registry)
                self._send(body, ctype)
            else:
                self._send(b"not found", "text/plain", HTTPStatus.NOT_FOUND)

    return Handler


class WebServer:
    """Serves ``state`` on ``127.0.0.1:port`` (0: a free port) from a daemon thread."""

    def __init__(self, state: RunState, port: int = 0):
        self.state = state
        self.registry = registry_for(state)
        try:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(state, self.registry))
        except OSError as e:
            raise OSError(f"live view: cannot listen on 127.0.0.1:{port}: {e.strerror or e}") \
                from e
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={
            "poll_interval": 0.2}, name="web-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
            self._thread.join(timeout=5.0)
        self.httpd.server_close()
