"""The knob a job names is the one sized — its state partitions as well as its input
parallelism — and on a cluster executors come first when the task slots run out."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from controller.core.batches import PartitionShares
from controller.core.cluster import CoreGrant
from controller.core.model import QueryModel, evaluate
from controller.core.parallelism import CORES_WANTED, executors_wanted, knob_range
from controller.core.policy import decide
from controller.core.recovery import History, recover
from controller.core.results import NotReady, Recommend, Scale
from controller.core.season import Forecast
from controller.core.sizing import Inflow
from controller.core.state import (
    EXECUTORS_REGISTER_WAIT_S,
    ControlState,
    InFlight,
    ack_overdue,
    applied,
    settled,
)
from controller.loop.fakes import MemoryBus, MemoryCluster
from controller.settings import ControllerSettings, ModelSettings, PolicySettings
from schemas import ControlTuple
from streaming_jobs.runtime.query.lifecycle import EXECUTOR_WAIT_S
from tests.unit.controller.traces import Job, closed_loop, closed_loop_of, simulate

NOW = 1_700_000_000_000
POLICY = PolicySettings(target_utilisation=0.8, high_water_utilisation=0.9,
                        low_water_utilisation=0.4, catch_up_s=60, max_parallelism=64,
                        scale_down_stabilisation_s=120, max_scale_down_share=0.75, cooldown_s=30,
                        change_prior_s=0)
# change_prior_s=0: the sizing arithmetic below leaves out the backlog that builds while a
# change is applied, which has tests of its own (test_policy).
KEY_SKEW = ("key skew across the state partitions is not measured (the job reports no "
            "per-partition figures)")


def stateful(**changes: Any) -> QueryModel:
    """The fraud job's shape: its scoring runs in 2 state partitions of 50/s each while 4
    Kafka partitions feed it; 300/s arrive, 6 000 records behind and growing. Sized:
    ceil((300 + 6 000 / 60) / (50 × 0.8)) = 10 state partitions."""
    base = QueryModel(
        query_id="fraud", samples=10, config_epoch=0, arrival_rate=300, throughput=100,
        busy_ratio=1.0, rate_per_unit=50, parallelism=2, units=2, source_partitions=4,
        task_slots=16, backlog_records=6_000, backlog_trend_records_per_s=200,
        time_to_drain_s=math.inf, knob="state_partitions", job_max=64)
    return replace(base, **changes)


def on_cluster(slots: int, cores: int = 1, most: int = 8, **changes: Any) -> QueryModel:
    return stateful(task_slots=slots, executor_cores=cores, max_executors=most, **changes)


def scaled(verdict: object) -> tuple[str, int, int]:
    assert isinstance(verdict, Scale), verdict
    return verdict.parameter, verdict.current, verdict.target


def test_a_stateful_job_is_sized_by_its_state_partitions() -> None:
    verdict = decide(stateful(), ControlState(), NOW, POLICY)
    assert scaled(verdict) == ("state_partitions", 2, 10)
    assert isinstance(verdict, Scale)
    assert verdict.reason.endswith(
        f"10 units of state_partitions drain it in 60 s at 80% utilisation; {KEY_SKEW}")


def test_state_partitions_have_no_kafka_floor_but_the_jobs_and_the_slots_caps() -> None:
    assert knob_range(stateful(), POLICY).low == 1
    assert knob_range(stateful(knob="input_parallelism"), POLICY).low == 4
    capped = decide(stateful(job_max=6), ControlState(), NOW, POLICY)
    assert scaled(capped)[2] == 6
    assert isinstance(capped, Scale)
    assert "capped at 6 by the job's max_state_partitions" in capped.reason
    slots = decide(stateful(task_slots=4), ControlState(), NOW, POLICY)
    assert scaled(slots)[2] == 4
    assert isinstance(slots, Scale) and "capped at 4 by task slots" in slots.reason


def test_a_quiet_stateful_job_steps_down_below_the_kafka_partition_count() -> None:
    quiet = stateful(parallelism=3, units=3, arrival_rate=10, backlog_records=0,
                     backlog_trend_records_per_s=0, time_to_drain_s=0)
    verdict = decide(quiet, ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    assert scaled(verdict) == ("state_partitions", 3, 1)
    held = decide(replace(quiet, knob="input_parallelism", parallelism=4, units=4),
                  ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    assert not isinstance(held, Scale) and "already at the floor of 4" in held.reason


def test_a_hot_kafka_partition_is_not_called_skew_of_a_state_partitioned_job() -> None:
    """A shuffle spreads keys, not Kafka partitions; key skew itself is not measurable."""
    hot = stateful(partition_lag_shares=PartitionShares.listed(("in/0", 0.9), ("in/1", 0.1)))
    verdict = decide(hot, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and "partition in/0" not in verdict.reason
    assert KEY_SKEW in verdict.reason
    source = decide(replace(hot, knob="input_parallelism"), ControlState(), NOW, POLICY)
    assert isinstance(source, Scale) and "skew: partition in/0 holds 90%" in source.reason


FRAUD = Job(rates=[(0, 60)], per_unit=50, parallelism=2, partitions=4, input_parallelism=4,
            knob="state_partitions", max_state_partitions=64, query_id="fraud")


def test_the_model_counts_the_state_partitions_as_units_not_the_source_tasks() -> None:
    found = evaluate("fraud", tuple(simulate(FRAUD, 30)), ModelSettings())
    assert isinstance(found, QueryModel)
    assert (found.knob, found.parallelism, found.units, found.job_max) == (
        "state_partitions", 2, 2, 64)
    assert found.rate_per_unit == pytest.approx(50, rel=0.02)
    # Read as the input parallelism's (4 source tasks) the same batches halve μ.
    as_source = tuple(replace(s, scaling_parameter="input_parallelism")
                      for s in simulate(FRAUD, 30))
    wrong = evaluate("fraud", as_source, ModelSettings())
    assert isinstance(wrong, QueryModel) and wrong.rate_per_unit == pytest.approx(25, rel=0.02)


def test_a_knob_this_controller_cannot_size_is_not_ready_with_the_reason() -> None:
    trace = simulate(FRAUD, 30)
    unknown = tuple(replace(s, scaling_parameter="gpu_count") for s in trace)
    found = evaluate("fraud", unknown, ModelSettings())
    assert isinstance(found, NotReady) and "'gpu_count'" in found.reason
    assert "upgrade the controller" in found.reason
    stateless = tuple(replace(s, state_partitions=0) for s in trace)
    found = evaluate("fraud", stateless, ModelSettings())
    assert isinstance(found, NotReady) and "reports none" in found.reason


def test_on_a_cluster_out_of_slots_the_remedy_is_executors_first() -> None:
    verdict = decide(on_cluster(slots=2), ControlState(), NOW, POLICY)
    assert scaled(verdict) == ("executors", 2, 8)  # 10 wanted, at most 8 executors
    assert isinstance(verdict, Scale) and verdict.reason.endswith(
        "10 units of state_partitions wanted but 2 task slots run (2 executors × 1 cores): "
        "asking for 8 executors (the job's max 8) first, then state_partitions 2 → 8 once "
        f"they run; {KEY_SKEW}")
    assert verdict.then == 8
    # ceil(10 / 2 cores) = 5 executors; and never past what the knob may reach anyway.
    assert scaled(decide(on_cluster(slots=2, cores=2), ControlState(), NOW, POLICY)) == (
        "executors", 1, 5)
    assert scaled(decide(on_cluster(slots=2, job_max=3), ControlState(), NOW, POLICY)) == (
        "executors", 2, 3)
    assert executors_wanted(on_cluster(slots=16), 10, POLICY, None, NOW) is None
    three = decide(on_cluster(slots=2, cores=2, most=3), ControlState(), NOW, POLICY)
    assert isinstance(three, Scale) and (three.target, three.then) == (3, 6)


def test_at_the_jobs_max_executors_the_knob_fills_the_slots_then_throttle() -> None:
    full = on_cluster(slots=8)
    verdict = decide(full, ControlState(), NOW, POLICY)
    assert scaled(verdict) == ("state_partitions", 2, 8)
    assert isinstance(verdict, Scale) and (
        "capped at 8 by task slots (8 executors × 1 cores, the job's max_executors)"
        in verdict.reason)
    at_top = decide(replace(full, parallelism=8, units=8, arrival_rate=500), ControlState(),
                    NOW, POLICY)
    assert isinstance(at_top, Recommend) and at_top.action == "throttle"
    assert at_top.reason.startswith("at 8 units (task slots (8 executors × 1 cores, the job's "
                                    "max_executors)) capacity is 400/s against 500/s")


def test_on_a_shared_cluster_the_request_is_cut_to_the_cores_granted() -> None:
    """10 units wanted, 2 task slots: 6 more executors wanted (the job's max 8), the figure
    the loop divides the cluster's free cores by, whatever it was granted."""
    cut = decide(on_cluster(slots=2, cluster_grant=CoreGrant(3, "the cluster has 3 free cores")),
                 ControlState(), NOW, POLICY)
    assert scaled(cut) == ("executors", 2, 5)
    assert isinstance(cut, Scale) and cut.then == 5 and cut.figures[CORES_WANTED] == 6
    assert ("asking for 5 executors (the job's max 8; 8 wanted, no room for more: the cluster "
            "has 3 free cores) first") in cut.reason
    ample = decide(on_cluster(slots=2, cluster_grant=CoreGrant(9)), ControlState(), NOW, POLICY)
    assert scaled(ample) == ("executors", 2, 8) and ample.figures[CORES_WANTED] == 6


def test_a_query_sized_ahead_of_a_forecast_peak_keeps_its_want_while_it_waits_a_division(
        ) -> None:
    """Not backlogged, but its repeating load's peak needs more executors than it runs: the
    hold it gets while the cores are divided still names what it wants, or the division would
    never count it."""
    calm = on_cluster(slots=2, arrival_rate=60, backlog_records=0,
                      backlog_trend_records_per_s=0, time_to_drain_s=0.0,
                      cluster_grant=CoreGrant(4, pending=True),
                      forecast=Forecast(peak=400, in_s=600, period_s=86_400, error=0.05,
                                        checked_s=3600))
    verdict = decide(calm, ControlState(), NOW, POLICY)
    assert not isinstance(verdict, (Scale, NotReady)), verdict
    assert verdict.figures[CORES_WANTED] > 0


def test_granted_no_core_the_knob_fills_the_slots_saying_who_took_the_cores() -> None:
    note = "the cluster's 2 free cores went to sensor (priority 1, asked already) first"
    none = on_cluster(slots=2, parallelism=1, units=1, cluster_grant=CoreGrant(0, note))
    verdict = decide(none, ControlState(), NOW, POLICY)
    assert scaled(verdict) == ("state_partitions", 1, 2)
    assert isinstance(verdict, Scale) and verdict.figures[CORES_WANTED] == 6 and (
        f"capped at 2 by task slots (2 executors × 1 cores; no room for another executor: {note})"
        in verdict.reason)
    full = decide(replace(none, parallelism=2, units=2), ControlState(), NOW, POLICY)
    assert isinstance(full, Recommend) and full.action == "throttle"
    assert full.figures[CORES_WANTED] == 6 and full.reason.startswith(
        f"at 2 units (task slots (2 executors × 1 cores; no room for another executor: {note}))")


def test_in_local_mode_the_slots_cap_the_knob_and_no_executors_are_asked_for() -> None:
    for knob in ("state_partitions", "input_parallelism"):
        verdict = decide(stateful(task_slots=4, knob=knob, source_partitions=2),
                         ControlState(), NOW, POLICY)
        assert scaled(verdict) == (knob, 2, 4)


def test_the_knob_follows_the_executors_at_once_not_after_the_cooldown() -> None:
    more = InFlight("c", 8, 2, NOW, current=2, parameter="executors", then=8)
    state = applied(ControlState(in_flight=more), NOW, 30)
    assert state.follow_up == 8 and state.cooldown_until_ms == NOW + 30_000
    # The newest metrics may still show the old slots: the knob goes where it was sized to.
    verdict = decide(on_cluster(slots=2), state, NOW + 1_000, POLICY)
    assert scaled(verdict) == ("state_partitions", 2, 8)
    assert isinstance(verdict, Scale) and verdict.reason.startswith(
        "the executors asked for run; state_partitions follows as sized with them: 2 → 8")
    # Past the cooldown the follow-up is stale: the query is sized afresh.
    assert "follows" not in decide(on_cluster(slots=8), state, NOW + 31_000, POLICY).reason
    # Rejected, failed or timed out: nothing follows.
    assert settled(ControlState(in_flight=more), NOW, 30).follow_up == 0


def test_an_executors_tuple_is_awaited_the_jobs_wait_for_them_beyond_the_ack_timeout() -> None:
    """The job acks once they run or after its own 90 s wait for them (the request stands);
    timed out at the ack timeout, that ack was ignored and the knob never followed."""
    more = InFlight("c", 8, 2, NOW, current=2, parameter="executors", then=8)
    knob = replace(more, parameter="state_partitions")
    assert ack_overdue(ControlState(in_flight=knob), NOW + 90_000, 90)
    assert not ack_overdue(ControlState(in_flight=more), NOW + 179_000, 90)
    assert ack_overdue(ControlState(in_flight=more), NOW + 180_000, 90)
    sent = ControlTuple("c-8", "fraud", "cluster", "executors", "8", 3, "streamctl-controller",
                        "backlog", NOW - 120_000)
    state = recover(History((sent,), (), ()), NOW, issuer="streamctl-controller",
                    cooldown_s=30, ack_timeout_s=90).states["fraud"]
    assert state.in_flight is not None and state.in_flight.parameter == "executors"


def test_the_controller_awaits_an_executors_ack_as_long_as_the_job_waits_for_them() -> None:
    assert EXECUTORS_REGISTER_WAIT_S == EXECUTOR_WAIT_S


def test_only_a_knob_change_has_its_effect_measured() -> None:
    """More executors raise capacity only once the knob follows, so there is nothing to
    judge them by; a knob change is judged as before."""
    knob = InFlight("c", 8, 2, NOW, current=2, rate_per_unit=50, parameter="state_partitions")
    assert applied(ControlState(in_flight=knob), NOW, 30).effect_check is not None
    more = replace(knob, parameter="executors")
    assert applied(ControlState(in_flight=more), NOW, 30).effect_check is None


def test_a_restarted_controller_waits_for_the_ack_of_the_knob_it_sent() -> None:
    sent = ControlTuple("c-7", "fraud", "state", "state_partitions", "8", 3,
                        "streamctl-controller", "backlog", NOW - 5_000)
    state = recover(History((sent,), (), ()), NOW, issuer="streamctl-controller",
                    cooldown_s=30, ack_timeout_s=90).states["fraud"]
    assert state.in_flight is not None
    assert (state.in_flight.parameter, state.in_flight.target) == ("state_partitions", 8)


STEP = replace(FRAUD, rates=[(0, 60), (30, 300)], trigger_s=1.0, overhead_s=0.3,
               max_per_batch=2000, report_cap=True)


def test_the_loop_sends_state_partitions_to_a_stateful_job_in_local_mode() -> None:
    sent = closed_loop(STEP, 240, ControllerSettings())
    assert [(c.parameter, c.operator_id) for _, c, _ in sent] == [("state_partitions", "state")]
    assert int(sent[0][1].value) >= 8  # 300/s at 50/s per partition and 70 %


def test_the_loop_asks_a_cluster_for_executors_and_then_sets_the_state_partitions() -> None:
    job = replace(STEP, task_slots=2, executor_cores=1, max_executors=12)
    sent = closed_loop(job, 300, ControllerSettings())
    assert [c.parameter for _, c, _ in sent] == ["executors", "state_partitions"], sent
    (sent_at, more, _), (then_at, knob, before) = sent
    assert before.task_slots == int(more.value) >= int(knob.value) > 2
    assert then_at - sent_at == 5  # the loop's next cycle after the ack, no cooldown


def on_shared_cluster(query_id: str, priority: int, **changes: Any) -> Job:
    """A job of `STEP`'s load on 2 one-core executors of a shared cluster, at most 12."""
    return replace(STEP, query_id=query_id, source_topic=f"in-{query_id}",
                   sink_topic=f"out-{query_id}", parallelism=1, task_slots=2, executor_cores=1,
                   max_executors=12, cluster_priority=priority, **changes)


KEEPING = ControllerSettings(policy=PolicySettings(release_spare_executors=False))
"""The division's tests: jobs that keep the executor their first unit leaves spare."""


def test_two_jobs_wanting_more_than_a_shared_cluster_has_the_higher_priority_gets_it() -> None:
    """8 cores, each job holding 2: the 4 free go to the job of priority 1, in one request;
    the other is sized within its slots, saying where the cores went (later, that none are
    free)."""
    job = on_shared_cluster
    bus = MemoryBus()
    sent = closed_loop_of([job("low", 0), job("high", 1)], 120, KEEPING,
                          cluster_cores=8, bus=bus)
    executors = [(c.query_id, c.value) for _, c, _ in sent if c.parameter == "executors"]
    assert executors == [("high", "6")], sent
    assert ("low", "state_partitions", "2") in [(c.query_id, c.parameter, c.value)
                                                for _, c, _ in sent]
    at_ceiling = [d.reason for d in bus.written_decisions() if d.query_id == "low"
                  and "no room for another executor" in d.reason]
    assert "another executor: the cluster's 4 free cores went to high (priority 1" in (
        at_ceiling[0]), at_ceiling
    assert "another executor: the cluster has 0 free cores" in at_ceiling[-1], at_ceiling


def test_a_want_of_cores_asks_for_a_reading_once_and_the_executors_applied_once_more() -> None:
    """The want begins at the load's step and lasts until its executors are granted (its
    state partitions follow them, and want no cores); their ack asks for the reading that
    shows them taken."""
    cluster = MemoryCluster(None)
    sent = closed_loop_of([on_shared_cluster("only", 0)], 120, KEEPING,
                          cluster_cores=8, cluster=cluster)
    assert [c.parameter for _, c, _ in sent][:1] == ["executors"], sent
    assert cluster.soon == 2


def test_cores_a_tuple_in_flight_asked_for_go_to_no_other_query_whatever_its_priority() -> None:
    """The master may not have started the executors yet (their tuple is unanswered here), so
    its free cores still count them: a job of higher priority whose load rises meanwhile is
    sized within its slots instead of asking for the same cores."""
    bus = MemoryBus()
    jobs = [on_shared_cluster("first", 0),
            on_shared_cluster("urgent", 5, rates=[(0, 60), (50, 300)])]
    sent = closed_loop_of(jobs, 130, KEEPING, cluster_cores=8, bus=bus,
                          executors_answered=False)
    assert [(c.query_id, c.value) for _, c, _ in sent if c.parameter == "executors"] == [
        ("first", "6")], sent
    assert any(d.query_id == "urgent" and "went to first (priority 0, asked already)" in d.reason
               for d in bus.written_decisions()), [d.reason for d in bus.written_decisions()]


def test_executors_spare_for_a_stabilisation_period_are_released_unless_more_is_coming(
        ) -> None:
    """3 state partitions at 100/s on 3 of its 4 two-core executors' 8 slots, within band (the
    load needs 3 at the target): 2 executors hold them, and the other 2 go back to the cluster
    once spare for `scale_down_stabilisation_s`; not before, not with an upstream's resizing
    on its way, not while a quiet query's knob is still to step down, not in local mode."""
    calm = on_cluster(slots=8, cores=2, parallelism=3, units=3, arrival_rate=200, throughput=200,
                      backlog_records=0, backlog_trend_records_per_s=0, time_to_drain_s=0,
                      rate_per_unit=100)
    spare = ControlState(spare_since_ms=NOW - 120_000)
    verdict = decide(calm, spare, NOW, POLICY)
    assert scaled(verdict) == ("executors", 4, 2)
    assert isinstance(verdict, Scale) and verdict.reason.startswith(
        "3 units of state_partitions need 2 of its 4 executors × 2 cores"), verdict.reason
    assert verdict.reason.endswith(
        "120 s without a backlog: releasing 4 cores to the cluster"), verdict.reason

    def kept(model: QueryModel, state: ControlState, *context: Any) -> bool:
        return not isinstance(decide(model, state, NOW, *context), Scale)

    assert kept(calm, ControlState(spare_since_ms=NOW - 119_000), POLICY)
    assert kept(calm, spare, POLICY, Inflow(steady=50.0), "a")  # more on its way
    assert kept(calm, spare, replace(POLICY, release_spare_executors=False))
    assert kept(replace(calm, task_slots=4), spare, POLICY)  # 2 executors for 3: none spare
    assert kept(replace(calm, executor_cores=0, max_executors=0), spare, POLICY)  # local mode
    # Quiet at 60/s, its knob to step down 3 → 1 first (one swap for both, after it).
    quiet = replace(calm, arrival_rate=60, throughput=60)
    assert kept(quiet, replace(spare, quiet_since_ms=NOW - 60_000), POLICY)
    # Within band above its target on one-core executors (260/s needs 4 units at 80 %): the
    # slots of the 4 are kept, not of the 3 it runs.
    busier = replace(calm, arrival_rate=260, throughput=260, executor_cores=1)
    assert scaled(decide(busier, spare, NOW, POLICY)) == ("executors", 8, 4)
    # A repeating load's peak ahead (380/s, 5 units at 80 %): sized for ahead, nothing released.
    ahead = replace(busier, arrival_rate=200, throughput=200, forecast=Forecast(
        peak=380, in_s=600, period_s=86_400, error=0.05, checked_s=3_600))
    assert scaled(decide(ahead, spare, NOW, POLICY)) == ("state_partitions", 3, 5)


def test_after_a_load_falls_the_knob_scales_down_then_the_spare_executors_are_released() -> None:
    job = replace(STEP, task_slots=2, executor_cores=1, max_executors=12,
                  rates=[(0, 60), (30, 300), (200, 40)])
    sent = closed_loop(job, 600, ControllerSettings())
    changes = [(c.parameter, int(c.value)) for _, c, _ in sent]
    executors = [value for parameter, value in changes if parameter == "executors"]
    assert executors[0] > 2 and executors[-1] < executors[0], changes
    last_knob = max(i for i, (parameter, _) in enumerate(changes) if parameter != "executors")
    assert changes[-1][0] == "executors" and len(changes) - 1 > last_knob, changes
    assert executors[-1] == changes[last_knob][1], changes  # one-core executors, one a unit
