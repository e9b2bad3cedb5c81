"""Finding a job: by import path (`package.module:attribute`) or by its installed name.

Owns how a job reference becomes a `api.Job`: an import path is imported the way Python tools
do it (the current directory first on the path, like `uvicorn main:app`); a bare name is looked
up in the `streamctl.jobs` entry-point group of the installed packages, where the bundled jobs
are registered like any plugin. Every failure is a `JobLoadError` naming the reference and what
to do. `worker_path` says which directory Spark's Python workers need on their import path to
unpickle the job's functions. Neighbours: `cli` (`job run`, `job list`), `runtime.job`.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from streaming_jobs.api import Job
from streaming_jobs.errors import UserError

ENTRY_POINT_GROUP = "streamctl.jobs"
JOB_ENV = "STREAMCTL_JOB"


class JobLoadError(UserError):
    """The job reference does not lead to a valid job; the message says why."""


@dataclass(frozen=True)
class Installed:
    """A job registered under the entry-point group."""

    name: str
    target: str
    """The entry point's value, `module:attribute`."""
    distribution: str


def installed() -> dict[str, Installed]:
    """Every installed job by name; `JobLoadError` when two packages register one name."""
    found: dict[str, list[Installed]] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry.dist.name if entry.dist is not None else "?"
        found.setdefault(entry.name, []).append(Installed(entry.name, entry.value, dist))
    clashes = {n: e for n, e in found.items() if len({x.target for x in e}) > 1}
    if clashes:
        name, entries = sorted(clashes.items())[0]
        raise JobLoadError(f"two installed packages register a job named {name!r}: "
                           + " and ".join(f"{e.target} ({e.distribution})" for e in entries)
                           + "; uninstall one, or run the other by its import path")
    return {name: entries[0] for name, entries in found.items()}


BUNDLED_DISTRIBUTION = "streamctl"
"""The distribution whose jobs come with streamctl (a user's installed jobs come from others)."""


def bundled() -> list[str]:
    """The names of the jobs that come with streamctl, in name order."""
    return sorted(name for name, job in installed().items()
                  if job.distribution == BUNDLED_DISTRIBUTION)


def load(reference: str) -> Job:
    """The job `reference` names: `module:attribute` or an installed job's name."""
    reference = reference.strip()
    if not reference:
        raise JobLoadError(f"no job given: pass --job NAME or --job package.module:attribute "
                           f"(or set {JOB_ENV}); installed: {_names()}")
    if ":" in reference:
        return _from_import_path(reference)
    entry = installed().get(reference)
    if entry is None:
        raise JobLoadError(f"no installed job is named {reference!r} (installed: {_names()}); "
                           "give an import path package.module:attribute to run a job that is "
                           "not installed")
    job = _from_import_path(entry.target)
    if job.name != reference:
        raise JobLoadError(f"the entry point {reference!r} ({entry.target}, "
                           f"{entry.distribution}) leads to a job named {job.name!r}; a job is "
                           "registered under its own name")
    return job


def _from_import_path(reference: str) -> Job:
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise JobLoadError(f"{reference!r} is not an import path: expected "
                           "package.module:attribute")
    if os.getcwd() not in sys.path:  # like `python -m` and uvicorn: the directory you run in
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):  # the path itself
            raise JobLoadError(f"cannot import {module_name!r} for job {reference!r}: {exc} "
                               f"(sys.path starts {sys.path[:3]})") from exc
        raise JobLoadError(f"importing {module_name!r} for job {reference!r} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # the job's own module failed: its error, with the reference
        raise JobLoadError(f"importing {module_name!r} for job {reference!r} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise JobLoadError(f"module {module_name!r} has no attribute {attribute!r} "
                               f"(job {reference!r})")
        value = getattr(value, part)
    if not isinstance(value, Job):
        raise JobLoadError(f"{reference!r} is a {type(value).__name__}, not a "
                           "streaming_jobs.api.Job")
    return value


def worker_path(job: Job) -> str | None:
    """The directory that makes the module of the job's builder importable, which Spark's
    Python workers need to unpickle it (None: a module Python cannot import by name, such
    as `__main__`; cloudpickle then ships the function by value)."""
    module = sys.modules.get(getattr(job.build, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    if module is None or not file or module.__name__ == "__main__":
        return None
    path = Path(file).resolve()
    return str(path.parents[module.__name__.count(".") + (path.name == "__init__.py")])


def _names() -> str:
    try:
        names = sorted(installed())
    except JobLoadError:
        return "(a name clash; see `streamctl job list`)"
    return ", ".join(names) or "none"
