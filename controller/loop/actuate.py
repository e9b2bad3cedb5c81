"""Act: a verdict that changes something (a scaling, a failover) becomes a control tuple.

Owns the tuple's fields (operator, parameter, value, and an epoch above every one seen or
issued), sending it, the in-flight record its ack is matched against, and the decision-log
records of the action and of its outcome; in a dry run, only the record. A write refused
because a newer leader fenced this one (`Fenced`) is the loop's to handle: it steps down.
Every function takes the query's `ControlState` and returns the next one. Neighbours: `loop`
(decides, then calls `act` and `outcome`), `report` (wording and records), `state`
(transitions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller.core.model import QueryModel
from controller.core.results import Actuation, Promote, Scale, Shed
from controller.core.state import ControlState, InFlight, issued, next_epoch, settled
from controller.explain import report
from controller.loop.ports import ControlSink, DecisionLog, DeliveryError, Fenced
from controller.settings import ControllerSettings
from schemas import ControlTuple, Decision, KnobSetting
from schemas.knobs import (
    ACTIVE_INSTANCE,
    EXECUTORS,
    MAX_OFFSETS_PER_TRIGGER,
    SHED_FRACTION,
    STATE_PARTITIONS,
)

log = logging.getLogger("controller")


class Actuator:
    def __init__(self, settings: ControllerSettings, control: ControlSink,
                 decisions: DecisionLog, new_id: Callable[[], str]) -> None:
        self._settings, self._control, self._decisions = settings, control, decisions
        self._new_id = new_id

    def act(self, query_id: str, verdict: Actuation, state: ControlState,
            epoch_seen: int, model: QueryModel | None, now_ms: int) -> ControlState:
        """Send the verdict's tuple and record the decision; the state with it in flight (or
        cooling down, in a dry run or when the send failed)."""
        cooldown_s = self._settings.policy.cooldown_s
        change = change_of(verdict)
        if self._settings.dry_run:
            # Repeated once per cooldown instead of every cycle.
            log.info("%s", report.decision_line(query_id, verdict, change, epoch=None,
                                                control_id=None, dry_run=True))
            self.write(report.decision_record(query_id, verdict, change,
                                              decision_id=self._new_id(), now_ms=now_ms,
                                              control_id=None, dry_run=True))
            return settled(state, now_ms, cooldown_s)
        epoch = next_epoch(state, epoch_seen)
        control = ControlTuple(
            control_id=self._new_id(), query_id=query_id, operator_id=operator_of(verdict),
            parameter=change.parameter, value=change.target, epoch=epoch,
            issuer=self._settings.issuer, reason=verdict.reason, issued_at_ms=now_ms,
            together=together(verdict),
        )
        log.info("%s", report.decision_line(query_id, verdict, change, epoch=epoch,
                                            control_id=control.control_id, dry_run=False))
        decision = report.decision_record(query_id, verdict, change, decision_id=self._new_id(),
                                          now_ms=now_ms, control_id=control.control_id,
                                          dry_run=False)
        try:
            self._control.send(control, decision)
        except Fenced:
            raise  # not ours to retry: the loop steps down
        except DeliveryError as exc:
            log.error("%s: could not send control %s, retrying after the cooldown: %s",
                      query_id, control.control_id, exc)
            return settled(state, now_ms, cooldown_s)
        return issued(state, in_flight(control, verdict, model, now_ms))

    def outcome(self, query_id: str, flight: InFlight, action: str, reason: str,
                now_ms: int) -> None:
        """Record how an actuation ended (ack outcome or timeout)."""
        self.write(report.outcome_record(
            query_id, action=action, parameter=flight.parameter, target=flight.value,
            reason=reason, decision_id=self._new_id(), now_ms=now_ms,
            control_id=flight.control_id))

    def write(self, decision: Decision) -> None:
        try:
            self._decisions.write(decision)
        except Fenced:
            raise
        except DeliveryError as exc:
            log.error("%s: could not write decision %s to the log: %s", decision.query_id,
                      decision.decision_id, exc)


OPERATORS = {STATE_PARTITIONS: "state", EXECUTORS: "cluster"}
"""The operator a scaling tuple addresses, for readers of the control topic (the job goes by
the parameter); the input parallelism's is the source."""


def change_of(verdict: Actuation) -> report.TupleChange:
    """What the verdict's tuple sets: a failover the active instance, a scaling its knob, a
    shedding the fraction."""
    if isinstance(verdict, Promote):
        return report.TupleChange(ACTIVE_INSTANCE, verdict.lost_instance, verdict.instance_id)
    if isinstance(verdict, Shed):
        return report.TupleChange(SHED_FRACTION, f"{verdict.current:g}", f"{verdict.target:g}")
    return report.TupleChange(verdict.parameter, str(verdict.current), str(verdict.target))


def together(verdict: Actuation) -> tuple[KnobSetting, ...]:
    """What the tuple sets along with its knob: a scaling's batch cap, when it changes."""
    if isinstance(verdict, Scale) and verdict.batch_cap > 0:
        return (KnobSetting(MAX_OFFSETS_PER_TRIGGER, str(verdict.batch_cap)),)
    return ()


def operator_of(verdict: Actuation) -> str:
    """The tuple's operator id: the query for a failover, the source for shedding (its
    decode step drops the records), else the stage the knob sizes."""
    if isinstance(verdict, Promote):
        return "query"
    if isinstance(verdict, Shed):
        return "source"
    return OPERATORS.get(verdict.parameter, "source")


def in_flight(control: ControlTuple, verdict: Actuation, model: QueryModel | None,
              now_ms: int) -> InFlight:
    """What the ack of `control` is matched against; a scaling keeps the μ and c it was sized
    with, for the check of its effect."""
    if isinstance(verdict, Promote):
        return InFlight(control.control_id, 0, control.epoch, now_ms,
                        parameter=ACTIVE_INSTANCE, instance=verdict.instance_id)
    if isinstance(verdict, Shed):
        return InFlight(control.control_id, 0, control.epoch, now_ms, parameter=SHED_FRACTION,
                        text=control.value)
    return InFlight(control.control_id, verdict.target, control.epoch, now_ms,
                    current=verdict.current, parameter=verdict.parameter, then=verdict.then,
                    rate_per_unit=model.rate_per_unit if model else 0.0,
                    batch_overhead_s=model.batch_overhead_s if model else 0.0,
                    batch_cap=model.batch_cap if model else 0)
