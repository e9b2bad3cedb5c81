"""Offline repartitioning of a stopped query's state, with its preconditions checked first.

Owns `repartition_state` (a wrapper of Spark's `StreamingCheckpointManager.repartition`,
PySpark 4.2+) and the readers of what a checkpoint records: its last planned and last
committed batch and its number of shuffle/state partitions. The reconfiguration protocol
calls it between quiesce and restart: quiesce → `repartition_state` → restart from the same
checkpoint, which then runs with the new number of state partitions.

What Spark does: it reads every stateful operator's state at the last committed batch N,
rewrites it into the new number of partitions and writes batch N+1 into the offset and commit
logs (a batch that reads no input), so the restarted query resumes after it with the same
source offsets. It supports streaming aggregation, deduplication, session windows, stream
joins, (flat)MapGroupsWithState, applyInPandasWithState and transformWithState; only the
RocksDB state store provider (the HDFS-backed default is refused), which is fixed in the
checkpoint at a query's first batch.

Preconditions checked here, each with its own error (Spark's own errors are less direct):
the query is not running in this driver; the checkpoint is stateful and uses RocksDB; the last
planned batch committed (else a restart would replay it with the old partitioning, and the
repartition would drop it); the target is within bounds. A target equal to the current number
is a no-op result, not an error, so applying the same control tuple twice is harmless. Only
local checkpoints are inspected (the project keeps them on local disk); a query running in
another process on the same checkpoint is not detected.

At a reconfiguration (`align`, called by `lifecycle` in `start`): compare the desired count
with the checkpoint's, make the checkpoint end on a committed batch, repartition. Spark refuses
when the last planned batch did not commit. After our quiesce such a batch was planned by this
process after a commit it saw, and never entered the sink (the gate refused it, or the stop came
first): it executed nothing, wrote no state and no output, so its offset-log entry is removed
and the restart plans it again from the last committed offsets. A batch that entered the sink,
or one left by another process (a crash), may have written output: it is left alone, and
Spark's refusal becomes the reason of a FAILED ack after the rollback; so is the query's first
batch, which has no commit to plan it again from. Before any batch is planned the session's
`spark.sql.shuffle.partitions` decides, and `align` sets it to the target.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streaming_jobs.errors import RequestRefused

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
_PARTITIONS_CONF = "spark.sql.shuffle.partitions"


class StateRepartitionError(RequestRefused):
    """The state was not repartitioned; the checkpoint is unchanged. Names the checkpoint."""

    def __init__(self, checkpoint_dir: str, problem: str) -> None:
        self.checkpoint_dir = checkpoint_dir
        super().__init__(f"cannot repartition the state of {checkpoint_dir}: {problem}")


class QueryStillRunning(StateRepartitionError):
    """Stop the query first (quiesce): Spark must not rewrite state a running query uses."""


class LastBatchNotCommitted(StateRepartitionError):
    """The last planned batch has no commit: run it to completion (restart, quiesce again)."""

    def __init__(self, checkpoint_dir: str, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(checkpoint_dir, f"last batch {batch_id} did not commit")


class UnsupportedCheckpoint(StateRepartitionError):
    """Permanent for this checkpoint: no state, no batch yet, or not the RocksDB store."""


class TargetOutOfBounds(StateRepartitionError):
    """The requested number of partitions is outside [1, max_partitions]."""


class RepartitionFailed(StateRepartitionError):
    """Spark refused or failed; the message carries its error class and first line."""


@dataclass(frozen=True)
class CheckpointBatches:
    """The newest batch ids in the offset log (planned) and the commit log (committed)."""

    last_planned: int | None
    last_committed: int | None


@dataclass(frozen=True)
class RepartitionResult:
    """What `repartition_state` changed."""

    checkpoint_dir: str
    old_partitions: int
    new_partitions: int
    changed: bool
    """False when the checkpoint already had `new_partitions` (nothing was written)."""
    repartition_batch_id: int | None
    """The batch Spark wrote for the repartition (None when unchanged)."""
    duration_ms: int
    """Time spent in Spark's repartition (0 when unchanged)."""


