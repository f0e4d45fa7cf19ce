"""The shape every transport has, so the dispatcher does not care which one it drives."""

from __future__ import annotations

from typing import Protocol

from siding.model import Delivery, Outcome


class Transport(Protocol):
    """Sends deliveries to one endpoint. Safe to share between many concurrent ``send`` calls.

    ``send`` never raises for an answer the consumer gave, a timeout or an unreachable endpoint:
    each becomes an ``Outcome`` through ``siding.transport.outcomes``. It raises only for
    programming errors and ``asyncio.CancelledError``.
    """

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome: ...

    async def probe(self) -> bool:
        """Whether the endpoint looks able to take deliveries (health check, half-open breaker)."""
        ...

    async def close(self) -> None: ...
