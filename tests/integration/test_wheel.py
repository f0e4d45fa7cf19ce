"""siding installed from its wheel, outside the checkout, works (issue 26): the wheels of siding
and of the thin Python SDK are built here and installed into a venv with the runtime lock only;
from a folder outside the checkout, with no SIDING_HOME and no network for jars, that venv's
``siding`` takes its jars with ``siding jars --from``, checks a config, starts ``siding dev
kafka`` and ``siding run``, and the SDK's example consumer gets every message.

Installing pyspark into a new venv takes minutes here, so the venv is kept in the user's cache
folder, keyed by what it was made from (Python, the runtime lock, the wheels' requirements); each
run puts the freshly built wheels into it and checks that it holds nothing else.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from siding import jvm
from siding.devkit.broker import free_port
from siding.devkit.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
COUNT = 24
TOPIC = "wheel-orders"
GROUP = "wheel"
# The parent's Python and Spark settings must not leak into the installed siding.
_DROPPED = ("PYTHONPATH", "SIDING_HOME", "SIDING_JARS_DIR", "VIRTUAL_ENV", "SPARK_HOME")
CONFIG = """\
[kafka]
bootstrap = "${{SIDING_BOOTSTRAP}}"

[spark]
master = "local[2]"

[control]
listen = "127.0.0.1:0"

[[route]]
name = "wheel"
topic = "{topic}"
group = "{group}"
endpoint = "grpc://{consumer}"
lanes = [{{ delay = "1s", deadline = "10s" }}]
"""


def _run(argv: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return str(done.stdout) + str(done.stderr)


def _build(out: Path) -> tuple[Path, Path]:
    """The SDK's wheel and siding's, built with the dev venv's setuptools (no download)."""
    for project in (ROOT / "sdk" / "python", ROOT):
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)])
    sdk = next(out.glob("siding_consumer-*.whl"))
    siding = next(out.glob("siding-*.whl"))
    assert next(out.glob("siding-*.tar.gz")) and next(out.glob("siding_consumer-*.tar.gz"))
    return sdk, siding


