"""What the driver sends to every task of one batch of one lane (picklable, built per batch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from siding import naming
from siding.config import RouteConfig
from siding.dispatch import (
    AdaptiveSettings,
    BreakerSettings,
    DispatchSettings,
    OrderKey,
    ParkedRecord,
)
from siding.model import Ordering
from siding.policy import deadline_for


@dataclass(frozen=True)
class TaskPlan:
    route: RouteConfig
    lane: int
    client_conf: Mapping[str, object]
    settings: DispatchSettings
    lane_topics: tuple[str, ...]
    dlq_topic: str
    parked: Mapping[OrderKey, tuple[ParkedRecord, ...]] = field(default_factory=dict)

    def lane_topic(self, k: int) -> str:
        return self.lane_topics[k - 1]


def dispatch_settings(route: RouteConfig, lane: int) -> DispatchSettings:
    """The route's dispatch settings for one lane, before they are divided among tasks."""
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
        ),
    )


def share_among_tasks(settings: DispatchSettings, tasks: int) -> DispatchSettings:
    """Divide the route's in-flight window and rate among the batch's concurrent tasks."""
    tasks = max(1, tasks)
    in_flight = max(1, math.ceil(settings.max_in_flight / tasks))
    adaptive = replace(
        settings.adaptive, min_in_flight=min(settings.adaptive.min_in_flight, in_flight)
    )
    return replace(
        settings,
        max_in_flight=in_flight,
        rate_limit=settings.rate_limit / tasks if settings.rate_limit else 0.0,
        adaptive=adaptive,
    )


def build_plan(
    route: RouteConfig,
    lane: int,
    client_conf: Mapping[str, object],
    tasks: int,
    parked: Mapping[OrderKey, tuple[ParkedRecord, ...]],
) -> TaskPlan:
    return TaskPlan(
        route=route,
        lane=lane,
        client_conf=dict(client_conf),
        settings=share_among_tasks(dispatch_settings(route, lane), tasks),
        lane_topics=naming.route_lane_topics(route),
        dlq_topic=naming.route_dlq(route),
        parked=parked if route.ordering is Ordering.KEY else {},
    )
