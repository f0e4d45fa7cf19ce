"""The control HTTP server on the driver: a stdlib ``ThreadingHTTPServer`` on its own thread."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from siding.control import registry_api
from siding.control.prometheus import metrics_registry, render
from siding.control.registry import RegistryService
from siding.control.status import (
    KafkaFacts,
    QueryHealth,
    health_document,
    ready_document,
    status_document,
)
from siding.control.tokens import check_token
from siding.errors import SidingError
from siding.pipeline.driver.controls import ControlError, RouteControls
from siding.pipeline.driver.metrics import MetricsSink

MAX_BODY_BYTES = 64 * 1024

log = logging.getLogger(__name__)

HealthSource = Callable[[], Sequence[QueryHealth]]


class ControlServer:
    """``GET /health``, ``/ready``, ``/status`` and ``/metrics``; ``start()`` binds (port 0: a
    free port)."""

    def __init__(
        self,
        address: tuple[str, int],
        metrics: MetricsSink,
        queries: HealthSource,
        *,
        controls: RouteControls | None = None,
        token: str | None = None,
        kafka: KafkaFacts | None = None,
        registry: RegistryService | None = None,
        drain: Callable[[], None] | None = None,
        draining: Callable[[], bool] | None = None,
        fences: Callable[[], Mapping[str, Mapping[str, object]]] | None = None,
    ) -> None:
        self._address = address
        self._fences = fences
        self._metrics = metrics
        self._queries = queries
        self._controls = controls
        self._token = token
        self._kafka = kafka
        self._registry = registry
        self._drain = drain
        self._draining = draining
        self._prometheus = metrics_registry(metrics.snapshot, queries, kafka)
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
            code, body = health_document(self._queries(), idle_ok=self._idle_ok())
            return code, "application/json", _json(body)
        if route == "/ready":
            draining = self._draining is not None and self._draining()
            code, body = ready_document(self._queries(), idle_ok=self._idle_ok(), draining=draining)
            return code, "application/json", _json(body)
        if self._registry is not None and route.startswith("/routes"):
            try:
                answer = registry_api.read_call(self._registry, route)
            except ControlError as exc:
                return exc.status, "application/json", _json({"error": str(exc)})
            if answer is not None:
                return answer[0], "application/json", _json(answer[1])
        if route == "/status":
            snapshot, queries = self._metrics.snapshot(), self._queries()
            document = status_document(snapshot, queries, self._kafka, idle_ok=self._idle_ok())
            if self._controls is not None:
                for route in document["routes"]:
                    route["control"] = self._controls.values(route["name"])
            if self._fences is not None:  # holder, epoch, whether this driver waits for it
                document["fences"] = self._fences()
            return 200, "application/json", _json(document)
        if route == "/metrics":
            return 200, CONTENT_TYPE_LATEST, render(self._prometheus)
        return 404, "application/json", _json({"error": f"no such endpoint: {route}"})

    def _idle_ok(self) -> bool:
        """With routes made at runtime, none at all is healthy once the application runs."""
        registry = self._registry
        return registry is not None and registry.running and not registry.routes_now()

    def change(
        self, method: str, path: str, authorization: str | None, body: bytes, peer: str = ""
    ) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` for a mutating call (POST, PATCH, PUT, DELETE);
        ``peer`` is the caller's address (for the audit trail of registry changes)."""
        try:
            if self._registry is not None:
                answer = registry_api.change_call(
                    self._registry,
                    self._token,
                    method=method,
                    path=path,
                    authorization=authorization,
                    body=body,
                    peer=peer,
                )
                if answer is not None:
                    return answer[0], "application/json", _json(answer[1])
            refusal = check_token(self._token, authorization)
            if refusal is not None:
                return refusal[0], "application/json", _json({"error": refusal[1]})
            if path.split("?", 1)[0].rstrip("/") == "/drain":
                return 200, "application/json", _json(self.drain(method))
            if self._controls is None:
                raise ControlError(404, "this server controls no routes")
            values = control_call(self._controls, method, path, body)
        except ControlError as exc:
            return exc.status, "application/json", _json({"error": str(exc)})
        return 200, "application/json", _json(values)

    def drain(self, method: str) -> dict[str, object]:
        """``POST /drain``: the draining stop a signal starts (docs/operations.md)."""
        if method != "POST":
            raise ControlError(405, f"{method} /drain: use POST")
        if self._drain is None:
            raise ControlError(404, "this server cannot drain")
        self._drain()
        return {"draining": True}


def control_call(controls: RouteControls, method: str, path: str, body: bytes) -> dict[str, object]:
    """Route a mutating call to ``controls``; raises ``ControlError`` for a bad one."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) < 2 or parts[0] != "routes":
        raise ControlError(404, f"no such endpoint: {path}")
    name, action = parts[1], "/".join(parts[2:])
    if method == "PATCH" and not action:
        try:
            changes = json.loads(body or b"{}")
        except ValueError as exc:
            raise ControlError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(changes, dict):
            raise ControlError(400, "the body must be a JSON object")
        return controls.change(name, changes)
    if method == "POST" and action == "pause":
        controls.pause(name)
    elif method == "POST" and action == "resume":
        controls.resume(name)
    elif method == "POST" and action == "breaker/close":
        controls.close_breaker(name)
    else:
        raise ControlError(404, f"no such call: {method} {path}")
    return controls.values(name)


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

        def do_POST(self) -> None:
            self._change("POST")

        def do_PATCH(self) -> None:
            self._change("PATCH")

        def do_PUT(self) -> None:
            self._change("PUT")

        def do_DELETE(self) -> None:
            self._change("DELETE")

        def _change(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY_BYTES)) if length else b""
            try:
                code, content_type, answer = control.change(
                    method, self.path, self.headers.get("Authorization"), body,
                    peer=str(self.client_address[0]),
                )  # fmt: skip
            except Exception as exc:  # a failed call must not kill the server thread
                log.exception("control: %s %s failed", method, self.path)
                code, content_type = HTTPStatus.INTERNAL_SERVER_ERROR, "application/json"
                answer = _json({"error": str(exc)})
            # Registry changes log themselves; renewals, every few seconds, do not.
            if code == HTTPStatus.OK and "/consumers" not in self.path:
                log.warning("control: %s %s done", method, self.path)
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("control: " + format, *args)

    return Handler
