"""Load profiles (the generator's schedule) and the demo's view of a query's metrics."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import Role, SourcePartition, TaskMetrics
from streamctl.profiles import RateProfile
from streamctl.view import QueryView, status_line

rates = st.floats(min_value=0, max_value=10_000)


@given(kind=st.sampled_from(["constant", "step", "ramp", "spike"]), base=rates, peak=rates,
       start=st.floats(0, 50), length=st.floats(1, 50), t=st.floats(0, 120))
def test_expected_by_is_the_integral_of_rate_at(kind: str, base: float, peak: float,
                                                start: float, length: float, t: float) -> None:
    profile = RateProfile(kind, base, peak, start, start + length)
    steps = 4000
    numeric = sum(profile.rate_at((i + 0.5) * t / steps) for i in range(steps)) * t / steps
    # The midpoint sum is exact except in the one slice holding each rate discontinuity.
    slack = 2 * max(base, peak) * t / steps + 1e-6
    assert profile.expected_by(t) == pytest.approx(numeric, abs=slack)


def test_step_profile_changes_rate_at_the_step() -> None:
    step = RateProfile("step", 100, 400, start_s=10)
    assert (step.rate_at(9.99), step.rate_at(10), step.expected_by(20)) == (100, 400, 5000)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "wave", "base_per_s": 1}, "unknown rate profile 'wave'"),
    ({"kind": "constant", "base_per_s": -1}, "rates must be >= 0"),
    ({"kind": "ramp", "base_per_s": 1, "peak_per_s": 2, "start_s": 5, "end_s": 5},
     "ramp needs end_s > start_s"),
])
def test_bad_profiles_are_refused_with_a_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RateProfile(**kwargs)


def metrics(batch: int, start_ms: int, rows: int, end: int, latest: int,
            parallelism: int = 2) -> TaskMetrics:
    return TaskMetrics(
        "q", "i-1", Role.ACTIVE, 0, batch, start_ms, start_ms + 800, 1000, rows, 0, 800,
        (SourcePartition("in", 0, end - rows, end, latest),), parallelism, 4, 16,
    )


def test_view_derives_rates_and_lag_from_offsets() -> None:
    view = QueryView("q")
    # 500 records/s arrive; the job takes 400/s, so latest − end grows by 100 each second.
    for i in range(5):
        view.add(metrics(i, i * 1000, 400, 400 * (i + 1), 500 * (i + 1)))
    assert view.arrival_per_s() == pytest.approx(500)
    assert view.processed_per_s() == pytest.approx(400)
    assert view.lag_records() == 500          # latest − end of the newest batch
    assert view.lag_records(log_end_total=2600) == 600  # true lag against the log end now
    assert "waiting" in status_line(0, 0, QueryView("empty"))
    assert status_line(12, 500, view, 2600).split()[:6] == ["12", "500", "500", "400", "600",
                                                            "0.8"]


def test_a_standbys_heartbeat_leaves_the_views_lag_and_rates_as_the_active_made_them() -> None:
    view = QueryView("q")
    for i in range(3):
        view.add(metrics(i, i * 1000, 400, 400 * (i + 1), 500 * (i + 1)))
    lag, arrival = view.lag_records(log_end_total=1600), view.arrival_per_s()
    heartbeat = replace(metrics(-1, 3000, 0, 0, 0), instance_id="i-2", role=Role.STANDBY,
                        partitions=())
    view.add(heartbeat)
    assert view.samples[-1].instance_id == "i-1"
    assert (view.lag_records(log_end_total=1600), view.arrival_per_s()) == (lag, arrival)


def test_view_keeps_rates_when_batches_outlast_the_smoothing_span() -> None:
    view = QueryView("q")
    for i in range(4):  # one batch every 6.5 s, 3 250 records each
        view.add(metrics(i, i * 6500, 3250, 3250 * (i + 1), 3250 * (i + 1)))
    assert view.processed_per_s() == pytest.approx(500)
    assert view.arrival_per_s() == pytest.approx(500)


def test_a_replayed_batch_after_a_restart_never_shows_negative_arrival() -> None:
    view = QueryView("q")
    view.add(metrics(5, 0, 4000, 20_000, 30_000))
    view.add(metrics(6, 2000, 4000, 16_000, 26_000, parallelism=8))  # planned before the change
    assert view.arrival_per_s() == 0.0
