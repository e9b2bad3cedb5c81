"""What more units do: contention learned from the sizes a query ran, the prior before, and
the size a step is given with it (`controller.core.scaling`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.core.fit import BatchPoint, useful_rate
from controller.core.model import QueryModel, Remembered
from controller.core.policy import decide, target_units
from controller.core.results import Scale
from controller.core.scaling import LINEAR, MAX_SIZES, Scalability, learned, remember
from controller.core.season import Forecast
from controller.core.sizing import Inflow
from controller.core.state import ControlState
from tests.unit.controller.core.test_policy import NOW, POLICY, model

MEASURED = {2: 177.0, 4: 162.0, 8: 142.0, 16: 102.0}
"""Records/s per unit of a job on this 2-core machine at 2, 4, 8 and 16 units."""


def amdahl(sigma: float, at_one: float, units: int) -> float:
    return at_one / (1 + sigma * (units - 1))


def test_contention_is_fitted_from_the_sizes_run_and_predicts_the_others() -> None:
    exact = learned({p: amdahl(0.05, 200, p) for p in (2, 4, 8)}, prior=0.0)
    assert (exact.contention, exact.sizes) == (pytest.approx(0.05), 3)
    assert exact.per_unit_at(amdahl(0.05, 200, 2), 2, 16) == pytest.approx(amdahl(0.05, 200, 16))
    from_measured = learned(MEASURED, prior=0.0)
    predicted = from_measured.per_unit_at(MEASURED[2], 2, 16)
    assert 0.8 * MEASURED[16] <= predicted <= 1.2 * MEASURED[16]


def test_below_two_sizes_the_prior_holds_and_units_that_help_each_other_count_as_none() -> None:
    assert learned({}, prior=0.02) == Scalability(0.02, 0)
    assert learned({4: 150.0}, prior=0.02) == Scalability(0.02, 0)
    assert learned({2: 100.0, 8: 120.0}, prior=0.02).contention == 0.0
    assert LINEAR.per_unit_at(100.0, 2, 64) == 100.0


def test_the_newest_measurement_of_a_size_replaces_the_older_and_the_oldest_size_goes() -> None:
    sizes = remember({2: 100.0, 4: 90.0}, 2, 110.0)
    assert sizes == {4: 90.0, 2: 110.0}
    many: dict[int, float] = {}
    for p in range(1, MAX_SIZES + 3):
        many = remember(many, p, 100.0)
    assert len(many) == MAX_SIZES and 1 not in many and MAX_SIZES + 2 in many


def test_only_a_rate_measured_apart_from_the_overhead_is_remembered_for_its_size() -> None:
    fitted = model(units=4, rate_samples=20, overhead_source="fit")
    assert Remembered().after(fitted).sizes == ((4, 200.0),)
    bound = replace(fitted, overhead_source="assumed_zero")  # a lower bound: no contention
    assert Remembered().after(bound).sizes == ()


def test_a_rate_charged_another_sizes_cost_is_its_sizes_only_while_half_the_busy_time_is_left(
        ) -> None:
    """Half the batches' busy time left to the records once the c remembered from another size
    is charged: μ is the size's; 40 %: it is not, and the model says so with every batch."""
    charged = model(units=4, rate_samples=20, overhead_source="remembered", useful_share=0.5)
    assert Remembered().after(charged).sizes == ((4, 200.0),)
    assert Remembered().after(replace(charged, useful_share=0.4)).sizes == ()
    points = [BatchPoint(rows, 2, 1.0 + rows / 400) for rows in (200, 200, 200)]
    assert useful_rate(points, 1.0, "remembered").useful_share == pytest.approx(1 / 3)


def test_a_learned_scalability_curve_sizes_a_step_larger_than_a_linear_model() -> None:
    """The same step (700/s into 2 units of 200/s, 6 000 behind) on the linear model and on
    one that learned the job's measured fall of μ with the units."""
    linear: QueryModel = model()
    curved = replace(linear, scalability=learned(MEASURED, prior=0.0))
    plain = decide(linear, ControlState(), NOW, POLICY)
    fitted = decide(curved, ControlState(), NOW, POLICY)
    assert isinstance(plain, Scale) and isinstance(fitted, Scale)
    assert fitted.target > plain.target
    # The size it chose meets the demand on the curve: 800/s at 80 %.
    assert curved.capacity_at(fitted.target) * POLICY.target_utilisation >= 800
    assert curved.capacity_at(fitted.target - 1) * POLICY.target_utilisation < 800
    assert fitted.figures["contention"] == pytest.approx(curved.scalability.contention)
    assert not math.isclose(curved.capacity_at(8), linear.capacity_at(8))


