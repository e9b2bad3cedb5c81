"""Several controller instances on one bus: only the leader writes, a new leader resumes what
the last one left in flight, and a deposed leader that still believes it leads is fenced;
with several shards, each instance does all that for the queries of the shards it leads.
In memory (`MemoryLeadership`); the Kafka lease and fencing are tested on the real broker in
tests/integration/test_controller_leadership.py."""

from __future__ import annotations

from dataclasses import replace

from controller.core.model import QueryModel
from controller.core.recovery import following, resumed
from controller.core.shards import follow_slot
from controller.core.state import ControlState, Ineffective
from controller.explain.prom import ControllerMetrics, new_registry
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryLeadership,
    MemoryLease,
    MemoryMetricsSource,
)
from controller.loop.ports import NullObserver
from controller.settings import ControllerSettings
from schemas import Ack, ControlTuple, Decision, Outcome, codec_for
from schemas.records import TAKEOVER
from tests.unit.controller.core.test_failover import beat
from tests.unit.controller.traces import Job, end_ms, simulate

OVERLOAD = Job(rates=[(0, 800)], per_unit=210, parallelism=2, max_per_batch=500, epoch=3)


class Decided(NullObserver):
    """Remembers the decisions an instance reports (to Prometheus, in production)."""

    def __init__(self) -> None:
        self.actions: list[str] = []

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        self.actions.append(action)


def instance(name: str, lease: MemoryLease, bus: MemoryBus, clock: FakeClock,
             read_back_s: float | None = None) -> ControlLoop:
    """`read_back_s`: its metrics source divides by shard, reading a gained one back so far."""
    leadership = MemoryLeadership(lease, name, bus)
    return ControlLoop(ControllerSettings(instance_id=name), Ports(
        metrics=MemoryMetricsSource(bus.metrics, read_back_s=read_back_s),
        control=MemoryControlSink(
            bus.control, leadership.guard, decisions=bus.decisions),
        acks=MemoryAckSource(bus.acks), decisions=MemoryDecisionLog(bus.decisions,
                                                                    leadership.guard),
        clock=clock, leadership=leadership, observer=Decided()))


def pair(holder: str | None = "a") -> tuple[MemoryBus, FakeClock, MemoryLease, ControlLoop,
                                            ControlLoop]:
    """Instances a and b on one bus, `holder` holding the lease."""
    bus, clock, lease = MemoryBus(), FakeClock(), MemoryLease(holder=holder)
    return bus, clock, lease, instance("a", lease, bus, clock), instance("b", lease, bus, clock)


def load(bus: MemoryBus, clock: FakeClock, job: Job = OVERLOAD) -> None:
    """30 s of `job`'s metrics on the bus, the clock at their end."""
    trace = simulate(job, 30)
    bus.publish_metrics(*trace)
    clock.ms = end_ms(trace)


def cycles(*loops: ControlLoop, count: int = 3) -> None:
    for _ in range(count):
        for loop in loops:
            loop.run_once()


def leadership_of(loop: ControlLoop) -> MemoryLeadership:
    assert isinstance(loop.ports.leadership, MemoryLeadership)
    return loop.ports.leadership


def test_only_the_leader_writes_while_the_follower_models_every_query_too() -> None:
    bus, clock, _, a, b = pair()
    load(bus, clock)
    cycles(a, b)
    [control] = bus.sent_controls()
    assert int(control.value) > 2 and (a.leading, b.leading) == (True, False)
    b_model, a_model = b.queries["q1"].model, a.queries["q1"].model
    assert b_model is not None and a_model is not None
    assert b_model.arrival_rate == a_model.arrival_rate
    takeovers = [d for d in bus.written_decisions() if d.action == TAKEOVER]
    assert [d.target_value for d in takeovers] == ["a"]
    assert isinstance(a.ports.observer, Decided) and isinstance(b.ports.observer, Decided)
    assert "scale_up" in a.ports.observer.actions and b.ports.observer.actions == []


