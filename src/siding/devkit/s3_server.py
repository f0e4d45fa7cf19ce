"""A real S3 server on loopback for tests and benchmarks: S3Proxy (Apache-2.0).

S3Proxy serves the S3 REST API (signature v2 and v4) over jclouds' in-memory blob store (its
filesystem stores map S3A's directory markers to folders and refuse Spark's checkpoint layout),
so what a test writes lives as long as the server. One process, one free loopback port, one
identity whose access key and secret are made for the run. ``make setup`` copies its jars into
``.tools/s3proxy`` (``$SIDING_S3PROXY_JARS`` is used first). Neither MinIO (AGPL) nor SeaweedFS
(a 230 MB Go build that took minutes on a fresh machine): docs/operations.md, "Checkpoints on
object storage".
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from siding.devkit.broker import free_ports
from siding.devkit.process import stop_group
from siding.errors import SetupError
from siding.jvm import checkout, java_options, require_java

JARS_ENV = "SIDING_S3PROXY_JARS"
HOST = "127.0.0.1"
# The region the SDK signs with; S3Proxy accepts any.
REGION = "us-east-1"
_MAIN = "org.gaul.s3proxy.Main"


def find_jars() -> Path:
    """S3Proxy's jars folder: ``$SIDING_S3PROXY_JARS``, else the checkout's ``.tools/s3proxy``."""
    if env := os.environ.get(JARS_ENV):
        return Path(env)
    root = checkout()
    folder = root / ".tools" / "s3proxy" if root is not None else None
    if folder is None or not any(folder.glob("s3proxy-*.jar")):
        raise SetupError("S3Proxy's jars not found: run `make setup` (it fetches them)")
    return folder


def properties(port: int, blobs: Path, access_key: str, secret_key: str) -> str:
    """Pure: S3Proxy's settings: loopback only, signed requests only, an in-memory store."""
    lines = {
        "s3proxy.endpoint": f"http://{HOST}:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": access_key,
        "s3proxy.credential": secret_key,
        "jclouds.provider": "transient",
        "jclouds.identity": "local",
        "jclouds.credential": "local",
        "jclouds.filesystem.basedir": str(blobs),
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def sigv4_headers(  # noqa: PLR0917 (the request's parts, each once)
    method: str, host: str, path: str, access_key: str, secret_key: str, now: float
) -> dict[str, str]:
    """Pure: the headers of an AWS signature v4 request with no query and an empty body."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    day = stamp[:8]
    empty = hashlib.sha256(b"").hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join(
        [method, path, "", f"host:{host}", f"x-amz-content-sha256:{empty}",
         f"x-amz-date:{stamp}", "", signed, empty]
    )  # fmt: skip
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret_key}".encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "x-amz-date": stamp,
        "x-amz-content-sha256": empty,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}",
    }


@dataclass
class S3Server:
    """``start``/``stop`` (or a context manager); ``hadoop_conf`` is what ``[spark.conf]``
    needs to reach it through ``s3a://``."""

    buckets: tuple[str, ...] = ("siding",)
    access_key: str = field(default_factory=lambda: "siding" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    folder: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    _own_folder: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        assert self.folder is not None
        return self.folder / "s3proxy.log"

    def hadoop_conf(self) -> dict[str, str]:
        """``spark.hadoop.fs.s3a.*`` settings for this server (credentials included)."""
        prefix = "spark.hadoop.fs.s3a."
        return {
            f"{prefix}endpoint": self.endpoint,
            f"{prefix}endpoint.region": REGION,
            f"{prefix}path.style.access": "true",
            f"{prefix}connection.ssl.enabled": "false",
            f"{prefix}access.key": self.access_key,
            f"{prefix}secret.key": self.secret_key,
        }

    def start(self, timeout_s: float = 120.0) -> S3Server:
        jars = find_jars()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="siding-s3-"))
            self._own_folder = True
        blobs = self.folder / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        (self.folder / "tmp").mkdir(exist_ok=True)
        (self.port,) = free_ports(1)
        config = self.folder / "s3proxy.conf"
        config.write_text(properties(self.port, blobs, self.access_key, self.secret_key))
        config.chmod(0o600)
        command = [
            require_java(),
            *java_options(),
            "-Xmx256m",
            f"-Djava.io.tmpdir={self.folder / 'tmp'}",
            "-cp",
            f"{jars}/*",
            _MAIN,
            "--properties",
            str(config),
        ]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready(time.monotonic() + timeout_s)
            for bucket in self.buckets:
                self._create_bucket(bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SetupError(f"S3Proxy exited ({self.process.returncode}): see {self.log}")
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.5):
                return
            time.sleep(0.2)
        raise SetupError(f"the S3 server did not listen on {self.endpoint} in time: see {self.log}")

    def _create_bucket(self, bucket: str) -> None:
        """``PUT /<bucket>``, signed with the run's identity (signature v4)."""
        path = f"/{bucket}"
        headers = sigv4_headers(
            "PUT", f"{HOST}:{self.port}", path, self.access_key, self.secret_key, time.time()
        )
        request = urllib.request.Request(self.endpoint + path, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")[:300]
            raise SetupError(f"cannot create bucket {bucket}: HTTP {exc.code} {body}") from exc

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            stop_group(proc, 15)
        if self._own_folder and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
