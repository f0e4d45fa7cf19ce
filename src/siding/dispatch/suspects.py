"""Pure: which messages are suspected of killing the consumer, which to try alone next, and when
one is convicted (docs/dispatch.md, "Suspects").

A message that was out when the consumer went away (``Outcome.lost``) becomes a suspect: no
attempt is spent, and the death is counted against it. Suspects are sent one at a time (the
*isolation slot*) while the other messages flow at the normal limit; a suspect answered normally
is cleared. One that was the only suspect out when the consumer died ``crash_limit`` times is
convicted, but only once some other message has been answered since it became a suspect: when
every message dies the same way the endpoint is down, and that is the breaker's business.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Suspect:
    deaths: int
    served_mark: int  # answers the window had seen when this message became a suspect
    lone: int = 0


@dataclass(frozen=True, slots=True)
class Conviction:
    deaths: int
    lone: int

    def reason(self, last: str) -> str:
        return (
            f"the consumer died {self.deaths} times while handling this message"
            f" ({self.lone} of them with no other suspect in flight); last: {last}"
        )


class Suspects:
    """The suspects of one dispatch, by item index."""

    def __init__(self, crash_limit: int) -> None:
        if crash_limit < 1:
            raise ValueError(f"crash_limit must be at least 1, got {crash_limit}")
        self._limit = crash_limit
        self._known: dict[int, _Suspect] = {}
        self._waiting: dict[int, int] = {}  # index -> due epoch ms, for suspects not out
        self.isolating: int | None = None
        self.served = 0
        self.suspected = 0
        self.isolations = 0
        self.convicted = 0

    def __contains__(self, index: int) -> bool:
        return index in self._known

    def __len__(self) -> int:
        return len(self._known)

    def seed(self, index: int, deaths: int) -> None:
        """A message that arrives already suspected (its earlier call was lost)."""
        if deaths > 0:
            self._known[index] = _Suspect(deaths, self.served)
            self.suspected += 1

    def answered(self, index: int, *, served: bool) -> None:
        """``index`` has a final answer that is not a death (``served``: a real answer, not a
        timeout): it is no longer a suspect, and a real answer shows the consumer works."""
        if served:
            self.served += 1
        self._known.pop(index, None)
        self._waiting.pop(index, None)
        if self.isolating == index:
            self.isolating = None

    def refused(self, index: int) -> None:
        """A suspect was turned away without being handled (consumer down or busy): it keeps
        its suspicion and gives the slot up."""
        if self.isolating == index:
            self.isolating = None

    def died(self, index: int) -> Conviction | None:
        """The consumer went away with ``index`` out; a ``Conviction`` when that settles it."""
        suspect = self._known.get(index)
        if suspect is None:
            suspect = self._known[index] = _Suspect(0, self.served)
            self.suspected += 1
        suspect.deaths += 1
        if self.isolating == index:
            self.isolating = None
            suspect.lone += 1
        if suspect.lone >= self._limit and self.served > suspect.served_mark:
            del self._known[index]
            self.convicted += 1
            return Conviction(suspect.deaths, suspect.lone)
        return None

    def wait(self, index: int, due_ms: int) -> None:
        """A suspect waits for its turn, not before ``due_ms``."""
        self._waiting[index] = due_ms

    def next_due_ms(self) -> int | None:
        return min(self._waiting.values()) if self._waiting else None

    def take(self, now_ms: int) -> int | None:
        """The suspect to send alone now, if the slot is free: the one with the most lone
        deaths, then the most deaths, then the earliest; ``None`` if none is due."""
        if self.isolating is not None:
            return None
        due = [i for i, at in self._waiting.items() if at <= now_ms]
        if not due:
            return None
        index = min(due, key=lambda i: (-self._known[i].lone, -self._known[i].deaths, i))
        del self._waiting[index]
        self.isolating = index
        self.isolations += 1
        return index
