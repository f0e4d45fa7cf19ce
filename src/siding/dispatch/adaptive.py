"""Adaptive concurrency: a limit on sends in flight, between a floor and the max, that steers the
consumer's answer latency towards a target (a gradient) and cuts on overload.

The reasoning (why a gradient, why the fast answers, why kept across batches) is in
docs/dispatch.md, "Adaptive concurrency".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from siding.errors import ConfigError
from siding.model import OutcomeKind


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    """``enabled=False`` keeps the limit fixed at ``max_in_flight``.

    Good answers (ACK or DEAD) are gathered in sample windows; a window's *fast latency* is its
    25th percentile (the consumer's own pace, not the slow messages'), its *spread* the 75th
    minus the 25th. With the baseline the lowest fast latency seen and ``target =
    latency_tolerance * baseline + spread`` (noise is not load), each window:

    - above the target: the limit is multiplied by ``target / fast`` (at most halved);
    - below it: the limit grows by up to ``increase * sqrt(limit)``, in proportion to how far
      below the target the fast latency is (nothing at the target, all of it at the baseline).

    Apart from the latency, a *cap* is multiplied by ``backoff_ratio`` at most once per smoothed
    latency on every BACKOFF answer, and on a RETRY (a timeout is a RETRY) once RETRYs are more
    than ``retry_share_to_cut`` of recent answers; it grows back by ``increase`` per good answer.
    The window sends at most the smaller of the two.
    """

    enabled: bool = True
    min_in_flight: int = 1
    latency_tolerance: float = 2.0
    increase: float = 1.0
    backoff_ratio: float = 0.5
    retry_share_to_cut: float = 0.25

    def __post_init__(self) -> None:
        if self.min_in_flight < 1:
            raise ConfigError("adaptive.min_in_flight", "must be at least 1")
        if self.increase <= 0:
            raise ConfigError("adaptive.increase", "must be positive")
        if not 0 < self.backoff_ratio < 1:
            raise ConfigError("adaptive.backoff_ratio", "must be between 0 and 1 (exclusive)")
        if not self.latency_tolerance > 1:
            raise ConfigError("adaptive.latency_tolerance", "must be above 1")
        if not 0 <= self.retry_share_to_cut <= 1:
            raise ConfigError("adaptive.retry_share_to_cut", "must be between 0 and 1")


_SMOOTHING = 0.2
# The share of RETRY answers is averaged over roughly the last 1 / _SHARE_SMOOTHING answers.
_SHARE_SMOOTHING = 0.05
# Timer noise: a baseline of a few microseconds must not make every answer look slow.
_SLACK_S = 0.001
# A sample window ends once it holds this many good answers and has lasted one fast latency (a
# percentile of fewer is noise); it keeps at most MAX_SAMPLES.
MIN_SAMPLES = 20
MAX_SAMPLES = 200
# The fast latency of a window: this percentile of its good answers' latencies.
FAST_PERCENTILE = 0.25
# How fast the answers' spread narrows after wider windows (over about five windows).
_SPREAD_SMOOTHING = 0.2
# One window's cut is at most this: a spike is not a reason to drop to the floor.
MAX_CUT = 0.5
# A ramp's round is judged once it holds this many good answers: its fast latency is then the
# second fastest of eight, which a few slow messages do not move.
RAMP_SAMPLES = 8
# While it ramps up, a full window doubles at least this often, answers or not: a slow consumer
# (or one whose calls get parked) must not hold a batch's records back, head-of-line, for as many
# of its latencies as the ramp has doublings.
RAMP_STALL_S = 0.1


@dataclass(frozen=True, slots=True)
class Limit:
    """The adaptive state. ``limit`` (the latency's) and ``cap`` (the overload cuts') are
    fractional; ``current`` is what the window uses. ``samples`` are the good answers' latencies
    of the sample window begun at ``window_at``; ``fast_s`` is the last window's fast latency,
    ``baseline_s`` the lowest one seen (or the consumer's own latency at the floor, once it got
    slower for good).

    While ``ramping``, the limit starts low and grows by one per answer (it doubles each round
    trip), and at least doubles every ``RAMP_STALL_S`` from ``(mark_at, mark)``, its last
    doubling; ``samples`` are then the current round's, begun at a limit of ``round_from``."""

    limit: float
    low: int
    high: int
    cap: float = math.inf
    baseline_s: float | None = None
    fast_s: float = 0.0
    spread_s: float = 0.0
    samples: tuple[float, ...] = ()
    window_at: float | None = None
    skip_until: float = -math.inf
    smoothed_s: float | None = None
    last_cut_at: float | None = None
    retry_share: float = 0.0
    ramping: bool = False
    round_from: float = 0.0
    mark_at: float | None = None
    mark: float = 0.0

    @property
    def current(self) -> int:
        return max(self.low, min(self.high, math.floor(min(self.limit, self.cap))))


