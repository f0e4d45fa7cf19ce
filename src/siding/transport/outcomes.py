"""How a transport's answer becomes an outcome: one pure function per transport, in one place.

The tables follow DESIGN.md ("The delivery contract"); docs/contract.md explains each row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

import grpc

from siding.model import ACK, DeadClass, DeadKind, Outcome, OutcomeKind, Result, Verdict

TOO_LARGE = DeadClass(DeadKind.TOO_LARGE)

# CANCELLED: the server dropped the call (overloaded past its concurrency cap, or shutting down);
# the message itself is not to blame.
_GRPC_BACKOFF = frozenset(
    {
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    }
)
# The endpoint is misconfigured or was deployed wrong: every message would fail the same way,
# so this is the circuit breaker's business, never the DLQ's.
_GRPC_MISCONFIGURED = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_GRPC_DEAD = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_TOO_LARGE = "larger than max"
_SIZES = re.compile(r"larger than max \((\d+) vs\. (\d+)\)")
# UNAVAILABLE with these details never reached the consumer (nothing to suspect); any other
# UNAVAILABLE ("Socket closed", "Connection reset") broke a call that was already out.
_NOT_CONNECTED = (
    "failed to connect",
    "connections to all backends failing",
    "dns resolution failed",
    "name resolution",
    "connection refused",
    "no route to host",
    "unable to resolve",
)
# gRPC's own words for a connection that went away under a call (a consumer that returns
# UNAVAILABLE itself, say for a dependency that is down, writes its own details).
_WENT_AWAY = (
    "socket closed",
    "connection reset",
    "stream removed",
    "broken pipe",
    "goaway",
    "end of tcp stream",
    "connection closed",
)
# ALREADY_EXISTS: the consumer has processed this delivery id before; that is done.
_GRPC_ACK = frozenset({grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS})


def outcome_from_result(result: Result) -> Outcome:
    """A consumer's explicit ``Result`` message."""
    if result.verdict is Verdict.ACK:
        return Outcome(OutcomeKind.ACK, outputs=result.outputs) if result.outputs else ACK
    if result.verdict is Verdict.DEAD:
        reason = result.reason or "consumer answered DEAD"
        return Outcome(OutcomeKind.DEAD, reason, dead_class=DeadClass(DeadKind.CONSUMER))
    return Outcome(
        OutcomeKind.RETRY, result.reason or "consumer answered RETRY", result.retry_after_s
    )


def outcome_from_grpc(
    code: grpc.StatusCode, details: str = "", result: Result | None = None
) -> Outcome:
    """A gRPC call's final status, with the ``Result`` message when the call returned one."""
    if code is grpc.StatusCode.OK and result is not None:
        return outcome_from_result(result)
    reason = f"grpc {code.name}" + (f": {details}" if details else "")
    if code in _GRPC_ACK:
        return ACK
    if code in _GRPC_DEAD:
        return Outcome(
            OutcomeKind.DEAD, reason, dead_class=DeadClass.of_status(f"grpc {code.name}")
        )
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in details.lower():
        # gRPC's own size limit ("Received message larger than max"): this message will never
        # fit, however long we wait; every other RESOURCE_EXHAUSTED means "slow down".
        return too_large(reason)
    if code is grpc.StatusCode.UNAVAILABLE and went_away(details):
        return lost(reason)
    if code in _GRPC_BACKOFF or code in _GRPC_MISCONFIGURED:
        return Outcome(OutcomeKind.BACKOFF, reason)
    # DEADLINE_EXCEEDED and everything else (UNKNOWN, INTERNAL, ABORTED): retry lane.
    return Outcome(OutcomeKind.RETRY, reason)


