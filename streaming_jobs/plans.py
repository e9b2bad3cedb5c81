"""The registry of bundled jobs: what the elastic runtime needs to know of each one.

Owns `PLANS` (job name → `JobPlan`) and `plan_for`. A plan says how to build the streaming
query from the Kafka source given the configuration in force (the runtime passes a
`JobConfig` whose knobs — input parallelism, batch cap, topics, … — hold the values of the
current run), how to encode its output rows for Kafka (an Arrow `mapInArrow` function to
`key binary, value binary`), its output mode, whether it keeps state (and so whether its
state partitions can be changed), which knob its capacity grows with, its wire types and its
default topics. Neighbours: the jobs
(`sensor_averages`, `fraud.plan`) and the runtime (`runtime.lifecycle` builds and starts the
plan, `runtime.sink` encodes with it). Imports no pyspark at module level, so the command
line can validate a job name without starting Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from schemas.records import (
    CardTransaction,
    ScoredTransaction,
    SensorReading,
    SensorWindowAverage,
    _Record,
)
from streaming_jobs import sensor_averages
from streaming_jobs.fraud import plan as fraud
from streaming_jobs.fraud.scoring import SCORERS
from streaming_jobs.source import KafkaInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_jobs.config import JobConfig

DeadLetters = Callable[[], sensor_averages.DeadLetterSink]


class PlanBuilder(Protocol):
    """(session, configuration in force, dead-letter sink factory, the input the runtime chose
    — None: the configured topic, unnamed) → the output rows."""

    def __call__(self, spark: SparkSession, config: JobConfig, dead_letters: DeadLetters,
                 source: KafkaInput | None = None) -> DataFrame: ...


Encoder = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
ENCODED_SCHEMA = "key binary, value binary"


SCALING_PARAMETERS = ("input_parallelism", "state_partitions")
"""The runtime parameters (`runtime.parameters.REGISTRY`) a plan's capacity can grow with."""


@dataclass(frozen=True)
class JobPlan:
    """One bundled job as the runtime sees it."""

    name: str
    description: str
    build: PlanBuilder
    encode: Encoder
    """Output rows (Arrow batches of the plan's columns) → `key binary, value binary`."""
    input_record: type[_Record]
    output_record: type[_Record]
    default_topics: Mapping[str, str]
    """JobConfig field → topic, used when the option is not given (input, output, dlq)."""
    udf_versions: tuple[str, ...]
    """The registered versions of the job's swappable function (`udf_version` values)."""
    output_mode: str = "append"
    stateful: bool = True
    """Keeps state in the checkpoint: its state partitions can be repartitioned offline."""
    scaling_parameter: str = "input_parallelism"
    """The knob the job's capacity grows with, i.e. which stage holds its expensive work:
    `input_parallelism` when it runs in the Kafka source's tasks (before any shuffle),
    `state_partitions` when it runs in the stateful operator (one task per state partition,
    the shuffle's partitions). Only the plan knows; the metrics carry it to the controller,
    which sizes this knob (`controller/knobs.py`)."""
    encoded_schema: str = ENCODED_SCHEMA

    def __post_init__(self) -> None:
        if self.scaling_parameter not in SCALING_PARAMETERS:
            raise ValueError(f"job {self.name}: scaling_parameter must be one of "
                             f"{', '.join(SCALING_PARAMETERS)}, got {self.scaling_parameter!r}")
        if self.scaling_parameter == "state_partitions" and not self.stateful:
            raise ValueError(f"job {self.name}: a stateless plan cannot scale by its state "
                             "partitions")



def _build_sensor_averages(spark: SparkSession, config: JobConfig, dead_letters: DeadLetters,
                           source: KafkaInput | None = None) -> DataFrame:
    return sensor_averages.build_averages(spark, config, config.input_parallelism, dead_letters,
                                          source)


def _build_fraud_detection(spark: SparkSession, config: JobConfig, dead_letters: DeadLetters,
                           source: KafkaInput | None = None) -> DataFrame:
    return fraud.build_fraud_detection(spark, config, dead_letters, source=source)


PLANS: dict[str, JobPlan] = {
    "sensor-averages": JobPlan(
        name="sensor-averages",
        description="sensor readings → enriched → per-sensor event-time window averages",
        build=_build_sensor_averages, encode=sensor_averages.encode_averages,
        input_record=SensorReading, output_record=SensorWindowAverage,
        udf_versions=tuple(sensor_averages.ENRICHMENTS),
        default_topics={"query_id": "sensor-averages", "input_topic": "sensor-readings",
                        "output_topic": "sensor-averages",
                        "dlq_topic": "sensor-readings.dlq"}),
    "fraud-detection": JobPlan(
        name="fraud-detection",
        description="card transactions → per-account state and rules → scoring call → "
                    "one scored transaction per input",
        build=_build_fraud_detection, encode=fraud.encode_scored,
        input_record=CardTransaction, output_record=ScoredTransaction,
        udf_versions=tuple(SCORERS), scaling_parameter="state_partitions",
        default_topics={"query_id": "fraud-detection", "input_topic": "card-transactions",
                        "output_topic": "scored-transactions",
                        "dlq_topic": "card-transactions.dlq"}),
}
DEFAULT_JOB = "sensor-averages"


def plan_for(name: str) -> JobPlan:
    """The registered plan, or a ValueError naming the known jobs."""
    try:
        return PLANS[name]
    except KeyError:
        raise ValueError(f"unknown job {name!r}; known jobs: {', '.join(sorted(PLANS))}") from None
