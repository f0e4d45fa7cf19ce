"""The ``[[route]]`` tables and the whole file, validated into frozen settings.

Durations are held as float seconds. A cross-field problem raises ``Problem`` so the error can
name the exact key; docs/configuration.md documents every key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from siding.config.fields import Count, Duration, Number, PositiveDuration, Problem
from siding.config.http_request import HttpConfig
from siding.config.paging import DlqPageConfig, shown_url
from siding.config.pins import (
    PinsGiven,
    assign_option,
    describe_pins,
    overlap_message,
    parse_pins,
    pins_of,
    pins_problem,
    shared_partitions,
)
from siding.config.sections import (
    ControlConfig,
    FenceConfig,
    KafkaConfig,
    SparkConfig,
    cluster_name,
    fence_on,
)
from siding.config.tracing import TracingConfig
from siding.config.url_template import UrlTemplate, parse_url_template
from siding.config.values import Scheme, check_webhook_secret, parse_endpoint_url
from siding.errors import ConfigError
from siding.model import Lane, Ordering
from siding.naming import (
    PREFIX,
    ROUTE_NAME_MAX,
    TOPIC_NAME_MAX,
    is_legal_topic_name,
    is_safe_route_name,
    owned_topics,
)

MAX_LANES = 10
MAX_LANE_ATTEMPTS = 100
# Each secret in [route.auth] is given inline (usually "${VAR}") or as a file read at load time.
SECRET_FILE_KEYS = {
    "token": "token_file",
    "webhook_secret": "webhook_secret_file",
    "ca_pem": "ca_file",
    "cert_pem": "cert_file",
    "key_pem": "key_file",
}


class Endpoint(BaseModel):
    """One consumer endpoint, parsed from its URL."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    url: str
    scheme: Scheme
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parsed = parse_endpoint_url(url)
        return cls(url=parsed.url, scheme=parsed.scheme, host=parsed.host, port=parsed.port)

    @property
    def is_grpc(self) -> bool:
        return self.scheme.startswith("grpc")

    @property
    def tls(self) -> bool:
        return self.scheme in ("grpcs", "grpcs+dns", "https")

    def url_template(self) -> UrlTemplate:
        """A webhook URL as a template (one without placeholders is a static one)."""
        return parse_url_template(self.url)

    @property
    def grpc_target(self) -> str:
        """The target string for a ``grpc.aio`` channel."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        prefix = "dns:///" if self.scheme.endswith("+dns") else ""
        return f"{prefix}{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


class LaneConfig(BaseModel):
    """One retry lane; ``deadline`` defaults to the route's ``deadline``."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    delay: Duration
    deadline: PositiveDuration | None = None
    attempts: Count = Field(default=1, ge=1, le=MAX_LANE_ATTEMPTS)


class AuthConfig(BaseModel):
    """``[route.auth]``: credentials; the loader has already read every ``*_file``."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

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
        secret = value.get_secret_value() if value is not None else ""
        if secret.startswith("whsec_"):  # an empty one is refused when the transport is built
            check_webhook_secret(secret)
        return value

    @field_validator("ca_pem", "cert_pem", "key_pem")
    @classmethod
    def _pem(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and "-----BEGIN " not in value.get_secret_value():
            raise ValueError("not PEM text (no '-----BEGIN ' line)")
        return value

    @model_validator(mode="after")
    def _client_cert(self) -> AuthConfig:
        if (self.cert_pem is None) != (self.key_pem is None):
            missing = "key_file" if self.key_pem is None else "cert_file"
            raise Problem((missing,), "a client certificate needs both cert_file and key_file")
        return self

    def given(self, field: str) -> str:
        """The key the user wrote for a secret (``X`` or its ``*_file``), for error messages."""
        file_key = SECRET_FILE_KEYS[field]
        return file_key if getattr(self, file_key) is not None else field


class BreakerConfig(BaseModel):
    """``[route.breaker]``: stop pushing to an endpoint that keeps failing."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    failure_threshold: Count = Field(default=5, ge=1)
    open_for: PositiveDuration = 5.0
    max_open_for: PositiveDuration = 60.0

    @model_validator(mode="after")
    def _order(self) -> BreakerConfig:
        if self.max_open_for < self.open_for:
            raise Problem(("max_open_for",), "must be at least open_for")
        return self


