"""``local[*]`` gives every lane of every route its own task slot (pure rules)."""

from __future__ import annotations

from siding.config import RouteConfig, parse_config
from siding.pipeline.driver.session import MAX_LOCAL_SLOTS, effective_master, task_slots

ROUTE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:50051"
min_partitions = {min_partitions}
lanes = [{{ delay = "1s" }}, {{ delay = "5s" }}]
"""


def _route(min_partitions: int = 0) -> RouteConfig:
    return parse_config(ROUTE.format(min_partitions=min_partitions)).route[0]


def test_a_route_needs_its_main_tasks_plus_one_set_per_lane() -> None:
    assert task_slots(_route(), partitions=3) == 3 + (2 + 1) * 3
    assert task_slots(_route(8), partitions=3) == 8 + (2 + 1) * 3


def test_local_star_gets_enough_slots_but_never_fewer_than_cores() -> None:
    assert effective_master("local[*]", 9, cores=2) == "local[9]"
    assert effective_master("local[*]", 1, cores=4) == "local[4]"
    assert effective_master("local[*]", 10_000, cores=2) == f"local[{MAX_LOCAL_SLOTS}]"


def test_an_explicit_master_is_left_alone() -> None:
    for master in ("local[2]", "spark://h:7077", "yarn", "k8s://https://k:443"):
        assert effective_master(master, 9, cores=2) == master
