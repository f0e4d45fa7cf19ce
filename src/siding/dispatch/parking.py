"""When a batch stops waiting for its slow calls, and what a parked call is (docs/parking.md).

A call still running when the rest of its batch is done is *parked*: the batch ends, the call
keeps running in the worker, and its record is written to the route's park topic so that nothing
is lost if the worker dies before the call answers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from siding.errors import ConfigError

# How long after a call's deadline (plus the window's grace) its parked record becomes due
# without an answer: room for the settlement write to land before the park lane looks.
SETTLE_SLACK_MS = 2_000
RECENT_ANSWERS = 256
MIN_ANSWERS = 32
P75_FACTOR = 3.0


@dataclass(frozen=True, slots=True)
class ParkSettings:
    """``enabled``: calls may outlive the batch. The outliers of a slice are parked once the
    answers went quiet for ``floor_s``; any call is parked once it has run ``P75_FACTOR`` times
    the recent 75th-percentile latency, within ``floor_s`` and ``ceiling_s``."""

    enabled: bool = False
    floor_s: float = 0.05
    ceiling_s: float = 5.0

    def __post_init__(self) -> None:
        if self.floor_s <= 0:
            raise ConfigError("park.floor", "must be positive")
        if self.ceiling_s < self.floor_s:
            raise ConfigError("park.ceiling", "must not be below park.floor")


class ParkTimer:
    """Recent answer latencies of one endpoint, kept across batches by the worker."""

    def __init__(self, size: int = RECENT_ANSWERS) -> None:
        self._recent: deque[float] = deque(maxlen=size)

    def observe(self, latency_s: float) -> None:
        self._recent.append(latency_s)

    def park_after_s(self, settings: ParkSettings) -> float:
        """How long a call may run before it is parked; the ceiling until answers are known."""
        if len(self._recent) < MIN_ANSWERS:
            return settings.ceiling_s
        return clamp(P75_FACTOR * p75(self._recent), settings.floor_s, settings.ceiling_s)


def p75(values: deque[float] | list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.75 * len(ordered)) - 1)]


def clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def parked_not_before_ms(started_ms: int, deadline_s: float, grace_s: float) -> int:
    """When a parked record is due if its call never settles: after the call's own deadline."""
    return started_ms + math.ceil((deadline_s + grace_s) * 1000) + SETTLE_SLACK_MS
