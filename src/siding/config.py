"""Load and validate ``siding.toml`` into frozen settings; every error names its key.

Loading runs in four steps: parse TOML, interpolate ``${VAR}`` in string values, resolve relative
paths and read secret files, then validate. docs/configuration.md documents every key.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from siding.errors import ConfigError
from siding.model import Lane, Ordering

TOPIC_NAME_MAX = 249
# siding.naming adds at most 46 characters around a route name; 200 keeps every derived topic legal.
ROUTE_NAME_MAX = 200
MAX_LANES = 10
MAX_LANE_ATTEMPTS = 100

_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")
_SECRET_NAME = re.compile(
    r"password|passwd|secret|token|credential|jaas|oauthbearer\.config|key\.pem|access\.key", re.I
)
_PROPERTY_NAME = re.compile(r"[a-z][a-z0-9._-]*")
_SECRET_FILE_PAIRS = (
    ("token", "token_file"),
    ("webhook_secret", "webhook_secret_file"),
    ("ca_pem", "ca_file"),
    ("cert_pem", "cert_file"),
    ("key_pem", "key_file"),
)
_STRIPPED_SECRETS = frozenset({"token", "webhook_secret"})


class _Problem(ValueError):
    """A validation problem that knows its key, relative to where it is raised."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def is_legal_topic_name(name: str) -> bool:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    return _is_name(name, TOPIC_NAME_MAX)


def is_safe_route_name(name: str) -> bool:
    """A route name every derived topic name and checkpoint directory can be built from."""
    return _is_name(name, ROUTE_NAME_MAX)


def _is_name(name: str, limit: int) -> bool:
    return (
        0 < len(name) <= limit
        and name not in (".", "..")
        and _LEGAL_NAME.fullmatch(name) is not None
    )


def looks_secret(name: str) -> bool:
    """Whether a pass-through setting's name says its value is a credential."""
    return _SECRET_NAME.search(name) is not None


# -- durations -----------------------------------------------------------------------------------

_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001))
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_BARE_NUMBER = re.compile(r"[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")


def parse_duration(text: str) -> float:
    """Seconds in ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"`` or e.g. ``"1m30s"``."""
    s = text.strip()
    if s.startswith("-"):
        raise ValueError(f"{text!r}: negative durations are not allowed")
    if _BARE_NUMBER.fullmatch(s):
        raise ValueError(f"{text!r} has no unit (ambiguous): write e.g. '{s}s' or '{s}ms'")
    order = [unit for unit, _ in _UNITS]
    total, pos, last = 0.0, 0, -1
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        rank = order.index(match.group(2)) if match else -1
        if match is None or rank <= last:
            raise ValueError(
                f"{text!r} is not a duration: use e.g. '250ms', '10s', '5m', '1h' or '1m30s'"
            )
        total += float(match.group(1)) * _UNITS[rank][1]
        pos, last = match.end(), rank
    if pos == 0:
        raise ValueError("empty duration: use e.g. '10s'")
    return total


