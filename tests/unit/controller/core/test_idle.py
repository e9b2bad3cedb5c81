"""A query whose input stops goes to its minimum, sized with the μ and c last measured."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.core.arrival import ArrivalEstimate
from controller.core.cost import idle_cost
from controller.core.fit import BatchCost
from controller.core.model import QueryModel, Remembered, evaluate
from controller.core.results import NotReady
from controller.core.state import ControlState, InFlight, applied, issued, observed, settled
from controller.settings import ModelSettings, PolicySettings
from tests.unit.controller.traces import T0_MS, Job, probed_loop, simulate

# 300/s on 16 units of 100/s over 2 partitions, then nothing at all from 60 s on.
STOPS = Job(rates=[(0, 300), (60, 0)], per_unit=100, parallelism=16, partitions=2,
            task_slots=64, trigger_s=2.0, overhead_s=0.3)
COST = BatchCost(0.3, 100.0, "fit")


@pytest.mark.parametrize("ack_after_s", [0, 3])
def test_an_idle_query_steps_down_to_its_minimum_in_two_steps_and_no_further(
        ack_after_s: int) -> None:
    """Also when the job answers the first step seconds later, as a restarting query does
    (the loop goes on modelling the old size, quiet, until the ack)."""
    sent = probed_loop(STOPS, 600, ack_after_s=ack_after_s).sent
    assert [(c.parameter, int(c.value)) for _, c, _ in sent] == [
        ("input_parallelism", 4), ("input_parallelism", 2)]  # 2: one task per partition
    # Both after the window (60 s) had lost its last batch with rows: sized while idle.
    assert all(at > 60 + 60 for at, _, _ in sent), sent
    # The second step waits for a quiet model at 4 units, not for a second stabilisation.
    (first, _, _), (second, _, _) = sent
    assert second - first < PolicySettings().scale_down_stabilisation_s, sent


def test_a_scale_down_carries_its_quiet_to_the_new_size_until_a_model_there_is_not_quiet(
        ) -> None:
    quiet = ControlState(quiet_since_ms=1_000)
    down = issued(quiet, InFlight("c1", target=4, epoch=2, issued_at_ms=9_000, current=16))
    assert (down.quiet_since_ms, down.quiet_carried_ms) == (None, 1_000)
    after = applied(down, 12_000, cooldown_s=30)
    assert (after.quiet_since_ms, after.quiet_carried_ms) == (None, 1_000)
    refilling = observed(after, None, 13_000)  # no model while the window refills
    assert refilling.quiet_carried_ms == 1_000
    assert observed(refilling, True, 50_000).quiet_since_ms == 1_000
    # Models while the tuple is in flight are of the old size: they neither spend nor drop it.
    for quiet_before_the_ack in (True, False, None):
        assert observed(down, quiet_before_the_ack, 10_000) == down
    busy = observed(refilling, False, 50_000)  # the new size is not quiet: start over
    assert (busy.quiet_since_ms, busy.quiet_carried_ms) == (None, None)
    assert observed(busy, True, 60_000).quiet_since_ms == 60_000
    # A scale-up carries nothing; nor does a scale-down that was not applied.
    up = issued(quiet, InFlight("c2", target=8, epoch=2, issued_at_ms=9_000, current=4))
    assert up.quiet_carried_ms is None
    assert settled(down, 12_000, cooldown_s=30).quiet_carried_ms is None


def test_an_idle_window_is_sized_only_with_a_remembered_cost() -> None:
    idle = tuple(s for s in simulate(STOPS, 200) if s.batch_start_ms >= T0_MS + 130_000)
    assert idle and all(s.input_rows == 0 for s in idle)
    unknown = evaluate("q1", idle, ModelSettings())
    assert isinstance(unknown, NotReady) and "no batch with input rows" in unknown.reason
    known = evaluate("q1", idle, ModelSettings(), remembered=Remembered(cost=COST))
    assert isinstance(known, QueryModel)
    assert (known.arrival_rate, known.rate_per_unit, known.overhead_source) == (
        0.0, 100.0, "remembered")


def test_a_query_with_arrivals_and_no_rows_is_stuck_not_idle() -> None:
    assert idle_cost(ArrivalEstimate(0.0), COST) == BatchCost(0.3, 100.0, "remembered")
    assert idle_cost(ArrivalEstimate(5.0), COST) is None
    assert idle_cost(ArrivalEstimate(0.0, pending_rate=40.0), COST) is None
    assert idle_cost(ArrivalEstimate(0.0), None) is None


def test_a_remembered_lower_bound_stays_a_lower_bound() -> None:
    bound = BatchCost(0.0, 100.0, "assumed_zero")
    assert idle_cost(ArrivalEstimate(0.0), bound) == bound


def test_an_over_provisioned_query_is_sized_down_in_at_most_two_steps() -> None:
    """150/s needs 3 units of 100/s at 70 %; with 0.3 s of overhead in every small batch and
    batches of one size (no fit), μ reads lower, so the model may keep a few more."""
    needs_three = replace(STOPS, rates=[(0, 150)])
    sent = probed_loop(needs_three, 600).sent
    targets = [int(c.value) for _, c, _ in sent]
    assert 1 <= len(targets) <= 2 and targets == sorted(targets, reverse=True), targets
    assert 3 <= targets[-1] <= 8, targets
    assert sent[-1][0] <= 180, sent  # sized within three minutes of the start
