"""The day benchmark's figures (`bench.day.measures`): the oracle's units, and the columns per
day of a run."""

from __future__ import annotations

from dataclasses import replace

from bench.day import __main__ as day
from bench.day.measures import days_of, oracle_units
from bench.sim.model import T0_MS
from bench.sim.policies import Ours, Static
from bench.sim.profiles import Profile
from bench.sim.run import Scenario, Trace, simulate
from schemas import Ack, ControlTuple, Outcome


def test_the_oracle_takes_the_fewest_units_whose_batches_keep_the_objective() -> None:
    # 1 000/s at 200/s per unit, 1.5 s per batch, 2 partitions: 5 units cannot carry it,
    # 6 can in batches of 9 s (9 000 records: the oracle raises the cap as a tuple may), so a
    # record waits at most 18 s; within 7.9 s, 9 units (batches of 3.4 s).
    assert oracle_units(day.FIRST, 1000, 2, 30) == 6
    assert oracle_units(day.FIRST, 1000, 2, 7.9) == 9
    # Held at 4 000-record batches, 6 and 7 units cannot carry it (≤ 828 and ≤ 917 per s).
    assert oracle_units(replace(day.FIRST, max_batch_cap=0), 1000, 2, 30) == 8
    assert oracle_units(day.FIRST, 50, 2, 30) == 2  # a task per partition at least
    assert oracle_units(day.FIRST, 1e6, 2, 30) == 16  # none does: the most it may have


def test_a_run_of_days_is_measured_per_day_and_job_against_the_oracle() -> None:
    # Two compressed days with both jobs held at 2 units: nothing is reconfigured, the peak
    # leaves the first behind the objective (and the second starved), and the oracle runs
    # more units.
    trace = simulate(day.scenario(days=2, day_s=7200, seed=1), Static(), keep_metrics=False)
    days = days_of(trace, 7200)
    assert [[job.query_id for job in jobs] for jobs in days] == [["enrich", "aggregate"]] * 2
    for jobs in days:
        for job in jobs:
            assert job.reconfigurations == job.reversals == job.scale_ups_before_backlog == 0
            assert job.unit_s == 2 * 7200 and job.seconds == 7200
            assert job.oracle_unit_s > job.unit_s  # the peak needs more than 2
        assert 0 < jobs[0].over_objective_s <= jobs[0].seconds


def test_the_controller_scales_up_ahead_of_a_rise_only_once_the_load_has_repeated() -> None:
    # Three compressed days (2 h each) of the benchmark's load under the real loop.
    ours = Ours(day.settings(anticipate=True, day_s=7200))
    trace = simulate(day.scenario(days=3, day_s=7200, seed=1), ours, keep_metrics=False)
    ahead = [d for d in ours.decisions() if d.action == "scale_up"
             and d.reason.startswith("not backlogged, but the load that repeats every")]
    assert ahead, [d.reason for d in ours.decisions() if d.action.startswith("scale")]
    first_day_ends_ms = T0_MS + (day.WARMUP_S + 7200) * 1000
    assert all(d.decided_at_ms > first_day_ends_ms for d in ahead)
    sent = {c.control_id for _, c in trace.controls}
    assert {d.control_id for d in ahead} <= sent
    # The first job has no upstream: on day 1 only its own backlog resizes it; ahead of the
    # repeated rise, some scale-up comes before any backlog.
    days = days_of(trace, 7200)
    assert days[0][0].scale_ups_before_backlog == 0
    assert sum(job.scale_ups_before_backlog for jobs in days[1:] for job in jobs) >= 1


def test_a_scale_up_comes_before_a_backlog_only_if_none_showed_in_the_minute_before() -> None:
    # A tuple sent at 150 s, applied at 155 s (2 → 3 units); one tick of 2 000 records
    # waiting, 70 s, exactly 60 s, 30 s or 0 s before it, or none.
    scenario = Scenario("flat", Profile("flat", (100.0,) * 220, 0), (day.FIRST, day.SECOND),
                        duration_s=200, warmup_s=10, tick_s=1.0)
    control = ControlTuple("c1", "enrich", "source", "input_parallelism", "3", 0, "t", "",
                           T0_MS)
    ack = Ack("c1", "enrich", "sim-1", 0, Outcome.APPLIED, "", 0, T0_MS)
    times = [float(t) for t in range(11, 211)]

    def counted(spike_at_s: float | None) -> int:
        waiting = [2000 if t == spike_at_s else 0 for t in times]
        trace = Trace(scenario, "any", times,
                      units={"enrich": [2 if t <= 155 else 3 for t in times],
                             "aggregate": [2] * len(times)},
                      backlog={"enrich": waiting, "aggregate": [0] * len(times)},
                      waiting={"enrich": waiting, "aggregate": [0] * len(times)},
                      controls=[(150.0, control)], acks=[(155.0, ack)])
        return days_of(trace, 200)[0][0].scale_ups_before_backlog

    assert [counted(s) for s in (None, 80.0, 90.0, 120.0, 150.0)] == [1, 1, 0, 0, 0]


def test_a_real_days_backlog_is_its_lag_less_the_batches_in_flight() -> None:
    # A constant 100/s with 2 s triggers: 400 records are in flight at any time. A job that
    # keeps up has no backlog and never fell behind; one with 2 000 more has, and did.
    from bench.day.real import beyond_in_flight, never_behind
    from bench.sim.profiles import Profile
    from bench.sim.run import Scenario, Trace

    scenario = Scenario("flat", Profile("flat", (100.0,) * 20, 0), (day.FIRST, day.SECOND),
                        duration_s=10, warmup_s=10, tick_s=1.0)
    times = [float(t) for t in range(5, 15)]
    trace = Trace(scenario, "any", times, units={"enrich": [2] * 10, "aggregate": [2] * 10},
                  backlog={"enrich": [400] * 10, "aggregate": [400] * 9 + [2400]})
    behind = beyond_in_flight(trace)
    assert behind.waiting == {"enrich": [0] * 10, "aggregate": [0] * 9 + [2000]}
    assert behind.backlog == trace.backlog  # the lag stays the measure of a record's wait
    assert never_behind(behind) == {"enrich": True, "aggregate": False}
