"""Control tuples: validation against the knobs in force, and the loop that answers with acks.

Owns which parameters a job accepts, the bounds and epoch rules, and the ack for each tuple
addressed to this query. Tuples are handled one at a time, so reconfigurations are serialized.
Neighbours: `kafka` (the consumer and the ack publisher), `job` (implements `Reconfigurable`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schemas.codec import DecodeError
from schemas.records import Ack, ControlTuple, Outcome
from streaming_jobs.runtime.lifecycle import Knobs
from streaming_jobs.runtime.reconfigure import Applied, RestartFailed

log = logging.getLogger(__name__)
SUPPORTED = ("input_parallelism",)
UNDECODABLE = "undecodable"
"""Outcome label counted for garbage on the control topic (there is no tuple to ack)."""


@dataclass(frozen=True)
class Reject:
    detail: str


@dataclass(frozen=True)
class Reassert:
    """The value is already in force; only the epoch advances."""


@dataclass(frozen=True)
class Change:
    knobs: Knobs


Verdict = Reject | Reassert | Change


def evaluate(tuple_: ControlTuple, in_force: Knobs, task_slots: int) -> Verdict:
    """What to do with a tuple addressed to this query (pure)."""
    if tuple_.parameter not in SUPPORTED:
        return Reject(f"unknown parameter '{tuple_.parameter}'; supported: {', '.join(SUPPORTED)}")
    try:
        value = int(tuple_.value)
    except ValueError:
        value = 0
    if str(value) != tuple_.value.strip() or not 1 <= value <= task_slots:
        return Reject(f"bad value {tuple_.value!r} for input_parallelism: "
                      f"expected an integer in [1, {task_slots}] (task_slots)")
    if tuple_.epoch <= in_force.epoch:
        return Reject(f"stale epoch {tuple_.epoch} ≤ {in_force.epoch} in force")
    if value == in_force.input_parallelism:
        return Reassert()
    return Change(Knobs(epoch=tuple_.epoch, input_parallelism=value))


class Reconfigurable(Protocol):
    """What the control loop needs of a job."""

    @property
    def knobs(self) -> Knobs: ...

    def advance_epoch(self, epoch: int) -> None: ...

    def reconfigure(self, knobs: Knobs) -> Applied: ...


class ControlSource(Protocol):
    def poll(self, timeout_s: float) -> ControlTuple | DecodeError | None: ...


class ControlLoop:
    """Consumes control tuples for `query_id` and publishes one ack per tuple."""

    def __init__(self, source: ControlSource, job: Reconfigurable,
                 send_ack: Callable[[Ack], None], count: Callable[[str], None], *,
                 query_id: str, instance_id: str, task_slots: int) -> None:
        self._source, self._job, self._send_ack, self._count = source, job, send_ack, count
        self._query_id, self._instance_id, self._task_slots = query_id, instance_id, task_slots

    def run(self, stop: threading.Event, poll_s: float = 0.5) -> None:
        while not stop.is_set():
            self.poll_once(poll_s)

    def poll_once(self, timeout_s: float) -> Ack | None:
        item = self._source.poll(timeout_s)
        if isinstance(item, DecodeError):
            self._count(UNDECODABLE)
            log.warning("ignoring undecodable control record: %s", item)
            return None
        if item is None or item.query_id != self._query_id:
            return None
        ack = self.handle(item)
        self._count(ack.outcome.value)
        self._send_ack(ack)
        return ack

    def handle(self, tuple_: ControlTuple) -> Ack:
        verdict = evaluate(tuple_, self._job.knobs, self._task_slots)
        log.info("control %s (%s=%s, epoch %d): %s", tuple_.control_id, tuple_.parameter,
                 tuple_.value, tuple_.epoch, verdict)
        if isinstance(verdict, Reject):
            return self._ack(tuple_, Outcome.REJECTED, verdict.detail)
        if isinstance(verdict, Reassert):
            self._job.advance_epoch(tuple_.epoch)
            return self._ack(tuple_, Outcome.APPLIED,
                             f"input_parallelism {tuple_.value.strip()} already in force; "
                             f"epoch advanced to {tuple_.epoch}")
        try:
            applied = self._job.reconfigure(verdict.knobs)
        except RestartFailed as exc:
            return self._ack(tuple_, Outcome.FAILED, str(exc))
        except Exception as exc:  # e.g. the rollback failed too: say so, keep listening
            log.exception("reconfiguration for control %s failed", tuple_.control_id)
            return self._ack(tuple_, Outcome.FAILED, f"reconfiguration failed: {exc}")
        return self._ack(tuple_, Outcome.APPLIED, applied.detail, applied.pause_ms)

    def _ack(self, t: ControlTuple, outcome: Outcome, detail: str, pause_ms: int = 0) -> Ack:
        return Ack(control_id=t.control_id, query_id=t.query_id, instance_id=self._instance_id,
                   epoch=t.epoch, outcome=outcome, detail=detail, pause_ms=pause_ms,
                   acked_at_ms=int(time.time() * 1000))
