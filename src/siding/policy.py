"""Pure: what happens to a record after an outcome — done, next lane, DLQ, back off, or stop
(the step types are ``siding.steps``).

Attempts are counted across lanes: attempt 1 is the main lane (lane 0), then retry lane k takes
``lanes[k-1].attempts`` attempts, so a record gets at most ``1 + sum(lane.attempts)`` attempts.
BACKOFF redelivers in place and does not spend an attempt (a consumer that is down is not a
poison pill). docs/configuration.md ("Retries") describes the same rules for users.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from siding.model import DeadClass, DeadKind, Lane, Outcome, OutcomeKind
from siding.steps import Backoff, Decision, Done, Stop, ToDlq, ToLane

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


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
) -> Decision:
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
        # The class the transport read the answer with; none from a settlement written before
        # classes were kept (``siding.steps.reason_class`` then reads the reason's text).
        return ToDlq(outcome.reason or "consumer answered DEAD", outcome.dead_class)
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
        exhausted = DeadClass(DeadKind.RETRIES_EXHAUSTED)
        return ToDlq(f"retries exhausted after {attempt} attempt{plural}: {reason}", exhausted)
    lane = lane_for_attempt(following, lanes)
    wait_s = max(
        lanes[lane - 1].delay_s, capped_retry_after(outcome.retry_after_s, max_retry_after_s)
    )
    return ToLane(lane, following, now_ms + _to_ms(wait_s), reason)


def _to_ms(seconds: float) -> int:
    # Round away float noise first (0.1 * 1000 is 100.00000000000001), then never wait less.
    return math.ceil(round(seconds * 1000, 6))
