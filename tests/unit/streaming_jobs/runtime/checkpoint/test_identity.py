"""A checkpoint knows whose it is: another query, another job, a plan whose state it cannot
read or a changed output mode is refused before Spark starts; a checkpoint from before
identities is adopted unless it holds state the job cannot have."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from streaming_jobs.api import Job, Json, Topics
from streaming_jobs.runtime.checkpoint.identity import (
    CheckpointMismatch,
    claim_checkpoint,
    identity_path,
)


def build(spark: Any, source: Any, context: Any) -> Any:
    return source


JOB = Job(name="sessions", build=build, input=Json("user_id string"),
          topics=Topics("clicks", "sessions"), stateful=True)


def claim(checkpoint: Path, job: Job, query_id: str = "sessions") -> None:
    claim_checkpoint(str(checkpoint), query_id, job)


def test_a_new_checkpoint_is_claimed_and_the_same_job_claims_it_again(tmp_path: Path) -> None:
    checkpoint = tmp_path / "cp"
    claim(checkpoint, JOB)
    assert json.loads(identity_path(str(checkpoint)).read_text()) == {
        "query_id": "sessions", "job": "sessions", "stateful": True, "state_version": 1,
        "output_mode": "append"}
    claim(checkpoint, JOB)


@pytest.mark.parametrize(("query_id", "job", "message"), [
    ("other-query", JOB, "belongs to query 'sessions' (job 'sessions'), not 'other-query'"),
    ("sessions", replace(JOB, name="renamed"), "was written by job 'sessions'; this is job "
                                               "'renamed'"),
    ("sessions", replace(JOB, state_version=2), "holds state version 1 of job 'sessions', "
                                                "which now declares state version 2: its state "
                                                "cannot be read"),
    ("sessions", replace(JOB, stateful=False), "was written by a stateful plan of job "
                                               "'sessions', and the job is now stateless"),
    ("sessions", replace(JOB, output_mode="update"), "was written in output mode 'append'; "
                                                     "job 'sessions' now writes 'update'"),
])
def test_a_checkpoint_of_another_query_or_plan_is_refused(tmp_path: Path, query_id: str,
                                                          job: Job, message: str) -> None:
    checkpoint = tmp_path / "cp"
    claim(checkpoint, JOB)
    with pytest.raises(CheckpointMismatch) as caught:
        claim(checkpoint, job, query_id)
    assert f"the checkpoint {checkpoint} {message}" in str(caught.value)
    assert "start with another --checkpoint-dir" in str(caught.value)


def test_a_checkpoint_from_before_identities_is_adopted_unless_it_contradicts_the_job(
        tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    (legacy / "state" / "0").mkdir(parents=True)
    (legacy / "metadata").write_text('{"id":"5e1c"}')
    with pytest.raises(CheckpointMismatch, match="holds state, but job 'stateless' keeps none"):
        claim(legacy, replace(JOB, name="stateless", stateful=False))
    claim(legacy, JOB)
    assert json.loads(identity_path(str(legacy)).read_text())["job"] == "sessions"


def test_an_unreadable_identity_is_not_guessed_at(tmp_path: Path) -> None:
    checkpoint = tmp_path / "cp"
    identity_path(str(checkpoint)).write_text("{not json")
    with pytest.raises(CheckpointMismatch, match=r"cannot read .*cp\.job\.json"):
        claim(checkpoint, JOB)
