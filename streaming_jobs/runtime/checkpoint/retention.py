"""Input deleted before the query read it (retention, or `delete-records`), found before a run.

Owns the comparison of where the checkpoint resumes each source partition (the end of its last
committed batch) with where the partition's log starts now: every offset in between is gone,
and Spark would fail the run's first batch on it (`failOnDataLoss`), again at every restart.
The runtime finds it first, reports it in one sentence with its count per partition, and
either halts (the default: the process stays up, runs no query, and says so until its
operator restarts it with `--on-data-loss skip`) or goes on from the log's start itself
(`skip`). Pure. Neighbours: `input_source` (the committed offsets, the log range),
`lifecycle` (asks before each start), `roles.supervise` (a halted query is not restarted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streaming_jobs.errors import UserError
from streaming_jobs.runtime.checkpoint.input_switch import LogRange, Offsets


@dataclass(frozen=True)
class Deleted:
    """One source partition's records deleted before the query read them."""

    topic: str
    partition: int
    next_offset: int
    """Where the query was to read on: the end of its last committed batch."""
    log_start: int
    """Where the partition's log starts now: the first record it can still read."""
    log_end: int

    @property
    def records(self) -> int:
        return self.log_start - self.next_offset


class InputDeleted(UserError):
    """The query's input was deleted before it was read, and the job halts on it (`stop`)."""


def deleted(topic: str, committed: Offsets, log: LogRange) -> tuple[Deleted, ...]:
    """The partitions of `topic` whose log now starts past where the checkpoint resumes them.
    A partition the checkpoint never committed starts at the log's start: nothing is lost."""
    return tuple(Deleted(topic, p, next_offset, log[p][0], log[p][1])
                 for p, next_offset in sorted(committed.items())
                 if p in log and log[p][0] > next_offset)


def sentence(query_id: str, found: Sequence[Deleted], policy: str) -> str:
    """The one sentence the log, the halted state and the operator read."""
    total = sum(d.records for d in found)
    where = ", ".join(f"{d.topic}/{d.partition}: offsets {d.next_offset}-{d.log_start - 1}"
                      for d in found)
    what = (f"query {query_id}: {total} records of its input were deleted (retention, or "
            f"delete-records) before it read them ({where})")
    if policy == "skip":
        return f"{what}; going on from the earliest records still there (--on-data-loss skip)"
    return (f"{what}; halted, reading nothing, until restarted with --on-data-loss skip "
            "(STREAMCTL_ON_DATA_LOSS=skip) to go on from the earliest records still there")
