"""A job's streaming plan as the runtime builds it: source → decode → the job's builder → check.

Owns the composition of what the runtime owns (the Kafka source with the knobs in force:
`read_kafka`, the `readStream` every run starts from, one place for its options; the
decode step with dead letters and shedding) with what the job owns (`api.Job.build`), the
`api.JobContext` the builder receives, and the load-time check of what it returns: a
streaming DataFrame whose columns the job's output format can write. A builder that fails or
returns the wrong columns is a `PlanError` naming the job, raised before Spark runs a batch.
Neighbours: `lifecycle` (builds a plan for every run), `warm_up`, `sink` (the encoder).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas import knobs
from schemas.knobs import STATE_PARTITIONS
from streaming_jobs.api import Job, JobContext
from streaming_jobs.config import ConfigError, JobConfig, RunSettings, changed
from streaming_jobs.formats import types
from streaming_jobs.per_batch import BatchValues, SwappableFunction
from streaming_jobs.runtime.checkpoint.input_switch import KafkaInput
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.query.input import KAFKA_COLUMNS, DeadLetterSink, InputStep
from streaming_jobs.runtime.query.input import decoded as decode_step

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame, SparkSession


class PlanError(ConfigError):
    """The job's builder failed, or returned rows its output format cannot write."""


@dataclass(frozen=True)
class Plan:
    """One job, as the runtime builds and writes it."""

    job: Job

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def stateful(self) -> bool:
        return self.job.stateful

    @property
    def sheddable(self) -> bool:
        """Whether the job marks records low priority, which load shedding may drop."""
        return self.job.low_priority is not None

    @property
    def output_mode(self) -> str:
        return self.job.output_mode

    @property
    def scaling_parameter(self) -> str:
        return self.job.scales_with

    @property
    def udf_versions(self) -> tuple[str, ...]:
        return tuple(self.job.functions)

    def context(self, run: RunSettings, desired: DesiredState) -> JobContext:
        """What the builder learns of the run: the knobs in force (`desired`), its settings."""
        version = desired.udf_version
        return JobContext(
            query_id=run.query_id, input_parallelism=desired.input_parallelism,
            state_partitions=desired.state_partitions,
            max_offsets_per_trigger=desired.max_offsets_per_trigger,
            udf_version=version,
            function=SwappableFunction(self.job.functions, version) if self.job.functions
            else None,
            settings=run.settings_map)

    def build(self, spark: SparkSession, run: RunSettings, desired: DesiredState,
              dead_letters: Callable[[], DeadLetterSink], source: KafkaInput | None = None,
              ) -> DataFrame:
        """The job's output rows for a run with the knobs of `desired`, checked."""
        raw = read_kafka(spark, run.kafka_options, desired, source)
        records = decode_step(raw, self._input_step(spark, run, desired, dead_letters),
                              self._decoded_schema(with_flags=True))
        try:
            output = self.job.build(spark, records, self.context(run, desired))
        except Exception as exc:
            raise PlanError(f"job {self.name!r}: its builder failed: {type(exc).__name__}: "
                            f"{_first_line(exc)}") from exc
        self.check(output)
        return output

    def check(self, output: Any) -> None:
        """`PlanError` unless `output` is a streaming DataFrame its output format can write."""
        from pyspark.sql import DataFrame

        if not isinstance(output, DataFrame):
            raise PlanError(f"job {self.name!r}: its builder returned "
                            f"{type(output).__name__}, not a DataFrame")
        if not output.isStreaming:
            raise PlanError(f"job {self.name!r}: its builder returned a batch DataFrame; "
                            "build the output from the source it was given")
        problems = self.job.output.problems(output.schema)
        if problems:
            raise PlanError(f"job {self.name!r}: the builder's columns "
                            f"({', '.join(output.columns) or 'none'}) do not fit its output, "
                            f"{self.job.output.describe()}: " + "; ".join(problems))

    def _input_step(self, spark: SparkSession, run: RunSettings, desired: DesiredState,
                    dead_letters: Callable[[], DeadLetterSink]) -> InputStep:
        from pyspark.sql.pandas.types import to_arrow_schema

        timezone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        return InputStep(
            decoder=self.job.input.decoder(), dead_letters=dead_letters,
            columns=tuple(f.name for f in self.job.input.fields()),
            arrow_schema=to_arrow_schema(self._decoded_schema(with_flags=True),
                                         timezone=timezone),
            built_with=BatchValues.of(desired),
            low_priority=self.job.low_priority,
            settings=run.settings, kafka_metadata=self.job.kafka_metadata)

    def _decoded_schema(self, with_flags: bool) -> Any:
        from pyspark.sql import types as T

        schema = types.struct_type(self.job.input.fields())
        if self.job.kafka_metadata:
            for name, kind in KAFKA_COLUMNS:
                schema.add(name, _simple(kind))
        if with_flags:
            (schema.add("dead_letter", T.BooleanType()).add("shed", T.BooleanType())
             .add("low_priority", T.BooleanType()))
        return schema

    def unsupported(self) -> tuple[tuple[str, str], ...]:
        """(parameter, why) for the knobs this job's declaration rules out."""
        reasons = []
        if not self.job.stateful:
            reasons.append((STATE_PARTITIONS, f"job {self.name} keeps no state"))
        if self.job.low_priority is None:
            reasons.append((knobs.SHED_FRACTION, f"job {self.name} marks no records low priority "
                                             "(Job.low_priority), so none may be shed"))
        if not self.job.functions:
            reasons.append((knobs.UDF_VERSION, f"job {self.name} declares no function versions"))
        return tuple(reasons)


def check_plan(job: Job, config: JobConfig) -> str:
    """Build `job`'s plan in a local SparkSession of its own and check it (`job check`):
    what `job run` does before Spark runs a batch. Nothing is read or written."""
    from streaming_jobs.loading import worker_path
    from streaming_jobs.runtime.query.input import DiscardDeadLetters
    from streaming_jobs.runtime.query.session import build_session

    spark = build_session(changed(config, task_slots=2), worker_path(job))
    try:
        output = Plan(job).build(spark, config.run, config.initial_state(), DiscardDeadLetters())
        columns = ", ".join(f"{f.name} {f.dataType.simpleString()}"
                            for f in output.schema.fields)
    finally:
        spark.stop()
    return (f"job {job.name}: plan built and checked; output ({columns}) fits "
            f"{job.output.describe()}")


def _simple(kind: str) -> Any:
    from pyspark.sql import types as T

    return {"binary": T.BinaryType(), "string": T.StringType(), "int": T.IntegerType(),
            "long": T.LongType(), "timestamp": T.TimestampType()}[kind]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:400] if text else ""


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
