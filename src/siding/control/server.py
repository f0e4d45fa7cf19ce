"""The control HTTP server on the driver: a stdlib ``ThreadingHTTPServer`` on its own thread."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from siding.control.prometheus import metrics_registry, render
from siding.control.status import QueryHealth, health_document, status_document
from siding.errors import SidingError
from siding.pipeline.metrics import MetricsSink

log = logging.getLogger(__name__)

HealthSource = Callable[[], Sequence[QueryHealth]]


class ControlServer:
    """``GET /health``, ``/status`` and ``/metrics``; ``start()`` binds (port 0: a free port)."""

    def __init__(
        self, address: tuple[str, int], metrics: MetricsSink, queries: HealthSource
    ) -> None:
        self._address = address
        self._metrics = metrics
        self._queries = queries
        self._registry = metrics_registry(metrics.snapshot, queries)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        if self._server is None:
            raise SidingError("the control server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> ControlServer:
        try:
            server = ThreadingHTTPServer(self._address, _handler(self))
        except OSError as exc:
            host, port = self._address
            raise SidingError(f"control: cannot listen on {host}:{port}: {exc}") from exc
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="siding-control", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> ControlServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` for a GET of ``path``."""
        route = path.split("?", 1)[0].rstrip("/") or "/"
        if route == "/":
            return 200, "text/html; charset=utf-8", page()
        if route == "/health":
            code, body = health_document(self._queries())
            return code, "application/json", _json(body)
        if route == "/status":
            document = status_document(self._metrics.snapshot(), self._queries())
            return 200, "application/json", _json(document)
        if route == "/metrics":
            return 200, CONTENT_TYPE_LATEST, render(self._registry)
        return 404, "application/json", _json({"error": f"no such endpoint: {route}"})


def page() -> bytes:
    """The operator's page: static HTML and script shipped in the package (no build step, no
    CDN); it polls ``/status``."""
    return resources.files("siding.control").joinpath("page.html").read_bytes()


def _json(body: Any) -> bytes:
    return (json.dumps(body, indent=2) + "\n").encode()


def _handler(control: ControlServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "siding-control"

        def do_GET(self) -> None:
            try:
                code, content_type, body = control.respond(self.path)
            except Exception as exc:  # a broken probe must not kill the server thread
                log.exception("control: %s failed", self.path)
                code, content_type = HTTPStatus.INTERNAL_SERVER_ERROR, "application/json"
                body = _json({"error": str(exc)})
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("control: " + format, *args)

    return Handler
