"""DLQ pages, the pure part (docs/dlq.md, "A page for every dead letter"): which letters a page
carries and when it may go, with the clock passed in; the page as a signed CloudEvent."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.model import DeadClass, DeadKind, Delivery
from siding.routing.page_book import (
    LetterNote,
    Page,
    PageBook,
    add,
    due_at,
    last_page,
    note_of,
    room,
    take,
)
from siding.routing.page_event import CONTENT_TYPE, EVENT_TYPE, page_request
from siding.routing.producer import OutRecord, Placement
from siding.routing.records import dlq_record
from siding.steps import ToDlq
from siding_consumer import WebhookVerificationError, verify_webhook

EVERY = 60.0
MAX = 3
NOW_MS = 1_790_000_000_000
SECRET = "whsec_c2lkaW5nLXBhZ2Utc2VjcmV0"


def note(n: int) -> LetterNote:
    return LetterNote(f"t/0/{n}", "t", 0, n, "bad", "consumer said dead", 1, 0, NOW_MS, "t.dlq")


def notes(first: int, count: int) -> list[LetterNote]:
    return [note(n) for n in range(first, first + count)]


def test_the_first_letter_after_a_quiet_spell_is_paged_at_once() -> None:
    # Given an empty book: nothing is due
    book = PageBook()
    assert due_at(book, EVERY) is None
    assert take(book, 100.0, EVERY) == (book, None)
    # When one letter dies
    book = add(book, notes(0, 1), 1, MAX)
    # Then a page carrying it goes now, and the book remembers when
    book, page = take(book, 100.0, EVERY)
    assert page == Page(1, (note(0),))
    assert book == PageBook(last_page_s=100.0)


def test_a_flood_is_one_page_per_interval_with_its_count_and_first_letters() -> None:
    # Given a page went at t=100
    book, _ = take(add(PageBook(), notes(0, 1), 1, MAX), 100.0, EVERY)
    # When 1,000 letters die in batches of 10 over the next minute
    for batch in range(100):
        book = add(book, notes(1 + batch * 10, 10), 10, MAX)
        # Then no page goes before the interval has passed
        assert take(book, 100.0 + batch * 0.59, EVERY)[1] is None
    assert due_at(book, EVERY) == 160.0
    assert take(book, 159.999, EVERY)[1] is None
    # And at t=160 one page counts all 1,000 and lists the first three
    book, page = take(book, 160.0, EVERY)
    assert page == Page(1000, tuple(notes(1, 3)))
    # And the next waits a whole interval again
    book = add(book, notes(2000, 1), 1, MAX)
    assert due_at(book, EVERY) == 220.0
    assert take(book, 200.0, EVERY)[1] is None
    assert take(book, 220.5, EVERY)[1] == Page(1, (note(2000),))


def test_the_book_keeps_at_most_max_letters_however_many_die() -> None:
    book = add(PageBook(), notes(0, 2), 2, MAX)
    assert room(book, MAX) == 1
    book = add(book, notes(2, 5), 5, MAX)
    assert book.count == 7
    assert book.letters == tuple(notes(0, 3))
    assert room(book, MAX) == 0
    # Counting without notes (a letter without a story) still counts
    assert add(book, [], 4, MAX).count == 11
    assert add(book, notes(9, 1), 0, MAX) == book


def test_at_a_stop_what_waits_goes_as_one_last_page_whatever_the_interval() -> None:
    book, _ = take(add(PageBook(), notes(0, 1), 1, MAX), 100.0, EVERY)
    book = add(book, notes(1, 2), 2, MAX)
    book, page = last_page(book)
    assert page == Page(2, tuple(notes(1, 2)))
    assert last_page(book) == (book, None)


@given(
    st.lists(
        st.tuples(st.floats(0, 10), st.integers(0, 20)),  # (seconds later, letters that die)
        max_size=60,
    ),
    st.floats(0.1, 5.0),
)
def test_pages_are_never_closer_than_every_and_lose_no_count(
    events: list[tuple[float, int]], every: float
) -> None:
    book, now, sent, died = PageBook(), 0.0, [], 0
    for later, count in events:
        now += later
        book = add(book, notes(died, count), count, MAX)
        died += count
        book, page = take(book, now, every)
        if page is not None:
            sent.append((now, page))
    book, page = last_page(book)
    assert sum(p.count for _, p in sent) + (page.count if page else 0) == died
    assert all(b >= a + every for (a, _), (b, _) in itertools.pairwise(sent))
    assert all(0 < len(p.letters) <= min(p.count, MAX) for _, p in sent)


def letter(offset: int, kind: DeadKind = DeadKind.CONSUMER) -> OutRecord:
    delivery = Delivery(
        id=f"orders/2/{offset}",
        topic="orders",
        partition=2,
        offset=offset,
        key=b"k",
        value=b"v",
        headers=(("trace", b"x"),),
        timestamp_ms=NOW_MS - 5000,
        attempt=3,
        lane=2,
    )
    step = ToDlq("not JSON", DeadClass(kind))
    return dlq_record(delivery, step, hops=(), now_ms=NOW_MS, route="billing", dlq_topic="b.dlq")


def test_a_note_tells_the_letters_story_and_where_it_lies_in_the_dlq() -> None:
    told = note_of(letter(41), Placement("b.dlq", 1, 977))
    assert told == LetterNote(
        id="orders/2/41",
        topic="orders",
        partition=2,
        offset=41,
        reason="not JSON",
        dead_class="consumer said dead",
        attempt=3,
        lane=2,
        died_at_ms=NOW_MS,
        dlq_topic="b.dlq",
        dlq_partition=1,
        dlq_offset=977,
    )
    unplaced = note_of(letter(41), None)
    assert unplaced is not None
    assert (unplaced.dlq_partition, unplaced.dlq_offset) == (None, None)
    assert note_of(OutRecord("b.dlq", None, b"v", (("a", b"b"),)), None) is None


def test_a_page_is_a_structured_cloudevent_signed_as_siding_signs_deliveries() -> None:
    first = note_of(letter(41), Placement("b.dlq", 1, 977))
    second = note_of(letter(42), Placement("b.dlq", 0, 12))
    assert first is not None and second is not None
    page = Page(5, (first, second))
    request = page_request("billing", "b.dlq", page, secret=SECRET, now_ms=NOW_MS)
    # The consumer SDK's verifier accepts it
    assert verify_webhook(SECRET, request.headers, request.body, now_s=NOW_MS / 1000) == request.id
    assert request.id == "dlq-page:billing:b.dlq/1/977"
    assert request.headers["content-type"] == CONTENT_TYPE
    event = json.loads(request.body)
    assert event["specversion"] == "1.0"
    assert (event["id"], event["type"], event["subject"]) == (request.id, EVENT_TYPE, "b.dlq")
    assert event["source"] == "/siding/routes/billing"
    assert event["time"] == "2026-09-21T14:13:20.000+00:00"
    data = event["data"]
    assert (data["route"], data["dlq"], data["count"], data["listed"]) == ("billing", "b.dlq", 5, 2)
    assert data["letters"][0] == {
        "id": "orders/2/41",
        "topic": "orders",
        "partition": 2,
        "offset": 41,
        "reason": "not JSON",
        "class": "consumer said dead",
        "attempt": 3,
        "lane": 2,
        "died_at": "2026-09-21T14:13:20.000+00:00",
        "dlq": {"topic": "b.dlq", "partition": 1, "offset": 977},
    }
    # A body changed on the way does not verify
    with pytest.raises(WebhookVerificationError, match="no webhook-signature"):
        verify_webhook(SECRET, request.headers, request.body + b" ", now_s=NOW_MS / 1000)


def test_a_page_whose_letters_were_not_placed_is_named_by_time_and_count() -> None:
    page = Page(7, (replace(note(1), dlq_offset=None),))
    request = page_request("r", "r.dlq", page, secret="plain", now_ms=NOW_MS)
    assert request.id == f"dlq-page:r:{NOW_MS}:7"
    assert verify_webhook("plain", request.headers, request.body, now_s=NOW_MS / 1000) == request.id
