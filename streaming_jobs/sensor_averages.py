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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from schemas.codec import DecodeError, codec_for
from schemas.records import SensorReading, SensorWindowAverage
from streaming_jobs.source import KafkaInput, read_kafka

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_jobs.config import JobConfig

REGIONS = ("north", "south", "east", "west")
ENRICHED_SCHEMA = (
    "sensor_id string, event_time_ms long, value double, seq long, region string, "
    "dead_letter boolean, shed boolean"
)
ENCODED_SCHEMA = "key binary, value binary"
OBSERVATION = "enrichment"
"""Name of the observed metric carrying `dead_letters` and `rows_shed` per batch."""


class DeadLetterSink(Protocol):
    """Where a task sends records it cannot decode; `flush` before the task finishes."""

    def send(self, payload: bytes | None, error: DecodeError) -> None: ...

    def flush(self) -> None: ...


def region_of(sensor_id: str) -> str:
    """Deterministic stand-in for a remote lookup (stable across processes, unlike hash())."""
    digest = hashlib.blake2b(sensor_id.encode(), digest_size=2).digest()
    return REGIONS[int.from_bytes(digest, "big") % len(REGIONS)]


def subregion_of(sensor_id: str) -> str:
    """Version 2 of the lookup: a finer, differently keyed one ('north-2', ...)."""
    digest = hashlib.blake2b(sensor_id.encode(), digest_size=4, person=b"subregion").digest()
    number = int.from_bytes(digest, "big")
    return f"{REGIONS[number % len(REGIONS)]}-{number // len(REGIONS) % 3 + 1}"


ENRICHMENTS: dict[str, Callable[[str], str]] = {"v1": region_of, "v2": subregion_of}
"""Registered enrichment functions by version; a control tuple `udf_version` picks one."""


@dataclass(frozen=True)
class ShedRule:
    """Which records load shedding drops: low-priority ones, a `fraction` of them.

    The choice hashes the record's Kafka position (topic, partition, offset), so a replayed
    batch drops exactly the records it dropped before, in any process.
    """

    fraction: float = 0.0
    low_priority_prefixes: tuple[str, ...] = ()
    """Sensor-id prefixes that are low priority; empty: every sensor is."""

    def sheds(self, sensor_id: str, topic: str, partition: int, offset: int) -> bool:
        if self.fraction <= 0:
            return False
        if self.low_priority_prefixes and not sensor_id.startswith(self.low_priority_prefixes):
            return False
        digest = hashlib.blake2b(f"{topic}/{partition}/{offset}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64 < self.fraction


def decode_and_enrich(
    batches: Iterator[pa.RecordBatch], cost_ms: float, dead_letters: DeadLetterSink,
    lookup: Callable[[str], str] = region_of, shed: ShedRule = ShedRule(),
) -> Iterator[pa.RecordBatch]:
    """Kafka rows (value, topic, partition, offset) → enriched readings, one row per input.

    Undecodable rows go to `dead_letters` and come out flagged `dead_letter` with nulls; rows
    that `shed` drops come out flagged `shed` and skip the lookup. Both are counted by the
    plan. The lookup cost is slept once per batch (looked-up rows × cost).
    """
    codec = codec_for(SensorReading)
    for batch in batches:
        cols = batch.to_pydict()
        out: dict[str, list[object]] = {k: [] for k in (
            "sensor_id", "event_time_ms", "value", "seq", "region", "dead_letter", "shed")}
        looked_up = 0
        for payload, topic, partition, offset in zip(
                cols["value"], cols["topic"], cols["partition"], cols["offset"], strict=True):
            row: tuple[object, ...]
            try:
                r = codec.decode(payload, topic=topic, partition=partition, offset=offset)
            except DecodeError as err:
                dead_letters.send(payload, err)
                row = (None, None, None, None, None, True, False)
            else:
                dropped = shed.sheds(r.sensor_id, topic, partition, offset)
                looked_up += not dropped
                region = None if dropped else lookup(r.sensor_id)
                row = (r.sensor_id, r.event_time_ms, r.value, r.seq, region, False, dropped)
            for column, value in zip(out, row, strict=True):
                out[column].append(value)
        if cost_ms > 0 and looked_up:
            time.sleep(looked_up * cost_ms / 1000.0)
        yield pa.RecordBatch.from_pydict(out, schema=_enriched_arrow_schema())
    dead_letters.flush()


def _enriched_arrow_schema() -> pa.Schema:
    return pa.schema([("sensor_id", pa.string()), ("event_time_ms", pa.int64()),
                      ("value", pa.float64()), ("seq", pa.int64()), ("region", pa.string()),
                      ("dead_letter", pa.bool_()), ("shed", pa.bool_())])


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
    source: KafkaInput | None = None,
) -> DataFrame:
    """The streaming plan up to the aggregated rows (columns of SensorWindowAverage), reading
    `source` (default: the configured input topic)."""
    from pyspark.sql import functions as F

    cost_ms = config.enrichment_cost_ms
    lookup = ENRICHMENTS[config.udf_version]
    shed = ShedRule(config.shed_fraction, config.low_priority_prefix_list)

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_and_enrich(batches, cost_ms, dead_letter_factory(), lookup, shed)

    raw = read_kafka(spark, replace(config, input_parallelism=input_parallelism), source)
    enriched = (raw.select("value", "topic", "partition", "offset")
                .mapInArrow(enrich, ENRICHED_SCHEMA)
                .observe(OBSERVATION,
                         F.sum(F.col("dead_letter").cast("long")).alias("dead_letters"),
                         F.sum(F.col("shed").cast("long")).alias("rows_shed"))
                .where(~F.col("dead_letter") & ~F.col("shed"))
                .withColumn("event_time", F.timestamp_millis("event_time_ms")))
    window = F.window("event_time", f"{config.window_s} seconds")
    # Region is not a grouping key: a window open across a UDF swap stays one row, labelled
    # by the lookup of its newest reading.
    return (enriched.withWatermark("event_time", f"{config.watermark_s} seconds")
            .groupBy(window, "sensor_id")
            .agg(F.max_by("region", "event_time_ms").alias("region"),
                 F.count("*").alias("count"), F.avg("value").alias("avg_value"),
                 F.min("value").alias("min_value"), F.max("value").alias("max_value"),
                 F.sum("seq").alias("seq_sum"))
            .select("sensor_id", "region",
                    F.unix_millis(F.col("window.start")).alias("window_start_ms"),
                    F.unix_millis(F.col("window.end")).alias("window_end_ms"),
                    "count", "avg_value", "min_value", "max_value", "seq_sum"))
