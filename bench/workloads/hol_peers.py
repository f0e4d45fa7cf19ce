"""The HOL traffic (bench/workloads/hol.py) pushed by the peers, over HTTP to the same simulated
consumer as siding's webhooks: Redpanda Connect's engine (Benthos), Parallel Consumer over the
network (its Vert.x module) and Kafka's share groups (``KafkaShareConsumer``). Same broker, same
receiver; the same in-flight limit as siding where the peer has one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.peers import benthos, share_group
from bench.peers import parallel_consumer as pc
from bench.workloads import hol
from bench.workloads.context import BenchContext, scaled
from bench.workloads.traffic import Benthos, ParallelConsumerVertx, ShareGroup, System

PEERS = ("benthos", "parallel_consumer_vertx", "share_group")
# Share consumers for the HOL traffic: a record holds up the others of its poll, so one record a
# poll, and twice the records Little's law puts in flight at 200 msg/s (0.9 x 10 ms + 0.1 x 2 s
# = 0.209 s each: 42): 84 consumers.
SHARE_HOL = share_group.for_slow_messages(
    hol.RATE, (1 - hol.SLOW_RATIO) * hol.FAST_S + hol.SLOW_RATIO * hol.SLOW_S, headroom=2.0
)


def peer_systems(
    in_flight: int, share: share_group.Tuning = SHARE_HOL
) -> dict[str, Callable[[], System]]:
    """Each peer's system, built on demand (a build failure is that peer's error)."""
    return {
        "benthos": lambda: Benthos(benthos.build(), in_flight),
        "parallel_consumer_vertx": lambda: ParallelConsumerVertx(pc.build(), in_flight),
        "share_group": lambda: ShareGroup(share_group.build(), share),
    }


def unavailable(name: str, exc: BaseException) -> dict[str, Any]:
    """A peer that could not be built or run: no numbers, the exact reason."""
    return {
        "system": name,
        "with_slow": None,
        "without_slow": None,
        "error": f"{type(exc).__name__}: {exc}",
    }


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(hol.MESSAGES, ctx.scale, floor=400)
    peers: dict[str, dict[str, Any]] = {}
    for name, make in peer_systems(hol.IN_FLIGHT).items():
        try:
            # The peers do not tell the consumer an attempt number: redeliveries are not split.
            peers[name] = hol.measure_system(ctx, make(), count, attempts_known=False)
        except Exception as exc:
            peers[name] = unavailable(name, exc)
    return [
        {
            "name": "hol_peers",
            "messages": count,
            "peers": peers,
            "settings": {
                **hol.settings(),
                "benthos": "kafka_franz checkpoint_limit = http_client max_in_flight = in_flight",
                "parallel_consumer_vertx": "UNORDERED, maxConcurrency = in_flight",
                "share_group": {
                    "consumers": SHARE_HOL.consumers,
                    "max_poll_records": SHARE_HOL.max_poll_records,
                    "acquire_mode": "record_limit",
                    "acknowledgement": "explicit: ACCEPT on 2xx, RELEASE otherwise",
                },
            },
        }
    ]
