"""The control loop: collect → settle → evaluate → decide → act → report, one cycle at a time.

Owns the order of the stages and nothing else a stage can own: the per-query record of what
the loop remembers is `memory`'s, the lead `leading`'s, the broker's probes `probing`'s, the
division of a shared cluster `sharing`'s, the answers to tuples in flight `settling`'s, the
tuples and their records `actuate`'s; the decisions themselves come from the pure core
(`window`, `model`, `judgement`, `outage`, `policy`, `topology`, `failover`). All ready
queries are decided together each cycle, so a pipeline is sized in one round; a lost query is
failed over to a live standby when it has one. Built by `controller.app` with Kafka adapters,
by tests, the replay and the simulator with `controller.loop.fakes`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from controller.core import failover
from controller.core.ceiling import SHEDDING
from controller.core.cluster import Division
from controller.core.failover import Standbys
from controller.core.judgement import judge_effect, liveness
from controller.core.model import QueryModel, evaluate
from controller.core.outage import down, outage
from controller.core.parallelism import on_cluster
from controller.core.policy import backlog_causes, executors_to_keep, for_query, is_quiet
from controller.core.results import (
    Actuation,
    Down,
    Hold,
    Lost,
    NotReady,
    Promote,
    Recommend,
    Scale,
    Verdict,
)
from controller.core.season import Season
from controller.core.shards import follow_slot
from controller.core.state import (
    ControlState,
    observed,
    spared,
)
from controller.core.topology import plan
from controller.core.window import QueryWindow, Windows
from controller.explain import report
from controller.loop.actuate import Actuator
from controller.loop.behind import Behind
from controller.loop.leading import Lead
from controller.loop.memory import Memory, QueryMemory
from controller.loop.ports import (
    AckSource,
    Clock,
    ClusterStatus,
    ControlSink,
    DecisionLog,
    Fenced,
    Leadership,
    LoopObserver,
    MetricsSource,
    NullObserver,
    OffsetProbe,
)
from controller.loop.probing import Prober
from controller.loop.settling import LoopRecords, Settler
from controller.loop.sharing import division as division_of
from controller.loop.sharing import note_demands
from controller.settings import ControllerSettings
from schemas.knobs import EXECUTORS

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
    cluster: ClusterStatus | None = None
    """The shared Spark cluster's free cores; None: every job asks for executors alone."""


def _new_id() -> str:
    return str(uuid.uuid4())


