"""The operator's page against a real route (issue 12), used as a person would: it shows the
numbers ``/status`` has, the group's lag per partition and the latest dead letters, and a paused
route is paused and resumed through its buttons."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import SecretStr

from siding.control import ControlPlane, application_health
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.kafka.reader import watermarks_of
from siding.model import delivery_id
from siding.pipeline.driver.metrics import MetricsSink
from tests.browser import Page

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOKEN = "console-test-token"


def _status(plane: ControlPlane) -> dict[str, Any]:
    import json
    import urllib.request

    with urllib.request.urlopen(plane.url + "/status", timeout=10) as answer:
        document: dict[str, Any] = json.load(answer)
    return document


def _route(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in status["routes"] if r["name"] == name)


def _cells(page: Page, selector: str) -> list[list[str]]:
    rows: list[list[str]] = page.evaluate(
        f"[...document.querySelectorAll({selector!r} + ' tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    return rows


def _shots(tmp_path: Path) -> Path:
    return Path(os.environ.get("SIDING_SCREENSHOTS") or tmp_path)


def _needs_chromium() -> None:
    if shutil.which("chromium") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is needed (make setup installs it with apt)")
        pytest.skip("chromium not installed")


def _shows_the_status(page: Page, status: dict[str, Any], topic: str) -> None:
    """The lane table, the lag per partition and the latest letters as ``/status`` has them."""
    name = status["name"]
    main = next(lane for lane in status["lanes"] if lane["lane"] == 0)
    lane_rows = _cells(page, f"[id='route-{name}'] table.lanes")
    shown = next(row for row in lane_rows if row[0] == "main")
    assert shown[2:8] == [
        f"{main['records']:,}",
        f"{main['acked']:,}",
        f"{main['to_lane']:,}",
        f"{main['to_dlq']:,}",
        f"{main['parked']:,}",
        f"{main['outputs']:,}",
    ]
    partitions = _cells(page, f"[id='route-{name}'] table.partitions")
    assert sorted(row[0] for row in partitions) == [f"{topic}-{p}" for p in range(3)]
    assert all(row[3] == "0" for row in partitions)
    letters = _cells(page, f"[id='route-{name}'] table.letters")
    dead = (status.get("kafka") or {})["dlq"]["latest"]
    assert dead, "the consumer dead-lettered some messages"
    assert [row[0] for row in letters] == [letter["id"] for letter in dead]
    assert all(row[1] for row in letters), "every letter shows its reason"


def test_the_page_shows_a_running_route_and_pauses_and_resumes_it(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    _needs_chromium()
    # Given a route whose consumer dead-letters a fifth of the messages, with the page open
    topic = topic_name("console")
    produce(kafka.bootstrap, topic, 60, partitions=3)
    sim, received_file = sim_consumer(latency_s=(0.001, 0.005), dead_ratio=0.2, seed=7)
    name = topic[-60:]
    route = {
        "name": name,
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}",
        "lanes": [{"delay": "1s"}],
    }
    metrics = MetricsSink()
    metrics.declare(name, 2)
    run = PipelineRun.from_route(
        kafka.bootstrap,
        route,
        checkpoint_dir=tmp_path / "ckpt",
        spark=spark,
        also=metrics.on_result,
    )
    control = run.config.control.model_copy(update={"token": SecretStr(TOKEN)})
    config = run.config.model_copy(update={"control": control})
    health = lambda: application_health(run.app)  # noqa: E731
    with (
        run,
        ControlPlane(
            config, ("127.0.0.1", 0), metrics, health, controls=run.app.controls, poll_s=0.5
        ) as plane,
        Page.open(plane.url + "/", tmp_path / "profile") as page,
    ):
        run.wait_committed(watermarks_of(run.client_conf, topic))

        # Then, once Kafka has been read after the last commit, the page shows what /status says
        def settled() -> bool:
            facts: dict[str, Any] = _route(_status(plane), name).get("kafka") or {}
            return (
                bool(facts)
                and facts["lag"] == 0
                and facts["dlq"]["size"] == run.totals.counts.to_dlq
            )

        wait_until(settled, timeout_s=60, what="the console's Kafka view caught up")
        status = _route(_status(plane), name)
        page.wait_for("document.body.innerText.includes('lag 0')")
        page.wait_for(
            f"document.body.innerText.includes('dead-lettered {status['dead_lettered']:,}')"
        )
        _shows_the_status(page, status, topic)
        page.screenshot(_shots(tmp_path) / "console.png")

        # When the operator gives the token and presses Pause
        page.type_into("#token", TOKEN)
        page.click(f"[id='pause-{name}']")
        wait_until(
            lambda: _route(_status(plane), name)["control"]["paused"],
            timeout_s=10,
            what="paused",
        )
        page.wait_for("document.querySelector('.paused') !== null")
        time.sleep(2)  # a batch that began before the pause finishes
        before = len(read_records(received_file))
        produce(kafka.bootstrap, topic, 30, start_seq=60, partitions=3)
        # Then nothing is delivered, and the page shows the lag growing by what arrived
        page.wait_for("document.body.innerText.includes('lag 30')", timeout_s=30)
        assert len(read_records(received_file)) == before
        page.screenshot(_shots(tmp_path) / "console-paused.png")

        # When Resume is pressed, everything is delivered and the lag drains
        page.click(f"[id='resume-{name}']")
        ends = watermarks_of(run.client_conf, topic)
        run.wait_committed(ends)
        page.wait_for("document.body.innerText.includes('lag 0')", timeout_s=30)
    received = {r.delivery_id for r in read_records(received_file)}
    expected = {delivery_id(topic, p, o) for p, end in ends.items() for o in range(end)}
    assert sum(ends.values()) == 90
    assert expected <= received


def test_calls_open_now_are_shown_while_they_run_and_parked(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    """The "in flight now" of the page, ``/status`` and ``/metrics`` counts the calls the
    consumer holds, between batches too (they are parked after 5 s and keep running)."""
    # Given 9 messages in one partition (one task sends them all at once) and a consumer that
    # holds each call for 20 s (the deadline is 30 s)
    topic = topic_name("in-flight-now")
    produce(kafka.bootstrap, topic, 9, partitions=1)
    sim, received_file = sim_consumer(latency_s=(20.0, 20.0))
    name = topic[-60:]
    route = {
        "name": name,
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}",
    }
    metrics = MetricsSink()
    metrics.declare(name, 1)
    run = PipelineRun.from_route(
        kafka.bootstrap,
        route,
        checkpoint_dir=tmp_path / "ckpt",
        spark=spark,
        also=metrics.on_result,
    )
    health = lambda: application_health(run.app)  # noqa: E731
    with run, ControlPlane(run.config, ("127.0.0.1", 0), metrics, health, poll_s=0.5) as plane:

        def open_now() -> int:
            facts: dict[str, Any] = _route(_status(plane), name).get("kafka") or {}
            return int((facts.get("in_flight") or {}).get("total", -1))

        # When the consumer has all 9 calls open
        wait_until(lambda: len(read_records(received_file)) == 9, timeout_s=60, what="all sent")
        # Then all 9 are shown open, also once the batch has parked them and committed
        wait_until(lambda: open_now() == 9, timeout_s=8, what="9 calls shown open")
        run.wait_committed(watermarks_of(run.client_conf, topic))
        assert open_now() == 9, "parked calls still running are still in flight"
        assert metrics.snapshot().lanes[(name, 0)].counts.parked == 9
        assert f'siding_in_flight{{lane="main",route="{name}"}} 9.0' in _metrics_text(plane)
        with Page.open(plane.url + "/", tmp_path / "profile") as page:
            page.wait_for("document.body.innerText.includes('in flight now 9')")
        # And once they answered, none
        wait_until(lambda: open_now() == 0, timeout_s=30, what="the answered calls closed")


def _metrics_text(plane: ControlPlane) -> str:
    import urllib.request

    with urllib.request.urlopen(plane.url + "/metrics", timeout=10) as answer:
        return str(answer.read().decode())
