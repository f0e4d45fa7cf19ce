"""A running route is one object (``siding.pipeline.driver.route``): what ``open`` takes and
``stop`` gives back, the steps of routes opened together, and the listener's live view of the
routes' commit targets. No broker, no Spark: the Kafka-facing steps are replaced."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from siding import naming
from siding.config import RouteConfig, SidingConfig, parse_config
from siding.pipeline.driver import route as route_module
from siding.pipeline.driver import topics
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.driver.clusters import Admins
from siding.pipeline.driver.commits import CommitTarget
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain
from siding.pipeline.driver.query import (
    MAX_RESTARTS_AFTER_ANOTHER_WRITE,
    restart_after,
    short_error,
)
from siding.pipeline.driver.route import LiveTargets, RouteRuntime, open_routes, query_names
from siding.pipeline.driver.topics import Prepared, RouteFailed
from siding.pipeline.offline import moves, owner
from siding.pipeline.offline.route_lock import CheckpointBusy, RouteLock
from siding.routing.producer import distinct


def _config(tmp_path: Path, *names: str) -> SidingConfig:
    text = f'[kafka]\nbootstrap = "127.0.0.1:9"\n[spark]\ncheckpoint_dir = "{tmp_path}"\n'
    for name in names:
        text += (
            f'[[route]]\nname = "{name}"\ntopic = "src-{name}"\ngroup = "g-{name}"\n'
            'endpoint = "grpc://127.0.0.1:9"\n'
        )
    return parse_config(text, env={})


def _runtime(config: SidingConfig, route: RouteConfig) -> RouteRuntime:
    return RouteRuntime(
        route,
        config,
        admins=Admins(config.kafka, make=lambda _conf: None),
        sink=BatchSink(),
        stop=threading.Event(),
        controls=RouteControls(),
        drain=Drain(),
    )


def _route_dir(tmp_path: Path, name: str) -> Path:
    return tmp_path / naming.route_checkpoint_subdir(name)


def _free(route_dir: Path) -> bool:
    try:
        RouteLock(route_dir, "test").acquire().release()
    except CheckpointBusy:
        return False
    return True


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each Kafka-facing step of ``open``, by route; a source named ``src-missing`` fails."""
    done: list[str] = []

    def prepare(
        _admin: Any,
        route: RouteConfig,
        *,
        fenced: bool = False,  # noqa: ARG001
        write_admin: Any = None,  # noqa: ARG001
    ) -> Prepared:
        if route.name == "missing":
            raise RouteFailed(f"route {route.name}: source topic src-missing does not exist")
        done.append(f"prepare {route.name}")
        return Prepared(route.source_topics, 3, {route.source_topics[0]: 3})

    def reconcile(_config: SidingConfig, route: RouteConfig, _admin: Any) -> None:
        done.append(f"reconcile {route.name}")

    monkeypatch.setattr(route_module, "cluster_id", lambda _admin: "cluster-1")
    monkeypatch.setattr(topics, "prepare", prepare)
    monkeypatch.setattr(moves, "reconcile_at_start", reconcile)
    return done


def test_open_takes_the_lock_and_topics_and_claims_the_checkpoint_stop_gives_the_lock_back(
    tmp_path: Path, steps: list[str]
) -> None:
    config = _config(tmp_path, "a")
    runtime = _runtime(config, config.route[0])
    route_dir = _route_dir(tmp_path, "a")
    runtime.open()
    assert steps == ["prepare a", "reconcile a"]
    assert runtime.partitions == 3
    assert (route_dir / owner.OWNER_FILE).exists()
    assert not _free(route_dir)  # held while the route runs
    runtime.stop()
    assert _free(route_dir)
    runtime.stop()  # a second stop gives back nothing more (and does not fail)
    assert _free(route_dir)


