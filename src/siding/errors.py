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
    "FenceLost",
    "OffsetsError",
    "RouteStopped",
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


class RouteStopped(SidingError):
    """A route must stop; the message is the one line ``siding run`` ends with (no trace).

    Raised on the driver by whatever decides the route cannot go on (the DLQ-flood guard, a
    batch that failed after its attempts, an endpoint gone); the batch handler's edge records it
    and ends the batch as a stop, with nothing committed (docs/operations.md, "When a route
    stops")."""

    @property
    def reason(self) -> str:
        text = str(self).strip()
        return text.splitlines()[0] if text else type(self).__name__


class EndpointGoneError(SidingError):
    """The endpoint said it is gone for good (HTTP 410); the route must stop."""


class DurableWriteError(SidingError):
    """A retry-lane or DLQ write was not acknowledged by Kafka; the batch must run again."""

    retriable = True


class FenceLost(DurableWriteError):
    """The route's fence passed to another driver: this one's writes are refused (never tried
    again); the route stops (docs/operations.md, "Two drivers for one route: the fence")."""

    retriable = False


class DlqFloodError(RouteStopped):
    """Too large a share of a batch turned DEAD; the route stops instead of dead-lettering it."""


class DlqError(SidingError):
    """A DLQ tool cannot proceed (missing topic, bad filter, refused purge)."""


class CheckpointError(SidingError):
    """A route's checkpoint belongs to another cluster, topic or route; it must not be used."""


class OffsetsError(SidingError):
    """A route's offsets cannot be shown or moved (route running, bad target, odd checkpoint)."""
