"""Issue 3's "done when" claims, asserted on the simulator with the real control loop.

Each test runs `bench.sim`'s scenario (the same numbers as the published tables) under
"ours", i.e. `controller.loop.cycle.ControlLoop` with production settings over the in-memory fakes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bench.sim import scenarios
from bench.sim.measures import figures
from bench.sim.policies import Ours
from bench.sim.run import Scenario, Trace, simulate


@pytest.fixture(autouse=True)
def _quiet_controller() -> Iterator[None]:
    logger = logging.getLogger("controller")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _ours(scenario: Scenario) -> Trace:
    return simulate(scenario, Ours())


@pytest.mark.parametrize("scenario", [
    scenarios.step_2x(), scenarios.step_4x(),
], ids=lambda s: s.name)
def test_a_single_step_converges_in_one_action_at_most_two(scenario: Scenario) -> None:
    trace = _ours(scenario)
    result = figures(trace)
    assert result.converge_s is not None, "still over the backlog target at the end"
    assert 1 <= result.actions <= 2, [c.value for _, c in trace.controls]
    assert result.direction_changes == 0


def test_noisy_steady_state_does_not_oscillate() -> None:
    result = figures(_ours(scenarios.noisy()))
    assert result.direction_changes == 0 and result.actions <= 1


def test_a_pipeline_with_a_bottleneck_in_the_middle_is_sized_in_one_round() -> None:
    scenario = scenarios.pipeline()
    trace = _ours(scenario)
    queries = [job.query_id for job in scenario.jobs]
    ups = {q: [(t, c) for t, c in trace.controls if c.query_id == q] for q in queries}
    assert all(ups.values()), f"not every job was scaled: {ups}"
    # one round: every job's tuple was issued before any of them took effect (acked) ...
    first_ids = {c.control_id for tuples in ups.values() for _, c in tuples[:1]}
    issued_by = max(t for tuples in ups.values() for t, _ in tuples[:1])
    first_ack = min(t for t, a in trace.acks if a.control_id in first_ids)
    assert issued_by <= first_ack, f"last first-tuple at {issued_by} s, first ack {first_ack} s"
    # ... and it was enough: no job needed a second scale-up, and the pipeline settled
    assert all(len(tuples) == 1 for tuples in ups.values()), {
        q: [c.value for _, c in tuples] for q, tuples in ups.items()}
    assert figures(trace).converge_s is not None


def test_a_stateful_step_is_sized_by_state_partitions_in_one_action() -> None:
    trace = _ours(scenarios.stateful_step())
    result = figures(trace)
    assert [c.parameter for _, c in trace.controls] == ["state_partitions"]
    assert result.converge_s is not None and result.direction_changes == 0


def test_on_a_cluster_executors_come_first_and_the_knob_follows_as_they_run() -> None:
    """Two one-core executors: the same step needs more slots, then the state partitions;
    it converges as fast as in local mode (the knob follows the executors' ack at once)."""
    trace = _ours(scenarios.stateful_step_on_a_cluster())
    result = figures(trace)
    [(_, more), (followed_at, knob)] = trace.controls
    assert (more.parameter, knob.parameter) == ("executors", "state_partitions")
    [executors_ack] = [t for t, a in trace.acks if a.control_id == more.control_id]
    assert followed_at - executors_ack <= trace.scenario.tick_s  # the next cycle
    assert int(knob.value) <= int(more.value)
    local = figures(_ours(scenarios.stateful_step()))
    assert result.converge_s is not None and local.converge_s is not None
    assert result.converge_s <= local.converge_s + 2 * scenarios.FRAUD.executor_start_s
