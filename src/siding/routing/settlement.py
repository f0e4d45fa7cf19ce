"""Pure: the record that settles a parked call, keyed by its park token (docs/parking.md).

The park lane reads these before it looks at a parked record: an answered call is finished
from its answer, and the consumer is not asked again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from siding.model import DeadClass, Outcome, OutcomeKind
from siding.routing.producer import OutRecord


@dataclass(frozen=True, slots=True)
class Settlement:
    token: str
    outcome: Outcome
    answered_ms: int
    # Output records the worker wrote for this answer before the settlement (docs/outputs.md).
    outputs: int = 0


def settlement_record(topic: str, settlement: Settlement) -> OutRecord:
    outcome = settlement.outcome
    value = {
        "kind": outcome.kind.value,
        "reason": outcome.reason,
        "retry_after_s": outcome.retry_after_s,
        "no_answer": outcome.no_answer,
        "lost": outcome.lost,
        "dead_class": outcome.dead_class.label if outcome.dead_class is not None else None,
        "answered_ms": settlement.answered_ms,
        "outputs": settlement.outputs,
    }
    return OutRecord(
        topic, settlement.token.encode(), json.dumps(value, separators=(",", ":")).encode(), ()
    )


def tombstone(topic: str, token: str) -> OutRecord:
    """Forget a settlement once the park lane used it (the topic is compacted)."""
    return OutRecord(topic, token.encode(), None, ())


def decode(key: bytes, value: bytes) -> Settlement:
    data = json.loads(value)
    retry_after = data.get("retry_after_s")
    outcome = Outcome(
        OutcomeKind(data["kind"]),
        str(data.get("reason") or ""),
        retry_after_s=float(retry_after) if retry_after is not None else None,
        no_answer=bool(data.get("no_answer", False)),
        lost=bool(data.get("lost", False)),
        # Absent from a settlement written before classes were kept: the reason's text decides.
        dead_class=DeadClass.from_label(str(data.get("dead_class") or "")),
    )
    return Settlement(
        key.decode(),
        outcome,
        int(data.get("answered_ms") or 0),
        int(data.get("outputs") or 0),
    )
