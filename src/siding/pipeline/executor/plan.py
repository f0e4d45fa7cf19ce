"""What the driver sends to every task of one batch of one lane (picklable, built per batch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from siding import naming
from siding.config import RouteConfig
from siding.dispatch import (
    AdaptiveSettings,
    BreakerSettings,
    DispatchSettings,
    OrderKey,
    ParkSettings,
    WaitingRecord,
)
from siding.dispatch.budget import host_share, host_slots
from siding.model import Ordering
from siding.pipeline.executor.fence_gate import FencePlan
from siding.pipeline.executor.progress import ProgressPlan
from siding.policy import deadline_for
from siding.routing.settlement import Settlement
from siding.tracing.settings import TraceSettings


@dataclass(frozen=True)
class TaskPlan:
    route: RouteConfig
    lane: int
    client_conf: Mapping[str, object]
    settings: DispatchSettings
    lane_topics: tuple[str, ...]
    dlq_topic: str
    park_topic: str
    settle_topic: str
    hold_topic: str
    # Key mode: per key, the records waiting out of the line (in a lane or held), not parked calls.
    waiting: Mapping[OrderKey, tuple[WaitingRecord, ...]] = field(default_factory=dict)
    tasks: int = 1
    # The park lane only: what the calls behind this batch's parked records answered.
    settlements: Mapping[str, Settlement] = field(default_factory=dict)
    # Grows each time an operator closes the route's breakers (siding.pipeline.driver.controls).
    breaker_epoch: int = 0
    # Where consumer instances that join the route are registered ("": none join it).
    registry_topic: str = ""
    # The settings of the registry topic's cluster ([kafka]); empty: ``client_conf``'s.
    registry_conf: Mapping[str, object] = field(default_factory=dict)
    # A file that appears when a draining stop begins (siding.pipeline.driver.drain); "" for none.
    drain_file: str = ""
    # Where tasks record what they made durable, and what earlier attempts did (docs/replay.md).
    progress: ProgressPlan | None = None
    # Where the workers report their calls in flight now (pipeline.executor.live); "" for nowhere.
    live_topic: str = ""
    # The executors the route's budget is shared among (docs/dispatch.md, "One budget").
    executors: int = 1
    # Whose budget the calls count against: the route's ("live") or a backfill's own.
    budget_scope: str = "live"
    # The fence the batch runs under; writes are refused once a newer epoch is claimed.
    fence: FencePlan | None = None
    # [tracing] as resolved on the driver; None: off (siding.tracing).
    tracing: TraceSettings | None = None
    # The streaming query's batch id (-1: not a streaming batch), for trace lines.
    batch_id: int = -1

    def lane_topic(self, k: int) -> str:
        return self.lane_topics[k - 1]


def dispatch_settings(route: RouteConfig, lane: int, *, park: bool = True) -> DispatchSettings:
    """The route's dispatch settings for one lane, before they are divided among tasks;
    ``park=False`` for the park lane, whose own deliveries are awaited, and whose suspects
    waiting for their next turn go back to the park topic (``hand_back``)."""
    lanes = route.lanes_as_model()
    return DispatchSettings(
        max_in_flight=route.max_in_flight,
        deadline_s=deadline_for(lane, route.deadline, lanes),
        lanes=lanes,
        lane=lane,
        ordering=route.ordering,
        max_retry_after_s=route.max_retry_after,
        rate_limit=route.rate_limit,
        breaker=BreakerSettings(
            failure_threshold=route.breaker.failure_threshold,
            open_for_s=route.breaker.open_for,
            max_open_for_s=route.breaker.max_open_for,
        ),
        adaptive=AdaptiveSettings(
            enabled=route.adaptive.enabled,
            min_in_flight=min(route.adaptive.min_in_flight, route.max_in_flight),
            latency=route.adaptive.latency,
            latency_tolerance=route.adaptive.latency_tolerance,
        ),
        park=ParkSettings(
            enabled=park and route.parks,
            floor_s=route.park.floor,
            ceiling_s=route.park.ceiling,
        ),
        crash_limit=route.crash_limit,
        hand_back=not park and route.parks,
        outputs=route.outputs,
    )


def share_among_executors(settings: DispatchSettings, executors: int) -> DispatchSettings:
    """One executor's part of the route's in-flight limit and rate: the budget every task,
    lane and parked call on that executor shares (docs/dispatch.md, "One budget"). One window
    may use all of it."""
    in_flight = host_slots(settings.max_in_flight, executors)
    adaptive = replace(
        settings.adaptive, min_in_flight=min(settings.adaptive.min_in_flight, in_flight)
    )
    return replace(
        settings,
        max_in_flight=in_flight,
        rate_limit=host_share(settings.rate_limit, executors),
        adaptive=adaptive,
    )


def build_plan(
    route: RouteConfig,
    lane: int,
    client_conf: Mapping[str, object],
    tasks: int,
    waiting: Mapping[OrderKey, tuple[WaitingRecord, ...]],
    *,
    settlements: Mapping[str, Settlement] | None = None,
    breaker_epoch: int = 0,
    registry_topic: str = "",
    registry_conf: Mapping[str, object] | None = None,
    drain_file: str = "",
    progress: ProgressPlan | None = None,
    executors: int = 1,
    budget_scope: str = "live",
    fence: FencePlan | None = None,
    tracing: TraceSettings | None = None,
    batch_id: int = -1,
) -> TaskPlan:
    """``lane`` may be ``naming.PARK_LANE``: its settings are then the main lane's, unparked
    (the park task picks each record's own lane)."""
    parks = lane != naming.PARK_LANE
    return TaskPlan(
        route=route,
        lane=lane,
        client_conf=dict(client_conf),
        settings=share_among_executors(
            dispatch_settings(route, max(lane, 0), park=parks), executors
        ),
        lane_topics=naming.route_lane_topics(route),
        dlq_topic=naming.route_dlq(route),
        park_topic=naming.park_topic(route.name),
        settle_topic=naming.state_topic(route.name, naming.SETTLED),
        hold_topic=naming.hold_topic(route.name),
        waiting=waiting if route.ordering is Ordering.KEY else {},
        tasks=max(1, tasks),
        settlements=dict(settlements or {}),
        breaker_epoch=breaker_epoch,
        registry_topic=registry_topic if route.takes_registrations else "",
        registry_conf=dict(registry_conf or {}),
        drain_file=drain_file,
        progress=progress,
        live_topic=naming.state_topic(route.name, naming.LIVE),
        executors=max(1, executors),
        budget_scope=budget_scope,
        fence=fence,
        tracing=tracing,
        batch_id=batch_id,
    )
