"""Spark tier fixtures: one local SparkSession per test session, with the Kafka connector jars.

The session is small (local[4], 2 shuffle partitions) so the integration test's restarts stay
quick; jobs under test get `task_slots=4` to match.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_TASK_SLOTS = 4


@pytest.fixture(scope="session")
def spark_kafka_jars() -> tuple[str, ...]:
    from streamctl.stack.connector import spark_kafka_jars

    return tuple(str(p) for p in spark_kafka_jars())


@pytest.fixture(scope="session")
def spark(spark_kafka_jars: tuple[str, ...], bootstrap_servers: str) -> Iterator[SparkSession]:
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
