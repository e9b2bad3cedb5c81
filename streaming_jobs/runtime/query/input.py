"""The runtime's first step of every plan: Kafka rows → the job's decoded records.

Owns what happens to each input record before the job's builder sees it: decoding in the job's
input format, sending a record that does not decode to the dead-letter topic (headers: source
topic, partition, offset and the reason in words), load shedding of the records the job marks
low priority, and counting both per batch (a Spark observed metric, `OBSERVATION`, which the
metrics publisher reads). Runs in the Kafka source's tasks, before any shuffle.

Dead letters are written from the Spark task (one producer per Python worker, flushed before
the task's iterator ends). A task that is retried re-reads its records, so a dead-letter entry
can be duplicated; the dead-letter count reported through Spark's observed metrics is not,
because Spark only merges the metrics of the successful attempt.

Shedding decides by a hash of the record's Kafka position (topic, partition, offset), so a
replayed batch drops exactly the records it dropped before, in any process. Its fraction is
the one in force for the batch (`per_batch`): a change needs no restart. Neighbours: `plan`
(composes it with the source and the builder), `kafka.DeadLetterFactory`, `metrics`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from schemas.errors import DecodeError
from streaming_jobs.formats.base import Decoder
from streaming_jobs.per_batch import BatchValues, in_force
from streaming_jobs.runtime.observe.metrics import OBSERVATION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

"""Name of the observed metric carrying `dead_letters`, `rows_shed` and `rows_low_priority`
per batch."""
KAFKA_COLUMNS = (("kafka_key", "binary"), ("kafka_topic", "string"),
                 ("kafka_partition", "int"), ("kafka_offset", "long"),
                 ("kafka_timestamp", "timestamp"))
"""The source columns a job asks for with `kafka_metadata=True`, named and typed."""
_RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


class DeadLetterSink(Protocol):
    """Where a task sends records it cannot decode; `flush` before the task finishes."""

    def send(self, payload: bytes | None, error: DecodeError) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class ShedRule:
    """Which of the records the job marks low priority load shedding drops: a `fraction`,
    chosen by their Kafka position, so a replay drops the same ones."""

    fraction: float = 0.0

    def sheds(self, topic: str, partition: int, offset: int) -> bool:
        if self.fraction <= 0:
            return False
        digest = hashlib.blake2b(f"{topic}/{partition}/{offset}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64 < self.fraction


class DiscardDeadLetters:
    """A dead-letter sink that keeps nothing (picklable, shipped to tasks): for runs whose
    input another run reports (a standby's warm-up) or that read nothing (`job check`)."""

    def __call__(self) -> DiscardDeadLetters:
        return self

    def send(self, payload: bytes | None, error: DecodeError) -> None:
        pass

    def flush(self) -> None:
        pass


LowPriority = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


@dataclass(frozen=True)
class InputStep:
    """The `mapInArrow` function of the decode step (picklable, shipped to the tasks)."""

    decoder: Decoder
    dead_letters: Callable[[], DeadLetterSink]
    columns: tuple[str, ...]
    arrow_schema: pa.Schema
    """The decoded columns, then `kafka_*` (if asked for), then the three flags."""
    built_with: BatchValues = field(default_factory=BatchValues)
    """The knobs the plan was built with; a batch's own (`per_batch.in_force`) win."""
    low_priority: LowPriority | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    kafka_metadata: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sink = self.dead_letters()
        shed_rule = ShedRule(in_force(self.built_with).shed_fraction)
        settings = dict(self.settings)
        empty = dict.fromkeys(self.columns)
        for batch in batches:
            rows = []
            for key, value, topic, partition, offset, timestamp in zip(
                    *(batch.column(c).to_pylist() for c in _RAW_COLUMNS), strict=True):
                try:
                    record = dict(self.decoder(value))
                except DecodeError as err:
                    sink.send(value, err.at(topic=topic, partition=partition, offset=offset))
                    row = {**empty, "dead_letter": True, "shed": False, "low_priority": False}
                else:
                    # Marked whether shed or not: the controller sizes shedding by the share.
                    low = (self.low_priority is not None
                           and bool(self.low_priority(record, settings)))
                    shed = low and shed_rule.sheds(topic, partition, offset)
                    row = {**empty, **record, "dead_letter": False, "shed": shed,
                           "low_priority": low}
                if self.kafka_metadata:
                    row.update(kafka_key=key, kafka_topic=topic, kafka_partition=partition,
                               kafka_offset=offset, kafka_timestamp=timestamp)
                rows.append(row)
            yield pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
        sink.flush()


def decoded(raw: DataFrame, step: InputStep, schema: StructType) -> DataFrame:
    """`raw` Kafka rows → the job's records: decoded, dead letters and shed rows counted
    (observed metric `OBSERVATION`) and removed. `schema` is the step's output, flags too."""
    from pyspark.sql import functions as F

    return (raw.select(*_RAW_COLUMNS)
            .mapInArrow(step, schema)
            .observe(OBSERVATION,
                     F.sum(F.col("dead_letter").cast("long")).alias("dead_letters"),
                     F.sum(F.col("shed").cast("long")).alias("rows_shed"),
                     F.sum(F.col("low_priority").cast("long")).alias("rows_low_priority"))
            .where(~F.col("dead_letter") & ~F.col("shed"))
            .drop("dead_letter", "shed", "low_priority"))
