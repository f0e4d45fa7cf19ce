"""The jar lock and the folder the JVM jars are fetched into, verified against it.

``jars.lock.json`` (package data, written by ``python -m siding.jvm lock`` from ``jvm/*/pom.xml``)
names every jar siding runs with: its Maven coordinates, file name, size and sha256, in three sets,
``kafka`` (the embedded broker), ``spark`` (Spark's Kafka connector minus what pyspark ships) and
``s3`` (hadoop-aws and the AWS SDK modules it uses: fetched only for a checkpoint on ``s3a://``).
A jar is downloaded from a Maven repository (Maven Central unless ``SIDING_MAVEN_REPO``) or copied
from a folder, checked against the lock, and only then renamed into place, so a folder never holds
a jar that was not verified by siding or found equal to the lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from siding.errors import SetupError

log = logging.getLogger("siding.jars")
LOCK_FILE = Path(__file__).with_name("jars.lock.json")
CENTRAL = "https://repo.maven.apache.org/maven2"
REPO_ENV = "SIDING_MAVEN_REPO"
SETS = {
    "kafka": "the embedded Kafka broker",
    "spark": "Spark's Kafka connector",
    "s3": "checkpoints on object storage (s3a://)",
}
FETCH_HINT = "run `siding jars fetch` where Maven Central is reachable, or `siding jars --from DIR`"
# The set's digest once every jar in it was found equal to the lock; later uses only check sizes.
STAMP = ".verified"
_CHUNK = 1 << 20
_PARALLEL = 4
_MODE = 0o644


@dataclass(frozen=True)
class LockedJar:
    coordinates: str  # group:artifact:version, or group:artifact:version:classifier
    file: str
    size: int
    sha256: str

    def url(self, repository: str) -> str:
        group, artifact, version = self.coordinates.split(":")[:3]
        return (
            f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{self.file}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "coordinates": self.coordinates,
            "file": self.file,
            "size": self.size,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class JarLock:
    pyspark: str  # the version the spark set was computed for
    poms: Mapping[str, str]  # pom path (from the checkout's root) -> its sha256
    sets: Mapping[str, tuple[LockedJar, ...]]

    @classmethod
    def load(cls, path: Path = LOCK_FILE) -> JarLock:
        try:
            data = json.loads(path.read_text())
            return cls(
                pyspark=data["pyspark"],
                poms=dict(data["poms"]),
                sets={
                    name: tuple(LockedJar(**jar) for jar in jars)
                    for name, jars in data["sets"].items()
                },
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SetupError(f"the jar lock {path} cannot be read: {exc}") from exc

    def as_json(self) -> str:
        data = {
            "generated_by": "python -m siding.jvm lock (from jvm/*/pom.xml)",
            "pyspark": self.pyspark,
            "poms": dict(sorted(self.poms.items())),
            "sets": {
                name: [jar.as_json() for jar in sorted(jars, key=lambda j: j.file)]
                for name, jars in sorted(self.sets.items())
            },
        }
        return json.dumps(data, indent=2) + "\n"

    def digest(self, name: str | None = None) -> str:
        """A short hash of one set's jars (or all of them): names cache folders and stamps."""
        chosen = [name] if name else sorted(self.sets)
        text = "\n".join(f"{n} {j.file} {j.sha256}" for n in chosen for j in self.sets[n])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_cache_dir(lock: JarLock) -> Path:
    """A per-user folder, one per lock, so two siding versions with other jars never mix them."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "siding" / "jars" / lock.digest()


def repository() -> str:
    return os.environ.get(REPO_ENV) or CENTRAL


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _note(message: str) -> None:
    # Through siding's logs when `siding run` set them up (text or JSON), else plainly on stderr.
    if logging.getLogger().hasHandlers():
        log.info("%s", message)
    else:
        print(f"siding: {message}", file=sys.stderr, flush=True)


def _stamp_ok(folder: Path, name: str, lock: JarLock) -> bool:
    stamp = folder / STAMP
    try:
        if stamp.read_text().strip() != lock.digest(name):
            return False
    except OSError:
        return False
    for jar in lock.sets[name]:
        try:
            if (folder / jar.file).stat().st_size != jar.size:
                return False
        except OSError:
            return False
    return True


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as f:
        f.write(text)
    os.chmod(f.name, _MODE)  # the stamp too: another user (a service, an image's) reads it
    os.replace(f.name, path)


def _place(jar: LockedJar, source: BinaryIO, folder: Path, origin: str) -> None:
    """Copy ``source`` to a temporary file beside the target, hashing as it goes; rename it into
    place only when size and sha256 are the lock's."""
    digest = hashlib.sha256()
    size = 0
    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{jar.file}.", delete=False) as out:
        try:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        except BaseException:
            out.close()
            os.unlink(out.name)
            raise
    if size != jar.size or digest.hexdigest() != jar.sha256:
        os.unlink(out.name)
        raise SetupError(
            f"{jar.file} from {origin} does not match the jar lock (sha256 {digest.hexdigest()},"
            f" {size} bytes; expected {jar.sha256}, {jar.size} bytes): refused"
        )
    os.chmod(out.name, _MODE)  # temporary files are private; a jar is read by whoever runs siding
    os.replace(out.name, folder / jar.file)


