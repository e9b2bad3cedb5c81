"""Whose checkpoint this is: a job refuses one written by another query or an incompatible plan.

Owns the identity file beside the checkpoint (`<checkpoint>.job.json`, written atomically, like
the desired-state file: Spark owns the directory itself): the query id, the job's name, whether
it keeps state, its state version and output mode. A job starting on a checkpoint whose
identity differs would misread it — another query's offsets, state of another schema — so it
stops with a `CheckpointMismatch` saying what differs and what to do, before Spark starts. A
checkpoint from before identities were recorded is adopted (its identity written) unless what
it holds contradicts the job (state in it, and a job that keeps none). Neighbours: `job`
(claims the checkpoint at start-up, where the options put it).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from streaming_jobs.api import Job
from streaming_jobs.config import ConfigError

log = logging.getLogger(__name__)


class CheckpointMismatch(ConfigError):
    """The checkpoint belongs to another query, or to a plan this job cannot continue."""


@dataclass(frozen=True)
class CheckpointIdentity:
    query_id: str
    job: str
    stateful: bool
    state_version: int
    output_mode: str

    @classmethod
    def of(cls, query_id: str, job: Job) -> CheckpointIdentity:
        return cls(query_id, job.name, job.stateful, job.state_version, job.output_mode)


def identity_path(checkpoint_dir: str) -> Path:
    return Path(checkpoint_dir.rstrip("/") + ".job.json")


def claim_checkpoint(checkpoint_dir: str, query_id: str, job: Job) -> CheckpointIdentity:
    """Check the checkpoint is query `query_id`'s of `job` (or new, or from before identities)
    and record it."""
    mine = CheckpointIdentity.of(query_id, job)
    path = identity_path(checkpoint_dir)
    recorded = _read(path)
    if recorded is not None:
        problem = mismatch(recorded, mine)
        if problem:
            raise CheckpointMismatch(
                f"the checkpoint {checkpoint_dir} {problem}; start with another "
                f"--checkpoint-dir (or --query-id, which names a new one), or delete the "
                f"checkpoint and {path.name} to start afresh")
        return mine
    checkpoint = Path(checkpoint_dir)
    if (checkpoint / "state").is_dir() and not job.stateful:
        raise CheckpointMismatch(
            f"the checkpoint {checkpoint_dir} holds state, but job {job.name!r} "
            "keeps "
            "none: it was written by another plan; start with another --checkpoint-dir")
    if (checkpoint / "metadata").is_file():
        log.warning("checkpoint %s has no identity yet (written before %s existed): adopting "
                    "it for query %s of job %s", checkpoint_dir, path.name,
                    mine.query_id, mine.job)
    _write(path, mine)
    return mine


def mismatch(recorded: CheckpointIdentity, mine: CheckpointIdentity) -> str | None:
    """What makes `recorded`'s checkpoint not `mine`, in words (None: it is mine)."""
    if recorded.query_id != mine.query_id:
        return (f"belongs to query {recorded.query_id!r} (job {recorded.job!r}), not "
                f"{mine.query_id!r}")
    if recorded.job != mine.job:
        return f"was written by job {recorded.job!r}; this is job {mine.job!r}"
    if recorded.stateful != mine.stateful:
        return (f"was written by a {'stateful' if recorded.stateful else 'stateless'} plan of "
                f"job {mine.job!r}, and the job is now "
                f"{'stateful' if mine.stateful else 'stateless'}")
    if recorded.state_version != mine.state_version:
        return (f"holds state version {recorded.state_version} of job {mine.job!r}, which now "
                f"declares state version {mine.state_version}: its state cannot be read")
    if recorded.output_mode != mine.output_mode:
        return (f"was written in output mode {recorded.output_mode!r}; job {mine.job!r} now "
                f"writes {mine.output_mode!r}")
    return None


def _read(path: Path) -> CheckpointIdentity | None:
    try:
        data = json.loads(path.read_text())
        return CheckpointIdentity(**{k: data[k] for k in CheckpointIdentity.__dataclass_fields__})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointMismatch(f"cannot read {path} ({exc}); it says which job the "
                                 "checkpoint belongs to: restore it or remove it") from exc


def _write(path: Path, identity: CheckpointIdentity) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(identity), out, indent=2)
    os.replace(tmp, path)
