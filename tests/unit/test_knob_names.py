"""The knobs have one spelling, `schemas.knobs`: the job runtime's parameter registry holds
exactly those names, the public job API offers the scaling ones to a user's job, and every
module of the project takes a knob's name from there, never from a module that passes it on."""

from __future__ import annotations

import ast
from pathlib import Path

from schemas import knobs
from streaming_jobs import api
from streaming_jobs.runtime.desired.state import REGISTRY, ROLE_PARAMETER, TOPIC_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
NAMES = {"INPUT_PARALLELISM", "STATE_PARTITIONS", "MAX_OFFSETS_PER_TRIGGER", "SHED_FRACTION",
         "UDF_VERSION", "OUTPUT_TOPIC", "INPUT_TOPIC", "EXECUTORS", "ACTIVE_INSTANCE"}
PUBLIC_API = "streaming_jobs/api.py"
USERS_OF_THE_API = "streaming_jobs/jobs/"
"""A user's job, and the bundled ones written like it, import `STATE_PARTITIONS` from the API
they are written against."""


def test_the_registry_holds_exactly_the_shared_names() -> None:
    assert tuple(REGISTRY) == knobs.ALL
    assert ROLE_PARAMETER == knobs.ACTIVE_INSTANCE and TOPIC_PARAMETERS == knobs.TOPICS
    assert {getattr(knobs, n) for n in NAMES} == set(knobs.ALL)


def test_the_job_api_offers_the_scaling_knobs_by_their_one_spelling() -> None:
    assert set(knobs.SCALING) <= set(knobs.ALL) and not hasattr(api, "SCALING_KNOBS")
    assert (api.INPUT_PARALLELISM, api.STATE_PARTITIONS) == (knobs.INPUT_PARALLELISM,
                                                             knobs.STATE_PARTITIONS)


def test_every_module_takes_a_knobs_name_from_schemas_knobs() -> None:
    """Outside the public API and the jobs written against it, a module that imports a
    knob's constant imports it from `schemas.knobs` (or uses `knobs.X`): no re-export becomes
    a second source."""
    wrong = []
    for package in ("controller", "streaming_jobs", "schemas", "streamctl", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative == PUBLIC_API or relative.startswith(USERS_OF_THE_API):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.ImportFrom) and node.module != "schemas.knobs"
                        and {a.name for a in node.names} & NAMES):
                    wrong.append(f"{relative}: from {node.module}")
    assert not wrong