def test_a_new_leader_resumes_the_tuple_in_flight_instead_of_sending_another() -> None:
    bus, clock, lease, a, b = pair()
    load(bus, clock)
    cycles(a, b)
    [control] = bus.sent_controls()
    lease.holder = "b"  # a's session ended: the group gave the lease to b
    cycles(a, b)
    assert (a.leading, b.leading) == (False, True)
    assert bus.sent_controls() == [control]
    flight = b.queries["q1"].state.in_flight
    assert flight is not None and flight.control_id == control.control_id
    takeover = [d for d in bus.written_decisions() if d.action == TAKEOVER][-1]
    assert takeover.target_value == "b" and "unanswered" in takeover.reason

    bus.publish_ack(Ack(control.control_id, "q1", "i1", control.epoch, Outcome.APPLIED,
                        "applied", 900, clock.ms))
    cycles(a, b, count=1)
    state = b.queries["q1"].state
    assert state.in_flight is None and state.cooldown_until_ms > clock.ms
    assert bus.sent_controls() == [control]


def test_a_frozen_leader_that_wakes_believing_it_leads_is_fenced_and_steps_down() -> None:
    bus, clock, lease, a, b = pair()
    cycles(a, b, count=1)
    assert a.leading
    leadership_of(a).believes = frozenset({0})  # frozen while b took over; wakes unaware
    lease.holder = "b"
    cycles(b, count=1)
    load(bus, clock)
    cycles(a, count=1)  # decides the overload first and tries to send
    assert not a.leading and leadership_of(a).releases == 1
    assert bus.sent_controls() == []
    cycles(b)
    [control] = bus.sent_controls()
    assert control.epoch == OVERLOAD.epoch + 1
    assert [d.action for d in bus.written_decisions()].count("scale_up") == 1


def test_a_new_leader_keeps_the_quiet_it_watched_unless_an_action_came_after() -> None:
    watched = ControlState(quiet_since_ms=1_000, ineffective=Ineffective(4, 8, 1.0, 4.0, 9))
    assert resumed(watched, None) == watched
    later = resumed(watched, ControlState(last_epoch_issued=5, settled_at_ms=2_000))
    assert later.quiet_since_ms is None and later.last_epoch_issued == 5
    assert later.ineffective == watched.ineffective
    earlier = resumed(watched, ControlState(last_epoch_issued=5, settled_at_ms=500))
    assert earlier.quiet_since_ms == 1_000


def test_a_deposed_leader_forgets_what_it_did_but_not_what_it_saw() -> None:
    did = ControlState(last_epoch_issued=7, cooldown_until_ms=9, quiet_since_ms=3)
    assert following(did) == ControlState(quiet_since_ms=3)


def test_a_new_leader_restates_the_standby_advice_given_while_it_followed() -> None:
    bus, clock, lease, a, b = pair()
    bus.publish_metrics(beat("s1", clock.ms))
    cycles(a, b, count=1)
    lease.holder = None  # a is gone (its session ended) and b is not elected yet
    clock.advance(60)  # s1 falls silent meanwhile: the query has no standby left
    cycles(a, b, count=1)
    assert not any(d.action == "start_standby" for d in bus.written_decisions())
    lease.holder = "b"
    cycles(b, count=1)
    [advice] = [d for d in bus.written_decisions() if d.action == "start_standby"]
    assert advice.query_id == "q1" and "it had 1" in advice.reason


def test_a_new_leader_asks_for_a_standby_after_a_promotion_answered_before_it_led() -> None:
    bus, clock, _, _, b = pair(holder="b")
    promotion = ControlTuple("c-1", "q1", "query", "active_instance", "s1", 1,
                             "streamctl-controller", "q1 lost", clock.ms - 5_000)
    bus.control.append(codec_for(ControlTuple).encode(promotion))
    bus.publish_ack(Ack("c-1", "q1", "s1", 1, Outcome.APPLIED, "promoted", 900, clock.ms))
    cycles(b, count=1)
    [advice] = [d for d in bus.written_decisions() if d.action == "start_standby"]
    assert advice.query_id == "q1" and "it had 1" in advice.reason
    cycles(b)
    assert [d.action for d in bus.written_decisions()].count("start_standby") == 1


def test_a_follower_reports_no_decision_of_its_own() -> None:
    bus, clock, _, a, b = pair()
    load(bus, clock, Job(rates=[(0, 200)], per_unit=210, parallelism=2))  # within capacity
    cycles(a, b)
    assert isinstance(a.ports.observer, Decided) and isinstance(b.ports.observer, Decided)
    assert a.ports.observer.actions and b.ports.observer.actions == []
    b_verdict, a_verdict = b.queries["q1"].verdict, a.queries["q1"].verdict
    assert b_verdict is not None and a_verdict is not None
    assert b_verdict.action == a_verdict.action  # it reached the same verdict


