"""Where siding keeps the files beside a route's checkpoint: one interface, two implementations.

``Storage`` is what siding asks of a file system: read a file, replace it whole, list a folder,
rename, delete. ``LocalStorage`` is the local (or mounted) file system; ``HadoopStorage``
(``siding.pipeline.offline.hadoop_fs``) is Hadoop's FileSystem API through the JVM, the one
Spark writes its checkpoints with, so ``s3a://`` and ``hdfs://`` work by the same code. A
``Place`` is a location on a storage, with the few path operations the offline tools use.

``replace`` is the one write: a reader sees the old file or the new one, never a part. Locally
it writes a temporary file beside the target and renames it over it; on an object store a PUT
is already whole-or-nothing (and a rename would be a copy), so it writes the object at once
(docs/operations.md, "Checkpoints on object storage").
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# Schemes of object stores: a PUT replaces an object whole; a rename is a copy.
OBJECT_STORES = frozenset({"s3a", "s3", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss"})


def scheme(location: str) -> str:
    """Pure: the URI scheme of ``location`` (lower case), or ``""`` for a plain path."""
    return urlparse(location).scheme.lower() if _SCHEME.match(location) else ""


def local_path(location: str) -> Path | None:
    """Pure: ``location`` as a local folder, or ``None`` for a URI of other storage
    (``hdfs://``, ``s3a://``)."""
    if not _SCHEME.match(location):
        return Path(location)
    uri = urlparse(location)
    if uri.scheme == "file" and uri.netloc in ("", "localhost"):
        return Path(unquote(uri.path))
    return None


def join(base: str, *parts: str) -> str:
    """Pure: ``base`` with ``parts`` appended, keeping a URI's ``//`` (``Path`` would fold
    ``s3a://b`` into ``s3a:/b``)."""
    if local_path(base) is not None and not _SCHEME.match(base):
        return str(Path(base, *parts))
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def name_of(location: str) -> str:
    """Pure: the last part of ``location``."""
    return location.rstrip("/").rsplit("/", 1)[-1]


def parent_of(location: str) -> str:
    """Pure: ``location`` without its last part."""
    if not _SCHEME.match(location):
        return str(Path(location).parent)
    return location.rstrip("/").rsplit("/", 1)[0]


class Storage(Protocol):
    """A file system holding checkpoint files. A missing file reads as ``FileNotFoundError``;
    listing a missing folder gives nothing."""

    @property
    def remote(self) -> bool:
        """Whether a local ``flock`` means nothing here (another machine may write too)."""
        ...

    def read_bytes(self, location: str) -> bytes: ...

    def replace(self, location: str, data: bytes) -> None:
        """Write ``data`` at ``location``, whole or not at all (parents created)."""
        ...

    def exists(self, location: str) -> bool: ...

    def is_dir(self, location: str) -> bool: ...

    def children(self, location: str) -> list[tuple[str, bool]]:
        """(name, is a folder) of each entry of the folder ``location``."""
        ...

    def rename(self, source: str, target: str) -> None: ...

    def delete(self, location: str) -> None:
        """Delete a file (a missing one is fine)."""
        ...


class LocalStorage:
    """The local or mounted file system."""

    remote = False

    def read_bytes(self, location: str) -> bytes:
        return Path(location).read_bytes()

    def replace(self, location: str, data: bytes) -> None:
        target = Path(location)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.siding-tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)

    def exists(self, location: str) -> bool:
        return Path(location).exists()

    def is_dir(self, location: str) -> bool:
        return Path(location).is_dir()

    def children(self, location: str) -> list[tuple[str, bool]]:
        folder = Path(location)
        if not folder.is_dir():
            return []
        return sorted((p.name, p.is_dir()) for p in folder.iterdir())

    def rename(self, source: str, target: str) -> None:
        shutil.move(source, target)

    def delete(self, location: str) -> None:
        Path(location).unlink(missing_ok=True)


LOCAL = LocalStorage()


@dataclass(frozen=True, slots=True)
class Place:
    """A location on a storage, with the path operations the offline tools use."""

    storage: Storage
    location: str

    def __truediv__(self, part: str) -> Place:
        return Place(self.storage, join(self.location, part))

    def __str__(self) -> str:
        return self.location

    @property
    def name(self) -> str:
        return name_of(self.location)

    @property
    def parent(self) -> Place:
        return Place(self.storage, parent_of(self.location))

    @property
    def local(self) -> Path | None:
        """The local folder or file, when the storage is local."""
        return None if self.storage.remote else local_path(self.location)

    def exists(self) -> bool:
        return self.storage.exists(self.location)

    def is_dir(self) -> bool:
        return self.storage.is_dir(self.location)

    def iterdir(self) -> list[Place]:
        return [self / name for name, _ in self.storage.children(self.location)]

    def folders(self) -> list[Place]:
        return [self / name for name, folder in self.storage.children(self.location) if folder]

    def read_bytes(self) -> bytes:
        return self.storage.read_bytes(self.location)

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def replace(self, data: bytes | str) -> None:
        """Write the file whole or not at all (see the module's docstring)."""
        self.storage.replace(self.location, data.encode() if isinstance(data, str) else data)

    def rename(self, target: Place) -> None:
        self.storage.rename(self.location, target.location)

    def unlink(self) -> None:
        self.storage.delete(self.location)


def place(where: Place | Path | str) -> Place:
    """``where`` as a ``Place``: a ``Path`` or a plain path is on the local file system."""
    if isinstance(where, Place):
        return where
    return Place(LOCAL, str(where))
