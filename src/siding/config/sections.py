"""The ``[kafka]``, ``[spark]`` and ``[control]`` tables: where siding runs and what it talks to.

``[kafka]`` and ``spark.conf`` pass settings through; names that look secret become ``SecretStr``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from siding.config.fields import Duration, PositiveDuration, Problem, Setting
from siding.config.kafka_clients import (
    CLIENTS,
    ClientSettings,
    Note,
    as_text,
    reveal,
    split_settings,
)
from siding.config.values import looks_secret, parse_host_port
from siding.errors import ConfigError
from siding.naming import is_legal_topic_name

DEFAULT_CHECKPOINT_DIR = "./.siding/checkpoints"
DEFAULT_REGISTRY_TOPIC = "siding.registry"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Unquoted dotted TOML keys: ``{"a": {"b": x}}`` -> ``{"a.b": x}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _settings(
    table: Mapping[str, Any], reserved: Mapping[str, str], name_rule: re.Pattern[str]
) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for name, value in _flatten(table).items():
        if name in reserved:
            raise Problem((name,), reserved[name])
        if not name_rule.fullmatch(name):
            raise Problem((name,), "not a property name")
        if not isinstance(value, str | int | float):  # bool is an int
            raise Problem((name,), "expected a string, number or boolean")
        out[name] = SecretStr(str(value)) if looks_secret(name) else value
    return out


def _masked(value: Setting) -> str | int | float | bool:
    return "**********" if isinstance(value, SecretStr) else value


_KAFKA_PROPERTY = re.compile(r"[a-z][a-z0-9._-]*")
_RAW_BYTES = "siding reads and writes keys and values as raw bytes"
_KAFKA_RESERVED = {
    "bootstrap.servers": "use kafka.bootstrap",
    "metadata.broker.list": "use kafka.bootstrap",
    "group.id": "consumer groups are set per route (route.group)",
    "enable.auto.commit": "siding commits offsets itself, after durable outcomes",
    "auto.offset.reset": "Spark refuses it: a new route starts from route.starting_offsets",
    "key.deserializer": _RAW_BYTES,
    "value.deserializer": _RAW_BYTES,
    "key.serializer": _RAW_BYTES,
    "value.serializer": _RAW_BYTES,
    "interceptor.classes": "Spark's Kafka source refuses it",
}


DEFAULT_CLUSTER = "default"
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class ClusterConfig(BaseModel):
    """One Kafka cluster: ``bootstrap``; ``client``: settings for both Kafka clients (translated
    where their names differ, ``siding.config.kafka_clients``); ``librdkafka`` and ``java``:
    settings for one client only (``[kafka.librdkafka]``, ``[kafka.java]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    bootstrap: str
    client: dict[str, Setting] = Field(default_factory=dict)
    librdkafka: dict[str, Setting] = Field(default_factory=dict)
    java: dict[str, Setting] = Field(default_factory=dict)
    _clients: ClientSettings = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        tables: dict[str, dict[str, Any]] = {"client": {}, **{c: {} for c in CLIENTS}}
        kept = ("bootstrap", *(("clusters",) if "clusters" in cls.model_fields else ()))
        for name, value in _flatten({k: v for k, v in data.items() if k not in kept}).items():
            if name.startswith("kafka."):
                raise Problem((name,), "drop the 'kafka.' prefix; siding adds it for Spark")
            table, _, rest = name.partition(".")
            if table in CLIENTS and rest:
                tables[table][rest] = value
            elif table in CLIENTS:
                raise Problem((name,), f"write [kafka.{table}] as a table of settings")
            else:
                tables["client"][name] = value
        split: dict[str, Any] = {}
        for table, settings in tables.items():
            try:
                split[table] = _settings(settings, _KAFKA_RESERVED, _KAFKA_PROPERTY)
            except Problem as problem:
                loc = problem.loc if table == "client" else (table, *problem.loc)
                raise Problem(loc, problem.message) from None
        split.update({k: data[k] for k in kept if k in data})
        return split

    @model_validator(mode="after")
    def _derive(self) -> ClusterConfig:
        self._clients = split_settings(self.client, self.librdkafka, self.java)
        return self

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        servers = [s.strip() for s in value.split(",") if s.strip()]
        if not servers:
            raise ValueError("empty: give host:port[,host:port...]")
        for server in servers:
            parse_host_port(server, "each bootstrap server")
        return ",".join(servers)

    @property
    def notes(self) -> tuple[Note, ...]:
        """Settings one of the clients will not get, or reads otherwise (check-config says them)."""
        return self._clients.notes

    def client_config(self) -> dict[str, str | int | float | bool]:
        """Settings for confluent-kafka (librdkafka) clients, secrets revealed."""
        settings = {k: reveal(v) for k, v in self._clients.librdkafka.items()}
        return {"bootstrap.servers": self.bootstrap, **settings}

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (Java names, ``kafka.`` prefixed)."""
        settings = {"bootstrap.servers": self.bootstrap, **self._clients.java}
        return {f"kafka.{k}": as_text(v) for k, v in settings.items()}

    def shown(self) -> dict[str, dict[str, str | int | float | bool]]:
        """What each client gets, secrets masked: for ``check-config``."""
        clients = {"librdkafka": self._clients.librdkafka, "java": self._clients.java}
        return {
            client: {"bootstrap.servers": self.bootstrap, **{k: _masked(v) for k, v in s.items()}}
            for client, s in clients.items()
        }


class KafkaConfig(ClusterConfig):
    """``[kafka]``: the default cluster (called ``default``), and ``[kafka.clusters.<name>]``:
    more clusters, each as complete as ``[kafka]`` (its own bootstrap and client settings). A
    route reads its ``cluster`` and writes its lanes, DLQ, state topics and outputs to its
    ``write_cluster`` (``cluster_for``)."""

    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)

    @field_validator("clusters", mode="before")
    @classmethod
    def _cluster_names(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        for name, table in value.items():
            if name == DEFAULT_CLUSTER:
                raise Problem((name,), "[kafka] itself is the cluster named 'default'")
            if not _CLUSTER_NAME.fullmatch(name):
                raise Problem((name,), "a cluster name is letters, digits, '_' and '-'")
            if not isinstance(table, Mapping):
                raise Problem((name,), "write [kafka.clusters.<name>] as a table with bootstrap")
        return value

    @property
    def names(self) -> tuple[str, ...]:
        """Every cluster's name, the default first."""
        return (DEFAULT_CLUSTER, *sorted(self.clusters))

    def cluster(self, name: str) -> ClusterConfig:
        """The cluster named ``name`` (``default``: ``[kafka]``)."""
        if name == DEFAULT_CLUSTER:
            return self
        try:
            return self.clusters[name]
        except KeyError:
            raise ConfigError(
                "kafka.clusters", f"no cluster named {name!r} (clusters: {', '.join(self.names)})"
            ) from None

    def cluster_for(self, route: Routed, role: Role) -> ClusterConfig:
        """The cluster a route's ``role`` uses (``cluster_name``)."""
        return self.cluster(cluster_name(route, role))

    @property
    def notes(self) -> tuple[Note, ...]:
        notes = list(self._clients.notes)
        for name, cluster in sorted(self.clusters.items()):
            notes += [
                Note(
                    n.key.replace("kafka.", f"kafka.clusters.{name}.", 1),
                    in_cluster(n.message, name),
                )
                for n in cluster.notes
            ]
        return tuple(notes)


Role = Literal["source", "write"]


def in_cluster(message: str, name: str) -> str:
    """Pure: a message about ``[kafka]``'s client tables said of ``[kafka.clusters.<name>]``."""
    for table in ("librdkafka", "java"):
        message = message.replace(f"[kafka.{table}]", f"[kafka.clusters.{name}.{table}]")
    return message


class Routed(Protocol):
    """What ``cluster_name`` reads of a route (``RouteConfig``)."""

    @property
    def cluster(self) -> str | None: ...

    @property
    def write_cluster(self) -> str | None: ...


def cluster_name(route: Routed, role: Role) -> str:
    """Pure: the cluster a route uses for ``role``. ``source``: where it reads its source topics
    and commits its group's offsets of them (``cluster``, default ``[kafka]``). ``write``:
    where its lanes, park, hold, DLQ, state topics and outputs live, and so where its lane
    queries read and commit (``write_cluster``, default the source's cluster)."""
    source = route.cluster or DEFAULT_CLUSTER
    if role == "source":
        return source
    return route.write_cluster or source


_MASTER = re.compile(
    r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://[^\s,/:]+:\d+(,[^\s,/:]+:\d+)*|yarn|k8s://\S+"
)
_SPARK_PROPERTY = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


class SparkConfig(BaseModel):
    """``[spark]``: where the pipeline runs and where it keeps its checkpoints."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    master: str = "local[*]"
    app_name: str = Field(default="siding", min_length=1)
    checkpoint_dir: str = DEFAULT_CHECKPOINT_DIR
    trigger: Duration = 0.0
    conf: dict[str, Setting] = Field(default_factory=dict)
    # The JVM jars' folder (siding.jvm.jars_dir); $SIDING_JARS_DIR wins over it.
    jars_dir: str | None = None

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        if not _MASTER.fullmatch(value.strip()):
            raise ValueError(
                f"{value!r}: use local[*], local[N], spark://host:port, yarn or k8s://https://host"
            )
        return value.strip()

    @field_validator("conf", mode="before")
    @classmethod
    def _conf(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        reserved = {"spark.master": "use spark.master", "spark.app.name": "use spark.app_name"}
        return _settings(value, reserved, _SPARK_PROPERTY)

    def conf_values(self) -> dict[str, str]:
        """``conf`` as strings for ``SparkSession.builder.config``, secrets revealed."""
        return {k: as_text(v) for k, v in self.conf.items()}


class ControlConfig(BaseModel):
    """``[control]``: the driver's HTTP API (page, health, status, metrics, runtime control).
    ``token``: the bearer token that mutating calls (pause, resume, breaker close, changes)
    must carry; without one they are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    listen: str = "127.0.0.1:9464"
    token: SecretStr | None = None
    # API routes and consumer registrations (docs/registration.md): one compacted topic.
    registry_topic: str = DEFAULT_REGISTRY_TOPIC

    @field_validator("registry_topic")
    @classmethod
    def _registry_topic(cls, value: str) -> str:
        if not is_legal_topic_name(value):
            raise ValueError(f"{value!r} is not a legal Kafka topic name")
        return value

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value.strip():
            parse_host_port(value, "listen", allow_zero=True)
        return value.strip()

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` to bind (port 0: any free port), or ``None`` when disabled."""
        return parse_host_port(self.listen, "listen", allow_zero=True) if self.listen else None

    @property
    def takes_routes(self) -> bool:
        """Whether routes can be created at runtime: the API is on and has an admin token."""
        return bool(self.listen) and bool(self.token and self.token.get_secret_value())


class FenceConfig(BaseModel):
    """``[fence]``: at most one driver runs a route, whatever machines they are on: a lease in
    the route's ``state-fence`` topic (docs/operations.md, "Two drivers for one route: the
    fence"). ``lease``: how long a holder that stopped renewing keeps the route; ``renew``:
    how often the holder renews it (at most a third of ``lease``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    # None: on for a remote checkpoint, off for a local folder (``fence_on``).
    enabled: bool | None = None
    lease: PositiveDuration = 10.0
    renew: PositiveDuration = 2.0

    @model_validator(mode="after")
    def _renew_within_lease(self) -> FenceConfig:
        if self.renew * 3 > self.lease:
            raise Problem(
                ("renew",),
                f"{self.renew:g}s is more than a third of lease ({self.lease:g}s): a holder"
                " must renew several times per lease",
            )
        return self


def remote_checkpoint(checkpoint_dir: str) -> bool:
    """Whether ``checkpoint_dir`` is a URI other than ``file:`` (``s3a://``, ``hdfs://``...):
    storage other machines reach, where a file lock guards nothing."""
    scheme = urlsplit(checkpoint_dir.strip()).scheme
    # One letter is a Windows drive ("C:\\..."), not a scheme.
    return len(scheme) > 1 and scheme.lower() != "file"


def fence_on(fence: FenceConfig, checkpoint_dir: str) -> bool:
    """``[fence] enabled`` as set, or else on exactly when the checkpoint is remote."""
    return fence.enabled if fence.enabled is not None else remote_checkpoint(checkpoint_dir)
