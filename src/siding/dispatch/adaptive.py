"""Adaptive concurrency: an AIMD limit on sends in flight, between a floor and the max."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from siding.errors import ConfigError
from siding.model import OutcomeKind


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    """``enabled=False`` keeps the limit fixed at ``max_in_flight``.

    The limit grows by ``increase`` per good answer (ACK or DEAD) while the latency stays within
    ``latency_tolerance`` times its observed floor, and is multiplied by ``backoff_ratio`` on a
    RETRY or BACKOFF answer (a timeout is a RETRY) at most once per smoothed latency, so one burst
    of failures from a full window counts as one signal.
    """

    enabled: bool = True
    min_in_flight: int = 1
    increase: float = 1.0
    backoff_ratio: float = 0.5
    latency_tolerance: float = 2.0

    def __post_init__(self) -> None:
        if self.min_in_flight < 1:
            raise ConfigError("adaptive.min_in_flight", "must be at least 1")
        if self.increase <= 0:
            raise ConfigError("adaptive.increase", "must be positive")
        if not 0 < self.backoff_ratio < 1:
            raise ConfigError("adaptive.backoff_ratio", "must be between 0 and 1 (exclusive)")
        if self.latency_tolerance < 1:
            raise ConfigError("adaptive.latency_tolerance", "must be at least 1")


# How fast the latency floor follows latencies above it: slowly, so that a consumer that got
# slower for good does not stop growth forever, while noise does not raise it.
_FLOOR_DRIFT = 0.01
_SMOOTHING = 0.2
# Timer noise: a floor of a few microseconds must not make every answer look slow.
_SLACK_S = 0.001


@dataclass(frozen=True, slots=True)
class Limit:
    """The adaptive state. ``limit`` is fractional; ``current`` is what the window uses."""

    limit: float
    low: int
    high: int
    floor_s: float | None = None
    smoothed_s: float | None = None
    last_cut_at: float | None = None

    @property
    def current(self) -> int:
        return max(self.low, min(self.high, math.floor(self.limit)))


def initial_limit(max_in_flight: int, settings: AdaptiveSettings) -> Limit:
    """Start at the top: the limit only needs to come down when the consumer says so."""
    low = min(settings.min_in_flight, max_in_flight)
    return Limit(float(max_in_flight), low, max_in_flight)


def update(
    state: Limit, kind: OutcomeKind, latency_s: float, now: float, settings: AdaptiveSettings
) -> Limit:
    """The limit after one answer of ``kind`` that took ``latency_s``, received at ``now``."""
    if not settings.enabled or kind is OutcomeKind.GONE:
        return state
    latency_s = max(0.0, latency_s)
    smoothed = (
        latency_s
        if state.smoothed_s is None
        else state.smoothed_s + _SMOOTHING * (latency_s - state.smoothed_s)
    )
    if kind in (OutcomeKind.RETRY, OutcomeKind.BACKOFF):
        if state.last_cut_at is not None and now - state.last_cut_at < smoothed:
            return replace(state, smoothed_s=smoothed)
        cut = max(float(state.low), state.limit * settings.backoff_ratio)
        return replace(state, limit=cut, smoothed_s=smoothed, last_cut_at=now)
    # The floor comes from good answers only: an instant refusal says nothing about speed.
    floor = _next_floor(state.floor_s, latency_s)
    limit = state.limit
    if latency_s <= settings.latency_tolerance * floor + _SLACK_S:
        limit = min(float(state.high), limit + settings.increase)
    return replace(state, limit=limit, floor_s=floor, smoothed_s=smoothed)


def _next_floor(floor_s: float | None, latency_s: float) -> float:
    if floor_s is None or latency_s <= floor_s:
        return latency_s
    return floor_s + _FLOOR_DRIFT * (latency_s - floor_s)
