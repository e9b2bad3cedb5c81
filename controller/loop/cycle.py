"""The control loop: collect → settle → evaluate → decide → act → report, one cycle at a time.

Owns the per-query memory (windows, instances, `ControlState`, last verdict, last fitted
overhead) and the order of the steps; every effect goes through `controller.loop.ports` (sending
and recording through `actuate`). The decisions themselves come from the pure core
(`window`, `model`, `judgement`, `policy`, `topology`, `failover`): all ready queries are
decided together each cycle, so a pipeline is sized in one round; a lost query is failed over
to a live standby when it has one.
Built by `controller.app` with Kafka adapters, by tests, the replay and the simulator with
`controller.loop.fakes`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from controller.core import failover
from controller.core.failover import Standbys
from controller.core.fit import BatchCost
from controller.core.judgement import judge_effect, liveness
from controller.core.model import QueryModel, evaluate
from controller.core.outage import down, outage
from controller.core.policy import backlog_causes, is_quiet
from controller.core.probes import EndOffsets, ProbeLog, end_offsets, wanted
from controller.core.recovery import following, resumed
from controller.core.results import (
    EXECUTORS,
    Down,
    Hold,
    Lost,
    NotReady,
    Promote,
    Recommend,
    Scale,
    Verdict,
)
from controller.core.state import (
    ControlState,
    InFlight,
    ack_overdue,
    applied,
    observed,
    settled,
)
from controller.core.topology import plan
from controller.core.window import QueryWindow, Windows
from controller.errors import TemporaryError
from controller.explain import report
from controller.loop.actuate import Actuator
from controller.loop.ports import (
    AckSource,
    Clock,
    ControlSink,
    DecisionLog,
    Fenced,
    Leadership,
    LoopObserver,
    MetricsSource,
    NullObserver,
    OffsetProbe,
)
from controller.settings import ControllerSettings
from schemas import Ack, Outcome

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
    offsets: OffsetProbe | None = None
    """The broker's end offsets, probed every `probe_interval_s`; None: batches only."""
    leadership: Leadership | None = None
    """Which of several instances leads; None: this one, from the start, alone."""


def _new_id() -> str:
    return str(uuid.uuid4())


