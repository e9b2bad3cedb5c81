"""Warming Python workers ahead of a restart (`worker_pool`), on the tier's real Spark."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.runtime.query import worker_pool
from tests.spark.conftest import SPARK_TASK_SLOTS


def _add_pid(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        pid = pa.array([os.getpid()] * batch.num_rows, pa.int64())
        yield pa.RecordBatch.from_arrays([*batch.columns, pid],
                                         names=[*batch.schema.names, f"c{batch.num_columns}"])


def test_a_query_of_the_warmed_shape_runs_on_the_warmed_workers(spark: Any) -> None:
    warmed = worker_pool.warm(spark, SPARK_TASK_SLOTS, 2, worker_pool.modules_of(sensor_job))
    assert len(warmed.workers) >= SPARK_TASK_SLOTS  # one per task, per operator

    query = (spark.range(0, SPARK_TASK_SLOTS, 1, SPARK_TASK_SLOTS)
             .mapInArrow(_add_pid, "c0 long, c1 long")
             .mapInArrow(_add_pid, "c0 long, c1 long, c2 long"))
    ran_on = {pid for row in query.collect() for pid in (row.c1, row.c2)}
    assert ran_on <= warmed.workers, "the query forked workers of its own: the warm was wasted"


def test_the_python_operators_of_a_plan_are_counted(spark: Any) -> None:
    twice = (spark.range(4).mapInArrow(_add_pid, "id long, c1 long")
             .mapInArrow(_add_pid, "id long, c1 long, c2 long"))
    assert worker_pool.python_steps(twice) == 2
    assert worker_pool.python_steps(spark.range(4)) == 1  # none: one worker at the least
