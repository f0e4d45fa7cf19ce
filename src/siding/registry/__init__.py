"""Consumer instances that join routes at runtime, and routes made through the control API:
the records of the registry topic, join requests, and the workers' view (docs/registration.md).
"""

from siding.registry.feed import MemberFeed, members_of
from siding.registry.join import JoinRequest, join_request
from siding.registry.records import Registration, RegistryState, RouteEntry

__all__ = [
    "JoinRequest",
    "MemberFeed",
    "Registration",
    "RegistryState",
    "RouteEntry",
    "join_request",
    "members_of",
]