def local_path(checkpoint_dir: str) -> Path:
    """The checkpoint as a local path; `file:` URIs are accepted, other schemes refused."""
    parsed = urlparse(checkpoint_dir)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else checkpoint_dir)
    raise UnsupportedCheckpoint(checkpoint_dir, f"only local checkpoints are supported, "
                                                f"not {parsed.scheme}://")


def _batch_ids(log_dir: Path) -> list[int]:
    """Batch files of a metadata log (`0`, `1`, …), ignoring `.crc` and temporary files."""
    if not log_dir.is_dir():
        return []
    return sorted(int(p.name) for p in log_dir.iterdir() if p.name.isdigit())


def read_batches(checkpoint_dir: str) -> CheckpointBatches:
    root = local_path(checkpoint_dir)
    planned, committed = _batch_ids(root / "offsets"), _batch_ids(root / "commits")
    return CheckpointBatches(planned[-1] if planned else None,
                             committed[-1] if committed else None)


def _last_offsets_conf(checkpoint_dir: str) -> dict[str, Any]:
    """The SQL conf recorded with the newest offset-log entry (the one a restart resumes with).

    An entry is a version line (`v1`), a JSON line with `batchWatermarkMs`, `batchTimestampMs`
    and `conf`, then one line per source.
    """
    root = local_path(checkpoint_dir)
    planned = _batch_ids(root / "offsets")
    if not planned:
        raise UnsupportedCheckpoint(checkpoint_dir, "no batch has been planned yet")
    entry = root / "offsets" / str(planned[-1])
    lines = entry.read_text().splitlines()
    try:
        return dict(json.loads(lines[1])["conf"])
    except (IndexError, KeyError, ValueError) as exc:
        raise UnsupportedCheckpoint(
            checkpoint_dir, f"unreadable offset log entry {entry}: {exc!r}") from exc


def read_state_partitions(checkpoint_dir: str) -> int:
    """The number of shuffle/state partitions the query runs with when restarted."""
    conf = _last_offsets_conf(checkpoint_dir)
    try:
        return int(conf[_PARTITIONS_CONF])
    except (KeyError, ValueError) as exc:
        raise UnsupportedCheckpoint(
            checkpoint_dir, f"its offset log records no {_PARTITIONS_CONF}") from exc


def read_state_store_provider(checkpoint_dir: str) -> str:
    return str(_last_offsets_conf(checkpoint_dir).get(_PROVIDER_CONF, ""))


def check_preconditions(spark: SparkSession, checkpoint_dir: str, num_partitions: int,
                        max_partitions: int) -> int:
    """Raise the first violated precondition; returns the current number of partitions."""
    if not 1 <= num_partitions <= max_partitions:
        raise TargetOutOfBounds(checkpoint_dir, f"{num_partitions} state partitions is "
                                                f"outside [1, {max_partitions}]")
    _check_not_running(spark, checkpoint_dir)
    batches = read_batches(checkpoint_dir)
    # A planned batch runs again as planned, its partitions included (the first one too)
    if batches.last_planned is not None and batches.last_planned != batches.last_committed:
        raise LastBatchNotCommitted(checkpoint_dir, batches.last_planned)
    if not (local_path(checkpoint_dir) / "state").is_dir():
        raise UnsupportedCheckpoint(checkpoint_dir, "the query keeps no state")
    if batches.last_committed is None:
        raise UnsupportedCheckpoint(checkpoint_dir, "no batch has committed yet")
    provider = read_state_store_provider(checkpoint_dir)
    if provider != ROCKSDB_PROVIDER:
        raise UnsupportedCheckpoint(
            checkpoint_dir, f"its state store is {provider or 'unknown'}; Spark repartitions "
            f"only {ROCKSDB_PROVIDER} (set {_PROVIDER_CONF} before the query's first batch)")
    return read_state_partitions(checkpoint_dir)


