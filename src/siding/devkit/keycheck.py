"""Pure: key order as a consumer saw it, from a simulated consumer's record of deliveries.

Per key, no message may be ACKed for the first time before an earlier message of its key was;
a redelivery after a crash does not count (the first ACK already happened).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from siding.devkit.sim_consumer import Behaviour, Fate, Received, answer


def first_acks(records: Iterable[Received], behaviour: Behaviour) -> dict[str, Received]:
    """Each message's first receipt that the consumer answered ACK, in record order."""
    firsts: dict[str, Received] = {}
    for r in records:
        if r.delivery_id in firsts:
            continue
        if answer(behaviour, r.delivery_id, r.attempt, r.seq).fate is Fate.ACK:
            firsts[r.delivery_id] = r
    return firsts


def order_violations(records: Iterable[Received], behaviour: Behaviour, keys: int) -> list[str]:
    """Messages whose first ACK came before the first ACK of an earlier message of their key
    (the producer's keys: ``k{seq % keys}``), as readable lines; empty when order held."""
    by_key: dict[int, list[Received]] = defaultdict(list)
    for r in first_acks(records, behaviour).values():
        if r.seq is not None:
            by_key[r.seq % keys].append(r)
    out = []
    for key, acked in sorted(by_key.items()):
        latest: Received | None = None
        for r in sorted(acked, key=lambda r: r.seq or 0):
            if latest is not None and r.received_s < latest.received_s:
                out.append(f"k{key}: seq {r.seq} ACKed before seq {latest.seq}")
            if latest is None or r.received_s > latest.received_s:
                latest = r
    return out
