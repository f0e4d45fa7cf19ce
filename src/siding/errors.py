"""The one root of every exception siding raises.

Each error says whether trying again could help (``retriable``), so callers ask the error
instead of keeping lists of exception types.
"""

from __future__ import annotations

# The root and ConfigError are the consumer SDK's (siding_consumer.errors): one root for both.
from siding_consumer.errors import ConfigError, SidingError

__all__ = [
    "BrokerError",
    "CheckpointError",
    "ConfigError",
    "DlqError",
    "DlqFloodError",
    "DurableWriteError",
    "EndpointGoneError",
    "OffsetsError",
    "SetupError",
    "SidingError",
    "TransportError",
]


class SetupError(SidingError):
    """A required tool or artefact (java, mvn, resolved jars) is missing."""


class BrokerError(SidingError):
    """The embedded Kafka broker could not be started or stopped."""


class TransportError(SidingError):
    """A delivery could not be made; the endpoint may be reachable later."""

    retriable = True


class EndpointGoneError(SidingError):
    """The endpoint said it is gone for good (HTTP 410); the route must stop."""


class DurableWriteError(SidingError):
    """A retry-lane or DLQ write was not acknowledged by Kafka; the batch must run again."""

    retriable = True


class DlqFloodError(SidingError):
    """Too large a share of a batch turned DEAD; the route stops instead of dead-lettering it."""


class DlqError(SidingError):
    """A DLQ tool cannot proceed (missing topic, bad filter, refused purge)."""


class CheckpointError(SidingError):
    """A route's checkpoint belongs to another cluster, topic or route; it must not be used."""


class OffsetsError(SidingError):
    """A route's offsets cannot be shown or moved (route running, bad target, odd checkpoint)."""