def test_prometheus_counts_each_takeover_and_shows_who_leads_how_many_shards_since_when(
) -> None:
    metrics = ControllerMetrics(new_registry())
    for shards, at_ms in ((0, 1_000), (1, 2_000), (0, 3_000), (2, 4_000), (1, 5_000),
                          (3, 6_000)):
        metrics.leadership("c1", shards, 4, at_ms)
    value = metrics.registry.get_sample_value
    assert value("streamctl_controller_takeovers_total", {"instance": "c1"}) == 3
    assert value("streamctl_controller_leader", {"instance": "c1"}) == 1
    assert value("streamctl_controller_shards_led", {"instance": "c1"}) == 3
    assert value("streamctl_controller_shards", {"instance": "c1"}) == 4
    # the last takeover, of a shard more (giving one up is none)
    assert value("streamctl_controller_leader_since_timestamp_seconds", {"instance": "c1"}) == 6
    metrics.leadership("c2", 0, 4, 1_000)  # a follower from the start: a series at 0
    assert value("streamctl_controller_takeovers_total", {"instance": "c2"}) == 0


def recorded(units: int, rate: float, at_ms: int, **figures: float) -> Decision:
    """A decision an earlier controller wrote about q1 at `units`, μ `rate` (c of 1 s, the
    records most of the busy time, unless `figures` say otherwise)."""
    return Decision(f"d-{at_ms}", "q1", at_ms, "scale_up", "input_parallelism", str(units),
                    str(units + 2), "earlier", {"units": float(units),
                                                "processing_rate_per_unit": rate,
                                                "rate_samples": 5.0, "batch_overhead_s": 1.0,
                                                "useful_share": 0.8}
                    | figures)


def test_a_controller_started_afresh_learns_its_models_memories_from_the_decision_log() -> None:
    """No instance of the earlier controllers runs: the new leader reads μ at the sizes q1
    ran from their decisions' figures (the newest per size; a μ with no per-batch cost told
    apart is no measurement of it), the newest fitted cost and the batch cap's records per
    unit, and its model takes the curve from them at once."""
    bus, clock = MemoryBus(), FakeClock()
    for d in (recorded(2, 250.0, 1_000), recorded(2, 210.0, 2_000),
              recorded(6, 150.0, 3_000, overhead_fitted=1.0, batch_overhead_s=0.2,
                       batch_cap_per_unit=750.0),
              recorded(12, 90.0, 4_000, batch_overhead_s=0.0)):
        bus.decisions.append(codec_for(Decision).encode(d))
    fresh = instance("c", MemoryLease(holder="c"), bus, clock)
    load(bus, clock)
    cycles(fresh, count=1)
    memory = fresh.queries["q1"].remembered
    # μ at 2 units measured live since (with the recorded cost) replaced the recorded one.
    sizes = dict(memory.sizes)
    assert set(sizes) == {2, 6} and sizes[6] == 150.0 and sizes[2] != 210.0
    assert memory.batch_cap_per_unit == 750.0
    model = fresh.queries["q1"].model
    # Its batches alike (no fit of its own), the model takes the recorded cost.
    assert model is not None and model.overhead_source == "remembered"
    assert model.scalability.sizes == 2
    assert model.scalability.contention > 0


# -- shards: the queries shared out among instances ------------------------------------------

SHARD_0, SHARD_1 = ("q1", "q2", "q3"), ("q4", "q5", "q6")
"""Query ids by their shard of two (`shards.shard_of`)."""


def sharded(read_back_s: float | None = None
            ) -> tuple[MemoryBus, FakeClock, MemoryLease, ControlLoop, ControlLoop]:
    """Instances a and b on one bus, a leading shard 0 and b shard 1 of two; with
    `read_back_s`, each reads only its own shard's metrics."""
    bus, clock, lease = MemoryBus(), FakeClock(), MemoryLease(shards=2)
    lease.holders = {0: "a", 1: "b"}
    return bus, clock, lease, *(instance(name, lease, bus, clock, read_back_s)
                                for name in ("a", "b"))


def overload_all(bus: MemoryBus, clock: FakeClock) -> None:
    """30 s of an overload of every query of both shards, each on topics of its own."""
    traces = [simulate(replace(OVERLOAD, query_id=q, source_topic=f"in-{q}",
                               sink_topic=f"out-{q}"), 30) for q in (*SHARD_0, *SHARD_1)]
    for trace in traces:
        bus.publish_metrics(*trace)
    clock.ms = max(end_ms(trace) for trace in traces)


