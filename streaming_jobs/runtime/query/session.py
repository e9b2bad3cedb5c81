"""The SparkSession the job runs in (local[task_slots], or a Spark standalone cluster), quiet,
with the Kafka connector jars, and the executor requests made to the cluster manager.

Owns Spark settings, what running on a cluster changes in them, and the process environment
Spark's Python workers inherit (interpreter, import path, bind address). Neighbours: `job`
(creates it once; restarts reuse it), `lifecycle` (asks `SparkExecutors` for executors).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from streaming_jobs.config import JobConfig, SparkSettings
from streaming_jobs.runtime.checkpoint.state_repartition import ROCKSDB_PROVIDER
from streaming_jobs.runtime.query import python_daemon
from streaming_jobs.runtime.sink.gate import HideGateStops

# Where `streaming_jobs` and `schemas` live: Spark's Python workers unpickle the plan's
# functions by module reference, so they must be able to import both packages.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
PYTHON_DAEMON = python_daemon.MODULE
"""Spark's Python daemon for the jobs' sessions (`python_daemon`)."""


def prepare_environment(job_path: str | None = None) -> None:
    """Set what Spark's Python workers inherit, without overriding the caller's explicit choices.

    Local mode forks them from this process, so they import what it imports: the project and
    `job_path`, the directory of a job loaded by import path (`loading.worker_path`). On a
    cluster the executors start them with the interpreter path set here (Spark ships
    PYSPARK_PYTHON with every Python function), so that path must exist on every worker with
    the project and the job's package installed; the import path does not travel (see
    `cluster_settings`)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for path in (job_path, _PACKAGE_ROOT):
        if path and path not in paths:
            paths.insert(0, path)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


# Logs "Query … terminated with error" and a stack trace when a query ends with an exception,
# which every gate stop does; the runtime logs real failures itself, with the exception text.
_QUERY_TERMINATION_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
# Warns "Failed to cancel job group <run id>. Cannot find active jobs for it." on every stop:
# `MicroBatchExecution.stop()` cancels the run's job group before and again after
# interrupting the query's thread, and the runtime stops a query only once its admitted
# batches committed, so no job of it is left to cancel. At ERROR the scheduler's few other
# warnings go too (e.g. a large task binary); its errors, and task failures (TaskSetManager's),
# still show.
_JOB_CANCEL_LOGGER = "org.apache.spark.scheduler.DAGScheduler"
# Warns "Interrupted while joining on: Thread[…]" with a Java `InterruptedException` trace when
# a stop lands while the query writes its next batch's offsets: on a local file system without
# Hadoop's native library, the write's `chmod` runs in a child process, and the stop
# interrupts the wait for it. Either the batch was never logged or the next start runs it
# from its logged offsets, so nothing is lost. At ERROR, failed shell commands still show.
_HADOOP_SHELL_LOGGER = "org.apache.hadoop.util.Shell"
_PY4J_CALLBACK_LOGGER = "py4j.clientserver"


