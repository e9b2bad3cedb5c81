"""Pipelines on hand-built figures: an upstream's catch-up burst and steady output, and how a
reader is sized for them (`topology`, `sizing.Inflow`, `policy.target_units`); the part of a
reader's λ that is an upstream's catch-up passing through, not sized for."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.batches import NO_SHARES, PartitionShares
from controller.core.model import QueryModel
from controller.core.policy import decide, target_units
from controller.core.results import Hold, Scale
from controller.core.season import Forecast
from controller.core.sizing import NO_INFLOW, Inflow, capacity, required_units
from controller.core.state import ControlState, InFlight
from controller.core.topology import (
    Output,
    plan,
    projected_output,
    received,
    steady_output,
    surplus,
)
from controller.core.wording import pressure
from controller.settings import PolicySettings

NOW = 1_700_000_000_000
POLICY = PolicySettings()


def model(**changes: Any) -> QueryModel:
    """A reader of μ 150/s per unit, 1.5 s per batch of at most 2 000, on 2 units (245/s),
    seeing 100/s now: the last job of the simulator's pipeline before its upstreams grow."""
    base = QueryModel(
        query_id="c", samples=10, config_epoch=0, arrival_rate=100, throughput=100,
        busy_ratio=0.5, rate_per_unit=150, parallelism=2, units=2, source_partitions=2,
        task_slots=16, backlog_records=0, backlog_trend_records_per_s=0, time_to_drain_s=0,
        batch_overhead_s=1.5, overhead_source="fit", batch_cap=2000, recent_throughput=100,
        source_topics=("b-out",), sink_topics=("out",))
    return replace(base, **changes)


def cap(units: int) -> float:
    return capacity(150, units, 1.5, 2000)


def test_a_burst_waits_only_where_the_reader_cannot_take_it_as_it_comes() -> None:
    burst = Inflow(steady=300, burst_records=6000, burst_rate=200)  # 200/s more for 30 s
    assert burst.waiting(400, 600) == 0  # takes the peak as it comes
    assert burst.waiting(400, 400) == 6000  # only the steady rate: all of it waits
    assert burst.waiting(400, 500) == pytest.approx(3000)  # 100/s short for 30 s
    assert burst.rate_at(100, 500, 60) == pytest.approx(300 + 3000 / 60)
    assert Inflow(burst_records=5, burst_rate=0).waiting(0, 0) == 0  # no drain, no burst
    assert NO_INFLOW.rate_at(100, 50, 60) == 0 and not NO_INFLOW.any


def test_a_reader_is_sized_for_the_burst_records_it_cannot_absorb_not_for_the_peak() -> None:
    # c of the simulator's pipeline: 400/s steady once b is resized; b catches up at 603/s
    # (its capacity at 11 units) with 9 716 records. Steady 400/s needs 7 units at 70 %
    # (0.7 × 587 = 411). At 7, c falls 15.6/s short for 9 716 / 203 = 47.9 s: 746 records
    # wait, 12.4/s over 60 s, and 412.4/s > 411/s; 8 units (632/s) take the peak as it comes.
    burst = Inflow(steady=300, burst_records=9716, burst_rate=203)
    assert (cap(7), cap(8)) == (pytest.approx(587.4, abs=0.1), pytest.approx(631.6, abs=0.1))
    assert burst.waiting(400, cap(7)) == pytest.approx(746, abs=1)
    assert required_units(400, 150, 0.7, 1.5, 2000) == 7
    assert target_units(model(), POLICY, burst) == 8
    # sizing for the peak at 70 % would take 17 (16 at the slot cap); spreading every burst
    # record over the catch-up time as if none could be taken as it comes, 14
    assert required_units(603, 150, 0.7, 1.5, 2000) == 17
    assert required_units(400 + 9716 / 60, 150, 0.7, 1.5, 2000) == 14