def scaled(bus: MemoryBus) -> list[str]:
    return sorted(c.query_id for c in bus.sent_controls())


def test_two_instances_share_the_queries_each_leading_only_its_own_shard() -> None:
    bus, clock, _, a, b = sharded()
    overload_all(bus, clock)
    cycles(a, b)
    assert scaled(bus) == sorted((*SHARD_0, *SHARD_1))  # one tuple per query, no more
    for loop, own, other in ((a, SHARD_0, SHARD_1), (b, SHARD_1, SHARD_0)):
        assert all(loop.leads(q) and loop.queries[q].state.in_flight for q in own)
        assert not any(loop.leads(q) or loop.queries[q].state.in_flight for q in other)
    takeovers = sorted((d.target_value, d.reason) for d in bus.written_decisions()
                       if d.action == TAKEOVER)
    assert [(who, "shard 0 of 2" in a_reason, "shard 1 of 2" in a_reason)
            for who, a_reason in takeovers] == [("a", True, False), ("b", False, True)]


def test_a_shard_that_passes_to_another_instance_is_resumed_there_not_decided_twice() -> None:
    bus, clock, lease, a, b = sharded()
    overload_all(bus, clock)
    cycles(a, b)
    sent = bus.sent_controls()
    lease.holders[1] = "a"  # b's session ended: the group gave its shard to a
    cycles(a, b)
    assert bus.sent_controls() == sent  # b's tuples are a's to wait for, not to send again
    assert all(a.leads(q) and a.queries[q].state.in_flight for q in SHARD_1)
    assert not b.leading


def test_an_instance_that_wakes_believing_it_holds_a_lost_shard_gets_no_tuple_through_for_it(
) -> None:
    bus, clock, lease, a, b = sharded()
    lease.holder = "a"  # a alone at first: it leads both shards
    cycles(a, b, count=1)
    leadership_of(a).believes = frozenset({0, 1})  # frozen while b took shard 1; unaware
    lease.holders[1] = "b"
    cycles(b, count=1)
    overload_all(bus, clock)
    cycles(b, count=1)
    cycles(a, count=1)  # decides all six; its first write for shard 1 is refused
    assert not a.leading and leadership_of(a).releases == 1  # fenced: it stepped down
    sent = scaled(bus)
    assert [q for q in sent if q in SHARD_1] == list(SHARD_1)  # b's, once each
    assert len(sent) == len(set(sent))  # none of a's twice
    assert all(b.queries[q].state.in_flight for q in SHARD_1)


