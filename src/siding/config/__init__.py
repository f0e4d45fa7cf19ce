"""Load and validate ``siding.toml``: frozen settings, and errors that name the bad key.

docs/configuration.md documents every key; ``examples/siding.toml`` shows them all.
"""

from siding.config.fields import Duration, PositiveDuration, Setting
from siding.config.loading import load_config, parse_config, parse_route
from siding.config.models import (
    MAX_LANE_ATTEMPTS,
    MAX_LANES,
    AdaptiveConfig,
    AuthConfig,
    BatchConfig,
    BreakerConfig,
    Endpoint,
    LaneConfig,
    RouteConfig,
    SidingConfig,
)
from siding.config.sections import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ControlConfig,
    FenceConfig,
    KafkaConfig,
    Role,
    SparkConfig,
    cluster_name,
)
from siding.config.tracing import TracingConfig
from siding.config.values import (
    format_duration,
    interpolate,
    looks_secret,
    parse_duration,
)
from siding.naming import (
    ROUTE_NAME_MAX,
    TOPIC_NAME_MAX,
    is_legal_topic_name,
    is_safe_route_name,
)

__all__ = [
    "DEFAULT_CLUSTER",
    "MAX_LANES",
    "MAX_LANE_ATTEMPTS",
    "ROUTE_NAME_MAX",
    "TOPIC_NAME_MAX",
    "AdaptiveConfig",
    "AuthConfig",
    "BatchConfig",
    "BreakerConfig",
    "ClusterConfig",
    "ControlConfig",
    "Duration",
    "Endpoint",
    "FenceConfig",
    "KafkaConfig",
    "LaneConfig",
    "PositiveDuration",
    "Role",
    "RouteConfig",
    "Setting",
    "SidingConfig",
    "SparkConfig",
    "TracingConfig",
    "cluster_name",
    "format_duration",
    "interpolate",
    "is_legal_topic_name",
    "is_safe_route_name",
    "load_config",
    "looks_secret",
    "parse_config",
    "parse_duration",
    "parse_route",
]