class ControlLoop:
    def __init__(self, settings: ControllerSettings, ports: Ports,
                 new_id: Callable[[], str] = _new_id) -> None:
        self.settings = settings
        self.ports = ports
        self._new_id = new_id
        self._overload_record_ms = int(settings.overload_record_interval_s * 1000)
        self._windows = Windows(settings.model)
        self._actuator = Actuator(settings, ports.control, ports.decisions, new_id)
        self.queries = Memory()
        """Every query's record (`memory.QueryMemory`)."""
        self.standbys = Standbys(settings.policy.lost_after_min_s)
        """Every instance heard from, standbys included (`failover`)."""
        self._settler = Settler(settings, ports, self._actuator,
                                LoopRecords(self.queries, self._windows, self.standbys),
                                self.leads)
        self._prober = Prober(settings, ports.offsets, ports.clock, ports.observer)
        self._lead = Lead(settings.instance_id, ports.leadership, ports.observer,
                          self._actuator, new_id)
        self._watching_since_ms: int | None = None
        self._behind = Behind(settings.max_input_delay_s)
        self._next_status_ms = 0
        self._stopping = False

    @property
    def leading(self) -> bool:
        """Whether this instance leads any shard of the queries."""
        return self._lead.leading

    def leads(self, query_id: str) -> bool:
        """Whether this instance decides the query and writes for it (its shard's leader)."""
        return self._lead.leads(query_id)

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
        """One cycle. The queries of the shards this instance leads are modelled, decided
        and acted on. The others are not read at all when the metrics topic divides into the
        shards (`read_shards`); else they are read and modelled now and then
        (`follow_interval_s`), so that it decides at once when it comes to lead them."""
        self._forget_unread()
        self.collect()
        now_ms = self.ports.clock.now_ms()
        if self._watching_since_ms is None:
            self._watching_since_ms = now_ms
            self._lead.announce(now_ms)
        self._windows.prune(now_ms)
        self._prober.probe(now_ms, (w.last_sample for w in self._windows
                                    if w.last_sample is not None))
        try:
            self._lead.this_cycle(now_ms, self.queries, self.standbys)
            self._settler.settle(now_ms)
            if self._judging(now_ms):
                verdicts = self.decide_all(now_ms)
                for window in self._windows:
                    verdict = verdicts.get(window.query_id)
                    if verdict is not None and self.leads(window.query_id):
                        self.act(window, verdict, now_ms)
                self.count_standbys(now_ms)
        except Fenced as exc:
            self._lead.step_down(now_ms, f"a newer leader fenced this one's writes ({exc})",
                                 self.queries)
        self.report(now_ms)

    # -- collect ---------------------------------------------------------------------------

    def collect(self) -> None:
        """Read what arrived, as of the controller's horizon: what it read was published
        before it (`Behind`)."""
        samples = self.ports.metrics.poll(self._prober.poll_timeout_s())
        self.ports.observer.metrics_received(len(samples))
        now_ms = self.ports.clock.now_ms()
        self._behind.read(self.ports.metrics.behind_ms(now_ms))
        self.ports.observer.behind(self._behind.ms / 1000, self._behind.judging)
        heard_at_ms = self._behind.horizon(now_ms)
        for sample in samples:
            if self._lead.divided and not self.leads(sample.query_id):
                continue  # read before its shard's partitions were given up
            self.standbys.add(sample)
            if self._windows.add(sample, heard_at_ms) is None:
                log.warning("ignoring metrics of query %s: already tracking %d queries",
                            sample.query_id, self.settings.model.max_queries)

    def _forget_unread(self) -> None:
        """Forget the queries whose metrics this instance no longer reads (`Lead.read`)."""
        if not self._lead.read(self.ports.metrics, self.ports.clock.now_ms()):
            return
        known = {*self.queries, *(w.query_id for w in self._windows)}
        others = [q for q in known if not self.leads(q)]
        for query_id in others:
            self._windows.forget(query_id)
            self.queries.pop(query_id, None)
            self.standbys.forget(query_id)
        if others:
            log.info("%d queries of other shards forgotten", len(others))
            self.ports.observer.forget(others)

    def _judging(self, now_ms: int) -> bool:
        """Whether the controller is near enough its metrics to judge; it says so when that
        changes (its log, and the decision log when it leads)."""
        change = self._behind.change()
        if change is not None:
            (log.info if self._behind.judging else log.warning)("%s", change)
            if self.leading:
                self._actuator.write(report.controller_record(
                    "judging" if self._behind.judging else "not_judging", change,
                    self.settings.instance_id, decision_id=self._new_id(), now_ms=now_ms,
                    behind_s=self._behind.ms / 1000))
        return self._behind.judging

    # -- evaluate and decide ------------------------------------------------------------------

    def decide_all(self, now_ms: int) -> dict[str, Verdict]:
        """The verdict of every query modelled this cycle (those this instance leads, and
        the others whose turn it is): lost, down or not ready on its own, the ready ones
        together (`topology.plan`, with the last model of every other query as context), so
        a pipeline is sized in one round."""
        verdicts: dict[str, Verdict] = {}
        ready: dict[str, QueryModel] = {}
        context: dict[str, QueryModel] = {}
        cluster = self.ports.cluster
        division = division_of(cluster, self.queries)
        for window in self._windows:
            query_id = window.query_id
            if not self._due(query_id, now_ms):
                last = self.queries.of(query_id).model
                if last is not None:
                    context[query_id] = last
                continue
            found = self.evaluate(window, now_ms, division)
            if isinstance(found, QueryModel):
                ready[query_id] = found
            else:
                verdicts[query_id] = found
        states = {q: self.queries.of(q).state for q in (*ready, *context)}
        verdicts |= plan(context | ready, states, now_ms, self.settings.policy,
                         followed={q for q in (*ready, *context) if not self.leads(q)},
                         context=context.keys())
        for query_id, model in ready.items():
            self.ports.observer.modelled(model, _desired(model, verdicts[query_id],
                                                         self.queries[query_id].state))
        for query_id, verdict in verdicts.items():
            self._note(query_id, verdict, now_ms)
        if cluster is not None and note_demands(self.queries, ready, verdicts,
                                                cluster.readings()):
            cluster.read_soon()  # divided with the wants of the next moments, not an interval
        said = {w.query_id: self.queries.of(w.query_id).verdict for w in self._windows}
        self.ports.observer.lost(sorted(q for q, v in said.items() if isinstance(v, Lost)))
        for action in ("stopped", "halted"):
            self.ports.observer.down(action, sorted(
                q for q, v in said.items() if isinstance(v, Down) and v.action == action))
        return verdicts

    def _due(self, query_id: str, now_ms: int) -> bool:
        """Whether the query is modelled this cycle: every cycle when this instance leads it,
        once a `follow_interval_s` slot (staggered over the queries) when it follows it."""
        if self.leads(query_id):
            return True
        query = self.queries.of(query_id)
        slot = follow_slot(query_id, now_ms, int(self.settings.follow_interval_s * 1000))
        if slot == query.followed_slot:
            return False
        query.followed_slot = slot
        return True

    def evaluate(self, window: QueryWindow, now_ms: int, division: Division | None = None
                 ) -> QueryModel | NotReady | Lost | Down | Promote:
        """The query's model, or why there is none: down by its job's own word (stopped or
        halted), lost (then failed over, if a standby is alive), or not ready yet. On a
        cluster whose free cores are divided (`division`), the model carries its grant."""
        query_id = window.query_id
        query = self.queries.of(query_id)
        gone = self._gone(window, query.state, now_ms)
        horizon_ms = self._behind.horizon(now_ms)
        found: QueryModel | NotReady | Lost | Down | Promote = (
            failover.decide(gone, *self.standbys.candidates(query_id, horizon_ms),
                            window.last_instance, now_ms) if gone is not None else
            evaluate(query_id, window.samples, self.settings.model, warm_up=window.warm_up,
                     probed=self._prober.fresh(now_ms), remembered=query.remembered,
                     beat=window.beat, memo=query.derived))
        if not isinstance(found, QueryModel):
            if isinstance(found, NotReady) and window.changed:
                found = NotReady(f"stabilising after a change to epoch {window.epoch}: "
                                 f"{found.reason}")
            # Quiet must be continuous and observed: a gap in the data restarts the timer (what
            # a scale-down carried over waits for the window at its new size); a lost query
            # is not quiet.
            query.state = observed(query.state, None if isinstance(found, NotReady) else False,
                                   now_ms)
            query.model = None
            return found
        query.remembered = query.remembered.after(found)
        found = self._with_forecast(query_id, query, found, now_ms)
        if division is not None and on_cluster(found):
            found = replace(found, cluster_grant=division.grant(query_id))
        policy, _ = for_query(found, self.settings.policy)
        backlogged = bool(backlog_causes(found, policy))
        state = observed(query.state, is_quiet(found, policy), now_ms)
        state = spared(state, not backlogged and executors_to_keep(found, policy) is not None,
                       now_ms)
        query.state = judge_effect(state, found, backlogged, now_ms, policy)
        query.model = found
        return found

    def _with_forecast(self, query_id: str, query: QueryMemory, model: QueryModel,
                       now_ms: int) -> QueryModel:
        """The model with the peak its repeating load reaches ahead, if it repeats."""
        season = self.settings.season
        if not season.anticipate:
            return model
        if query.season is None:
            query.season = Season(query_id, season)
        query.season.observe(now_ms, model.arrival_rate)
        forecast = query.season.forecast(now_ms, season.season_lead_s)
        return model if forecast is None else replace(model, forecast=forecast)

    def _gone(self, window: QueryWindow, state: ControlState, now_ms: int) -> Lost | Down | None:
        """Down by the job's own word, else lost by its silence (neither while a tuple is in
        flight: a restart is silent, the ack timeout covers it); with what the broker holds
        for it in the reason, and exported in place of the model's figures. Silence counts up
        to the controller's horizon, not its clock: its own delay is not the query's."""
        newest = window.last_sample
        gone: Lost | Down | None = (None if state.in_flight is not None
                                    else down(newest, window.beat))
        gone = gone or liveness(window.last_seen_ms,
                                newest.trigger_interval_ms / 1000 if newest else 0.0,
                                newest.busy_ms / 1000 if newest else 0.0, state,
                                self._behind.horizon(now_ms), self.settings.policy,
                                self._watching_since_ms or 0,
                                beat=window.beat, beat_heard_ms=window.beat_heard_ms,
                                last_batch=newest)
        if gone is None:
            return None
        owed = outage(newest, self._prober.fresh(now_ms))
        self.ports.observer.outage(window.query_id, owed)
        return replace(gone, reason=f"{gone.reason}; {owed.describe()}",
                       figures={**gone.figures, **owed.figures()})

    def _note(self, query_id: str, verdict: Verdict, now_ms: int) -> None:
        """Log a non-scaling verdict only when its kind changes (the status line repeats it);
        record advice, "cannot help", holds while shedding, lost and down queries in the
        decision log the same way. And a query over its capacity (`QueryModel.overloaded`)
        with no decision of its own recorded for `overload_record_interval_s` has its verdict
        recorded, a hold included: an overload never leaves the decision log silent long."""
        query = self.queries.of(query_id)
        previous, query.verdict = query.verdict, verdict
        if isinstance(verdict, Actuation):
            return
        if previous is None or previous.action != verdict.action:
            if isinstance(previous, Lost | Down):
                log.info("%s: metrics again after being reported %s", query_id,
                         previous.action)
            log.info("%s: %s: %s", query_id, verdict.action, verdict.reason)
            if self.leads(query_id):  # a follower's verdicts are counted and written by none
                self._decided(query_id, verdict, now_ms)
        elif (self.leads(query_id) and isinstance(verdict, Hold | Recommend)
              and query.model is not None and query.model.overloaded
              and now_ms >= query.overload_recorded_ms + self._overload_record_ms):
            self._advice(query_id, verdict, now_ms)

    def _decided(self, query_id: str, verdict: Verdict, now_ms: int) -> None:
        """A new kind of verdict, counted and, when an operator should see it, recorded."""
        self.ports.observer.decided(query_id, verdict.action, verdict.reason, now_ms)
        if isinstance(verdict, Recommend):
            self.ports.observer.recommended(verdict.action)
        if isinstance(verdict, Recommend | Lost | Down) or (
                isinstance(verdict, Hold) and verdict.action in ("cannot_help", SHEDDING)):
            self._advice(query_id, verdict, now_ms)

    # -- act ------------------------------------------------------------------------------------

    def act(self, window: QueryWindow, verdict: Verdict, now_ms: int) -> None:
        if not isinstance(verdict, Actuation):
            return
        query_id = window.query_id
        query = self.queries.of(query_id)
        self.ports.observer.decided(query_id, verdict.action, verdict.reason, now_ms)
        query.overload_recorded_ms = now_ms
        state = self._actuator.act(query_id, verdict, query.state, window.epoch, query.model,
                                   now_ms)
        if state.in_flight is not None and state.in_flight.parameter == EXECUTORS:
            window.carry_to(state.in_flight.epoch)
        query.state = state

    def count_standbys(self, now_ms: int) -> None:
        """Export each query's live standbys; ask for a new one when the last is gone."""
        # Not the queries of a shard taken over this cycle: its metrics are read from the
        # next, and its standbys would look silent until then.
        for query_id, (before, now) in self.standbys.recount(
                self._behind.horizon(now_ms), self._lead.reads).items():
            self.ports.observer.standbys(query_id, now)
            advice = failover.standby_advice(query_id, before, now)
            if advice is not None and self.leads(query_id):
                log.warning("%s: %s: %s", query_id, advice.action, advice.reason)
                self.ports.observer.recommended(advice.action)
                self._advice(query_id, advice, now_ms)

    def _advice(self, query_id: str, verdict: Recommend | Hold | Lost | Down,
                now_ms: int) -> None:
        self._actuator.write(report.advice_record(query_id, verdict, decision_id=self._new_id(),
                                                  now_ms=now_ms, dry_run=self.settings.dry_run))
        self.queries.of(query_id).overload_recorded_ms = now_ms

    # -- report -----------------------------------------------------------------------------

    def report(self, now_ms: int) -> None:
        if now_ms < self._next_status_ms:
            return
        self._next_status_ms = now_ms + int(self.settings.status_interval_s * 1000)
        for window in self._windows:
            query = self.queries.of(window.query_id)
            status_log.info("%s", report.status_line(window.query_id, query.model,
                                                     query.verdict))


def _desired(model: QueryModel, verdict: Verdict, state: ControlState) -> int:
    """The knob's value the query is headed for (executors change the slots, not the knob)."""
    if isinstance(verdict, Scale) and verdict.parameter == model.knob:
        return verdict.target
    if state.in_flight is not None and state.in_flight.parameter == model.knob:
        return state.in_flight.target
    return model.parallelism