def test_a_burst_the_reader_partly_absorbs_sizes_it_between_steady_and_spread() -> None:
    # 600/s more for 15 s: 1 000/s arriving, beyond what any size takes at 70 % (the 1.5 s
    # overhead caps 2 000-record batches at 1 333/s). At 9 units (671/s) 4 938 records wait,
    # 82.3/s: 482/s > 0.7 × 671 = 470; at 10 (706/s) 4 412 wait, 73.5/s: 474/s <= 494/s.
    burst = Inflow(steady=300, burst_records=9000, burst_rate=600)
    assert burst.waiting(400, cap(9)) == pytest.approx(4938, abs=1)
    assert burst.waiting(400, cap(10)) == pytest.approx(4412, abs=1)
    assert target_units(model(), POLICY, burst) == 10
    assert required_units(1000, 150, 0.7, 1.5, 2000) is None
    assert required_units(400 + 9000 / 60, 150, 0.7, 1.5, 2000) == 13


def test_a_burst_the_reader_already_absorbs_adds_nothing() -> None:
    small = Inflow(steady=300, burst_records=9716, burst_rate=100)  # peaks at 500/s < 587/s
    assert target_units(model(), POLICY, small) == target_units(model(), POLICY,
                                                                Inflow(steady=300)) == 7


def test_a_burst_no_size_can_drain_in_time_asks_for_max_parallelism() -> None:
    huge = Inflow(steady=300, burst_records=10**7, burst_rate=10**4)
    assert target_units(model(), POLICY, huge) == POLICY.max_parallelism


def test_the_reason_names_the_burst_and_the_figures_carry_it() -> None:
    burst = Inflow(steady=300, burst_records=9716, burst_rate=203)
    verdict = decide(model(), ControlState(), NOW, POLICY, burst, "b")
    assert isinstance(verdict, Scale) and verdict.target == 8
    assert ("b will send 300/s more once resized, plus 9 716 records while catching up "
            "(up to 603/s arriving)") in verdict.reason
    # at 8 units nothing of the burst waits: the demand is the steady 400/s
    assert verdict.figures["burst_records"] == 9716 and verdict.figures["inflow"] == 300
    assert verdict.figures["demand"] == pytest.approx(400)


def upstream(**changes: Any) -> QueryModel:
    """b after a's step: μ 100/s per unit, 2 units (174/s, all it puts through), 400/s
    arriving, 1 000 behind."""
    return replace(model(query_id="b", rate_per_unit=100, arrival_rate=400,
                         recent_throughput=174, backlog_records=1000, source_topics=("a-out",),
                         sink_topics=("b-out",)), **changes)


def test_a_resized_upstream_sends_its_steady_rate_and_its_backlog_as_a_burst() -> None:
    b = upstream()
    scale = Scale("input_parallelism", 2, 11, "", {})
    out = projected_output(b, ControlState(), scale, NO_INFLOW, POLICY)
    assert out is not None
    assert out.steady == 400 and out.extra.steady == pytest.approx(400 - 174)
    # its backlog and what piles up while it restarts, sent on top of 400/s at its capacity
    assert out.extra.burst_records == pytest.approx(1000 + 400 * POLICY.reconfiguration_pause_s)
    assert out.extra.burst_rate == pytest.approx(capacity(100, 11, 1.5, 2000) - 400)
    halved = projected_output(replace(b, selectivity=0.5), ControlState(), scale, NO_INFLOW,
                              POLICY)
    assert halved is not None and halved.steady == 200
    assert halved.extra.burst_records == pytest.approx(out.extra.burst_records / 2)
    flying = ControlState(in_flight=InFlight("x", 11, 1, NOW))
    assert projected_output(b, flying, decide(b, flying, NOW, POLICY), NO_INFLOW, POLICY) == out


def test_an_upstream_that_cannot_keep_up_sends_its_capacity_and_no_burst() -> None:
    b = upstream(arrival_rate=2000)
    out = projected_output(b, ControlState(), Scale("input_parallelism", 2, 16, "", {}),
                           NO_INFLOW, POLICY)
    assert out is not None
    assert out.steady == pytest.approx(capacity(100, 16, 1.5, 2000))
    assert out.extra.burst_records == 0


def test_a_steady_query_projects_nothing() -> None:
    b = upstream(arrival_rate=174, backlog_records=0, parallelism=12, units=12)
    hold = decide(b, ControlState(), NOW, POLICY)
    assert not isinstance(hold, Scale)
    assert projected_output(b, ControlState(), hold, NO_INFLOW, POLICY) is None


