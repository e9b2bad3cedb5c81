"""The compose override that deploys a user's jobs (examples/clickstream/docker-compose.yml on
top of docker-compose.yml), checked against the code: every job service runs an installed job
from the user's image, reads only variables the job runtime or that job's settings read, is
reachable by the executors at its own name, has its topics created, and is scraped; the Spark
workers run the user's image (executors import the user's modules)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streaming_jobs.config import env_var, flat_fields
from streaming_jobs.loading import installed, load
from tests.deploy import deployment as d

OVERRIDE = d.load_yaml(d.EXAMPLE_COMPOSE_FILE)
SERVICES = d.example_compose()["services"]
JOBS = {name: s for name, s in SERVICES.items()
        if d.process_kind(s) == "job" and "profiles" not in s}
USER_IMAGE = OVERRIDE["x-clickstream-image"]["image"]


def test_the_override_runs_the_three_jobs_and_not_the_bundled_one() -> None:
    assert set(JOBS) == {"click-enrich", "click-sessions", "click-alerts"}
    assert SERVICES["job"]["profiles"] == ["sensor"]


@pytest.mark.parametrize("name", ["click-enrich", "click-sessions", "click-alerts"])
def test_each_job_service_names_an_installed_job_and_only_variables_it_reads(name: str) -> None:
    env = d.environment(JOBS[name])
    job = load(env["STREAMCTL_JOB"])
    assert env["STREAMCTL_JOB"] in installed() and job.name == name
    read = ({env_var(f.name) for f in flat_fields()}
            | {env_var(s.name) for s in job.settings}
            | d.env_constants(*d._PROCESS_SOURCES["job"]))
    assert set(env) <= read, set(env) - read
    assert env["STREAMCTL_SPARK_DRIVER_HOST"] == name
    assert JOBS[name]["image"] == USER_IMAGE
    assert "checkpoints:/var/lib/streamctl/checkpoints" in JOBS[name]["volumes"]
    assert env["STREAMCTL_STATE_DIR"] == "/var/lib/streamctl"


def test_the_workers_run_the_users_image_and_share_the_checkpoints() -> None:
    worker = SERVICES["spark-worker"]
    assert worker["image"] == USER_IMAGE
    assert "checkpoints:/var/lib/streamctl/checkpoints" in worker["volumes"]


def test_the_jobs_topics_are_created_before_they_start() -> None:
    command = SERVICES["pipeline-topics"]["command"]
    created = {command[i + 1] for i, word in enumerate(command) if word == "--job"}
    assert created == {d.environment(s)["STREAMCTL_JOB"] for s in JOBS.values()}
    for service in JOBS.values():
        assert service["depends_on"]["pipeline-topics"]["condition"] == \
            "service_completed_successfully"


def test_prometheus_scrapes_every_job_of_the_pipeline() -> None:
    volumes = SERVICES["prometheus"]["volumes"]
    config_path = next(v.split(":")[0] for v in volumes if ":/etc/prometheus/prometheus.yml" in v)
    config: Any = d.load_yaml(d.ROOT / config_path)
    targets = {t for job in config["scrape_configs"] if job["job_name"] == "streamctl-job"
               for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"{name}:{d.environment(s)['STREAMCTL_METRICS_PORT']}"
                       for name, s in JOBS.items()}


def test_the_users_image_builds_on_the_projects() -> None:
    dockerfile = (d.EXAMPLE_COMPOSE_FILE.parent / "Dockerfile").read_text()
    base = re.search(r"ARG STREAMCTL_IMAGE=(\S+)", dockerfile)
    assert base and base.group(1) == d.services()["job"]["image"]
    assert "pip install --no-cache-dir --no-deps /opt/clickstream" in dockerfile
