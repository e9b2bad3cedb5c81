"""A linear ramp is sized for where it will be, not for the rate of the moment: the real loop
over the simulated job (`tests.unit.controller.traces.probed_loop`: broker probes every
second, the job's beats, a restart per change) on the bench's ramp (`bench.reaction`: 0.4 C
rising to 3 C over 90 s from 30 s, C the capacity at 2 units)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.settings import ControllerSettings
from tests.unit.controller.traces import Job, probed_loop

CAPACITY_AT_2 = 340.0
START_S, END_S = 30.0, 120.0


def bench_ramp(per_unit: float, overhead_s: float) -> Job:
    """The ramp in 1 s steps of the rate (the loader's profile is continuous)."""
    base, peak = 0.4 * CAPACITY_AT_2, 3 * CAPACITY_AT_2
    steps = [(START_S + k, base + (peak - base) * (k + 0.5) / (END_S - START_S))
             for k in range(int(END_S - START_S))]
    return Job([(0.0, base), *steps, (END_S, peak)], per_unit=per_unit, parallelism=2,
               max_per_batch=1500, overhead_s=overhead_s, report_cap=True, warm_up_s=3)


@pytest.mark.parametrize(("per_unit", "overhead_s"), [(170.0, 0.3), (120.0, 0.6)])
def test_a_linear_ramp_is_sized_in_at_most_two_tuples_where_the_rate_of_the_moment_takes_three(
        per_unit: float, overhead_s: float) -> None:
    job = bench_ramp(per_unit, overhead_s)
    ahead = probed_loop(job, 200, restart_s=8).sent
    settings = ControllerSettings()
    of_the_moment = probed_loop(job, 200, replace(settings, policy=replace(
        settings.policy, ramp_horizon_s=0.0)), restart_s=8).sent
    assert 1 <= len(ahead) <= 2, [(t, c.value) for t, c, _ in ahead]
    assert len(of_the_moment) == 3, [(t, c.value) for t, c, _ in of_the_moment]
    # The first tuple, sent while the ramp climbs, already sizes for more than the moment's.
    assert ahead[0][0] < END_S and int(ahead[0][1].value) > int(of_the_moment[0][1].value)
    sent = [int(c.value) for _, c, _ in ahead]
    assert sent == sorted(sent), sent  # only up: no flapping


def test_a_tuple_sized_for_a_ramp_says_where_the_ramp_will_be() -> None:
    (_, first, _), *_ = probed_loop(bench_ramp(170.0, 0.3), 200, restart_s=8).sent
    assert "arrivals climb" in first.reason and "where they will be in 40 s" in first.reason, \
        first.reason
