"""`DesiredState` on its own: how it names what is in force (acks and logs quote it)."""

from __future__ import annotations

from dataclasses import replace

from streaming_jobs.runtime.desired.state import DesiredState

IN_FORCE = DesiredState(epoch=5, input_parallelism=2, state_partitions=4,
                        max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v1",
                        input_topic="in", output_topic="out", executors=0)


def test_a_desired_state_names_every_parameter_its_knob_first_and_a_named_active_only() -> None:
    assert IN_FORCE.describe(knob="state_partitions") == (
        "state_partitions 4 (its knob), input_parallelism 2, max_offsets_per_trigger 4000, "
        "shed_fraction 0, udf_version v1, input_topic in, output_topic out, executors 0")
    promoted = replace(IN_FORCE, active_instance="b", shed_fraction=0.25)
    assert promoted.describe() == (
        "input_parallelism 2, state_partitions 4, max_offsets_per_trigger 4000, "
        "shed_fraction 0.25, udf_version v1, input_topic in, output_topic out, executors 0, "
        "active_instance b")


def test_a_change_names_each_parameter_that_moved_with_its_old_and_new_value() -> None:
    both = replace(IN_FORCE, input_parallelism=4, shed_fraction=0.1)
    assert IN_FORCE.describe_change(both) == "input_parallelism 2→4, shed_fraction 0→0.1"
