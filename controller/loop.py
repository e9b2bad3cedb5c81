"""The control loop: collect → settle → evaluate → decide → act → report, one cycle at a time.

Owns the per-query memory (windows, `ControlState`, last verdict) and the order of the steps;
every effect goes through `controller.ports`. The decisions themselves come from the pure
core (`window`, `model`, `policy`). Built by `controller.app` with Kafka adapters, by tests
with `controller.fakes`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from controller import report
from controller.model import QueryModel, evaluate
from controller.policy import decide, is_quiet
from controller.ports import (
    AckSource,
    Clock,
    ControlSink,
    DecisionLog,
    DeliveryError,
    LoopObserver,
    MetricsSource,
    NullObserver,
)
from controller.results import NotReady, Scale, Verdict
from controller.settings import ControllerSettings
from controller.state import (
    ControlState,
    InFlight,
    ack_overdue,
    issued,
    next_epoch,
    observed,
    settled,
)
from controller.window import QueryWindow, Windows
from schemas import Ack, ControlTuple, Decision, Outcome

log = logging.getLogger("controller")
status_log = logging.getLogger("controller.status")


@dataclass
class Ports:
    metrics: MetricsSource
    control: ControlSink
    acks: AckSource
    decisions: DecisionLog
    clock: Clock
    observer: LoopObserver = field(default_factory=NullObserver)


def _new_id() -> str:
    return str(uuid.uuid4())


class ControlLoop:
    def __init__(self, settings: ControllerSettings, ports: Ports,
                 new_id: Callable[[], str] = _new_id) -> None:
        self.settings = settings
        self.ports = ports
        self._new_id = new_id
        self._windows = Windows(settings.model)
        self.states: dict[str, ControlState] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.models: dict[str, QueryModel] = {}
        self._next_status_ms = 0
        self._stopping = False

    def stop(self) -> None:
        """Ask `run` to return after the current cycle (safe from a signal handler)."""
        self._stopping = True

    def run(self, *, max_cycles: int | None = None, timeout_s: float | None = None) -> int:
        """Cycle until stopped, `max_cycles` done or `timeout_s` passed on the injected clock;
        returns the number of cycles run."""
        clock = self.ports.clock
        deadline = None if timeout_s is None else clock.now_ms() + int(timeout_s * 1000)
        cycles = 0
        while not self._stopping and (max_cycles is None or cycles < max_cycles):
            if deadline is not None and clock.now_ms() >= deadline:
                break
            self.run_once()
            cycles += 1
        return cycles

    def run_once(self) -> None:
        self.collect()
        now_ms = self.ports.clock.now_ms()
        self._windows.prune(now_ms)
        self.settle(now_ms)
        for window in self._windows:
            verdict = self.evaluate(window, now_ms)
            self.act(window, verdict, now_ms)
        self.report(now_ms)

    # -- collect ---------------------------------------------------------------------------

    def collect(self) -> None:
        samples = self.ports.metrics.poll(self.settings.poll_timeout_s)
        self.ports.observer.metrics_received(len(samples))
        for sample in samples:
            if self._windows.add(sample) is None:
                log.warning("ignoring metrics of query %s: already tracking %d queries",
                            sample.query_id, self.settings.model.max_queries)

    # -- settle: acks and timeouts ------------------------------------------------------------

    def settle(self, now_ms: int) -> None:
        for ack in self.ports.acks.poll(0.0):
            self._on_ack(ack, now_ms)
        for query_id, state in list(self.states.items()):
            if state.in_flight is not None and ack_overdue(state, now_ms,
                                                          self.settings.ack_timeout_s):
                self._on_timeout(query_id, state.in_flight, now_ms)

    def _on_ack(self, ack: Ack, now_ms: int) -> None:
        state = self.states.get(ack.query_id)
        flight = state.in_flight if state is not None else None
        if state is None or flight is None or flight.control_id != ack.control_id:
            log.info("ignoring ack %s of control %s for %s: not in flight (late or not ours)",
                     ack.outcome, ack.control_id, ack.query_id)
            return
        self.ports.observer.acked(ack.query_id, ack.outcome.value)
        if ack.outcome is Outcome.APPLIED:
            log.info("%s: control %s applied at epoch %d (pause %d ms): %s", ack.query_id,
                     ack.control_id, ack.epoch, ack.pause_ms, ack.detail)
            window = self._windows.get(ack.query_id)
            if window is not None:
                window.require_epoch(ack.epoch)
        else:
            log.warning("%s: control %s %s by %s: %s", ack.query_id, ack.control_id,
                        ack.outcome.value.lower(), ack.instance_id, ack.detail)
        self._record_outcome(ack.query_id, flight, f"ack_{ack.outcome.value.lower()}",
                             ack.detail, now_ms)
        self.states[ack.query_id] = settled(state, now_ms, self.settings.policy.cooldown_s)

    def _on_timeout(self, query_id: str, flight: InFlight, now_ms: int) -> None:
        reason = (f"no ack for control {flight.control_id} within "
                  f"{self.settings.ack_timeout_s:.0f} s; giving up on it")
        log.warning("%s: %s", query_id, reason)
        self.ports.observer.ack_timed_out(query_id)
        self._record_outcome(query_id, flight, "ack_timeout", reason, now_ms)
        self.states[query_id] = settled(self.states[query_id], now_ms,
                                        self.settings.policy.cooldown_s)

    # -- evaluate and decide ------------------------------------------------------------------

    def evaluate(self, window: QueryWindow, now_ms: int) -> Verdict:
        query_id = window.query_id
        state = self.states.get(query_id, ControlState())
        modelled = evaluate(query_id, window.samples, self.settings.model)
        if isinstance(modelled, NotReady):
            # Quiet must be continuous and observed: a gap in the data restarts the timer.
            state = observed(state, False, now_ms)
            self.models.pop(query_id, None)
            verdict: Verdict = modelled
        else:
            state = observed(state, is_quiet(modelled, self.settings.policy), now_ms)
            verdict = decide(modelled, state, now_ms, self.settings.policy)
            self.models[query_id] = modelled
            self.ports.observer.modelled(modelled, _desired(modelled, verdict, state))
        self.states[query_id] = state
        self._note(query_id, verdict)
        return verdict

    def _note(self, query_id: str, verdict: Verdict) -> None:
        """Log a hold or not-ready only when its kind changes; the status line repeats it."""
        previous = self.verdicts.get(query_id)
        self.verdicts[query_id] = verdict
        if not isinstance(verdict, Scale) and (previous is None
                                               or previous.action != verdict.action):
            log.info("%s: %s: %s", query_id, verdict.action, verdict.reason)
            self.ports.observer.decided(query_id, verdict.action)

    # -- act ------------------------------------------------------------------------------------

    def act(self, window: QueryWindow, verdict: Verdict, now_ms: int) -> None:
        if not isinstance(verdict, Scale):
            return
        query_id = window.query_id
        self.ports.observer.decided(query_id, verdict.action)
        if self.settings.dry_run:
            self._advise(query_id, verdict, now_ms)
            return
        state = self.states[query_id]
        epoch = next_epoch(state, window.epoch)
        control = ControlTuple(
            control_id=self._new_id(), query_id=query_id, operator_id="source",
            parameter=verdict.parameter, value=str(verdict.target), epoch=epoch,
            issuer=self.settings.issuer, reason=verdict.reason, issued_at_ms=now_ms,
        )
        log.info("%s", report.decision_line(query_id, verdict, epoch=epoch,
                                            control_id=control.control_id, dry_run=False))
        try:
            self.ports.control.send(control)
        except DeliveryError as exc:
            log.error("%s: could not send control %s, retrying after the cooldown: %s",
                      query_id, control.control_id, exc)
            self.states[query_id] = settled(state, now_ms, self.settings.policy.cooldown_s)
            return
        self.states[query_id] = issued(state, InFlight(control.control_id, verdict.target,
                                                       epoch, now_ms))
        self._write(report.decision_record(query_id, verdict, decision_id=self._new_id(),
                                           now_ms=now_ms, control_id=control.control_id,
                                           dry_run=False))

    def _advise(self, query_id: str, verdict: Scale, now_ms: int) -> None:
        """Dry run: report the decision, send nothing, and hold off for a cooldown so the
        same advice is repeated once per cooldown instead of every cycle."""
        log.info("%s", report.decision_line(query_id, verdict, epoch=None, control_id=None,
                                            dry_run=True))
        self._write(report.decision_record(query_id, verdict, decision_id=self._new_id(),
                                           now_ms=now_ms, control_id=None, dry_run=True))
        self.states[query_id] = settled(self.states[query_id], now_ms,
                                        self.settings.policy.cooldown_s)

    def _record_outcome(self, query_id: str, flight: InFlight, action: str, reason: str,
                        now_ms: int) -> None:
        self._write(report.outcome_record(
            query_id, action=action, parameter="input_parallelism", target=flight.target,
            reason=reason, decision_id=self._new_id(), now_ms=now_ms,
            control_id=flight.control_id))

    def _write(self, decision: Decision) -> None:
        try:
            self.ports.decisions.write(decision)
        except DeliveryError as exc:
            log.error("%s: could not write decision %s to the log: %s", decision.query_id,
                      decision.decision_id, exc)

    # -- report -----------------------------------------------------------------------------

    def report(self, now_ms: int) -> None:
        if now_ms < self._next_status_ms:
            return
        self._next_status_ms = now_ms + int(self.settings.status_interval_s * 1000)
        for window in self._windows:
            query_id = window.query_id
            status_log.info("%s", report.status_line(query_id, self.models.get(query_id),
                                                     self.verdicts.get(query_id)))


def _desired(model: QueryModel, verdict: Verdict, state: ControlState) -> int:
    if isinstance(verdict, Scale):
        return verdict.target
    if state.in_flight is not None:
        return state.in_flight.target
    return model.parallelism
