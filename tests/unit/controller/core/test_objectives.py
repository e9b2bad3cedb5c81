"""The objectives a job states: where a query stands against them, the drain time and the
utilisation band they ask the sizing for (`controller.core.objectives`), and the decisions they
drive (`policy`)."""

from __future__ import annotations

import math
from dataclasses import astuple, replace

import pytest

from controller.core.objectives import (
    DRAIN_WITHIN,
    MAX_DELAY,
    Band,
    CatchUp,
    band,
    catch_up,
    delay_s,
    drain_s,
    standings,
    under,
)
from controller.core.policy import decide
from controller.core.results import Hold, Scale
from controller.core.state import ControlState
from schemas.objectives import Objectives
from tests.unit.controller.core.test_policy import NOW, POLICY, model


def test_a_record_waits_behind_the_backlog_then_for_its_batch() -> None:
    assert delay_s(backlog=3_000, rate=400, trigger_s=2) == pytest.approx(9.5)
    assert delay_s(backlog=0, rate=0, trigger_s=2) == 2
    assert delay_s(backlog=10, rate=0, trigger_s=2) is None  # no rate: unknown, not 0


def test_a_broker_lag_counts_beyond_one_trigger_interval_of_arrivals() -> None:
    assert drain_s(lag=500, rate=400, arrival=300, trigger_s=2) == 0  # the running batch's
    assert drain_s(lag=3_600, rate=400, arrival=300, trigger_s=2) == pytest.approx(30)
    assert drain_s(lag=3_600, rate=300, arrival=300, trigger_s=2) == math.inf
    assert drain_s(lag=3_600, rate=0, arrival=300, trigger_s=2) is None


def test_standings_cover_only_what_the_job_states_and_say_whether_each_is_met() -> None:
    assert standings(Objectives(), 9.5, 30) == ()
    delay, drain = standings(Objectives(max_delay_s=8, drain_within_s=60), 9.5, 30)
    assert (delay.objective, delay.met) == (MAX_DELAY, False)
    assert delay.describe() == "delay 9.5 s of at most 8 s: NOT met"
    assert (drain.objective, drain.met) == (DRAIN_WITHIN, True)
    assert drain.describe() == "backlog drains in 30 s of at most 60 s: met"
    unknown, = standings(Objectives(max_delay_s=8), None, None)
    assert unknown.met is None and unknown.describe().endswith(": unknown")


def test_the_model_judges_the_drain_by_its_own_drain_time() -> None:
    # 300/s on 2 × 200/s, 3 000 behind: drained in 3 000 / 100 = 30 s, over 25 s.
    behind = model(trigger_interval_s=2.0, arrival_rate=300, backlog_records=3_000,
                   backlog_trend_records_per_s=-100, time_to_drain_s=30,
                   objectives=Objectives(drain_within_s=25))
    drain, = behind.standings()
    assert (drain.value_s, drain.met) == (30, False)
    verdict = decide(behind, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale)
    assert "backlog drains in 30 s of at most 25 s: NOT met" in verdict.reason


def test_the_shortest_drain_time_asked_for_wins_and_is_named() -> None:
    assert catch_up(Objectives(), 2, 60) == CatchUp(60)
    assert catch_up(Objectives(drain_within_s=300), 2, 60) == CatchUp(300, DRAIN_WITHIN)
    assert catch_up(Objectives(max_delay_s=17), 2, 60) == CatchUp(15, MAX_DELAY, 17)
    assert catch_up(Objectives(max_delay_s=100, drain_within_s=30), 2, 60).objective == \
        DRAIN_WITHIN


def test_objectives_a_job_cannot_meet_are_refused_with_the_reason() -> None:
    assert Objectives(max_delay_s=3).problems(2.0) == [
        "max_delay_s 3 cannot be met with trigger_interval_s 2: a record waits up to a "
        "trigger interval for its batch and the batch takes up to another; state at least "
        "twice the trigger interval"]
    assert Objectives(drain_within_s=-1).problems(2.0) == [
        "drain_within_s must be a number >= 0 (0: none stated), got -1"]
    assert Objectives(max_delay_s=4, drain_within_s=600).problems(2.0) == []


