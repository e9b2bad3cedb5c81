"""The batch-cost fit and the sizing equations: overhead and true rate, fallbacks, capacity."""

from __future__ import annotations

import math

import pytest

from controller.core.fit import BatchPoint, fit_batch_cost, fit_current_cost, shift_start
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


def with_overhead(*rows: int, overhead_s: float = 1.0, rate: float = 100.0,
                  jitter_s: float = 0.0) -> list[BatchPoint]:
    """Batches of these sizes at 4 units, busy the overhead and their records at `rate` a unit,
    each ±5 % about it in turn, and ± `jitter_s` on top in a fixed pseudo-random order."""
    return [BatchPoint(r, 4, overhead_s + r / 4 / rate * (1.05 if n % 2 else 0.95)
                       + jitter_s * math.sin(n * 2.4))
            for n, r in enumerate(rows)]


# The bench's query that falls behind: each record costs 4× from one batch on, and it reads half
# the records per batch in twice the busy time (16 units, 200 records in 0.5 s before).
BEFORE = points(*[(200, 0.5)] * 20, units=16)
SLOWER = points((100, 1.0), units=16)


def test_a_step_in_the_records_cost_is_measured_on_the_batches_since_it() -> None:
    cost = fit_current_cost(BEFORE + SLOWER * 4, SETTINGS)
    assert cost is not None and cost.batches == 4
    assert cost.per_unit == pytest.approx(100 / 16)
    whole = fit_batch_cost(BEFORE + SLOWER * 4, SETTINGS)
    assert whole is not None and whole.per_unit > 3 * cost.per_unit


def test_a_cost_shift_waits_for_enough_batches_busy_for_the_confirmation_time() -> None:
    # 3 slow batches: fewer than `min_samples` (4), and busy 3 s of the 3.5 s
    # (`level_confirm_s`) a new level must show.
    assert shift_start(BEFORE + SLOWER * 3, SETTINGS) == 0
    assert shift_start(BEFORE + SLOWER * 4, SETTINGS) == 20
    # 4 shorter slow batches are busy 3.2 s, 5 of them 4 s.
    shorter = points((50, 0.8), units=16)
    assert shift_start(BEFORE + shorter * 4, SETTINGS) == 0
    assert shift_start(BEFORE + shorter * 5, SETTINGS) == 20


def test_a_fall_in_the_records_cost_is_a_shift_too() -> None:
    assert shift_start(SLOWER * 20 + BEFORE[:4], SETTINGS) == 0  # busy 2 s of 3.5
    assert shift_start(SLOWER * 20 + BEFORE[:7], SETTINGS) == 20
    cost = fit_current_cost(SLOWER * 20 + BEFORE[:7], SETTINGS)
    assert cost is not None and cost.per_unit == pytest.approx(200 / 16 / 0.5)


def test_since_a_shift_the_rate_is_measured_with_the_overhead_last_fitted() -> None:
    # 1 s of overhead a batch, and records at 100/s a unit, then at 25/s.
    steady = with_overhead(*[200] * 20)
    slower = with_overhead(*[200] * 5, rate=25)
    cost = fit_current_cost(steady + slower, SETTINGS, remembered_overhead_s=1.0)
    assert cost is not None and cost.source == "remembered" and cost.batches == 5
    assert cost.overhead_s == 1.0
    assert cost.per_unit == pytest.approx(25, rel=0.02)


def test_a_stall_of_two_batches_amid_jitter_is_no_shift_and_a_lasting_one_is() -> None:
    # A real job's batches: 1.5 s of overhead (fitted before), ±0.5 s of jitter; two of them
    # stall at 3.2 s.
    jittery = with_overhead(*[200] * 30, overhead_s=1.5, jitter_s=0.5)
    stalled = points((200, 3.2), (200, 3.2), units=4)
    assert shift_start(jittery + stalled, SETTINGS, 1.5) == 0
    # The records' cost quadruples for good: 1.5 s + 2 s a batch, ±0.5 s.
    slower = with_overhead(*[200] * 5, overhead_s=1.5, rate=25, jitter_s=0.5)
    assert shift_start(jittery + slower, SETTINGS, 1.5) == 30


@pytest.mark.parametrize("sizes", [[100] * 20 + [400] * 5, [400] * 20 + [100] * 5],
                         ids=["larger", "smaller"])
def test_batches_that_changed_size_at_an_unchanged_cost_are_no_shift(sizes: list[int]) -> None:
    # Charged no overhead, the larger batches read 2.5× faster than the smaller: a load that
    # changed, not a cost.
    batches = with_overhead(*sizes)
    assert shift_start(batches, SETTINGS) == 0
    assert shift_start(batches, SETTINGS, 1.0) == 0
    cost = fit_current_cost(batches, SETTINGS)
    assert cost is not None and cost.batches == len(sizes)
    assert cost.per_unit == pytest.approx(100, rel=0.05)


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
