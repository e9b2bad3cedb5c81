"""The rate model on simulated metric traces: steady load, a load step, readiness, edge data."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.core.model import (
    QueryModel,
    Remembered,
    arrival_rate,
    evaluate,
    rate_per_unit,
    slope_per_s,
)
from controller.core.results import NotReady
from controller.core.shedding import Shedding
from controller.settings import ModelSettings
from schemas import SourcePartition
from schemas.objectives import Objectives
from tests.unit.controller.traces import T0_MS, Job, simulate

SETTINGS = ModelSettings()


def modelled(trace: list, settings: ModelSettings = SETTINGS) -> QueryModel:
    result = evaluate("q1", tuple(trace), settings)
    assert isinstance(result, QueryModel), result
    return result


def test_steady_load_is_measured_within_tolerance() -> None:
    # 300 records/s into 2 units of 210/s: 71 % utilised, no backlog.
    job = Job(rates=[(0, 300)], per_unit=210, parallelism=2)
    m = modelled(simulate(job, 60)[-40:])
    assert m.arrival_rate == pytest.approx(300, rel=0.02)
    assert m.rate_per_unit == pytest.approx(210, rel=0.02)
    assert m.capacity == pytest.approx(420, rel=0.02)
    assert m.throughput == pytest.approx(300, rel=0.05)
    assert m.busy_ratio == pytest.approx(300 / 420, rel=0.05)
    assert m.utilisation == pytest.approx(300 / 420, rel=0.03)
    # What arrived while the newest batch ran (~0.7 s of 300/s) waits for the next trigger
    # as a matter of course: no backlog.
    assert m.backlog_records == 0
    assert abs(m.backlog_trend_records_per_s) < 5
    assert math.isfinite(m.time_to_drain_s)


def test_the_objectives_a_job_states_are_the_newest_records_and_the_figures_show_them(
        ) -> None:
    trace = simulate(Job(rates=[(0, 300)], per_unit=210, parallelism=2), 60)[-40:]
    assert modelled(trace).objectives == Objectives()
    assert "max_delay_s" not in modelled(trace).figures()
    stated = [*trace[:-1], replace(trace[-1], max_delay_ms=30_000, drain_within_ms=90_000)]
    m = modelled(stated)
    assert m.objectives == Objectives(max_delay_s=30, drain_within_s=90)
    assert (m.figures()["max_delay_s"], m.figures()["drain_within_s"]) == (30, 90)
    assert m.figures()["delay_s"] == pytest.approx(m.trigger_interval_s)  # nothing behind


def test_shed_rows_are_not_capacity_and_the_shedding_figures_are_the_jobs(
        ) -> None:
    """A shed row is dropped before any work: μ counts the rows processed, so a job that sheds
    half of what it reads shows the capacity of the work it does, not twice it."""
    trace = simulate(Job(rates=[(0, 300)], per_unit=210, parallelism=2), 60)[-40:]
    shedding = [replace(s, rows_shed=s.input_rows // 2, rows_low_priority=s.input_rows,
                        shed_fraction=0.5, max_shed_fraction=0.8) for s in trace]
    m = modelled(shedding)
    assert m.rate_per_unit == pytest.approx(modelled(trace).rate_per_unit / 2, rel=0.03)
    assert m.shedding == Shedding(low_priority_share=1.0, fraction=0.5, max_fraction=0.8)
    assert modelled(trace).shedding == Shedding()


def test_load_step_shows_as_growing_backlog() -> None:
    # 300/s for a minute, then 800/s; the job takes at most 500 records per batch, so the
    # extra stays in Kafka and the backlog grows at about 800 - 420 = 380/s.
    job = Job(rates=[(0, 300), (60, 800)], per_unit=210, parallelism=2, max_per_batch=500)
    step_ms = T0_MS + 61_000
    trace = [s for s in simulate(job, 120) if s.batch_start_ms >= step_ms]
    m = modelled(trace)
    assert m.arrival_rate == pytest.approx(800, rel=0.03)
    assert m.capacity == pytest.approx(420, rel=0.05)
    assert m.backlog_trend_records_per_s == pytest.approx(380, rel=0.15)
    assert m.backlog_records > 15_000
    assert m.time_to_drain_s == math.inf
    assert m.busy_ratio > 0.95


def test_too_few_samples_is_not_ready() -> None:
    trace = simulate(Job(rates=[(0, 300)], per_unit=210, parallelism=2), 2)
    assert evaluate("q1", tuple(trace), SETTINGS) == NotReady("only 2 samples, need 4")


def test_no_offsets_is_not_ready() -> None:
    trace = [replace(s, partitions=()) for s in simulate(Job([(0, 300)], 210, 2), 10)]
    result = evaluate("q1", tuple(trace), SETTINGS)
    assert isinstance(result, NotReady) and "arrival rate unknown" in result.reason


def test_no_rows_is_not_ready() -> None:
    trace = [replace(s, input_rows=0) for s in simulate(Job([(0, 300)], 210, 2), 10)]
    result = evaluate("q1", tuple(trace), SETTINGS)
    assert isinstance(result, NotReady) and "processing rate unknown" in result.reason


def test_heartbeat_without_offsets_does_not_fake_a_burst() -> None:
    trace = simulate(Job([(0, 300)], 210, 2), 10)
    trace[4] = replace(trace[4], partitions=(), input_rows=0)
    assert arrival_rate(tuple(trace)) == pytest.approx(300, rel=0.02)


def test_unknown_offsets_are_ignored() -> None:
    trace = simulate(Job([(0, 300)], 210, 2), 10)
    unknown = SourcePartition("in", 7, -1, -1, -1)
    trace = [replace(s, partitions=(*s.partitions, unknown)) for s in trace]
    assert arrival_rate(tuple(trace)) == pytest.approx(300, rel=0.02)


def test_processing_rate_weights_each_batch_by_its_units() -> None:
    before = simulate(Job([(0, 300)], 210, 2), 10)
    after = simulate(Job([(0, 300)], 210, 4, partitions=2), 10, start_s=10,
                     positions=[s.end_offset for s in before[-1].partitions], first_batch=10)
    assert rate_per_unit(tuple(before + after)) == pytest.approx(210, rel=0.02)


def test_slope_is_least_squares() -> None:
    assert slope_per_s([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2)
    assert slope_per_s([(5, 1), (5, 9)]) == 0


def test_a_load_step_shows_in_full_after_the_arrival_window() -> None:
    # A whole-window average would still be near (120 × 48 + 900 × 12) / 60 = 276/s.
    job = Job(rates=[(0, 120), (60, 900)], per_unit=200, parallelism=2, max_per_batch=400)
    trace = [s for s in simulate(job, 120) if s.batch_start_ms <= T0_MS + 72_000]
    assert modelled(trace[-60:]).arrival_rate == pytest.approx(900, rel=0.03)


def test_the_first_batch_of_a_run_is_not_a_rate_sample() -> None:
    """Spark's warm-up: 4 s more on the first batch with rows of an (instance, epoch)."""
    from controller.core.window import QueryWindow

    job = Job(rates=[(0, 300)], per_unit=210, parallelism=2, warm_up_s=4.0)
    window = QueryWindow("q1", window_s=60, max_samples=100)
    for sample in simulate(job, 20):
        window.add(sample)
    assert len(window.warm_up) == 1
    with_warm_up = modelled(list(window.samples))
    without = evaluate("q1", window.samples, SETTINGS, warm_up=window.warm_up)
    assert isinstance(without, QueryModel)
    assert without.rate_per_unit == pytest.approx(210, rel=0.02)
    assert with_warm_up.rate_per_unit < 0.9 * 210
    assert without.rate_samples == with_warm_up.rate_samples - 1