@pytest.mark.usefixtures("steps")
def test_a_stop_gives_back_the_checkpoint_before_it_waits_for_the_last_dlq_page(
    tmp_path: Path,
) -> None:
    # (issue 28: a standby waited up to the pager's 5 s for a page that writes nothing to Kafka)
    config = _config(tmp_path, "a")
    runtime = _runtime(config, config.route[0])
    runtime.open()
    route_dir = _route_dir(tmp_path, "a")
    seen: list[bool] = []

    class Pager:
        def stop(self) -> None:
            seen.append(_free(route_dir))

    runtime.pager = Pager()  # type: ignore[assignment]
    runtime.stop()
    assert seen == [True]


@pytest.mark.usefixtures("steps")
def test_a_start_that_fails_gives_back_what_open_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(_client_conf: Any, topic: str) -> list[Any]:
        raise RouteFailed(f"cannot read {topic}")

    monkeypatch.setattr(route_module, "read_to_end", unreachable)
    config = _config(tmp_path, "a")
    runtime = _runtime(config, config.route[0])
    runtime.open()
    with pytest.raises(RouteFailed, match="cannot read"):
        runtime.start(spark=None)  # type: ignore[arg-type]  # the state is read before Spark
    assert _free(_route_dir(tmp_path, "a"))
    assert runtime.queries == [] and dict(runtime.targets) == {}


def test_routes_opened_together_take_each_step_for_all_before_the_next(
    tmp_path: Path, steps: list[str]
) -> None:
    config = _config(tmp_path, "a", "b")
    runtimes = [_runtime(config, route) for route in config.route]
    open_routes(runtimes)
    assert steps == ["prepare a", "prepare b", "reconcile a", "reconcile b"]
    for runtime in runtimes:
        runtime.stop()


def test_a_route_that_cannot_open_leaves_every_route_of_the_start_unclaimed_and_unlocked(
    tmp_path: Path, steps: list[str]
) -> None:
    # Given two routes started together, the second reading a topic that does not exist
    config = _config(tmp_path, "a", "missing")
    runtimes = [_runtime(config, route) for route in config.route]
    # Then the start fails, claims neither checkpoint, moves no group, holds no lock
    with pytest.raises(RouteFailed, match="src-missing does not exist"):
        open_routes(runtimes)
    assert steps == ["prepare a"]
    for name in ("a", "missing"):
        assert not (_route_dir(tmp_path, name) / owner.OWNER_FILE).exists()
        assert _free(_route_dir(tmp_path, name))


def test_a_route_whose_checkpoint_is_busy_takes_nothing_and_frees_the_others(
    tmp_path: Path, steps: list[str]
) -> None:
    config = _config(tmp_path, "a", "b")
    other = RouteLock(_route_dir(tmp_path, "b"), "another siding").acquire()
    runtimes = [_runtime(config, route) for route in config.route]
    with pytest.raises(CheckpointBusy, match="another siding"):
        open_routes(runtimes)
    assert steps == []  # no topic created before every lock was taken
    assert _free(_route_dir(tmp_path, "a"))
    other.release()


def test_the_listener_sees_each_routes_commit_targets_as_they_come_and_go(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "a", "b")
    routes: dict[str, RouteRuntime] = {}
    targets = LiveTargets(routes)  # made before any route runs, as the listener is
    assert targets.get("siding.a.main") is None and len(targets) == 0
    for route in config.route:
        runtime = routes[route.name] = _runtime(config, route)
        runtime.targets[f"q-{route.name}"] = CommitTarget(route.group, route.source_topics[0])
    assert targets["q-b"] == CommitTarget("g-b", "src-b")
    assert sorted(targets) == ["q-a", "q-b"] and len(targets) == 2
    routes["a"].stop()  # a stopped route's targets are gone
    assert targets.get("q-a") is None and list(targets) == ["q-b"]
    with pytest.raises(KeyError):
        targets["q-a"]


