"""A route's DLQ pager on the driver: new dead letters, once written, announced by a thread.

Best effort by design (docs/dlq.md, "A page for every dead letter"): the DLQ topic is the record.
``offer`` only adds to a bounded book under a lock, so the batch never waits for the notifier;
the sender thread takes a page when the book says one is due (``siding.routing.page_book``) and
POSTs it once. A page not answered 2xx within ``timeout`` is dropped and counted; one last page
is tried at ``stop``; a crash loses what was waiting.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from siding.config.paging import DlqPageConfig
from siding.pipeline.driver.stops import one_line
from siding.routing import page_book
from siding.routing.page_book import Page, PageBook
from siding.routing.page_event import page_request
from siding.routing.producer import OutRecord, Placement

log = logging.getLogger(__name__)

# How long ``stop`` waits for a page in flight and the last page.
STOP_WAIT_S = 5.0

Post = Callable[[str, bytes, Mapping[str, str], float], None]
# (route, sent, letters it counted): where the pager's results are counted (/metrics).
PageResult = Callable[[str, bool, int], None]


class PageNotSent(Exception):
    """The notifier did not take the page; the message never holds the URL."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None  # a 3xx is then an answer like any other non-2xx


_OPENER = urllib.request.build_opener(_NoRedirects)


def post_page(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> None:
    """POST once; raises ``PageNotSent`` unless the answer is 2xx within ``timeout_s``."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            status = int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's connection
        raise PageNotSent(f"HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise PageNotSent(one_line(str(exc.reason))) from None
    except (OSError, ValueError) as exc:  # a timeout while reading, a broken connection
        raise PageNotSent(f"{type(exc).__name__}: {one_line(str(exc))}") from None
    if not 200 <= status < 300:
        raise PageNotSent(f"HTTP {status}")


class DlqPager:
    """One route's pager: ``start()``, ``offer(...)`` after each durable DLQ write, ``stop()``."""

    def __init__(
        self,
        route: str,
        dlq_topic: str,
        config: DlqPageConfig,
        *,
        on_page: PageResult = lambda *_: None,
        post: Post = post_page,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.route = route
        self.dlq_topic = dlq_topic
        self._config = config
        self._on_page = on_page
        self._post = post
        self._clock = clock
        self._wall = wall
        self._book = PageBook()
        self._changed = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> DlqPager:
        thread = threading.Thread(target=self._run, name=f"siding-dlq-page-{self.route}")
        thread.daemon = True  # a page is never worth keeping the process alive for
        self._thread = thread
        thread.start()
        return self

    def offer(self, letters: Sequence[OutRecord], placed: Sequence[Placement | None]) -> None:
        """Letters Kafka has acknowledged in the DLQ (``placed``: where, in the same order)."""
        if not letters:
            return
        max_letters = self._config.max_letters
        with self._changed:
            listed = letters[: page_book.room(self._book, max_letters)]
            spots = [*placed, *([None] * len(listed))]
            notes = [page_book.note_of(letter, spots[i]) for i, letter in enumerate(listed)]
            kept = [n for n in notes if n is not None]
            self._book = page_book.add(self._book, kept, len(letters), max_letters)
            self._changed.notify()

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Send what waits as one last page (at most ``wait_s`` more), then let the thread go."""
        with self._changed:
            self._stopping = True
            self._changed.notify()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(wait_s)
            if thread.is_alive():
                log.warning("route %s: a DLQ page was still being sent at the stop", self.route)

    def _run(self) -> None:
        while True:
            page, last = self._next_page()
            if page is not None:
                self._send(page, last=last)
            if last:
                return

    def _next_page(self) -> tuple[Page | None, bool]:
        """Wait for the next page due (or the stop); ``(page, is it the last)``."""
        every = self._config.every
        with self._changed:
            while True:
                if self._stopping:
                    self._book, page = page_book.last_page(self._book)
                    return page, True
                self._book, page = page_book.take(self._book, self._clock(), every)
                if page is not None:
                    return page, False
                due = page_book.due_at(self._book, every)
                self._changed.wait(None if due is None else max(0.0, due - self._clock()))

    def _send(self, page: Page, *, last: bool) -> None:
        config = self._config
        request = page_request(
            self.route,
            self.dlq_topic,
            page,
            secret=config.secret.get_secret_value(),
            now_ms=int(self._wall() * 1000),
        )
        timeout_s = min(config.timeout, STOP_WAIT_S) if last else config.timeout
        try:
            self._post(config.url, request.body, request.headers, timeout_s)
        except Exception as exc:
            why = str(exc) if isinstance(exc, PageNotSent) else type(exc).__name__
            log.warning(
                "route %s: DLQ page of %d letter(s) dropped (the letters are in %s): %s",
                self.route,
                page.count,
                self.dlq_topic,
                why,
            )
            self._count(sent=False, letters=page.count)
            return
        log.info("route %s: DLQ page %s sent: %d letter(s)", self.route, request.id, page.count)
        self._count(sent=True, letters=page.count)

    def _count(self, *, sent: bool, letters: int) -> None:
        try:
            self._on_page(self.route, sent, letters)
        except Exception as exc:  # counting must never stop the sender
            log.warning("route %s: DLQ page not counted: %s", self.route, exc)
