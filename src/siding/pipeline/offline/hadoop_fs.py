"""``HadoopStorage``: checkpoint files through Hadoop's FileSystem API in a JVM (py4j).

The JVM is Spark's when a SparkContext runs in this process (its Hadoop configuration holds
``[spark.conf]``'s ``spark.hadoop.*`` settings; for ``s3a://``, one with the ``s3`` jars),
else a small one of siding's own, started once on first use with pyspark's jars (and the
``s3`` set for ``s3a://``) and the same settings:
``siding run`` reads the checkpoint before Spark starts, and ``siding offsets`` and ``siding
backfill`` without Spark. Credentials come from the usual AWS settings (the environment, or
``spark.hadoop.fs.s3a.*``); an error names the path and the Java exception's class and message,
never a setting's value.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from siding.errors import CheckpointError
from siding.pipeline.offline.storage import OBJECT_STORES, join, name_of, parent_of, scheme

log = logging.getLogger("siding.checkpoint")

HADOOP_PREFIX = "spark.hadoop."
T = TypeVar("T")


def hadoop_settings(spark_conf: Mapping[str, str]) -> dict[str, str]:
    """Pure: the Hadoop settings in Spark's conf (``spark.hadoop.X`` -> ``X``), as Spark hands
    them to its own Hadoop configuration."""
    return {
        key.removeprefix(HADOOP_PREFIX): value
        for key, value in spark_conf.items()
        if key.startswith(HADOOP_PREFIX) and len(key) > len(HADOOP_PREFIX)
    }


def java_error(exc: BaseException) -> str:
    """Pure enough: a Java exception's first line (its class and message), no stack trace."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


class _PrivateJvm:
    """siding's own JVM for Hadoop's FileSystem, while no SparkContext runs here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gateway: Any = None

    def get(self, classpath: list[str]) -> Any:
        with self._lock:
            if self._gateway is None:
                from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

                port = launch_gateway(
                    classpath=os.pathsep.join(classpath),
                    die_on_exit=True,
                    javaopts=["-Xmx256m", "-Dlog4j2.level=ERROR"],
                )
                self._gateway = JavaGateway(
                    gateway_parameters=GatewayParameters(port=port, auto_convert=True)
                )
                atexit.register(self.close)
            return self._gateway

    def close(self) -> None:
        with self._lock:
            gateway, self._gateway = self._gateway, None
        if gateway is not None:
            try:
                gateway.shutdown()
            except Exception:  # the JVM may be gone already (it dies with us)
                log.debug("closing the checkpoint JVM", exc_info=True)


_PRIVATE = _PrivateJvm()


def release_private_jvm() -> None:
    """Stop siding's own JVM (once Spark runs, its JVM serves the checkpoint files)."""
    _PRIVATE.close()


def _classpath(s3a: bool, jars_dir: str | None) -> list[str]:
    from siding import jvm

    paths = [str(jvm.pyspark_jars_dir() / "*")]
    if s3a:
        paths += [str(jar) for jar in jvm.object_storage_jars(jars_dir)]
    return paths


