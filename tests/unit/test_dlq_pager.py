"""The DLQ pager on the driver against a real HTTP server: pages sent and verified, a notifier
that is down, slow or redirecting drops the page (counted) and never holds up ``offer``; its
config names the bad key; its counts reach /metrics."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from siding.config import parse_config
from siding.config.paging import DlqPageConfig
from siding.control.prometheus import metrics_registry, render
from siding.control.status import status_document
from siding.devkit.broker import free_port
from siding.errors import ConfigError
from siding.pipeline.driver.metrics import MetricsSink
from siding.pipeline.driver.pager import DlqPager, PageNotSent, post_page
from siding.routing.producer import OutRecord, Placement
from siding_consumer import verify_webhook
from tests.unit.test_page_book import letter

SECRET = "whsec_c2lkaW5nLXBhZ2Utc2VjcmV0"
HIDDEN = "hook-token-1234"  # in the URL's path: never in a log line or error


@dataclass
class Notifier:
    """What the HTTP server answers, and what it got."""

    status: int = 204
    # Answers for the next requests, first first (then ``status``).
    then: list[int] = field(default_factory=list)
    hold: threading.Event | None = None  # answer the first request only once set
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    url: str = ""


@pytest.fixture
def notifier() -> Iterator[Notifier]:
    state = Notifier()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            state.got.append((dict(self.headers.items()), body))
            status = state.then.pop(0) if state.then else state.status
            state.arrived.set()
            if state.hold is not None and len(state.got) == 1:
                state.hold.wait(30)
            self.send_response(status)
            if status in (301, 302, 307):
                self.send_header("location", "/elsewhere")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/{HIDDEN}"
    yield state
    if state.hold is not None:
        state.hold.set()
    server.shutdown()
    server.server_close()


def config(url: str, **more: object) -> DlqPageConfig:
    return DlqPageConfig.model_validate({"url": url, "secret": SECRET, **more})


def letters(first: int, count: int) -> tuple[list[OutRecord], list[Placement | None]]:
    return [letter(n) for n in range(first, first + count)], [
        Placement("b.dlq", 0, 100 + n) for n in range(first, first + count)
    ]


def test_a_2xx_is_sent_anything_else_is_not_and_the_url_is_never_told(notifier: Notifier) -> None:
    post_page(notifier.url, b"{}", {"content-type": "application/json"}, 5.0)
    assert notifier.got[0][1] == b"{}"
    for status, said in ((503, "HTTP 503"), (302, "HTTP 302"), (404, "HTTP 404")):
        notifier.status = status
        with pytest.raises(PageNotSent, match=said) as caught:
            post_page(notifier.url, b"{}", {}, 5.0)
        assert HIDDEN not in str(caught.value)
    assert len(notifier.got) == 4  # the redirect was not followed
    with pytest.raises(PageNotSent, match="refused") as refused:
        post_page(f"http://127.0.0.1:{free_port()}/hooks/{HIDDEN}", b"{}", {}, 5.0)
    assert HIDDEN not in str(refused.value)


def test_a_notifier_that_does_not_answer_is_given_up_after_the_timeout(notifier: Notifier) -> None:
    notifier.hold = threading.Event()
    started = time.monotonic()
    with pytest.raises(PageNotSent, match="timed out"):
        post_page(notifier.url, b"{}", {}, 0.5)
    assert 0.4 < time.monotonic() - started < 5


def test_pages_reach_the_notifier_signed_and_a_hung_notifier_holds_up_nothing(
    notifier: Notifier,
) -> None:
    counted: list[tuple[str, bool, int]] = []
    pager = DlqPager(
        "billing",
        "b.dlq",
        config(notifier.url, every="200ms", max_letters=2),
        on_page=lambda *a: counted.append(a),
    ).start()
    try:
        # Given a notifier that holds the first page open, then answers 503
        notifier.hold, notifier.then = threading.Event(), [503]
        pager.offer(*letters(0, 1))
        assert notifier.arrived.wait(10)
        # When five more letters die while it hangs, offering them does not wait for it
        started = time.monotonic()
        for n in range(1, 6):
            pager.offer(*letters(n, 1))
        assert time.monotonic() - started < 0.1
        # Then the hung page is dropped (counted), and the next carries the count and first two
        notifier.hold.set()
        deadline = time.monotonic() + 10
        while len(counted) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert counted == [("billing", False, 1), ("billing", True, 5)]
        headers, body = notifier.got[1]
        page_id = verify_webhook(SECRET, headers, body)
        event = json.loads(body)
        assert page_id == event["id"] == "dlq-page:billing:b.dlq/0/101"
        assert event["data"]["count"] == 5
        assert [x["id"] for x in event["data"]["letters"]] == ["orders/2/1", "orders/2/2"]
        # And a letter after that waits for the interval, then goes alone, not before
        pager.offer(*letters(6, 1))
        time.sleep(0.05)
        assert len(notifier.got) == 2
    finally:
        pager.stop()
    # At the stop what waited went as the last page
    assert len(notifier.got) == 3
    assert json.loads(notifier.got[2][1])["data"]["count"] == 1
    assert counted[-1] == ("billing", True, 1)


def test_a_pager_with_nothing_waiting_stops_at_once(notifier: Notifier) -> None:
    pager = DlqPager("r", "r.dlq", config(notifier.url)).start()
    started = time.monotonic()
    pager.stop()
    assert time.monotonic() - started < 1
    assert notifier.got == []


def test_page_counts_reach_metrics() -> None:
    metrics = MetricsSink()
    metrics.declare("billing", 1, pages=True)
    metrics.declare("quiet", 1)
    # (before any page: zeros for the route that pages, nothing for the other)
    text = render(metrics_registry(metrics.snapshot)).decode()
    assert 'siding_dlq_pages_sent_total{route="billing"} 0.0' in text
    assert 'siding_dlq_pages_dropped_total{route="billing"} 0.0' in text
    assert 'siding_dlq_pages_sent_total{route="quiet"}' not in text
    metrics.sink.on_page("billing", True, 5)
    metrics.sink.on_page("billing", False, 2)
    metrics.sink.on_page("billing", False, 1)
    text = render(metrics_registry(metrics.snapshot)).decode()
    assert 'siding_dlq_pages_sent_total{route="billing"} 1.0' in text
    assert 'siding_dlq_pages_dropped_total{route="billing"} 2.0' in text
    assert 'siding_dlq_page_letters_total{result="dropped",route="billing"} 3.0' in text
    assert 'siding_dlq_page_letters_total{result="sent",route="billing"} 5.0' in text
    status = status_document(metrics.snapshot(), [])
    assert [r.get("dlq_pages") for r in status["routes"]] == [{"sent": 1, "dropped": 2}, None]


BASE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "billing"
topic = "t"
group = "g"
endpoint = "grpc://h:1"
[route.dlq_page]
"""


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('secret = "s"', r"route\[billing\]\.dlq_page\.url: required key is missing"),
        ('url = "http://n/p"', r"route\[billing\]\.dlq_page\.secret: required key is missing"),
        ('url = "grpc://n:1"\nsecret = "s"', r"dlq_page\.url: grpc://\.\.\.: a page is an HTTP"),
        ('url = "http://u:pw@n/"\nsecret = "s"', r"dlq_page\.url: credentials in the URL"),
        ('url = "http://n/{topic}"\nsecret = "s"', r"dlq_page\.url: a page carries many letters"),
        ('url = "http://n/{}"\nsecret = "s"', r"dlq_page\.url: "),
        ('url = "http://n"\nsecret = "whsec_!"', r"dlq_page\.secret: a whsec_ secret must be"),
        ('url = "http://n"\nsecret = ""', r"dlq_page\.secret: must not be empty"),
        ('url = "http://n"\nsecret = "s"\nevery = "0s"', r"dlq_page\.every: must be longer"),
        ('url = "http://n"\nsecret = "s"\nevery = 60', r"dlq_page\.every: bare number"),
        ('url = "http://n"\nsecret = "s"\nmax_letters = 0', r"dlq_page\.max_letters: must be"),
        ('url = "http://n"\nsecret = "s"\ntimeout = "1h"', r"dlq_page\.timeout: must be at most"),
        ('url = "http://n"\nsecret = "s"\nevry = "1s"', r"dlq_page\.evry: unknown key"),
    ],
)
def test_a_bad_dlq_page_table_names_the_key(table: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as caught:
        parse_config(BASE + table)
    assert "pw" not in str(caught.value)


def test_the_secret_is_never_shown() -> None:
    config_ = parse_config(BASE + 'url = "https://n/hook"\nsecret = "very-secret-value"')
    page = config_.route[0].dlq_page
    assert page is not None
    assert (page.every, page.max_letters, page.timeout) == (60.0, 20, 10.0)
    shown = json.dumps(config_.redacted_dict())
    assert "very-secret-value" not in shown
    assert "very-secret-value" not in repr(config_)
    assert '"every": "1m"' in shown


def test_the_url_s_path_and_query_are_not_shown() -> None:
    # Alerting services put their token in the path or the query
    url = "https://hooks.example/services/T000/B000/tok3n?key=k3y"
    shown = json.dumps(parse_config(BASE + f'url = "{url}"\nsecret = "s"').redacted_dict())
    assert "tok3n" not in shown
    assert "k3y" not in shown
    assert '"url": "https://hooks.example/***"' in shown


def test_the_secret_may_come_from_a_file_but_not_from_both(tmp_path: Path) -> None:
    (tmp_path / "page.whsec").write_text(SECRET + "\n")
    table = 'url = "http://n/p"\nsecret_file = "page.whsec"'
    page = parse_config(BASE + table, base_dir=tmp_path).route[0].dlq_page
    assert page is not None and page.secret.get_secret_value() == SECRET
    with pytest.raises(ConfigError, match=r"dlq_page\.secret_file: give either secret or"):
        parse_config(BASE + table + '\nsecret = "s"', base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"dlq_page\.secret_file: cannot read"):
        parse_config(BASE + 'url = "http://n/p"\nsecret_file = "nope"', base_dir=tmp_path)
