"""Spark tier fixtures: one local SparkSession per test session, with the Kafka connector jars.

The session is small (local[4], 2 shuffle partitions) so the integration test's restarts stay
quick; jobs under test get `task_slots=4` to match.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# Verified with pyspark 4.3.0 before `stack.connector` existed; kept as the fallback only.
_FALLBACK_JARS = (
    "/root/.m2/repository/org/apache/spark/spark-token-provider-kafka-0-10_2.13/4.0.0/"
    "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    "/root/.m2/repository/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar",
    "/root/.m2/repository/org/apache/commons/commons-pool2/2.13.1/commons-pool2-2.13.1.jar",
    "/root/.m2/repository/org/apache/spark/spark-sql-kafka-0-10_2.13/4.2.0/"
    "spark-sql-kafka-0-10_2.13-4.2.0.jar",
)
SPARK_TASK_SLOTS = 4


@pytest.fixture(scope="session")
def spark_kafka_jars() -> tuple[str, ...]:
    try:
        from stack.connector import spark_kafka_jars
    except ImportError:
        return _FALLBACK_JARS
    return tuple(str(p) for p in spark_kafka_jars())


@pytest.fixture(scope="session")
def spark(spark_kafka_jars: tuple[str, ...], bootstrap_servers: str) -> Iterator[object]:
    """The session's local Spark. Set up after the broker, so stopped before it: its Python
    workers keep the dead-letter producers of the tests' jobs, which would otherwise retry a
    broker that is gone until the process exits."""
    from pyspark.sql import SparkSession

    from streaming_jobs.runtime.query.session import PYTHON_DAEMON, prepare_environment

    prepare_environment()
    session = (SparkSession.builder.master(f"local[{SPARK_TASK_SLOTS}]")
               .appName("streamctl-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.daemon.module", PYTHON_DAEMON)  # as the jobs' sessions
               .config("spark.jars", ",".join(spark_kafka_jars))
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