def _requires(wheel: Path) -> list[str]:
    """The wheel's runtime requirements (no extras)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    found = [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    return [r for r in found if Requirement(r).marker is None]


def _runtime_pins() -> list[str]:
    lines = (ROOT / "requirements" / "runtime.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith(("#", "./"))]


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "siding" / "test-wheel-venvs"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    started = time.monotonic()
    built = _build(tmp_path_factory.mktemp("dist"))
    print(f"wheels built in {time.monotonic() - started:.1f}s")
    return built


@pytest.fixture(scope="module")
def venv(wheels: tuple[Path, Path]) -> Path:
    """A venv with the runtime lock and the two wheels, nothing else."""
    sdk, siding = wheels
    made_of = [sys.version, *_runtime_pins(), *_requires(sdk), *_requires(siding)]
    key = hashlib.sha256("\n".join(made_of).encode()).hexdigest()[:16]
    cache = _cache()
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / key
    python = folder / "bin" / "python"
    env = _env(folder)  # without it, pip would see the checkout's src/ on PYTHONPATH
    started = time.monotonic()
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others reuse its venv
        if not (folder / ".complete").exists():
            for old in cache.iterdir():  # a venv with pyspark is 600 MB: keep one
                if old.is_dir():
                    shutil.rmtree(old)
            _run([sys.executable, "-m", "venv", str(folder)])
            pins = folder / "runtime.txt"
            pins.write_text("\n".join(_runtime_pins()) + "\n")
            # env here too: a PYTHONPATH naming the checkout (or any other packages) would have
            # pip take them as installed and leave them out of the venv
            install = ["install", "-q", "-r", str(pins), str(sdk), str(siding)]
            _run([str(python), "-m", "pip", *install], env)
            (folder / ".complete").touch()
        else:  # the wheels just built replace the last run's
            reinstall = ["install", "-q", "--no-deps", "--force-reinstall", str(sdk), str(siding)]
            _run([str(python), "-m", "pip", *reinstall], env)
    print(f"venv ready in {time.monotonic() - started:.1f}s: {folder}")
    _run([str(python), "-m", "pip", "check"], env)
    return folder


def _env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("PYSPARK")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def test_the_venv_holds_the_runtime_lock_and_the_two_wheels_only(venv: Path) -> None:
    python = str(venv / "bin" / "python")
    frozen = _run([python, "-m", "pip", "freeze", "--all"], _env(venv))
    installed = {
        canonicalize_name(line.split("==")[0].split(" @ ")[0])
        for line in frozen.splitlines()
        if line.strip()
    }
    installed -= {"pip", "setuptools", "wheel"}
    expected = {canonicalize_name(pin.split("==")[0]) for pin in _runtime_pins()}
    assert installed == expected | {"siding", "siding-consumer"}
    # No development tool reached the runtime closure.
    assert not installed & {"pytest", "ruff", "mypy", "build", "matplotlib", "import-linter"}


def _bootstrap(out: Path) -> str:
    text = out.read_text() if out.exists() else ""
    return next((line.split("=", 1)[1] for line in text.splitlines() if "bootstrap=" in line), "")


def _delivered(record: Path) -> set[str]:
    text = record.read_text() if record.exists() else ""
    return {json.loads(line)["id"] for line in text[: text.rfind("\n") + 1].splitlines()}


def _produce(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(COUNT):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0


def _committed(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        committed = reader.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=30)
    finally:
        reader.close()
    return sum(tp.offset for tp in committed)


class Installed:
    """The venv's commands, run from a folder outside the checkout; its processes, each with
    its output in that folder."""

    def __init__(self, venv: Path, work: Path, env: dict[str, str]) -> None:
        self.venv, self.work, self.env = venv, work, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def siding(self, *argv: str) -> str:
        return _run([str(self.venv / "bin" / "siding"), *argv], self.env, self.work)

    def start(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        command = [str(self.venv / "bin" / argv[0]), *argv[1:]]
        with (
            open(self.work / f"{name}.out", "wb") as out,
            open(self.work / f"{name}.err", "wb") as err,
        ):
            proc = subprocess.Popen(
                command, stdout=out, stderr=err, cwd=self.work, env=self.env, start_new_session=True
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.work / f"{name}.err").read_text(errors="replace")[-3000:]

    def alive(self, *names: str) -> None:
        for name in names:
            if (code := self.procs[name].poll()) is not None:
                pytest.fail(f"{name} exited {code}:\n{self.log(name)}")

    def stop(self, name: str, timeout_s: float = 60) -> int:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        return proc.returncode

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)


@pytest.fixture
def installed(venv: Path, tmp_path: Path) -> Iterator[Installed]:
    """No SIDING_HOME, jars into a new folder, and a Maven repository nobody answers at."""
    work = tmp_path / "outside"
    work.mkdir()
    env = _env(
        venv, SIDING_JARS_DIR=str(tmp_path / "jars"), SIDING_MAVEN_REPO="http://127.0.0.1:9/none"
    )
    it = Installed(venv, work, env)
    try:
        yield it
    finally:
        it.stop_all()


def test_the_installed_siding_takes_its_jars_from_a_folder(installed: Installed) -> None:
    # Given the checkout's jars (make setup) and an installed siding that cannot download
    source = jvm.fetch()
    jars = Path(installed.env["SIDING_JARS_DIR"])
    # The installed siding is the wheel's, not the checkout's
    python = str(installed.venv / "bin" / "python")
    where = _run([python, "-c", "import siding; print(siding.__file__)"], installed.env)
    assert where.strip().startswith(str(installed.venv)), where
    # When it takes its jars from the folder, then they are where `siding jars path` says
    assert installed.siding("jars", "--from", str(source)).splitlines()[0] == str(jars)
    assert installed.siding("jars", "path").strip() == str(jars)
    for name, locked in jvm.jar_lock().sets.items():
        assert sorted(p.name for p in (jars / name).glob("*.jar")) == sorted(j.file for j in locked)


def test_the_installed_wheel_runs_dev_kafka_and_run_outside_the_checkout(
    installed: Installed,
) -> None:
    installed.siding("jars", "fetch", "--from", str(jvm.fetch()))
    work = installed.work
    consumer_at = f"127.0.0.1:{free_port()}"
    (work / "siding.toml").write_text(CONFIG.format(topic=TOPIC, group=GROUP, consumer=consumer_at))
    # Given `siding dev kafka` from the installed wheel
    broker = installed.start("kafka", "siding", "dev", "kafka", "--data-dir", str(work / "kafka"))
    bootstrap = wait_until(
        lambda: _bootstrap(work / "kafka.out"),
        timeout_s=120,
        what="siding dev kafka's bootstrap",
        check=lambda: installed.alive("kafka"),
    )
    assert broker.poll() is None
    installed.env["SIDING_BOOTSTRAP"] = bootstrap
    assert "ok: 1 route(s)" in installed.siding("check-config", "siding.toml")
    _produce(bootstrap)
    # And the SDK's example consumer, from its own wheel
    record = work / "delivered.jsonl"
    example = str(ROOT / "sdk" / "python" / "examples" / "e2e_consumer.py")
    installed.start("sdk", "python", example, "--grpc", consumer_at, "--record", str(record))
    # When `siding run` runs the route
    started = time.monotonic()
    installed.start("run", "siding", "run", "-c", "siding.toml")
    # Then every message is delivered, once
    wait_until(
        lambda: len(_delivered(record)) == COUNT,
        timeout_s=300,
        interval_s=0.5,
        what=f"{COUNT} deliveries",
        check=lambda: installed.alive("run", "sdk"),
    )
    print(f"{COUNT} delivered {time.monotonic() - started:.1f}s after `siding run` started")
    # And a stop drains and commits: exit 0, the group's offsets at the end of the topic
    assert installed.stop("run") == 0, installed.log("run")
    assert len(record.read_text().splitlines()) == COUNT
    assert _committed(bootstrap) == COUNT
    assert installed.stop("kafka") == 0, installed.log("kafka")