def test_a_query_that_is_not_resized_passes_its_upstreams_burst_on() -> None:
    """b keeps up (no resize, no backlog) but a's catch-up still passes through it to c."""
    b = upstream(arrival_rate=174, backlog_records=0, parallelism=12, units=12)
    from_a = Inflow(steady=100, burst_records=5000, burst_rate=150)
    hold = decide(b, ControlState(), NOW, POLICY, from_a, "a")
    assert not isinstance(hold, Scale)
    out = projected_output(b, ControlState(), hold, from_a, POLICY)
    assert out is not None
    assert out.extra.burst_records == 5000  # no restart of its own: nothing piles up
    assert out.extra.steady == pytest.approx(100)


def test_a_reader_whose_rate_lags_its_upstream_is_sized_for_what_the_upstream_sends() -> None:
    """Right after a step a reader of long upstream batches measures λ late (109/s while its
    upstream already puts through 174/s): the upstream's projected output wins."""
    sent = Output(steady=400, extra=Inflow(steady=400 - 174))
    assert received(model(arrival_rate=109), [sent]).steady == pytest.approx(400 - 109)
    # ... and a reader fed by producers outside the plan as well keeps its own λ + extra
    assert received(model(arrival_rate=500), [sent]).steady == pytest.approx(400 - 174)


def simulated_pipeline() -> dict[str, QueryModel]:
    """a → b → c as the controller saw the simulator's pipeline 11 s after its 4× step."""
    a = upstream(query_id="a", rate_per_unit=200, source_topics=("in",),
                 sink_topics=("a-out",), arrival_rate=400, recent_throughput=308,
                 backlog_records=1200)
    b = upstream(arrival_rate=147, backlog_records=500)
    c = model(arrival_rate=109, recent_throughput=109)
    return {"a": a, "b": b, "c": c}


def test_the_pipeline_plan_sizes_every_job_and_the_reader_for_the_burst() -> None:
    verdicts = plan(simulated_pipeline(), {}, NOW, POLICY)
    targets = {q: v.target for q, v in verdicts.items() if isinstance(v, Scale)}
    # a: 420/s (400 + 1 200 / 60) → 6; b: a's 400/s and its backlog → 11 (10 for 400/s
    # alone); c: b's 400/s → 7, and one more so b's catch-up at 603/s passes as it comes
    assert targets == {"a": 6, "b": 11, "c": 8}
    c = verdicts["c"]
    assert isinstance(c, Scale)
    assert c.figures["inflow_steady"] == pytest.approx(400 - 109)  # λ lags b: not 400 − 174
    # b's backlog, the 10 s b restarts at 400/s, and a's burst that b passes on
    assert c.figures["burst_records"] == pytest.approx(500 + 4000 + 1200 + 4000)
    assert "b will send 291/s more once resized, plus 9 700 records" in c.reason
    # without the pile-up of the restarts the burst is small enough to absorb at 7
    no_pause = plan(simulated_pipeline(), {}, NOW, replace(POLICY, reconfiguration_pause_s=0))
    assert {q: v.target for q, v in no_pause.items() if isinstance(v, Scale)} == {
        "a": 6, "b": 11, "c": 7}


bursts = st.builds(Inflow, st.floats(0, 1e4), st.floats(0, 1e6), st.floats(0, 1e4))


@given(bursts, st.floats(0, 1e4), st.floats(0, 1e4), st.floats(0, 1e6), st.floats(0, 1e6))
def test_sizing_with_a_burst_is_monotone_and_between_steady_and_all_records_spread(
        burst: Inflow, a1: float, a2: float, b1: float, b2: float) -> None:
    def units(arrival: float, backlog: float, inflow: Inflow = burst) -> float:
        found = target_units(model(arrival_rate=arrival, backlog_records=backlog), POLICY,
                             inflow)
        return math.inf if found is None else found

    (lo_a, hi_a), (lo_b, hi_b) = sorted((a1, a2)), sorted((b1, b2))
    assert units(lo_a, lo_b) <= units(hi_a, lo_b) <= units(hi_a, hi_b)
    steady = units(lo_a, lo_b, Inflow(burst.steady))
    spread = units(lo_a, lo_b, Inflow(burst.steady + burst.burst_records / POLICY.catch_up_s))
    assert steady <= units(lo_a, lo_b) <= max(steady, min(spread, POLICY.max_parallelism))


