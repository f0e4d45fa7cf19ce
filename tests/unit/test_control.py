"""The control API over real HTTP on loopback: /health, /status, /metrics."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from siding import naming
from siding.control import (
    ControlServer,
    QueryHealth,
    health_document,
    ready_document,
    status_document,
)
from siding.control.kafka_view import LetterSummary, RouteKafka, lane_backlog, partition_lag
from siding.dispatch import BreakerState, BreakerTransition, DispatchStats, LatencyHistogram
from siding.errors import SidingError
from siding.model import OutcomeKind
from siding.pipeline.driver.metrics import MetricsSink
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts, reason_class
from tests.browser import Page

Queries = list[QueryHealth]


def _latency(n_10ms: int, n_2s: int) -> LatencyHistogram:
    counts = [0] * len(LatencyHistogram().counts)
    counts[3], counts[10] = n_10ms, n_2s
    return LatencyHistogram(
        counts=tuple(counts), count=n_10ms + n_2s, sum_s=0.01 * n_10ms + 2.0 * n_2s, max_s=2.0
    )


def _batch(*, open_breaker: bool = False) -> list[TaskResult]:
    transitions = (
        (BreakerTransition(1.0, BreakerState.CLOSED, BreakerState.OPEN),) if open_breaker else ()
    )
    stats = DispatchStats(
        sends=100,
        outcomes={OutcomeKind.ACK: 90, OutcomeKind.RETRY: 7, OutcomeKind.DEAD: 3},
        latency=_latency(95, 5),
        max_in_flight=42,
        breaker_transitions=transitions,
    )
    return [
        TaskResult(
            counts=StepCounts(records=100, acked=90, to_lane=7, to_dlq=3),
            stats=stats,
            dead_reasons={"sim": 3},
        )
    ]


@pytest.fixture
def metrics() -> MetricsSink:
    sink = MetricsSink()
    sink.declare("billing", 2)
    return sink


@pytest.fixture
def queries() -> Queries:
    return [QueryHealth("siding.billing.main", True), QueryHealth("siding.billing.retry-1", True)]


@pytest.fixture
def server(metrics: MetricsSink, queries: Queries) -> Iterator[ControlServer]:
    with ControlServer(("127.0.0.1", 0), metrics, lambda: list(queries)) as control:
        yield control


def get(server: ControlServer, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(server.url + path, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


def get_json(server: ControlServer, path: str) -> tuple[int, Any]:
    code, content_type, body = get(server, path)
    assert content_type == "application/json"
    return code, json.loads(body)


def test_server_binds_a_free_port_when_asked_for_port_0(server: ControlServer) -> None:
    host, port = server.address
    assert host == "127.0.0.1" and port > 0
    assert server.url == f"http://127.0.0.1:{port}"


def test_health_is_200_while_every_query_is_active(server: ControlServer) -> None:
    code, body = get_json(server, "/health")
    assert code == 200
    assert body["status"] == "ok"
    assert [q["name"] for q in body["queries"]] == ["siding.billing.main", "siding.billing.retry-1"]


def test_health_is_503_when_a_query_stopped(server: ControlServer, queries: Queries) -> None:
    queries[1] = QueryHealth("siding.billing.retry-1", False, "BatchFailed: broker down")
    code, body = get_json(server, "/health")
    assert code == 503
    assert body["status"] == "unavailable"
    assert body["queries"][1] == {
        "name": "siding.billing.retry-1",
        "active": False,
        "error": "BatchFailed: broker down",
    }


def test_health_is_503_before_any_query_started() -> None:
    assert health_document([])[0] == 503


def test_ready_is_200_while_running_and_503_from_the_moment_a_drain_begins(
    metrics: MetricsSink, queries: Queries
) -> None:
    # Given a server whose application is running, not draining
    draining = False
    with ControlServer(
        ("127.0.0.1", 0), metrics, lambda: list(queries), draining=lambda: draining
    ) as control:
        code, body = get_json(control, "/ready")
        assert (code, body["status"]) == (200, "ok")
        # When a drain begins (SIGTERM): still healthy, no longer ready
        draining = True
        code, body = get_json(control, "/ready")
        assert (code, body["status"]) == (503, "draining")
        assert get_json(control, "/health")[0] == 200


def test_ready_follows_health_when_not_draining() -> None:
    stopped = [QueryHealth("siding.billing.main", False, "BatchFailed: broker down")]
    assert ready_document([])[0] == 503  # no route running yet (Spark still starting)
    assert ready_document(stopped)[0] == 503
    assert ready_document([], idle_ok=True)[0] == 200  # waiting for routes made by the API
    assert ready_document([QueryHealth("q", True)], draining=True)[0] == 503


def test_status_shows_the_counts_fed_in(server: ControlServer, metrics: MetricsSink) -> None:
    # Given two batches reported on the main lane, one that opened the breaker
    metrics.on_result("billing", 0, _batch(), 1.2)
    metrics.on_result("billing", 0, _batch(open_breaker=True), 0.8)
    metrics.error("route billing: something broke")
    # When /status is read
    code, body = get_json(server, "/status")
    # Then it shows them per route and lane
    assert code == 200
    assert body["healthy"] is True
    assert body["last_error"] == "route billing: something broke"
    (route,) = body["routes"]
    assert route["name"] == "billing"
    assert (route["delivered"], route["dead_lettered"]) == (180, 6)
    main, retry = route["lanes"]
    assert (main["label"], retry["label"]) == ("main", "retry-1")
    assert (main["acked"], main["to_lane"], main["to_dlq"], main["records"]) == (180, 14, 6, 200)
    assert main["batches"] == 2 and main["last_batch_s"] == 0.8
    assert main["breaker"] == "open" and retry["breaker"] == "closed"
    assert main["max_in_flight"] == 42
    assert main["latency_s"]["p50"] == 0.01 and main["latency_s"]["p99"] == 2.0
    assert main["outcomes"] == {"ack": 180, "dead": 6, "retry": 14}
    assert main["dead_reasons"] == {"sim": 6}
    assert main["rate_per_s"] > 0
    assert retry["records"] == 0


def test_metrics_are_prometheus_text_with_the_counts_fed_in(
    server: ControlServer, metrics: MetricsSink
) -> None:
    metrics.on_result("billing", 0, _batch(open_breaker=True), 1.0)
    code, content_type, body = get(server, "/metrics")
    assert code == 200
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    main = (("lane", "main"), ("route", "billing"))

    def at(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted((*main, *labels.items()))))]

    assert at("siding_records_total", outcome="ack") == 90
    assert at("siding_records_total", outcome="lane") == 7
    assert at("siding_records_total", outcome="dlq") == 3
    assert at("siding_answers_total", kind="retry") == 7
    assert at("siding_dead_letters_total", reason="sim") == 3
    assert at("siding_delivery_latency_seconds_bucket", le="0.01") == 95
    assert at("siding_delivery_latency_seconds_bucket", le="+Inf") == 100
    assert at("siding_delivery_latency_seconds_count") == 100
    assert at("siding_in_flight_peak") == 42
    assert at("siding_breaker_state", state="open") == 1
    assert at("siding_breaker_state", state="closed") == 0


def test_unknown_path_is_404(server: ControlServer) -> None:
    code, body = get_json(server, "/nope")
    assert code == 404
    assert "/nope" in body["error"]


def test_a_failing_source_answers_500_and_the_server_keeps_serving(
    metrics: MetricsSink,
) -> None:
    calls = [0]

    def flaky() -> Queries:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("JVM gone")
        return [QueryHealth("q", True)]

    with ControlServer(("127.0.0.1", 0), metrics, flaky) as control:
        assert get_json(control, "/health") == (500, {"error": "JVM gone"})
        assert get_json(control, "/health")[0] == 200


def test_a_taken_port_is_a_clear_error(server: ControlServer, metrics: MetricsSink) -> None:
    with pytest.raises(SidingError, match="cannot listen"):
        ControlServer(server.address, metrics, list).start()


def test_status_document_without_traffic() -> None:
    doc = status_document(MetricsSink().snapshot(), [])
    assert doc["routes"] == [] and doc["healthy"] is False and doc["last_error"] is None


def test_parked_calls_and_the_park_lane_are_shown(
    server: ControlServer, metrics: MetricsSink
) -> None:
    # Given a main-lane batch that parked 4 of its 10 calls, and a park-lane batch
    metrics.on_result(
        "billing", 0, [TaskResult(counts=StepCounts(records=10, acked=6, parked=4))], 0.1
    )
    metrics.on_result(
        "billing", naming.PARK_LANE, [TaskResult(counts=StepCounts(records=4, acked=4))], 0.2
    )
    # Then /status and /metrics count them, the park lane under its own label
    _, _, body = get(server, "/status")
    lanes = {lane["label"]: lane for lane in json.loads(body)["routes"][0]["lanes"]}
    assert lanes["main"]["parked"] == 4
    assert lanes["parked"]["acked"] == 4
    _, _, text = get(server, "/metrics")
    samples = {
        (s.name, s.labels.get("lane"), s.labels.get("outcome")): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }
    assert samples[("siding_records_total", "main", "parked")] == 4
    assert samples[("siding_records_total", "parked", "ack")] == 4


def test_suspects_convictions_and_holdouts_are_shown(
    server: ControlServer, metrics: MetricsSink
) -> None:
    # Given two batches: one where the consumer died on a message and it was convicted, one
    # where a message was turned away for a whole deadline and moved on
    died = DispatchStats(suspected=12, isolations=15, convicted=1)
    held = DispatchStats(holdouts=(("billing/0/7", "grpc RESOURCE_EXHAUSTED: slow down"),))
    metrics.on_result(
        "billing", 0, [TaskResult(counts=StepCounts(records=10, to_dlq=1), stats=died)], 0.1
    )
    metrics.on_result(
        "billing",
        0,
        [TaskResult(counts=StepCounts(records=1, to_lane=1), stats=held, spans_dropped=3)],
        0.1,
    )
    # Then /status and /metrics show them
    _, doc = get_json(server, "/status")
    route = next(r for r in doc["routes"] if r["name"] == "billing")
    (lane,) = [lane for lane in route["lanes"] if lane["label"] == "main"]
    assert lane["suspects"] == {"suspected": 12, "isolations": 15, "convicted": 1}
    assert lane["holdouts"]["moved_on"] == 1
    assert lane["holdouts"]["latest"] == [
        {"id": "billing/0/7", "reason": "grpc RESOURCE_EXHAUSTED: slow down"}
    ]
    _, _, text = get(server, "/metrics")
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.labels.get("route") == "billing" and s.labels.get("lane") == "main"
    }
    assert samples["siding_suspects_total"] == 12
    assert samples["siding_isolations_total"] == 15
    assert samples["siding_crash_convictions_total"] == 1
    assert samples["siding_holdouts_total"] == 1
    assert samples["siding_trace_spans_dropped_total"] == 3


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        (
            "the consumer died 4 times while handling this message (3 of them alone); last: x",
            "consumer died",
        ),
        ("http 413: message too large for the endpoint (6291456 bytes): body", "too large"),
        ("message too large: 6291475 bytes is more than max_message_bytes=1", "too large"),
        ("retries exhausted after 3 attempts: deadline of 1s exceeded", "retries exhausted"),
        ("http 422: unprocessable: the body the consumer wrote", "http 422"),
        ("grpc INVALID_ARGUMENT: bad field", "grpc INVALID_ARGUMENT"),
        ("consumer answered DEAD", "consumer said dead"),
        ("customer 8812 has no billing account", "consumer said dead"),  # free text: no label
    ],
)
def test_dead_letter_reasons_are_labels_of_a_bounded_set(reason: str, label: str) -> None:
    assert reason_class(reason) == label


def test_held_records_of_key_mode_are_counted(server: ControlServer, metrics: MetricsSink) -> None:
    # Given a key-mode main-lane batch that held 3 records behind a retried one
    metrics.on_result(
        "billing", 0, [TaskResult(counts=StepCounts(records=10, acked=6, to_lane=1, held=3))], 0.1
    )
    # Then /status and /metrics count them apart from the records sent to a lane
    _, _, body = get(server, "/status")
    lanes = {lane["label"]: lane for lane in json.loads(body)["routes"][0]["lanes"]}
    assert (lanes["main"]["held"], lanes["main"]["to_lane"]) == (3, 1)
    _, _, text = get(server, "/metrics")
    samples = {
        (s.name, s.labels.get("lane"), s.labels.get("outcome")): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }
    assert samples[("siding_records_total", "main", "held")] == 3


def test_outputs_are_counted_in_status_and_metrics(
    server: ControlServer, metrics: MetricsSink
) -> None:
    # Given a main-lane batch and a park-lane batch that produced outputs (docs/outputs.md)
    metrics.on_result(
        "billing", 0, [TaskResult(counts=StepCounts(records=4, acked=4, outputs=8))], 0.1
    )
    metrics.on_result(
        "billing", -1, [TaskResult(counts=StepCounts(records=1, acked=1, outputs=2))], 0.1
    )
    # Then /status counts them per lane and per route, and /metrics as siding_outputs_total
    _, _, body = get(server, "/status")
    route = json.loads(body)["routes"][0]
    assert route["outputs"] == 10
    outputs = {lane["label"]: lane["outputs"] for lane in route["lanes"]}
    assert (outputs["main"], outputs["parked"]) == (8, 2)
    _, _, text = get(server, "/metrics")
    samples = {
        (s.name, s.labels.get("lane")): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }
    assert samples[("siding_outputs_total", "main")] == 8
    assert samples[("siding_outputs_total", "parked")] == 2


def test_the_page_is_served_at_the_root_and_its_script_parses(
    server: ControlServer, tmp_path: Path
) -> None:
    code, content_type, body = get(server, "/")
    assert code == 200 and content_type.startswith("text/html")
    text = body.decode()
    assert 'fetch("status"' in text and "http://" not in text.replace(
        "http://www.w3.org/2000/svg", ""
    )  # no CDN: everything ships in the package
    script = text.split("<script>", 1)[1].split("</script>", 1)[0]
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is needed to check the page's script")
        pytest.skip("node not installed")
    (tmp_path / "page.js").write_text(script)
    command = [node, "--check", str(tmp_path / "page.js")]
    checked = subprocess.run(command, check=False, capture_output=True)
    assert checked.returncode == 0, checked.stderr.decode()


def _facts() -> RouteKafka:
    return RouteKafka(
        partitions=(partition_lag("billing", 0, 0, 120, 100),),
        lanes=(lane_backlog("retry-1", "siding.billing.retry-1", [], [1_000]),),
        dlq_topic="siding.billing.dlq",
        dlq_size=3,
        letters=(LetterSummary("billing/0/7", "bad", "k", 1_000, 0, 2),),
        polled_at_ms=5_000,
        offered_per_s=12.5,
    )


def test_the_page_reads_only_fields_the_status_document_has(
    metrics: MetricsSink, queries: Queries
) -> None:
    metrics.on_result("billing", 0, _batch(open_breaker=True), 0.1)
    control = ControlServer(
        ("127.0.0.1", 0), metrics, lambda: list(queries), kafka=lambda _: _facts()
    )
    with control:
        _, doc = get_json(control, "/status")
        _, _, body = get(control, "/")
    route = next(r for r in doc["routes"] if r["name"] == "billing")
    lane = route["lanes"][0]
    kafka = route["kafka"]
    assert lane["breaker_transitions"] and kafka["partitions"] and kafka["dlq"]["latest"]
    script = body.decode().split("<script>", 1)[1]
    # The page's names for each kind of object in the document.
    owners = (
        ("lane", lane),
        ("route", route),
        ("status", doc),
        ("kafka", kafka),
        ("p", kafka["partitions"][0]),
        ("x", kafka["dlq"]["latest"][0]),
        ("b", kafka["lanes"][0]),
        ("t", lane["breaker_transitions"][0]),
        ("dlq", kafka["dlq"]),
    )
    for owner, fields in owners:
        used = set(re.findall(rf"\b{owner}\.([a-z_]+)", script))
        if owner == "route":  # present when the server controls routes (test_route_controls)
            used.discard("control")
        assert used, owner
        assert used <= set(fields), (owner, used - set(fields))


def test_the_page_rendered_by_headless_chromium_shows_the_status_numbers(
    server: ControlServer, metrics: MetricsSink, tmp_path: Path
) -> None:
    # Given a route with a batch behind it
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is needed (make setup installs it with apt)")
        pytest.skip("chromium not installed")
    metrics.on_result("billing", 0, _batch(), 0.1)
    _, doc = get_json(server, "/status")
    lane = next(r for r in doc["routes"] if r["name"] == "billing")["lanes"][0]
    # When a browser opens the page and its script has run
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000"]
    dom = subprocess.run(
        [*base, "--dump-dom", f"{server.url}/"], check=False, capture_output=True, timeout=120
    ).stdout.decode()
    # Then it shows the same numbers as /status
    cells = re.findall(r"<td>([^<]*)</td>", dom)
    assert ("billing" in dom and "healthy" in dom) or "unhealthy" in dom
    for value in (lane["records"], lane["acked"], lane["to_lane"], lane["to_dlq"]):
        assert f"{value:,}" in cells, (value, cells[:40])
    shot = tmp_path / "console.png"  # the README's screenshots come from tests/e2e/test_console.py
    subprocess.run(
        [*base, "--window-size=1280,720", f"--screenshot={shot}", f"{server.url}/"],
        check=False,
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 10_000


def test_the_page_stays_usable_with_hundreds_of_partitions(
    metrics: MetricsSink, queries: Queries, tmp_path: Path
) -> None:
    if shutil.which("chromium") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is needed (make setup installs it with apt)")
        pytest.skip("chromium not installed")
    # Given a route reading 600 partitions, one of them far behind
    lags = tuple(partition_lag("wide", p, 0, 1_000, 1_000 - (p % 7)) for p in range(600))
    lags = (*lags[:-1], partition_lag("wide", 599, 0, 50_000, 10))
    facts = RouteKafka(partitions=lags, dlq_topic="siding.billing.dlq", polled_at_ms=1)
    metrics.on_result("billing", 0, _batch(), 0.1)
    control = ControlServer(("127.0.0.1", 0), metrics, lambda: list(queries), kafka=lambda _: facts)
    with control, Page.open(control.url + "/", tmp_path / "profile") as page:
        # When the page has rendered (several polls)
        page.wait_for("document.querySelectorAll('table.partitions tbody tr').length > 0")
        time.sleep(3)
        # Then it lists only the most lagging partitions, the worst first, and all on demand
        rows = page.evaluate(
            "[...document.querySelectorAll('table.partitions')[0].tBodies[0].rows]"
            ".map(r => r.cells[0].textContent)"
        )
        assert len(rows) == 20 and rows[0] == "wide-599"
        assert page.evaluate("document.body.innerText.includes('all 600 partitions')")
        page.click("details summary")
        page.wait_for("document.querySelectorAll('table.partitions tbody tr').length === 620")
        # and it stays open across the next polls
        time.sleep(2.5)
        assert page.evaluate("document.querySelectorAll('table.partitions tbody tr').length") == 620
