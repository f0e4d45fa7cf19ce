"""After Spark commits a batch (checkpoint first), commit the same offsets to the route's
consumer group, so standard Kafka tooling shows the lag."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from siding.config import DEFAULT_CLUSTER
from siding.kafka.admin import commit_offsets
from siding.pipeline.driver.clusters import Admins
from siding.pipeline.driver.source import end_offsets, topics_in
from siding.pipeline.offline.positions import mark

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitTarget:
    group: str
    topic: str
    # Other topics the query reads (more source topics, the main lane's hold topic in key mode).
    more: tuple[str, ...] = ()
    # A route's topic_pattern: the topics matching it are committed too, as they appear.
    pattern: str | None = None
    # Why the route may not commit now (its fence lost), or None (asked before each commit).
    refused: Callable[[], str | None] | None = field(default=None, compare=False)
    # The Kafka cluster the topics are on (a route's source or write cluster, siding.config).
    cluster: str = DEFAULT_CLUSTER

    def topics_of(self, end_offset: str | None) -> tuple[str, ...]:
        """The topics to commit from a progress's ``endOffset`` JSON."""
        named = tuple(t for t in (self.topic, *self.more) if t)
        if self.pattern is None:
            return named
        found = (t for t in topics_in(end_offset) if t not in named)
        return (*named, *(t for t in found if re.fullmatch(self.pattern, t)))


def make_listener(
    admins: Admins,
    targets: Mapping[str, CommitTarget],
    on_progress: Callable[[str, Any], None] = lambda *_: None,
    on_committed: Callable[[str, int], None] = lambda *_: None,
) -> Any:
    """A ``StreamingQueryListener`` that commits each query's ``endOffset`` to its group,
    marked as siding's (``siding:batch=<id>``: a commit without the mark was made by another
    tool, see ``siding.pipeline.offline.positions.start_verdict``).

    ``onQueryProgress`` fires after the batch's commit log entry is written, so the group never
    runs ahead of the checkpoint (DESIGN.md, invariant 1). ``on_committed(name, batch id)``
    follows the group commit (tried, whether or not it worked).
    """
    from pyspark import SparkContext
    from pyspark.sql.streaming.listener import StreamingQueryListener

    lock = threading.Lock()
    last: dict[tuple[str, str], dict[int, int]] = {}
    clients = [admins]  # emptied by ``release()``: py4j keeps listeners alive past removeListener

    class GroupCommitListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            name = progress.name
            target = targets.get(name)
            if target is None:
                return
            refused = target.refused() if target.refused is not None else None
            if refused is not None:
                log.warning("%s: group offsets not committed: %s", name, refused)
                return
            try:
                on_progress(name, progress)
                for source in progress.sources:
                    for topic in target.topics_of(source.endOffset):
                        offsets = end_offsets(source.endOffset, topic)
                        with lock:
                            if not offsets or last.get((name, topic)) == offsets or not clients:
                                continue
                            commit_offsets(
                                clients[0].of(target.cluster),
                                target.group,
                                topic,
                                offsets,
                                metadata=mark(f"batch={progress.batchId}"),
                            )
                            last[(name, topic)] = offsets
            except Exception:  # a listener must never kill the query; the next batch retries
                log.exception("committing offsets of %s to group %s failed", name, target.group)
            on_committed(name, int(progress.batchId))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

        def release(self) -> None:
            with lock:
                clients.clear()

        _bridge: Any = None

        @property
        def _jlistener(self) -> Any:
            # What spark.streams.addListener / removeListener register: the JVM's wrapper of
            # ``ProgressFromJson`` instead of pyspark's own bridge (made once, like pyspark's).
            if self._bridge is None:
                jvm: Any = SparkContext._jvm
                self._bridge = jvm.PythonStreamingQueryListenerWrapper(ProgressFromJson(self))
            return self._bridge

    return GroupCommitListener()


@dataclass(frozen=True)
class SourceEnd:
    """Where one source of a batch ended: its ``endOffset`` JSON (Spark's name)."""

    endOffset: str | None


@dataclass(frozen=True)
class Progress:
    """What the listener reads of a query's progress (Spark's names)."""

    name: str | None
    batchId: int
    sources: tuple[SourceEnd, ...]


@dataclass(frozen=True)
class ProgressEvent:
    progress: Progress


def progress_from_json(text: str) -> Progress:
    """Pure: a progress from Spark's JSON of it. Offsets come as JSON objects and go back to
    text; a rate Spark could not compute (NaN) is left out of the JSON, and nothing here needs
    one (pyspark's own ``fromJson`` fails on such a source)."""
    data = json.loads(text)

    def offset(value: object) -> str | None:
        return value if value is None or isinstance(value, str) else json.dumps(value)

    return Progress(
        name=data.get("name"),
        batchId=int(data["batchId"]),
        sources=tuple(SourceEnd(offset(s.get("endOffset"))) for s in data.get("sources", ())),
    )


class ProgressFromJson:
    """The JVM's side of a Python ``StreamingQueryListener`` (py4j calls these methods) that
    reads each progress from its JSON, in one call.

    pyspark's own bridge (``JStreamingQueryListener``) copies every field of the progress over
    py4j, and the end of each Java map it walks is a ``NoSuchElementException`` thrown in the
    JVM, which pyspark then classifies with about fourteen ``is_instance_of`` calls, each a walk
    of ``jvm.py4j.reflection.TypeUtil`` whose misses search every jar of the class path: about
    70 such walks per progress event, 45 % of the JVM's CPU samples at 300 msg/s (a JFR
    profile, bench/README.md, "Cost at a steady rate"). The listener here needs the progress
    only; the other events are not read.
    """

    def __init__(self, listener: Any) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self._listener.onQueryProgress(ProgressEvent(progress_from_json(jevent.progress().json())))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ("org.apache.spark.sql.streaming.PythonStreamingQueryListener",)
