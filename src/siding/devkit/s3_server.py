"""A real S3-compatible server on loopback for tests and benchmarks: SeaweedFS (Apache-2.0).

``weed server -s3`` in one process (master, volume server, filer and the S3 gateway), every
port a free loopback port, its data in a folder of its own, one identity whose access key and
secret are made for the run (``-s3.config``). ``make setup`` builds ``weed`` into
``.tools/go/bin`` (``$SIDING_WEED`` or ``weed`` on PATH are used first). MinIO is not used: it
is AGPL (docs/operations.md, "Checkpoints on object storage").
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from siding.devkit.broker import free_ports
from siding.errors import SetupError
from siding.jvm import checkout

WEED_ENV = "SIDING_WEED"
HOST = "127.0.0.1"
# The region the SDK signs with; SeaweedFS accepts any.
REGION = "us-east-1"


def find_weed() -> str:
    """The ``weed`` executable: ``$SIDING_WEED``, the checkout's ``.tools/go/bin/weed``, PATH."""
    if env := os.environ.get(WEED_ENV):
        return env
    root = checkout()
    if root is not None and (root / ".tools" / "go" / "bin" / "weed").is_file():
        return str(root / ".tools" / "go" / "bin" / "weed")
    found = shutil.which("weed")
    if found is None:
        raise SetupError("SeaweedFS's `weed` not found: run `make setup` (it builds it)")
    return found


def identities(access_key: str, secret_key: str) -> dict[str, object]:
    """Pure: SeaweedFS's ``-s3.config``: one identity allowed everything, no anonymous access."""
    return {
        "identities": [
            {
                "name": "siding",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
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
    _master: str = ""
    _own_folder: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        assert self.folder is not None
        return self.folder / "weed.log"

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
        weed = find_weed()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="siding-s3-"))
            self._own_folder = True
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.folder / "s3.json"
        config.write_text(json.dumps(identities(self.access_key, self.secret_key)))
        config.chmod(0o600)
        ports = free_ports(8)
        # "http.grpc": SeaweedFS's form for a server whose gRPC port is not http + 10000.
        self._master, self.port = f"{ports[0]}.{ports[1]}", ports[6]
        command = [
            weed,
            "server",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-master.port={ports[0]}",
            f"-master.port.grpc={ports[1]}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={ports[2]}",
            f"-volume.port.grpc={ports[3]}",
            f"-filer.port={ports[4]}",
            f"-filer.port.grpc={ports[5]}",
            f"-filer.localSocket={self.folder / 'filer.sock'}",
            "-s3",
            f"-s3.port={ports[6]}",
            f"-s3.port.grpc={ports[7]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.folder / 's3.sock'}",
            f"-s3.config={config}",
        ]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready(time.monotonic() + timeout_s)
            for bucket in self.buckets:
                self._create_bucket(bucket, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SetupError(f"weed server exited ({self.process.returncode}): see {self.log}")
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.5):
                return
            time.sleep(0.2)
        raise SetupError(f"the S3 server did not listen on {self.endpoint} in time: see {self.log}")

    def _create_bucket(self, bucket: str, timeout_s: float) -> None:
        """Through ``weed shell`` (the master must have its volume server first: retried)."""
        deadline = time.monotonic() + timeout_s
        command = [find_weed(), "shell", f"-master={HOST}:{self._master}"]
        while True:
            done = subprocess.run(
                command,
                input=f"s3.bucket.create -name {bucket}\nexit\n",
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            listed = subprocess.run(
                command,
                input="s3.bucket.list\nexit\n",
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            if any(line.strip().startswith(bucket) for line in listed.stdout.splitlines()):
                return
            if time.monotonic() > deadline:
                tail = (done.stdout + done.stderr).strip()[-500:]
                raise SetupError(f"cannot create bucket {bucket} on the S3 server: {tail}")
            time.sleep(0.5)

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(15)
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
