"""``/metrics``: the metrics snapshot as Prometheus families, in a registry of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from siding import naming
from siding.control.status import KafkaFacts, QueryHealth
from siding.dispatch import BreakerState
from siding.pipeline.driver.metrics import LaneMetrics, Snapshot

_LABELS = ["route", "lane"]


def _outcomes(lane: LaneMetrics) -> dict[str, int]:
    counts = lane.counts
    return {
        "ack": counts.acked,
        "lane": counts.to_lane,
        "dlq": counts.to_dlq,
        "parked": counts.parked,
        "held": counts.held,
    }


class SnapshotCollector(Collector):
    """Reads a fresh snapshot on every scrape; nothing is kept between scrapes."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        queries: Callable[[], Sequence[QueryHealth]] = tuple,
        kafka: KafkaFacts | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._queries = queries
        self._kafka = kafka

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        records = CounterMetricFamily(
            "siding_records",
            "Records given a durable outcome, by outcome (ack, lane = moved to the next retry"
            " lane, dlq = dead-lettered).",
            labels=[*_LABELS, "outcome"],
        )
        batches = CounterMetricFamily("siding_batches", "Micro-batches completed.", labels=_LABELS)
        outputs = CounterMetricFamily(
            "siding_outputs",
            "Output records produced for consumers' answers (docs/outputs.md), counted when"
            " their input is done.",
            labels=_LABELS,
        )
        sends = CounterMetricFamily("siding_sends", "Deliveries sent to consumers.", labels=_LABELS)
        answers = CounterMetricFamily(
            "siding_answers", "Consumer answers by kind.", labels=[*_LABELS, "kind"]
        )
        dead = CounterMetricFamily(
            "siding_dead_letters", "Dead-lettered records by reason.", labels=[*_LABELS, "reason"]
        )
        latency = HistogramMetricFamily(
            "siding_delivery_latency_seconds",
            "Time from sending a delivery to the consumer's answer.",
            labels=_LABELS,
        )
        in_flight = GaugeMetricFamily(
            "siding_in_flight_peak",
            "Peak deliveries in flight during the lane's last batch (summed over its tasks).",
            labels=_LABELS,
        )
        last_batch = GaugeMetricFamily(
            "siding_last_batch_seconds", "Duration of the lane's last batch.", labels=_LABELS
        )
        suspects = CounterMetricFamily(
            "siding_suspects",
            "Deliveries that were out when the consumer went away (no attempt spent; each then"
            " goes out alone before the others of its kind).",
            labels=_LABELS,
        )
        isolations = CounterMetricFamily(
            "siding_isolations", "Sends of a suspect on its own.", labels=_LABELS
        )
        convictions = CounterMetricFamily(
            "siding_crash_convictions",
            "Records dead-lettered because the consumer died crash_limit times while handling"
            " them alone.",
            labels=_LABELS,
        )
        holdouts = CounterMetricFamily(
            "siding_holdouts",
            "Records moved to their next lane after being turned away for a whole deadline while"
            " the endpoint was up.",
            labels=_LABELS,
        )
        spans_dropped = CounterMetricFamily(
            "siding_trace_spans_dropped",
            "Spans ([tracing]) the lane's workers could not export to the OTLP endpoint.",
            labels=_LABELS,
        )
        breaker = GaugeMetricFamily(
            "siding_breaker_state",
            "1 for the circuit breaker's current state, 0 for the others.",
            labels=[*_LABELS, "state"],
        )
        for (route, lane_no), lane in sorted(snap.lanes.items()):
            labels = [route, naming.lane_label(lane_no)]
            for outcome, n in _outcomes(lane).items():
                records.add_metric([*labels, outcome], n)
            batches.add_metric(labels, lane.batches)
            outputs.add_metric(labels, lane.counts.outputs)
            sends.add_metric(labels, lane.sends)
            for kind, n in lane.outcomes.items():
                answers.add_metric([*labels, kind.value], n)
            for reason, n in lane.dead_reasons.items():
                dead.add_metric([*labels, reason], n)
            hist = lane.latency
            bounds = [*(repr(b) for b in hist.bounds_s), "+Inf"]
            cumulative = list(accumulate(hist.counts))
            latency.add_metric(
                labels, list(zip(bounds, cumulative, strict=True)), sum_value=hist.sum_s
            )
            in_flight.add_metric(labels, lane.last_in_flight)
            last_batch.add_metric(labels, lane.last_batch_s)
            suspects.add_metric(labels, lane.suspected)
            isolations.add_metric(labels, lane.isolations)
            convictions.add_metric(labels, lane.convicted)
            holdouts.add_metric(labels, lane.holdouts)
            spans_dropped.add_metric(labels, lane.spans_dropped)
            for state in BreakerState:
                breaker.add_metric([*labels, state.value], 1.0 if lane.breaker is state else 0.0)
        yield from (records, batches, sends, answers, dead, latency, in_flight, last_batch)
        yield from (suspects, isolations, convictions, holdouts, breaker, outputs, spans_dropped)
        up = GaugeMetricFamily(
            "siding_query_up",
            "1 while the streaming query (a route's lane) runs, 0 once it stopped (see /status).",
            labels=["query"],
        )
        for query in self._queries():
            up.add_metric([query.name], 1.0 if query.active else 0.0)
        yield up
        yield from page_families(snap)
        if self._kafka is not None:
            yield from kafka_families(snap.routes(), self._kafka, int(time.time() * 1000))