class HadoopStorage:
    """Checkpoint files through ``org.apache.hadoop.fs.FileSystem``."""

    remote = True

    def __init__(
        self,
        spark_conf: Mapping[str, str],
        *,
        jars_dir: str | None = None,
        s3a: bool = False,
        jvm_of: Callable[[], tuple[Any, Any]] | None = None,
    ) -> None:
        self._settings = hadoop_settings(spark_conf)
        self._jars_dir = jars_dir
        self._s3a = s3a
        self._jvm_of = jvm_of or self._find_jvm

    def _find_jvm(self) -> tuple[Any, Any]:
        """(the JVM view, a Hadoop Configuration): Spark's when it runs, else siding's own."""
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is not None and context._jvm is not None and context._jsc is not None:
            # A session built without the s3 set (another tool's, a test's) cannot read s3a://.
            jars = context.getConf().get("spark.jars") or ""
            if not self._s3a or "hadoop-aws" in jars:
                return context._jvm, context._jsc.hadoopConfiguration()
        gateway = _PRIVATE.get(_classpath(self._s3a, self._jars_dir))
        view = gateway.jvm
        conf = view.org.apache.hadoop.conf.Configuration()
        for key, value in self._settings.items():
            conf.set(key, value)
        return view, conf

    def _call(self, what: str, location: str, action: Callable[[_At], T]) -> T:
        from py4j.protocol import Py4JError, Py4JJavaError

        view, conf = self._jvm_of()
        path = view.org.apache.hadoop.fs.Path(location)
        try:
            return action(_At(view, path.getFileSystem(conf), path))
        except Py4JJavaError as exc:
            text = java_error(exc)
            if text.startswith("java.io.FileNotFoundException"):
                raise FileNotFoundError(location) from None
            raise CheckpointError(f"cannot {what} {location}: {text}") from None
        except Py4JError as exc:
            raise CheckpointError(f"cannot {what} {location}: {java_error(exc)}") from None

    def read_bytes(self, location: str) -> bytes:
        def read(at: _At) -> bytes:
            stream = at.fs.open(at.path)
            try:
                return bytes(at.view.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream))
            finally:
                stream.close()

        return self._call("read", location, read)

    def replace(self, location: str, data: bytes) -> None:
        if scheme(location) in OBJECT_STORES:
            self._put(location, data)  # one PUT: the object is whole or absent
            return
        temporary = join(parent_of(location), f".{name_of(location)}.{uuid.uuid4().hex}.tmp")
        self._put(temporary, data)

        def rename(at: _At) -> None:
            fs_api = at.view.org.apache.hadoop.fs
            context = fs_api.FileContext.getFileContext(at.path.toUri(), at.fs.getConf())
            overwrite = _array(at.view, fs_api.Options.Rename, [fs_api.Options.Rename.OVERWRITE])
            context.rename(fs_api.Path(temporary), at.path, overwrite)

        self._call("replace", location, rename)

    def _put(self, location: str, data: bytes) -> None:
        def put(at: _At) -> None:
            stream = at.fs.create(at.path, True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()

        self._call("write", location, put)

    def exists(self, location: str) -> bool:
        return self._call("look at", location, lambda at: bool(at.fs.exists(at.path)))

    def is_dir(self, location: str) -> bool:
        def folder(at: _At) -> bool:
            return bool(at.fs.getFileStatus(at.path).isDirectory())

        try:
            return self._call("look at", location, folder)
        except FileNotFoundError:
            return False

    def children(self, location: str) -> list[tuple[str, bool]]:
        def listing(at: _At) -> list[tuple[str, bool]]:
            found = at.fs.listStatus(at.path)
            return sorted((str(s.getPath().getName()), bool(s.isDirectory())) for s in found)

        try:
            return self._call("list", location, listing)
        except FileNotFoundError:
            return []

    def rename(self, source: str, target: str) -> None:
        def rename(at: _At) -> None:
            if not at.fs.rename(at.path, at.view.org.apache.hadoop.fs.Path(target)):
                raise CheckpointError(f"cannot rename {source} to {target}")

        self._call("rename", source, rename)

    def delete(self, location: str) -> None:
        self._call("delete", location, lambda at: at.fs.delete(at.path, False))


class _At(NamedTuple):
    """One call's JVM view, the FileSystem of the path, and the Hadoop Path."""

    view: Any
    fs: Any
    path: Any


def _array(view: Any, java_class: Any, items: list[Any]) -> Any:
    """A Java array of ``java_class`` holding ``items`` (py4j passes varargs as arrays)."""
    from py4j.java_gateway import JavaClass

    array = JavaClass("java.lang.reflect.Array", view._gateway_client)
    out = array.newInstance(java_class._java_lang_class, len(items))
    for i, item in enumerate(items):
        out[i] = item
    return out


def storage_for(
    checkpoint_dir: str, spark_conf: Mapping[str, str], jars_dir: str | None = None
) -> HadoopStorage:
    """The Hadoop storage for a checkpoint on ``checkpoint_dir`` (not a local folder)."""
    return HadoopStorage(spark_conf, jars_dir=jars_dir, s3a=scheme(checkpoint_dir) == "s3a")