def test_the_part_of_a_readers_rate_beyond_what_its_upstreams_send_for_good_is_passing(
        ) -> None:
    """c of the simulator's pipeline read 607/s while b, which sends 400/s for good, put
    out 584/s lately: up to that surplus, what c reads beyond 400/s is b's catch-up."""
    b = Output(steady=400, extra=NO_INFLOW, surplus=184)
    assert received(model(arrival_rate=500), [b]).passing == pytest.approx(100)
    # beyond the surplus, λ is producers outside the plan: 116/s of 700/s stay c's own
    assert received(model(arrival_rate=700), [b]).passing == pytest.approx(184)
    assert received(model(arrival_rate=350), [b]).passing == 0
    # two upstreams: what they send for good and their surpluses add up
    a = Output(steady=100, extra=NO_INFLOW, surplus=50)
    assert received(model(arrival_rate=700), [b, a]).passing == pytest.approx(200)
    assert received(model(arrival_rate=800), [b, a]).passing == pytest.approx(234)


def test_a_reader_of_an_external_topic_too_counts_only_its_upstreams_share_in_what_they_send(
        ) -> None:
    # c reads b-out, where b sends 400/s for good with 184/s of surplus, and clicks, where
    # producers outside the plan write 300/s: 700/s, of which b-out's 4/7 is 400/s, no catch-up
    shares = PartitionShares.listed(("clicks/0", 3 / 7), ("b-out/0", 2 / 7), ("b-out/1", 2 / 7))
    both = model(arrival_rate=700, source_topics=("b-out", "clicks"),
                 partition_arrival_shares=shares)
    b = Output(steady=400, extra=NO_INFLOW, surplus=184)
    assert received(both, [b], {"b-out"}).passing == pytest.approx(0)
    # the same shares of 800/s: b-out's 457/s is 57/s of b's catch-up
    assert received(replace(both, arrival_rate=800), [b], {"b-out"}).passing == pytest.approx(
        800 * 4 / 7 - 400)
    # b will send 550/s once resized: 150/s more than b-out has now (λ's 700/s hides it)
    resized = Output(steady=550, extra=Inflow(steady=50))
    assert received(both, [resized], {"b-out"}).steady == pytest.approx(150)
    # no shares yet to tell b-out from clicks: none of 800/s passes (a reader of b-out alone
    # needs no shares: 184/s of it would)
    unknown = replace(both, arrival_rate=800, partition_arrival_shares=NO_SHARES)
    assert received(unknown, [b], {"b-out"}).passing == 0
    alone = replace(unknown, source_topics=("b-out",))
    assert received(alone, [b], {"b-out"}).passing == pytest.approx(184)


def test_a_reader_of_an_upstream_catching_up_and_of_an_external_topic_is_resized_for_its_own(
        ) -> None:
    """c as in test_a_reader_of_an_upstream_catching_up_is_not_resized_for_it, but 207/s of
    its 607/s are clicks from outside the plan: b-out brings the 400/s b sends for good, none
    of b's catch-up, so c's growth is its own."""
    shares = PartitionShares.listed(("clicks/0", 207 / 607), ("b-out/0", 200 / 607),
                                    ("b-out/1", 200 / 607))
    c = reader_c(source_topics=("b-out", "clicks"), partition_arrival_shares=shares)
    assert isinstance(plan({"b": catching_up_b(), "c": c}, {}, NOW, POLICY)["c"], Scale)


def catching_up_b(**changes: Any) -> QueryModel:
    """b of the simulator's pipeline 22 s after its resize: keeping up with 400/s (no backlog
    to speak of) while it put out 584/s lately, its backlog shrinking 89/s."""
    return replace(upstream(arrival_rate=400, throughput=571, recent_throughput=584,
                            backlog_records=300, backlog_trend_records_per_s=-89,
                            parallelism=8, units=8, batch_cap=8000), **changes)


