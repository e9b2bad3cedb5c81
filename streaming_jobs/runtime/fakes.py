"""`FakeQuery`: an in-memory `ports.QueryControl`, for the unit tests of the protocols that
drive a query (reconfiguration, roles, supervision, the owner) without Spark.

It keeps the calls in order in `log`, commits a batch of a run when told (`commit`), and can be
told to fail a start, a swap or the first batch after a swap, to refuse a drain, or to be idle
after a start. The contract
test (`tests/runtime_query_contract.py`) holds it to what `lifecycle.ElasticQuery` does.
"""

from __future__ import annotations

from dataclasses import replace

from schemas.records import CommitMarker
from streaming_jobs.runtime.checkpoint.input_switch import SwitchRefused
from streaming_jobs.runtime.checkpoint.retention import InputDeleted
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.observe.metrics import RunContext
from streaming_jobs.runtime.ports import Commit


class FakeQuery:
    """A query whose batches commit when `commit` says so (`auto_commit`: one per start, and
    one when the gate reopens after a swap, unless the swap was to `fail_batch_with`)."""

    def __init__(self, desired: DesiredState, *, active: bool = False,
                 fail_with: DesiredState | None = None, fail_start: str | None = None,
                 idle_after_start: bool = False, last_commit: Commit | None = None,
                 auto_commit: bool = True, first_commit: Commit | None = None,
                 fail_batch_with: DesiredState | None = None) -> None:
        self._desired = desired
        self.fail_batch_with = fail_batch_with
        self._swapped_since_hold = False
        self.last_commit = last_commit
        self.fail_with, self.fail_start = fail_with, fail_start
        self.idle_after_start, self.auto_commit = idle_after_start, auto_commit
        self.first_commit = first_commit
        self.start_note: str | None = None
        self.settle_note: str | None = None
        self.warm_note: str | None = None
        self.refuse_drain: str | None = None
        self.superseded_by: str | None = None
        self.failed_with: str | None = None
        self.idle: bool | None = None
        """Whether the running query has nothing to do (default: no commit since its start)."""
        self.input_deleted: str | None = None
        """A start finds its input deleted before it was read and halts, saying this."""
        self.kept_partitions: int | None = None
        """The checkpoint cannot be repartitioned (its last batch did not commit): a start
        keeping partitions runs with these instead of the desired ones."""
        self.halt: str | None = None
        self.marker: CommitMarker | None = None
        self.log: list[str] = []
        self.started: list[DesiredState] = []
        self.swapped: list[DesiredState] = []
        self.held = False
        self._run: str | None = "run-0" if active else None
        self._active = active
        self._commits: dict[str, Commit] = {}

    @property
    def desired(self) -> DesiredState:
        return self._desired

    @property
    def run_id(self) -> str | None:
        return self._run

    def start(self, desired: DesiredState) -> str:
        self.log.append(f"start epoch {desired.epoch}")
        self.started.append(desired)
        if self.fail_start or desired == self.fail_with:
            raise RuntimeError(self.fail_start or "source refused")
        if self.input_deleted is not None:
            self.halt = self.input_deleted
            raise InputDeleted(self.input_deleted)
        self.halt = None
        self._desired, self._active = desired, True
        self._run = f"run-{len(self.started)}"
        if self.auto_commit and not self.idle_after_start:
            first = self.first_commit or Commit(self._run, 10, 2_400, 4_500)
            last = self.last_commit
            self.commit(first if last is None or first.batch_id > last.batch_id
                        else replace(first, batch_id=last.batch_id + 1))
        return self._run

    def start_keeping_partitions(self, desired: DesiredState) -> str:
        if self.kept_partitions is not None:
            desired = replace(desired, state_partitions=self.kept_partitions)
        return self.start(desired)

    def commit(self, commit: Commit | None = None) -> Commit:
        """A batch of the current run committed (`commit`, or the next one 2 s after the last)
        with its output, under a marker as the transactional sink writes it."""
        last = self.last_commit
        if commit is None:
            start = last.end_ms if last else 0
            commit = Commit("", last.batch_id + 1 if last else 0, start, start + 2_000)
        commit = replace(commit, run_id=self._run or commit.run_id)
        self._commits.setdefault(commit.run_id, commit)
        self.last_commit = commit
        self.marker = CommitMarker("q", "checkpoint", commit.batch_id,
                                   self._desired.output_topic, 1, commit.end_ms)
        return commit

    def warm_workers(self, new: DesiredState) -> str | None:
        """As the real query: only ahead of more source tasks."""
        if new.input_parallelism <= self._desired.input_parallelism:
            return None
        self.log.append("warm")
        return self.warm_note or f"Python workers warmed for {new.input_parallelism} tasks"

    def quiesce_and_stop(self, timeout_s: float) -> bool:
        self.log.append("stop")
        self._active = False
        return True

    def hold(self, timeout_s: float) -> bool:
        self.held = True
        self._swapped_since_hold = False
        return True

    def swap(self, desired: DesiredState) -> None:
        assert self.held, "swapped without holding the gate"
        self.swapped.append(desired)
        if desired == self.fail_with:
            raise RuntimeError("cluster manager refused")
        self._desired = desired
        self._swapped_since_hold = True

    def release(self) -> None:
        self.held = False
        if self._swapped_since_hold and self.auto_commit:  # the next batch runs with it
            if self._desired == self.fail_batch_with:
                self.stop_by_itself("ValueError: lookup service refused key-1")
            else:
                self.commit()

    def settle(self, old: DesiredState, new: DesiredState) -> str | None:
        assert not self.held, "settled while holding the gate: batches would wait for it"
        return self.settle_note

    def relabel(self, desired: DesiredState) -> None:
        self._desired = desired

    def drain_input(self, topic: str) -> str:
        if self.refuse_drain:
            raise SwitchRefused(self.refuse_drain)
        return f"{self._desired.input_topic} drained in 800 ms"

    def take_ownership(self) -> CommitMarker | None:
        self.log.append("fence")
        return self.marker

    def superseded(self) -> str | None:
        return self.superseded_by

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None:
        return self._commits.get(run_id)

    def failure(self) -> str | None:
        return self.failed_with

    def halted(self) -> str | None:
        return self.halt

    def is_active(self) -> bool:
        return self._active

    def is_idle(self) -> bool:
        if self.idle is not None:
            return self._active and self.idle
        return self._active and self._run not in self._commits

    def release_surplus_executors(self, timeout_s: float, keep: int | None = None) -> int:
        self.log.append(f"release executors beyond {keep}")
        return 0

    def stop_by_itself(self, failure: str | None) -> None:
        """The run ended without being asked to (a failure, or another instance's gate)."""
        self._active, self.failed_with = False, failure

    def context(self, desired: DesiredState) -> RunContext:
        return RunContext("q", "a", desired.epoch, desired.input_parallelism,
                          desired.state_partitions, 16, 1000, (desired.input_topic,),
                          (desired.output_topic,))
