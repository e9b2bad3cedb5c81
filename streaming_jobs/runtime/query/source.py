"""The Kafka source of every job: one place for its options.

Owns `read_kafka`, the `readStream` every run starts from. The runtime owns
the source: it decides the input (`input_switch`), its parallelism and batch cap; a job's
builder receives the decoded rows (`plan`). Neighbours: `plan` calls `read_kafka`,
`lifecycle` passes the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from streaming_jobs.runtime.checkpoint.input_switch import KafkaInput
from streaming_jobs.runtime.desired.state import DesiredState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_kafka(spark: SparkSession, kafka_options: Mapping[str, str], desired: DesiredState,
               source: KafkaInput | None = None) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, …) of `source` (default: the input
    topic in force, unnamed), with the parallelism and batch cap in force (`desired`), read
    with `kafka_options` (the brokers and how to log in: `RunSettings.kafka_options`).

    `failOnDataLoss` stays on (a record removed before the job read it fails the query
    instead of being skipped) unless the source says the loss was found and reported before
    this run (`checkpoint.retention`).
    """
    source = source or KafkaInput(desired.input_topic)
    reader = spark.readStream.format("kafka")
    if source.name is not None:
        reader = reader.name(source.name)
    return (reader.options(**kafka_options)
            .option("subscribe", source.topic)
            .option("startingOffsets", source.starting_offsets)
            .option("minPartitions", str(desired.input_parallelism))
            .option("maxOffsetsPerTrigger", str(desired.max_offsets_per_trigger))
            .option("failOnDataLoss", str(source.fail_on_data_loss).lower())
            .load())
