"""Finding a job: by import path from a package outside the project, or by its installed name
through the `streamctl.jobs` entry points; every way it can fail is named with what to do."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_jobs.api import Job
from streaming_jobs.loading import JobLoadError, installed, load, worker_path

JOB_MODULE = """
from streaming_jobs.api import Job, Json, Topics

def build(spark, source, context):
    return source.selectExpr("user_id AS key", "page AS value")

job = Job(name="user-pages", build=build, input=Json("user_id string, page string"),
          topics=Topics("clicks", "pages"))
not_a_job = 42
"""


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package of the user's own, in a directory of its own, importable from there."""
    package = tmp_path / "userjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pages.py").write_text(JOB_MODULE)
    (package / "broken.py").write_text("import not_installed_anywhere\n")
    (package / "wrong.py").write_text(JOB_MODULE.replace('name="user-pages"', 'name="x y"'))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("userjobs")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def test_a_job_loads_from_an_import_path_outside_the_project(outside: Path) -> None:
    job = load("userjobs.pages:job")
    assert isinstance(job, Job) and job.name == "user-pages"
    assert worker_path(job) == str(outside.resolve())  # what Spark's workers must import


@pytest.mark.parametrize(("reference", "message"), [
    ("", "no job given: pass --job NAME or --job package.module:attribute (or set "
         "STREAMCTL_JOB); installed: "),
    ("userjobs.missing:job", "cannot import 'userjobs.missing' for job 'userjobs.missing:job': "
                             "No module named 'userjobs.missing'"),
    ("userjobs.pages:nothing", "module 'userjobs.pages' has no attribute 'nothing' (job "
                               "'userjobs.pages:nothing')"),
    ("userjobs.pages:not_a_job", "'userjobs.pages:not_a_job' is a int, not a "
                                 "streaming_jobs.api.Job"),
    ("userjobs.pages:", "'userjobs.pages:' is not an import path: expected "
                        "package.module:attribute"),
    ("userjobs.broken:job", "importing 'userjobs.broken' for job 'userjobs.broken:job' failed: "
                            "ModuleNotFoundError: No module named 'not_installed_anywhere'"),
    ("userjobs.wrong:job", "importing 'userjobs.wrong' for job 'userjobs.wrong:job' failed: "
                           "JobDefinitionError: job 'x y': the name must be"),
    ("no-such-job", "no installed job is named 'no-such-job' (installed: "),
])
def test_each_way_a_job_fails_to_load_is_named(outside: Path, reference: str,
                                               message: str) -> None:
    with pytest.raises(JobLoadError) as caught:
        load(reference)
    assert message in str(caught.value)


def _register(site: Path, dist: str, entries: dict[str, str]) -> None:
    """A real installed distribution's metadata: importlib.metadata finds it on sys.path."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[streamctl.jobs]\n{lines}\n")


def test_installed_jobs_are_found_by_name_and_clashes_are_refused(
        outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = outside / "site"
    _register(site, "userjobs_a", {"user-pages": "userjobs.pages:job",
                                   "misnamed": "userjobs.pages:job"})
    monkeypatch.syspath_prepend(str(site))
    assert installed()["user-pages"].distribution == "userjobs_a"
    assert load("user-pages").name == "user-pages"
    with pytest.raises(JobLoadError) as misnamed:
        load("misnamed")
    assert ("the entry point 'misnamed' (userjobs.pages:job, userjobs_a) leads to a job named "
            "'user-pages'") in str(misnamed.value)
    _register(site, "userjobs_b", {"user-pages": "userjobs.other:job"})
    with pytest.raises(JobLoadError) as clash:
        load("user-pages")
    assert ("two installed packages register a job named 'user-pages': userjobs.pages:job "
            "(userjobs_a) and userjobs.other:job (userjobs_b)") in str(clash.value)
