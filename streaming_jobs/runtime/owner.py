"""The one owner of a query's lifecycle: every change to the query goes through `QueryOwner`.

Four threads want to change a running query: the control thread (a tuple: a reconfiguration,
a promotion, a new epoch), the role thread (a look at the shared desired-state file: step down
when another instance was made active), the run loop (restart a query that stopped by itself,
release executors a cluster granted beyond the request) and the shutdown. They all call this
object, which runs one change at a time under its lock and drives the query only through the
`ports.QueryControl` port, with its collaborators: `Reconfigurer` (below: the quiesce →
apply → resume protocol, for every parameter), `standby.Instance` (the role), `supervise.Supervisor`
(what to do with a query that stopped) and `shared_state.SharedDesiredState` (the shared file).
After every applied change it records the state in force (an active instance only).
Neighbours: `job` (wiring, threads, publishing), `control` (calls it as a `Reconfigurable`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from schemas.records import ControlTuple, Role, TaskMetrics
from streaming_jobs.runtime.checkpoint.input_switch import SwitchRefused
from streaming_jobs.runtime.checkpoint.retention import InputDeleted
from streaming_jobs.runtime.control.reconfigure import (
    QUIESCE_TIMEOUT_S,
    Applied,
    Refused,
    RestartFailed,
    first_commit,
    next_commit,
    pause_start,
)
from streaming_jobs.runtime.control.shared_state import SharedDesiredState, StaleWrite
from streaming_jobs.runtime.desired.state import (
    READ_BY_TASKS,
    Apply,
    DesiredState,
    Limits,
    apply_path,
)
from streaming_jobs.runtime.ports import Commit, QueryControl
from streaming_jobs.runtime.roles.standby import Instance
from streaming_jobs.runtime.roles.supervise import Next, Supervisor

STANDBY_EXECUTORS = 1
"""Executors a standby on a cluster keeps: enough for its warm-up, little of the cluster."""

log = logging.getLogger(__name__)


class QueryOwner:
    """Serialises every change to one query; the query is never driven from elsewhere."""

    def __init__(self, query: QueryControl, instance: Instance, shared: SharedDesiredState,
                 limits: Callable[[], Limits], *, kafka_retry_s: float,
                 on_recorded: Callable[[DesiredState], None] = lambda _state: None) -> None:
        self._query, self._instance, self._shared = query, instance, shared
        self._limits = limits
        self._on_recorded = on_recorded
        self._lock = threading.Lock()
        self._reconfigurer = Reconfigurer(query)
        self._supervisor = Supervisor(query, instance, self.superseded,
                                      kafka_retry_s=kafka_retry_s)

    @property
    def role(self) -> Role:
        return self._instance.role

    # -- the control thread (control.Reconfigurable) --
    @property
    def desired(self) -> DesiredState:
        """The state in force; for a standby, the shared file's (the active's) as of now."""
        if self._instance.role is Role.STANDBY:
            return self._instance.view(self._shared.current())
        return self._query.desired

    def limits(self) -> Limits:
        return self._limits()

    def answers(self, tuple_: ControlTuple) -> bool:
        return self._instance.answers(tuple_)

    def advance_epoch(self, epoch: int, control_id: str) -> None:
        with self._lock:
            self._query.relabel(_with_epoch(self._query.desired, epoch))
            self._record(control_id)

    def reconfigure(self, desired: DesiredState, control_id: str) -> Applied:
        with self._lock:  # the role may have changed since the tuple was evaluated
            if (self._instance.role is Role.STANDBY
                    or desired.active_instance != self._query.desired.active_instance):
                applied = self._instance.change_role(desired, self._shared.persist)
            else:
                applied = self._reconfigurer.apply(desired)
            self._record(control_id)
        return applied

    # -- the role thread --
    def watch(self) -> TaskMetrics | None:
        """A standby's heartbeat to publish; an active checks it still owns the query."""
        with self._lock:
            return self._instance.watch(lambda: self.desired, self.superseded)

    # -- the run loop --
    def next_step(self) -> Next | None:
        """What to do with a query that stopped by itself (None: nothing)."""
        with self._lock:
            return self._supervisor.next_step()

    def take(self, step: Next) -> None:
        with self._lock:
            self._supervisor.take(step)

    def release_surplus_executors(self) -> int:
        """An active query keeps the executors it asked for; a warm standby keeps
        `STANDBY_EXECUTORS` (its warm-up's, and no more of a cluster the active needs: a
        standalone master grants a new application every free core up to its maximum); a hot
        one as many as the active asks for, since it runs the same batches."""
        with self._lock:
            if self._instance.role is Role.STANDBY:
                keep = (self.desired.executors if self._instance.hot else 0) or STANDBY_EXECUTORS
                return self._query.release_surplus_executors(QUIESCE_TIMEOUT_S, keep=keep)
            if not self._query.is_active():
                return 0
            return self._query.release_surplus_executors(QUIESCE_TIMEOUT_S)

    # -- start and shutdown --
    def start(self) -> None:
        """An active instance starts its query with the state in force and records it."""
        with self._lock:
            if self._instance.role is Role.ACTIVE:
                try:
                    self._query.start_keeping_partitions(self._query.desired)
                except InputDeleted:
                    return  # reported as it was found; halted until its operator acts
                self._record(None)

    def stop(self, timeout_s: float = QUIESCE_TIMEOUT_S) -> bool:
        with self._lock:
            return self._query.quiesce_and_stop(timeout_s)

    def superseded(self) -> str | None:
        """Why this instance no longer owns the query (the gate asks before every batch)."""
        return self._shared.superseded(self._query.desired.epoch)

    def _record(self, control_id: str | None) -> None:
        """Persist and publish the state an active instance has in force (a standby owns
        neither)."""
        if self._instance.role is not Role.ACTIVE:
            return
        state = self._query.desired
        try:
            self._shared.record(state, control_id)
        except StaleWrite as exc:
            log.warning("%s: another instance owns the query now", exc)
        self._on_recorded(state)


