"""The fence's wait at start against a real broker, without ``--standby``: a restart after its
holder was SIGKILLed takes the route once the lease runs out, however late its reads brought the
holder's last record (stop 34's CI: the S3 SIGKILL test's restart stopped with "route ... is run
by ..." because its first read of the fence topic was slow on a loaded machine), and a route
whose holder is alive is still refused (docs/operations.md, "Two drivers for one route")."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Producer

from siding import naming
from siding.config import FenceConfig
from siding.devkit.broker import EmbeddedKafka
from siding.errors import RouteStopped
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.pipeline.driver.fence import RouteFence
from siding.pipeline.executor import lease

SETTINGS = FenceConfig.model_validate({"enabled": True, "lease": "3s", "renew": "1s"})
DEAD = "dead-host:1:x"


def _route_with_fence_topic(bootstrap: str, name: str) -> str:
    topic = naming.state_topic(name, naming.FENCE)
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic)])
    return topic


def _write(bootstrap: str, topic: str, record: lease.Lease) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    key, value = lease.encode(record, int(time.time() * 1000))
    producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


class _Acquiring:
    """``fence.acquire`` in a thread: when it returned, or what it raised."""

    def __init__(self, fence: RouteFence) -> None:
        self.fence = fence
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.took_s = -1.0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        try:
            self.fence.acquire(self.stop, standby=False)
        except BaseException as exc:  # the test reads it
            self.error = exc
        self.took_s = time.monotonic() - self._started

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        self.stop.set()
        assert not self._thread.is_alive(), "acquire still waiting"


def test_a_restart_takes_a_dead_holders_route_however_late_it_read_the_last_renewal(
    kafka: EmbeddedKafka, topic_name: Callable[[str], str]
) -> None:
    # Given a route whose holder was SIGKILLed: its lease (3 s) is in the fence topic
    route = topic_name("fence")
    topic = _route_with_fence_topic(kafka.bootstrap, route)
    _write(kafka.bootstrap, topic, lease.Lease(1, DEAD, SETTINGS.lease))
    # When a driver starts without --standby, and the holder's last renewal (in flight at the
    # kill) reaches it 1.5 s after it began watching, as a slow first read does on a loaded
    # machine
    fence = RouteFence({"bootstrap.servers": kafka.bootstrap}, route, SETTINGS, "restart:2:y")
    acquiring = _Acquiring(fence)
    time.sleep(1.5)
    _write(kafka.bootstrap, topic, lease.Lease(1, DEAD, SETTINGS.lease))
    try:
        acquiring.join(30)
        # Then it takes the route at the next epoch, once the lease ran out after that renewal
        assert acquiring.error is None, f"refused: {acquiring.error}"
        state = fence.state()
        assert state["holding"] and state["epoch"] == 2 and state["holder"] == "restart:2:y"
        assert acquiring.took_s >= 1.5 + SETTINGS.lease - SETTINGS.renew
    finally:
        fence.release()


def test_a_route_whose_holder_renews_is_refused_and_taken_at_once_when_it_is_released(
    kafka: EmbeddedKafka, topic_name: Callable[[str], str]
) -> None:
    # Given a route held by a live driver A, renewing every second
    route = topic_name("fence")
    _route_with_fence_topic(kafka.bootstrap, route)
    conf = {"bootstrap.servers": kafka.bootstrap}
    holder = RouteFence(conf, route, SETTINGS, "a:1:x")
    holder.acquire(threading.Event(), standby=False)
    try:
        # When B starts without --standby
        refused = RouteFence(conf, route, SETTINGS, "b:2:y")
        acquiring = _Acquiring(refused)
        acquiring.join(30)
        # Then B stops, naming the holder, once it saw A renew past one lease
        assert isinstance(acquiring.error, RouteStopped)
        assert str(acquiring.error) == (
            f"route {route} is run by a:1:x (fence epoch 1); start this one with --standby"
            " to wait for it"
        )
        assert acquiring.took_s >= SETTINGS.lease
        refused.release()
    finally:
        # And once A stops cleanly (released), the next driver takes the route at once
        holder.release()
    fence = RouteFence(conf, route, SETTINGS, "c:3:z")
    acquiring = _Acquiring(fence)
    try:
        acquiring.join(30)
        assert acquiring.error is None and fence.state()["epoch"] == 2
        assert acquiring.took_s < SETTINGS.lease
    finally:
        fence.release()
