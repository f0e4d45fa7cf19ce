"""The async in-flight window that delivers one Spark task's slice (see docs/dispatch.md)."""

from siding.dispatch.adaptive import AdaptiveSettings
from siding.dispatch.breaker import (
    BreakerSettings,
    BreakerState,
    BreakerStatus,
    BreakerTransition,
    CircuitBreaker,
)
from siding.dispatch.errors import DispatchInterrupted
from siding.dispatch.guard import flood_exceeded
from siding.dispatch.keyorder import OrderKey, WaitingRecord
from siding.dispatch.parking import ParkSettings, ParkTimer
from siding.dispatch.ratelimit import TokenBucket
from siding.dispatch.settings import DispatchSettings
from siding.dispatch.stats import DispatchStats, LatencyHistogram
from siding.dispatch.window import dispatch
from siding.dispatch.work import DispatchReport, ParkedCall, Settled, Work

__all__ = [
    "AdaptiveSettings",
    "BreakerSettings",
    "BreakerState",
    "BreakerStatus",
    "BreakerTransition",
    "CircuitBreaker",
    "DispatchInterrupted",
    "DispatchReport",
    "DispatchSettings",
    "DispatchStats",
    "LatencyHistogram",
    "OrderKey",
    "ParkSettings",
    "ParkTimer",
    "ParkedCall",
    "Settled",
    "TokenBucket",
    "WaitingRecord",
    "Work",
    "dispatch",
    "flood_exceeded",
]
