"""Adaptive concurrency: a limit on sends in flight, between a floor and the max, that follows
the consumer's answer latency (a gradient towards a latency target) and cuts on trouble.

The reasoning, and why a target rather than Vegas's queue estimate, is in docs/dispatch.md
("Adaptive concurrency").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from siding.errors import ConfigError
from siding.model import OutcomeKind


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    """``enabled=False`` keeps the limit fixed at ``max_in_flight``.

    Good answers (ACK or DEAD) are gathered in sample windows of at least ``MIN_SAMPLES``
    answers and one latency long. At each window's end, with ``m`` its median latency and
    ``target = latency_tolerance * baseline`` (the baseline: the lowest median seen):

    - ``m > target``: the limit is multiplied by ``target / m`` (at most halved);
    - else it grows by ``increase * sqrt(limit)``, or doubles while it is still ramping up from
      ``min_in_flight`` (where it starts, so that the baseline is measured unloaded).

    And it is multiplied by ``backoff_ratio`` at most once per smoothed latency on:

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
        if self.latency_tolerance <= 1:
            raise ConfigError("adaptive.latency_tolerance", "must be above 1")
        if not 0 <= self.retry_share_to_cut <= 1:
            raise ConfigError("adaptive.retry_share_to_cut", "must be between 0 and 1")


_SMOOTHING = 0.2
# The share of RETRY answers is averaged over roughly the last 1 / _SHARE_SMOOTHING answers.
_SHARE_SMOOTHING = 0.05
# Timer noise: a baseline of a few microseconds must not make every answer look slow.
_SLACK_S = 0.001
# A sample window ends once it holds this many good answers (fewer below a limit of as many)
# and has lasted one latency; it keeps at most MAX_SAMPLES. The answers of the latency after a
# window ended are not sampled: they are of calls sent under the limit before.
MIN_SAMPLES = 10
MAX_SAMPLES = 200
# One window's cut is at most this (a latency spike is not a reason to drop to the floor).
MAX_CUT = 0.5


@dataclass(frozen=True, slots=True)
class Limit:
    """The adaptive state. ``limit`` is fractional; ``current`` is what the window uses.
    ``floor_s`` is the latency baseline; ``samples`` the good answers' latencies of the sample
    window begun at ``window_at``."""

    limit: float
    low: int
    high: int
    floor_s: float | None = None
    smoothed_s: float | None = None
    last_cut_at: float | None = None
    retry_share: float = 0.0
    samples: tuple[float, ...] = ()
    window_at: float | None = None
    last_median_s: float = 0.0
    ramping: bool = True
    skip_until: float = -math.inf

    @property
    def current(self) -> int:
        return max(self.low, min(self.high, math.floor(self.limit)))


def initial_limit(max_in_flight: int, settings: AdaptiveSettings, *, ramp: bool = False) -> Limit:
    """``ramp``: start at the floor and ramp up (doubling each sample window), so that the first
    latencies, the baseline, are the consumer's own, unloaded: for a limit kept across batches
    (the pipeline keeps one per endpoint and lane in each worker). Else at the top (a one-off
    dispatch), and always when disabled."""
    low = min(settings.min_in_flight, max_in_flight)
    start = low if ramp and settings.enabled else max_in_flight
    return Limit(float(start), low, max_in_flight, ramping=ramp)


def rebound(state: Limit, max_in_flight: int, settings: AdaptiveSettings) -> Limit:
    """A state kept across batches, under the bounds of this batch (the route's limits may have
    changed since)."""
    low = min(settings.min_in_flight, max_in_flight)
    limit = max(float(low), min(float(max_in_flight), state.limit))
    return replace(state, limit=limit, low=low, high=max_in_flight)


def target_s(floor_s: float, settings: AdaptiveSettings) -> float:
    """The latency the limit steers to: the baseline times the tolerance."""
    return settings.latency_tolerance * floor_s + _SLACK_S


def after_window(state: Limit, median_s: float, settings: AdaptiveSettings) -> Limit:
    """Pure: the limit and the baseline after a sample window whose median latency was
    ``median_s``."""
    floor = median_s if state.floor_s is None else min(state.floor_s, median_s)
    target = target_s(floor, settings)
    limit = state.limit
    if median_s > target:
        if limit <= state.low:
            # Sending less is not possible: this latency is the consumer's own now (it got
            # slower for good, or its traffic got heavier). It becomes the target.
            floor = max(floor, (median_s - _SLACK_S) / settings.latency_tolerance)
        else:
            limit = max(float(state.low), limit * max(MAX_CUT, target / median_s))
        return replace(state, limit=limit, floor_s=floor, last_median_s=median_s, ramping=False)
    step = limit if state.ramping else settings.increase * math.sqrt(max(1.0, limit))
    limit = min(float(state.high), limit + step)
    return replace(state, limit=limit, floor_s=floor, last_median_s=median_s)


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
        # A cut starts a new sample window: the old one measured another limit.
        return replace(
            state,
            limit=cut,
            smoothed_s=smoothed,
            last_cut_at=now,
            retry_share=share,
            samples=(),
            window_at=None,
            ramping=False,
        )
    # Latency samples come from good answers only: an instant refusal says nothing about speed.
    if now < state.skip_until:
        return replace(state, smoothed_s=smoothed, retry_share=share)
    window_at = now if state.window_at is None else state.window_at
    samples = state.samples if len(state.samples) >= MAX_SAMPLES else (*state.samples, latency_s)
    state = replace(
        state, smoothed_s=smoothed, retry_share=share, samples=samples, window_at=window_at
    )
    enough = min(MIN_SAMPLES, max(1, state.current))
    if len(samples) < enough or now - window_at < state.last_median_s:
        return state
    median = statistics.median(samples)
    ended = after_window(state, median, settings)
    return replace(ended, samples=(), window_at=None, skip_until=now + median)


class LimitCell:
    """Where a limit lives between answers: one per dispatch, or one per endpoint and lane kept
    by the worker across batches and shared by its windows (they see the same consumer)."""

    def __init__(self, state: Limit | None = None) -> None:
        self.state = state
