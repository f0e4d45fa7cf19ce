"""The DLQ-flood guard: a bad deploy must stop the route, not dead-letter the batch."""

from __future__ import annotations


def flood_exceeded(dead: int, total: int, ratio: float, min_batch: int) -> bool:
    """Whether ``dead`` out of ``total`` records is too large a share to dead-letter.

    Batches smaller than ``min_batch`` never trip it (a few poison pills in a small batch are
    normal); ``ratio >= 1`` turns it off.
    """
    if total <= 0 or total < min_batch or ratio >= 1:
        return False
    return dead > ratio * total
