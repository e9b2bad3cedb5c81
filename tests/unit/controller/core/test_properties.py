"""Properties of the policy (hypothesis): bounds, no oscillation on a stationary noisy load,
monotone sizing, and a lost instance reported within its timeout — for either knob a job may
name (input parallelism, state partitions), in local mode and on a cluster that can add
executors; and the same tuples from the loop with its memo of derived figures as without."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.judgement import lost_timeout_s
from controller.core.model import QueryModel
from controller.core.parallelism import executors_wanted, knob_range, running_executors
from controller.core.policy import decide, target_units
from controller.core.results import Scale
from controller.core.sizing import NO_INFLOW, Inflow
from controller.core.state import ControlState
from controller.loop.fakes import FakeClock, MemoryBus
from controller.settings import PolicySettings
from schemas import ControlTuple
from tests.unit.controller.traces import (
    T0_MS,
    Job,
    closed_loop,
    derived_afresh,
    memory_loop,
    probed_loop,
    simulate,
)

NOW = T0_MS + 3_600_000
POLICY = PolicySettings()

rates = st.floats(min_value=0, max_value=1e5, allow_nan=False)
backlogs = st.floats(min_value=0, max_value=1e7, allow_nan=False)


KNOBS = st.sampled_from(["input_parallelism", "state_partitions"])


@st.composite
def models(draw: st.DrawFn) -> QueryModel:
    """Either knob; in local mode, or on a cluster whose slots are executors × cores."""
    parallelism, cores = draw(st.integers(1, 64)), draw(st.sampled_from([0, 0, 1, 2, 4]))
    slots = (draw(st.integers(1, 16)) * cores if cores else draw(st.integers(0, 64)))
    model = QueryModel(
        query_id="q", samples=10, config_epoch=0, arrival_rate=draw(rates),
        throughput=100, busy_ratio=draw(st.floats(0, 1)),
        rate_per_unit=draw(st.floats(1, 1e4)), parallelism=parallelism, units=parallelism,
        source_partitions=draw(st.integers(1, 32)), task_slots=slots,
        backlog_records=draw(backlogs),
        backlog_trend_records_per_s=draw(st.floats(-1e4, 1e4)), time_to_drain_s=math.inf,
        batch_overhead_s=draw(st.floats(0, 5)), batch_cap=draw(st.integers(0, 100_000)),
        knob=draw(KNOBS), job_max=draw(st.sampled_from([0, 8, 64])), executor_cores=cores,
        max_executors=draw(st.integers(slots // cores, 32)) if cores else 0)
    return replace(model, units=model.units_at(parallelism))


inflows = st.one_of(st.just(NO_INFLOW), st.builds(Inflow, rates, backlogs, rates))
"""What an upstream's resizing sends a reader (`topology`): none, or steady + a burst."""


@given(models(), st.booleans(), inflows)
def test_decisions_stay_within_bounds(model: QueryModel, quiet_long: bool,
                                      inflow: Inflow) -> None:
    state = ControlState(quiet_since_ms=NOW - 10**7 if quiet_long else None)
    verdict = decide(model, state, NOW, POLICY, inflow)
    if isinstance(verdict, Scale) and verdict.parameter == "executors":
        assert model.executor_cores > 0 and model.max_executors > 0  # only on a cluster
        assert verdict.current == model.task_slots // model.executor_cores
        if verdict.action == "scale_down":
            # Released unbacklogged, keeping the slots of every unit it runs.
            assert not inflow.any
            assert verdict.target == max(1, math.ceil(model.units / model.executor_cores))
            return
        # Up within the job's maximum, and only for units the slots cannot hold (never for
        # slots the knob could not use).
        assert verdict.target <= model.max_executors
        needed = verdict.figures["required"]
        assert needed > model.task_slots
        assert (verdict.target - 1) * model.executor_cores < min(needed, POLICY.max_parallelism)
    elif isinstance(verdict, Scale):
        assert verdict.parameter == model.knob
        limits = knob_range(model, POLICY)
        assert limits.low <= verdict.target
        if verdict.action == "scale_up":
            assert model.parallelism < verdict.target <= limits.high
        else:  # from above the ceiling too, only by the bounded step towards it
            assert verdict.target < model.parallelism
            assert verdict.target >= math.ceil(
                verdict.current * (1 - POLICY.max_scale_down_share))


@given(models(), rates, rates, backlogs, backlogs)
def test_target_parallelism_is_monotone_in_arrival_and_backlog(
        model: QueryModel, a1: float, a2: float, b1: float, b2: float) -> None:
    def units(arrival: float, backlog: float) -> float:
        found = target_units(replace(model, arrival_rate=arrival, backlog_records=backlog),
                             POLICY)
        return math.inf if found is None else found  # None: no number of units suffices

    (lo_a, hi_a), (lo_b, hi_b) = sorted((a1, a2)), sorted((b1, b2))
    assert units(lo_a, lo_b) <= units(hi_a, lo_b) <= units(hi_a, hi_b)


