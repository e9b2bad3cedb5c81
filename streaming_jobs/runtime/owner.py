"""The one owner of a query's lifecycle: every change to the query goes through `QueryOwner`.

Four threads want to change a running query: the control thread (a tuple: a reconfiguration,
a promotion, a new epoch), the role thread (a look at the shared desired-state file: step down
when another instance was made active), the run loop (restart a query that stopped by itself,
release executors a cluster granted beyond the request) and the shutdown. They all call this
object, which runs one change at a time under its lock and drives the query only through the
`ports.QueryControl` port, with its collaborators: `reconfigure.Reconfigurer` (the
quiesce → apply → resume protocol), `standby.Instance` (the role), `supervise.Supervisor`
(what to do with a query that stopped) and `shared_state.SharedDesiredState` (the shared file).
After every applied change it records the state in force (an active instance only).
Neighbours: `job` (wiring, threads, publishing), `control` (calls it as a `Reconfigurable`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from schemas.records import ControlTuple, Role, TaskMetrics
from streaming_jobs.runtime.checkpoint.retention import InputDeleted
from streaming_jobs.runtime.control.reconfigure import QUIESCE_TIMEOUT_S, Applied, Reconfigurer
from streaming_jobs.runtime.control.shared_state import SharedDesiredState, StaleWrite
from streaming_jobs.runtime.desired.parameters import Limits
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.ports import QueryControl
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


def _with_epoch(state: DesiredState, epoch: int) -> DesiredState:
    return replace(state, epoch=epoch)