def reader_c(**changes: Any) -> QueryModel:
    """c then: 607/s on 6 units with batches of 6 000 (735/s: high water 661/s), 2 406
    behind and growing 92/s."""
    return replace(model(arrival_rate=607, recent_throughput=590, parallelism=6, units=6,
                         batch_cap=6000, backlog_records=2406, backlog_trend_records_per_s=92,
                         time_to_drain_s=19), **changes)


def test_only_an_upstream_catching_up_has_a_surplus() -> None:
    b = catching_up_b()
    assert surplus(b, ControlState(), NOW, POLICY, 400) == pytest.approx(184)  # shrinking
    flat = catching_up_b(backlog_trend_records_per_s=0)
    assert surplus(flat, ControlState(), NOW, POLICY, 400) == 0
    # ... unless an actuation of its ended within the catch-up time: it drains its pause
    resized = ControlState(settled_at_ms=NOW - 21_000)
    assert surplus(flat, resized, NOW, POLICY, 400) == pytest.approx(184)
    long_ago = ControlState(settled_at_ms=NOW - int(POLICY.catch_up_s * 1000) - 1)
    assert surplus(flat, long_ago, NOW, POLICY, 400) == 0


def test_an_upstream_that_keeps_up_sends_what_it_takes_in_even_where_its_capacity_reads_lower(
        ) -> None:
    # a hot partition: 2 units read as 1.25 (task skew 1.6), 139/s of capacity for 174/s
    skewed = upstream(arrival_rate=174, backlog_records=0, task_skew=1.6)
    assert skewed.capacity < 174
    assert steady_output(skewed, NO_INFLOW).steady == pytest.approx(174)
    assert steady_output(skewed, Inflow(passing=24)).steady == pytest.approx(150)


def test_a_reader_of_an_upstream_catching_up_is_not_resized_for_it_and_says_so() -> None:
    """b is not resized this round (it keeps up); c reads b's catch-up: grown by 92/s at
    607/s, it would count as backlogged (607 + 92 > 661), but 184/s of it is b's catch-up."""
    models = {"b": catching_up_b(), "c": reader_c()}
    verdicts = plan(models, {}, NOW, POLICY)
    c = verdicts["c"]
    assert isinstance(c, Hold) and not isinstance(verdicts["b"], Scale)
    assert c.reason.startswith(
        "not backlogged but for b's catch-up passing through (184/s of its arrivals are b's "
        "catch-up, over once caught up: not sized for; without it, 58% of capacity)"), c.reason
    # without evidence of a catch-up, what b put out beyond its λ is a rise: c is resized
    flat = {**models, "b": catching_up_b(backlog_trend_records_per_s=0)}
    assert isinstance(plan(flat, {}, NOW, POLICY)["c"], Scale)
    # b's model of an earlier cycle (context, not modelled now) says nothing of its output now
    assert isinstance(plan(models, {}, NOW, POLICY, followed={"b"}, context={"b"})["c"], Scale)


def test_a_reader_with_no_capacity_measured_that_reads_only_a_catch_up_holds_and_says_so(
        ) -> None:
    # growing 100/s: overloaded, but for the 200/s passing (2 000 behind would drain never)
    behind = model(rate_per_unit=0, batch_overhead_s=0, arrival_rate=200,
                   backlog_trend_records_per_s=100)
    held = decide(behind, ControlState(), NOW, POLICY, Inflow(passing=200), "b")
    assert isinstance(held, Hold), held
    assert "without it, 0/s with no capacity measured" in held.reason, held.reason