def test_a_route_may_run_a_query_per_lane_and_its_park_lane(tmp_path: Path) -> None:
    route = _config(tmp_path, "a").route[0]
    lanes = (naming.PARK_LANE, *range(len(route.lanes) + 1))
    assert query_names(route) == [naming.query_name("a", lane) for lane in lanes]
    assert len(set(query_names(route))) == len(route.lanes) + 2


def test_a_query_error_is_told_by_its_line_about_siding() -> None:
    trace = "py4j.Py4JException: wrapped\n  at x\n  siding.errors.BatchFailed: lane 1\n  at y"
    assert short_error(trace) == "siding.errors.BatchFailed: lane 1"
    assert short_error("first line\nsecond") == "first line"
    assert short_error("  ") == "unknown error"


def test_a_query_error_is_never_told_by_a_stack_frame() -> None:
    # (issue 27: a route once stopped on 'File ".../pipeline/batch.py", line 226, in ...')
    trace = (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent"
        " call last):\n"
        '  File "/x/siding/pipeline/driver/batch.py", line 226, in run_with_retries\n'
        "    return run()\n"
        "siding.pipeline.driver.batch.BatchFailed: route r lane 0 batch 3: no\n"
        "\tat org.apache.spark.sql.execution.streaming.StreamExecution.run(StreamExecution.scala:1)"
    )
    assert (
        short_error(trace) == "siding.pipeline.driver.batch.BatchFailed: route r lane 0 batch 3: no"
    )
    spark_only = (
        "Traceback (most recent call last):\n"
        '  File "/x/siding/cli/run.py", line 9, in run\n'
        "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized\n"
        "\tat org.apache.kafka.X.y(X.java:1)"
    )
    assert short_error(spark_only) == (
        "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized"
    )


def test_a_query_error_is_never_told_by_spark_s_description_of_the_query() -> None:
    # (CI, stop 33: a route stopped on "siding.fence.parked stopped: Identifier: siding.fence.parked
    # [id = ..., runId = ...]", the query's name matching "siding", the cause never said)
    text = (
        "org.apache.spark.sql.streaming.StreamingQueryException: Multiple streaming queries are"
        " concurrently using file:/ckpt/offsets\n"
        "=== Streaming Query ===\n"
        "Identifier: siding.fence.parked [id = 1, runId = 2]\n"
        "Current Committed Offsets: {KafkaV2[Subscribe[siding.fence.park]]: {}}\n"
    )
    assert short_error(text) == (
        "org.apache.spark.sql.streaming.StreamingQueryException: Multiple streaming queries are"
        " concurrently using file:/ckpt/offsets"
    )
    assert short_error("=== Streaming Query ===\nIdentifier: siding.x") == "unknown error"


def test_a_fenced_route_starts_a_query_again_after_another_driver_wrote_its_checkpoint() -> None:
    spark_said = (
        "org.apache.spark.sql.streaming.StreamingQueryException: [CONCURRENT_STREAM_LOG_UPDATE]"
        " Concurrent update to the log. Multiple streaming jobs detected for 12."
    )
    assert restart_after(spark_said, holds_fence=True, restarts=0)
    last = MAX_RESTARTS_AFTER_ANOTHER_WRITE
    assert restart_after(spark_said, holds_fence=True, restarts=last - 1)
    # Not forever, not without the fence (then this driver may be the one that lost it; an
    # unfenced route's lock keeps a second driver out), not for any other error
    assert not restart_after(spark_said, holds_fence=True, restarts=last)
    assert not restart_after(spark_said, holds_fence=False, restarts=0)
    assert not restart_after("siding.errors.BatchFailed: lane 1", holds_fence=True, restarts=0)


def test_a_write_that_fails_the_same_way_for_every_record_says_it_once() -> None:
    errors = ["out: Local: Unknown topic"] * 20 + ["dlq: Broker: Not leader"]
    assert distinct(errors) == "out: Local: Unknown topic (x20); dlq: Broker: Not leader"
    assert distinct(["a", "b", "c", "d", "e"]) == "a; b; c; and 2 other error(s)"
