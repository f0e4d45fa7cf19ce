"""What a route's checkpoint belongs to: its Kafka cluster, source topic and route.

Spark's checkpoint holds offsets of one cluster's topics; started against another cluster or
topic it fails deep inside Spark with a stack trace. siding keeps ``siding-owner.json`` in the
route's checkpoint folder (written on the first start) and refuses a mismatch at once, in one
line (docs/operations.md, "Checkpoints").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from siding.errors import CheckpointError
from siding.pipeline.offline import storage
from siding.pipeline.offline.storage import Place, place

OWNER_FILE = "siding-owner.json"


@dataclass(frozen=True, slots=True)
class Owner:
    route: str
    topic: str
    # Empty when the cluster did not say (then it is not compared).
    cluster_id: str

    def describe(self) -> str:
        cluster = self.cluster_id or "an unknown cluster"
        return f"route {self.route}, topic {self.topic} on Kafka cluster {cluster}"

    def to_json(self) -> str:
        return json.dumps({"version": 1, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Owner:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls(str(data["route"]), str(data["topic"]), str(data.get("cluster_id") or ""))


@dataclass(frozen=True, slots=True)
class SparkState:
    """What Spark's own checkpoint files say: whether any query of the route has offsets, and
    the topics named in the main lane's latest offsets."""

    has_offsets: bool = False
    topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Judgement:
    write: bool = False
    problem: str = ""


def _same(recorded: Owner, current: Owner) -> bool:
    clusters_known = bool(recorded.cluster_id and current.cluster_id)
    return (
        recorded.route == current.route
        and recorded.topic == current.topic
        and (not clusters_known or recorded.cluster_id == current.cluster_id)
    )


def _ways_out(path: str) -> str:
    return (
        f"set another [spark] checkpoint_dir, or delete {path} to start the route afresh"
        " (from its group's committed offsets, else route.starting_offsets)"
    )


def judge(path: str, recorded: Owner | None, current: Owner, state: SparkState) -> Judgement:
    """Pure: may ``current`` use the checkpoint at ``path``, and must the owner file be written?

    A checkpoint without Spark offsets holds no positions: anyone may take it. One written
    before owner files existed is taken when its offsets name the route's topic (or none).
    """
    if not state.has_offsets:
        return Judgement(write=recorded != current)
    if recorded is None:
        if state.topics and current.topic not in state.topics:
            topics = ", ".join(sorted(state.topics))
            return Judgement(
                problem=f"checkpoint {path} belongs to topic {topics} (its Spark offsets say so),"
                f" not to {current.describe()}: {_ways_out(path)}"
            )
        return Judgement(write=True)
    if _same(recorded, current):
        return Judgement()
    return Judgement(
        problem=f"checkpoint {path} belongs to {recorded.describe()}, not to"
        f" {current.describe()}: {_ways_out(path)}"
    )


def local_dir(checkpoint_dir: str) -> Path | None:
    """Pure: ``checkpoint_dir`` as a local folder, or ``None`` for a URI of other storage
    (``hdfs://``, ``s3a://``: read through Hadoop's FileSystem API)."""
    return storage.local_path(checkpoint_dir)


def topics_in_offset_log(text: str) -> frozenset[str]:
    """Pure: topics named by one Spark offset-log file (``v1``, its metadata, then one JSON
    line per source: ``{"topic": {"partition": offset}}``)."""
    topics: set[str] = set()
    for line in text.splitlines()[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        if isinstance(source, dict):
            topics.update(t for t, parts in source.items() if isinstance(parts, dict))
    return frozenset(topics)


def _latest_batch(offsets: Place) -> Place | None:
    batches = [p for p in offsets.iterdir() if p.name.isdigit()]
    return max(batches, key=lambda p: int(p.name), default=None)


def read_spark_state(route_dir: Place | Path, main: str) -> SparkState:
    """The Spark side of ``route_dir``: offsets of any query, and the topics of ``main``'s."""
    route_dir = place(route_dir)
    queries = route_dir.folders()
    has_offsets = any(_latest_batch(d / "offsets") is not None for d in queries)
    latest = _latest_batch(route_dir / main / "offsets")
    topics = topics_in_offset_log(latest.read_text()) if latest is not None else frozenset()
    return SparkState(has_offsets, topics)


def read_owner(route_dir: Place | Path) -> Owner | None:
    path = place(route_dir) / OWNER_FILE
    try:
        return Owner.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError) as exc:
        ways_out = _ways_out(str(route_dir))
        raise CheckpointError(
            f"checkpoint {route_dir}: {path.name} is unreadable ({exc}): {ways_out}"
        ) from exc


def check(route_dir: Place | Path, current: Owner, main: str) -> Judgement:
    """Raise ``CheckpointError`` when ``route_dir`` belongs to another route, topic or
    cluster; otherwise say whether ``claim`` must record ``current``."""
    verdict = judge(
        str(route_dir), read_owner(route_dir), current, read_spark_state(route_dir, main)
    )
    if verdict.problem:
        raise CheckpointError(verdict.problem)
    return verdict


def claim(route_dir: Place | Path, current: Owner) -> None:
    """Record ``current`` as the checkpoint's owner (whole or not at all)."""
    (place(route_dir) / OWNER_FILE).replace(current.to_json())
