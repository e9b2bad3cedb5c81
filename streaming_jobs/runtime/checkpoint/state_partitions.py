"""Changing a stateful query's state partitions at a reconfiguration, between stop and restart.

Owns the bridge from the protocol to `state_repartition` (Spark's offline
`StreamingCheckpointManager.repartition`): compare the desired count with the checkpoint's, make
the checkpoint end on a committed batch, repartition. Spark refuses when the last planned batch
did not commit. After our quiesce such a batch was planned by this process after a commit it
saw, and never entered the sink (the gate refused it, or the stop came first): it executed
nothing, wrote no state and no output, so its offset-log entry is removed and the restart plans
it again from the last committed offsets. A batch that entered the sink, or one left by another
process (a crash), may have written output: it is left alone, and Spark's refusal becomes the
reason of a FAILED ack after the rollback. Neighbours: `lifecycle` (calls `align` in `start`),
`state_repartition` (the primitive), `gate` (the last batch it admitted).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from streaming_jobs.runtime.checkpoint.state_repartition import (
    local_path,
    read_batches,
    read_state_partitions,
    repartition_state,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def current(checkpoint_dir: str) -> int | None:
    """The checkpoint's state partitions, or None before its first committed batch (the
    session's `spark.sql.shuffle.partitions` then decides)."""
    if read_batches(checkpoint_dir).last_committed is None:
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
    nothing changed. Raises `state_repartition.StateRepartitionError` (checkpoint unchanged)."""
    old = current(checkpoint_dir)
    if old is None or old == target:
        return None
    discard_unexecuted_batch(checkpoint_dir, last_admitted=last_admitted,
                             seen_commit=seen_commit)
    result = repartition_state(spark, checkpoint_dir, target, max_partitions=max_partitions)
    return (f"state repartitioned {result.old_partitions}→{result.new_partitions} in "
            f"{result.duration_ms} ms")
