"""This instance's role in its query, standby or active, and the two ways it changes.

A *standby* holds a built SparkSession (a warm driver) and runs no query: it publishes a
heartbeat with role STANDBY every `heartbeat_interval_s` and listens on the control topic,
answering only a tuple that promotes it. The instances of one query id share its checkpoint
directory and the desired-state file beside it, which names the active instance once there
has been a failover.

**Promotion** (`promote`: an `active_instance` tuple naming this instance, through the one
reconfiguration protocol, `control` → `job.reconfigure` → here), in this order:

1. the desired state in force is the shared file's (the last active's), with this instance
   named and the tuple's epoch, and it is written back there *first*: from then on the former
   active's gate refuses every batch (`gate.Superseded`) and its writes to the file are
   refused as stale (`desired.StaleWrite`);
2. the sink fences the former active's transactional producer (`sink.take_ownership`): no
   transaction of it can commit any more, so nothing it still runs reaches the output;
3. the query starts where the output ends (a hot instance's own checkpoint continues the one
   the output's last batch came from, a warm one's shared takes a copy of it:
   `checkpoint.instances`); the promotion's time, reported in the ack, runs from the tuple to
   the first commit (or to the query seen idle). From the start on this instance is the
   active: it beats as such, and a first batch slower than the wait keeps running.

**Step-down** (`step_down`): an active that learns another instance is active (a tuple, its
gate refusing a batch, or its periodic look at the shared file) closes its gate and stops the
query without letting another batch start, then heartbeats as a standby. A former active that
was frozen and resumes therefore runs at most the batch it was in, whose transaction is fenced.

Neighbours: `owner` (calls it under the query's one lock), `ports.QueryControl` (the query,
whose sink fences), `desired` (the shared file), `control` (asks `answers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from schemas.records import ControlTuple, Role, TaskMetrics
from streaming_jobs.config import Identity
from streaming_jobs.runtime.control.reconfigure import (
    Applied,
    NoCommitYet,
    RestartFailed,
    first_commit,
)
from streaming_jobs.runtime.desired.state import ROLE_PARAMETER, DesiredState
from streaming_jobs.runtime.observe.metrics import heartbeat
from streaming_jobs.runtime.ports import QueryControl

log = logging.getLogger(__name__)

STEP_DOWN_TIMEOUT_S = 10.0
"""Longest wait for a batch already admitted when stepping down. It cannot write (its
transaction is fenced by the new active), so it ends quickly; the stop interrupts it after."""


def initial_role(identity: Identity, desired: DesiredState) -> Role:
    """After a failover the instance named beside the checkpoint is active, whatever the
    options say (a restarted former active comes back as a standby); before one, `role`."""
    if desired.active_instance:
        named = desired.active_instance == identity.instance_id
        return Role.ACTIVE if named else Role.STANDBY
    return Role.ACTIVE if identity.role == "active" else Role.STANDBY


class HotRun(Protocol):
    """A hot standby's own run of the query (`hot.HotStandbyRun`)."""

    note: str

    def keep_current(self, active: DesiredState) -> None: ...

    def stop(self) -> None: ...


