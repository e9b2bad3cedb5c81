"""The SparkSession the job runs in: local[task_slots], quiet, with the Kafka connector jars.

Owns Spark settings and the process environment Spark's Python workers inherit (interpreter,
import path, bind address). Neighbours: `job` (creates it once; restarts reuse it).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from streaming_jobs.config import JobConfig
from streaming_jobs.runtime.gate import HideGateStops
from streaming_jobs.runtime.state_repartition import ROCKSDB_PROVIDER

# Where `streaming_jobs` and `schemas` live: Spark's Python workers unpickle the plan's
# functions by module reference, so they must be able to import both packages.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def prepare_environment() -> None:
    """Set what local-mode workers inherit, without overriding the caller's explicit choices."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _PACKAGE_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_PACKAGE_ROOT, *paths])


# Logs "Query … terminated with error" and a stack trace when a query ends with an exception,
# which every gate stop does; the runtime logs real failures itself, with the exception text.
_QUERY_TERMINATION_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
_PY4J_CALLBACK_LOGGER = "py4j.clientserver"


def hide_gate_stops(spark: SparkSession) -> None:
    """Keep quiesce-gate stops (normal) out of Spark's and py4j's error logs."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(_QUERY_TERMINATION_LOGGER, log4j.Level.FATAL)
    py4j_log = logging.getLogger(_PY4J_CALLBACK_LOGGER)
    if not any(isinstance(f, HideGateStops) for f in py4j_log.filters):
        py4j_log.addFilter(HideGateStops())


def build_session(config: JobConfig) -> SparkSession:
    prepare_environment()
    builder = (SparkSession.builder.master(f"local[{config.task_slots}]")
               .appName(f"streamctl-{config.query_id}")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(config.state_partitions))
               # Offline state repartitioning refuses the HDFS-backed default store; the
               # provider is fixed in a checkpoint at its first batch (older ones keep theirs).
               .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
               # Spark's console progress bar and INFO logs would bury the job's own log lines.
               .config("spark.ui.showConsoleProgress", "false")
               # An idle query's progress events are its heartbeats (`metrics.heartbeat`):
               # at the pace a standby heartbeats, so the controller sees both roles alike.
               .config("spark.sql.streaming.noDataProgressEventInterval",
                       f"{int(config.heartbeat_interval_s * 1000)}ms")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if config.jar_list:
        builder = builder.config("spark.jars", ",".join(config.jar_list))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class SparkExecutors:
    """Executor requests through Spark's allocation API (standalone, Kubernetes, YARN).

    `SparkContext.requestTotalExecutors` is a developer API with no Python binding, reached
    through py4j; its third argument is a Scala immutable Map (no locality preferences).
    """

    def __init__(self, spark: SparkSession) -> None:
        self._sc = spark.sparkContext

    def request_total(self, executors: int) -> None:
        jvm = self._sc._jvm
        assert jvm is not None
        no_locality = getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
        if not self._sc._jsc.sc().requestTotalExecutors(executors, 0, no_locality):
            raise RuntimeError(f"the cluster manager ({self._sc.master}) did not accept a "
                               f"request for {executors} executors")

    def task_slots(self) -> int:
        """On a cluster manager Spark's default parallelism is the executors' total cores."""
        return int(self._sc.defaultParallelism)


def executors_for(spark: SparkSession) -> SparkExecutors | None:
    """None in local mode, where there are no executors to request."""
    return None if str(spark.sparkContext.master).startswith("local") else SparkExecutors(spark)