def initial_limit(max_in_flight: int, settings: AdaptiveSettings, *, ramp: bool = False) -> Limit:
    """Without ``ramp``, start at the top (a dispatch that keeps no limit: tools, tests). With
    it, start at the floor and ramp up, so that the baseline is measured below the consumer's
    knee: the answers of a window that starts at the top are already slow."""
    low = min(settings.min_in_flight, max_in_flight)
    if not (ramp and settings.enabled and low < max_in_flight):
        return Limit(float(max_in_flight), low, max_in_flight)
    return Limit(float(low), low, max_in_flight, ramping=True, round_from=float(low))


def rebound(state: Limit | None, max_in_flight: int, settings: AdaptiveSettings) -> Limit:
    """A state kept from an earlier batch (``None``: none, so a fresh limit that ramps up),
    under this batch's bounds (the route's limits, its task count or its parked calls may have
    changed since). The latency's limit goes on (a ramp that has no baseline yet starts again
    from the floor); the overload cuts' cap starts afresh with each batch, as it always did, and
    so does the sample window (its first answers, from a consumer the last batch left idle, are
    the ones that show its unloaded latency)."""
    if state is None or not settings.enabled or (state.ramping and state.baseline_s is None):
        return initial_limit(max_in_flight, settings, ramp=True)
    low = min(settings.min_in_flight, max_in_flight)
    limit = max(float(low), min(float(max_in_flight), state.limit))
    return replace(
        state,
        limit=limit,
        low=low,
        high=max_in_flight,
        cap=math.inf,
        last_cut_at=None,
        samples=(),
        window_at=None,
        skip_until=-math.inf,
        ramping=state.ramping,
        round_from=limit,
        mark_at=None,
    )


def percentile(samples: tuple[float, ...], share: float) -> float:
    """Pure: the ``share`` percentile of ``samples`` (nearest rank below; at least one)."""
    ordered = sorted(samples)
    return ordered[math.floor(share * (len(ordered) - 1))]


def target_s(state: Limit, baseline_s: float, settings: AdaptiveSettings) -> float:
    """The latency the limit steers to: the tolerance times the baseline, plus the answers'
    ordinary spread (a consumer whose latency is noisy is not loaded by its noise)."""
    return settings.latency_tolerance * baseline_s + state.spread_s + _SLACK_S


def after_window(
    state: Limit, fast_s: float, settings: AdaptiveSettings, spread_s: float = 0.0
) -> Limit:
    """Pure: the limit and the baseline after a sample window whose fast latency was ``fast_s``
    and whose spread (75th minus 25th percentile) was ``spread_s``."""
    # The spread follows a wider one at once (noise is not load) and a narrower one slowly.
    smoothed = state.spread_s + _SPREAD_SMOOTHING * (spread_s - state.spread_s)
    state = replace(state, spread_s=max(spread_s, smoothed))
    baseline = fast_s if state.baseline_s is None else min(state.baseline_s, fast_s)
    target = target_s(state, baseline, settings)
    if fast_s > target:
        if state.limit <= state.low:
            # Sending less is not possible: this latency is the consumer's own now (it got
            # slower for good, or every call got heavier). It becomes the baseline.
            return replace(state, baseline_s=fast_s, fast_s=fast_s)
        limit = max(float(state.low), state.limit * max(MAX_CUT, target / fast_s))
        return replace(state, limit=limit, baseline_s=baseline, fast_s=fast_s)
    room = min(1.0, (target - fast_s) / (target - baseline))
    step = settings.increase * room * math.sqrt(max(1.0, state.limit))
    limit = min(float(state.high), state.limit + step)
    return replace(state, limit=limit, baseline_s=baseline, fast_s=fast_s)