GRPC_DEFAULT_MESSAGE_BYTES = 4 * 1024 * 1024
DEFAULT_LEASE_S = 15.0
# The default drain timeout is the deadline plus this: room for the answer of a call that ran to
# its deadline (the window's own grace is at most 1 s) to be written.
DRAIN_SLACK_S = 2.0


class ParkConfig(BaseModel):
    """``[route.park]``: a call still running when the rest of its batch is done outlives the
    batch (docs/parking.md): the last calls of a batch once the answers went quiet for
    ``floor``, and any call after three times the recent 75th-percentile answer time, within
    ``floor`` and ``ceiling``. Key mode never parks."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    enabled: bool = True
    floor: PositiveDuration = 0.05
    ceiling: PositiveDuration = 5.0

    @model_validator(mode="after")
    def _order(self) -> ParkConfig:
        if self.ceiling < self.floor:
            raise Problem(("ceiling",), "must be at least floor")
        return self


class AdaptiveConfig(BaseModel):
    """``[route.adaptive]``: concurrency adapts between ``min_in_flight`` and ``max_in_flight``;
    with ``latency`` (opt-in) it also shrinks when the consumer's answers slow down
    (docs/dispatch.md, "Adaptive concurrency")."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    enabled: bool = True
    min_in_flight: Count = Field(default=1, ge=1)
    # The latency-aware limit (a gradient): off by default, it cost a backlog's drain on a
    # busy machine (docs/dispatch.md).
    latency: bool = False
    # The answer latency that limit steers to, as a multiple of the consumer's unloaded latency.
    latency_tolerance: Number = Field(default=2.0, gt=1, le=100)

    @model_validator(mode="after")
    def _latency_knobs(self) -> AdaptiveConfig:
        if self.latency and not self.enabled:
            raise Problem(("latency",), "needs enabled = true")
        if "latency_tolerance" in self.model_fields_set and not self.latency:
            raise Problem(("latency_tolerance",), "only applies with latency = true")
        return self


MAX_BATCH = 1000
MAX_LINGER_S = 1.0


