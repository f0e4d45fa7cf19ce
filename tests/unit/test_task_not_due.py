"""A retry lane puts back records whose Retry-After is further away than its own delay."""

from __future__ import annotations

from siding import naming
from siding.config import parse_config
from siding.dispatch import Settled, Work
from siding.model import Delivery, LaneHop
from siding.pipeline.executor.plan import build_plan
from siding.pipeline.executor.rows import Incoming
from siding.pipeline.executor.task import not_due, route_out, tally
from siding.routing import story
from siding.steps import Resent, StepCounts

CONFIG = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:50051"
lanes = [{ delay = "10s" }]
"""


def _item(offset: int, not_before_ms: int) -> Incoming:
    delivery = Delivery(f"t/0/{offset}", "t", 0, offset, None, b"v", attempt=2, lane=1)
    return Incoming(delivery, not_before_ms=not_before_ms)


def test_only_records_due_after_the_lanes_delay_are_put_back() -> None:
    route = parse_config(CONFIG).route[0]
    now = 1_000_000
    items = [_item(1, now + 5_000), _item(2, now + 11_000), _item(3, now + 600_000)]
    lane = build_plan(route, 1, {}, tasks=1, waiting={})
    assert [i.delivery.offset for i in not_due(lane, items, now)] == [3]
    main = build_plan(route, 0, {}, tasks=1, waiting={})
    assert not_due(main, items, now) == []


def test_a_record_put_back_is_resent_to_its_lane_with_its_story_unchanged() -> None:
    route = parse_config(CONFIG).route[0]
    lane = build_plan(route, 1, {}, tasks=1, waiting={})
    item = _item(3, 1_600_000)
    hops = (LaneHop(0, 1, 900_000, "http 503"),)
    out = route_out(
        lane, [Settled(Work(item.delivery), Resent(1_600_000))], {item.delivery.id: hops}, 1_000_000
    )
    [record] = out
    told = story.decode(record.headers)
    assert record.topic == naming.lane_topic(route.name, 1)
    assert told is not None
    assert (told.not_before_ms, told.hops, told.attempt, told.reason) == (
        1_600_000,
        hops,
        2,
        "http 503",
    )
    # Resent is written, not settled: the task does not count it.
    assert tally([Settled(Work(item.delivery), Resent(1_600_000))]).counts == StepCounts()
