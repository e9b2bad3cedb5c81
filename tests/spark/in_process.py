"""A job's elastic runtime in the test's own process, on the session's Spark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from streaming_jobs.api import Job
from streaming_jobs.config import JobConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_jobs.runtime.job import ElasticJob


@contextmanager
def in_process(spark: SparkSession, job: Job, config: JobConfig, *, control_ready: bool = True,
               before_start: Callable[[ElasticJob], None] = lambda _job: None,
               ) -> Iterator[ElasticJob]:
    """`job` run by `ElasticJob` with `config` on `spark`, started (`before_start` sees it
    first), its control consumer ready unless `control_ready` is False; stopped when the block
    ends."""
    from streaming_jobs.runtime.job import ElasticJob

    elastic = ElasticJob(job, config, spark=spark)
    before_start(elastic)
    elastic.start()
    try:
        if control_ready:
            assert elastic.wait_control_ready(30), "control consumer never got its partition"
        yield elastic
    finally:
        elastic.stop()
