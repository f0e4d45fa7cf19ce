"""The ``[kafka]``, ``[spark]`` and ``[control]`` tables: where siding runs and what it talks to.

``[kafka]`` and ``spark.conf`` pass settings through; names that look secret become ``SecretStr``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from siding.config.fields import Duration, Problem, Setting
from siding.config.values import is_legal_topic_name, looks_secret, parse_host_port

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


def _reveal(value: Setting) -> str | int | float | bool:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _as_text(value: Setting) -> str:
    plain = _reveal(value)
    return ("true" if plain else "false") if isinstance(plain, bool) else str(plain)


_KAFKA_PROPERTY = re.compile(r"[a-z][a-z0-9._-]*")
_KAFKA_RESERVED = {
    "bootstrap.servers": "use kafka.bootstrap",
    "group.id": "consumer groups are set per route (route.group)",
    "enable.auto.commit": "siding commits offsets itself, after durable outcomes",
}


class KafkaConfig(BaseModel):
    """``[kafka]``: ``bootstrap``, plus client settings passed through to every Kafka client."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    bootstrap: str
    client: dict[str, Setting] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        rest = {k: v for k, v in data.items() if k != "bootstrap"}
        for name in rest:
            if name.startswith("kafka."):
                raise Problem((name,), "drop the 'kafka.' prefix; siding adds it for Spark")
        split: dict[str, Any] = {"client": _settings(rest, _KAFKA_RESERVED, _KAFKA_PROPERTY)}
        if "bootstrap" in data:
            split["bootstrap"] = data["bootstrap"]
        return split

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        servers = [s.strip() for s in value.split(",") if s.strip()]
        if not servers:
            raise ValueError("empty: give host:port[,host:port...]")
        for server in servers:
            parse_host_port(server, "each bootstrap server")
        return ",".join(servers)

    def client_config(self) -> dict[str, str | int | float | bool]:
        """Settings for confluent-kafka clients, secrets revealed."""
        settings = {k: _reveal(v) for k, v in self.client.items()}
        return {"bootstrap.servers": self.bootstrap, **settings}

    def spark_options(self) -> dict[str, str]:
        """The same settings as options of Spark's Kafka source and sink (``kafka.`` prefixed)."""
        return {f"kafka.{k}": _as_text(v) for k, v in self.client_config().items()}


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
        return {k: _as_text(v) for k, v in self.conf.items()}


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
