"""The suspects out at an endpoint, seen by every window that sends to it (docs/dispatch.md,
"Bystanders").

A consumer that dies takes every call it holds with it, and each becomes a suspect. When a
suspect (a message that was out at an earlier death) is out at that moment, the others that die
with it are *bystanders*: the main lane's calls in flight while the park lane sends a suspect
alone. Made suspects, each would wait for the consumer's restart, a park-lane batch and its own
turn, one after another; the suspect out already takes the death alone
(``siding.dispatch.suspects``). So a window asks the board, for a call that was lost and is not
a suspect, whether a suspect was out at the same time; if so, the call goes again like any
message after an outage, once in its dispatch, and not as a suspect.

This module holds the pure rule, the interface, and ``LocalBoard``, the form of one process;
the form shared by the Python workers of a machine is ``siding.pipeline.executor.board``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

# How many sightings a board keeps: the one that matters is out at a death, and a call that died
# then asks within moments of it, while the consumer is down and few suspects go out.
SIGHTINGS = 256


class Seen(IntEnum):
    OUT = 0  # still out, at most until ``until``
    DIED = 1  # the consumer went away with it at ``until``
    ENDED = 2  # answered, refused or handed over at ``until``: it did not die with others


@dataclass(frozen=True, slots=True)
class Sighting:
    """One suspect's send: out from ``sent_at`` to ``until`` (monotonic seconds)."""

    sent_at: float
    until: float
    seen: Seen


def was_out_with(sightings: Iterable[Sighting], started: float, lost_at: float) -> bool:
    """Whether a suspect was out, or died, at some moment when a call that ran from ``started``
    until it was found lost at ``lost_at`` was out too: then the death that took the call may
    well be the suspect's. A suspect answered was not out at the death (it would have died)."""
    return any(
        s.seen is not Seen.ENDED and max(s.sent_at, started) <= min(s.until, lost_at)
        for s in sightings
    )


class SuspectBoard(Protocol):
    """What a window needs from the board of its endpoint (on the loop's thread)."""

    def out(self, until: float) -> int:
        """A suspect goes out now, for ``until`` at most: its mark, for ``ended``."""

    def ended(self, mark: int, died: bool) -> None:
        """The suspect of ``mark`` has its outcome now: the consumer died with it, or not."""

    def was_out_with(self, started: float, lost_at: float) -> bool:
        """``was_out_with`` over the board's sightings."""


class LocalBoard:
    """The board of one process; ``clock`` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sightings: dict[int, Sighting] = {}
        self._next = 0

    def out(self, until: float) -> int:
        mark = self._next
        self._next += 1
        self._sightings[mark] = Sighting(self._clock(), until, Seen.OUT)
        self._sightings.pop(mark - SIGHTINGS, None)
        return mark

    def ended(self, mark: int, died: bool) -> None:
        sighting = self._sightings.get(mark)
        if sighting is not None:
            seen = Seen.DIED if died else Seen.ENDED
            self._sightings[mark] = Sighting(sighting.sent_at, self._clock(), seen)

    def was_out_with(self, started: float, lost_at: float) -> bool:
        return was_out_with(self._sightings.values(), started, lost_at)
