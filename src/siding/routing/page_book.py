"""Pure: which dead letters a route's next page carries, and when it may go (docs/dlq.md).

A page goes as soon as letters wait and no page went in the last ``every`` seconds; so the
first letter after a quiet spell is announced at once, and a flood is one page per ``every``,
carrying how many letters died since the last page and the first ``max_letters`` of them. The
book keeps at most ``max_letters`` letters, however many die: it is the bounded queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from siding.model import DeadClass
from siding.routing import story
from siding.routing.producer import OutRecord, Placement


@dataclass(frozen=True, slots=True)
class LetterNote:
    """One dead letter as a page tells it: its story, and where it lies in the DLQ."""

    id: str
    topic: str
    partition: int
    offset: int
    reason: str
    dead_class: str
    attempt: int
    lane: int
    died_at_ms: int | None
    dlq_topic: str
    dlq_partition: int | None = None
    dlq_offset: int | None = None


def note_of(letter: OutRecord, placed: Placement | None) -> LetterNote | None:
    """The note for a dead letter as written (``None`` for a record without a story)."""
    told = story.decode(letter.headers)
    if told is None:
        return None
    origin = told.origin
    label = told.dead_class.label if isinstance(told.dead_class, DeadClass) else ""
    return LetterNote(
        id=origin.delivery_id,
        topic=origin.topic,
        partition=origin.partition,
        offset=origin.offset,
        reason=told.reason,
        dead_class=label,
        attempt=told.attempt,
        lane=told.lane,
        died_at_ms=told.died_at_ms,
        dlq_topic=letter.topic,
        dlq_partition=placed.partition if placed is not None else None,
        dlq_offset=placed.offset if placed is not None else None,
    )


@dataclass(frozen=True, slots=True)
class Page:
    """``count`` letters died since the last page; ``letters`` are the first of them."""

    count: int
    letters: tuple[LetterNote, ...]


@dataclass(frozen=True, slots=True)
class PageBook:
    """The letters waiting for the next page, and when the last page was taken (clock s)."""

    count: int = 0
    letters: tuple[LetterNote, ...] = ()
    last_page_s: float | None = None


def room(book: PageBook, max_letters: int) -> int:
    """How many more letters the next page lists (the rest are only counted)."""
    return max(0, max_letters - len(book.letters))


def add(book: PageBook, notes: Sequence[LetterNote], count: int, max_letters: int) -> PageBook:
    """``book`` plus ``count`` new letters, of which ``notes`` are the first (only as many as
    there is room for are kept)."""
    if count <= 0:
        return book
    kept = (*book.letters, *notes[: room(book, max_letters)])
    return replace(book, count=book.count + count, letters=kept)


def due_at(book: PageBook, every_s: float) -> float | None:
    """When the next page may go (clock s; ``-inf``: now), or ``None`` with nothing waiting."""
    if book.count <= 0:
        return None
    if book.last_page_s is None:
        return float("-inf")
    return book.last_page_s + every_s


def take(book: PageBook, now_s: float, every_s: float) -> tuple[PageBook, Page | None]:
    """The page due at ``now_s``, and the book without it; ``(book, None)`` when none is."""
    due = due_at(book, every_s)
    if due is None or now_s < due:
        return book, None
    return PageBook(last_page_s=now_s), Page(book.count, book.letters)


def last_page(book: PageBook) -> tuple[PageBook, Page | None]:
    """What is left at a stop, whatever the interval (one last page, or nothing)."""
    if book.count <= 0:
        return book, None
    return replace(book, count=0, letters=()), Page(book.count, book.letters)