class ControlLoop:
    def __init__(self, settings: ControllerSettings, ports: Ports,
                 new_id: Callable[[], str] = _new_id) -> None:
        self.settings = settings
        self.ports = ports
        self._new_id = new_id
        self._windows = Windows(settings.model)
        self._actuator = Actuator(settings, ports.control, ports.decisions, new_id)
        self.states: dict[str, ControlState] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.models: dict[str, QueryModel] = {}
        self._overheads: dict[str, float] = {}
        """Per query, the per-batch overhead last fitted (`fit` rule 2)."""
        self._costs: dict[str, BatchCost] = {}
        """Per query, μ and c last measured from batches with rows (`model.idle_cost`)."""
        self._caps: dict[str, int] = {}
        """Per query, the batch cap last reported or observed (`model.batch_cap`)."""
        self.standbys = Standbys(settings.policy.lost_after_min_s)
        """Every instance heard from, standbys included (`failover`)."""
        self._probes = ProbeLog(settings.model.window_s)
        self._next_probe_ms = 0
        self._probe_failing = False
        self._watching_since_ms: int | None = None
        self._next_status_ms = 0
        self._stopping = False
        self.leading = ports.leadership is None

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
        """One cycle. A follower does everything but write: it models every query, so that
        it decides at once when it comes to lead."""
        self.collect()
        now_ms = self.ports.clock.now_ms()
        if self._watching_since_ms is None:
            self._watching_since_ms = now_ms
            self.ports.observer.leadership(self.settings.instance_id, self.leading, now_ms)
        self._windows.prune(now_ms)
        self.probe(now_ms)
        try:
            if self.lead(now_ms):
                self.settle(now_ms)
            else:
                self.ports.acks.poll(0.0)  # the leader's business; history has them
            verdicts = self.decide_all(now_ms)
            if self.leading:
                for window in self._windows:
                    self.act(window, verdicts[window.query_id], now_ms)
            self.count_standbys(now_ms)
        except Fenced as exc:
            self.step_down(now_ms, f"a newer leader fenced this one's writes ({exc})")
        self.report(now_ms)

    # -- lead -----------------------------------------------------------------------------

    def lead(self, now_ms: int) -> bool:
        """Whether this instance leads this cycle: elected since the last one, it first
        takes over (fences the earlier leaders, resumes what they left in flight)."""
        leadership = self.ports.leadership
        if leadership is None:
            return True
        holds = leadership.held()
        if holds and not self.leading:
            self.take_over(leadership, now_ms)
        elif self.leading and not holds:
            self.step_down(now_ms, "the lease passed to another instance")
        return self.leading

    def take_over(self, leadership: Leadership, now_ms: int) -> None:
        try:
            recovered = leadership.take_over(now_ms)
        except TemporaryError as exc:
            log.warning("elected leader, but cannot take over yet (%s); trying again next "
                        "cycle", exc)
            return
        self.states = {q: resumed(self.states.get(q, ControlState()), recovered.states.get(q))
                       for q in self.states.keys() | recovered.states.keys()}
        for query_id, instance_id in recovered.promoted.items():
            self.standbys.promoted(query_id, instance_id, now_ms)  # as if it saw the ack
        self.leading = True
        for line in recovered.summary:
            log.info("resuming %s", line)
        log.info("leading from now on (instance %s)", self.settings.instance_id)
        self.ports.observer.leadership(self.settings.instance_id, True, now_ms)
        self._actuator.write(report.takeover_record(
            self.settings.instance_id, decision_id=self._new_id(), now_ms=now_ms,
            resumed=recovered.summary))
        self.standbys.recount_from_last_standbys()
        self.verdicts.clear()  # what it concluded while following is said (and counted) anew

    def step_down(self, now_ms: int, why: str) -> None:
        """Stop writing at once: what this instance did is the next leader's to resume."""
        log.warning("no longer leading: %s", why)
        self.leading = False
        self.states = {q: following(s) for q, s in self.states.items()}
        self.ports.observer.leadership(self.settings.instance_id, False, now_ms)
        if self.ports.leadership is not None:
            self.ports.leadership.release()

    # -- collect ---------------------------------------------------------------------------

    def collect(self) -> None:
        samples = self.ports.metrics.poll(self._poll_timeout_s())
        self.ports.observer.metrics_received(len(samples))
        heard_at_ms = self.ports.clock.now_ms()
        for sample in samples:
            self.standbys.add(sample)
            if self._windows.add(sample, heard_at_ms) is None:
                log.warning("ignoring metrics of query %s: already tracking %d queries",
                            sample.query_id, self.settings.model.max_queries)

    def _poll_timeout_s(self) -> float:
        """`poll_timeout_s`, or less when the next probe is due sooner: a cycle that waited
        the whole timeout for metrics would probe up to that much late, and the probes'
        spacing is what times the arrivals."""
        wait_s = self.settings.poll_timeout_s
        if self.ports.offsets is None or self.settings.probe_interval_s <= 0:
            return wait_s
        due_in_s = (self._next_probe_ms - self.ports.clock.now_ms()) / 1000
        return min(wait_s, max(0.0, due_in_s))

    def probe(self, now_ms: int) -> None:
        """Ask the broker for the end offsets of every source partition the queries read,
        at most once per `probe_interval_s`; a failure is logged when it starts and ends."""
        interval_s = self.settings.probe_interval_s
        if self.ports.offsets is None or interval_s <= 0 or now_ms < self._next_probe_ms:
            return
        self._next_probe_ms = now_ms + int(interval_s * 1000)
        partitions = wanted(w.last_sample for w in self._windows if w.last_sample is not None)
        if not partitions:
            return
        try:
            found = self.ports.offsets.end_offsets(partitions)
        except TemporaryError as exc:
            self.ports.observer.probe_failed()
            if not self._probe_failing:
                log.warning("cannot probe the source partitions' end offsets (%s); deciding "
                            "from the batches alone until the broker answers", exc)
            self._probe_failing = True
            return
        if self._probe_failing:
            log.info("the broker answers end-offset probes again")
        self._probe_failing = False
        self._probes.add(end_offsets(now_ms, found))

    def fresh_probes(self, now_ms: int) -> tuple[EndOffsets, ...]:
        """The probes the model may use: none when the newest is older than three intervals
        and a cycle (the broker stopped answering)."""
        settings = self.settings
        return self._probes.fresh(now_ms, 3 * settings.probe_interval_s
                                  + settings.poll_timeout_s)

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
        if flight.instance and ack.instance_id != flight.instance:
            log.info("%s: %s answered control %s (promoting %s): %s %s", ack.query_id,
                     ack.instance_id, ack.control_id, flight.instance, ack.outcome.value,
                     ack.detail)
            return
        self.ports.observer.acked(ack.query_id, ack.outcome.value, ack.pause_ms)
        if ack.outcome is Outcome.APPLIED:
            log.info("%s: control %s applied at epoch %d (pause %d ms): %s", ack.query_id,
                     ack.control_id, ack.epoch, ack.pause_ms, ack.detail)
            window = self._windows.get(ack.query_id)
            if window is not None:
                window.require_epoch(ack.epoch)
            if flight.instance:
                self.standbys.promoted(ack.query_id, flight.instance, now_ms)
        else:
            log.warning("%s: control %s %s by %s: %s", ack.query_id, ack.control_id,
                        ack.outcome.value.lower(), ack.instance_id, ack.detail)
        self._actuator.outcome(ack.query_id, flight, f"ack_{ack.outcome.value.lower()}",
                             ack.detail, now_ms)
        cooldown_s = self.settings.policy.cooldown_s
        self.states[ack.query_id] = (applied(state, now_ms, cooldown_s)
                                     if ack.outcome is Outcome.APPLIED
                                     else settled(state, now_ms, cooldown_s))

    def _on_timeout(self, query_id: str, flight: InFlight, now_ms: int) -> None:
        reason = (f"no ack for control {flight.control_id} within "
                  f"{self.settings.ack_timeout_s:.0f} s; giving up on it")
        log.warning("%s: %s", query_id, reason)
        self.ports.observer.ack_timed_out(query_id)
        self._actuator.outcome(query_id, flight, "ack_timeout", reason, now_ms)
        self.states[query_id] = settled(self.states[query_id], now_ms,
                                        self.settings.policy.cooldown_s)

    # -- evaluate and decide ------------------------------------------------------------------

    def decide_all(self, now_ms: int) -> dict[str, Verdict]:
        """Every query's verdict this cycle: lost or not ready on its own, the ready ones
        together (`topology.plan`), so a pipeline is sized in one round."""
        verdicts: dict[str, Verdict] = {}
        ready: dict[str, QueryModel] = {}
        for window in self._windows:
            found = self.evaluate(window, now_ms)
            if isinstance(found, QueryModel):
                ready[window.query_id] = found
            else:
                verdicts[window.query_id] = found
        verdicts |= plan(ready, self.states, now_ms, self.settings.policy)
        for query_id, model in ready.items():
            self.ports.observer.modelled(model, _desired(model, verdicts[query_id],
                                                         self.states[query_id]))
        for query_id, verdict in verdicts.items():
            self._note(query_id, verdict, now_ms)
        self.ports.observer.lost(sorted(q for q, v in verdicts.items() if isinstance(v, Lost)))
        for action in ("stopped", "halted"):
            self.ports.observer.down(action, sorted(
                q for q, v in verdicts.items() if isinstance(v, Down) and v.action == action))
        return verdicts

    def evaluate(self, window: QueryWindow,
                 now_ms: int) -> QueryModel | NotReady | Lost | Down | Promote:
        """The query's model, or why there is none: down by its job's own word (stopped or
        halted), lost (then failed over, if a standby is alive), or not ready yet."""
        query_id = window.query_id
        state = self.states.get(query_id, ControlState())
        gone = self._gone(window, state, now_ms)
        found: QueryModel | NotReady | Lost | Down | Promote = (
            failover.decide(gone, self.standbys.live(query_id, now_ms), window.last_instance,
                            now_ms) if gone is not None else
            evaluate(query_id, window.samples, self.settings.model, warm_up=window.warm_up,
                     remembered_overhead_s=self._overheads.get(query_id),
                     remembered_batch_cap=self._caps.get(query_id, 0),
                     probed=self.fresh_probes(now_ms), remembered=self._costs.get(query_id),
                     beat=window.beat))
        if not isinstance(found, QueryModel):
            if isinstance(found, NotReady) and window.changed:
                found = NotReady(f"stabilising after a change to epoch {window.epoch}: "
                                 f"{found.reason}")
            # Quiet must be continuous and observed: a gap in the data restarts the timer (what
            # a scale-down carried over waits for the window at its new size); a lost query
            # is not quiet.
            self.states[query_id] = observed(state, None if isinstance(found, NotReady)
                                             else False, now_ms)
            self.models.pop(query_id, None)
            return found
        if found.overhead_source == "fit":
            self._overheads[query_id] = found.batch_overhead_s
        if found.rate_samples > 0:
            self._costs[query_id] = BatchCost(found.batch_overhead_s, found.rate_per_unit,
                                              found.overhead_source)
        if found.batch_cap_source in ("reported", "observed"):
            self._caps[query_id] = found.batch_cap
        policy = self.settings.policy
        state = observed(state, is_quiet(found, policy), now_ms)
        self.states[query_id] = judge_effect(state, found, bool(backlog_causes(found, policy)),
                                             now_ms, policy)
        self.models[query_id] = found
        return found

    def _gone(self, window: QueryWindow, state: ControlState, now_ms: int) -> Lost | Down | None:
        """Down by the job's own word, else lost by its silence (neither while a tuple is in
        flight: a restart is silent, the ack timeout covers it); with what the broker holds
        for it in the reason, and exported in place of the model's figures."""
        newest = window.last_sample
        gone: Lost | Down | None = (None if state.in_flight is not None
                                    else down(newest, window.beat))
        gone = gone or liveness(window.last_seen_ms,
                                newest.trigger_interval_ms / 1000 if newest else 0.0,
                                newest.busy_ms / 1000 if newest else 0.0, state, now_ms,
                                self.settings.policy, self._watching_since_ms or 0,
                                beat=window.beat, beat_heard_ms=window.beat_heard_ms,
                                last_batch=newest)
        if gone is None:
            return None
        owed = outage(newest, self.fresh_probes(now_ms))
        self.ports.observer.outage(window.query_id, owed)
        return replace(gone, reason=f"{gone.reason}; {owed.describe()}",
                       figures={**gone.figures, **owed.figures()})

    def _note(self, query_id: str, verdict: Verdict, now_ms: int) -> None:
        """Log a non-scaling verdict only when its kind changes (the status line repeats it);
        record advice, "cannot help" and lost queries in the decision log the same way."""
        previous = self.verdicts.get(query_id)
        self.verdicts[query_id] = verdict
        if isinstance(verdict, Scale | Promote) or (previous is not None
                                                    and previous.action == verdict.action):
            return
        if isinstance(previous, Lost | Down):
            log.info("%s: metrics again after being reported %s", query_id, previous.action)
        log.info("%s: %s: %s", query_id, verdict.action, verdict.reason)
        if not self.leading:
            return  # a follower's verdicts are its own business: counted and written by none
        self.ports.observer.decided(query_id, verdict.action, verdict.reason, now_ms)
        if isinstance(verdict, Recommend):
            self.ports.observer.recommended(verdict.action)
        if isinstance(verdict, Recommend | Lost | Down) or (isinstance(verdict, Hold)
                                                            and verdict.action == "cannot_help"):
            self._advice(query_id, verdict, now_ms)

    # -- act ------------------------------------------------------------------------------------

    def act(self, window: QueryWindow, verdict: Verdict, now_ms: int) -> None:
        if not isinstance(verdict, Scale | Promote):
            return
        query_id = window.query_id
        self.ports.observer.decided(query_id, verdict.action, verdict.reason, now_ms)
        state = self._actuator.act(query_id, verdict, self.states.get(query_id, ControlState()),
                                   window.epoch, self.models.get(query_id), now_ms)
        if state.in_flight is not None and state.in_flight.parameter == EXECUTORS:
            window.carry_to(state.in_flight.epoch)
        self.states[query_id] = state

    def count_standbys(self, now_ms: int) -> None:
        """Export each query's live standbys; ask for a new one when the last is gone."""
        for query_id, (before, now) in self.standbys.recount(now_ms).items():
            self.ports.observer.standbys(query_id, now)
            advice = failover.standby_advice(query_id, before, now)
            if advice is not None and self.leading:
                log.warning("%s: %s: %s", query_id, advice.action, advice.reason)
                self.ports.observer.recommended(advice.action)
                self._advice(query_id, advice, now_ms)

    def _advice(self, query_id: str, verdict: Recommend | Hold | Lost | Down,
                now_ms: int) -> None:
        self._actuator.write(report.advice_record(query_id, verdict, decision_id=self._new_id(),
                                                  now_ms=now_ms, dry_run=self.settings.dry_run))

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
    """The knob's value the query is headed for (executors change the slots, not the knob)."""
    if isinstance(verdict, Scale) and verdict.parameter == model.knob:
        return verdict.target
    if state.in_flight is not None and state.in_flight.parameter == model.knob:
        return state.in_flight.target
    return model.parallelism
