"""Adaptive concurrency: a limit on sends in flight, between a floor and the max, cut on overload.
By default an AIMD limit that starts at the max; with ``latency`` on (opt-in) it also steers the
consumer's answer latency towards a target (a gradient), starting at the max and descending.

The reasoning (why opt-in, why a gradient, why the fast answers, why kept across batches) is in
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

    With ``latency`` off (the default), the AIMD rule: each window starts at ``max_in_flight``;
    the limit grows by ``increase`` per good answer (ACK or DEAD) while the latency stays within
    ``latency_tolerance`` times its observed floor, and the overload cuts below act on the limit
    itself. Latency never cuts it.

    With ``latency`` on, the gradient rule. Good answers (ACK or DEAD) are gathered in sample
    windows; a window's *fast latency* is its 25th percentile (the consumer's own pace, not the
    slow messages'), its *spread* the 75th minus the 25th. With the baseline the lowest fast
    latency seen and ``target = latency_tolerance * baseline + spread`` (noise is not load), each
    window:

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
    latency: bool = False
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
        if self.latency_tolerance < 1:
            raise ConfigError("adaptive.latency_tolerance", "must be at least 1")
        if self.latency and not self.latency_tolerance > 1:
            raise ConfigError("adaptive.latency_tolerance", "must be above 1 with latency on")
        if not 0 <= self.retry_share_to_cut <= 1:
            raise ConfigError("adaptive.retry_share_to_cut", "must be between 0 and 1")


# The AIMD rule: how fast the latency floor follows latencies above it: slowly, so that a consumer
# that got slower for good does not stop growth forever, while noise does not raise it.
_FLOOR_DRIFT = 0.01
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
# A round of the descent is judged once it holds this many good answers: its fast latency is then
# the second fastest of eight, which a few slow messages do not move.
ROUND_SAMPLES = 8
# The descent halves the window again while halving paid: while a round's fast latency is below
# this share of the last round's. Past its knee a consumer's latency follows its calls (halving
# them about halves it, or more: 0.2-0.45 for the knee model); below it, it does not move (1).
DESCENT_GAIN = 0.75


@dataclass(frozen=True, slots=True)
class Limit:
    """The adaptive state. ``limit`` (the latency's) and ``cap`` (the overload cuts') are
    fractional; ``current`` is what the window uses. The AIMD rule (``latency`` off) moves
    ``limit`` only, and keeps ``floor_s``, the lowest good latency drifting up; the rest is the
    gradient's. ``samples`` are the good answers' latencies
    of the sample window begun at ``window_at``; ``fast_s`` is the last window's fast latency,
    ``baseline_s`` the lowest one seen (or the consumer's own latency at the floor, once it got
    slower for good).

    While ``descending`` (a fresh limit: it starts at the top), ``samples`` are the current
    round's: answers of calls sent from ``judge_from`` on; ``round_peak`` is the most calls the
    window had out meanwhile, ``rounds`` the rounds judged so far, and ``last_fast_s`` and
    ``last_limit`` the fast latency and the limit of the round before."""

    limit: float
    low: int
    high: int
    cap: float = math.inf
    floor_s: float | None = None
    baseline_s: float | None = None
    fast_s: float = 0.0
    spread_s: float = 0.0
    samples: tuple[float, ...] = ()
    window_at: float | None = None
    skip_until: float = -math.inf
    smoothed_s: float | None = None
    last_cut_at: float | None = None
    retry_share: float = 0.0
    descending: bool = False
    rounds: int = 0
    judge_from: float = -math.inf
    round_peak: int = 0
    last_fast_s: float | None = None
    last_limit: float = 0.0

    @property
    def current(self) -> int:
        return max(self.low, min(self.high, math.floor(min(self.limit, self.cap))))


def initial_limit(
    max_in_flight: int, settings: AdaptiveSettings, *, descend: bool = False
) -> Limit:
    """A fresh limit: at the top, so that a worker's first calls go out together. With the
    latency limit on and ``descend`` (a limit the worker keeps: a route's windows) it then looks
    for the consumer's unloaded latency by halving the window while halving makes the fast
    answers faster; without (a dispatch that keeps no limit: tools, tests) it takes the first
    window's as its baseline."""
    low = min(settings.min_in_flight, max_in_flight)
    top = float(max_in_flight)
    return Limit(
        top,
        low,
        max_in_flight,
        descending=descend and settings.enabled and settings.latency and low < max_in_flight,
        last_limit=top,
    )


def rebound(state: Limit | None, max_in_flight: int, settings: AdaptiveSettings) -> Limit:
    """A state kept from an earlier batch (``None``: none, so a fresh limit at the top that
    descends), under this batch's bounds (the route's limits, its task count or its parked calls
    may have changed since). The latency's limit goes on, and a descent with it; the overload
    cuts' cap starts afresh with each batch, as it always did, and so do the sample window and
    the descent's round (its first answers, from a consumer the last batch left idle, are the
    ones that show its unloaded latency). With the latency limit off nothing goes on: each
    batch's window starts at the top, as the AIMD rule always did."""
    if state is None or not settings.enabled or not settings.latency:
        return initial_limit(max_in_flight, settings, descend=True)
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
        judge_from=-math.inf,
        round_peak=0,
        last_limit=max(float(low), min(float(max_in_flight), state.last_limit)),
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


def after_round(state: Limit, samples: tuple[float, ...], now: float) -> Limit:
    """Pure: a descent after a round of good answers that took ``samples``.

    The first round is a burst at the top (every call sent at once, on new connections): its
    fast latency may be the lowest yet (a baseline), never the one the next is compared with.
    The second halves the window (what it had out, at most the limit). From the third on, a
    round whose fast latency fell below ``DESCENT_GAIN`` of the last one's says the halving
    paid, and the window is halved again; one that did not fall ends the descent at the limit
    before this halving. A halving that paid at the floor ends it there. The baseline is the
    lowest round's fast latency, with that round's spread (a later round's may be widened by
    load), and the gradient goes on from there."""
    fast_s = percentile(samples, FAST_PERCENTILE)
    spread_s = percentile(samples, 0.75) - fast_s
    out = max(1.0, min(state.limit, float(state.round_peak or state.limit)))
    state = replace(state, samples=(), round_peak=0, judge_from=now, rounds=state.rounds + 1)
    if state.baseline_s is None or fast_s < state.baseline_s:
        state = replace(state, baseline_s=fast_s, spread_s=spread_s)
    if state.rounds == 1:
        return state
    if state.last_fast_s is None or fast_s < DESCENT_GAIN * state.last_fast_s:
        if state.limit > state.low:
            halved = max(float(state.low), out / 2)
            return replace(state, limit=halved, last_fast_s=fast_s, last_limit=state.limit)
        limit = state.limit
    else:
        limit = max(state.limit, state.last_limit)
    # The answers of calls sent under the last round's limit are not the gradient's samples.
    return replace(
        state,
        limit=min(float(state.high), limit),
        fast_s=fast_s,
        descending=False,
        window_at=None,
        skip_until=now + max(samples),
    )


def on_send(state: Limit, out: int) -> Limit:
    """Pure: the window has ``out`` calls out, this send included (a descent's round notes its
    most)."""
    if not state.descending or out <= state.round_peak:
        return state
    return replace(state, round_peak=out)


def _descend(state: Limit, kind: OutcomeKind, latency_s: float, now: float) -> Limit:
    """One answer (not an overload) while the limit descends: a sample of the round when it is
    good and its call was sent in the round (one sent earlier met another load)."""
    if kind is OutcomeKind.RETRY or now - latency_s < state.judge_from:
        return state
    return replace(state, samples=(*state.samples, latency_s))


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
    if not settings.latency:
        # One ``replace`` per answer: it is the costliest line here (a new 24-field state).
        limit, floor_s, cut_at = _aimd(
            state, kind, latency_s, now, settings, smoothed_s=smoothed, overloaded=overloaded
        )
        return replace(
            state,
            smoothed_s=smoothed,
            retry_share=share,
            limit=limit,
            floor_s=floor_s,
            last_cut_at=cut_at,
        )
    state = replace(state, smoothed_s=smoothed, retry_share=share)
    if overloaded:
        if state.last_cut_at is not None and now - state.last_cut_at < smoothed:
            return state
        cut = max(float(state.low), min(state.limit, state.cap) * settings.backoff_ratio)
        # A cut starts a new sample window (or round): the old one measured another limit.
        return replace(
            state,
            cap=cut,
            last_cut_at=now,
            samples=(),
            window_at=None,
            judge_from=now,
            round_peak=0,
        )
    if not is_retry and state.cap < state.high:
        state = replace(state, cap=state.cap + settings.increase)
    if state.descending:
        state = _descend(state, kind, latency_s, now)
        if len(state.samples) < ROUND_SAMPLES:
            return state
        return after_round(state, state.samples, now)
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


def _aimd(
    state: Limit,
    kind: OutcomeKind,
    latency_s: float,
    now: float,
    settings: AdaptiveSettings,
    *,
    smoothed_s: float,
    overloaded: bool,
) -> tuple[float, float | None, float | None]:
    """Pure: the AIMD rule (the latency limit off) after one answer that is not GONE
    (``smoothed_s``: the smoothed latency with it), as the state's new (limit, floor_s,
    last_cut_at): an overload halves the limit, at most once per smoothed latency; a RETRY that
    is not one moves nothing; a good answer within ``latency_tolerance`` times the floor grows
    it by ``increase``; a slower one leaves it."""
    unchanged = (state.limit, state.floor_s, state.last_cut_at)
    if overloaded:
        if state.last_cut_at is not None and now - state.last_cut_at < smoothed_s:
            return unchanged
        return max(float(state.low), state.limit * settings.backoff_ratio), state.floor_s, now
    if kind is OutcomeKind.RETRY:
        return unchanged
    # The floor comes from good answers only: an instant refusal says nothing about speed.
    floor = _next_floor(state.floor_s, latency_s)
    limit = state.limit
    if latency_s <= settings.latency_tolerance * floor + _SLACK_S:
        limit = min(float(state.high), limit + settings.increase)
    return limit, floor, state.last_cut_at


def _next_floor(floor_s: float | None, latency_s: float) -> float:
    if floor_s is None or latency_s <= floor_s:
        return latency_s
    return floor_s + _FLOOR_DRIFT * (latency_s - floor_s)