class Modelled(Decided):
    """When (on the fake clock) an instance modelled each query."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock
        self.models: dict[str, list[int]] = {}

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        self.models.setdefault(model.query_id, []).append(self._clock.ms)


def test_a_follower_models_a_query_it_does_not_lead_once_per_follow_slot() -> None:
    bus, clock, _, a, b = sharded()
    a.ports.observer, b.ports.observer = Modelled(clock), Modelled(clock)
    steady = Job(rates=[(0, 200)], per_unit=210, parallelism=2)  # within capacity
    trace = simulate(steady, 60)
    clock.ms = trace[0].batch_end_ms
    published = 0
    for _ in range(80):  # cycles at the default cadence, metrics as they come
        ready = [s for s in trace[published:] if s.batch_end_ms <= clock.ms]
        bus.publish_metrics(*ready)
        published += len(ready)
        cycles(a, b, count=1)
        clock.advance(0.5)
    assert isinstance(a.ports.observer, Modelled) and isinstance(b.ports.observer, Modelled)
    led, followed = a.ports.observer.models["q1"], b.ports.observer.models["q1"]
    interval_ms = int(b.settings.follow_interval_s * 1000)
    slots = [follow_slot("q1", at_ms, interval_ms) for at_ms in followed]
    # b models q1 once in every slot from its first model on, never twice in one
    assert slots == list(range(slots[0], slots[0] + len(slots)))
    assert slots[-1] == follow_slot("q1", led[-1], interval_ms)
    # a, its leader, models it in every cycle from its first model on
    assert led == list(range(led[0], led[-1] + 1, 500))


def test_taking_one_more_shard_over_restates_no_advice_for_the_shards_already_led() -> None:
    bus, clock, lease, a, _ = sharded()
    lease.holders = {0: "a", 1: None}
    bus.publish_metrics(beat("s1", clock.ms))  # q1 (shard 0) has a standby
    cycles(a, count=1)
    clock.advance(60)  # it falls silent: a, leading shard 0, asks for one
    cycles(a, count=1)
    lease.holders[1] = "a"  # then a is given shard 1 too
    cycles(a, count=2)
    [advice] = [d for d in bus.written_decisions() if d.action == "start_standby"]
    assert advice.query_id == "q1"


def test_an_instance_reading_only_its_shards_metrics_decides_and_remembers_only_its_queries(
) -> None:
    bus, clock, _, a, b = sharded(read_back_s=60)
    overload_all(bus, clock)
    cycles(a, b)
    assert scaled(bus) == sorted((*SHARD_0, *SHARD_1))  # one tuple per query, no more
    assert sorted(a.queries) == list(SHARD_0) and sorted(b.queries) == list(SHARD_1)


def test_a_shard_gained_while_reading_only_its_own_is_read_back_and_decided_at_once(
) -> None:
    bus, clock, lease, a, _ = sharded(read_back_s=60)
    lease.holders[1] = None  # b died before it decided anything
    cycles(a, count=1)
    overload_all(bus, clock)
    cycles(a, count=2)
    assert scaled(bus) == list(SHARD_0)
    lease.holders[1] = "a"  # its shard passes to a, which never read it
    cycles(a, count=3)
    assert scaled(bus) == sorted((*SHARD_0, *SHARD_1))


def test_a_shard_handed_over_while_reading_only_its_own_is_forgotten_series_included(
) -> None:
    bus, clock, lease, a, b = sharded(read_back_s=60)
    a.ports.observer = metrics = ControllerMetrics(new_registry())
    lease.holders = {0: "a", 1: "a"}
    overload_all(bus, clock)
    cycles(a, count=2)

    def arrival(query_id: str) -> float | None:
        return metrics.registry.get_sample_value(
            "streamctl_arrival_rate_records_per_second", {"query": query_id})

    assert all(arrival(q) is not None for q in (*SHARD_0, *SHARD_1))
    lease.holders[1] = "b"
    cycles(a, b, count=2)
    assert sorted(a.queries) == list(SHARD_0) and sorted(b.queries) == list(SHARD_1)
    assert [q for q in (*SHARD_0, *SHARD_1) if arrival(q) is not None] == list(SHARD_0)


def test_a_shard_gained_while_reading_only_its_own_asks_for_the_standby_its_query_lost(
) -> None:
    bus, clock, lease, a, _ = sharded(read_back_s=120)
    lease.holders[1] = None  # b died; a never read shard 1
    bus.publish_metrics(beat("s1", clock.ms, query_id=SHARD_1[0]))
    cycles(a, count=1)
    clock.advance(60)  # s1 falls silent before anyone leads its shard
    lease.holders[1] = "a"
    cycles(a, count=3)
    [advice] = [d for d in bus.written_decisions() if d.action == "start_standby"]
    assert advice.query_id == SHARD_1[0] and "it had 1" in advice.reason


def test_a_shard_gained_while_reading_only_its_own_asks_no_standby_of_a_promoted_query_with_one(
) -> None:
    bus, clock, lease, a, _ = sharded(read_back_s=120)
    lease.holders[1] = None  # b died after q4's failover; a never read shard 1
    query = SHARD_1[0]
    promotion = ControlTuple("c-1", query, "query", "active_instance", "s1", 1,
                             "streamctl-controller", f"{query} lost", clock.ms - 5_000)
    bus.control.append(codec_for(ControlTuple).encode(promotion))
    bus.publish_ack(Ack("c-1", query, "s1", 1, Outcome.APPLIED, "promoted", 900, clock.ms))
    cycles(a, count=1)
    lease.holders[1] = "a"
    for _ in range(4):  # s2, the query's new standby, beats all along
        bus.publish_metrics(beat("s2", clock.ms, query_id=query))
        cycles(a, count=1)
        clock.advance(1)
    assert a.leads(query)  # it took the shard over and counts s2 as the query's standby:
    assert [s.instance_id for s in a.standbys.live(query, clock.ms)] == ["s2"]
    assert not any(d.action == "start_standby" for d in bus.written_decisions())