def test_only_a_warm_up_batch_with_rows_is_not_ready() -> None:
    trace = [s for s in simulate(Job([(0, 300)], 210, 2), 10) if s.input_rows > 0]
    trace = [trace[0], *(replace(s, input_rows=0) for s in trace[1:])]
    warm = frozenset({(trace[0].instance_id, trace[0].batch_id, 0)})
    result = evaluate("q1", tuple(trace), SETTINGS, warm_up=warm)
    assert isinstance(result, NotReady) and "warm-up" in result.reason


def test_the_batch_cap_is_reported_observed_or_remembered() -> None:
    steady = Job([(0, 300)], 210, 2, max_per_batch=4000)
    assert modelled(simulate(steady, 20)).batch_cap_source == "unbounded"
    remembered = evaluate("q1", tuple(simulate(steady, 20)), SETTINGS,
                          remembered=Remembered(batch_cap=4000))
    assert isinstance(remembered, QueryModel)
    assert (remembered.batch_cap, remembered.batch_cap_source) == (4000, "remembered")
    reported = modelled(simulate(replace(steady, report_cap=True), 20))
    assert (reported.batch_cap, reported.batch_cap_source) == (4000, "reported")


def test_a_reported_cap_with_its_limit_follows_the_units_unless_the_setting_says_not() -> None:
    steady = replace(Job([(0, 300)], 210, 2, max_per_batch=4000), report_cap=True)
    trace = simulate(steady, 20)
    assert modelled(trace).batch_cap_per_unit == 0  # no limit reported: the cap stays
    limited = [replace(m, max_batch_cap=10_000) for m in trace]
    follows = modelled(limited)
    assert (follows.batch_cap_per_unit, follows.max_batch_cap) == (2000, 10_000)
    assert [follows.batch_cap_at(u) for u in (1, 2, 4, 8)] == [2000, 4000, 8000, 10_000]
    fixed = modelled(limited, replace(SETTINGS, batch_cap_follows_units=False))
    assert fixed.batch_cap_per_unit == 0 and fixed.batch_cap_at(8) == 4000


def test_a_cap_clipped_at_the_jobs_limit_keeps_the_records_per_unit_it_followed() -> None:
    # 8 units at 2 000 records a unit would be 16 000: the job's limit clipped it to 10 000.
    clipped = [replace(m, max_batch_cap=10_000) for m in simulate(
        replace(Job([(0, 300)], 210, 8, max_per_batch=10_000), report_cap=True), 20)]
    after = evaluate("q1", tuple(clipped), SETTINGS,
                     remembered=Remembered(batch_cap_per_unit=2000.0))
    assert isinstance(after, QueryModel)
    assert after.batch_cap_per_unit == 2000 and after.batch_cap_at(2) == 4000
    assert Remembered().after(after).batch_cap_per_unit == 2000
    # A cap set by hand, not what the ratio gives at these units, is the new ratio.
    by_hand = evaluate("q1", tuple(clipped), SETTINGS,
                       remembered=Remembered(batch_cap_per_unit=500.0))
    assert isinstance(by_hand, QueryModel) and by_hand.batch_cap_per_unit == 1250


def test_partition_shares_name_the_hot_partition() -> None:
    job = Job([(0, 800)], 210, 2, max_per_batch=500, skew=0.8)
    m = modelled(simulate(job, 30)[-10:])
    arrivals = m.partition_arrival_shares
    assert arrivals.largest == "in/0" and arrivals.largest_share == pytest.approx(0.9, abs=0.02)
    assert arrivals.partitions == 2 and arrivals.of_topics({"in"}) == pytest.approx(1.0)
    assert m.partition_lag_shares.largest == "in/0"
    assert m.sink_topics == ("out",) and m.source_topics == ("in",)
    assert m.selectivity == 1.0
