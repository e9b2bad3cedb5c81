"""Settling the tuples in flight: an ack, or the ack's timeout, ends each.

Owns what an answer changes: the query's state (`state.applied` or `settled`, with its
cooldown), the window's epoch after an applied change, a standby promoted or refused, the
cores a grant took (`sharing.note_taken`), and the outcome's decision record (`actuate`).
Only the queries this instance leads are settled here: the others' leaders settle theirs, and
the history a takeover reads has them. Neighbours: `cycle` (settles once a cycle, before it
decides), `memory` (each query's state), `failover.Standbys`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple, Protocol

from controller.core.failover import Standbys
from controller.core.state import InFlight, ack_overdue, applied, settled
from controller.core.window import Windows
from controller.loop.actuate import Actuator
from controller.loop.memory import Memory, QueryMemory
from controller.loop.ports import AckSource, ClusterStatus, LoopObserver
from controller.loop.sharing import note_taken
from controller.settings import ControllerSettings
from schemas import Ack, Outcome

log = logging.getLogger("controller")


class LoopRecords(NamedTuple):
    """The loop's own records settling changes."""

    queries: Memory
    windows: Windows
    standbys: Standbys


class SettlingPorts(Protocol):
    """What settling reads of the loop's ports (`cycle.Ports`)."""

    @property
    def acks(self) -> AckSource: ...
    @property
    def observer(self) -> LoopObserver: ...
    @property
    def cluster(self) -> ClusterStatus | None: ...


class Settler:
    """Settles the tuples in flight of the loop's own records: `queries`, `windows` and
    `standbys` are the loop's, held for its life; `leads` says which queries it settles."""

    def __init__(self, settings: ControllerSettings, ports: SettlingPorts, actuator: Actuator,
                 records: LoopRecords, leads: Callable[[str], bool]) -> None:
        self._ack_timeout_s = settings.ack_timeout_s
        self._cooldown_s = settings.policy.cooldown_s
        self._ports = ports
        """Read at each use: the loop's observer may be swapped after it is built."""
        self._actuator = actuator
        self._queries, self._windows, self._standbys = records
        self._leads = leads

    def settle(self, now_ms: int) -> None:
        """The acks of the queries this instance leads, and the tuples whose ack is overdue."""
        for ack in self._ports.acks.poll(0.0):
            if self._leads(ack.query_id):
                self._on_ack(ack, now_ms)
        for query_id, query in list(self._queries.items()):
            flight = query.state.in_flight
            if flight is not None and ack_overdue(query.state, now_ms, self._ack_timeout_s):
                self._on_timeout(query_id, query, flight, now_ms)

    def _on_ack(self, ack: Ack, now_ms: int) -> None:
        query = self._queries.get(ack.query_id)
        flight = query.state.in_flight if query is not None else None
        if query is None or flight is None or flight.control_id != ack.control_id:
            log.info("ignoring ack %s of control %s for %s: not in flight (late or not ours)",
                     ack.outcome, ack.control_id, ack.query_id)
            return
        if flight.instance and ack.instance_id != flight.instance:
            log.info("%s: %s answered control %s (promoting %s): %s %s", ack.query_id,
                     ack.instance_id, ack.control_id, flight.instance, ack.outcome.value,
                     ack.detail)
            return
        self._ports.observer.acked(ack.query_id, ack.outcome.value, ack.pause_ms)
        if ack.outcome is Outcome.APPLIED:
            log.info("%s: control %s applied at epoch %d (pause %d ms): %s", ack.query_id,
                     ack.control_id, ack.epoch, ack.pause_ms, ack.detail)
            window = self._windows.get(ack.query_id)
            if window is not None:
                window.require_epoch(ack.epoch)
            if flight.instance:
                self._standbys.promoted(ack.query_id, flight.instance, now_ms)
            note_taken(query, flight, self._ports.cluster)
        else:
            log.warning("%s: control %s %s by %s: %s", ack.query_id, ack.control_id,
                        ack.outcome.value.lower(), ack.instance_id, ack.detail)
            if flight.instance:
                wait_s = self._standbys.refused(ack.query_id, flight.instance, now_ms, ack.detail)
                log.warning("%s: standby %s is not promoted again for %.0f s", ack.query_id,
                            flight.instance, wait_s)
        self._actuator.outcome(ack.query_id, flight, f"ack_{ack.outcome.value.lower()}",
                               ack.detail, now_ms)
        query.state = (applied(query.state, now_ms, self._cooldown_s)
                       if ack.outcome is Outcome.APPLIED
                       else settled(query.state, now_ms, self._cooldown_s))

    def _on_timeout(self, query_id: str, query: QueryMemory, flight: InFlight,
                    now_ms: int) -> None:
        reason = (f"no ack for control {flight.control_id} within "
                  f"{self._ack_timeout_s:.0f} s; giving up on it")
        log.warning("%s: %s", query_id, reason)
        self._ports.observer.ack_timed_out(query_id)
        self._actuator.outcome(query_id, flight, "ack_timeout", reason, now_ms)
        query.state = settled(query.state, now_ms, self._cooldown_s)