class BatchConfig(BaseModel):
    """``batch = { max = 64, linger = "0s" }``: many deliveries per gRPC frame or HTTP request
    (docs/batch.md). A batch leaves when it holds ``max`` deliveries or its oldest has waited
    ``linger`` (0: what is ready leaves at once). ``batch = false`` (``enabled = false``) sends
    one delivery per call; ``batch = true`` is the defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    enabled: bool = True
    max: Count = Field(default=64, ge=1, le=MAX_BATCH)
    linger: Duration = 0.0

    @field_validator("linger")
    @classmethod
    def _linger(cls, value: float) -> float:
        if value > MAX_LINGER_S:
            raise ValueError(f"must be at most {MAX_LINGER_S:g}s (a batch waits at most this long)")
        return value


# What a gRPC stream route without a ``batch`` key gets (docs/batch.md, "The default").
DEFAULT_BATCH = BatchConfig()

DEFAULT_PROGRESS_INTERVAL_S = 0.25
DEFAULT_PROGRESS_EVERY = 100
MAX_PROGRESS_INTERVAL_S = 60.0
SOURCE_KEYS = ("topic", "topics", "topic_pattern")
# Lanes 1 and 2 are tested even on a route with fewer, as they always were: a pattern refused
# before stays refused.
_PROBED_LANES = 2


def own_topic_probes(route_name: str, lanes: int) -> tuple[str, ...]:
    """Pure: every topic siding writes for a route with ``lanes`` retry lanes (siding.naming),
    to test a ``topic_pattern`` against: a pattern matching one would read the route's own
    lanes or DLQ as source records. The default DLQ name is among them (an override is
    checked as ``dlq``)."""
    return owned_topics(route_name, max(lanes, _PROBED_LANES)).names


class RouteConfig(BaseModel):
    """``[[route]]``: one source topic (``topic``), a list (``topics``) or every topic whose
    name matches a regular expression (``topic_pattern``), read by one consumer group and
    pushed to one endpoint (set)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    name: str
    topic: str | None = None
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    # Only these partitions of the source (Spark's assign): a list, or a table by topic.
    partitions: PinsGiven | None = None
    group: str = Field(min_length=1, max_length=255)
    ordering: Ordering = Ordering.UNORDERED
    endpoint: tuple[Endpoint, ...] = ()
    transport: Literal["stream", "unary"] = "stream"
    max_in_flight: Count = Field(default=1000, ge=1)
    deadline: PositiveDuration = 30.0
    drain_timeout: PositiveDuration | None = None
    rate_limit: Number = Field(default=0.0, ge=0)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    min_partitions: Count = Field(default=0, ge=0)
    max_offsets_per_trigger: Count = Field(default=10000, ge=1)
    lanes: tuple[LaneConfig, ...] = Field(default=(), max_length=MAX_LANES)
    dlq: str | None = None
    # New dead letters announced as signed CloudEvents (docs/dlq.md); None: off.
    dlq_page: DlqPageConfig | None = None
    # Topics the consumer may answer with records for (docs/outputs.md).
    outputs: tuple[str, ...] = ()
    max_retry_after: Duration = 600.0
    max_message_bytes: Count | None = Field(default=None, ge=1)
    crash_limit: Count = Field(default=3, ge=1)
    dlq_flood_ratio: Number = Field(default=0.5, ge=0, le=1)
    dlq_flood_min_batch: Count = Field(default=20, ge=1)
    # How often a running batch records the ACKs it got; "0s": not recorded (docs/replay.md).
    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL_S
    # ... and at once every this many ACKs; 0: by time only.
    progress_every: Count = Field(default=DEFAULT_PROGRESS_EVERY, ge=0)
    auth: AuthConfig = AuthConfig()
    breaker: BreakerConfig = BreakerConfig()
    adaptive: AdaptiveConfig = AdaptiveConfig()
    park: ParkConfig = ParkConfig()
    # None: the default, batched on a gRPC stream; over HTTP once the consumer says it reads
    # batches (``batching``, ``offers_batches``).
    batch: BatchConfig | None = None
    # Webhooks only: the method, static headers and Idempotency-Key (docs/webhooks.md).
    http: HttpConfig = HttpConfig()
    # gzip on the wire: HTTP bodies and gRPC unary calls of at least compress_above bytes, every
    # message of a gRPC stream (docs/configuration.md, "Compression on the wire").
    compression: Literal["none", "gzip"] = "none"
    compress_above: Count = Field(default=1024, ge=0)
    # Consumer instances that join at runtime (docs/registration.md).
    registration_token: SecretStr | None = None
    lease: PositiveDuration = DEFAULT_LEASE_S
    # The Kafka cluster the route reads (a [kafka.clusters.<name>]; None: [kafka]), and the one
    # its lanes, DLQ, state topics and outputs are on (None: the one it reads): cluster_name.
    cluster: str | None = None
    write_cluster: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        given = [key for key in SOURCE_KEYS if data.get(key) is not None]
        if len(given) > 1:
            raise Problem(
                (given[1],),
                f"give one of topic, topics or topic_pattern, not {' and '.join(given)}",
            )
        if not given:
            raise Problem(("topic",), "required key is missing (or give topics or topic_pattern)")
        if "name" not in data and given[0] != "topic":
            raise Problem(("name",), f"required key is missing (a route with {given[0]} has no"
                          " default name: set name explicitly)")  # fmt: skip
        return data

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

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("expected a non-empty list of topic names")
        for i, topic in enumerate(value):
            if not is_legal_topic_name(topic):
                raise Problem(
                    (i,),
                    f"{topic!r} is not a legal Kafka topic name:"
                    f" 1-{TOPIC_NAME_MAX} characters of [a-zA-Z0-9._-]",
                )
            if topic in value[:i]:
                raise Problem((i,), f"{topic!r} is listed twice")
        return value

    @field_validator("topic_pattern")
    @classmethod
    def _topic_pattern(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("must not be empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
        return value

    @field_validator("partitions", mode="before")
    @classmethod
    def _partitions(cls, value: Any) -> PinsGiven | None:
        return parse_pins(value)

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for topic in value:
            if not is_legal_topic_name(topic):
                raise ValueError(
                    f"{topic!r} is not a legal Kafka topic name:"
                    f" 1-{TOPIC_NAME_MAX} characters of [a-zA-Z0-9._-]"
                )
            if topic.startswith(f"{PREFIX}."):
                raise ValueError(f"{topic!r} is one of siding's own topics (siding.*)")
        if len(set(value)) < len(value):
            raise ValueError("a topic is listed twice")
        return value

    @field_validator("batch", mode="before")
    @classmethod
    def _batch_switch(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return {"enabled": value}
        if value is not None and not isinstance(value, Mapping | BatchConfig):
            raise ValueError("expected a table, or true / false")
        return value

    @field_validator("endpoint", mode="before")
    @classmethod
    def _endpoints(cls, value: Any) -> Any:
        urls = [value] if isinstance(value, str | Endpoint) else value
        if not isinstance(urls, list | tuple) or not urls:
            raise ValueError(
                "expected a URL or a non-empty list of URLs (leave endpoint out for a route"
                " whose consumer instances join at runtime)"
            )
        if not all(isinstance(u, str | Endpoint) for u in urls):
            raise ValueError("expected a URL or a non-empty list of URLs")
        return [u if isinstance(u, Endpoint) else Endpoint.parse(u) for u in urls]

    @field_validator("progress_interval")
    @classmethod
    def _progress_interval(cls, value: float) -> float:
        if value > MAX_PROGRESS_INTERVAL_S:
            raise ValueError(
                f'must be at most {MAX_PROGRESS_INTERVAL_S:g}s ("0s" turns progress records off)'
            )
        return value

    @field_validator("registration_token")
    @classmethod
    def _registration_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be empty (leave the key out for no token)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RouteConfig:
        if self.partitions is not None:
            problem = pins_problem(
                self.partitions, topic=self.topic, topics=self.topics, pattern=self.topic_pattern
            )
            if problem is not None:
                raise problem
        if self.dlq is not None and self.reads(self.dlq):
            which = "the source topic" if self.topic is not None else "a source topic of the route"
            raise Problem(("dlq",), f"the DLQ must not be {which}")
        pattern = self.topic_pattern is not None
        probes = own_topic_probes(self.name, len(self.lanes)) if pattern else ()
        for own in probes:
            if self.reads(own):
                raise Problem(
                    ("topic_pattern",),
                    f"matches {own!r}, a topic siding writes for this route: exclude"
                    r" siding's topics, e.g. '(?!siding\.)orders-.*'",
                )
        if self.dlq is not None and self.dlq in self.outputs:
            raise Problem(("outputs",), f"{self.dlq!r} is the route's DLQ")
        if self.adaptive.min_in_flight > self.max_in_flight:
            raise Problem(("adaptive", "min_in_flight"), "must not exceed max_in_flight")
        if "compress_above" in self.model_fields_set and self.compression == "none":
            raise Problem(("compress_above",), "only applies with compression = 'gzip'")
        source, write = cluster_name(self, "source"), cluster_name(self, "write")
        if self.ordering is Ordering.KEY and source != write:
            raise Problem(
                ("write_cluster",),
                f"ordering = 'key' keeps held records in a topic the main lane reads beside the"
                f" source, so on the source's cluster ({source!r}): leave write_cluster out",
            )
        if not self.endpoint:
            return self  # every endpoint joins at runtime: each is checked when it joins
        first = self.endpoint[0]
        if any(e.scheme != first.scheme for e in self.endpoint):
            raise Problem(("endpoint",), "all endpoints of a route must use the same scheme")
        if len({e.url for e in self.endpoint}) < len(self.endpoint):
            raise Problem(("endpoint",), "an endpoint is listed twice")
        if "transport" in self.model_fields_set and not first.is_grpc:
            raise Problem(("transport",), "only applies to gRPC endpoints")
        asked = self.batch is not None and self.batch.enabled
        if asked and first.is_grpc and self.transport == "unary":
            raise Problem(("batch",), "batched delivery needs transport = 'stream' (the default)")
        if "http" in self.model_fields_set and first.is_grpc:
            raise Problem(("http",), "only for HTTP endpoints")
        if asked and not first.is_grpc:
            for n, endpoint in enumerate(self.endpoint):
                if not endpoint.url_template().is_static:
                    where = ("endpoint", n) if len(self.endpoint) > 1 else ("endpoint",)
                    raise Problem(
                        where,
                        "a URL with placeholders needs one request per record: leave out"
                        " batch or the placeholders",
                    )
        if self.auth.webhook_secret is not None and first.is_grpc:
            raise Problem(("auth", self.auth.given("webhook_secret")), "only for HTTP endpoints")
        for pem in ("ca_pem", "cert_pem", "key_pem"):
            if getattr(self.auth, pem) is not None and not first.tls:
                raise Problem(
                    ("auth", self.auth.given(pem)),
                    "needs a TLS endpoint (grpcs://, grpcs+dns:/// or https://)",
                )
        return self

    @property
    def source_topics(self) -> tuple[str, ...]:
        """The source topics named in the file (``topic`` or ``topics``); empty for a
        ``topic_pattern``, whose topics are those that exist (``matching``)."""
        if self.topic is not None:
            return (self.topic,)
        return self.topics

    @property
    def single_topic(self) -> str | None:
        """The one source topic of a ``topic = "..."`` route; ``None`` otherwise."""
        return self.topic

    @property
    def pins(self) -> dict[str, tuple[int, ...]]:
        """Source topic -> the partitions the route is pinned to; empty when it reads every
        partition of its sources."""
        return pins_of(self.partitions, self.topic)

    def pinned(self, topic: str) -> tuple[int, ...] | None:
        """The partitions of ``topic`` the route reads, or ``None`` for every one."""
        return self.pins.get(topic)

    def only_pinned(self, topic: str, by_partition: Mapping[int, Any]) -> dict[int, Any]:
        """Pure: the entries of ``by_partition`` (partition -> anything) of ``topic`` that
        the route reads (all of them when it is not pinned)."""
        pinned = self.pinned(topic)
        return {p: v for p, v in by_partition.items() if pinned is None or p in pinned}

    def reads(self, topic: str) -> bool:
        """Pure: whether ``topic`` is one of this route's sources (a pattern matches the whole
        name, as Kafka's ``subscribePattern`` does)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.source_topics

    def matching(self, existing: Iterable[str]) -> tuple[str, ...]:
        """Pure: the source topics among ``existing`` topic names, sorted."""
        if self.topic_pattern is None:
            return self.source_topics
        return tuple(sorted(t for t in existing if self.reads(t)))

    @property
    def subscription(self) -> tuple[str, str]:
        """Spark's Kafka source option for the route's source: ``("subscribe", "a,b")``,
        ``("subscribePattern", regex)``, or ``("assign", '{"a": [0, 1]}')`` when pinned."""
        if self.pins:
            return ("assign", assign_option(self.pins))
        if self.topic_pattern is not None:
            return ("subscribePattern", self.topic_pattern)
        return ("subscribe", ",".join(self.source_topics))

    @property
    def source_label(self) -> str:
        """The source for people: ``orders``, ``orders,refunds`` or ``pattern:orders-.*``
        (also what a checkpoint's owner file records); pinned: ``orders[0,2]``."""
        if self.pins:
            return describe_pins(self.pins)
        if self.topic_pattern is not None:
            return f"pattern:{self.topic_pattern}"
        return ",".join(self.source_topics)

    def batching(self, endpoint: Endpoint) -> BatchConfig | None:
        """Pure: how deliveries to ``endpoint`` are gathered, or ``None`` for one per call.
        Without a ``batch`` key a gRPC stream batches (a consumer without ``DeliverBatches``
        gets ``DeliverStream``) and HTTP does not (a webhook that does not read the batch
        envelope would take a batch for one event: docs/batch.md, "The default")."""
        if self.batch is not None:
            return self.batch if self.batch.enabled else None
        if endpoint.is_grpc and self.transport == "stream":
            return DEFAULT_BATCH
        return None

    def offers_batches(self, endpoint: Endpoint) -> bool:
        """Pure: whether deliveries to ``endpoint`` go one per request until the consumer says
        it reads batches (``siding-batch: v1``), and in batches of ``DEFAULT_BATCH`` from then
        on: an HTTP route without a ``batch`` key, to a URL without placeholders."""
        return self.batch is None and not endpoint.is_grpc and endpoint.url_template().is_static

    @property
    def message_limit(self) -> int:
        """Records larger than this go to the DLQ unsent; 0 is no limit. gRPC consumers keep
        gRPC's default 4 MiB receive limit unless they raise it; HTTP servers answer 413."""
        if self.max_message_bytes is not None:
            return self.max_message_bytes
        if not self.endpoint:  # instances that join may be gRPC: keep gRPC's limit
            return GRPC_DEFAULT_MESSAGE_BYTES
        return GRPC_DEFAULT_MESSAGE_BYTES if self.endpoint[0].is_grpc else 0

    @property
    def takes_registrations(self) -> bool:
        """Whether consumer instances may join this route at runtime: it lists no endpoint, or
        it has a ``registration_token`` (docs/registration.md)."""
        return not self.endpoint or self.registration_token is not None

    @property
    def drain_timeout_s(self) -> float:
        """How long a draining stop waits for this route's calls in flight (docs/operations.md,
        "Stopping siding"): ``drain_timeout``, else the main lane's deadline plus
        ``DRAIN_SLACK_S``, so that a call that runs to its deadline still reports its answer."""
        if self.drain_timeout is not None:
            return self.drain_timeout
        return self.deadline + DRAIN_SLACK_S

    @property
    def parks(self) -> bool:
        """Whether this route's calls may outlive their batch."""
        return self.park.enabled and self.ordering is Ordering.UNORDERED

    def redacted(self) -> dict[str, Any]:
        """The route for display: secrets masked, durations as text, endpoints as URLs."""
        data = self.model_dump(mode="json", exclude_none=True)
        if not self.topics:
            del data["topics"]
        data["endpoint"] = [e.url for e in self.endpoint]
        if self.endpoint and not self.endpoint[0].is_grpc:
            del data["transport"]
        if self.endpoint and self.endpoint[0].is_grpc:
            del data["http"]
        if self.endpoint:  # the batching in effect, the default's included
            batching = self.batching(self.endpoint[0])
            data["batch"] = (
                False if batching is None else batching.model_dump(mode="json", exclude={"enabled"})
            )
            if self.offers_batches(self.endpoint[0]):
                offer = DEFAULT_BATCH.model_dump(mode="json", exclude={"enabled"})
                data["batch"] = {**offer, "when": "the consumer answers 'siding-batch: v1'"}
        if self.dlq_page is not None:
            data["dlq_page"]["url"] = shown_url(self.dlq_page.url)
        return data

    def lanes_as_model(self) -> tuple[Lane, ...]:
        """The retry lanes as ``siding.model.Lane`` values, for ``siding.policy``."""
        return tuple(
            Lane(
                delay_s=lane.delay,
                deadline_s=lane.deadline or self.deadline,
                attempts=lane.attempts,
            )
            for lane in self.lanes
        )


SAME_SOURCE = "another route has the same topic and group"


def source_clash(one: RouteConfig, two: RouteConfig) -> str | None:
    """Pure: why two routes may not run together, or ``None``: both would commit the same
    group's offsets of a partition (the same group, a topic one names that the other reads or
    the same pattern, and partitions both read: a pin disjoint from the other's is fine) on
    the same cluster."""
    if one.group != two.group or cluster_name(one, "source") != cluster_name(two, "source"):
        return None
    if one.topic_pattern is not None and one.topic_pattern == two.topic_pattern:
        return SAME_SOURCE
    shared = [t for t in one.source_topics if two.reads(t)]
    shared += [t for t in two.source_topics if one.reads(t) and t not in shared]
    for topic in shared:
        first, second = one.pinned(topic), two.pinned(topic)
        both = shared_partitions(first, second)
        if both is None:
            return SAME_SOURCE
        if both:
            return overlap_message((one.name, first), (two.name, second), topic, one.group)
    return None


class SidingConfig(BaseModel):
    """The whole ``siding.toml``."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    kafka: KafkaConfig
    spark: SparkConfig = SparkConfig()
    control: ControlConfig = ControlConfig()
    fence: FenceConfig = FenceConfig()
    tracing: TracingConfig = TracingConfig()
    route: tuple[RouteConfig, ...] = ()

    @model_validator(mode="after")
    def _routes(self) -> SidingConfig:
        if not self.route and not self.control.takes_routes:
            raise Problem(
                ("route",),
                "at least one [[route]] is required (or a [control] token and listen address,"
                " to create routes through the control API)",
            )
        names: dict[str, str] = {}
        for i, route in enumerate(self.route):
            if not route.endpoint and not self.control.listen:
                raise Problem(
                    ("route", i, "endpoint"),
                    "required key is missing (consumer instances could join the route only"
                    " through the control API, which [control] listen turns off)",
                )
            for key in ("cluster", "write_cluster"):
                name = getattr(route, key)
                if name is not None and name not in self.kafka.names:
                    raise Problem(
                        ("route", i, key),
                        f"no cluster named {name!r}: define [kafka.clusters.{name}]"
                        f" (clusters: {', '.join(self.kafka.names)})",
                    )
            for earlier in self.route[:i]:
                clash = source_clash(earlier, route)
                if clash is not None:
                    key = "partitions" if route.pins and clash != SAME_SOURCE else "group"
                    raise Problem(("route", i, key), clash)
            # Kafka refuses topic names that differ only in '.' versus '_' (metric names collide).
            other = names.get(route.name.replace(".", "_"))
            if other == route.name:
                hint = " (routes pinned to partitions of one topic need names of their own)"
                message = f"another route is named {route.name!r}{hint if route.pins else ''}"
                raise Problem(("route", i, "name"), message)
            if other is not None:
                message = (
                    f"differs from route {other!r} only in '.' versus '_': Kafka topic names clash"
                )
                raise Problem(("route", i, "name"), message)
            names[route.name.replace(".", "_")] = route.name
        return self

    @property
    def routes(self) -> tuple[RouteConfig, ...]:
        return self.route

    @property
    def fenced(self) -> bool:
        """Whether each route is guarded by its fence (``[fence]``; by default exactly when
        the checkpoint is remote) rather than the checkpoint folder's lock."""
        return fence_on(self.fence, self.spark.checkpoint_dir)

    def route_named(self, name: str) -> RouteConfig:
        for route in self.route:
            if route.name == name:
                return route
        known = ", ".join(r.name for r in self.route)
        raise ConfigError("route", f"no route named {name!r} (routes: {known})")

    def redacted_dict(self) -> dict[str, Any]:
        """The effective configuration for display: secrets masked, durations as text."""
        data = self.model_dump(mode="json", exclude_none=True)
        kafka = data["kafka"]
        data["kafka"] = {"bootstrap": self.kafka.bootstrap, **kafka["client"]}
        data["kafka"].update({t: kafka[t] for t in ("librdkafka", "java") if kafka[t]})
        for name, cluster in kafka.get("clusters", {}).items():
            shown = {"bootstrap": cluster["bootstrap"], **cluster["client"]}
            shown.update({t: cluster[t] for t in ("librdkafka", "java") if cluster[t]})
            data["kafka"].setdefault("clusters", {})[name] = shown
        data["route"] = [route.redacted() for route in self.route]
        return data
