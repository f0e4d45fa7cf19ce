"""The park lane's decisions and the driver's settlement store (pure, no broker)."""

from __future__ import annotations

import pytest

from siding import naming
from siding.config import parse_config
from siding.dispatch import Settled, Work
from siding.model import DeadClass, DeadKind, Delivery, Outcome, OutcomeKind, delivery_id
from siding.pipeline.driver.settlements import STALE_AFTER_MS, SettlementStore
from siding.pipeline.executor.park_task import sort_parked
from siding.pipeline.executor.plan import TaskPlan, build_plan
from siding.pipeline.executor.rows import Incoming, incoming
from siding.pipeline.executor.task import dead_reasons
from siding.routing import settlement, story
from siding.routing.producer import OutRecord
from siding.routing.records import park_record
from siding.routing.settlement import Settlement
from siding.steps import Done, ToDlq, ToLane
from siding.transport.outcomes import lost

CONFIG = """
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://localhost:50051"
lanes = [{ delay = "10s" }]
"""
NOW = 1_000_000


def plan(lanes: str = '[{ delay = "10s" }]') -> TaskPlan:
    config = parse_config(CONFIG.replace('[{ delay = "10s" }]', lanes))
    return build_plan(config.route[0], naming.PARK_LANE, {}, 2, {})


def parked(offset: int, token: str, not_before_ms: int = NOW + 5_000) -> Incoming:
    delivery = Delivery(delivery_id("trips", 0, offset), "trips", 0, offset, None, b"v")
    return Incoming(delivery, not_before_ms=not_before_ms, park_token=token)


def answer(token: str, kind: OutcomeKind, reason: str = "") -> Settlement:
    return Settlement(token, Outcome(kind, reason), NOW)


def test_answered_calls_finish_from_their_answer_and_others_wait_or_go_again() -> None:
    p = plan()
    items = [
        parked(1, "a"),
        parked(2, "b"),
        parked(3, "c"),
        parked(4, "d"),  # no answer, not due: back to the park topic
        parked(5, "e", not_before_ms=NOW - 1),  # no answer and due: the call was lost
        parked(6, "f"),
        parked(7, "g"),
        Incoming(parked(8, "h", not_before_ms=NOW - 1).delivery, NOW - 1, deaths=2),  # a suspect
    ]
    answers = {
        "a": answer("a", OutcomeKind.ACK),
        "b": answer("b", OutcomeKind.DEAD, "bad payload"),
        "c": answer("c", OutcomeKind.RETRY, "try later"),
        "f": answer("f", OutcomeKind.BACKOFF, "busy"),  # asked again, here
        "g": Settlement("g", lost("stream broke"), NOW),  # the consumer died with it: a suspect
    }
    finished, again, later = sort_parked(p, items, answers, NOW)
    steps = {s.work.delivery.offset: s.step for s in finished}
    assert isinstance(steps[1], Done)
    assert steps[2] == ToDlq("bad payload")
    assert isinstance(steps[3], ToLane) and steps[3].lane == 1 and steps[3].attempt == 2
    assert [i.delivery.offset for i in later] == [4]
    assert {
        lane: [(w.delivery.offset, w.deaths) for w in group] for lane, group in again.items()
    } == {0: [(5, 0), (6, 0), (7, 1), (8, 2)]}


def test_a_retry_with_no_lane_left_is_dead_lettered() -> None:
    finished, _, _ = sort_parked(
        plan("[]"),
        [parked(1, "a")],
        {"a": answer("a", OutcomeKind.RETRY, "nope")},
        NOW,
    )
    (item,) = finished
    assert isinstance(item.step, ToDlq)
    assert "retries exhausted" in item.step.reason


def test_a_malformed_parked_record_is_dead_lettered_with_its_reason() -> None:
    bad = Incoming(parked(1, "").delivery, malformed="record without siding headers")
    finished, again, later = sort_parked(plan(), [bad], {}, NOW)
    assert [s.step for s in finished] == [
        ToDlq("record without siding headers", DeadClass(DeadKind.MALFORMED))
    ]
    assert not again and not later


@pytest.mark.parametrize(
    "outcome", [Outcome(OutcomeKind.RETRY, "slow", retry_after_s=3.0), lost("stream broke")]
)
def test_settlements_round_trip_through_their_record(outcome: Outcome) -> None:
    original = Settlement("t1", outcome, NOW)
    record = settlement.settlement_record("topic", original)
    assert record.key == b"t1"
    assert record.value is not None
    assert settlement.decode(record.key, record.value) == original
    assert settlement.tombstone("topic", "t1").value is None


def test_the_store_follows_the_topic_and_forgets_durably() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    written: list[OutRecord] = []
    read_upto = [0]

    def read_new() -> list[tuple[bytes, bytes | None]]:
        new = log[read_upto[0] :]
        read_upto[0] = len(log)
        return new

    def write(records: object) -> None:
        for r in records:  # type: ignore[attr-defined]
            written.append(r)
            log.append((r.key, r.value))

    store = SettlementStore("settled", read_new, write)
    for token, kind in (("a", OutcomeKind.ACK), ("b", OutcomeKind.DEAD)):
        r = settlement.settlement_record("settled", answer(token, kind))
        log.append((r.key or b"", r.value))
    stale = settlement.settlement_record("settled", Settlement("old", Outcome(OutcomeKind.ACK), 0))
    log.append((stale.key or b"", stale.value))
    store.catch_up()
    assert set(store.of(["a", "b", "zzz"])) == {"a", "b"}
    # Forgetting "a" also drops the stale one, each with a tombstone
    assert store.forget(["a"], now_ms=STALE_AFTER_MS + 10) == 2
    assert sorted((r.key, r.value) for r in written) == [(b"a", None), (b"old", None)]
    store.catch_up()  # the tombstones come back through the topic: nothing changes
    assert set(store.snapshot()) == {"b"}


def test_a_handed_over_suspect_carries_its_deaths_through_the_park_topic() -> None:
    delivery = parked(3, "").delivery
    record = park_record(
        delivery, token="t9", not_before_ms=NOW, hops=(), route="billing", park_topic="p", deaths=2
    )
    (item,) = incoming([("p", 0, 7, record.key, record.value, list(record.headers), NOW)], lane=1)
    assert (item.park_token, item.deaths, item.delivery.id) == ("t9", 2, delivery.id)
    told = story.decode(record.headers)
    assert told is not None and "suspect" in told.reason


def test_dead_letters_are_counted_by_reason_class() -> None:
    # The main lane and the park lane count their dead letters this way (the park lane did not)
    settled = [
        Settled(Work(parked(1, "a").delivery), ToDlq("record without siding headers")),
        Settled(Work(parked(2, "b").delivery), ToDlq("customer has no account")),
        Settled(Work(parked(3, "c").delivery), Done()),
    ]
    assert dead_reasons(settled) == {"malformed": 1, "consumer said dead": 1}
