"""The bundled job's transformation: sensor readings → enriched → per-window averages.

Owns the plan only: Kafka source options, decoding and enrichment on Arrow batches (with
undecodable records routed to a dead-letter sink), the event-time windowed aggregation and the
Avro encoding of its output rows. The runtime (`streaming_jobs.runtime`) owns the query
around it: sink, metrics, control, restarts.

Dead letters are written from the Spark task (one producer per Python worker, flushed before
the task's iterator ends). A task that is retried re-reads its records, so a dead-letter entry
can be duplicated; the dead-letter count reported through Spark's observed metrics is not,
because Spark only merges the metrics of the successful attempt.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from schemas.codec import DecodeError, codec_for
from schemas.records import SensorReading, SensorWindowAverage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_jobs.config import JobConfig

REGIONS = ("north", "south", "east", "west")
ENRICHED_SCHEMA = (
    "sensor_id string, event_time_ms long, value double, seq long, region string, "
    "dead_letter boolean"
)
ENCODED_SCHEMA = "key binary, value binary"
OBSERVATION = "enrichment"
"""Name of the observed metric carrying `dead_letters` per batch (in the query progress)."""


class DeadLetterSink(Protocol):
    """Where a task sends records it cannot decode; `flush` before the task finishes."""

    def send(self, payload: bytes | None, error: DecodeError) -> None: ...

    def flush(self) -> None: ...


def region_of(sensor_id: str) -> str:
    """Deterministic stand-in for a remote lookup (stable across processes, unlike hash())."""
    digest = hashlib.blake2b(sensor_id.encode(), digest_size=2).digest()
    return REGIONS[int.from_bytes(digest, "big") % len(REGIONS)]


def decode_and_enrich(
    batches: Iterator[pa.RecordBatch], cost_ms: float, dead_letters: DeadLetterSink
) -> Iterator[pa.RecordBatch]:
    """Kafka rows (value, topic, partition, offset) → enriched readings, one row per input.

    Undecodable rows go to `dead_letters` and come out flagged `dead_letter` with nulls, so
    they can be counted by the plan; the lookup cost is slept once per batch (n × cost).
    """
    codec = codec_for(SensorReading)
    for batch in batches:
        cols = batch.to_pydict()
        out: dict[str, list[object]] = {k: [] for k in (
            "sensor_id", "event_time_ms", "value", "seq", "region", "dead_letter")}
        for payload, topic, partition, offset in zip(
                cols["value"], cols["topic"], cols["partition"], cols["offset"], strict=True):
            row: tuple[object, ...]
            try:
                r = codec.decode(payload, topic=topic, partition=partition, offset=offset)
                row = (r.sensor_id, r.event_time_ms, r.value, r.seq, region_of(r.sensor_id), False)
            except DecodeError as err:
                dead_letters.send(payload, err)
                row = (None, None, None, None, None, True)
            for column, value in zip(out, row, strict=True):
                out[column].append(value)
        if cost_ms > 0 and batch.num_rows:
            time.sleep(batch.num_rows * cost_ms / 1000.0)
        yield pa.RecordBatch.from_pydict(out, schema=_enriched_arrow_schema())
    dead_letters.flush()


def _enriched_arrow_schema() -> pa.Schema:
    return pa.schema([("sensor_id", pa.string()), ("event_time_ms", pa.int64()),
                      ("value", pa.float64()), ("seq", pa.int64()), ("region", pa.string()),
                      ("dead_letter", pa.bool_())])


def encode_averages(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Aggregated rows → Kafka (key = sensor_id, value = Avro SensorWindowAverage)."""
    codec = codec_for(SensorWindowAverage)
    for batch in batches:
        keys, values = [], []
        for row in batch.to_pylist():
            keys.append(row["sensor_id"].encode())
            values.append(codec.encode(SensorWindowAverage(**row)))
        yield pa.RecordBatch.from_pydict(
            {"key": keys, "value": values},
            schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]))


def build_averages(
    spark: SparkSession,
    config: JobConfig,
    input_parallelism: int,
    dead_letter_factory: Callable[[], DeadLetterSink],
) -> DataFrame:
    """The streaming plan up to the aggregated rows (columns of SensorWindowAverage)."""
    from pyspark.sql import functions as F

    cost_ms = config.enrichment_cost_ms

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_and_enrich(batches, cost_ms, dead_letter_factory())

    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", config.bootstrap_servers)
           .option("subscribe", config.input_topic)
           .option("startingOffsets", "earliest")
           .option("minPartitions", str(input_parallelism))
           .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
           .option("failOnDataLoss", "true")
           .load())
    enriched = (raw.select("value", "topic", "partition", "offset")
                .mapInArrow(enrich, ENRICHED_SCHEMA)
                .observe(OBSERVATION,
                         F.sum(F.col("dead_letter").cast("long")).alias("dead_letters"))
                .where(~F.col("dead_letter"))
                .withColumn("event_time", F.timestamp_millis("event_time_ms")))
    window = F.window("event_time", f"{config.window_s} seconds")
    return (enriched.withWatermark("event_time", f"{config.watermark_s} seconds")
            .groupBy(window, "sensor_id", "region")
            .agg(F.count("*").alias("count"), F.avg("value").alias("avg_value"),
                 F.min("value").alias("min_value"), F.max("value").alias("max_value"),
                 F.sum("seq").alias("seq_sum"))
            .select("sensor_id", "region",
                    F.unix_millis(F.col("window.start")).alias("window_start_ms"),
                    F.unix_millis(F.col("window.end")).alias("window_end_ms"),
                    "count", "avg_value", "min_value", "max_value", "seq_sum"))
