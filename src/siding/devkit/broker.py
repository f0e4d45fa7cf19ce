"""The embedded Apache Kafka broker: one KRaft node (broker + controller) on loopback.

Used by ``siding dev kafka``, the tests, the demo and the benchmarks. The jars come from Maven
Central through ``make setup`` (see ``siding.jvm``); nothing here is a look-alike.

Opt-in: a SASL_SSL listener beside the PLAINTEXT one (``secured=SecuredListener(...)``), with
certificates made for the run, SCRAM-SHA-512 users (created through the admin API, KRaft keeps
them in its metadata log) and PLAIN users (in the listener's JAAS settings).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from siding.devkit.certs import TlsFiles, make_tls_files
from siding.devkit.process import stop_group
from siding.errors import BrokerError
from siding.jvm import java_options, kafka_classpath, require_java

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
    """One free port; for several that must differ, ``free_ports``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports. Every socket stays bound until all are chosen: a port
    freed before the next is asked for may be handed out again (a broker refuses two listeners
    on one port)."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Never one that starts with ``-`` (one in 64 would): the storage tool would read it as an
    option. Kafka's own id generator draws again in that case too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


_USER_TEXT = re.compile(r"[A-Za-z0-9._-]+")
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096


@dataclass(frozen=True)
class SaslUser:
    """A user of the secured listener; names and passwords are ``[A-Za-z0-9._-]+``."""

    name: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        allowed = "use letters, digits, '.', '_', '-'"
        if not _USER_TEXT.fullmatch(self.name):
            raise BrokerError(f"SASL user name {self.name!r}: {allowed}")
        if not _USER_TEXT.fullmatch(self.password):
            raise BrokerError(f"password of SASL user {self.name}: {allowed}")


@dataclass(frozen=True)
class SecuredListener:
    """A SASL_SSL listener: ``scram_users`` log in with SCRAM-SHA-512, ``plain_users`` with
    PLAIN."""

    scram_users: tuple[SaslUser, ...] = ()
    plain_users: tuple[SaslUser, ...] = ()

    def __post_init__(self) -> None:
        if not self.scram_users and not self.plain_users:
            raise BrokerError("a secured listener needs at least one SCRAM or PLAIN user")


def server_properties(
    node_id: int,
    port: int,
    controller_port: int,
    log_dir: Path,
    overrides: Mapping[str, str],
    *,
    secure_port: int | None = None,
) -> dict[str, str]:
    """The broker's settings: single node, replication 1, share groups on, loopback only.
    ``secure_port``: a SASL_SSL listener there too (its settings: ``sasl_ssl_properties``)."""
    listeners = [f"PLAINTEXT://127.0.0.1:{port}"]
    protocols = ["PLAINTEXT:PLAINTEXT"]
    if secure_port is not None:
        listeners.append(f"SASL_SSL://127.0.0.1:{secure_port}")
        protocols.append("SASL_SSL:SASL_SSL")
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": ",".join([*protocols, "CONTROLLER:PLAINTEXT"]),
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


def sasl_ssl_properties(keystore: Path, plain_users: tuple[SaslUser, ...]) -> dict[str, str]:
    """The SASL_SSL listener's settings: TLS from a PEM keystore, SCRAM-SHA-512 and PLAIN."""
    prefix = "listener.name.sasl_ssl."
    plain = "".join(f' user_{u.name}="{u.password}"' for u in plain_users)
    return {
        f"{prefix}sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},PLAIN",
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(keystore),
        f"{prefix}scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{prefix}plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required{plain};"
        ),
    }


def _render(props: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())


@dataclass
class EmbeddedKafka:
    """A single-node KRaft broker; use as a context manager (``with EmbeddedKafka() as kafka``).

    ``data_dir`` keeps the log between runs when given; otherwise a temporary folder is used and
    removed on stop. ``overrides`` are extra broker settings. ``secured``: a SASL_SSL listener
    too, at ``secure_bootstrap``, whose certificate clients trust through ``ca_file``.
    """

    data_dir: Path | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)
    heap: str = "768m"
    start_timeout_s: float = 90.0
    port: int = 0
    secured: SecuredListener | None = None
    secure_port: int = 0
    _tls: TlsFiles | None = field(default=None, init=False, repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: str | None = field(default=None, init=False, repr=False)
    _dir: Path | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_bootstrap(self) -> str:
        if self.secured is None:
            raise BrokerError("this broker has no secured listener")
        return f"127.0.0.1:{self.secure_port}"

    @property
    def ca_file(self) -> Path:
        """The PEM file of the CA that signed the secured listener's certificate."""
        if self._tls is None:
            raise BrokerError("this broker has no secured listener (or it is not started)")
        return self._tls.ca

    def client_settings(self, user: SaslUser, mechanism: str = SCRAM_MECHANISM) -> dict[str, str]:
        """librdkafka settings for ``user`` on the secured listener."""
        return {
            "bootstrap.servers": self.secure_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user.name,
            "sasl.password": user.password,
            "ssl.ca.location": str(self.ca_file),
        }

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
        self.port, controller_port, spare_port = free_ports(3)
        secure_port, secured_props = None, {}
        if self.secured is not None:
            self._tls = make_tls_files(self._dir / "tls")
            self.secure_port = secure_port = spare_port
            secured_props = sasl_ssl_properties(self._tls.keystore, self.secured.plain_users)
        props = server_properties(
            1,
            self.port,
            controller_port,
            log_dir,
            {**secured_props, **self.overrides},
            secure_port=secure_port,
        )
        config = self._dir / "server.properties"
        config.write_text(_render(props))
        log4j = self._dir / "log4j2.xml"
        log4j.write_text(_LOG4J2.format(log=self._dir / "broker.log"))
        jvm = [
            java,
            *java_options(),
            f"-Xmx{self.heap}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]
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
        if self.secured is not None:
            self._add_scram_users(self.secured.scram_users)
            self._wait_secured_ready(self.secured)
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

    def _add_scram_users(self, users: tuple[SaslUser, ...]) -> None:
        """Create (or update) SCRAM-SHA-512 credentials through the admin API."""
        if not users:
            return
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin._scram import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(u.name, info, u.password.encode()) for u in users
        ]
        for user, future in admin.alter_user_scram_credentials(upserts).items():
            try:
                future.result(timeout=30)
            except Exception as exc:
                raise BrokerError(f"creating SCRAM user {user} failed: {exc}") from None

    def _wait_secured_ready(self, secured: SecuredListener) -> None:
        """Until one user of each mechanism can log in on the secured listener."""
        from confluent_kafka.admin import AdminClient

        probes = [(u, SCRAM_MECHANISM) for u in secured.scram_users[:1]]
        probes += [(u, "PLAIN") for u in secured.plain_users[:1]]
        deadline = time.monotonic() + self.start_timeout_s
        for user, mechanism in probes:
            while True:
                admin = AdminClient({**self.client_settings(user, mechanism), "log_level": 0})
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        break
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(
                        f"the SASL_SSL listener did not accept {mechanism} user {user.name} within"
                        f" {self.start_timeout_s:g}s:\n{self._log_tail()}"
                    )
                time.sleep(0.2)

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
        if process is not None:
            stop_group(process, timeout_s)
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