@given(models(), st.integers(1, 200), st.integers(1, 200))
def test_executors_asked_for_are_monotone_in_the_units_wanted(model: QueryModel, w1: int,
                                                               w2: int) -> None:
    def executors(wanted: int) -> int:
        found = executors_wanted(model, wanted, POLICY, None, NOW)
        if found is None:
            return running_executors(model)
        # The knob that follows fits the slots asked for and uses more than those running.
        assert model.task_slots < found.then <= found.executors * model.executor_cores
        assert found.then <= wanted
        return found.executors

    low, high = sorted((w1, w2))
    assert running_executors(model) <= executors(low) <= executors(high)
    assert executors(high) <= max(model.max_executors, running_executors(model))


def noisy_loop(job: Job, noise: float, seed: int, seconds: int,
               probed: bool = False) -> list[tuple[float, str]]:
    """The real loop over a job that applies what it is sent (after a 5 s pause) under a
    load redrawn within ±noise of the job's rate every 5 s — every second when the loop
    probes the broker each second, so every probe interval sees fresh noise; returns (time,
    direction), an executor request counting as a step up or down like the knob's."""
    return [(t, "up" if int(control.value) > current(control.parameter, before) else "down")
            for t, control, before in noisy_sent(job, noise, seed, seconds, probed)]


def noisy_sent(job: Job, noise: float, seed: int, seconds: int,
               probed: bool) -> list[tuple[float, ControlTuple, Job]]:
    """What `noisy_loop` sends: (time, tuple, the job before it)."""
    rng = random.Random(seed)
    base = job.rates[0][1]
    steps = [(float(t), base * (1 + rng.uniform(-noise, noise)))
             for t in range(0, seconds, 1 if probed else 5)]
    noisy = replace(job, rates=steps)
    return probed_loop(noisy, seconds).sent if probed else closed_loop(noisy, seconds)


def current(parameter: str, job: Job) -> int:
    return job.task_slots // job.executor_cores if parameter == "executors" else job.parallelism


@settings(max_examples=20, deadline=None)
@given(st.floats(100, 600), st.floats(0, 0.25), st.integers(2, 8), st.integers(0, 10**6),
       KNOBS, st.booleans(), st.booleans())
def test_a_stationary_noisy_load_does_not_oscillate(rate: float, noise: float,
                                                    parallelism: int, seed: int, knob: str,
                                                    cluster: bool, probed: bool) -> None:
    """On a cluster the job starts with as many slots as its knob (one core per executor),
    so any scale-up needs executors first. Probed: the loop also reads the broker's end
    offsets every second (`probes`)."""
    job = Job(rates=[(0, rate)], per_unit=200, parallelism=parallelism, overhead_s=1.5,
              max_per_batch=4000, trigger_s=2.0, report_cap=True, warm_up_s=3.0, knob=knob,
              partitions=2 if knob == "input_parallelism" else 4)
    if cluster:
        job = replace(job, task_slots=parallelism, executor_cores=1, max_executors=16)
    actions = noisy_loop(job, noise, seed, 600, probed)
    stabilisation = POLICY.scale_down_stabilisation_s
    for (t1, d1), (_, d2), (t3, d3) in zip(actions, actions[1:], actions[2:], strict=False):
        assert not (d1 == "up" and d2 == "down" and d3 == "up"
                    and t3 - t1 <= stabilisation), actions
    assert sum(1 for _, d in actions if d == "up") <= 2, actions


@settings(max_examples=10, deadline=None)
@given(st.floats(100, 600), st.floats(0, 0.25), st.integers(2, 8), st.integers(0, 10**6),
       KNOBS, st.booleans())
def test_the_memo_of_derived_figures_changes_no_decision_on_a_noisy_load(
        rate: float, noise: float, parallelism: int, seed: int, knob: str,
        probed: bool) -> None:
    """As every trace (`test_replay`): the loop with each query's memo, and with one that
    derives every figure and scans each window afresh, sends the same tuples at the same
    times for the same reasons (their figures included)."""
    job = Job(rates=[(0, rate)], per_unit=200, parallelism=parallelism, overhead_s=1.5,
              max_per_batch=4000, trigger_s=2.0, report_cap=True, warm_up_s=3.0, knob=knob,
              partitions=2 if knob == "input_parallelism" else 4)

    def sent() -> list[tuple[float, str, str, int, str]]:
        return [(t, c.parameter, c.value, c.epoch, c.reason)
                for t, c, _ in noisy_sent(job, noise, seed, 600, probed)]

    kept = sent()
    with derived_afresh():
        assert sent() == kept


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 10), st.integers(0, 3))
def test_a_lost_instance_is_reported_within_the_timeout(trigger_s: float, extra: int) -> None:
    job = Job(rates=[(0, 100)], per_unit=200, parallelism=2, trigger_s=trigger_s)
    trace = simulate(job, 40)
    bus, clock = MemoryBus(), FakeClock(trace[-1].batch_end_ms)
    loop = memory_loop(bus, clock)
    bus.publish_metrics(*trace)
    last = trace[-1]
    timeout_s = lost_timeout_s(trigger_s, last.busy_ms / 1000, POLICY)
    reported_at = None
    while reported_at is None and clock.ms < last.batch_end_ms + 3_600_000:
        loop.run_once()
        if loop.queries["q1"].verdict.action == "lost":
            reported_at = clock.ms
        clock.advance(1.0 + extra * 0.5)  # the loop's cycle
    assert reported_at is not None
    silent_s = (reported_at - last.batch_end_ms) / 1000
    assert timeout_s < silent_s <= timeout_s + 1.0 + extra * 0.5
    assert bus.sent_controls() == []
