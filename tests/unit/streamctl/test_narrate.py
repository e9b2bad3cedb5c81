"""The demo's recovery figure: a job's lag, in seconds of input, is back to its level before
the load step once it had fallen behind; a job that never fell behind says so."""

from __future__ import annotations

from streamctl.narrate import FLOOR_S, Recovery


def test_recovery_is_the_first_time_after_the_step_the_lag_is_back_to_its_level() -> None:
    r = Recovery()
    for elapsed, lag_s in ((21, 1.0), (25, 2.0), (29, 1.5),         # before the step at 30
                           (33, 2.0), (40, 12.0), (60, 30.0), (75, 8.0),
                           (81, 4.0), (84, 9.0)):
        r.track(elapsed, 30.0, lag_s)
    assert r.before_s == 2.0 and r.behind_since_step
    assert r.recovered_s == 51.0  # 4 s ≤ 1.5 × max(2 s, the 3 s floor)


def test_a_job_that_stays_within_its_floor_never_fell_behind() -> None:
    r = Recovery()
    for elapsed in range(20, 120, 3):
        r.track(elapsed, 30.0, FLOOR_S * 1.9)
    assert not r.behind_since_step and r.recovered_s is None
