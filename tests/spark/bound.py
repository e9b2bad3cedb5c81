"""A `JobConfig` for a job under test, its declaration's defaults filled in (`config.bind`):
the job's own settings are keyword arguments like the runtime's options."""

from __future__ import annotations

from typing import Any

from streaming_jobs.api import Job
from streaming_jobs.config import JobConfig, bind


def bound_config(job: Job, **fields: Any) -> JobConfig:
    settings = {name: fields.pop(name) for name in list(fields)
                if name in job.default_settings()}
    return bind(JobConfig(job=job.name, settings=tuple(settings.items()), **fields), job)