class Reconfigurer:
    """The reconfiguration protocol: quiesce → apply → resume → measure, for every parameter.

    The one thing that changes a running query's desired state, in one of two ways (restart
    the query from its checkpoint, or swap a per-batch setting while the gate holds new
    batches), with the rollback when that fails. `QueryOwner` runs one change at a time."""

    def __init__(self, query: QueryControl, clock_ms: Callable[[], int] | None = None) -> None:
        self._query = query
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def apply(self, new: DesiredState) -> Applied:
        """Swap or restart into `new`; raises RestartFailed after rolling back."""
        old = self._query.desired
        change = old.describe_change(new)
        path = apply_path(old, new)
        if path is Apply.ROLE:  # a caller's bug: the query's settings are not what changes
            raise ValueError(f"{change}: a change of the active instance is a promotion or "
                             "a step-down (standby.Instance.change_role), not a reconfiguration")
        if path is Apply.SWAP:
            return self._swap(old, new, change)
        if new.input_topic != old.input_topic:
            change = f"{change}; {self._drain(new.input_topic)}"
        return self._restart(old, new, change)

    def _drain(self, topic: str) -> str:
        """An input switch first lets the running query read the old topic to its end."""
        try:
            return self._query.drain_input(topic)
        except SwitchRefused as exc:
            raise Refused(f"cannot switch the input to {topic}: {exc}") from exc

    def _swap(self, old: DesiredState, new: DesiredState, change: str) -> Applied:
        """Hold new batches at the gate, let admitted ones commit, swap, release, settle.

        No restart: the running query reads the swapped setting from its next batch on. The
        pause is the time new batches were held. Settling (executors registering after a
        request) happens after the release, while batches run; the ack reports it. A value
        the tasks run (`READ_BY_TASKS`: a function version, a shed fraction) is only known to
        work once a batch has run with it, so the change waits for that batch; if it fails,
        the query restarts with the previous settings and replays it.
        """
        began_ms = self._clock_ms()
        drained = self._query.hold(QUIESCE_TIMEOUT_S)
        before = self._query.last_commit
        try:
            self._query.swap(new)
        except Exception as exc:
            log.error("swap to %s failed (%s); restoring the previous settings", change, exc)
            self._query.swap(old)
            raise RestartFailed(f"{change} failed ({exc}); rolled back") from exc
        finally:
            self._query.release()
        held_ms = self._clock_ms() - began_ms
        settled = self._query.settle(old, new)
        ran = (self._first_batch_after(old, change, before)
               if READ_BY_TASKS & set(old.changed(new)) else None)
        return Applied(pause_ms=held_ms, detail=(
            f"{change}; swapped at a batch boundary without a restart, new batches held "
            f"{held_ms} ms{'' if drained else ' (quiesce timed out)'}"
            + "".join(f"; {note}" for note in (settled, ran) if note)))

    def _first_batch_after(self, old: DesiredState, change: str, before: Commit | None) -> str:
        """Wait for the swap's first batch; roll back and raise if it fails."""
        try:
            first = next_commit(self._query, before)
        except Exception as exc:
            self._roll_back(old)
            raise RestartFailed(f"{change} failed in the first batch after the swap ({exc}); "
                                f"restarted with the settings of epoch {old.epoch}") from exc
        return (f"the first batch with it committed (batch {first.batch_id})" if first
                else "no batch has run with it yet (no new data)")

    def _restart(self, old: DesiredState, new: DesiredState, change: str) -> Applied:
        """Restart with `new` from the checkpoint.

        The pause is the gap in committed output the change caused: from whichever is later,
        the commit of the last batch before the change or the moment the change began, to the
        commit of the first batch of the restarted query. It includes the wait for a running
        batch (quiesce), the restart and that first batch's own execution (often the replay of
        the batch the gate held back); it leaves out the time the query had been idle before
        the change, which the detail names apart, and the warming of the Python workers the
        restarted run will need (`warm_workers`), done before the quiesce while the old run
        still commits. If no batch arrives within `reconfigure.IDLE_GRACE_S`,
        the pause ends at the moment the restarted query is seen active and idle. The detail
        also names the shorter gap in which no batch ran at all.
        """
        warmed = self._query.warm_workers(new)  # the old run keeps committing meanwhile
        began_ms = self._clock_ms()
        drained = self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        since_ms, idle_ms = pause_start(self._query.last_commit, began_ms)
        stopped_ms = self._clock_ms()
        try:
            run_id = self._query.start(new)
            first = first_commit(self._query, run_id)
        except Exception as exc:
            self._roll_back(old)
            raise RestartFailed(f"restart with {change} failed ({exc}); rolled back to "
                                f"epoch {old.epoch}") from exc
        resumed_ms = first.end_ms if first else self._clock_ms()
        note = "".join(f"{n}, " for n in (warmed, self._query.start_note) if n)
        detail = (f"{change}; {note}"
                  f"quiesce {stopped_ms - began_ms} ms{'' if drained else ' (timed out)'}, "
                  + (f"restart to first commit {resumed_ms - stopped_ms} ms, no batch running "
                     f"for {max(0, first.start_ms - since_ms)} ms" if first else
                     f"restart to idle {resumed_ms - stopped_ms} ms (no new data)")
                  + (f"; idle {idle_ms} ms before the change, not in the pause"
                     if idle_ms else ""))
        return Applied(pause_ms=max(0, resumed_ms - since_ms), detail=detail)

    def _roll_back(self, old: DesiredState) -> None:
        log.error("restart failed; rolling back to the desired state of epoch %d", old.epoch)
        if self._query.is_active():
            self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        with contextlib.suppress(InputDeleted):  # reported as found; halted whatever changed
            self._query.start(old)


def _with_epoch(state: DesiredState, epoch: int) -> DesiredState:
    return replace(state, epoch=epoch)
