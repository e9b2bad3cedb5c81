"""The simulator's queueing model: records are conserved, metrics look like the real job's,
and control tuples are applied and acked as `streaming_jobs.runtime` does."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim import profiles, scenarios
from bench.sim.baselines import Threshold
from bench.sim.measures import direction_changes
from bench.sim.model import T0_MS, JobSpec
from bench.sim.policies import Static
from bench.sim.run import Scenario, Trace, World, simulate
from bench.sim.topics import plan
from schemas import ControlTuple, KnobSetting, Outcome, TaskMetrics

JOB = JobSpec(query_id="job", source_topic="in", sink_topic="out")


def _scenario(rate: float, seconds: int = 120, **job: Any) -> Scenario:
    return Scenario("t", profiles.steps("flat", seconds, [(0, rate)], 0),
                    (replace(JOB, **job),), duration_s=seconds, warmup_s=0)


def _batches(trace: Trace, query_id: str) -> list[TaskMetrics]:
    return [m for m in trace.metrics if m.query_id == query_id and m.batch_id >= 0]


def _check_offsets(batches: list[TaskMetrics], cap: int) -> None:
    for before, after in pairwise(batches):
        assert after.batch_id == before.batch_id + 1
        assert after.batch_start_ms >= before.batch_end_ms
        for old, new in zip(before.partitions, after.partitions, strict=True):
            assert new.start_offset == old.end_offset
            assert new.latest_offset >= old.latest_offset
    for m in batches:
        assert m.batch_end_ms - m.batch_start_ms == m.busy_ms
        assert m.input_rows == sum(p.end_offset - max(p.start_offset, 0) for p in m.partitions)
        assert 0 < m.input_rows <= cap + len(m.partitions)
        assert all(p.end_offset <= p.latest_offset for p in m.partitions)


@settings(max_examples=15, deadline=None)
@given(rate=st.floats(20, 2000), selectivity=st.floats(0.1, 2.0),
       per_unit=st.floats(50, 500), cap=st.integers(500, 8000))
def test_records_are_conserved_through_a_pipeline(rate: float, selectivity: float,
                                                  per_unit: float, cap: int) -> None:
    up = replace(JOB, query_id="a", sink_topic="mid", selectivity=selectivity,
                 rate_per_unit=per_unit, max_per_batch=cap)
    down = replace(JOB, query_id="b", source_topic="mid", max_per_batch=cap)
    world = World(Scenario("t", profiles.step(rate, 2, 40, 200), (up, down), warmup_s=0))
    emitted: list[TaskMetrics] = []
    for t_ms in range(1000, 200_001, 1000):
        emitted += world.advance_to(t_ms)[0]
        a, b = world.jobs
        # produced = processed + backlog, for each job, at every tick
        produced = world.source.produced(t_ms)
        assert sum(a.source.end_offsets(t_ms)) == produced == a.processed + a.backlog(t_ms)
        assert b.processed + b.backlog(t_ms) == sum(b.source.end_offsets(t_ms)) == a.output
    for job in world.jobs:
        mine = [m for m in emitted if m.query_id == job.spec.query_id and m.batch_id >= 0]
        assert sum(m.input_rows for m in mine) == job.processed
        assert sum(m.output_rows for m in mine) == job.output
        _check_offsets(mine, cap)
    assert world.jobs[0].output == int(world.jobs[0].processed * selectivity + 1e-9)


def test_metrics_carry_what_the_real_job_reports() -> None:
    trace = simulate(_scenario(300, max_per_batch=1000), Static())
    batches = _batches(trace, "job")
    first = batches[0]
    assert first.batch_id == 0 and all(p.start_offset == -1 for p in first.partitions)
    assert first.source_topics == ("in",) and first.sink_topics == ("out",)
    assert {(m.input_parallelism, m.task_slots, m.trigger_interval_ms, m.config_epoch)
            for m in batches} == {(2, 16, 2000, 0)}
    # 900/s into 2 units of 200/s: capped batches leave the rest behind as latest − end
    assert any(sum(p.latest_offset - p.end_offset for p in m.partitions) > 0 for m in batches)
    _check_offsets(batches, 1000)
    # a batch is busy rows / (μ × units) + the fixed overhead
    assert first.busy_ms == round((first.input_rows / 400 + 1.5) * 1000)


def test_what_waits_is_at_its_most_what_a_plan_left_and_what_arrived_a_trigger_past_it() -> None:
    # 300/s into 2 units of 200/s with batches of 1 000: each batch leaves records behind and
    # runs past its 2 s trigger, so both parts of the policy's backlog show. Each tick holds
    # the most since the tick before: at the tick, or as a batch ended.
    scenario = _scenario(300, max_per_batch=1000)
    trace = simulate(scenario, Static())
    batches = _batches(trace, "job")
    produced, trigger_ms = scenario.profile.produced, round(JOB.trigger_s * 1000)

    def waiting(plan: TaskMetrics, at_ms: int) -> float:
        left = sum(p.latest_offset - p.end_offset for p in plan.partitions)
        past = min(at_ms, plan.batch_start_ms + trigger_ms)
        return left + produced((at_ms - T0_MS) / 1000) - produced((past - T0_MS) / 1000)

    parts_seen, before_ms = [0, 0], T0_MS
    ticks = zip(trace.times_s, trace.waiting["job"], trace.backlog["job"], strict=True)
    for t_s, held, backlog in ticks:
        at_ms = T0_MS + round(t_s * 1000)
        if at_ms >= batches[-1].batch_end_ms:  # the batch running at the end never reported
            break
        planned = [m for m in batches if m.batch_start_ms <= at_ms]
        ended = [waiting(m, m.batch_end_ms) for m in planned
                 if before_ms < m.batch_end_ms <= at_ms]
        now = waiting(planned[-1], at_ms) if planned else backlog
        # the topic holds whole records on each partition, the profile a real count
        assert abs(held - max([now, *ended])) <= 2 * scenario.source_partitions
        parts_seen[0] += planned[-1].input_rows >= 999 if planned else 0  # cut by the cap
        parts_seen[1] += bool(ended) and max(ended) > now
        before_ms = at_ms
    assert all(parts_seen) and max(trace.waiting["job"]) > 1000


def test_an_idle_job_reports_every_ten_seconds() -> None:
    scenario = Scenario("idle", profiles.steps("once", 60, [(0, 100), (5, 0)], 0), (JOB,),
                        duration_s=60, warmup_s=0)
    idle = [m for m in simulate(scenario, Static()).metrics if m.batch_id < 0]
    gaps = [b.batch_start_ms - a.batch_start_ms for a, b in pairwise(idle)]
    assert len(idle) >= 4 and all(g == 10_000 for g in gaps)
    assert all(m.input_rows == 0 and m.partitions[0].start_offset == m.partitions[0].end_offset
               for m in idle)


class _Once:
    """Sends one tuple at a given second and records the acks."""

    name = "once"

    def __init__(self, at_s: int, value: str, epoch: int = 1,
                 parameter: str = "input_parallelism", **together: str) -> None:
        self.at_ms, self.value, self.epoch = at_s * 1000, value, epoch
        self.parameter = parameter
        self.together = tuple(KnobSetting(name, v) for name, v in together.items())
        self.acks: list = []

    def step(self, metrics, acks, now_ms):  # type: ignore[no-untyped-def]
        self.acks += acks
        if now_ms - 1_700_000_000_000 != self.at_ms:
            return []
        return [ControlTuple("c1", "job", "source", self.parameter, self.value,
                             self.epoch, "test", "test", now_ms, together=self.together)]


def test_a_control_tuple_is_applied_after_the_pause_and_acked_with_it() -> None:
    policy = _Once(at_s=40, value="6")
    trace = simulate(_scenario(300, seconds=90, restart_s=4.0), policy)
    [ack] = policy.acks
    assert ack.outcome is Outcome.APPLIED and ack.epoch == 1
    batches = _batches(trace, "job")
    old = [m for m in batches if m.config_epoch == 0]
    new = [m for m in batches if m.config_epoch == 1]
    assert {m.input_parallelism for m in new} == {6} and old and new
    # no batch for the restart; the pause runs from the last old commit to the first new one
    assert new[0].batch_start_ms - old[-1].batch_end_ms == 4000
    assert ack.pause_ms == new[0].batch_end_ms - old[-1].batch_end_ms
    assert trace.units["job"][-1] == 6


def test_a_stale_epoch_or_a_bad_value_is_rejected() -> None:
    for value, epoch in (("6", 0), ("99", 1), ("six", 1)):
        policy = _Once(at_s=10, value=value, epoch=epoch)
        trace = simulate(_scenario(100, seconds=20), policy)
        assert [a.outcome for a in policy.acks] == [Outcome.REJECTED]
        assert trace.units["job"][-1] == 2


def test_a_stateful_job_reports_and_takes_its_state_partitions() -> None:
    job = {"scaling_parameter": "state_partitions", "rate_per_unit": 50.0}
    policy = _Once(at_s=40, value="6", parameter="state_partitions")
    trace = simulate(_scenario(80, seconds=90, **job), policy)
    [ack] = policy.acks
    assert ack.outcome is Outcome.APPLIED and ack.detail == "state_partitions → 6"
    batches = _batches(trace, "job")
    assert {(m.scaling_parameter, m.state_partitions, m.input_parallelism)
            for m in batches if m.config_epoch == 0} == {("state_partitions", 2, 2)}
    assert {m.state_partitions for m in batches if m.config_epoch == 1} == {6}
    # 2 state partitions of 50/s, whatever the Kafka partitions: rows / 100 + the overhead
    first = batches[0]
    assert first.busy_ms == round((first.input_rows / 100 + 1.5) * 1000)
    wrong = _Once(at_s=10, value="6")
    simulate(_scenario(80, seconds=20, **job), wrong)
    assert [a.outcome for a in wrong.acks] == [Outcome.REJECTED]


def test_executors_are_a_swap_acked_once_they_run() -> None:
    job = {"scaling_parameter": "state_partitions", "rate_per_unit": 50.0, "task_slots": 2,
           "executor_cores": 1, "max_executors": 8, "executor_start_s": 8.0, "parallelism": 6}
    policy = _Once(at_s=40, value="6", parameter="executors")
    trace = simulate(_scenario(80, seconds=90, **job), policy)
    [ack] = policy.acks
    assert (ack.outcome, ack.pause_ms, ack.acked_at_ms) == (Outcome.APPLIED, 0, T0_MS + 48_000)
    batches = _batches(trace, "job")
    assert {(m.executor_cores, m.max_executors) for m in batches} == {(1, 8)}
    assert {m.task_slots for m in batches if m.batch_end_ms <= T0_MS + 48_000} == {2}
    assert batches[-1].task_slots == 6 and batches[-1].config_epoch == 1
    # no restart: batches keep coming through the change, 6 partitions now on 6 slots
    assert trace.units["job"][39] == 2 and trace.units["job"][-1] == 6
    too_many = _Once(at_s=10, value="9", parameter="executors")
    simulate(_scenario(80, seconds=20, **job), too_many)
    assert [a.outcome for a in too_many.acks] == [Outcome.REJECTED]


def _epochs(trace: Trace) -> dict[int, set[tuple[int, int, int]]]:
    """Per epoch, the (input parallelism, batch cap, task slots) its batches reported."""
    found: dict[int, set[tuple[int, int, int]]] = {}
    for m in _batches(trace, "job"):
        found.setdefault(m.config_epoch, set()).add(
            (m.input_parallelism, m.max_offsets_per_trigger, m.task_slots))
    return found


def test_a_batch_cap_set_together_with_the_knob_is_applied_in_one_restart() -> None:
    knob_first = _Once(at_s=40, value="6", max_offsets_per_trigger="6000")
    trace = simulate(_scenario(300, seconds=90), knob_first)
    assert [a.outcome for a in knob_first.acks] == [Outcome.APPLIED]
    assert _epochs(trace) == {0: {(2, 4000, 16)}, 1: {(6, 6000, 16)}}
    cap_first = _Once(at_s=40, value="6000", parameter="max_offsets_per_trigger",
                      input_parallelism="6")
    assert _epochs(simulate(_scenario(300, seconds=90), cap_first))[1] == {(6, 6000, 16)}


def test_a_batch_cap_set_together_with_executors_restarts_into_both() -> None:
    job = {"task_slots": 2, "executor_cores": 1, "max_executors": 8, "executor_start_s": 8.0}
    policy = _Once(at_s=40, value="6", parameter="executors", max_offsets_per_trigger="6000")
    trace = simulate(_scenario(300, seconds=90, **job), policy)
    [ack] = policy.acks
    assert ack.outcome is Outcome.APPLIED and ack.pause_ms > 0  # a restart, not a swap
    after = _epochs(trace)[1]
    assert {cap for _, cap, _ in after} == {6000} and max(s for _, _, s in after) == 6


def test_a_batch_cap_beyond_the_jobs_limit_is_rejected_and_the_limit_reported() -> None:
    within = _Once(at_s=10, value="50000", parameter="max_offsets_per_trigger")
    trace = simulate(_scenario(100, seconds=40, max_batch_cap=50_000), within)
    assert [a.outcome for a in within.acks] == [Outcome.APPLIED]
    assert {m.max_batch_cap for m in _batches(trace, "job")} == {50_000}
    assert _epochs(trace)[1] == {(2, 50_000, 16)}
    beyond = _Once(at_s=10, value="50001", parameter="max_offsets_per_trigger")
    simulate(_scenario(100, seconds=20, max_batch_cap=50_000), beyond)
    assert [a.outcome for a in beyond.acks] == [Outcome.REJECTED]
    # a job starts with a cap within its limit, as the runtime's start checks
    with pytest.raises(ValueError, match="max_per_batch=5000"):
        replace(JOB, max_per_batch=5000, max_batch_cap=4000)


def test_plan_prorates_the_cap_by_lag_like_the_kafka_source() -> None:
    assert plan([300, 100], 1000) == [300, 100]
    assert plan([3000, 1000], 1000) == [750, 250]
    assert plan([9999, 1], 1000) == [999, 1]


def test_direction_changes_count_flips_only() -> None:
    assert direction_changes([2, 2, 4, 8, 8]) == 0
    assert direction_changes([2, 4, 3, 5]) == 2


def test_the_threshold_baseline_adds_round_ratio_units() -> None:
    # 900/s on 2 units: batches overrun the 2 s trigger several times over
    trace = simulate(_scenario(900, seconds=90), Threshold())
    [(at_s, control)] = trace.controls
    busy = [m.busy_ms for m in _batches(trace, "job") if m.batch_end_ms <= T0_MS + at_s * 1000]
    ratio = sum(busy) / len(busy) / 2000
    assert ratio > 3 and control.value == str(2 + round(ratio))


def test_every_scenario_runs_every_policy_quickly() -> None:
    # the runner used by `python -m bench.sim`, on the cheapest policy
    for scenario in scenarios.all_scenarios():
        trace = simulate(scenario, Static())
        assert len(trace.times_s) == scenario.duration_s