def test_where_no_size_meets_the_demand_and_none_drains_it_the_most_units_are_asked_for(
        ) -> None:
    """At contention 0.19 no number of units carries 2 000/s of 213/s-a-unit work at 80 %
    (the curve levels off near 1 300/s): the step goes to the most the task slots allow,
    and says so."""
    contended = model(arrival_rate=2000, units=2, parallelism=2,
                      rate_per_unit=213, scalability=Scalability(0.19, 2))
    verdict = decide(contended, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and verdict.target == 16  # the task slots
    assert "no size meets it (each unit adds less: contention 0.19 (fitted at 2 sizes))" \
        in verdict.reason


def test_where_no_size_meets_a_backlog_the_fewest_units_draining_it_nearly_as_fast_are_asked_for(
        ) -> None:
    """The same curve at 600/s with 30 000 records behind: no size drains them within the
    catch-up at the target utilisation. 16 units carry 1 053/s and drain 453/s; 14 carry
    1 023/s, 423/s of drain (93 %); 13 only 1 005/s, 405/s (89 %). With an upstream adding
    200/s, 16 drain 253/s and 14 only 223/s (88 %): 15, 1 039/s, drain 239/s (94 %)."""
    behind = model(arrival_rate=600, units=2, parallelism=2, rate_per_unit=213,
                   scalability=Scalability(0.19, 2), backlog_records=30_000,
                   backlog_trend_records_per_s=50, overhead_source="fit")
    alone = decide(behind, ControlState(), NOW, POLICY)
    fed = decide(behind, ControlState(), NOW, POLICY, Inflow(steady=200.0), "a")
    for verdict, target in ((alone, 14), (fed, 15)):
        assert isinstance(verdict, Scale) and verdict.target == target, verdict
        assert ("no size meets it (each unit adds less: contention 0.19 (fitted at 2 sizes)); "
                f"{target} units of input_parallelism drain it at 90% of the rate the most, 16 "
                "(task slots), would:") in verdict.reason


def test_where_no_size_meets_a_forecast_on_the_curve_the_fewest_units_near_the_most_are_asked_for(
        ) -> None:
    """The same curve, not backlogged, with a repeating load that will reach 2 000/s, or an
    upstream's resizing that will send it: a forecast, not a backlog of its own, gets the fewest
    units that carry 90 % of what the 16 task slots would. μ(1) = 213 × 1.19 = 253.5/s:
    16 units carry 1 053/s, 11 carry 961/s, 10 only 935/s."""
    calm = model(arrival_rate=300, units=2, parallelism=2, rate_per_unit=213,
                 scalability=Scalability(0.19, 2), backlog_records=0,
                 backlog_trend_records_per_s=0, time_to_drain_s=0, overhead_source="fit")
    ahead = decide(replace(calm, forecast=Forecast(peak=2000, in_s=1200, period_s=86_400,
                                                   error=0.08, checked_s=3600)),
                   ControlState(), NOW, POLICY)
    upstream = decide(calm, ControlState(), NOW, POLICY, Inflow(steady=1700.0), "a")
    for verdict in (ahead, upstream):
        assert isinstance(verdict, Scale) and verdict.target == 11, verdict
        assert ("no size meets it (each unit adds less: contention 0.19 (fitted at 2 sizes)); "
                "11 units of input_parallelism carry 90% of what the most, 16 (task slots), "
                "would:") in verdict.reason


def test_a_forecast_met_only_past_the_most_gets_the_fewest_near_the_most_or_executors_for_it(
        ) -> None:
    """The same curve with a forecast of 860/s, met at 80 % by 18 units (1 079/s) but not by
    the 16 task slots allow (1 053/s): the last units add least, so it gets the 11 that carry
    90 % of what 16 would, not 16 (a reader was sized 1 → 16 for its upstream's catch-up when 2
    carried that much). With executors to come for 18, it asks for them."""
    calm = model(arrival_rate=300, units=2, parallelism=2, rate_per_unit=213,
                 scalability=Scalability(0.19, 2), backlog_records=0,
                 backlog_trend_records_per_s=0, time_to_drain_s=0, overhead_source="fit")
    ahead = replace(calm, forecast=Forecast(peak=860, in_s=1200, period_s=86_400, error=0.08,
                                            checked_s=3600))
    assert target_units(ahead, POLICY) == 18 == target_units(calm, POLICY, Inflow(steady=560))
    verdicts = (decide(ahead, ControlState(), NOW, POLICY),
                decide(calm, ControlState(), NOW, POLICY, Inflow(steady=560.0), "a"))
    for verdict in verdicts:
        assert isinstance(verdict, Scale) and verdict.target == 11, verdict
        assert ("only 18 units, past the most, meet it (each unit adds less: contention 0.19 "
                "(fitted at 2 sizes)); 11 units of input_parallelism carry 90% of what the most, "
                "16 (task slots), would:") in verdict.reason
    # Where executors can come for the 18, it asks for them, as for any size past the slots.
    cluster = decide(replace(ahead, executor_cores=4, max_executors=8), ControlState(), NOW,
                     POLICY)
    assert isinstance(cluster, Scale) and cluster.parameter == "executors", cluster
    assert "18 units of input_parallelism wanted but 16 task slots run" in cluster.reason
