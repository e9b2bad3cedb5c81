"""The policy on hand-built model figures: the sizing formula, bounds, timers, reasons."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.ceiling import producer_rate
from controller.core.model import QueryModel
from controller.core.parallelism import knob_range
from controller.core.policy import backlog_causes, decide, target_units
from controller.core.results import Hold, Recommend, Scale, Shed
from controller.core.season import Forecast
from controller.core.shedding import Shedding
from controller.core.sizing import Inflow, required_units
from controller.core.state import ControlState, InFlight, applied
from controller.settings import PolicySettings

NOW = 1_700_000_000_000
POLICY = PolicySettings(target_utilisation=0.8, high_water_utilisation=0.9,
                        low_water_utilisation=0.4, catch_up_s=60, max_parallelism=64,
                        scale_down_stabilisation_s=120, max_scale_down_share=0.75, cooldown_s=30,
                        change_prior_s=0)
# change_prior_s=0: the sizing arithmetic below leaves out the backlog that builds while a
# change is applied, which has tests of its own (test_policy).


def model(**changes: Any) -> QueryModel:
    """2 units of 200/s, 700/s arriving, 6 000 records behind and growing."""
    base = QueryModel(
        query_id="q1", samples=10, config_epoch=0, arrival_rate=700, throughput=400,
        busy_ratio=1.0, rate_per_unit=200, parallelism=2, units=2, source_partitions=2,
        task_slots=16, backlog_records=6_000, backlog_trend_records_per_s=300,
        time_to_drain_s=math.inf)
    return replace(base, **changes)


def test_a_backlog_on_a_lower_bound_mu_waits_for_the_running_batch_only_at_a_level_kept_up_with(
        ) -> None:
    """μ of batches too alike to fit their cost is a lower bound; the running batch will fit
    it (`cost_measured_by_running_batch`). At a λ the query put through (a burst's backlog)
    the decision waits for that batch; at a λ it outgrew (a step), or with a ramp or an
    upstream's forecast, it does not."""
    bound = model(arrival_rate=380, throughput=390, recent_throughput=390,
                  cost_measured_by_running_batch=True, arrival_timed_by="broker")
    held = decide(bound, ControlState(), NOW, POLICY)
    assert isinstance(held, Hold), held
    assert "2 units × 200/s is a lower bound" in held.reason
    assert "the running batch, larger than any measured" in held.reason
    assert isinstance(decide(replace(bound, cost_measured_by_running_batch=False),
                             ControlState(), NOW, POLICY), Scale)
    outgrown = replace(bound, arrival_rate=700)  # 390/s put through: under 80 % of λ
    assert isinstance(decide(outgrown, ControlState(), NOW, POLICY), Scale)
    assert isinstance(decide(replace(bound, arrival_ramp=5.0), ControlState(), NOW, POLICY),
                      Scale)
    forecast = Inflow(steady=100.0)
    assert not isinstance(decide(bound, ControlState(), NOW, POLICY, forecast, "a"), Hold)


def test_backlogged_query_is_sized_in_one_step() -> None:
    # p* = ceil((700 + 6000 / 60) / (200 × 0.8)) = ceil(800 / 160) = 5
    verdict = decide(model(), ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale)
    assert (verdict.parameter, verdict.current, verdict.target) == ("input_parallelism", 2, 5)
    assert verdict.figures["arrival_rate"] == 700 and verdict.figures["target"] == 5
    assert verdict.reason == (
        "backlog 6 000 records growing 300/s; arrival 700/s exceeds capacity 400/s "
        "(2 × 200/s per unit at 100% busy, utilisation 175%); 5 units of input_parallelism "
        "drain it in 60 s at 80% utilisation")


def test_a_backlog_while_the_arrival_rate_rises_unconfirmed_waits_for_the_new_rate() -> None:
    """Mid-batch, a step's backlog shows before its rate is confirmed: sized for λ then, the
    tuple would be for the rate before the step (2 → 4 for a 3× step, seen on the real loop)."""
    verdict = decide(model(arrival_pending=2_100), ControlState(), NOW, POLICY)
    assert isinstance(verdict, Hold), verdict
    assert "rises unconfirmed: newest 2 100/s against λ 700/s" in verdict.reason
    # Once confirmed, λ is the new level and no departure is pending: sized for it.
    confirmed = decide(model(arrival_rate=2_100), ControlState(), NOW, POLICY)
    assert isinstance(confirmed, Scale) and confirmed.target == 14  # ceil(2 200 / 160)
    # A departure downwards does not hold a backlogged query back.
    assert isinstance(decide(model(arrival_pending=300), ControlState(), NOW, POLICY), Scale)


def test_growing_backlog_alone_triggers_scale_up() -> None:
    verdict = decide(model(arrival_rate=350), ControlState(), NOW, POLICY)
    # ceil((350 + 100) / 160) = 3
    assert isinstance(verdict, Scale) and verdict.target == 3


def test_small_backlog_within_capacity_holds() -> None:
    verdict = decide(model(arrival_rate=300, backlog_records=200,
                           backlog_trend_records_per_s=0, time_to_drain_s=2),
                     ControlState(), NOW, POLICY)
    assert isinstance(verdict, Hold) and verdict.reason.startswith("within band")


def test_estimated_overload_refuted_by_a_shrinking_small_backlog_holds() -> None:
    """Small micro-batches make the capacity estimate read low (fixed per-batch cost); when
    the backlog is small and shrinking, the job evidently keeps up, so nothing is done."""
    refuted = model(arrival_rate=150, rate_per_unit=59, backlog_records=733,
                    backlog_trend_records_per_s=-20.9, time_to_drain_s=30)
    held = decide(refuted, ControlState(), NOW, POLICY)
    assert isinstance(held, Hold) and held.reason.startswith(
        "arrivals read over 90% of capacity, not confirmed by the backlog (at most 1 000 "
        "records, changing -20.9/s): arrival 150/s exceeds capacity 118/s"), held.reason
    noise = replace(refuted, backlog_trend_records_per_s=5.9)
    assert isinstance(decide(noise, ControlState(), NOW, POLICY), Hold)
    growing = replace(refuted, backlog_trend_records_per_s=120)
    assert isinstance(decide(growing, ControlState(), NOW, POLICY), Scale)


def test_arrivals_passing_through_from_an_upstreams_catch_up_are_no_overload_nor_slow_drain(
        ) -> None:
    """500/s on 400/s of capacity (high water 360/s), 6 000 behind, not growing: overloaded
    and draining never; with 250/s of it an upstream's catch-up passing through, neither (it
    drains in 40 s at 250/s), with 150/s, a slow drain (120 s at 350/s) but no overload."""
    steady = model(arrival_rate=500, backlog_trend_records_per_s=0)
    assert backlog_causes(steady, POLICY) == ["overload", "slow_drain"]
    assert backlog_causes(steady, POLICY, Inflow(passing=250)) == []
    assert backlog_causes(steady, POLICY, Inflow(passing=150)) == ["slow_drain"]


def test_a_backlog_growing_under_high_water_is_taken_in_longer_batches() -> None:
    """A backlog growing 100/s that λ, timed by the batches, has not seen yet counts once λ
    and the growth leave the band (360/s here), as overload does; under it, batches run
    longer."""
    below = model(arrival_rate=200, backlog_records=2000, backlog_trend_records_per_s=100,
                  time_to_drain_s=10)
    assert backlog_causes(below, POLICY) == []
    held = decide(below, ControlState(), NOW, POLICY)
    assert isinstance(held, Hold) and held.reason.startswith(
        "within band, its backlog growing 100/s: arrivals and that growth, 300/s, stay under "
        "90% of capacity, taken in longer batches: arrival 200/s within capacity 400/s"), held
    above = replace(below, arrival_rate=300, time_to_drain_s=20)
    assert backlog_causes(above, POLICY) == ["growing"]
    # 100/s of the 300/s an upstream's catch-up passing through: under the band again
    assert backlog_causes(above, POLICY, Inflow(passing=100)) == []


def test_target_is_capped_by_task_slots_and_max_parallelism() -> None:
    verdict = decide(model(task_slots=4), ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and verdict.target == 4
    assert "capped at 4 by task slots" in verdict.reason
    verdict = decide(model(), ControlState(), NOW, replace(POLICY, max_parallelism=3))
    assert isinstance(verdict, Scale) and verdict.target == 3


def test_more_partitions_than_task_slots_sends_no_input_parallelism_that_adds_no_units(
        ) -> None:
    """Input parallelism under the partitions runs a task per partition, as many at once as
    there are task slots: raising it to the floor adds none, so a query that needs more is at
    its ceiling (the producers' rate advised), with nothing sent."""
    local = model(source_partitions=1024, parallelism=4, units=16, task_slots=16,
                  arrival_rate=4_000, rate_per_unit=200)
    verdict = decide(local, ControlState(), NOW, POLICY)
    assert not isinstance(verdict, Scale), verdict
    assert isinstance(verdict, Recommend) and "at 16 units (task slots)" in verdict.reason


def test_partitions_set_the_floor() -> None:
    assert knob_range(model(source_partitions=8), POLICY).low == 8
    verdict = decide(model(source_partitions=8, parallelism=8, units=8, arrival_rate=100,
                           backlog_records=0, backlog_trend_records_per_s=0,
                           time_to_drain_s=0), ControlState(quiet_since_ms=NOW - 600_000),
                     NOW, POLICY)
    assert isinstance(verdict, Hold) and "already at the floor of 8" in verdict.reason
    # Partitions above the slots: the floor wins, the knob cannot go below it anyway.
    assert knob_range(model(source_partitions=8, task_slots=4), POLICY).high == 8


def test_backlogged_at_the_ceiling_recommends_throttling_with_the_numbers() -> None:
    # 16 units × 200/s = 3 200/s against 4 000/s: no more units to add. At 80 % that is
    # 2 560/s, minus 50 000 / 60 s to drain the backlog: throttle to ~1 727/s, shed ~57 %.
    verdict = decide(model(parallelism=16, units=16, arrival_rate=4000, backlog_records=50_000),
                     ControlState(), NOW, POLICY)
    assert isinstance(verdict, Recommend) and verdict.action == "throttle"
    assert verdict.parameter == "producer_rate"
    assert verdict.value == pytest.approx(0.8 * 3200 - 50_000 / 60)
    assert verdict.reason.startswith(
        "at 16 units (task slots) capacity is 3 200/s against 4 000/s arriving and 50 000 "
        "records behind; throttle the producers to 1 727/s (keeps 80% utilisation and drains "
        "the backlog in 60 s); nothing to shed: the job marks no record low priority")


SHEDDABLE = Shedding(low_priority_share=0.5, fraction=0.0, max_fraction=0.8)
"""Half the records read are low priority; the job lets at most 80 % of them go."""


def test_at_the_ceiling_a_sheddable_query_is_shed_in_one_step_sized_in_the_knobs_unit(
        ) -> None:
    # 16 units × 200/s processed; with f of the half that is low priority shed, 16 × 200 /
    # (1 − f/2) records/s read. 4 000/s arriving and 20 000 behind (333/s over 60 s) need
    # 0.8 × 3 200 / (1 − f/2) ≥ 4 333: f ≥ 0.82, over the bound of 0.8, so the bound and the
    # rest said plainly: 4 333 − 0.8 × 5 333 = 67/s.
    sized = decide(model(parallelism=16, units=16, arrival_rate=4000, backlog_records=20_000,
                         shedding=SHEDDABLE), ControlState(), NOW, POLICY)
    assert isinstance(sized, Shed) and sized.action == "shed"
    assert (sized.current, sized.target, sized.parameter) == (0.0, 0.8, "shed_fraction")
    assert "shedding 80% of the low-priority records (50% of those read) is the job's bound, " \
           "overloaded by 66.7/s beyond it: nothing left to shed" in sized.reason
    # 3 000/s and 6 000 behind (100/s): 0.8 × 3 200 / (1 − f/2) ≥ 3 100 at f ≥ 0.348, the
    # next multiple of 5 %: 35 %.
    enough = decide(model(parallelism=16, units=16, arrival_rate=3000, backlog_records=6_000,
                          shedding=SHEDDABLE), ControlState(), NOW, POLICY)
    assert isinstance(enough, Shed) and enough.target == pytest.approx(0.35)
    assert "shedding 35% of the low-priority records (50% of those read) keeps 80% " \
           "utilisation and drains the backlog in 60 s" in enough.reason


def test_with_shedding_at_the_ceiling_turned_off_it_is_only_advised_in_the_knobs_unit() -> None:
    advised = decide(model(parallelism=16, units=16, arrival_rate=3000, backlog_records=6_000,
                           shedding=SHEDDABLE), ControlState(), NOW,
                     replace(POLICY, shed_at_ceiling=False))
    assert isinstance(advised, Recommend) and advised.action == "throttle", advised
    assert "throttle the producers to 2 460/s" in advised.reason  # 0.8 × 3 200 − 100
    assert "or shed 35% of the low-priority records (policy.shed_at_ceiling is off)" \
        in advised.reason
    # A fraction set by hand counts in what the producers may send: 3 200 / 0.8 read.
    by_hand = decide(model(parallelism=16, units=16, arrival_rate=4000, backlog_records=6_000,
                           shedding=replace(SHEDDABLE, fraction=0.4)), ControlState(), NOW,
                     replace(POLICY, shed_at_ceiling=False))
    assert isinstance(by_hand, Recommend) and by_hand.value == pytest.approx(0.8 * 4000 - 100)


def test_the_throttle_advised_never_asks_the_producers_for_less_than_half_the_rate_read(
        ) -> None:
    # 16 units × 200/s, 80 % of it: 2 560/s read. 120 000 behind drains in the 60 s catch-up
    # time at 2 560 − 2 000 = 560/s; half of 2 560/s instead, and the drain takes 94 s. Past
    # 76 800 behind the same floor holds, the drain time grows, the rate does not.
    def advice(backlog: int) -> Recommend:
        advised = decide(model(parallelism=16, units=16, arrival_rate=3000,
                               backlog_records=backlog, shedding=SHEDDABLE), ControlState(),
                         NOW, replace(POLICY, shed_at_ceiling=False))
        assert isinstance(advised, Recommend) and advised.action == "throttle", advised
        return advised
    assert advice(60_000).value == pytest.approx(2560 - 1000)
    assert "throttle the producers to 1 560/s (keeps 80% utilisation and drains the backlog " \
           "in 60 s)" in advice(60_000).reason
    floor = advice(120_000)
    assert floor.value == pytest.approx(1280)
    assert "throttle the producers to 1 280/s (keeps 80% utilisation and drains the backlog " \
           "in 93.8 s, past the catch-up time of 60 s: the producers keep half the rate " \
           "read)" in floor.reason
    assert advice(300_000).value == pytest.approx(1280)


def test_producer_rate_is_monotone_in_the_backlog_and_says_when_nothing_drains_it() -> None:
    rates = [producer_rate(2560, backlog, 60)[0] for backlog in range(0, 300_000, 5_000)]
    assert rates == sorted(rates, reverse=True) and min(rates) == 1280
    assert producer_rate(2560, 0, 60) == (2560, 0)
    assert producer_rate(0, 1000, 60) == (0, math.inf)


def test_at_the_ceiling_shedding_holds_while_it_suffices_then_advises_a_throttle_at_its_bound(
        ) -> None:
    shed = replace(SHEDDABLE, fraction=0.4)
    held = decide(model(parallelism=16, units=16, arrival_rate=3000, backlog_records=6_000,
                        shedding=shed), ControlState(), NOW, POLICY)
    assert isinstance(held, Hold) and held.action == "shedding", held
    assert "shedding 40% of the low-priority records keeps 80% utilisation" in held.reason
    at_bound = decide(model(parallelism=16, units=16, arrival_rate=4000, backlog_records=20_000,
                            shedding=replace(SHEDDABLE, fraction=0.8)), ControlState(), NOW,
                      POLICY)
    assert isinstance(at_bound, Recommend) and at_bound.action == "throttle"
    # 3 200 / 0.6 = 5 333/s read at the bound; at 80 %, less the backlog's 333/s: 3 933/s.
    assert at_bound.value == pytest.approx(0.8 * 3200 / 0.6 - 20_000 / 60)
    assert "the job's bound, overloaded by 66.7/s beyond it: nothing left to shed: throttle " \
           "the producers to 3 933/s" in at_bound.reason


def test_shedding_is_lifted_step_by_step_before_anything_is_scaled_down() -> None:
    quiet_since = ControlState(quiet_since_ms=NOW - 3_600_000)
    shed = replace(SHEDDABLE, fraction=0.8)
    # Quiet for an hour, but shedding comes off first, by at most half of the low-priority
    # records a step.
    calm = quiet(shedding=shed)
    first = decide(calm, quiet_since, NOW, POLICY)
    assert isinstance(first, Shed) and first.action == "lift_shedding"
    assert (first.current, first.target) == (0.8, pytest.approx(0.3))
    assert "lifting shedding 80% → 30%" in first.reason
    last = decide(replace(calm, shedding=replace(shed, fraction=0.3)), quiet_since, NOW, POLICY)
    assert isinstance(last, Shed) and last.target == 0.0
    assert isinstance(decide(replace(calm, shedding=replace(shed, fraction=0.0)), quiet_since,
                             NOW, POLICY), Scale)
    # Still needed at the ceiling (the load only fell a little): held, nothing scaled down.
    # 16 units read 3 200 / 0.85 = 3 765/s with 30 % shed; 3 000/s needs 0.8 × that or more.
    busy = model(parallelism=16, units=16, arrival_rate=3000, throughput=2900,
                 backlog_records=0, backlog_trend_records_per_s=0,
                 shedding=replace(shed, fraction=0.3))
    held = decide(busy, quiet_since, NOW, POLICY)
    assert isinstance(held, Hold) and held.action == "shedding", held
    assert "nothing is scaled down while any is shed" in held.reason
    # Below a ceiling that has risen since, units are added instead of records dropped.
    risen = decide(replace(busy, parallelism=8, units=8, arrival_rate=1500), quiet_since, NOW,
                   POLICY)
    assert isinstance(risen, Scale) and risen.target > 8, risen


def test_a_shed_fraction_is_lifted_only_a_step_below_what_is_needed() -> None:
    """A step of margin: at a load on a step's edge, a fraction raised at the ceiling is not
    lifted again by the next, unbacklogged decision."""
    shed = replace(SHEDDABLE, fraction=0.35)
    # The 35 % set above for 3 000/s: with the backlog gone it needs 0.8 × 3 200 / (1 − f/2)
    # ≥ 3 000: f ≥ 0.293, so 30 %, a step below; lifted only to 35 % again, so held.
    settled = model(parallelism=16, units=16, arrival_rate=3000, throughput=3000,
                    backlog_records=0, backlog_trend_records_per_s=0, shedding=shed)
    held = decide(settled, ControlState(), NOW, POLICY)
    assert isinstance(held, Hold) and held.action == "shedding", held


def test_no_decision_in_flight_or_in_cooldown() -> None:
    flying = ControlState(in_flight=InFlight("c-1", 5, 1, NOW - 1000))
    held = decide(model(), flying, NOW, POLICY)
    assert isinstance(held, Hold) and "waiting for the ack of control c-1" in held.reason
    cooling = ControlState(cooldown_until_ms=NOW + 12_000)
    held = decide(model(), cooling, NOW, POLICY)
    assert isinstance(held, Hold) and "cooling down" in held.reason and "12 s left" in held.reason
    assert isinstance(decide(model(), cooling, NOW + 12_000, POLICY), Scale)


def quiet(**changes: Any) -> QueryModel:
    # 100/s on 8 units of 200/s: 6 % utilised, nothing behind.
    return model(parallelism=8, units=8, arrival_rate=100, backlog_records=50,
                 backlog_trend_records_per_s=0, time_to_drain_s=0.03, **changes)


def test_scale_down_waits_for_stabilisation_then_steps() -> None:
    held = decide(quiet(), ControlState(quiet_since_ms=NOW - 60_000), NOW, POLICY)
    assert isinstance(held, Hold) and "for 60 s of the 120 s" in held.reason
    verdict = decide(quiet(), ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    # 1 unit would do; at most three quarters of the 8 removed at once: 2 kept.
    assert isinstance(verdict, Scale) and (verdict.current, verdict.target) == (8, 2)
    assert verdict.action == "scale_down" and "stepping down 8 → 2" in verdict.reason


def test_scale_down_goes_to_the_size_needed_when_that_is_within_the_step() -> None:
    over = replace(quiet(), parallelism=16, units=16, arrival_rate=700)  # 20 % utilised
    verdict = decide(over, ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    needed = target_units(over, POLICY)  # 5: 700/s at 200/s per unit, 80 % utilisation
    assert needed is not None and math.ceil(16 * 0.25) <= needed < 16
    assert isinstance(verdict, Scale) and (verdict.current, verdict.target) == (16, needed)


def test_a_batch_cap_that_follows_the_units_is_resized_with_them_in_the_same_verdict() -> None:
    """Batches of 400 records with 0.5 s of overhead each get at most 800/s through however
    many units run: a fixed cap can only be advised up. Following the units (200 a unit),
    each unit adds 133/s, and the step is sized in one verdict that sets both."""
    capped = model(batch_overhead_s=0.5, batch_cap=400, batch_cap_source="reported")
    assert isinstance(decide(capped, ControlState(), NOW, POLICY), Recommend)
    follows = replace(capped, batch_cap_per_unit=200.0, max_batch_cap=100_000)
    verdict = decide(follows, ControlState(), NOW, POLICY)
    # 800/s at 80 %: 1 000/s of 133.3/s a unit: 8 units, batches of 8 × 200.
    assert isinstance(verdict, Scale) and (verdict.target, verdict.batch_cap) == (8, 1600)
    assert verdict.figures["batch_cap_target"] == 1600
    assert "batches of at most 1 600 records (were 400): 200 a unit, as before" in verdict.reason
    limited = decide(replace(follows, max_batch_cap=1200), ControlState(), NOW, POLICY)
    # From 6 units on the cap stays at the job's 1 200: 1 200 / (0.5 + 6 / p) ≥ 1 000 at p = 9.
    assert isinstance(limited, Scale) and (limited.target, limited.batch_cap) == (9, 1200)
    assert "(were 400): the job's limit" in limited.reason
    # At a limit of 450 no number of units gets 1 000/s through batches of 0.5 s overhead:
    # the cap is advised, not units that cannot help.
    bound = decide(replace(follows, max_batch_cap=450), ControlState(), NOW, POLICY)
    assert isinstance(bound, Recommend)


def test_a_scale_down_takes_the_batch_cap_back_to_the_records_per_unit() -> None:
    follows = quiet(batch_cap=1600, batch_cap_source="reported", batch_cap_per_unit=200.0,
                    max_batch_cap=100_000)
    verdict = decide(follows, ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    assert isinstance(verdict, Scale) and (verdict.target, verdict.batch_cap) == (2, 400)
    fixed = decide(replace(follows, batch_cap_per_unit=0.0), ControlState(
        quiet_since_ms=NOW - 130_000), NOW, POLICY)
    assert isinstance(fixed, Scale) and (fixed.target, fixed.batch_cap) == (2, 0)


def test_exact_fit_does_not_round_up() -> None:
    assert required_units(320, 200, 0.8) == 2


rates = st.floats(min_value=0, max_value=1e6, allow_nan=False)
backlogs = st.floats(min_value=0, max_value=1e8, allow_nan=False)
per_unit = st.floats(min_value=1, max_value=1e5, allow_nan=False)


@given(rates, backlogs, per_unit, st.integers(1, 64), st.integers(0, 64), st.integers(1, 32))
def test_target_stays_within_bounds(arrival: float, backlog: float, mu: float, current: int,
                                    slots: int, partitions: int) -> None:
    m = model(arrival_rate=arrival, backlog_records=backlog, rate_per_unit=mu,
              parallelism=current, units=current, task_slots=slots,
              source_partitions=partitions, backlog_trend_records_per_s=1e9)
    verdict = decide(m, ControlState(), NOW, POLICY)
    if isinstance(verdict, Scale):
        limits = knob_range(m, POLICY)
        assert limits.low <= verdict.target <= limits.high
        assert verdict.target > current


@given(rates, rates, backlogs, backlogs, per_unit)
def test_required_units_are_monotone_in_arrival_and_backlog(
        a1: float, a2: float, b1: float, b2: float, mu: float) -> None:
    lo_a, hi_a = sorted((a1, a2))
    lo_b, hi_b = sorted((b1, b2))
    low = target_units(model(arrival_rate=lo_a, backlog_records=lo_b, rate_per_unit=mu), POLICY)
    high = target_units(model(arrival_rate=hi_a, backlog_records=hi_b, rate_per_unit=mu),
                        POLICY)
    assert low is not None and high is not None and low <= high


def ahead(peak: float, in_s: float = 1200) -> Forecast:
    return Forecast(peak=peak, in_s=in_s, period_s=86_400, error=0.08, checked_s=3600)


def test_a_repeating_load_that_will_exceed_the_capacity_is_sized_ahead_in_one_step() -> None:
    # 200/s on 2 units of 200/s, nothing behind; the day's rise reaches 700/s in 20 minutes.
    calm = model(arrival_rate=200, backlog_records=0, backlog_trend_records_per_s=0,
                 time_to_drain_s=0)
    assert isinstance(decide(calm, ControlState(), NOW, POLICY), Hold)
    carried = decide(replace(calm, forecast=ahead(390)), ControlState(), NOW, POLICY)
    assert isinstance(carried, Hold)  # a peak the 400/s carry is the band's business
    verdict = decide(replace(calm, forecast=ahead(700)), ControlState(), NOW, POLICY)
    assert isinstance(verdict, Scale) and (verdict.current, verdict.target) == (2, 5)
    assert verdict.reason.startswith("not backlogged, but the load that repeats every 24 h "
                                     "reaches 700/s in 20 min")
    assert verdict.figures["forecast_peak"] == 700


def test_a_quiet_query_is_not_scaled_down_below_the_peak_its_repeating_load_reaches_ahead(
        ) -> None:
    stable = ControlState(quiet_since_ms=NOW - 130_000)
    held = decide(quiet(forecast=ahead(1400)), stable, NOW, POLICY)  # 9 units at 80 %
    assert isinstance(held, Hold) and "which needs 9 units" in held.reason
    lower = decide(quiet(forecast=ahead(600)), stable, NOW, POLICY)  # 4 units at 80 %
    assert isinstance(lower, Scale) and (lower.current, lower.target) == (8, 4)


def test_a_step_is_sized_for_the_backlog_that_builds_while_the_change_is_applied() -> None:
    """700/s into 400/s of capacity: 300 more records wait each second until the new size
    runs. Before any change the prior says how long that is; after one, the query's own."""
    prior = replace(POLICY, change_prior_s=10)
    verdict = decide(model(), ControlState(), NOW, prior)
    # (700 + (6 000 + 3 000) / 60) / 160 = 5.3: 6 units, where the backlog of the moment asks 5.
    assert isinstance(verdict, Scale) and verdict.target == 6
    assert verdict.figures["backlog_during_change"] == 3000
    assert ("with the 3 000 records that arrive beyond its capacity while the change is "
            "applied, 10 s") in verdict.reason
    slow = decide(model(), ControlState(change_s=40), NOW, prior)
    # (700 + (6 000 + 12 000) / 60) / 160 = 6.25: 7.
    assert isinstance(slow, Scale) and slow.target == 7
    # 200/s of λ an upstream's catch-up passing through: 100/s beyond capacity wait, not 300
    passing = decide(model(), ControlState(), NOW, prior, Inflow(passing=200.0), "up")
    assert isinstance(passing, Scale), passing
    assert passing.figures["backlog_during_change"] == 1000


def test_an_applied_resizing_sizes_the_next_step_for_the_backlog_of_its_own_length() -> None:
    """A resizing acked 13.5 s after its tuple: the next step counts 300/s beyond capacity for
    that long; a shedding's ack in between leaves it."""
    flight = InFlight("c1", 6, 4, NOW, current=2, rate_per_unit=200)
    done = applied(replace(ControlState(), in_flight=flight), NOW + 13_500, 0)
    shed = InFlight("c2", 0, 5, NOW, parameter="shed_fraction", text="0.25")
    after_shed = applied(replace(done, in_flight=shed), NOW + 2_000, 0)
    for state in (done, after_shed):
        verdict = decide(model(), state, NOW + 20_000, POLICY)
        assert isinstance(verdict, Scale)
        assert verdict.figures["backlog_during_change"] == pytest.approx(300 * 13.5)