def hide_gate_stops(spark: SparkSession) -> None:
    """Keep a query's normal stops (at the quiesce gate, or while it plans a batch) out of
    Spark's, Hadoop's and py4j's logs."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(_QUERY_TERMINATION_LOGGER, log4j.Level.FATAL)
    log4j.core.config.Configurator.setLevel(_JOB_CANCEL_LOGGER, log4j.Level.ERROR)
    log4j.core.config.Configurator.setLevel(_HADOOP_SHELL_LOGGER, log4j.Level.ERROR)
    py4j_log = logging.getLogger(_PY4J_CALLBACK_LOGGER)
    if not any(isinstance(f, HideGateStops) for f in py4j_log.filters):
        py4j_log.addFilter(HideGateStops())


FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")


STATE_STORE_SETTINGS = {
    # Offline state repartitioning refuses the HDFS-backed default store; the provider is
    # fixed in a checkpoint at its first batch (older ones keep theirs).
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # A batch's commit writes what changed (a changelog file per state partition) instead of
    # a snapshot of the store (a flush to a new SST file, a zip of its metadata, a local
    # checkpoint directory removed with `rm -rf`); snapshots are made in the background every
    # few batches. Spark reads a checkpoint written either way (`docs/restarts.md`).
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
"""What a job's session sets for its state store, whatever its checkpoint's file system."""


def checkpoint_settings(checkpoint_dir: str) -> dict[str, str]:
    """How Spark writes the checkpoint (offset and commit logs, state store files) when it is on
    a local path: through Hadoop's `FileSystem` rename, which is the operating system's atomic
    rename(2) there.

    Spark's default goes through Hadoop's `FileContext`, whose rename asks for each file's
    link status first; without Hadoop's native library (pip's PySpark has none) that runs
    a `readlink` process per path, two per rename. A job at one batch a second started some
    17 such processes a second (Java Flight Recorder). Other file systems
    (HDFS, object stores) keep Spark's default, which is what makes a rename atomic there.
    """
    scheme = urlparse(checkpoint_dir).scheme
    return {"spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS} \
        if scheme in ("", "file") else {}


def cluster_settings(spark: SparkSettings, max_executors: int) -> dict[str, str]:
    """What running on a cluster manager adds to the session's settings (nothing locally).

    The Kafka connector (`spark.jars`) reaches the executors through the driver's file
    server. The project's Python packages do not: the executors' interpreter must have them
    installed (the compose workers run the project image; on this machine the venv does).
    """
    if spark.local:
        return {}
    settings = {
        "spark.executor.cores": str(spark.executor_cores),
        "spark.executor.memory": f"{spark.executor_memory_mb}m",
        # The controller's requests are the only ones: Spark's allocation manager would undo
        # them, and Spark refuses to kill executors on request while it runs.
        "spark.dynamicAllocation.enabled": "false",
        # Standalone grants an application every free core up to this: never more than the
        # job may request.
        "spark.cores.max": str(max_executors * spark.executor_cores),
    }
    if spark.spark_driver_host:
        settings["spark.driver.host"] = spark.spark_driver_host
    return settings
SOURCE_EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"


@contextmanager
def source_evolution(spark: SparkSession, enabled: bool) -> Iterator[None]:
    """Spark's source evolution on (named sources) or off (unnamed) while a query is built
    and started, then the session's own setting again.

    A query keeps the setting it started with (it runs on a clone of the session's conf);
    it must match its checkpoint: an unnamed source with it on, a named one with it off, or
    it on over a checkpoint written without it, are all refused by Spark.
    """
    saved = spark.conf.get(SOURCE_EVOLUTION, None)
    spark.conf.set(SOURCE_EVOLUTION, str(enabled).lower())
    try:
        yield
    finally:
        if saved is None:
            spark.conf.unset(SOURCE_EVOLUTION)
        else:
            spark.conf.set(SOURCE_EVOLUTION, saved)


def build_session(config: JobConfig, job_path: str | None = None) -> SparkSession:
    prepare_environment(job_path)
    builder = (SparkSession.builder.master(config.spark.master)
               .appName(f"streamctl-{config.identity.query_id}")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(config.initial.state_partitions))
               # Spark's console progress bar and INFO logs would bury the job's own log lines.
               .config("spark.ui.showConsoleProgress", "false")
               # An idle query's progress events are its heartbeats (`metrics.heartbeat`):
               # at the pace a standby heartbeats, so the controller sees both roles alike.
               .config("spark.sql.streaming.noDataProgressEventInterval",
                       f"{int(config.timing.heartbeat_interval_s * 1000)}ms")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               # Each Python worker's collection after a task walks only what is new.
               .config("spark.python.daemon.module", PYTHON_DAEMON))
    if config.spark.jar_list:
        builder = builder.config("spark.jars", ",".join(config.spark.jar_list))
    for key, value in {**STATE_STORE_SETTINGS, **checkpoint_settings(config.storage.checkpoint_dir),
                       **cluster_settings(config.spark, config.bounds.max_executors)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class SparkExecutors:
    """Executor requests to a cluster manager through Spark's developer API (py4j; PySpark has
    no binding), with dynamic allocation off.

    A standalone master launches executors when the target rises, but does not stop any when
    it falls: the driver kills the surplus itself. Requests are asynchronous; executors
    register with the driver seconds later (`wait_for`).
    """

    def __init__(self, spark: SparkSession, cores_per_executor: int) -> None:
        self._sc = spark.sparkContext
        self._cores = cores_per_executor

    def registered(self) -> tuple[str, ...]:
        """Ids of the executors registered with the driver that may run tasks (not those
        being killed, which stay registered for a few seconds)."""
        sc = self._sc._jsc.sc()
        backend = sc.schedulerBackend()
        ids = str(sc.getExecutorIds().mkString(","))
        return tuple(i for i in ids.split(",") if i and backend.isExecutorActive(i))

    def request_total(self, executors: int) -> None:
        """Make `executors` the target: kill the newest registered ones beyond it, then set it.

        Kill first: Spark lowers its target by one per executor killed, so the request after
        it is what stays in force.
        """
        surplus = sorted(self.registered(), key=_executor_order)[executors:]
        jvm, sc = self._sc._jvm, self._sc._jsc.sc()
        assert jvm is not None
        if surplus:
            ids = jvm.java.util.ArrayList()
            for executor_id in surplus:
                ids.add(executor_id)
            if not sc.killExecutors(jvm.scala.jdk.javaapi.CollectionConverters.asScala(ids)
                                    .toList()):
                raise RuntimeError(f"the cluster manager ({self._sc.master}) did not accept "
                                   f"killing executors {', '.join(surplus)}")
        no_locality = getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
        if not sc.requestTotalExecutors(executors, 0, no_locality):
            raise RuntimeError(f"the cluster manager ({self._sc.master}) did not accept a "
                               f"request for {executors} executors")

    def wait_for(self, executors: int, timeout_s: float) -> float | None:
        """Seconds until exactly `executors` are registered, or None after `timeout_s`."""
        started = time.monotonic()
        while len(self.registered()) != executors:
            if time.monotonic() - started >= timeout_s:
                return None
            time.sleep(0.2)
        return time.monotonic() - started

    def task_slots(self) -> int:
        """Tasks the registered executors run at once (one core per task)."""
        return len(self.registered()) * self._cores


def _executor_order(executor_id: str) -> tuple[int, str]:
    """Standalone numbers executors 0, 1, 2, ... in launch order; oldest first."""
    return (int(executor_id), "") if executor_id.isdigit() else (1 << 62, executor_id)


def executors_for(spark: SparkSession, executor_cores: int) -> SparkExecutors | None:
    """None in local mode, where there are no executors to request."""
    if str(spark.sparkContext.master).startswith("local"):
        return None
    return SparkExecutors(spark, executor_cores)
