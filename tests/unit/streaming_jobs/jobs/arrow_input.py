"""Helpers for unit tests of the runtime's decode step without Spark: Kafka rows as Arrow
batches, and a dead-letter sink that remembers what it was sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from schemas.errors import DecodeError
from streaming_jobs.api import Job
from streaming_jobs.per_batch import BatchValues
from streaming_jobs.runtime.query.input import InputStep

KAFKA_TIMESTAMP = 1_700_000_000_000


class MemoryDeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, DecodeError]] = []
        self.flushed = False

    def __call__(self) -> MemoryDeadLetters:
        return self

    def send(self, payload: bytes | None, error: DecodeError) -> None:
        self.sent.append((payload, error))

    def flush(self) -> None:
        self.flushed = True


def kafka_batch(values: Sequence[bytes | None], topic: str = "in", partition: int = 1,
                first_offset: int = 40) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([None] * n, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": [topic] * n, "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
        "timestamp": pa.array([KAFKA_TIMESTAMP * 1000] * n, pa.timestamp("us", tz="UTC"))})


def input_step(job: Job, dead: MemoryDeadLetters, shed: float = 0.0,
               settings: dict[str, Any] | None = None) -> InputStep:
    """The decode step the runtime builds for `job` (as `plan.Plan` does)."""
    from streaming_jobs.runtime.query.plan import Plan

    schema = Plan(job)._decoded_schema(with_flags=True)
    return InputStep(decoder=job.input.decoder(), dead_letters=dead,
                     columns=tuple(f.name for f in job.input.fields()),
                     arrow_schema=to_arrow_schema(schema, timezone="UTC"),
                     built_with=BatchValues(shed), low_priority=job.low_priority,
                     settings=tuple({**{s.name: s.default for s in job.settings},
                                     **(settings or {})}.items()),
                     kafka_metadata=job.kafka_metadata)


def decode(job: Job, values: Sequence[bytes | None], shed: float = 0.0,
           settings: dict[str, Any] | None = None,
           dead: MemoryDeadLetters | None = None) -> list[dict[str, Any]]:
    step = input_step(job, dead if dead is not None else MemoryDeadLetters(), shed, settings)
    return pa.Table.from_batches(list(step(iter([kafka_batch(values)])))).to_pylist()
