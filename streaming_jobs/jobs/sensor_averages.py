"""The bundled sensor-averages job: sensor readings → enriched → per-window averages.

Written against the public job API only (`streaming_jobs.api`), as a user's job would be, and
registered under the `streamctl.jobs` entry point as `sensor-averages`. Reads Avro
`SensorReading`s, looks each one's region up (a remote call: `enrichment_cost_ms` of waiting
per record, in the source's tasks, so its capacity grows with `input_parallelism`), and writes
one Avro `SensorWindowAverage` per sensor and event-time window, closed by the watermark.

Two versions of the lookup are registered (`udf_version`): `v1` looks up one of four regions,
`v2` one of twelve sub-regions. Load shedding may drop readings of the sensors whose ids start
with one of `low_priority_prefixes` (empty: any reading).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from schemas.codec import load_schema
from streaming_jobs.api import Avro, Job, JobContext, Setting, Topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REGIONS = ("north", "south", "east", "west")
ENRICHED_SCHEMA = ("sensor_id string, event_time_ms long, value double, seq long, "
                   "region string")


def region_of(sensor_id: str) -> str:
    """Deterministic stand-in for a remote lookup (stable across processes, unlike hash())."""
    digest = hashlib.blake2b(sensor_id.encode(), digest_size=2).digest()
    return REGIONS[int.from_bytes(digest, "big") % len(REGIONS)]


def subregion_of(sensor_id: str) -> str:
    """Version 2 of the lookup: a finer, differently keyed one ('north-2', ...)."""
    digest = hashlib.blake2b(sensor_id.encode(), digest_size=4, person=b"subregion").digest()
    number = int.from_bytes(digest, "big")
    return f"{REGIONS[number % len(REGIONS)]}-{number // len(REGIONS) % 3 + 1}"


def enrich(batches: Iterator[pa.RecordBatch], lookup: Callable[[str], str],
           cost_ms: float) -> Iterator[pa.RecordBatch]:
    """Readings → readings with their region; the lookup's cost is slept once per batch."""
    schema = pa.schema([("sensor_id", pa.string()), ("event_time_ms", pa.int64()),
                        ("value", pa.float64()), ("seq", pa.int64()), ("region", pa.string())])
    for batch in batches:
        ids = batch.column("sensor_id").to_pylist()
        if cost_ms > 0 and ids:
            time.sleep(len(ids) * cost_ms / 1000.0)
        yield pa.RecordBatch.from_arrays(
            [*(batch.column(c) for c in ("sensor_id", "event_time_ms", "value", "seq")),
             pa.array([lookup(i) for i in ids], pa.string())], schema=schema)


def build(spark: SparkSession, readings: DataFrame, context: JobContext) -> DataFrame:
    """Enriched readings → one row per sensor and closed event-time window."""
    from pyspark.sql import functions as F

    lookup = context.function
    assert lookup is not None
    cost_ms = float(context.settings["enrichment_cost_ms"])
    window_s, watermark_s = context.settings["window_s"], context.settings["watermark_s"]

    def enrich_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return enrich(batches, lookup, cost_ms)

    enriched = (readings.mapInArrow(enrich_batches, ENRICHED_SCHEMA)
                .withColumn("event_time", F.timestamp_millis("event_time_ms")))
    window = F.window("event_time", f"{window_s} seconds")
    # Region is not a grouping key: a window open across a UDF swap stays one row, labelled
    # by the lookup of its newest reading.
    return (enriched.withWatermark("event_time", f"{watermark_s} seconds")
            .groupBy(window, "sensor_id")
            .agg(F.max_by("region", "event_time_ms").alias("region"),
                 F.count("*").alias("count"), F.avg("value").alias("avg_value"),
                 F.min("value").alias("min_value"), F.max("value").alias("max_value"),
                 F.sum("seq").alias("seq_sum"))
            .select("sensor_id", "region",
                    F.unix_millis(F.col("window.start")).alias("window_start_ms"),
                    F.unix_millis(F.col("window.end")).alias("window_end_ms"),
                    "count", "avg_value", "min_value", "max_value", "seq_sum"))


def low_priority(reading: Mapping[str, Any], settings: Mapping[str, Any]) -> bool:
    """Readings of the sensors named by `low_priority_prefixes` (empty: every reading)."""
    prefixes = tuple(p.strip() for p in str(settings["low_priority_prefixes"]).split(",")
                     if p.strip())
    return not prefixes or str(reading["sensor_id"]).startswith(prefixes)


job = Job(
    name="sensor-averages",
    description="sensor readings → enriched → per-sensor event-time window averages",
    build=build,
    input=Avro(load_schema("io.streamctl.sensors.v1.SensorReading")),
    output=Avro(load_schema("io.streamctl.sensors.v1.SensorWindowAverage"), key="sensor_id"),
    topics=Topics(input="sensor-readings", output="sensor-averages",
                  dead_letters="sensor-readings.dlq"),
    stateful=True,
    scales_with="input_parallelism",
    functions={"v1": region_of, "v2": subregion_of},
    settings=(
        Setting("enrichment_cost_ms", 5.0, "simulated lookup cost per record in milliseconds"),
        Setting("window_s", 10, "event-time window length in seconds"),
        Setting("watermark_s", 10, "allowed event-time lateness in seconds"),
        Setting("low_priority_prefixes", "", "comma-separated sensor-id prefixes whose "
                                             "readings may be shed (empty: every reading)"),
    ),
    low_priority=low_priority,
)