def page_families(snap: Snapshot) -> Iterator[Metric]:
    """Each paging route's DLQ pages ([route.dlq_page], docs/dlq.md)."""
    sent = CounterMetricFamily(
        "siding_dlq_pages_sent",
        "DLQ pages the notification URL took (2xx), each announcing new dead letters.",
        labels=["route"],
    )
    dropped = CounterMetricFamily(
        "siding_dlq_pages_dropped",
        "DLQ pages dropped (the notifier down, slow or not 2xx): their letters are in the DLQ,"
        " only the page was lost.",
        labels=["route"],
    )
    letters = CounterMetricFamily(
        "siding_dlq_page_letters",
        "Dead letters counted by DLQ pages, by whether their page was sent or dropped.",
        labels=["route", "result"],
    )
    for route, tally in sorted(snap.pages.items()):
        sent.add_metric([route], tally.sent)
        dropped.add_metric([route], tally.dropped)
        letters.add_metric([route, "sent"], tally.letters_sent)
        letters.add_metric([route, "dropped"], tally.letters_dropped)
    yield from (sent, dropped, letters)


def kafka_families(routes: Sequence[str], kafka: KafkaFacts, now_ms: int) -> Iterator[Metric]:
    """What the driver last read from Kafka (``siding.control.kafka_view``), as gauges."""
    lag = GaugeMetricFamily(
        "siding_consumer_lag_records",
        "Records of the source topic after the route's committed offset, per partition.",
        labels=["route", "topic", "partition"],
    )
    backlog = GaugeMetricFamily(
        "siding_lane_backlog_records",
        "Records waiting in a lane's topic (retry lanes and the park lane).",
        labels=_LABELS,
    )
    due = GaugeMetricFamily(
        "siding_lane_next_due_seconds",
        "Seconds until the first waiting record of a lane falls due (negative: overdue).",
        labels=_LABELS,
    )
    dlq = GaugeMetricFamily(
        "siding_dlq_records", "Records in the route's dead-letter topic.", labels=["route"]
    )
    in_flight = GaugeMetricFamily(
        "siding_in_flight",
        "Calls open at the consumers now, summed over every worker (parked calls included).",
        labels=_LABELS,
    )
    for route in routes:
        facts = kafka(route)
        if facts is None:
            continue
        for p in facts.partitions:
            lag.add_metric([route, p.topic, str(p.partition)], p.lag)
        for lane in facts.lanes:
            backlog.add_metric([route, lane.label], lane.backlog)
            if lane.next_due_ms is not None:
                due.add_metric([route, lane.label], (lane.next_due_ms - now_ms) / 1000)
        dlq.add_metric([route], facts.dlq_size)
        if facts.in_flight_at_ms:
            open_now = dict(facts.in_flight)
            # Every lane is shown, 0 included, so a dashboard sees the series go to 0.
            for label in dict.fromkeys([naming.lane_label(0), *open_now]):
                in_flight.add_metric([route, label], open_now.get(label, 0))
    yield from (lag, backlog, due, dlq, in_flight)


def metrics_registry(
    snapshot: Callable[[], Snapshot],
    queries: Callable[[], Sequence[QueryHealth]] = tuple,
    kafka: KafkaFacts | None = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, queries, kafka))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
