"""A real OpenTelemetry Collector on loopback for the tracing tests and benchmark.

Built by ``make setup`` from the collector's core Go modules (tests/otelcol: the OTLP receiver
and the OTLP/HTTP exporter) into ``.tools/otelcol`` (``$SIDING_OTELCOL`` is used first). It
receives OTLP/gRPC on a free loopback port and exports every batch of spans it gets as one
OTLP/HTTP request in JSON to a server of this process (``siding.devkit.otlp_sink``), which
``spans`` reads back (docs/operations.md, "Tracing").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from siding.devkit.broker import free_ports
from siding.devkit.otlp_sink import OtlpSink
from siding.devkit.process import stop_group
from siding.errors import SetupError
from siding.jvm import checkout

BINARY_ENV = "SIDING_OTELCOL"
HOST = "127.0.0.1"


def find_binary() -> Path:
    """The collector: ``$SIDING_OTELCOL``, else the checkout's ``.tools/otelcol``."""
    if env := os.environ.get(BINARY_ENV):
        return Path(env)
    root = checkout()
    binary = root / ".tools" / "otelcol" / "siding-otelcol" if root is not None else None
    if binary is None or not binary.is_file():
        raise SetupError("the OpenTelemetry Collector was not built: run `make setup`")
    return binary


def collector_config(grpc_port: int, sink_url: str) -> str:
    """Pure: the collector's configuration (JSON is YAML): OTLP/gRPC in, OTLP/HTTP JSON out to
    ``sink_url``, sent as it comes (no queue, no retry, no compression)."""
    exporter = {
        "traces_endpoint": sink_url,
        "encoding": "json",
        "compression": "none",
        "sending_queue": {"enabled": False},
        "retry_on_failure": {"enabled": False},
    }
    traces = {"receivers": ["otlp"], "exporters": ["otlphttp"]}
    return json.dumps(
        {
            "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"{HOST}:{grpc_port}"}}}},
            "exporters": {"otlphttp": exporter},
            "service": {"pipelines": {"traces": traces}},
        }
    )


def flat_spans(bodies: list[str]) -> list[dict[str, Any]]:
    """Pure: every span of the exporter's request bodies (OTLP JSON), each with its
    ``service.name`` and its attributes as a plain dict (``attrs``)."""
    spans: list[dict[str, Any]] = []
    for body in bodies:
        if not body.strip():
            continue
        for rs in json.loads(body).get("resourceSpans", []):
            resource = _attrs(rs.get("resource", {}).get("attributes", []))
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    spans.append(
                        {
                            **span,
                            "attrs": _attrs(span.get("attributes", [])),
                            "service": resource.get("service.name"),
                        }
                    )
    return spans


def _attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        value = item.get("value", {})
        if "stringValue" in value:
            out[item["key"]] = value["stringValue"]
        elif "intValue" in value:
            out[item["key"]] = int(value["intValue"])
        else:
            out[item["key"]] = next(iter(value.values()), None)
    return out


@dataclass
class OtelCollector:
    """``start``/``stop`` (or a context manager); ``endpoint`` is what ``[tracing]`` needs."""

    folder: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    sink: OtlpSink | None = None
    _own_folder: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        assert self.folder is not None
        return self.folder / "otelcol.log"

    def start(self, timeout_s: float = 60.0) -> OtelCollector:
        binary = find_binary()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="siding-otelcol-"))
            self._own_folder = True
        (self.port,) = free_ports(1)
        try:
            self.sink = OtlpSink().start()
            config = self.folder / "otelcol.json"
            config.write_text(collector_config(self.port, self.sink.url))
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [str(binary), "--config", f"file:{config}"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._wait_ready(time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise SetupError(
                    f"the collector exited ({self.process.returncode}): " + " | ".join(tail)
                )
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.5):
                return
            time.sleep(0.1)
        raise SetupError(f"the collector did not listen on {self.endpoint} in time: see {self.log}")

    def spans(self) -> list[dict[str, Any]]:
        """Every span the collector has exported so far."""
        return flat_spans(self.sink.bodies()) if self.sink is not None else []

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            stop_group(proc, 15)
        if self.sink is not None:  # after the collector: it exports what it has as it stops
            self.sink.stop()
        if self._own_folder and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> OtelCollector:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
