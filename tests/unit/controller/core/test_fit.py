"""The batch-cost fit and the sizing equations: overhead and true rate, fallbacks, capacity."""

from __future__ import annotations

import math

import pytest

from controller.core.fit import BatchPoint, fit_batch_cost
from controller.core.model import QueryModel, evaluate
from controller.core.sizing import batch_cap_needed, capacity, required_units
from controller.settings import ModelSettings
from tests.unit.controller.traces import Job, simulate

SETTINGS = ModelSettings()


def points(*batches: tuple[int, float], units: int = 2) -> list[BatchPoint]:
    return [BatchPoint(rows, units, busy) for rows, busy in batches]


def test_overhead_and_true_rate_are_fitted_from_batches_of_different_sizes() -> None:
    # busy = 1.5 + rows / (200 × 2)
    cost = fit_batch_cost(points((300, 2.25), (800, 3.5), (4000, 11.5), (1200, 4.5)), SETTINGS)
    assert cost is not None and cost.source == "fit"
    assert cost.overhead_s == pytest.approx(1.5)
    assert cost.per_unit == pytest.approx(200)


def test_batches_of_one_size_fall_back_to_the_remembered_overhead_then_to_zero() -> None:
    same = points((300, 2.25), (310, 2.27), (295, 2.24))
    remembered = fit_batch_cost(same, SETTINGS, remembered_overhead_s=1.5)
    assert remembered is not None and remembered.source == "remembered"
    assert remembered.per_unit == pytest.approx(200, rel=0.02)
    assumed = fit_batch_cost(same, SETTINGS)
    assert assumed is not None and assumed.source == "assumed_zero"
    # rows / busy / units: exact for these batches, low for bigger ones
    assert assumed.per_unit == pytest.approx(905 / (2 * 6.76), rel=0.01)


def test_a_noisy_fit_is_not_trusted() -> None:
    # Busy time barely related to size: the slope's error is far above 25 % of it.
    noisy = points((300, 2.0), (900, 4.0), (600, 1.5), (1200, 2.2), (400, 3.8))
    cost = fit_batch_cost(noisy, SETTINGS)
    assert cost is not None and cost.source == "assumed_zero"


def test_the_rates_error_is_its_batches_scatter_about_it_and_shrinks_with_more_of_them(
        ) -> None:
    exact = fit_batch_cost(points((300, 2.25), (800, 3.5)), SETTINGS, remembered_overhead_s=1.5)
    assert exact is not None and exact.per_unit == pytest.approx(200)
    assert exact.rate_error == pytest.approx(0)
    # useful unit-seconds 1.5 and 1.0 for 300 rows each: μ 240/s, each batch 60 rows off it
    pair = [(300, 2.25), (300, 2.0)]
    scattered = fit_batch_cost(points(*pair), SETTINGS, remembered_overhead_s=1.5)
    assert scattered is not None and scattered.per_unit == pytest.approx(240)
    assert scattered.rate_error == pytest.approx(math.sqrt(2 * 7_200 / 1) / 600)  # 20 %
    more = fit_batch_cost(points(*pair * 4), SETTINGS, remembered_overhead_s=1.5)
    assert more is not None and more.per_unit == pytest.approx(240)
    assert more.rate_error == pytest.approx(math.sqrt(8 * 28_800 / 7) / 2_400)  # 7.6 %
    one = fit_batch_cost(points((300, 2.25)), SETTINGS, remembered_overhead_s=1.5)
    assert one is not None and math.isinf(one.rate_error)


def test_a_fitted_costs_error_is_its_batches_scatter_about_the_fit_not_the_slopes() -> None:
    # busy = 1.5 + rows / (200 × 2), each batch 0.1 s off: the slope is known within
    # 1.6 %, the capacity of the batches as measured within 1.2 %
    cost = fit_batch_cost(points((300, 2.35), (800, 3.4), (1200, 4.6), (4000, 11.4)), SETTINGS)
    assert cost is not None and cost.source == "fit"
    assert cost.rate_error == pytest.approx(0.0122, abs=1e-4)


def test_overhead_is_clamped_to_leave_useful_time() -> None:
    cost = fit_batch_cost(points((300, 1.0), (310, 1.0), (290, 1.0)), SETTINGS,
                          remembered_overhead_s=5.0)
    assert cost is not None and cost.overhead_s == pytest.approx(0.9)
    assert fit_batch_cost([], SETTINGS) is None


def test_small_batches_no_longer_read_low() -> None:
    """The walking skeleton's case: 150/s with a 1.5 s overhead read 59/s per unit."""
    job = Job(rates=[(0, 150), (40, 900)], per_unit=200, parallelism=2, overhead_s=1.5,
              max_per_batch=4000, trigger_s=2.0)
    trace = simulate(job, 90)
    m = evaluate("q1", tuple(trace[-12:]), SETTINGS)
    assert isinstance(m, QueryModel)
    assert m.overhead_source == "fit"
    assert m.batch_overhead_s == pytest.approx(1.5, abs=0.05)
    assert m.rate_per_unit == pytest.approx(200, rel=0.03)
    assert (m.batch_cap, m.batch_cap_source) == (4000, "observed")
    assert m.capacity == pytest.approx(4000 / (1.5 + 4000 / 400), rel=0.03)


def test_capacity_counts_the_overhead_of_every_batch() -> None:
    assert capacity(200, 2, 1.5, 4000) == pytest.approx(4000 / 11.5)
    assert capacity(200, 2, 1.5, 0) == 400  # unbounded batches amortise it away
    assert capacity(200, 2, 0.0, 4000) == 400
    assert capacity(0, 2, 1.5, 4000) == 0


def test_required_units_solve_the_capacity_equation() -> None:
    # 800/s at 70 % with N = 4000, c = 1.5, μ = 200: p ≥ 800·4000 / (200 (2800 − 1200)) = 10
    assert required_units(800, 200, 0.7, 1.5, 4000) == 10
    assert 0.7 * capacity(200, 10, 1.5, 4000) + 1e-6 >= 800
    assert 0.7 * capacity(200, 9, 1.5, 4000) < 800
    # 2 000/s: 0.7 × 4000 ≤ 2000 × 1.5, no number of units can, only a bigger batch
    assert required_units(2000, 200, 0.7, 1.5, 4000) is None
    cap = batch_cap_needed(2000, 200, 16, 1.5, 0.7)
    assert cap is not None and 0.7 * capacity(200, 16, 1.5, cap) + 1e-6 >= 2000
    assert batch_cap_needed(3000, 200, 16, 1.5, 0.7) is None  # 0.7 × 3200 < 3000
    assert required_units(0, 200, 0.7, 1.5, 4000) == 1
