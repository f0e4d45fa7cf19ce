"""The one place a SparkSession is built: jars, master, local defaults, quiet logs."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from siding import jvmarchive
from siding.config import RouteConfig
from siding.jvm import java_options, spark_jars
from siding.pipeline.executor import daemon

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J2 = Path(__file__).with_name("log4j2.properties")
MAX_LOCAL_SLOTS = 64
DAEMON_MODULE = daemon.__name__


def task_slots(route: RouteConfig, partitions: int) -> int:
    """Task slots one route keeps busy at once: the main lane's tasks plus one set per retry
    lane, and one for the park lane."""
    main = max(partitions, route.min_partitions)
    return main + (len(route.lanes) + (1 if route.parks else 0)) * partitions


STATUS_STORE_BOUNDS = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.sql.ui.retainedExecutions": "100",
}


def effective_master(master: str, slots_needed: int, cores: int) -> str:
    """``local[*]`` means "enough task slots for every lane at once, at least one per core".

    Delivery tasks wait on the network, not the CPU: if the main lane's tasks had to wait for a
    slot held by a retry lane's slow deliveries, the lanes would hold up the main line.
    """
    if master != "local[*]":
        return master
    return f"local[{max(cores, min(slots_needed, MAX_LOCAL_SLOTS))}]"


def session_conf(
    master: str,
    *,
    app_name: str = "siding",
    ui: bool = False,
    extra: Mapping[str, str] | None = None,
    jars_dir: str | None = None,
    s3a: bool = False,
    driver_options: Sequence[str] = (),
) -> dict[str, str]:
    """The Spark settings siding runs with; ``extra`` (from ``[spark].conf``) wins.
    ``jars_dir``: ``[spark] jars_dir`` (see ``siding.jvm.jars_dir``); ``s3a``: the checkpoint
    is on ``s3a://`` (hadoop-aws and the AWS SDK modules join the jars); ``driver_options``:
    JVM options of the driver alone (its class-data archive, ``siding.jvmarchive``)."""
    local = master.startswith("local")
    options = [f"-Dlog4j2.configurationFile=file:{_LOG4J2}", *java_options()]
    java_opts = shlex.join(options)
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(spark_jars(jars_dir, s3a=s3a)),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": shlex.join([*options, *driver_options]),
        "spark.executor.extraJavaOptions": java_opts,
        # Python workers keep their connections (gRPC channels, HTTP pools) between batches.
        "spark.python.worker.reuse": "true",
        # Spark forks them from a daemon that imported their code once (docs/operations.md,
        # "Spark's Python workers"): a new worker imports nothing itself.
        "spark.python.daemon.module": DAEMON_MODULE,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.sql.adaptive.enabled": "false",
        # Retry lanes and the main lane share the executors; no query may starve the others.
        "spark.scheduler.mode": "FAIR",
        # Spark's status store keeps finished jobs, stages, tasks and SQL executions in the
        # driver's heap even with the UI off (Spark's defaults: 1,000, 1,000, 100,000, 1,000);
        # every trigger of every query adds some, so that part of the heap grows until the
        # limits are reached (the 10-minute soak had not reached them). siding reads none of it
        # (docs/operations.md, "Memory"); [spark].conf can set them back.
        **STATUS_STORE_BOUNDS,
    }
    if local:
        conf.update(
            {
                "spark.sql.shuffle.partitions": "4",
                "spark.default.parallelism": "4",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.memory": "1g",
            }
        )
    conf.update(extra or {})
    return conf


def build_session(
    master: str = "local[*]",
    *,
    app_name: str = "siding",
    ui: bool = False,
    extra: Mapping[str, str] | None = None,
    jars_dir: str | None = None,
    s3a: bool = False,
    driver_options: Sequence[str] | None = None,
) -> SparkSession:
    """Create (or return the running) SparkSession with siding's settings. ``driver_options``:
    the driver JVM's own options; by default, the class-data archive when one was made
    (``siding jars archive``)."""
    # Workers must run the same interpreter (the one that has siding installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if driver_options is None:
        archive = jvmarchive.existing()
        driver_options = jvmarchive.use_options(archive) if archive is not None else []
    conf = session_conf(
        master,
        app_name=app_name,
        ui=ui,
        extra=extra,
        jars_dir=jars_dir,
        s3a=s3a,
        driver_options=driver_options,
    )
    callers = _callers_sigint()
    _start_jvm_apart(conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if callers is not None:
        # A new SparkContext makes SIGINT cancel every job; `siding run` drains on it instead.
        signal.signal(signal.SIGINT, callers)
    session.sparkContext.setLogLevel("WARN")
    return session


def _callers_sigint() -> signal._HANDLER:
    """The SIGINT handler the caller chose (``siding run``'s drain), or ``None`` when it left
    Python's default (then PySpark's stays: Ctrl-C cancels the jobs, as in a plain PySpark)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    return None if handler is signal.default_int_handler else handler


def _start_jvm_apart(conf: Mapping[str, str]) -> None:
    """Start Spark's JVM (and so the Python workers it forks) in a session of its own, as
    pyspark would start it otherwise (same settings, same spark-submit).

    A stop signal sent to the driver's whole process group (systemd, Ctrl-C) must reach only
    the driver: the driver drains, then stops Spark. A JVM that got it too would stop the
    queries in mid-batch. The JVM still ends with the driver, even a killed one: it exits when
    its stdin, a pipe from the driver, closes. Nothing to do when the JVM is already up (an
    earlier session in this process) or when spark-submit started the driver from its JVM."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf = SparkConf()
    for key, value in conf.items():
        spark_conf.set(key, value)
    popen_kwargs = {"start_new_session": True}
    gateway = launch_gateway(spark_conf, popen_kwargs)  # type: ignore[no-untyped-call]
    # The context the session builder then finds and uses, made with the builder's settings.
    SparkContext(conf=spark_conf, gateway=gateway)
