"""A `JobConfig` for a job under test, its declaration's defaults filled in (`config.bind`):
the job's own settings are keyword arguments like the runtime's options. `run_command` is
the same configuration as a `streamctl job run` command line, for a real process."""

from __future__ import annotations

from typing import Any

from streaming_jobs.api import Job
from streaming_jobs.config import GROUP_OF, JobConfig, bind, grouped, option_list


def bound_config(job: Job, **fields: Any) -> JobConfig:
    declared = {s.name for s in job.settings}
    settings = {name: fields.pop(name) for name in list(fields) if name in declared}
    return bind(grouped(dict(job=job.name, settings=tuple(settings.items()), **fields)), job)


def value_of(config: JobConfig, name: str) -> Any:
    """A field's value by its flat (option) name."""
    group = GROUP_OF.get(name)
    return getattr(config if group is None else getattr(config, group), name)


def run_command(config: JobConfig) -> list[str]:
    """`job run` arguments giving `config` (every option not at its default, and each
    setting); the control key goes in the environment (`STREAMCTL_CONTROL_KEY`)."""
    args = ["job", "run"]
    for option in option_list():
        value = value_of(config, option.field)
        if value == option.default:
            continue
        args += [option.flag] if option.type is bool else [option.flag, str(value)]
    for name, value in config.settings:
        args += ["--set", f"{name}={value}"]
    return args