def after_round(
    state: Limit, samples: tuple[float, ...], now: float, settings: AdaptiveSettings
) -> Limit:
    """Pure: a ramp after a round of good answers that took ``samples``. When its fast latency
    is under the target the ramp goes on (a new round from the limit it reached); above it, the
    ramp ends: the limit is the round's starting one, cut as a window's would be, and the next
    sample window skips the answers of calls sent under the ramp (as slow as its slowest)."""
    fast_s = percentile(samples, FAST_PERCENTILE)
    spread_s = percentile(samples, 0.75) - fast_s
    state = replace(state, samples=())
    if state.baseline_s is None or fast_s < state.baseline_s:
        # The consumer's noise is measured with its baseline: a later round's spread may be
        # widened by the load the ramp is looking for.
        state = replace(state, baseline_s=fast_s, spread_s=spread_s)
    baseline = state.baseline_s
    assert baseline is not None
    target = target_s(state, baseline, settings)
    if fast_s <= target:
        # A round begun at the top ends the ramp: the baseline is measured.
        return replace(
            state, fast_s=fast_s, round_from=state.limit, ramping=state.round_from < state.high
        )
    limit = max(float(state.low), state.round_from * max(MAX_CUT, target / fast_s))
    return replace(
        state,
        limit=min(state.limit, limit),
        baseline_s=baseline,
        fast_s=fast_s,
        ramping=False,
        window_at=None,
        skip_until=now + max(samples),
    )


def ramp_if_stalled(state: Limit, now: float) -> tuple[Limit, float | None]:
    """Pure: a ramping limit (whose window is full) that has not doubled for ``RAMP_STALL_S``
    doubles now (from where it was then); with the seconds until it would next, or ``None``
    when it does not ramp (any more, or at all)."""
    if not state.ramping or state.limit >= state.high:
        return state, None
    if state.mark_at is None:
        return replace(state, mark_at=now, mark=state.limit), RAMP_STALL_S
    due = state.mark_at + RAMP_STALL_S
    if now < due:
        return state, due - now
    limit = min(float(state.high), max(state.limit, 2 * state.mark))
    return replace(state, limit=limit, mark_at=now, mark=limit), RAMP_STALL_S


def _ramp(
    state: Limit, kind: OutcomeKind, latency_s: float, now: float, settings: AdaptiveSettings
) -> Limit:
    """One answer (not an overload) while the limit ramps: one more call (the limit doubles
    each round trip) and, for a good answer, a sample of the round."""
    state = replace(state, limit=min(float(state.high), state.limit + 1))
    if state.mark_at is not None and state.limit >= 2 * state.mark:
        state = replace(state, mark_at=now, mark=state.limit)  # the answers doubled it
    if kind is OutcomeKind.RETRY:
        return state
    samples = (*state.samples, latency_s)
    state = replace(state, samples=samples)
    if len(samples) < RAMP_SAMPLES:
        return state
    return after_round(state, samples, now, settings)


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
    state = replace(state, smoothed_s=smoothed, retry_share=share)
    overloaded = kind is OutcomeKind.BACKOFF or (is_retry and share > settings.retry_share_to_cut)
    if overloaded:
        if state.last_cut_at is not None and now - state.last_cut_at < smoothed:
            return state
        cut = max(float(state.low), min(state.limit, state.cap) * settings.backoff_ratio)
        # A cut starts a new sample window (or round): the old one measured another limit.
        return replace(
            state, cap=cut, last_cut_at=now, samples=(), window_at=None, round_from=state.limit
        )
    if not is_retry and state.cap < state.high:
        state = replace(state, cap=state.cap + settings.increase)
    if state.ramping:
        return _ramp(state, kind, latency_s, now, settings)
    if is_retry or now < state.skip_until:
        # A RETRY says nothing about speed; answers just after a window are of calls sent
        # under the limit before it.
        return state
    window_at = now if state.window_at is None else state.window_at
    samples = state.samples if len(state.samples) >= MAX_SAMPLES else (*state.samples, latency_s)
    state = replace(state, samples=samples, window_at=window_at)
    if len(samples) < MIN_SAMPLES or now - window_at < state.fast_s:
        return state
    fast = percentile(samples, FAST_PERCENTILE)
    spread = percentile(samples, 0.75) - fast
    ended = after_window(state, fast, settings, spread)
    return replace(ended, samples=(), window_at=None, skip_until=now + fast)