def _check_not_running(spark: SparkSession, checkpoint_dir: str) -> None:
    metadata = local_path(checkpoint_dir) / "metadata"
    if not metadata.is_file():
        raise UnsupportedCheckpoint(checkpoint_dir, "no query metadata: not a checkpoint")
    query_id = json.loads(metadata.read_text().splitlines()[0])["id"]
    running = [q for q in spark.streams.active if str(q.id) == query_id]
    if running:
        raise QueryStillRunning(checkpoint_dir, f"query {running[0].name or query_id} "
                                                f"(id {query_id}) is still running")


def repartition_state(spark: SparkSession, checkpoint_dir: str, num_partitions: int, *,
                      max_partitions: int = 64) -> RepartitionResult:
    """Rewrite the stopped query's state into `num_partitions` partitions (blocking)."""
    old = check_preconditions(spark, checkpoint_dir, num_partitions, max_partitions)
    if old == num_partitions:
        return RepartitionResult(checkpoint_dir, old, num_partitions, changed=False,
                                 repartition_batch_id=None, duration_ms=0)
    started = time.monotonic()
    try:
        # Private accessor: PySpark 4.3 has not made the manager public yet (see its TODO).
        spark._streamingCheckpointManager.repartition(
            str(local_path(checkpoint_dir)), num_partitions)
    except Exception as exc:  # py4j wraps every JVM error; keep Spark's first line
        first_line = str(exc).strip().splitlines()
        detail = next((line for line in first_line if "STATE_REPARTITION" in line),
                      first_line[0] if first_line else repr(exc))
        raise RepartitionFailed(checkpoint_dir, f"Spark refused: {detail}") from exc
    duration_ms = int((time.monotonic() - started) * 1000)
    return RepartitionResult(checkpoint_dir, old, num_partitions, changed=True,
                             repartition_batch_id=read_batches(checkpoint_dir).last_planned,
                             duration_ms=duration_ms)


def current(checkpoint_dir: str) -> int | None:
    """The state partitions the query resumes with: those its newest planned batch recorded
    (a planned batch runs again as planned), or None before its first (the session's
    `spark.sql.shuffle.partitions` then decides)."""
    if read_batches(checkpoint_dir).last_planned is None:
        return None
    return read_state_partitions(checkpoint_dir)


def discard_unexecuted_batch(checkpoint_dir: str, *, last_admitted: int | None,
                             seen_commit: int | None) -> int | None:
    """Remove the offset-log entry of a batch planned past the last commit that never entered
    the sink; returns its id, or None when there is none or it may have run.

    `last_admitted`: the newest batch the gate admitted in this run (None: none).
    `seen_commit`: the newest commit of this query this process saw (None: none, so any
    uncommitted batch may be another process's).
    """
    batches = read_batches(checkpoint_dir)
    planned, committed = batches.last_planned, batches.last_committed
    if (planned is None or committed is None or planned != committed + 1
            or seen_commit is None or seen_commit > committed
            or (last_admitted is not None and last_admitted >= planned)):
        return None
    offsets = local_path(checkpoint_dir) / "offsets"
    for name in (str(planned), f".{planned}.crc"):  # the entry and its checksum file
        (offsets / name).unlink(missing_ok=True)
    log.info("removed the offset-log entry of batch %d (planned, never executed); the "
             "restart plans it again", planned)
    return planned


def align(spark: SparkSession, checkpoint_dir: str, target: int, *, last_admitted: int | None,
          seen_commit: int | None, max_partitions: int) -> str | None:
    """Repartition the stopped query's state to `target`; a note for the ack, or None when
    nothing changed (or no batch is planned yet: then `target` is the number the query starts
    with). Raises `StateRepartitionError` (checkpoint unchanged)."""
    old = current(checkpoint_dir)
    if old is None:
        # Nothing planned yet: the session's setting decides the first batch's partitions
        # (`current`), so a target set before then is the one the query starts with.
        spark.conf.set(_PARTITIONS_CONF, str(target))
        return None
    if old == target:
        return None
    discard_unexecuted_batch(checkpoint_dir, last_admitted=last_admitted,
                             seen_commit=seen_commit)
    result = repartition_state(spark, checkpoint_dir, target, max_partitions=max_partitions)
    return (f"state repartitioned {result.old_partitions}→{result.new_partitions} in "
            f"{result.duration_ms} ms")
