"""The HTTP server on loopback that the test collector's OTLP/HTTP exporter posts to.

The collector (``siding.devkit.otel_collector``) exports every batch of spans it receives as one
OTLP/HTTP request with ``encoding: json``; this server keeps each request's body (decompressed
if the collector gzipped it) and answers 200, so ``bodies`` is what the collector exported, in
order. Anything but ``POST /v1/traces`` is answered 404 and kept out.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"
PATH = "/v1/traces"


@dataclass
class OtlpSink:
    """``start``/``stop``; ``url`` is the exporter's ``traces_endpoint``."""

    _bodies: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the sink is not started"
        return f"http://{HOST}:{self._server.server_address[1]}{PATH}"

    def bodies(self) -> list[str]:
        """Every request body received so far (OTLP JSON, one ExportTraceServiceRequest each)."""
        with self._lock:
            return list(self._bodies)

    def start(self) -> OtlpSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != PATH:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                with sink._lock:
                    sink._bodies.append(body.decode())
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return  # the test's output stays the test's

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-sink", daemon=True
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
