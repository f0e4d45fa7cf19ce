"""Pure: the fate of a dead letter (merged or purged), kept in a compacted state topic.

Kafka cannot delete one record, so a letter is hidden by a fate record keyed by the letter's own
DLQ coordinates (``<dlq topic>/<partition>/<offset>``). A merged letter that dies again is a new
record at new coordinates, so it shows up (and can be merged) again. docs/dlq.md has the design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from siding.routing.producer import OutRecord


class Fate(Enum):
    MERGED = "merged"
    PURGED = "purged"


# The Spark schema of a fate record's value (see ``fate_value``).
VALUE_SCHEMA = "fate STRING, id STRING, died_at BIGINT, at BIGINT, by STRING, `to` STRING"


@dataclass(frozen=True, slots=True)
class LetterRef:
    """What identifies one dead letter: where it sits in the DLQ, and whose death it records."""

    dlq_topic: str
    partition: int
    offset: int
    delivery_id: str
    died_at_ms: int

    @property
    def coordinates(self) -> str:
        return f"{self.dlq_topic}/{self.partition}/{self.offset}"


def fate_value(ref: LetterRef, fate: Fate, *, at_ms: int, by: str, to: str = "") -> bytes:
    # id and died_at are checked on read: a DLQ topic deleted and created again reuses offsets.
    doc = {
        "fate": fate.value,
        "id": ref.delivery_id,
        "died_at": ref.died_at_ms,
        "at": at_ms,
        "by": by,
        "to": to,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def fate_record(
    state_topic: str, ref: LetterRef, fate: Fate, *, at_ms: int, by: str, to: str = ""
) -> OutRecord:
    value = fate_value(ref, fate, at_ms=at_ms, by=by, to=to)
    return OutRecord(state_topic, ref.coordinates.encode(), value, ())
