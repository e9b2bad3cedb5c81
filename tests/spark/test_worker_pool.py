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


_TASKS_IN_THIS_WORKER = [0]
"""In a Python worker's copy of this module: the `_tasks_before_and_frozen` tasks it ran."""


def _tasks_before_and_frozen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import gc

    before = _TASKS_IN_THIS_WORKER[0]
    _TASKS_IN_THIS_WORKER[0] += 1
    for _batch in batches:
        yield pa.RecordBatch.from_arrays(
            [pa.array([before], pa.int64()), pa.array([gc.get_freeze_count()], pa.int64())],
            names=["before", "frozen"])


def test_a_reused_worker_has_frozen_what_outlived_its_last_task(spark: Any) -> None:
    """The jobs' Python daemon (`python_daemon`): after a task, what survives the worker's
    collection is frozen, so the next task's collection does not walk the imported modules
    again. PySpark's own daemon freezes nothing. Spark hands idle workers out in turn, so
    one-task jobs run until one lands on a worker that ran one before."""
    runs: list[tuple[int, int]] = []
    while len(runs) < 40 and not any(before for before, _ in runs):
        [row] = (spark.range(0, 1, 1, 1)
                 .mapInArrow(_tasks_before_and_frozen, "before long, frozen long").collect())
        runs.append((row.before, row.frozen))
    reused = [frozen for before, frozen in runs if before]
    assert reused, f"no worker ran two of {len(runs)} one-task jobs"
    assert all(frozen > 10_000 for frozen in reused), runs  # the modules pyarrow brought


def test_workers_fork_from_a_daemon_that_holds_pyarrow_and_runs_one_thread(spark: Any) -> None:
    """The jobs' Python daemon imports what every worker needs before it forks them
    (`python_daemon.preload`), and starts no thread doing so (a fork of a process with
    threads may deadlock). PySpark's own daemon holds no pyarrow. Local mode: the daemon is
    a process of this machine."""
    parents = set(spark.sparkContext.parallelize(range(SPARK_TASK_SLOTS), SPARK_TASK_SLOTS)
                  .map(lambda _: os.getppid()).collect())
    assert len(parents) == 1, parents  # one daemon forks them all
    [daemon_pid] = parents
    with open(f"/proc/{daemon_pid}/maps") as maps:
        assert "libarrow" in maps.read()
    assert len(os.listdir(f"/proc/{daemon_pid}/task")) == 1
