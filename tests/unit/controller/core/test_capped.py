"""μ of a query at its batch cap: measured on its newest batches alone when the cap cut each
of them while the backlog grew and they read far slower than the window's, never otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.core.batches import CAPPED_AT_LEAST, newest_capped, rate_points
from controller.core.cost import capped_cost
from controller.core.fit import BatchPoint, fit_batch_cost
from controller.core.memo import Memo
from controller.core.model import QueryModel, Remembered, evaluate
from controller.settings import ModelSettings
from schemas import TaskMetrics
from tests.unit.controller.traces import Job, simulate

SETTINGS = ModelSettings()
RATIO = SETTINGS.level_shift_ratio
CONFIRM_S = SETTINGS.level_confirm_s

# 300/s arriving at 2 units of 300/s each (half busy), under a cap of 450 records a batch.
STEADY = Job(rates=((0, 300),), per_unit=300, parallelism=2, max_per_batch=450,
             report_cap=True)
STEP_S = 40.0


def _stepped(steady: Job, cost_rise: float, after_s: float = 12.0) -> tuple[TaskMetrics, ...]:
    """`STEP_S` of `steady`'s batches, then `after_s` with each record costing `cost_rise`×."""
    before = simulate(steady, seconds=STEP_S)
    last = before[-1]
    after = simulate(replace(steady, per_unit=steady.per_unit / cost_rise), seconds=after_s,
                     start_s=(last.batch_start_ms - before[0].batch_start_ms
                              + max(last.busy_ms, last.trigger_interval_ms)) / 1000,
                     positions=[p.end_offset for p in last.partitions],
                     first_batch=last.batch_id + 1)
    return (*before, *after)


def _model(samples: tuple[TaskMetrics, ...]) -> QueryModel:
    found = evaluate("q1", samples, SETTINGS)
    assert isinstance(found, QueryModel), found
    return found


def test_a_query_at_its_cap_whose_records_cost_four_times_as_much_is_sized_on_the_new_cost(
        ) -> None:
    # 75/s a unit: the batches reach the cap within two and run back to back past the trigger.
    samples = _stepped(STEADY, cost_rise=4.0)
    model = _model(samples)
    assert model.rate_measured_capped and model.backlog_trend_records_per_s > 0
    window = fit_batch_cost(rate_points(samples), SETTINGS)
    assert window is not None and window.per_unit > 2 * 75  # a minute of the old cost in it
    # 75/s, or two level shifts below the window's at most (the rest once it catches up)
    assert model.rate_per_unit == pytest.approx(max(75, window.per_unit / RATIO ** 2),
                                                rel=0.05)


def test_a_query_that_keeps_up_at_the_same_cost_keeps_the_windows_mu() -> None:
    model = _model(tuple(simulate(STEADY, seconds=STEP_S + 12)))
    assert not model.rate_measured_capped
    assert model.rate_per_unit == pytest.approx(300, rel=0.05)


def test_capped_batches_reading_within_the_shift_ratio_of_the_window_keep_its_mu() -> None:
    # 83 % busy at 180/s a unit; 1.3× the cost puts the query behind, at its cap, but the
    # newest batches read within the shift ratio of the window's μ.
    busy = replace(STEADY, per_unit=180)
    samples = _stepped(busy, cost_rise=1.3, after_s=25.0)
    assert newest_capped(samples, (), CONFIRM_S, Memo())
    model = _model(samples)
    assert model.backlog_trend_records_per_s > 0 and not model.rate_measured_capped


def test_the_window_stands_unless_the_backlog_grows_and_capped_batches_read_far_slower() -> None:
    window_points = [BatchPoint(300, 2, 0.5)] * 20
    capped = (BatchPoint(450, 2, 3.0),) * CAPPED_AT_LEAST
    window = fit_batch_cost([*window_points, *capped], SETTINGS)
    assert window is not None
    cost, used = capped_cost(window, capped, trend=100.0, ratio=RATIO)
    assert used and cost.batches == CAPPED_AT_LEAST
    assert cost.per_unit == pytest.approx(max(75, window.per_unit / RATIO ** 2))
    assert capped_cost(window, capped, trend=0.0, ratio=RATIO) == (window, False)
    assert capped_cost(window, (), trend=100.0, ratio=RATIO) == (window, False)


