"""Pure measurements over what a simulated consumer recorded (no I/O)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from siding.devkit.sim_consumer import Behaviour, Received, plan

Delay = Callable[[Received], float]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0-100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def first_receipts(records: Iterable[Received]) -> dict[str, Received]:
    """Each delivery id's first attempt as the consumer received it (redeliveries dropped)."""
    first: dict[str, Received] = {}
    for r in records:
        seen = first.get(r.delivery_id)
        if seen is None or (r.attempt, r.received_s) < (seen.attempt, seen.received_s):
            first[r.delivery_id] = r
    return first


def done_span_s(records: Iterable[Received], delay_s: Delay) -> float:
    """Seconds from the first receipt to the moment the last message was done (its receipt
    plus the processing time the consumer spent on it)."""
    firsts = list(records)
    if not firsts:
        raise ValueError("a span needs at least one receipt")
    start = min(r.received_s for r in firsts)
    return max(r.received_s + delay_s(r) for r in firsts) - start


def rate_per_s(records: Iterable[Received], delay_s: Delay) -> float:
    """Distinct messages per second over ``done_span_s`` of their first attempts."""
    firsts = first_receipts(records).values()
    span = done_span_s(firsts, delay_s)
    return len(firsts) / span if span > 0 else math.inf


def planned_delay(behaviour: Behaviour) -> Delay:
    """How long the simulated consumer worked on a delivery, from its deterministic plan."""
    return lambda r: plan(behaviour, r.delivery_id, r.attempt).delay_s


def latencies_ms(records: Iterable[Received], ids: set[str] | None = None) -> list[float]:
    """End-to-end latency (produce timestamp -> consumer receipt) of each id's first attempt."""
    return [
        (r.received_s - r.produced_s) * 1000
        for r in first_receipts(records).values()
        if r.produced_s is not None and (ids is None or r.delivery_id in ids)
    ]


def extrapolated_seconds(count: int, measured_rate_per_s: float) -> float:
    """How long ``count`` messages take at a rate measured over a shorter window."""
    if measured_rate_per_s <= 0:
        raise ValueError("a rate must be positive to extrapolate from it")
    return count / measured_rate_per_s


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


@dataclass(frozen=True, slots=True)
class Redeliveries:
    """Receipts beyond each message's first, as the consumer saw them.

    ``retry_attempts`` carried an attempt number the consumer had not seen for that message (a
    retry lane's attempt); ``same_attempt`` repeated one it had (the same attempt sent again).
    """

    messages: int
    receipts: int
    retry_attempts: int
    same_attempt: int


def redeliveries(records: Iterable[Received], ids: set[str] | None = None) -> Redeliveries:
    """Messages received twice or more (every attempt counts), and their extra receipts."""
    by_id: dict[str, list[Received]] = defaultdict(list)
    for r in records:
        if ids is None or r.delivery_id in ids:
            by_id[r.delivery_id].append(r)
    messages = retry_attempts = same_attempt = 0
    for receipts in by_id.values():
        if len(receipts) < 2:
            continue
        messages += 1
        ordered = sorted(receipts, key=lambda r: (r.received_s, r.attempt))
        seen = {ordered[0].attempt}
        for r in ordered[1:]:
            if r.attempt in seen:
                same_attempt += 1
            else:
                retry_attempts += 1
                seen.add(r.attempt)
    return Redeliveries(messages, retry_attempts + same_attempt, retry_attempts, same_attempt)


def rounded_percentile(values: Sequence[float], q: float) -> float | None:
    """``percentile`` to 0.1, or None for no values."""
    return round(percentile(values, q), 1) if values else None


def delivery_summary(
    records: Sequence[Received],
    *,
    fast: set[str],
    expected: set[str],
    attempts_known: bool = True,
) -> dict[str, Any]:
    """Fast messages' latency percentiles and what was delivered more than once, for one run.

    ``expected``: the ids of the measured traffic; ``fast``: those expected to be quick.
    ``attempts_known`` is False for a system that does not tell the consumer its attempt: its
    redeliveries are counted, not split.
    """
    lat = latencies_ms(records, fast)
    again = redeliveries(records, expected)
    delivered = len(expected.intersection(first_receipts(records)))
    return {
        "fast_p50_ms": rounded_percentile(lat, 50),
        "fast_p99_ms": rounded_percentile(lat, 99),
        "fast_messages": len(lat),
        "delivered": delivered,
        "expected": len(expected),
        "delivered_more_than_once": again.messages,
        "redeliveries": again.receipts,
        "redeliveries_retry_attempts": again.retry_attempts if attempts_known else None,
        "redeliveries_same_attempt": again.same_attempt if attempts_known else None,
    }


@dataclass(frozen=True, slots=True)
class Drain:
    """How one system drained a backlog: ``messages`` distinct ones done in ``seconds`` (first
    receipt to the last one done) or ``seconds_with_start`` (from the system's start), using
    ``cpu_s`` CPU seconds of its process tree over the drain (``cpu_s_with_start`` from its
    start)."""

    messages: int
    seconds: float
    seconds_with_start: float
    cpu_s: float
    cpu_s_with_start: float

    @property
    def msgs_per_s(self) -> float | None:
        return round(self.messages / self.seconds, 1) if self.seconds > 0 else None

    @property
    def cpu_s_per_1000(self) -> float | None:
        return per_1000(self.cpu_s, self.messages)

    @property
    def cpu_s_per_1000_with_start(self) -> float | None:
        return per_1000(self.cpu_s_with_start, self.messages)


def per_1000(cpu_s: float, messages: int) -> float | None:
    """CPU seconds per 1,000 messages, to 0.001; None for no messages."""
    return round(cpu_s / messages * 1000, 3) if messages > 0 else None


def drain(
    records: Iterable[Received],
    delay_s: Delay,
    started_s: float,
    cpu_s: float,
    cpu_s_with_start: float,
) -> Drain:
    """The drain of ``records`` (every receipt; each message counted once, at its first) by a
    system started at ``started_s`` (the consumer's clock, as ``received_s``)."""
    firsts = list(first_receipts(records).values())
    if not firsts:
        return Drain(0, 0.0, 0.0, cpu_s, cpu_s_with_start)
    done = max(r.received_s + delay_s(r) for r in firsts)
    span = done_span_s(firsts, delay_s)
    return Drain(len(firsts), span, done - started_s, cpu_s, cpu_s_with_start)
