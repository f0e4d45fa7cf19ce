"""Pure: what happens to a record after an outcome — done, next lane, DLQ, back off, or stop.

Attempts are counted across lanes: attempt 1 is the main lane (lane 0), then retry lane k takes
``lanes[k-1].attempts`` attempts, so a record gets at most ``1 + sum(lane.attempts)`` attempts.
BACKOFF redelivers in place and does not spend an attempt (a consumer that is down is not a
poison pill). docs/configuration.md ("Retries") describes the same rules for users.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from siding.model import Lane, Outcome, OutcomeKind, Output

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


@dataclass(frozen=True, slots=True)
class Done:
    """ACK: the record is finished once ``outputs`` (if any) are written (docs/outputs.md)."""

    outputs: tuple[Output, ...] = ()


@dataclass(frozen=True, slots=True)
class ToLane:
    """Send the record to retry lane ``lane`` for ``attempt``, due at ``not_before_ms``."""

    lane: int
    attempt: int
    not_before_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class ToDlq:
    """Write the record to the dead-letter queue."""

    reason: str


@dataclass(frozen=True, slots=True)
class Backoff:
    """Deliver the same attempt again after ``delay_s``; the endpoint, not the record, failed."""

    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The endpoint is gone for good: stop the route and alert."""

    reason: str


Step = Done | ToLane | ToDlq | Backoff | Stop


def max_attempts(lanes: Sequence[Lane]) -> int:
    """How many attempts a record gets in all: one in the main lane plus every lane's."""
    return 1 + sum(lane.attempts for lane in lanes)


def lane_for_attempt(attempt: int, lanes: Sequence[Lane]) -> int:
    """The lane (0 = main) that makes global attempt ``attempt`` (1-based)."""
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    last = 1
    if attempt <= last:
        return 0
    for k, lane in enumerate(lanes, start=1):
        last += lane.attempts
        if attempt <= last:
            return k
    raise ValueError(f"attempt {attempt} is past the last of {last} attempts")


def deadline_for(lane: int, main_deadline_s: float, lanes: Sequence[Lane]) -> float:
    """The per-attempt deadline in ``lane`` (0 = main)."""
    if lane == 0:
        return main_deadline_s
    if not 1 <= lane <= len(lanes):
        raise ValueError(f"lane {lane} does not exist (there are {len(lanes)} retry lanes)")
    return lanes[lane - 1].deadline_s


def backoff_delay(
    consecutive: int,
    rand: float | None = None,
    *,
    base_s: float = BACKOFF_BASE_S,
    cap_s: float = BACKOFF_CAP_S,
) -> float:
    """Pause after the ``consecutive``-th BACKOFF in a row: exponential, capped, full jitter.

    ``rand`` is a random number in [0, 1) supplied by the caller; ``None`` means no jitter
    (the upper bound).
    """
    if consecutive < 1:
        raise ValueError(f"consecutive must be >= 1, got {consecutive}")
    if rand is not None and not 0 <= rand < 1:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    ceiling = min(cap_s, base_s * 2.0 ** min(consecutive - 1, 64))
    return ceiling if rand is None else ceiling * rand


def capped_retry_after(retry_after_s: float | None, max_retry_after_s: float) -> float:
    """A consumer's Retry-After in seconds, honoured up to the route's cap; 0 when absent."""
    if retry_after_s is None:
        return 0.0
    return min(max(retry_after_s, 0.0), max_retry_after_s)


def next_step(
    outcome: Outcome,
    attempt: int,
    lanes: Sequence[Lane],
    now_ms: int,
    *,
    max_retry_after_s: float,
    consecutive_backoffs: int = 1,
    rand: float | None = None,
) -> Step:
    """What to do with a record whose attempt ``attempt`` ended in ``outcome``.

    ``consecutive_backoffs`` and ``rand`` only matter for BACKOFF without a Retry-After. An
    ``attempt`` past the maximum (the lanes were shortened since) counts as exhausted.
    """
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    kind = outcome.kind
    if kind is OutcomeKind.ACK:
        return Done(outcome.outputs)
    if kind is OutcomeKind.DEAD:
        return ToDlq(outcome.reason or "consumer answered DEAD")
    if kind is OutcomeKind.GONE:
        return Stop(outcome.reason or "endpoint gone")
    if kind is OutcomeKind.BACKOFF:
        reason = outcome.reason or "endpoint unavailable"
        if outcome.retry_after_s is not None:
            return Backoff(capped_retry_after(outcome.retry_after_s, max_retry_after_s), reason)
        return Backoff(backoff_delay(consecutive_backoffs, rand), reason)
    reason = outcome.reason or "consumer answered RETRY"
    following = attempt + 1
    if following > max_attempts(lanes):
        plural = "s" if attempt != 1 else ""
        return ToDlq(f"retries exhausted after {attempt} attempt{plural}: {reason}")
    lane = lane_for_attempt(following, lanes)
    wait_s = max(
        lanes[lane - 1].delay_s, capped_retry_after(outcome.retry_after_s, max_retry_after_s)
    )
    return ToLane(lane, following, now_ms + _to_ms(wait_s), reason)


def _to_ms(seconds: float) -> int:
    # Round away float noise first (0.1 * 1000 is 100.00000000000001), then never wait less.
    return math.ceil(round(seconds * 1000, 6))
