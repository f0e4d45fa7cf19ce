"""Pure: which messages are suspected of killing the consumer, which to try next, and when one is
convicted (docs/dispatch.md, "Suspects").

A message that was out when the consumer went away (``Outcome.lost``) becomes a suspect: no
attempt is spent, and the death is counted against it. Suspects go out one after another, each
alone for ``solo_s`` before the next may follow (a pill kills at once; a slow innocent should
not hold the others back), while the other messages flow at the normal limit. A suspect that was
out together with another suspect when the consumer died must prove itself alone: it is
*exclusive*, and no other suspect goes out until it has its answer. A suspect answered normally
is cleared. One that was the only suspect out when the consumer died ``crash_limit`` times is
convicted, but only once the endpoint has answered some other message since it became a suspect
(``served``: real answers counted per endpoint, by every dispatch of the worker): when every
message dies the same way the endpoint is down, and that is the breaker's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from siding.model import DeadClass, DeadKind
from siding.steps import ToDlq

SOLO_S = 0.1


@dataclass(slots=True)
class _Suspect:
    deaths: int
    served_mark: int  # the endpoint's answers so far when this message became a suspect
    lone: int = 0
    exclusive: bool = False


@dataclass(slots=True)
class _Out:
    started: float
    shared: bool  # another suspect was out at some point while this one was


@dataclass(frozen=True, slots=True)
class Conviction:
    deaths: int
    lone: int

    def reason(self, last: str) -> str:
        return (
            f"the consumer died {self.deaths} times while handling this message"
            f" ({self.lone} of them with no other suspect in flight); last: {last}"
        )

    def dead_letter(self, last: str) -> ToDlq:
        """The step of the convicted message: a crash pill, to the DLQ."""
        return ToDlq(self.reason(last), DeadClass(DeadKind.CONSUMER_DIED))


class Suspects:
    """The suspects of one dispatch, by item index; times are monotonic seconds."""

    def __init__(self, crash_limit: int, solo_s: float = SOLO_S) -> None:
        if crash_limit < 1:
            raise ValueError(f"crash_limit must be at least 1, got {crash_limit}")
        self._limit = crash_limit
        self._solo_s = solo_s
        self._known: dict[int, _Suspect] = {}
        self._waiting: dict[int, int] = {}  # index -> due epoch ms, for suspects not out
        self._out: dict[int, _Out] = {}
        self.suspected = 0
        self.isolations = 0
        self.convicted = 0

    def __contains__(self, index: int) -> bool:
        return index in self._known

    def __len__(self) -> int:
        return len(self._known)

    @property
    def out(self) -> frozenset[int]:
        return frozenset(self._out)

    def seed(self, index: int, deaths: int, served: int, lone: int = 0) -> None:
        """A message that arrives already suspected (its earlier call was lost). ``lone``: its
        lone deaths carried over from an earlier dispatch (``carried_lone``), which saw the
        consumer answer others since its first death: that evidence comes with them."""
        if deaths > 0:
            mark = served - 1 if lone > 0 else served
            self._known[index] = _Suspect(deaths, mark, lone=min(lone, deaths))
            self.suspected += 1

    def carried_lone(self, index: int, served: int) -> int:
        """The lone deaths ``index`` may carry to another dispatch: all of them once the
        consumer has answered some other message since its first death, else none (with no
        such answer the endpoint may be down for everyone, and the count starts over)."""
        suspect = self._known.get(index)
        if suspect is None or served <= suspect.served_mark:
            return 0
        return suspect.lone

    def to_hand_back(self, now_ms: int, served: int, min_wait_ms: int) -> dict[int, int] | None:
        """The waiting suspects to hand back to the park lane (index -> due epoch ms), or
        ``None`` to keep them here: each has killed the consumer alone, carries that evidence
        (``carried_lone``), is not out, and is not due for ``min_wait_ms`` yet. A park-lane
        batch that waits for a pill's next turn holds every message handed over to the park
        lane meanwhile behind it, for the whole conviction (docs/dispatch.md, "Suspects")."""
        if not self._waiting or self._out or len(self._waiting) != len(self._known):
            return None
        for index, due_ms in self._waiting.items():
            if due_ms < now_ms + min_wait_ms or self.carried_lone(index, served) == 0:
                return None
        return dict(self._waiting)

    def deaths(self, index: int) -> int:
        suspect = self._known.get(index)
        return suspect.deaths if suspect is not None else 0

    def lone(self, index: int) -> int:
        suspect = self._known.get(index)
        return suspect.lone if suspect is not None else 0

    def waiting(self) -> list[int]:
        """The suspects not out, in index order."""
        return sorted(self._waiting)

    def answered(self, index: int) -> None:
        """``index`` has a final answer that is not a death: it is no longer a suspect."""
        self._known.pop(index, None)
        self._waiting.pop(index, None)
        self._out.pop(index, None)

    def refused(self, index: int) -> None:
        """A suspect was turned away without being handled (consumer down or busy): it keeps
        its suspicion and is no longer out."""
        self._out.pop(index, None)

    def died(self, index: int, served: int) -> Conviction | None:
        """The consumer went away with ``index`` out (``served``: the endpoint's answers so far);
        a ``Conviction`` when that settles it."""
        suspect = self._known.get(index)
        if suspect is None:
            suspect = self._known[index] = _Suspect(0, served)
            self.suspected += 1
        suspect.deaths += 1
        out = self._out.pop(index, None)
        if out is not None:
            if out.shared:
                suspect.exclusive = True
            else:
                suspect.lone += 1
        if suspect.lone >= self._limit and served > suspect.served_mark:
            del self._known[index]
            self.convicted += 1
            return Conviction(suspect.deaths, suspect.lone)
        return None

    def wait(self, index: int, due_ms: int) -> None:
        """A suspect waits for its turn, not before ``due_ms``."""
        self._waiting[index] = due_ms

    def next_due_ms(self) -> int | None:
        return min(self._waiting.values()) if self._waiting else None

    def next_up(self, now_ms: int, now: float) -> tuple[int | None, float | None]:
        """What ``take`` would answer now, changing nothing: the window asks this before it
        takes a slot of the route's budget for the send, so that it never takes one only to
        give it back (docs/dispatch.md, "One budget per route and endpoint")."""
        due = [i for i, at in self._waiting.items() if at <= now_ms]
        if not due:
            return None, None
        index = min(due, key=lambda i: (-self._known[i].lone, -self._known[i].deaths, i))
        if self._out:
            if self._known[index].exclusive or any(
                self._known[i].exclusive for i in self._out if i in self._known
            ):
                return None, None
            left = max(o.started for o in self._out.values()) + self._solo_s - now
            if left > 0:
                return None, left
        return index, None

    def take(self, now_ms: int, now: float) -> tuple[int | None, float | None]:
        """(the suspect to send now, or ``None``; the seconds until the next one may follow the
        suspects out, or ``None`` when none is due or the next waits for an answer).

        The next is the one with the most lone deaths, then the most deaths, then the earliest.
        It may go when no suspect is out, or when neither it nor any suspect out is exclusive
        and the latest one out has been out alone for ``solo_s``."""
        index, wait_s = self.next_up(now_ms, now)
        if index is None:
            return None, wait_s
        for other in self._out.values():
            other.shared = True
        del self._waiting[index]
        self._out[index] = _Out(now, shared=bool(self._out))
        self.isolations += 1
        return index, None
