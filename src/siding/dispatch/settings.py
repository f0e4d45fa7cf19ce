"""How one dispatch behaves; the pipeline builds this from the route config."""

from __future__ import annotations

from dataclasses import dataclass, field

from siding.dispatch.adaptive import AdaptiveSettings
from siding.dispatch.breaker import BreakerSettings
from siding.dispatch.parking import ParkSettings
from siding.errors import ConfigError
from siding.model import Lane, Ordering


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """``deadline_s`` is the per-attempt deadline of ``lane`` (the lane this slice comes from,
    0 = main); ``rate_limit`` is sends per second for this dispatch, 0 = no limit; ``park``
    says whether calls may outlive the dispatch (unordered only); a suspect on which the consumer
    died ``crash_limit`` times while no other suspect was out is dead-lettered."""

    max_in_flight: int = 100
    deadline_s: float = 30.0
    lanes: tuple[Lane, ...] = ()
    lane: int = 0
    ordering: Ordering = Ordering.UNORDERED
    max_retry_after_s: float = 300.0
    rate_limit: float = 0.0
    rate_burst: float | None = None
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    park: ParkSettings = field(default_factory=ParkSettings)
    crash_limit: int = 3
    # How long a suspect waits, once the consumer is back from a death it was out at (alone or
    # in a crowd) or from an outage that turned it away, before it may go again: the consumer
    # serves the others in between.
    recovery_s: float = 5.0
    # A suspect's pause after a death or a refusal is random in [0, this): tasks in other
    # processes see the consumer come back at the same moment, and their suspects must not go
    # out together again (an innocent would share a pill's lone deaths).
    suspect_spread_s: float = 2.0
    # The park lane: suspects that killed the consumer alone go back to the park topic while
    # they wait for their next turn, instead of holding the batch (docs/dispatch.md).
    hand_back: bool = False
    # The topics an answer may write outputs to (docs/outputs.md); () for none.
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.crash_limit < 1:
            raise ConfigError("crash_limit", "must be at least 1")
        if self.max_in_flight < 1:
            raise ConfigError("max_in_flight", "must be at least 1")
        if self.deadline_s <= 0:
            raise ConfigError("deadline_s", "must be positive")
        if not 0 <= self.lane <= len(self.lanes):
            raise ConfigError("lane", f"must be between 0 and {len(self.lanes)}")
        if self.max_retry_after_s < 0:
            raise ConfigError("max_retry_after_s", "must not be negative")
        if self.rate_limit < 0:
            raise ConfigError("rate_limit", "must not be negative")
