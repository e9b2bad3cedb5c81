"""The compose stack's own services, run as local processes, scraped by a real Prometheus.

End-to-end tier, no Docker: the topic-init service, the job and the controller run with the
`command` and `environment` of docker-compose.yml (mapped by `deployment.LocalMapping`:
`kafka:19092` to the session broker, `spark://spark-master:7077` to a local Spark master and
worker run from their compose services (`spark_cluster`), the job's driver host to loopback,
in-container ports to free local ports, /var/lib/streamctl and /run/secrets to a temporary
directory) against the session broker, with a small constant load. The job's driver submits
its tasks to that cluster, with the compose file's executor settings. Then Debian's
`prometheus` scrapes the job, the controller and the Spark master with deploy/prometheus.yml
rewritten to those ports, and `promtool` checks the config and every endpoint. Needs
`prometheus` and `promtool` on PATH (`./dev test` installs them).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource
from prometheus_client.parser import text_string_to_metric_families

from schemas.auth import ensure_key_file
from stack.defaults import DEFAULT_TOPICS
from stack.waiting import Deadline, poll_until
from streamctl.processes import Child
from tests.deploy import deployment as d
from tests.deploy.spark_cluster import LocalSparkCluster, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(540)]

QUERY = "sensor-averages"
STARTUP_BUDGET_S = 240.0  # driver, executors and the first batch on 2 busy cores: 60-120 s
SERVICES = d.services()
JOB_ENV = d.environment(SERVICES["job"])


@dataclass
class LocalStack:
    mapping: d.LocalMapping
    endpoints: dict[str, str]
    """Service name -> its /metrics URL."""
    children: list[Child]
    topics_output: str
    tmp: Path
    spark: LocalSparkCluster


def _start(name: str, command: list[str], env: dict[str, str], log_dir: Path) -> Child:
    """`streamctl …` as `python -m streamctl …` with exactly the given STREAMCTL_* variables."""
    assert command[0] == "streamctl", command
    base = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamctl", *command[1:]], cwd=d.ROOT,
        env={**base, **env, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    return Child(name, process, log_path, log)


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except (OSError, http.client.HTTPException):
        return None


def _sample(text: str | None, name: str, query: str = QUERY) -> float | None:
    for family in text_string_to_metric_families(text or ""):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("query") == query:
                return float(sample.value)
    return None


def _wait_for(children: list[Child], probe: object, what: str, budget_s: float) -> None:
    def check() -> bool | None:
        for child in children:
            assert child.alive(), f"{child.name} exited while waiting for {what}:\n" \
                                  f"{child.log_tail()}"
        return True if probe() else None  # type: ignore[operator]

    if poll_until(check, budget_s, interval_s=1.0) is None:
        logs = "\n".join(f"--- {c.name}\n{c.log_tail(15)}" for c in children)
        raise AssertionError(f"no {what} within {budget_s:.0f}s\n{logs}")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """The compose master and one worker (2 cores, 2 GiB: what the job's two executors take)."""
    cluster = start_cluster(tmp_path_factory.mktemp("spark"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def local_stack(bootstrap_servers: str, spark: LocalSparkCluster,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    tmp = tmp_path_factory.mktemp("compose-local")
    job_port, controller_port = d.listen_ports(2)
    advertised = d.environment(SERVICES["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    internal = dict(item.split("://") for item in advertised.split(","))["INTERNAL"]
    mapping = d.LocalMapping(
        addresses={internal: bootstrap_servers, JOB_ENV["STREAMCTL_SPARK_MASTER"]:
                   spark.master_url, JOB_ENV["STREAMCTL_SPARK_DRIVER_HOST"]: "127.0.0.1"},
        ports={9301: job_port, 9300: controller_port, 8080: spark.ui_ports["spark-master"]},
        paths={"/var/lib/streamctl/": f"{tmp}/var/", "/run/secrets/": f"{tmp}/secrets/"})
    ensure_key_file(tmp / "secrets" / "control-key")
    topics = subprocess.run(
        [sys.executable, "-m", "streamctl", *SERVICES["topics"]["command"][1:]], cwd=d.ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")},
             **mapping.environment(SERVICES["topics"])},
        capture_output=True, text=True, timeout=90)
    assert topics.returncode == 0, f"topic init failed:\n{topics.stdout}{topics.stderr}"
    children = [_start(name, SERVICES[name]["command"], mapping.environment(SERVICES[name]),
                       tmp / "logs") for name in ("controller", "job")]
    children.append(_start("load", ["streamctl", "produce", "--topic", "sensor-readings",
                                    "--profile", "constant", "--rate", "40",
                                    "--duration-s", "400"],
                           {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap_servers}, tmp / "logs"))
    endpoints = {"controller": f"http://127.0.0.1:{controller_port}/metrics",
                 "job": f"http://127.0.0.1:{job_port}/metrics"}
    stack = LocalStack(mapping, endpoints, children, topics.stdout, tmp, spark)
    try:
        _wait_for(children, lambda: (
            (_sample(_scrape(endpoints["job"]), "streamctl_job_input_rows_total") or 0) > 0
            and _sample(_scrape(endpoints["controller"]),
                        "streamctl_arrival_rate_records_per_second") is not None),
            "job metrics reaching the controller's model", STARTUP_BUDGET_S)
        yield stack
    finally:
        for child in reversed(children):
            child.stop(timeout_s=60.0)


def test_topic_init_creates_every_default_topic_as_specified(
        local_stack: LocalStack, bootstrap_servers: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    topics = admin.list_topics(timeout=10).topics
    resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in DEFAULT_TOPICS]
    configs = {r.name: f.result(timeout=10)
               for r, f in admin.describe_configs(resources).items()}
    for spec in DEFAULT_TOPICS:
        assert spec.name in local_stack.topics_output
        assert len(topics[spec.name].partitions) == spec.partitions, spec.name
        expected = {"cleanup.policy": "delete", **spec.config}
        actual = {k: configs[spec.name][k].value for k in expected}
        assert actual == expected, f"{spec.name}: {actual} != {expected}"


def test_job_metrics_reach_the_controller_and_both_endpoints_show_the_query(
        local_stack: LocalStack) -> None:
    job = _scrape(local_stack.endpoints["job"])
    controller = _scrape(local_stack.endpoints["controller"])
    assert (_sample(job, "streamctl_job_input_rows_total") or 0) > 0
    assert (_sample(job, "streamctl_job_input_parallelism") or 0) == \
        int(d.environment(SERVICES["job"])["STREAMCTL_INPUT_PARALLELISM"])
    assert (_sample(controller, "streamctl_current_parallelism") or 0) == \
        int(d.environment(SERVICES["job"])["STREAMCTL_INPUT_PARALLELISM"])
    arrival = _sample(controller, "streamctl_arrival_rate_records_per_second")
    assert arrival is not None and arrival > 0, "the controller saw no arrivals"


def test_the_job_runs_on_the_spark_cluster_with_the_executors_compose_asks_for(
        local_stack: LocalStack) -> None:
    slots = int(JOB_ENV["STREAMCTL_EXECUTORS"]) * int(JOB_ENV["STREAMCTL_EXECUTOR_CORES"])
    assert poll_until(lambda: True if _sample(_scrape(local_stack.endpoints["job"]),
                                              "streamctl_job_task_slots") == slots else None,
                      60.0, 1.0), f"the job never reported {slots} task slots"
    assert local_stack.spark.master_metric("metrics_master_apps_Value") == 1
    assert local_stack.spark.master_metric("metrics_master_waitingApps_Value") == 0


@pytest.mark.parametrize("service", ["controller", "job"])
def test_promtool_accepts_every_endpoint(local_stack: LocalStack, service: str) -> None:
    text = _scrape(local_stack.endpoints[service])
    assert text, f"{service} endpoint did not answer"
    check = subprocess.run([_tool("promtool"), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, f"{service}: {check.stdout}{check.stderr}"


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: `./dev setup` installs Debian's prometheus package"
    return path


def _api(base: str, path: str, **params: str) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a bad query answers 400 with an error body
        return json.loads(exc.read())


@pytest.fixture(scope="module")
def prometheus(local_stack: LocalStack) -> Iterator[str]:
    assert subprocess.run([_tool("promtool"), "check", "config", str(d.PROMETHEUS_FILE)],
                          capture_output=True, timeout=30).returncode == 0
    config_path = local_stack.tmp / "prometheus.yml"
    config = d.local_prometheus_config(local_stack.mapping,
                                       {"controller", "job", "spark-master"})
    config_path.write_text(yaml.safe_dump(config))
    check = subprocess.run([_tool("promtool"), "check", "config", str(config_path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    (port,) = d.listen_ports(1)
    log = (local_stack.tmp / "logs" / "prometheus.log").open("wb")
    server = subprocess.Popen(
        [_tool("prometheus"), f"--config.file={config_path}",
         f"--storage.tsdb.path={local_stack.tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    child = Child("prometheus", server, local_stack.tmp / "logs" / "prometheus.log", log)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for([child], lambda: _scrape(f"{base}/-/ready") is not None,
                  "Prometheus ready", 30.0)
        yield base
    finally:
        child.stop(timeout_s=20.0)


def _all_targets_up(base: str) -> bool:
    targets = _api(base, "/api/v1/targets").get("data", {}).get("activeTargets", [])
    return bool(targets) and all(t["health"] == "up" for t in targets)


def _live_samples(stack: LocalStack) -> dict[str, bool]:
    """Sample name -> whether it carries our query's label, over every live endpoint."""
    samples: dict[str, bool] = {}
    for url in stack.endpoints.values():
        for family in text_string_to_metric_families(_scrape(url) or ""):
            for sample in family.samples:
                ours = sample.labels.get("query") == QUERY
                samples[sample.name] = samples.get(sample.name, False) or ours
    return samples


def _series(base: str, selector: str) -> bool | None:
    result = _api(base, "/api/v1/query", query=selector).get("data", {}).get("result")
    return True if result else None


def test_prometheus_scrapes_the_stack_and_answers_every_dashboard_query(
        local_stack: LocalStack, prometheus: str) -> None:
    up = poll_until(lambda: True if _all_targets_up(prometheus) else None, 60.0, 1.0)
    targets = _api(prometheus, "/api/v1/targets")["data"]["activeTargets"]
    assert up, f"targets not up: {targets}"
    assert {t["labels"]["job"] for t in targets} == {
        "streamctl-controller", "streamctl-job", "spark-master", "spark-applications"}
    live = _live_samples(local_stack)
    deadline = Deadline.after(60.0)
    for where, expr in (q for b in d.dashboards().values() for q in d.panel_queries(b)):
        answer = _api(prometheus, "/api/v1/query", query=d.grafana_to_promql(expr))
        assert answer["status"] == "success", f"{where}: {expr}: {answer.get('error')}"
        # Every metric of the query that an endpoint serves now must be in Prometheus too.
        for name in sorted(d.metric_names(expr) & set(live)):
            selector = f'{name}{{query="{QUERY}"}}' if live[name] else name
            found = poll_until(lambda s=selector: _series(prometheus, s),  # type: ignore[misc]
                               deadline.remaining_s(), 1.0)
            assert found, f"{where}: Prometheus has no {selector} although an endpoint serves it"
    core = {"streamctl_arrival_rate_records_per_second", "streamctl_backlog_records",
            "streamctl_current_parallelism", "streamctl_job_input_rows_total"}
    assert core <= set(live), f"not served by the live endpoints: {core - set(live)}"
