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
    ``latency_tolerance`` times its observed floor, and is multiplied by ``backoff_ratio`` at most
    once per smoothed latency (one burst of failures from a full window is one signal) on:

    - every BACKOFF answer (the endpoint said "slow down", or is unreachable);
    - a RETRY answer (a timeout is a RETRY) once RETRYs are more than ``retry_share_to_cut`` of
      recent answers. A few slow or failing *messages* are what the retry lanes are for; cutting
      the window for each of them would bring head-of-line blocking back through the side door.
    """

    enabled: bool = True
    min_in_flight: int = 1
    increase: float = 1.0
    backoff_ratio: float = 0.5
    latency_tolerance: float = 2.0
    retry_share_to_cut: float = 0.25

    def __post_init__(self) -> None:
        if self.min_in_flight < 1:
            raise ConfigError("adaptive.min_in_flight", "must be at least 1")
        if self.increase <= 0:
            raise ConfigError("adaptive.increase", "must be positive")
        if not 0 < self.backoff_ratio < 1:
            raise ConfigError("adaptive.backoff_ratio", "must be between 0 and 1 (exclusive)")
        if self.latency_tolerance < 1:
            raise ConfigError("adaptive.latency_tolerance", "must be at least 1")
        if not 0 <= self.retry_share_to_cut <= 1:
            raise ConfigError("adaptive.retry_share_to_cut", "must be between 0 and 1")


# How fast the latency floor follows latencies above it: slowly, so that a consumer that got
# slower for good does not stop growth forever, while noise does not raise it.
_FLOOR_DRIFT = 0.01
_SMOOTHING = 0.2
# The share of RETRY answers is averaged over roughly the last 1 / _SHARE_SMOOTHING answers.
_SHARE_SMOOTHING = 0.05
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
    retry_share: float = 0.0

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
    is_retry = kind is OutcomeKind.RETRY
    share = state.retry_share + _SHARE_SMOOTHING * (float(is_retry) - state.retry_share)
    overloaded = kind is OutcomeKind.BACKOFF or (is_retry and share > settings.retry_share_to_cut)
    if is_retry and not overloaded:
        return replace(state, smoothed_s=smoothed, retry_share=share)
    if overloaded:
        if state.last_cut_at is not None and now - state.last_cut_at < smoothed:
            return replace(state, smoothed_s=smoothed, retry_share=share)
        cut = max(float(state.low), state.limit * settings.backoff_ratio)
        return replace(state, limit=cut, smoothed_s=smoothed, last_cut_at=now, retry_share=share)
    # The floor comes from good answers only: an instant refusal says nothing about speed.
    floor = _next_floor(state.floor_s, latency_s)
    limit = state.limit
    if latency_s <= settings.latency_tolerance * floor + _SLACK_S:
        limit = min(float(state.high), limit + settings.increase)
    return replace(state, limit=limit, floor_s=floor, smoothed_s=smoothed, retry_share=share)


def _next_floor(floor_s: float | None, latency_s: float) -> float:
    if floor_s is None or latency_s <= floor_s:
        return latency_s
    return floor_s + _FLOOR_DRIFT * (latency_s - floor_s)