def test_a_forecast_within_twice_the_error_of_a_readers_rate_and_its_capacity_waits_for_evidence(
        ) -> None:
    # c: 245/s, high water 220/s; b will send 130/s more: 230/s, 4 % beyond high water
    near = Inflow(steady=130)
    sure = decide(model(rate_error=0.01, rate_samples=10), ControlState(), NOW, POLICY, near, "b")
    assert isinstance(sure, Scale), sure  # ±2 %: the forecast is beyond it
    unsure = decide(model(rate_error=0.05, rate_samples=10), ControlState(), NOW, POLICY, near,
                    "b")
    assert isinstance(unsure, Hold), unsure
    assert ("its capacity, 245/s, is known within ±10% (10 batches), and the 230/s forecast "
            "outgrows 90% of it by less than that") in unsure.reason, unsure.reason
    one = decide(model(rate_error=math.inf, rate_samples=1), ControlState(), NOW, POLICY, near,
                 "b")
    assert isinstance(one, Hold) and "rests on one batch" in one.reason, one
    # ... but not beyond the capacity itself: 260/s
    beyond = decide(model(rate_error=math.inf, rate_samples=1), ControlState(), NOW, POLICY,
                    Inflow(steady=160), "b")
    assert isinstance(beyond, Scale), beyond
    # 400/s more: beyond any such doubt
    far = decide(model(rate_error=0.05, rate_samples=10), ControlState(), NOW, POLICY,
                 Inflow(steady=400), "b")
    assert isinstance(far, Scale), far
    # the forecast is the one the sizing takes: λ where its own ramp (0.5/s over the 40 s
    # horizon) or repeating load (a peak under its capacity) takes it, 120/s, and b's 130/s
    # more: 250/s, beyond that doubt (242.6/s)
    within = Forecast(peak=120, in_s=600, period_s=86_400, error=0.05, checked_s=3600)
    for own in (model(rate_error=0.05, rate_samples=10, arrival_ramp=0.5),
                model(rate_error=0.05, rate_samples=10, forecast=within)):
        assert isinstance(decide(own, ControlState(), NOW, POLICY, near, "b"), Scale), own
    # its own backlog is evidence of its own: the error does not hold it
    behind = model(rate_error=math.inf, rate_samples=1, arrival_rate=300, backlog_records=3_000,
                   backlog_trend_records_per_s=100)
    assert isinstance(decide(behind, ControlState(), NOW, POLICY, near, "b"), Scale)
    # ... and so is a repeating load that outgrows the capacity within the lead: sized ahead
    # for it, as it would be with no forecast from b at all
    peak = Forecast(peak=300, in_s=600, period_s=86_400, error=0.05, checked_s=3600)
    ahead = model(rate_error=0.05, rate_samples=10, forecast=peak)
    assert isinstance(decide(ahead, ControlState(), NOW, POLICY), Scale)
    assert isinstance(decide(ahead, ControlState(), NOW, POLICY, near, "b"), Scale)
    # even on a μ that is a lower bound, which an upstream's forecast alone never resizes
    bound = replace(ahead, overhead_source="assumed_zero")
    assert isinstance(decide(replace(bound, forecast=None), ControlState(), NOW, POLICY, near,
                             "b"), Hold)
    assert isinstance(decide(bound, ControlState(), NOW, POLICY, near, "b"), Scale)


def test_passing_is_taken_off_the_arrival_rate_before_any_forecast_or_burst() -> None:
    # 100/s of 500/s passing: the steady arrivals a burst adds to are 500 − 100 + 100 = 500,
    # so at 600/s half of a 200/s burst waits (3 000 records over 60 s), not all of it
    burst = Inflow(steady=100, burst_records=6000, burst_rate=200, passing=100)
    assert burst.rate_at(500, 600, 60) == pytest.approx(100 + 3000 / 60)
    passing = Inflow(passing=100)
    assert target_units(model(arrival_rate=500), POLICY, passing) == target_units(
        model(arrival_rate=400), POLICY)
    # a repeating load's peak holds no catch-up: λ less what passes, or the peak, if higher
    peak = Forecast(peak=450, in_s=600, period_s=86_400, error=0.05, checked_s=3600)
    assert target_units(model(arrival_rate=500, forecast=peak), POLICY, passing) == \
        target_units(model(arrival_rate=450), POLICY) != target_units(model(arrival_rate=350),
                                                                        POLICY)


def test_the_pressure_names_the_catch_up_passing_through() -> None:
    text = pressure(reader_c(), Inflow(passing=184), "b")
    assert text.endswith("; 184/s of its arrivals are b's catch-up, over once caught up: not "
                         "sized for"), text