def _candidates(source_dir: Path, name: str, jar: LockedJar) -> Iterator[Path]:
    # A siding jars folder (DIR/kafka/..., DIR/spark/...) or one flat folder of jars.
    yield source_dir / name / jar.file
    yield source_dir / jar.file


def _copy(jar: LockedJar, name: str, source_dir: Path, folder: Path) -> None:
    for path in _candidates(source_dir, name, jar):
        if path.is_file():
            with path.open("rb") as source:
                _place(jar, source, folder, str(path))
            return
    raise SetupError(f"{jar.file} is not in {source_dir} (nor in {source_dir / name})")


def _download(jar: LockedJar, folder: Path, repo: str, timeout_s: float) -> None:
    url = jar.url(repo)
    if not url.startswith(("https://", "http://", "file:")):
        raise SetupError(f"{REPO_ENV}={repo!r}: use an https:// URL of a Maven repository")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            _place(jar, response, folder, url)
    except urllib.error.HTTPError as exc:
        raise SetupError(f"cannot download {jar.file}: {url} answered {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SetupError(
            f"cannot download {jar.file} from {repo} ({reason}) and it is not in {folder}:"
            f" {FETCH_HINT}"
        ) from exc


def ensure(
    root: Path,
    name: str,
    lock: JarLock,
    *,
    source_dir: Path | None = None,
    repo: str | None = None,
    timeout_s: float = 60.0,
) -> list[Path]:
    """The paths of set ``name`` in ``root/name``, fetching (or copying from ``source_dir``)
    whatever is missing or differs from the lock. Never downloads a jar already verified."""
    folder = root / name
    jars = lock.sets[name]
    if _stamp_ok(folder, name, lock):
        return [folder / jar.file for jar in jars]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot create the jars folder {folder}: {exc}") from exc
    # Jars placed by an earlier, interrupted fetch or by hand: kept when they match the lock.
    missing = [
        jar
        for jar in jars
        if not ((folder / jar.file).is_file() and sha256_of(folder / jar.file) == jar.sha256)
    ]
    if missing and source_dir is None:
        total = sum(jar.size for jar in missing) / 1e6
        where = repo or repository()
        _note(f"fetching {len(missing)} jar(s) of {SETS[name]} ({total:.0f} MB) from {where}")
        _note(f"  into {folder} (once: they are kept there)")

    def one(jar: LockedJar) -> None:
        if source_dir is not None:
            _copy(jar, name, source_dir, folder)
        else:
            _download(jar, folder, repo or repository(), timeout_s)

    with ThreadPoolExecutor(max_workers=_PARALLEL) as pool:
        for _ in pool.map(one, missing):  # the first failure raises here
            pass
    _write_atomically(folder / STAMP, lock.digest(name) + "\n")
    return [folder / jar.file for jar in jars]
