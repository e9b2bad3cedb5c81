"""The port every protocol of the runtime drives a query through: `QueryControl`.

Owns what the reconfiguration protocol (`owner.Reconfigurer`), the roles (`standby`), the supervisor
(`supervise`) and the query's owner (`owner`) may ask of a query: start it, quiesce and stop
it, hold new batches and swap a per-batch setting, relabel its epoch, drain its input before a
switch, fence the previous owner, and what it committed. `lifecycle.ElasticQuery` is the real
one (Spark); `fakes.FakeQuery` the in-memory twin; `tests/runtime_query_contract.py` runs the
same checks against both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schemas.records import CommitMarker
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.observe.metrics import RunContext


@dataclass(frozen=True)
class Commit:
    """A committed batch: its run, id, start (progress timestamp) and end (+ triggerExecution)."""

    run_id: str
    batch_id: int
    start_ms: int
    end_ms: int


class QueryControl(Protocol):
    """One streaming query, restartable from its checkpoint; calls are serialised by the
    query's owner (`owner.QueryOwner`)."""

    @property
    def desired(self) -> DesiredState:
        """The desired state the running (or last) run has in force."""

    @property
    def last_commit(self) -> Commit | None: ...

    @property
    def start_note(self) -> str | None:
        """What the last `start` did to the state partitions or the input (for the ack)."""

    def start(self, desired: DesiredState) -> str:
        """Start a run with `desired` from the checkpoint; its run id."""

    def start_keeping_partitions(self, desired: DesiredState) -> str:
        """`start`, or with the checkpoint's state partitions when it cannot be
        repartitioned (a crash left its last batch uncommitted)."""

    def warm_workers(self, new: DesiredState) -> str | None:
        """Before a restart into `new`: start what its first batch would start cold, while
        the query still runs; a note for the ack (None: nothing to warm)."""

    def quiesce_and_stop(self, timeout_s: float) -> bool:
        """Let admitted batches commit, start none, stop; False if the wait timed out."""

    def hold(self, timeout_s: float) -> bool:
        """Hold new batches at the gate and wait for admitted ones to commit."""

    def swap(self, desired: DesiredState) -> None:
        """Apply the per-batch settings of `desired` to the held query."""

    def release(self) -> None: ...

    def settle(self, old: DesiredState, new: DesiredState) -> str | None:
        """After a swap, wait for what it asked of the cluster manager; a note for the ack."""

    def relabel(self, desired: DesiredState) -> None:
        """Same query settings, another epoch or active instance: no restart."""

    def drain_input(self, topic: str) -> str:
        """Run until the input topic is drained before a switch to `topic`."""

    def take_ownership(self) -> CommitMarker | None:
        """Fence every other instance's sink now; the last committed marker."""

    def superseded(self) -> str | None:
        """Why the gate refused a batch because another instance owns the query (or None)."""

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None: ...

    def failure(self) -> str | None:
        """The run's termination error, unless it is the runtime's own stop."""

    def is_active(self) -> bool: ...

    def halted(self) -> str | None:
        """Why the query does not run and must not be restarted until its operator acts (its
        input was deleted before it read it), or None."""

    def is_idle(self) -> bool:
        """Active, no trigger running and no data waiting."""

    def release_surplus_executors(self, timeout_s: float, keep: int | None = None) -> int:
        """Kill executors a cluster granted beyond the request (or `keep`), at a batch
        boundary."""

    def context(self, desired: DesiredState) -> RunContext:
        """What the metrics (and heartbeats) of a run with `desired` are labelled with."""
