"""Spark's offset and commit logs in one streaming query's checkpoint folder.

``offsets/<batch>`` is ``v1``, the batch's metadata (JSON), then one line per source: for the
Kafka source ``{"topic": {"partition": next offset}}``, where the batch ends. ``commits/<batch>``
(``v1`` and ``{"nextBatchWatermarkMs": ...}``) says the batch finished. On start Spark resumes
after the latest batch when it is committed (and runs it again when not). Each file has a Hadoop
checksum beside it (``.<batch>.crc``). siding moves a query by appending one committed batch that
ends where the query must start; docs/operations.md says why this is safe.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from siding.errors import OffsetsError
from siding.pipeline.offline.storage import Place, place

VERSION = "v1"
# A commit entry for a query that never committed: what Spark writes without watermarks.
FIRST_COMMIT = 'v1\n{"nextBatchWatermarkMs":0}'
_CRC_CHUNK = 512

SourceOffsets = dict[str, dict[int, int]]


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """One ``offsets/<batch>`` file: the metadata line kept as Spark wrote it, and the one
    Kafka source's offsets."""

    metadata: str
    offsets: SourceOffsets

    def render(self) -> str:
        source = {
            topic: {str(p): o for p, o in sorted(parts.items())}
            for topic, parts in self.offsets.items()
        }
        return "\n".join((VERSION, self.metadata, json.dumps(source, separators=(",", ":"))))

    def moved(self, topic: str, offsets: dict[int, int]) -> OffsetEntry:
        """The same entry with ``topic``'s partitions at ``offsets`` (other topics unchanged)."""
        return OffsetEntry(self.metadata, {**self.offsets, topic: dict(offsets)})


def _source(line: str, where: str) -> SourceOffsets:
    try:
        data = json.loads(line)
        return {
            str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in data.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise OffsetsError(
            f"{where}: the source line is not Kafka offsets ({line[:80]!r})"
        ) from None


def parse_offset_entry(text: str, where: str) -> OffsetEntry:
    """Pure: an ``offsets/<batch>`` file; ``where`` names it in errors. siding's queries each
    have one Kafka source; anything else is refused rather than guessed at."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != VERSION:
        raise OffsetsError(f"{where}: Spark offset log version {lines[0][:20]!r}, not {VERSION}")
    sources = [line for line in lines[2:] if line.strip()]
    if len(lines) < 3 or len(sources) != 1:
        raise OffsetsError(f"{where}: expected one Kafka source, found {len(sources)}")
    return OffsetEntry(lines[1], _source(sources[0], where))


def parse_initial_offsets(data: bytes, where: str) -> SourceOffsets:
    """Pure: ``sources/0/0``, the offsets the Kafka source started from (a zero byte, ``v1``,
    then the offsets JSON)."""
    lines = data.lstrip(b"\x00").decode().split("\n")
    if lines[0].strip() != VERSION or len(lines) < 2:
        raise OffsetsError(f"{where}: not a Kafka source's initial offsets")
    return _source(lines[1], where)


def hadoop_crc(data: bytes) -> bytes:
    """Pure: the Hadoop checksum file Spark writes beside each log file on a local file system
    (``crc\\0``, the chunk size, then a CRC-32 per 512-byte chunk)."""
    chunks = (data[i : i + _CRC_CHUNK] for i in range(0, len(data), _CRC_CHUNK))
    crcs = b"".join(struct.pack(">I", zlib.crc32(chunk)) for chunk in chunks)
    return b"crc\x00" + struct.pack(">i", _CRC_CHUNK) + crcs


def _batches(folder: Place) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


@dataclass(frozen=True, slots=True)
class Position:
    """Where a query resumes: after ``batch`` (``-1``: no batch committed yet, the source's
    initial offsets) at ``offsets``; ``pending`` is a batch written but not committed, which
    Spark runs again first."""

    batch: int
    offsets: SourceOffsets
    pending: int | None
    next_batch: int


def read_position(query: Place | Path) -> Position | None:
    """The position of the query checkpointed in ``query``; ``None`` when Spark has written no
    batch there yet (nothing to move: the query starts from its starting offsets)."""
    query = place(query)
    offsets, commits = _batches(query / "offsets"), _batches(query / "commits")
    if not offsets:
        return None
    done = [b for b in commits if b in offsets]
    pending = offsets[-1] if not done or offsets[-1] > done[-1] else None
    next_batch = max(offsets[-1], commits[-1] if commits else -1) + 1
    if done:
        batch = done[-1]
        entry = parse_offset_entry(
            (query / "offsets" / str(batch)).read_text(), _name(query, batch)
        )
        return Position(batch, entry.offsets, pending, next_batch)
    initial = query / "sources" / "0" / "0"
    try:
        data = initial.read_bytes()
    except FileNotFoundError:
        raise OffsetsError(
            f"{query}: batch {offsets[0]} was never committed and {initial} is missing"
        ) from None
    return Position(-1, parse_initial_offsets(data, str(initial)), pending, next_batch)


def _name(query: Place, batch: int) -> str:
    return str(query / "offsets" / str(batch))


def latest_entry(query: Place | Path) -> OffsetEntry:
    """The newest ``offsets/<batch>`` (committed or not): its metadata is what a new entry
    carries (Spark restores a few SQL settings from it)."""
    query = place(query)
    batches = _batches(query / "offsets")
    if not batches:
        raise OffsetsError(f"{query}: no Spark offsets to move")
    latest = batches[-1]
    return parse_offset_entry((query / "offsets" / str(latest)).read_text(), _name(query, latest))


def latest_commit(query: Place | Path) -> str:
    """The newest ``commits/<batch>`` as Spark wrote it (a new commit entry copies it)."""
    query = place(query)
    batches = _batches(query / "commits")
    if not batches:
        return FIRST_COMMIT
    text = (query / "commits" / str(batches[-1])).read_text()
    if text.split("\n", 1)[0].strip() != VERSION:
        raise OffsetsError(f"{query}/commits/{batches[-1]}: Spark commit log version is not v1")
    return text


def write_log_file(folder: Place | Path, batch: int, text: str) -> None:
    """Write ``folder/<batch>`` (and on local storage its checksum), each whole or not at all
    (a file Spark can read whole or not at all). Writing the same text again is harmless.
    Hadoop writes no checksum file on other storage; Spark does not expect one there."""
    folder = place(folder)
    data = text.encode()
    (folder / str(batch)).replace(data)
    if folder.local is not None:
        (folder / f".{batch}.crc").replace(hadoop_crc(data))


def write_batch(query: Place | Path, batch: int, offsets_text: str, commit_text: str) -> None:
    """Append batch ``batch``: its offsets, then its commit (Spark's own order)."""
    query = place(query)
    write_log_file(query / "offsets", batch, offsets_text)
    write_log_file(query / "commits", batch, commit_text)
