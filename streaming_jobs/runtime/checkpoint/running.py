"""The batch a query is running now, read from its checkpoint while it runs.

Spark writes a batch's offset-log entry (its id, its timestamp, the source offsets it will
read to) before it runs the batch, and the commit-log entry after the sink took it: a planned
batch past the last commit is the one running. The liveness beat (`observe.metrics.beat`)
says which batch that is, since when, and how far it reads, so the controller learns that a
long batch is under way, and where it will end, before the batch reports. Only local
checkpoints are read (as everywhere in the runtime); elsewhere the beat says nothing is known.
Neighbours: `input_source` (the offset-log entry format), `state_repartition` (the logs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from streaming_jobs.runtime.checkpoint.input_source import entry_sources
from streaming_jobs.runtime.checkpoint.input_switch import Offsets
from streaming_jobs.runtime.checkpoint.state_repartition import (
    StateRepartitionError,
    local_path,
    read_batches,
)


@dataclass(frozen=True)
class RunningBatch:
    """A batch planned and not committed: its id, when it was planned, and per topic
    partition where it starts (where the batch before it ended) and where it will end."""

    batch_id: int
    planned_at_ms: int
    starts: dict[str, Offsets]
    ends: dict[str, Offsets]


def running_batch(checkpoint_dir: str) -> RunningBatch | None:
    """The running batch, or None between batches, before the first one, or when the
    checkpoint cannot be read (not local, or an entry being replaced)."""
    try:
        batches = read_batches(checkpoint_dir)
        planned, committed = batches.last_planned, batches.last_committed
        if planned is None or (committed is not None and committed >= planned):
            return None
        return RunningBatch(planned, _planned_at_ms(checkpoint_dir, planned),
                            _topics(checkpoint_dir, planned - 1), _topics(checkpoint_dir, planned))
    except (OSError, ValueError, KeyError, IndexError, StateRepartitionError):
        return None


def _planned_at_ms(checkpoint_dir: str, batch_id: int) -> int:
    """The entry's batch timestamp (its metadata line: `batchTimestampMs`)."""
    lines = (local_path(checkpoint_dir) / "offsets" / str(batch_id)).read_text().splitlines()
    return int(json.loads(lines[1])["batchTimestampMs"])


def _topics(checkpoint_dir: str, batch_id: int) -> dict[str, Offsets]:
    """Topic → offsets of every source of the entry ({} for the batch before the first)."""
    if batch_id < 0:
        return {}
    found: dict[str, Offsets] = {}
    for topics in entry_sources(checkpoint_dir, batch_id).values():
        found.update(topics)
    return found