def format_duration(seconds: float) -> str:
    """The shortest duration string that parses back to ``seconds`` (to the millisecond)."""
    left = round(seconds * 1000)
    parts: list[str] = []
    for unit, size in _UNITS:
        count, left = divmod(left, round(size * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _duration_input(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("expected a duration string such as '10s'")
    if not isinstance(value, str):
        raise ValueError(f"bare number {value!r} (ambiguous unit): write e.g. '{value}s'")
    return parse_duration(value)


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be longer than 0s")
    return value


def _not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


_AS_TEXT = PlainSerializer(format_duration, return_type=str, when_used="json")
Duration = Annotated[float, BeforeValidator(_duration_input), _AS_TEXT]
"""Seconds, written with a unit in TOML; never negative."""
PositiveDuration = Annotated[
    float, BeforeValidator(_duration_input), AfterValidator(_positive), _AS_TEXT
]
Count = Annotated[int, BeforeValidator(_not_bool)]
Number = Annotated[float, BeforeValidator(_not_bool)]
Setting = str | int | float | bool | SecretStr
"""A pass-through client setting; secret-looking names hold a ``SecretStr``."""

_FROZEN = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


# -- endpoints -----------------------------------------------------------------------------------

_SCHEMES = ("grpc", "grpcs", "grpc+dns", "grpcs+dns", "http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Endpoint(BaseModel):
    """One consumer endpoint, parsed from its URL."""

    model_config = _FROZEN

    url: str
    scheme: Literal["grpc", "grpcs", "grpc+dns", "grpcs+dns", "http", "https"]
    host: str
    port: int

    @property
    def is_grpc(self) -> bool:
        return self.scheme.startswith("grpc")

    @property
    def tls(self) -> bool:
        return self.scheme in ("grpcs", "grpcs+dns", "https")

    @property
    def grpc_target(self) -> str:
        """The target string for ``grpc.aio.*_channel``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        prefix = "dns:///" if self.scheme.endswith("+dns") else ""
        return f"{prefix}{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


def parse_endpoint(url: str) -> Endpoint:
    """Validate one endpoint URL: scheme, host, port; no credentials in it."""
    text = url.strip()
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme not in _SCHEMES:
        raise ValueError(
            f"{text!r}: unsupported scheme; use grpc://, grpcs://, grpc+dns:///, http:// or https://"
        )
    parts = urlsplit(text)
    if scheme.endswith("+dns"):
        if parts.netloc:
            raise ValueError(f"{text!r}: write {scheme}:///host:port (three slashes)")
        parts = urlsplit("//" + parts.path.lstrip("/"))
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{scheme}://...: credentials in the URL are not allowed; use [route.auth]"
        )
    if not parts.hostname:
        raise ValueError(f"{text!r}: the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r}: the port is not a number in 1-65535") from None
    if port is None:
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"{text!r}: gRPC endpoints need a port, e.g. {scheme}://host:50051")
        port = _DEFAULT_PORTS[scheme]
    if port == 0:
        raise ValueError(f"{text!r}: port 0 is not an endpoint")
    if scheme.startswith("grpc") and (parts.path not in ("", "/") or parts.query):
        raise ValueError(f"{text!r}: gRPC endpoints take no path or query")
    if parts.fragment:
        raise ValueError(f"{text!r}: the URL has a #fragment")
    return Endpoint.model_validate(
        {"url": text, "scheme": scheme, "host": parts.hostname, "port": port}
    )


def _host_port(text: str, what: str, *, allow_zero: bool = False) -> tuple[str, int]:
    parts = urlsplit("//" + text.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or (port == 0 and not allow_zero) or parts.path:
        raise ValueError(f"{text!r}: {what} must be host:port")
    return parts.hostname, port


# -- sections ------------------------------------------------------------------------------------


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


def _settings(table: Mapping[str, Any], reserved: Mapping[str, str]) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for name, value in _flatten(table).items():
        if name in reserved:
            raise _Problem((name,), reserved[name])
        if not _PROPERTY_NAME.fullmatch(name):
            raise _Problem((name,), "not a client property name (lower case, dots)")
        if not isinstance(value, str | int | float):  # bool is an int
            raise _Problem((name,), "expected a string, number or boolean")
        out[name] = SecretStr(str(value)) if looks_secret(name) else value
    return out


def _reveal(value: Setting) -> str | int | float | bool:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _as_text(value: Setting) -> str:
    plain = _reveal(value)
    return ("true" if plain else "false") if isinstance(plain, bool) else str(plain)


_KAFKA_RESERVED = {
    "bootstrap.servers": "use kafka.bootstrap",
    "group.id": "consumer groups are set per route (route.group)",
    "enable.auto.commit": "siding commits offsets itself, after durable outcomes",
}


class KafkaConfig(BaseModel):
    """``[kafka]``: ``bootstrap`` plus client settings passed through to every Kafka client."""

    model_config = _FROZEN

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
                raise _Problem((name,), "drop the 'kafka.' prefix; siding adds it for Spark")
        split: dict[str, Any] = {"client": _settings(rest, _KAFKA_RESERVED)}
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
            _host_port(server, "each bootstrap server")
        return ",".join(servers)

    def client_config(self) -> dict[str, str | int | float | bool]:
        """Settings for confluent-kafka clients, secrets revealed."""
        return {"bootstrap.servers": self.bootstrap} | {
            k: _reveal(v) for k, v in self.client.items()
        }

    def spark_options(self) -> dict[str, str]:
        """The same settings as options of Spark's Kafka source and sink (``kafka.`` prefixed)."""
        return {f"kafka.{k}": _as_text(v) for k, v in self.client_config().items()}


_MASTER = re.compile(
    r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://[^\s,/:]+:\d+(,[^\s,/:]+:\d+)*|yarn|k8s://\S+"
)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class SparkConfig(BaseModel):
    """``[spark]``: where the pipeline runs and where it keeps its checkpoints."""

    model_config = _FROZEN

    master: str = "local[*]"
    app_name: str = Field(default="siding", min_length=1)
    checkpoint_dir: str = "./.siding/checkpoints"
    trigger: Duration = 1.0
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
        return _settings(
            value, {"spark.master": "use spark.master", "spark.app.name": "use app_name"}
        )

    def conf_values(self) -> dict[str, str]:
        """``conf`` as strings for ``SparkSession.builder.config``, secrets revealed."""
        return {k: _as_text(v) for k, v in self.conf.items()}


class ControlConfig(BaseModel):
    """``[control]``: the driver's HTTP API (health, status, metrics)."""

    model_config = _FROZEN

    listen: str = "127.0.0.1:9464"

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value.strip():
            _host_port(value, "listen", allow_zero=True)
        return value.strip()

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` to bind, or ``None`` when the API is disabled."""
        return _host_port(self.listen, "listen", allow_zero=True) if self.listen else None


class LaneConfig(BaseModel):
    """One retry lane; ``deadline`` defaults to the route's ``deadline``."""

    model_config = _FROZEN

    delay: Duration
    deadline: PositiveDuration | None = None
    attempts: Count = Field(default=1, ge=1, le=MAX_LANE_ATTEMPTS)


class AuthConfig(BaseModel):
    """``[route.auth]``: each secret inline (usually ``${VAR}``) or as ``*_file``, read at load."""

    model_config = _FROZEN

    token: SecretStr | None = None
    token_file: str | None = None
    webhook_secret: SecretStr | None = None
    webhook_secret_file: str | None = None
    ca_pem: SecretStr | None = None
    ca_file: str | None = None
    cert_pem: SecretStr | None = None
    cert_file: str | None = None
    key_pem: SecretStr | None = None
    key_file: str | None = None

    @field_validator("webhook_secret")
    @classmethod
    def _whsec(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            raw = value.get_secret_value().removeprefix("whsec_")
            try:
                decoded = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            if not decoded:
                raise ValueError("not a Standard Webhooks secret ('whsec_' + base64)")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> AuthConfig:
        if (self.cert_pem is None) != (self.key_pem is None):
            missing = "key_file" if self.key_pem is None else "cert_file"
            raise _Problem((missing,), "a client certificate needs both cert_file and key_file")
        return self

    def given(self, field: str) -> str:
        """The key the user wrote for a secret (``X`` or its ``*_file``), for error messages."""
        file_key = dict(_SECRET_FILE_PAIRS)[field]
        return file_key if getattr(self, file_key) is not None else field


class BreakerConfig(BaseModel):
    """``[route.breaker]``: stop pushing to an endpoint that keeps failing."""

    model_config = _FROZEN

    failure_threshold: Count = Field(default=5, ge=1)
    open_for: PositiveDuration = 5.0
    max_open_for: PositiveDuration = 60.0

    @model_validator(mode="after")
    def _order(self) -> BreakerConfig:
        if self.max_open_for < self.open_for:
            raise _Problem(("max_open_for",), "must be at least open_for")
        return self


class AdaptiveConfig(BaseModel):
    """``[route.adaptive]``: concurrency adapts between ``min_in_flight`` and ``max_in_flight``."""

    model_config = _FROZEN

    enabled: bool = True
    min_in_flight: Count = Field(default=1, ge=1)


class RouteConfig(BaseModel):
    """``[[route]]``: one source topic and consumer group pushed to one endpoint (set)."""

    model_config = _FROZEN

    name: str
    topic: str
    group: str = Field(min_length=1, max_length=255)
    ordering: Ordering = Ordering.UNORDERED
    endpoint: tuple[Endpoint, ...] = Field(min_length=1)
    transport: Literal["stream", "unary"] = "stream"
    max_in_flight: Count = Field(default=1000, ge=1)
    deadline: PositiveDuration = 30.0
    rate_limit: Number = Field(default=0.0, ge=0)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    min_partitions: Count = Field(default=0, ge=0)
    max_offsets_per_trigger: Count = Field(default=10000, ge=1)
    lanes: tuple[LaneConfig, ...] = Field(default=(), max_length=MAX_LANES)
    dlq: str | None = None
    max_retry_after: Duration = 600.0
    dlq_flood_ratio: Number = Field(default=0.5, ge=0, le=1)
    dlq_flood_min_batch: Count = Field(default=20, ge=1)
    auth: AuthConfig = AuthConfig()
    breaker: BreakerConfig = BreakerConfig()
    adaptive: AdaptiveConfig = AdaptiveConfig()

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "name" not in data:
            topic, group = data.get("topic"), data.get("group")
            if isinstance(topic, str) and isinstance(group, str):
                return {"name": f"{topic}.{group}", **data}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_safe_route_name(value):
            raise ValueError(
                f"{value!r} is not a safe route name: use 1-{ROUTE_NAME_MAX} characters of"
                " [a-zA-Z0-9._-] (the default is '<topic>.<group>'; set name explicitly)"
            )
        return value

    @field_validator("topic", "dlq")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is not None and not is_legal_topic_name(value):
            raise ValueError(
                f"{value!r} is not a legal Kafka topic name:"
                f" 1-{TOPIC_NAME_MAX} characters of [a-zA-Z0-9._-]"
            )
        return value

    @field_validator("endpoint", mode="before")
    @classmethod
    def _endpoints(cls, value: Any) -> Any:
        urls = [value] if isinstance(value, str) else value
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise ValueError("expected a URL or a list of URLs")
        return [parse_endpoint(u) for u in urls]

    @model_validator(mode="after")
    def _consistent(self) -> RouteConfig:
        schemes = {e.scheme for e in self.endpoint}
        if len(schemes) > 1:
            raise _Problem(("endpoint",), "all endpoints of a route must use the same scheme")
        if len({e.url for e in self.endpoint}) < len(self.endpoint):
            raise _Problem(("endpoint",), "an endpoint is listed twice")
        first = self.endpoint[0]
        if "transport" in self.model_fields_set and not first.is_grpc:
            raise _Problem(("transport",), "only applies to gRPC endpoints")
        if self.auth.webhook_secret is not None and first.is_grpc:
            raise _Problem(("auth", self.auth.given("webhook_secret")), "only for HTTP endpoints")
        for pem in ("ca", "cert", "key"):
            if getattr(self.auth, f"{pem}_pem") is not None and not first.tls:
                raise _Problem(
                    ("auth", self.auth.given(f"{pem}_pem")),
                    "needs a TLS endpoint (grpcs://, grpcs+dns:/// or https://)",
                )
        if self.dlq == self.topic:
            raise _Problem(("dlq",), "the DLQ must not be the source topic")
        if self.adaptive.min_in_flight > self.max_in_flight:
            raise _Problem(("adaptive", "min_in_flight"), "must not exceed max_in_flight")
        return self

    def lanes_as_model(self) -> tuple[Lane, ...]:
        """The retry lanes as ``siding.model.Lane`` (for ``siding.policy``)."""
        return tuple(
            Lane(
                delay_s=lane.delay,
                deadline_s=lane.deadline or self.deadline,
                attempts=lane.attempts,
            )
            for lane in self.lanes
        )


class SidingConfig(BaseModel):
    """The whole ``siding.toml``."""

    model_config = _FROZEN

    kafka: KafkaConfig
    spark: SparkConfig = SparkConfig()
    control: ControlConfig = ControlConfig()
    route: tuple[RouteConfig, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> SidingConfig:
        names: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        for i, route in enumerate(self.route):
            if (route.topic, route.group) in pairs:
                raise _Problem(("route", i, "group"), "another route has the same topic and group")
            if route.name in names:
                raise _Problem(("route", i, "name"), f"another route is named {route.name!r}")
            pairs.add((route.topic, route.group))
            names.add(route.name)
        return self

    @property
    def routes(self) -> tuple[RouteConfig, ...]:
        return self.route

    def route_named(self, name: str) -> RouteConfig:
        for route in self.route:
            if route.name == name:
                return route
        known = ", ".join(r.name for r in self.route)
        raise ConfigError("route", f"no route named {name!r} (routes: {known})")

    def redacted_dict(self) -> dict[str, Any]:
        """The effective configuration for display: secrets masked, durations as text."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["kafka"] = {"bootstrap": self.kafka.bootstrap, **data["kafka"]["client"]}
        for route in data["route"]:
            route["endpoint"] = [e["url"] for e in route["endpoint"]]
        return data


# -- loading -------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> SidingConfig:
    """Read and validate a ``siding.toml``; relative paths in it are relative to its folder."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read {file}: {exc}") from None
    return parse_config(text, env=env, source=str(file), base_dir=file.resolve().parent)


def parse_config(
    text: str,
    *,
    env: Mapping[str, str] | None = None,
    source: str = "<string>",
    base_dir: str | os.PathLike[str] | None = None,
) -> SidingConfig:
    """Validate TOML text; relative paths are relative to ``base_dir`` (default: the cwd)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{source}: invalid TOML: {_toml_position(str(exc))}") from None
    environ = os.environ if env is None else env
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        data = _interpolate(raw, (), environ)
        _load_files(data, base)
        return SidingConfig.model_validate(data)
    except _Problem as exc:
        raise ConfigError(_key(exc.loc, raw), exc.message) from None
    except ValidationError as exc:
        raise _translate(exc, raw) from None


def _toml_position(message: str) -> str:
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if match is None:
        return message
    return f"line {match.group(1)}, column {match.group(2)}: {message[: match.start()]}"


_REFERENCE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` (default when unset or empty); ``$$`` is ``$``."""
    out: list[str] = []
    pos = 0
    while (start := text.find("$", pos)) != -1:
        out.append(text[pos:start])
        match = _REFERENCE.match(text, start)
        if match is None:
            if text.startswith("${", start):
                raise ValueError(
                    f"bad reference {text[start : start + 24]!r}:"
                    " use ${NAME} or ${NAME:-default}, and $$ for a literal $"
                )
            out.append("$")
            pos = start + 1
            continue
        name, default = match.group(2), match.group(3)
        if match.group(1):
            out.append("$")
        elif env.get(name):
            out.append(env[name])
        elif default is not None:
            out.append(default)
        elif name in env:
            out.append("")
        else:
            raise ValueError(
                f"environment variable {name} is not set (or write ${{{name}:-default}})"
            )
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def _interpolate(value: Any, loc: tuple[str | int, ...], env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        try:
            return interpolate(value, env)
        except ValueError as exc:
            raise _Problem(loc, str(exc)) from None
    if isinstance(value, Mapping):
        return {k: _interpolate(v, (*loc, k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, (*loc, i), env) for i, v in enumerate(value)]
    return value


def _load_files(data: dict[str, Any], base: Path) -> None:
    """Make relative paths absolute and read secret files into their inline keys (in place)."""
    spark = data.setdefault("spark", {})
    if isinstance(spark, dict):
        path = spark.get("checkpoint_dir", SparkConfig().checkpoint_dir)
        if isinstance(path, str):
            spark["checkpoint_dir"] = _resolve_dir(path, base)
    routes = data.get("route")
    for i, route in enumerate(routes if isinstance(routes, list) else []):
        auth = route.get("auth") if isinstance(route, dict) else None
        if not isinstance(auth, dict):
            continue
        for inline, file_key in _SECRET_FILE_PAIRS:
            path = auth.get(file_key)
            if not isinstance(path, str):
                continue
            loc = ("route", i, "auth", file_key)
            if inline in auth:
                raise _Problem(loc, f"give either {inline} or {file_key}, not both")
            resolved = base / path
            try:
                content = resolved.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise _Problem(loc, f"cannot read {resolved}: {exc}") from None
            auth[file_key] = str(resolved)
            auth[inline] = content.strip() if inline in _STRIPPED_SECRETS else content


def _resolve_dir(path: str, base: Path) -> str:
    if _URI.match(path) and not re.match(r"[A-Za-z]:[\\/]", path):
        return path  # hdfs://, s3a://, file:/ ... are the cluster's business
    return str((base / path).resolve())


# -- error keys ----------------------------------------------------------------------------------


def _translate(exc: ValidationError, raw: Mapping[str, Any]) -> ConfigError:
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, _Problem):
        loc, message = loc + cause.loc, cause.message
    elif first["type"] == "extra_forbidden":
        message = "unknown key" + _suggest(loc)
    elif first["type"] == "missing":
        message = "required key is missing"
    elif isinstance(cause, ValueError):
        message = str(cause)
    else:
        message = first["msg"]
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(_key(loc, raw), message)


def _suggest(loc: tuple[str | int, ...]) -> str:
    model: type[BaseModel] | None = SidingConfig
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
    if model is None or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _key(loc: tuple[str | int, ...], raw: Mapping[str, Any]) -> str:
    """``("route", 0, "lanes", 1, "delay")`` -> ``route[billing].lanes[1].delay``."""
    out = ""
    for n, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{_route_label(raw, part) if n == 1 and loc[0] == 'route' else part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            quoted = json.dumps(part)
            out += f".{quoted}" if out else quoted
    return out


def _route_label(raw: Mapping[str, Any], index: int) -> str:
    routes = raw.get("route")
    if isinstance(routes, list) and index < len(routes) and isinstance(routes[index], dict):
        name = routes[index].get("name")
        if isinstance(name, str) and is_safe_route_name(name):
            return name
    return str(index)