class Instance:
    """The role of this process for its query; methods are called under the job's lock."""

    def __init__(self, identity: Identity, query: QueryControl, role: Role,
                 clock_ms: Callable[[], int] | None = None, hot: HotRun | None = None) -> None:
        self._identity, self._query, self.role = identity, query, role
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._hot = hot
        """A hot standby's run (None: a warm standby)."""

    @property
    def hot(self) -> bool:
        """Whether a standby of this instance runs the query (`hot.HotStandbyRun`)."""
        return self._hot is not None

    def answers(self, tuple_: ControlTuple) -> bool:
        """The active answers every tuple of its query; a standby only one that promotes it
        (the active acks the rest, and a standby takes the state in force when promoted)."""
        return self.role is Role.ACTIVE or (tuple_.parameter == ROLE_PARAMETER
                                            and tuple_.value.strip()
                                            == self._identity.instance_id)

    def view(self, shared: DesiredState) -> DesiredState:
        """The desired state as the protocol sees it from here. A standby named in the shared
        file (its promotion failed) runs nothing, so for it nobody is active yet: a tuple
        naming it again is a change, which promotes it, not a re-assertion."""
        me = self._identity.instance_id
        if self.role is Role.STANDBY and shared.active_instance == me:
            return replace(shared, active_instance="")
        return shared

    def watch(self, shared: Callable[[], DesiredState],
              superseded: Callable[[], str | None]) -> TaskMetrics | None:
        """Every heartbeat interval: a standby's heartbeat to publish; an active checks it
        still owns the query (it may have been frozen while another instance was promoted)
        and steps down when it does not."""
        if self.role is Role.STANDBY:
            state = shared()
            beat = heartbeat(self._query.context(state), self._clock_ms(), None, Role.STANDBY)
            if self._hot is not None:
                try:
                    self._hot.keep_current(state)
                except Exception:  # the heartbeat goes out all the same: a live standby
                    log.exception("hot standby: its run could not be kept current")
            return beat
        reason = superseded()
        if reason is not None:
            self.step_down(reason)
        return None

    def change_role(self, desired: DesiredState,
                    persist: Callable[[DesiredState], None]) -> Applied:
        """Apply an `active_instance` change: promote this instance, step it down, or (it is
        active already) take the new epoch."""
        me = self._identity.instance_id
        if desired.active_instance != me:
            if self.role is Role.STANDBY:  # it stepped down already (its gate or its look)
                return Applied(0, f"{me} is a standby; {desired.active_instance} is active at "
                                  f"epoch {desired.epoch}")
            return self.step_down(f"{desired.active_instance} is made active at epoch "
                                  f"{desired.epoch}")
        if self.role is Role.ACTIVE:
            self._query.relabel(desired)
            return Applied(0, f"{me} is already active; epoch {desired.epoch}")
        return self.promote(desired, persist)

    def promote(self, desired: DesiredState, persist: Callable[[DesiredState], None]) -> Applied:
        """Fence the former active, start the query where the output ends, wait for its first
        commit. Raises RestartFailed (this instance stays a standby) when the fence or the
        start fails, or the run fails before its first commit.

        Once its run has started this instance owns the query, so it is the active one and
        beats as such while the first batch runs. A first batch slower than the wait (a cold
        start on a busy cluster) keeps running and the ack says so: stopping it would leave
        the query to nobody, the former active being fenced."""
        began_ms = self._clock_ms()
        hot_note = None
        if self._hot is not None:  # its run must not take another batch from here on
            hot_note = self._hot.note
            self._hot.stop()
        try:
            persist(desired)
            marker = self._query.take_ownership()
            fenced_ms = self._clock_ms()
            run_id = self._query.start_keeping_partitions(desired)
        except Exception as exc:
            raise self._promotion_failed(exc) from exc
        self.role = Role.ACTIVE
        still_running = None
        try:
            first = first_commit(self._query, run_id)
        except NoCommitYet as exc:
            first, still_running = None, str(exc)
        except Exception as exc:
            self.role = Role.STANDBY
            raise self._promotion_failed(exc) from exc
        done_ms = first.end_ms if first else self._clock_ms()
        resumed = (f"first commit {done_ms - fenced_ms} ms after (batch {first.batch_id})"
                   if first else
                   f"{still_running} after it, its first batch still running" if still_running
                   else f"idle after {done_ms - fenced_ms} ms (no new data)")
        last = (f"batch {marker.batch_id} last committed" if marker is not None
                else "nothing committed before")
        note = self._query.start_note
        started = (f"query started from the shared checkpoint{f' ({note})' if note else ''}"
                   if hot_note is None else
                   f"hot standby ({hot_note}) stopped, query started on its checkpoint ("
                   f"{note or 'nothing to fold in'})")
        return Applied(pause_ms=max(0, done_ms - began_ms), detail=(
            f"promoted {self._identity.instance_id} to active at epoch {desired.epoch}: "
            f"former active fenced in {fenced_ms - began_ms} ms ({last}), {started}, "
            f"{resumed}; in force: {self._query.desired.describe()}"))

    def _promotion_failed(self, exc: Exception) -> RestartFailed:
        """Stop what the promotion started; this instance stays a standby."""
        self._query.quiesce_and_stop(STEP_DOWN_TIMEOUT_S)
        return RestartFailed(f"promotion failed ({exc}); {self._identity.instance_id} stays "
                             "a standby")

    def step_down(self, reason: str) -> Applied:
        """Stop the query without starting another batch and become a standby."""
        began_ms = self._clock_ms()
        log.warning("%s steps down: %s; stopping the query, writing nothing more",
                    self._identity.instance_id, reason)
        self._query.quiesce_and_stop(STEP_DOWN_TIMEOUT_S)
        self.role = Role.STANDBY
        stopped_ms = self._clock_ms() - began_ms
        return Applied(pause_ms=0, detail=f"{self._identity.instance_id} stepped down in "
                                          f"{stopped_ms} ms: {reason}")
