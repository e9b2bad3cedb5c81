"""Exactly-once output, the pure part: commit markers, the replay decision, the sink's errors.

A micro-batch's output rows and a *commit marker* (query, checkpoint, batch id, topic, rows)
are written in one Kafka transaction. The marker topic is compacted and keyed by query id, so
its last committed record says which batch of which checkpoint is already in the output.
`decide` compares that with the batch Spark hands to `foreachBatch`: a batch whose marker is
committed is a replay (a crash came between the transaction commit and Spark's commit log
entry) and must not be written again. Neighbours: `sink` (drives it), `transactional_kafka`
(the Kafka adapter behind `TransactionalWriter`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from schemas import topics
from schemas.codec import codec_for
from schemas.records import CommitMarker
from streaming_jobs.errors import Fenced, TemporaryError, UserError
from streaming_jobs.runtime.sink.dead_letter import Rejected

DEFAULT_MARKER_TOPIC = topics.SINK_MARKERS
"""Compacted, keyed by query id; shared by every query of a cluster (see `read_last_marker`)."""
DEFAULT_MAX_RECORD_BYTES = 1_000_000
"""The largest record a job writes by default: librdkafka's own `message.max.bytes`, under
Kafka's default topic limit (1 048 588)."""

_MARKER_CODEC = codec_for(CommitMarker)


def encode_marker(marker: CommitMarker) -> bytes:
    return _MARKER_CODEC.encode(marker)


def decode_marker(payload: bytes | None, *, topic: str | None = None,
                  partition: int | None = None, offset: int | None = None) -> CommitMarker:
    """Raises `schemas.DecodeError` (with the position) on anything but a marker."""
    return _MARKER_CODEC.decode(payload, topic=topic, partition=partition, offset=offset)


class Replay(enum.Enum):
    WRITE = "write"
    """Not in the output yet: write rows and marker in one transaction."""
    SKIP = "skip"
    """Already committed by an earlier attempt of the same batch: write nothing."""


class CheckpointBehindOutput(UserError):
    """The checkpoint is older than the output: skipping would lose data, writing duplicate it."""


def decide(last: CommitMarker | None, checkpoint_id: str, batch_id: int) -> Replay:
    """Whether batch `batch_id` of checkpoint `checkpoint_id` must be written.

    Spark writes its commit log entry only after `foreachBatch` returns, so at most the one
    batch after the last committed entry is replayed: `batch_id == last.batch_id` is that
    replay. A smaller id under the same checkpoint cannot come from a crash; it means the
    checkpoint was restored from an older copy, and is refused rather than guessed at.
    """
    if last is None or last.checkpoint_id != checkpoint_id or batch_id > last.batch_id:
        return Replay.WRITE
    if batch_id == last.batch_id:
        return Replay.SKIP
    raise CheckpointBehindOutput(
        f"query {last.query_id}: Spark runs batch {batch_id} of checkpoint {checkpoint_id}, "
        f"but batch {last.batch_id} of it is already committed to {last.topic}; the "
        "checkpoint was restored from an older copy. Restore the newest checkpoint, or start "
        "under a new query id (a new checkpoint) to write its batches again.")


class SinkFenced(Fenced):
    """Another instance with a higher producer epoch owns this sink's transactional id."""


class SinkBatchAborted(TemporaryError):
    """The batch's transaction was aborted: nothing of it is visible; it is safe to rerun."""


class SinkRefused(UserError):
    """Kafka refuses the sink's setup (credentials, ACLs, a topic), or keeps refusing rows that
    no dead letter could take: retrying changes nothing until an operator does."""


class SinkUnavailable(TemporaryError):
    """Kafka did not answer within the sink's bounded retry time; the outcome is resolved by
    re-initialising the transactional producer before the next batch."""


@dataclass(frozen=True)
class OutputBatch:
    """One batch's encoded output rows, on the driver."""

    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]

    @property
    def rows(self) -> int:
        return len(self.values)


class TransactionalWriter(Protocol):
    """The sink's port to Kafka; `transactional_kafka.KafkaTransactionalWriter` is the real one.

    `start` fences earlier producers with the same transactional id (finishing or aborting
    their open transaction) and then returns the last committed marker for `query_id`;
    `before_fence` runs right before the fence, and what it raises stops the start.
    `commit` writes rows and marker in one transaction, the rows `topic` cannot take sent to
    the dead-letter topic in it (returned), or raises `SinkFenced`, `SinkBatchAborted`,
    `SinkUnavailable` or `SinkRefused`.
    """

    def start(self, query_id: str,
              before_fence: Callable[[], None] = lambda: None) -> CommitMarker | None: ...

    def commit(self, topic: str, batch: OutputBatch,
               marker: CommitMarker) -> tuple[Rejected, ...]: ...

    def check_topic(self, topic: str) -> None:
        """`SinkRefused` unless `topic` exists and takes the job's largest record."""

    def close(self) -> None: ...


def output_batch(table: pa.Table) -> OutputBatch:
    """The encoder's Arrow output (key, value columns) as an `OutputBatch`."""
    missing = {"key", "value"} - set(table.column_names)
    if missing:
        raise ValueError(f"the output encoder must produce key and value columns; "
                         f"missing {sorted(missing)} in {table.column_names}")
    return OutputBatch(keys=table.column("key").to_pylist(),
                       values=table.column("value").to_pylist())
