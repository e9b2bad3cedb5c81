"""Control tuples: authenticity, validation against the desired state, and one ack per tuple.

Owns the order of checks (addressed to this query and answered by this instance → signed with
the shared key → a known parameter that can change here → a value within bounds → an epoch not
stale) and the ack for each tuple this instance answers: the active instance answers every
tuple of its query, a standby only the one that promotes it (so each tuple gets one ack from
the instance it concerns). Tuples are handled one at a time, so reconfigurations are
serialized. Neighbours: `desired.state` (the registry), `kafka` (the consumer and the ack
publisher), `job` (implements `Reconfigurable`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from schemas import auth
from schemas.codec import DecodeError
from schemas.records import Ack, ControlTuple, KnobSetting, Outcome
from streaming_jobs.runtime.control.reconfigure import Applied, Refused, RestartFailed
from streaming_jobs.runtime.desired.state import (
    REGISTRY,
    ROLE_PARAMETER,
    TOPIC_PARAMETERS,
    BadValue,
    DesiredState,
    Limits,
    Value,
    render,
    with_value,
)

log = logging.getLogger(__name__)


class Reason(StrEnum):
    """Why a tuple was not applied (bounded: these are Prometheus label values)."""

    UNDECODABLE = "undecodable"
    """Garbage on the control topic: counted and logged, no ack possible."""
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"
    UNKNOWN_PARAMETER = "unknown_parameter"
    UNSUPPORTED = "unsupported"
    BAD_VALUE = "bad_value"
    STALE_EPOCH = "stale_epoch"
    PRECONDITION = "precondition"
    """Valid, but what the change needs does not hold yet (an input switch whose old topic
    is still written to); nothing was changed."""


UNDECODABLE = Reason.UNDECODABLE.value


@dataclass(frozen=True)
class Reject:
    reason: Reason
    detail: str


@dataclass(frozen=True)
class Reassert:
    """The value is already in force; at most the epoch advances."""

    detail: str


@dataclass(frozen=True)
class Change:
    desired: DesiredState


Evaluation = Reject | Reassert | Change


def authenticate(tuple_: ControlTuple, key: bytes) -> Reject | None:
    verdict = auth.verify(tuple_, key)
    if verdict is auth.Signature.UNSIGNED:
        return Reject(Reason.UNSIGNED, "unsigned control tuple (no auth_tag); only the "
                                       "controller, holding the shared key, may reconfigure")
    if verdict is auth.Signature.BAD_SIGNATURE:
        return Reject(Reason.BAD_SIGNATURE, "bad authentication tag: not signed with this "
                                            "job's control key, or altered after signing")
    return None


def evaluate(tuple_: ControlTuple, desired: DesiredState, limits: Limits) -> Evaluation:
    """What to do with an authentic tuple addressed to this query (pure). A tuple that sets
    knobs `together` is taken whole: one bad setting rejects it all, and nothing changes."""
    values: dict[str, Value] = {}
    if any(s.parameter == ROLE_PARAMETER for s in tuple_.together):
        return Reject(Reason.BAD_VALUE, f"{ROLE_PARAMETER} cannot be set together with other "
                                        "knobs: a failover is a tuple of its own")
    for setting in tuple_.settings:
        found = _parse(setting, limits)
        if isinstance(found, Reject):
            return found
        if setting.parameter in values:
            return Reject(Reason.BAD_VALUE, f"{setting.parameter} is set twice in one tuple")
        values[setting.parameter] = found
    differ = [name for name, value in values.items() if value != desired.value(name)]
    if tuple_.epoch < desired.epoch or (tuple_.epoch == desired.epoch and differ):
        return Reject(Reason.STALE_EPOCH,
                      f"stale epoch {tuple_.epoch} ≤ {desired.epoch} in force")
    if not differ:
        advanced = ("" if tuple_.epoch == desired.epoch
                    else f"; epoch advanced to {tuple_.epoch}")
        in_force = ", ".join(f"{name} {render(value)}" for name, value in values.items())
        return Reassert(f"{in_force} already in force{advanced}")
    changed = desired
    for name in differ:
        changed = with_value(changed, name, values[name])
    return Change(replace(changed, epoch=tuple_.epoch))


def _parse(setting: KnobSetting, limits: Limits) -> Value | Reject:
    """One setting's value, checked against the registry and this job's limits."""
    name = setting.parameter
    parameter = REGISTRY.get(name)
    if parameter is None:
        return Reject(Reason.UNKNOWN_PARAMETER,
                      f"unknown parameter '{name}'; supported: {', '.join(REGISTRY)}")
    unavailable = parameter.unavailable(limits)
    if unavailable is not None:
        return Reject(Reason.UNSUPPORTED, f"cannot change {name}: {unavailable}")
    try:
        return parameter.parse(setting.value, limits)
    except BadValue as exc:
        return Reject(Reason.BAD_VALUE, f"bad value {setting.value!r} for {name}: {exc}")


class Reconfigurable(Protocol):
    """What the control loop needs of a job."""

    @property
    def desired(self) -> DesiredState: ...

    def limits(self) -> Limits: ...

    def answers(self, tuple_: ControlTuple) -> bool:
        """Whether this instance handles and acks `tuple_` (addressed to its query)."""
        ...

    def advance_epoch(self, epoch: int, control_id: str) -> None: ...

    def reconfigure(self, desired: DesiredState, control_id: str) -> Applied: ...


class ControlSource(Protocol):
    def poll(self, timeout_s: float) -> ControlTuple | DecodeError | None: ...

    def topic_exists(self, topic: str) -> bool: ...


Count = Callable[[str, str | None], None]
"""count(outcome, rejection reason or None): outcome is an Outcome value or 'undecodable'."""


class TupleListener:
    """Consumes control tuples for `query_id` and publishes one ack per tuple."""

    def __init__(self, source: ControlSource, job: Reconfigurable,
                 send_ack: Callable[[Ack], None], count: Count, *,
                 query_id: str, instance_id: str, key: bytes) -> None:
        self._source, self._job, self._send_ack, self._count = source, job, send_ack, count
        self._query_id, self._instance_id, self._key = query_id, instance_id, key

    def run(self, stop: threading.Event, poll_s: float = 0.5) -> None:
        while not stop.is_set():
            self.poll_once(poll_s)

    def poll_once(self, timeout_s: float) -> Ack | None:
        item = self._source.poll(timeout_s)
        if isinstance(item, DecodeError):
            self._count(UNDECODABLE, Reason.UNDECODABLE.value)
            log.warning("ignoring undecodable control record (no ack possible): %s", item)
            return None
        if item is None or item.query_id != self._query_id:
            return None
        if not self._job.answers(item):
            log.info("control %s (%s, epoch %d) is for the active instance; %s is a "
                     "standby", item.control_id, item.describe(), item.epoch, self._instance_id)
            return None
        ack, reason = self._handle(item)
        self._count(ack.outcome.value, reason)
        self._send_ack(ack)
        return ack

    def _handle(self, tuple_: ControlTuple) -> tuple[Ack, str | None]:
        verdict = authenticate(tuple_, self._key) or evaluate(
            tuple_, self._job.desired, self._limits_for(tuple_))
        log.info("control %s (%s, epoch %d, issuer %s): %s", tuple_.control_id,
                 tuple_.describe(), tuple_.epoch, tuple_.issuer, verdict)
        if isinstance(verdict, Reject):
            detail = f"{verdict.reason.value}: {verdict.detail}"
            return self._ack(tuple_, Outcome.REJECTED, detail), verdict.reason.value
        if isinstance(verdict, Reassert):
            self._job.advance_epoch(tuple_.epoch, tuple_.control_id)
            return self._ack(tuple_, Outcome.APPLIED, verdict.detail), None
        try:
            applied = self._job.reconfigure(verdict.desired, tuple_.control_id)
        except Refused as exc:  # checked before anything changed: a rejection
            detail = f"{Reason.PRECONDITION.value}: {exc}"
            return self._ack(tuple_, Outcome.REJECTED, detail), Reason.PRECONDITION.value
        except RestartFailed as exc:
            return self._ack(tuple_, Outcome.FAILED, str(exc)), None
        except Exception as exc:  # e.g. the rollback failed too: say so, keep listening
            log.exception("reconfiguration for control %s failed", tuple_.control_id)
            return self._ack(tuple_, Outcome.FAILED, f"reconfiguration failed: {exc}"), None
        return self._ack(tuple_, Outcome.APPLIED, applied.detail, applied.pause_ms), None

    def _limits_for(self, tuple_: ControlTuple) -> Limits:
        """The job's limits, with the topics the tuple names that exist on the broker."""
        topics = {s.value.strip() for s in tuple_.settings if s.parameter in TOPIC_PARAMETERS}
        existing = frozenset(t for t in topics if t and self._source.topic_exists(t))
        return replace(self._job.limits(), existing_topics=existing) if topics else \
            self._job.limits()

    def _ack(self, t: ControlTuple, outcome: Outcome, detail: str, pause_ms: int = 0) -> Ack:
        return Ack(control_id=t.control_id, query_id=t.query_id, instance_id=self._instance_id,
                   epoch=t.epoch, outcome=outcome, detail=detail, pause_ms=pause_ms,
                   acked_at_ms=int(time.time() * 1000))