def outcome_from_http(
    status: int, headers: Mapping[str, str] | None = None, now_s: float | None = None
) -> Outcome:
    """An HTTP webhook's response status (and its ``Retry-After`` header, when present)."""
    reason = f"http {status}"
    if 200 <= status < 300:
        return ACK
    if status in (429, 503):
        retry_after = parse_retry_after((headers or {}).get("retry-after"), now_s)
        return Outcome(OutcomeKind.BACKOFF, reason, retry_after)
    if status == 410:
        return Outcome(OutcomeKind.GONE, "http 410: endpoint gone")
    if 300 <= status < 400:
        return Outcome(OutcomeKind.BACKOFF, f"{reason}: redirects are not followed")
    if status in (401, 403):
        return Outcome(OutcomeKind.BACKOFF, f"{reason}: endpoint refused our credentials")
    if status == 408 or status >= 500:
        return Outcome(OutcomeKind.RETRY, reason)
    if status == 413:
        return Outcome(
            OutcomeKind.DEAD, f"{reason}: message too large for the endpoint", dead_class=TOO_LARGE
        )
    if 400 <= status < 500:
        return Outcome(OutcomeKind.DEAD, reason, dead_class=DeadClass.of_status(reason))
    return Outcome(OutcomeKind.RETRY, f"{reason}: unexpected status")


def too_large(reason: str) -> Outcome:
    """The consumer's transport refused the delivery for its size: permanent, to the DLQ."""
    return Outcome(OutcomeKind.DEAD, f"message too large: {reason}", dead_class=TOO_LARGE)


def oversize(details: str) -> tuple[int, int] | None:
    """(message bytes, limit bytes) from gRPC's "larger than max (N vs. M)", if it says so."""
    match = _SIZES.search(details)
    return (int(match.group(1)), int(match.group(2))) if match else None


def never_connected(details: str) -> bool:
    """Whether a gRPC UNAVAILABLE says the call never reached the consumer."""
    text = details.lower()
    return any(marker in text for marker in _NOT_CONNECTED)


def went_away(details: str) -> bool:
    """Whether a gRPC UNAVAILABLE says the connection broke under a call that was out."""
    text = details.lower()
    return not never_connected(text) and any(marker in text for marker in _WENT_AWAY)


def lost(reason: str) -> Outcome:
    """The consumer went away with the delivery in its hands (stream broken, connection closed or
    reset after sending): no attempt is spent, and the dispatcher suspects the message."""
    return Outcome(OutcomeKind.BACKOFF, f"consumer lost after sending: {reason}", lost=True)


def outcome_from_timeout(deadline_s: float) -> Outcome:
    """No answer within the lane's per-attempt deadline: move on to a retry lane."""
    return Outcome(OutcomeKind.RETRY, f"deadline of {deadline_s:g}s exceeded", no_answer=True)


UNREACHABLE = "endpoint unreachable"


def outcome_from_connection_error(error: BaseException) -> Outcome:
    """The endpoint could not be reached at all: the breaker's business, not an attempt."""
    text = str(error) or type(error).__name__
    return Outcome(OutcomeKind.BACKOFF, f"{UNREACHABLE}: {text}")


def never_reached(outcome: Outcome) -> bool:
    """Whether a BACKOFF says the delivery never reached the consumer (refused, unreachable,
    or still queued when the connection ended): sending it elsewhere cannot make a duplicate."""
    if outcome.kind is not OutcomeKind.BACKOFF or outcome.lost:
        return False
    reason = outcome.reason
    if reason.startswith(UNREACHABLE):
        return True
    return reason.startswith("grpc UNAVAILABLE") and never_connected(reason)


def not_there(outcome: Outcome) -> bool:
    """Whether a BACKOFF says the consumer is not there (it went away with the call, or
    nothing accepted the connection) rather than "slow down": its breaker probes at a steady
    pace instead of doubling (docs/dispatch.md, "Circuit breaker")."""
    return outcome.lost or never_reached(outcome)


def outcome_from_lost_connection(error: BaseException) -> Outcome:
    """The connection broke after the delivery was sent: the consumer may have crashed on this
    very message (a suspect, see ``lost``)."""
    return lost(str(error) or type(error).__name__)


def parse_retry_after(value: str | None, now_s: float | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; ``None`` when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None or now_s is None:
        return None
    return max(0.0, when.timestamp() - now_s)
