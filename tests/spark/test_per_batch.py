"""The knobs a batch reads without a restart reach Spark's Python workers: a task runs the
function version (and reads the shed fraction) the driver gave the thread that submitted its
job, and, given none, the values the plan was built with. The sink sets them per batch; the
control action through the sink is in `test_every_action`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streaming_jobs.api import SwappableFunction
from streaming_jobs.per_batch import PROPERTY, BatchValues, in_force

pytestmark = [pytest.mark.spark]

VERSIONS = {"v1": lambda n: f"one:{n}", "v2": lambda n: f"two:{n}"}


def _labels(spark: Any, function: SwappableFunction) -> list[str]:
    from pyspark.sql import functions as F

    label = F.udf(lambda n: f"{function(n)}/{function.version}")
    return sorted(r.label for r in spark.range(3, numPartitions=2)
                  .select(label("id").alias("label")).collect())


def test_a_task_calls_the_version_its_batch_was_given_else_the_one_built_with(
        spark: Any) -> None:
    function = SwappableFunction(VERSIONS, "v1")
    assert _labels(spark, function) == ["one:0/v1", "one:1/v1", "one:2/v1"]
    spark.sparkContext.setLocalProperty(PROPERTY, BatchValues(0.0, "v2").encode())
    try:
        assert _labels(spark, function) == ["two:0/v2", "two:1/v2", "two:2/v2"]
    finally:
        spark.sparkContext.setLocalProperty(PROPERTY, None)
    assert _labels(spark, function) == ["one:0/v1", "one:1/v1", "one:2/v1"]


def test_a_task_reads_the_shed_fraction_of_its_batch(spark: Any) -> None:
    built_with = BatchValues(0.1, "")

    def fractions(rows: Iterator[Any]) -> Iterator[float]:
        yield in_force(built_with).shed_fraction

    def seen() -> set[float]:
        return set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(fractions)
                   .collect())

    assert seen() == {0.1}
    spark.sparkContext.setLocalProperty(PROPERTY, BatchValues(0.4, "").encode())
    try:
        assert seen() == {0.4}
    finally:
        spark.sparkContext.setLocalProperty(PROPERTY, None)