def test_a_delay_objective_sizes_for_more_units_and_the_reason_names_it() -> None:
    # 700/s at 200/s per unit, 6 000 behind: 60 s of catch-up asks for 5 units (test_policy);
    # at most 17 s of delay with 2 s batches leaves 15 s: (700 + 400) / 160 → 7 units.
    stated = model(trigger_interval_s=2.0, objectives=Objectives(max_delay_s=17))
    verdict = decide(stated, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and verdict.target == 7
    assert verdict.reason.endswith(
        "7 units of input_parallelism drain it in 15 s at 80% utilisation, for the job's "
        "objective of at most 17 s delay; delay 17 s of at most 17 s: met")  # 6 000 / 400 + 2
    assert verdict.figures["max_delay_s"] == 17 and verdict.figures["delay_s"] == 17
    assert "max_delay_s" not in decide(model(), ControlState(), NOW, POLICY).figures


def test_a_long_drain_objective_is_met_with_fewer_units_than_the_default() -> None:
    # 30 000 behind: 60 s asks for (700 + 500) / 160 → 8 units, 300 s for 800 / 160 → 5.
    behind = model(trigger_interval_s=2.0, backlog_records=30_000)
    assert decide(behind, ControlState(), NOW, POLICY).target == 8  # type: ignore[union-attr]
    stated = replace(behind, objectives=Objectives(drain_within_s=300))
    verdict = decide(stated, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and verdict.target == 5
    assert "for the job's objective of a backlog gone within 300 s;" in verdict.reason


def test_a_delay_over_the_objective_is_a_backlog_even_while_it_drains() -> None:
    # 300/s on 2 × 200/s with 3 000 behind and shrinking: drained in 30 s, within the
    # controller's 60 s, so without an objective it holds; a record now waits 9.5 s.
    draining = model(trigger_interval_s=2.0, arrival_rate=300, backlog_records=3_000,
                     backlog_trend_records_per_s=-100, time_to_drain_s=30)
    assert isinstance(decide(draining, ControlState(), NOW, POLICY), Hold)
    verdict = decide(replace(draining, objectives=Objectives(max_delay_s=8)), ControlState(),
                     NOW, POLICY)
    assert isinstance(verdict, Scale) and verdict.target == 5  # (300 + 3 000 / 6) / 160
    assert verdict.reason.endswith("for the job's objective of at most 8 s delay; delay 9.5 s "
                                   "of at most 8 s: NOT met")


def test_a_query_within_band_says_where_it_stands_against_its_objectives() -> None:
    calm = model(trigger_interval_s=2.0, arrival_rate=300, backlog_records=100,
                 backlog_trend_records_per_s=0, time_to_drain_s=1,
                 objectives=Objectives(max_delay_s=30))
    verdict = decide(calm, ControlState(), NOW, POLICY)
    assert isinstance(verdict, Hold)
    assert verdict.reason.endswith("; delay 2.25 s of at most 30 s: met")


CONTROLLER = Band(0.4, 0.7, 0.9)


def test_the_band_keeps_the_controllers_ratio_below_a_high_water_an_objective_lowers() -> None:
    assert under(0.9, CONTROLLER) == pytest.approx(0.7)
    assert under(0.95, CONTROLLER) == pytest.approx(0.7)  # never laxer than its own
    assert under(0.7, CONTROLLER) == pytest.approx(0.7 * 0.7 / 0.9)  # the same ratio


def test_a_delay_objective_asks_for_the_headroom_its_measured_overhead_needs() -> None:
    def of(max_delay_s: float, overhead_s: float | None,
           drain_within_s: float = 0) -> tuple[float, ...] | None:
        found = band(Objectives(max_delay_s, drain_within_s), overhead_s, 10.0, CONTROLLER)
        return None if found is None else astuple(found)

    # 2c / (1 − u) ≤ D: 1.5 s of overhead within 30 s allows the controller's own 0.9.
    assert of(30, 1.5) is None
    assert of(60, 0.5) is None  # a lax objective keeps the controller's band
    strict = of(20, 2.0)  # high water 0.8
    assert strict == pytest.approx((0.4 * 0.8 / 0.9, 0.8 * 0.7 / 0.9, 0.8))
    # 20 s to drain what a 10 s pause piles up: at most 20 / 30 of capacity in use.
    assert of(60, 0.5, drain_within_s=20) == pytest.approx((0.4 * (2 / 3) / 0.7, 2 / 3, 0.9))
    assert of(20, None) is None  # no overhead measured: no band sized on a guess
    assert of(20, 0.0) is None  # nor on a fit's intercept clamped to 0
    assert of(0, 2.0, drain_within_s=20) is None  # no delay objective
    assert of(20, 10.0) is None  # 1 s batches of overhead cannot meet it at any utilisation


def test_a_lax_delay_objective_keeps_the_controllers_band() -> None:
    measured = model(trigger_interval_s=2.0, batch_overhead_s=0.2, overhead_source="fit",
                     backlog_records=30_000)
    own = decide(measured, ControlState(), NOW, POLICY)
    stated = decide(replace(measured, objectives=Objectives(max_delay_s=120)), ControlState(),
                    NOW, POLICY)
    assert isinstance(own, Scale) and isinstance(stated, Scale)
    assert stated.target == own.target and "at 80% utilisation" in stated.reason


def test_a_strict_delay_objective_counts_arrivals_under_the_controllers_high_water_as_backlogged(
        ) -> None:
    # 2 units of 200/s with 0.8 s of overhead per batch; 340/s arriving (85 %), 1 500 behind
    # drained in 5 s (within 8 − 2 s of catch-up): 8 s of delay allows 1 − 1.6 / 8 = 80 %.
    calm = model(trigger_interval_s=2.0, arrival_rate=340, backlog_records=1_500,
                 backlog_trend_records_per_s=-10, time_to_drain_s=5, batch_overhead_s=0.8,
                 overhead_source="fit")
    assert isinstance(decide(calm, ControlState(), NOW, POLICY), Hold)
    verdict = decide(replace(calm, objectives=Objectives(max_delay_s=8)), ControlState(), NOW,
                     POLICY)
    assert isinstance(verdict, Scale), verdict.reason
    assert "for the job's objective of at most 8 s delay" in verdict.reason
