"""The embedded Apache Kafka broker: one KRaft node (broker + controller) on loopback.

Used by ``siding dev kafka``, the tests, the demo and the benchmarks. The jars come from Maven
Central through ``make setup`` (see ``siding.jvm``); nothing here is a look-alike.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from siding.errors import BrokerError
from siding.jvm import kafka_classpath, require_java

_LOG4J2 = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
  </Loggers>
</Configuration>
"""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Never one that starts with ``-`` (one in 64 would): the storage tool would read it as an
    option. Kafka's own id generator draws again in that case too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(
    node_id: int, port: int, controller_port: int, log_dir: Path, overrides: Mapping[str, str]
) -> dict[str, str]:
    """The broker's settings: single node, replication 1, share groups on, loopback only."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.flush.interval.messages": "1000000",
    }
    props.update(overrides)
    return props


def _render(props: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())


@dataclass
class EmbeddedKafka:
    """A single-node KRaft broker; use as a context manager (``with EmbeddedKafka() as kafka``).

    ``data_dir`` keeps the log between runs when given; otherwise a temporary folder is used and
    removed on stop. ``overrides`` are extra broker settings.
    """

    data_dir: Path | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)
    heap: str = "768m"
    start_timeout_s: float = 90.0
    port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: str | None = field(default=None, init=False, repr=False)
    _dir: Path | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        if self._dir is None:
            raise BrokerError("broker not started")
        return self._dir / "broker.log"

    def start(self) -> EmbeddedKafka:
        java = require_java()
        classpath = kafka_classpath()
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="siding-kafka-")
            self._dir = Path(self._tmp)
        else:
            self._dir = Path(self.data_dir).resolve()
            self._dir.mkdir(parents=True, exist_ok=True)
        log_dir = self._dir / "log"
        self.port = free_port()
        props = server_properties(1, self.port, free_port(), log_dir, self.overrides)
        config = self._dir / "server.properties"
        config.write_text(_render(props))
        log4j = self._dir / "log4j2.xml"
        log4j.write_text(_LOG4J2.format(log=self._dir / "broker.log"))
        jvm = [java, f"-Xmx{self.heap}", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        if not (log_dir / "meta.properties").exists():
            self._format(jvm, config)
        with open(self._dir / "broker.out", "ab") as out:
            self._process = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        self._wait_until_ready()
        return self

    def _format(self, jvm: list[str], config: Path) -> None:
        command = [
            *jvm,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            new_cluster_id(),
            "-c",
            str(config),
            "--feature",
            "share.version=1",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if self._dir is not None:
            (self._dir / "format.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed: {done.stdout}{done.stderr}")

    def _wait_until_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrokerError(
                    f"Kafka broker exited with {self._process.returncode}:\n{self._log_tail()}"
                )
            with contextlib.suppress(Exception):
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            time.sleep(0.2)
        self.stop()
        raise BrokerError(
            f"Kafka broker did not accept clients within {self.start_timeout_s:g}s"
            f":\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        if self._dir is None:
            return ""
        text = ""
        for name in ("broker.out", "broker.log"):
            path = self._dir / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return text

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL the whole process group if it lingers."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        atexit.unregister(self.stop)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