def test_a_mu_measured_at_the_cap_is_at_most_two_level_shifts_below_the_windows() -> None:
    # A fixed cost of 1 s in batches of about 1.5 s (2 000/s a unit, 2 units), then batches
    # at the cap twice as long for a few seconds: all of it charged to the records reads
    # 500/s a unit, a quarter.
    window_points = [BatchPoint(rows, 2, 1.0 + rows / 4_000)
                     for rows in (1_200, 2_000, 2_800) * 7]
    window = fit_batch_cost(window_points, SETTINGS)
    assert window is not None and window.overhead_s == pytest.approx(1.0)
    slow = (BatchPoint(2_000, 2, 3.0),) * CAPPED_AT_LEAST
    cost, used = capped_cost(window, slow, trend=100.0, ratio=RATIO)
    assert used and cost.per_unit == pytest.approx(window.per_unit / RATIO ** 2)


def test_a_mu_measured_at_the_cap_holds_while_the_window_catches_up_to_within_the_ratio(
        ) -> None:
    capped = (BatchPoint(450, 2, 3.0),) * CAPPED_AT_LEAST  # 75/s a unit
    window = fit_batch_cost([BatchPoint(450, 2, 2.2)] * 20, SETTINGS)  # ~102/s: within 1.5×
    assert window is not None
    assert capped_cost(window, capped, 100.0, RATIO) == (window, False)
    held, used = capped_cost(window, capped, 100.0, RATIO, held=True)
    assert used and held.per_unit == pytest.approx(75)
    faster = (BatchPoint(450, 2, 2.0),) * CAPPED_AT_LEAST  # 112/s: above the window's
    assert capped_cost(window, faster, 100.0, RATIO, held=True) == (window, False)


def test_a_burst_drained_at_the_cap_at_the_same_cost_keeps_the_windows_mu() -> None:
    burst = replace(STEADY, rates=((0, 300), (STEP_S, 2_000), (STEP_S + 5, 300)))
    samples = tuple(simulate(burst, seconds=STEP_S + 5))  # within it: the backlog grows
    assert newest_capped(samples, (), CONFIRM_S, Memo())
    model = _model(samples)
    assert model.backlog_trend_records_per_s > 0 and not model.rate_measured_capped
    assert model.rate_per_unit == pytest.approx(300, rel=0.05)


def test_a_mu_measured_at_the_cap_is_not_remembered_as_the_sizes() -> None:
    model = _model(_stepped(STEADY, cost_rise=4.0))
    assert model.rate_measured_capped and model.overhead_source != "assumed_zero"
    assert Remembered().after(model).sizes == ()
    assert Remembered().after(replace(model, rate_measured_capped=False)).sizes


def test_the_newest_batches_measure_mu_only_when_each_was_capped_with_rows_for_long_enough(
        ) -> None:
    samples = _stepped(STEADY, cost_rise=4.0)
    found = newest_capped(samples, (), CONFIRM_S, Memo())
    assert len(found) >= CAPPED_AT_LEAST
    assert newest_capped(samples, (), 60.0, Memo()) == ()  # capped for less than a minute
    for i in (-1, -2):  # the newest, and one before it
        sample = samples[i]
        caught_up = replace(sample, partitions=tuple(
            replace(p, latest_offset=p.end_offset) for p in sample.partitions))
        changed = list(samples)
        changed[i] = caught_up
        assert newest_capped(tuple(changed), (), CONFIRM_S, Memo()) == ()
        changed[i] = replace(sample, input_rows=0)
        assert newest_capped(tuple(changed), (), CONFIRM_S, Memo()) == ()
        warm = {(sample.instance_id, sample.batch_id, 0)}
        assert newest_capped(samples, warm, CONFIRM_S, Memo()) == ()
