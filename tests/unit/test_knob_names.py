"""The knobs have one spelling (`schemas.knobs`): the job runtime's parameter registry holds
exactly those names, and the controller and the public job API use the same constants."""

from __future__ import annotations

from controller.core import results
from schemas import knobs
from streaming_jobs import api
from streaming_jobs.runtime.control.parameters import REGISTRY, ROLE_PARAMETER, TOPIC_PARAMETERS


def test_the_registry_holds_exactly_the_shared_names() -> None:
    assert tuple(REGISTRY) == knobs.ALL
    assert ROLE_PARAMETER == knobs.ACTIVE_INSTANCE and TOPIC_PARAMETERS == knobs.TOPICS


def test_the_controller_and_the_job_api_size_the_same_knobs() -> None:
    assert api.SCALING_KNOBS == knobs.SCALING and set(knobs.SCALING) <= set(knobs.ALL)
    assert (results.INPUT_PARALLELISM, results.STATE_PARTITIONS, results.EXECUTORS,
            results.ACTIVE_INSTANCE) == (knobs.INPUT_PARALLELISM, knobs.STATE_PARTITIONS,
                                         knobs.EXECUTORS, knobs.ACTIVE_INSTANCE)
