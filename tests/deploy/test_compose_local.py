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

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from schemas.auth import ensure_key_file
from streamctl.processes import Child, stop_all
from streamctl.stack.defaults import DEFAULT_TOPICS, LEASE_TOPIC, METRICS_TOPIC
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.tcp import find_free_ports
from tests.deploy import deployment as d
from tests.support.kafka import topic_config
from tests.support.prometheus import api, check_config, check_metrics, running, sample, scrape
from tests.support.spark_cluster import LocalSparkCluster
from tests.support.waiting import until

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


@pytest.fixture(scope="module")
def local_stack(bootstrap_servers: str, spark_cluster: LocalSparkCluster,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The compose stack on the session's Spark master and one worker (2 cores, 2 GiB: what
    the job's two executors take)."""
    spark = spark_cluster
    tmp = tmp_path_factory.mktemp("compose-local")
    job_port, controller_port = find_free_ports(2)
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
        env={**d.outside_environment(), **mapping.environment(SERVICES["topics"])},
        capture_output=True, text=True, timeout=90)
    assert topics.returncode == 0, f"topic init failed:\n{topics.stdout}{topics.stderr}"
    children = [d.start_service(name, SERVICES[name]["command"],
                                mapping.environment(SERVICES[name]), tmp / "logs")
                for name in ("controller", "job")]
    children.append(d.start_service("load", ["streamctl", "produce", "--topic", "sensor-readings",
                                    "--profile", "constant", "--rate", "40",
                                    "--duration-s", "400"],
                           {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap_servers}, tmp / "logs"))
    endpoints = {"controller": f"http://127.0.0.1:{controller_port}/metrics",
                 "job": f"http://127.0.0.1:{job_port}/metrics"}
    stack = LocalStack(mapping, endpoints, children, topics.stdout, tmp, spark)
    try:
        until(lambda: (
            (sample(scrape(endpoints["job"]), "streamctl_job_input_rows_total", query=QUERY)
             or 0) > 0
            and sample(scrape(endpoints["controller"]),
                       "streamctl_arrival_rate_records_per_second", query=QUERY) is not None),
            STARTUP_BUDGET_S, "job metrics reaching the controller's model", 1.0,
            alive=children)
        yield stack
    finally:
        stop_all(children, timeout_s=60.0)


def test_topic_init_creates_every_default_topic_as_specified(
        local_stack: LocalStack, bootstrap_servers: str) -> None:
    admin = admin_client(bootstrap_servers)
    topics = admin.list_topics(timeout=10).topics
    configs = {s.name: topic_config(bootstrap_servers, s.name) for s in DEFAULT_TOPICS}
    command = SERVICES["topics"]["command"]
    lease_partitions = int(command[command.index("--lease-partitions") + 1])
    for spec in DEFAULT_TOPICS:
        [line] = [x for x in local_stack.topics_output.splitlines()
                  if x.split()[:1] == [spec.name]]
        partitions = len(topics[spec.name].partitions)
        assert line.split()[1] == str(partitions), line
        if spec.name in (LEASE_TOPIC, METRICS_TOPIC):  # an earlier test may have made it
            assert partitions == lease_partitions or line.endswith("exists"), line
        else:
            assert partitions == spec.partitions, spec.name
        expected = {"cleanup.policy": "delete", **spec.config}
        actual = {k: configs[spec.name][k] for k in expected}
        assert actual == expected, f"{spec.name}: {actual} != {expected}"


def test_job_metrics_reach_the_controller_and_both_endpoints_show_the_query(
        local_stack: LocalStack) -> None:
    job = scrape(local_stack.endpoints["job"])
    controller = scrape(local_stack.endpoints["controller"])
    assert (sample(job, "streamctl_job_input_rows_total", query=QUERY) or 0) > 0
    assert (sample(job, "streamctl_job_input_parallelism", query=QUERY) or 0) == \
        int(d.environment(SERVICES["job"])["STREAMCTL_INPUT_PARALLELISM"])
    assert (sample(controller, "streamctl_current_parallelism", query=QUERY) or 0) == \
        int(d.environment(SERVICES["job"])["STREAMCTL_INPUT_PARALLELISM"])
    arrival = sample(controller, "streamctl_arrival_rate_records_per_second", query=QUERY)
    assert arrival is not None and arrival > 0, "the controller saw no arrivals"


def test_the_job_runs_on_the_spark_cluster_with_the_executors_compose_asks_for(
        local_stack: LocalStack) -> None:
    slots = int(JOB_ENV["STREAMCTL_EXECUTORS"]) * int(JOB_ENV["STREAMCTL_EXECUTOR_CORES"])
    until(lambda: sample(scrape(local_stack.endpoints["job"]), "streamctl_job_task_slots",
                         query=QUERY) == slots, 60.0, f"the job reporting {slots} task slots",
          1.0)
    # The session's cluster runs one application at a time: the job's (an earlier test's
    # application is gone once its driver's disconnection reached the master).
    until(lambda: local_stack.spark.master_metric("metrics_master_apps_Value") == 1, 30.0,
          "the job as the cluster's only application", 1.0)
    assert local_stack.spark.master_metric("metrics_master_waitingApps_Value") == 0


@pytest.mark.parametrize("service", ["controller", "job"])
def test_promtool_accepts_every_endpoint(local_stack: LocalStack, service: str) -> None:
    text = scrape(local_stack.endpoints[service])
    assert text, f"{service} endpoint did not answer"
    check_metrics(text, service)


@pytest.fixture(scope="module")
def prometheus(local_stack: LocalStack) -> Iterator[str]:
    check_config(d.PROMETHEUS_FILE)
    config_path = local_stack.tmp / "prometheus.yml"
    config = d.local_prometheus_config(local_stack.mapping,
                                       {"controller", "job", "spark-master"})
    config_path.write_text(yaml.safe_dump(config))
    with running(config_path, local_stack.tmp) as base:
        yield base


def _all_targets_up(base: str) -> bool:
    targets = api(base, "/api/v1/targets").get("data", {}).get("activeTargets", [])
    return bool(targets) and all(t["health"] == "up" for t in targets)


def _live_samples(stack: LocalStack) -> dict[str, bool]:
    """Sample name -> whether it carries our query's label, over every live endpoint."""
    samples: dict[str, bool] = {}
    for url in stack.endpoints.values():
        for family in text_string_to_metric_families(scrape(url) or ""):
            for s in family.samples:
                ours = s.labels.get("query") == QUERY
                samples[s.name] = samples.get(s.name, False) or ours
    return samples


def _series(base: str, selector: str) -> bool | None:
    result = api(base, "/api/v1/query", query=selector).get("data", {}).get("result")
    return True if result else None


def test_prometheus_scrapes_the_stack_and_answers_every_dashboard_query(
        local_stack: LocalStack, prometheus: str) -> None:
    until(lambda: _all_targets_up(prometheus), 60.0, "every target up", 1.0)
    targets = api(prometheus, "/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["job"] for t in targets} == {
        "streamctl-controller", "streamctl-job", "spark-master", "spark-applications"}
    live = _live_samples(local_stack)
    deadline = time.monotonic() + 60.0
    for where, expr in (q for b in d.dashboards().values() for q in d.panel_queries(b)):
        answer = api(prometheus, "/api/v1/query", query=d.grafana_to_promql(expr))
        assert answer["status"] == "success", f"{where}: {expr}: {answer.get('error')}"
        # Every metric of the query that an endpoint serves now must be in Prometheus too.
        for name in sorted(d.metric_names(expr) & set(live)):
            selector = f'{name}{{query="{QUERY}"}}' if live[name] else name
            until(lambda s=selector: _series(prometheus, s),  # type: ignore[misc]
                  max(0.0, deadline - time.monotonic()),
                  f"{where}: Prometheus to have {selector}, which an endpoint serves", 1.0)
    core = {"streamctl_arrival_rate_records_per_second", "streamctl_backlog_records",
            "streamctl_current_parallelism", "streamctl_job_input_rows_total"}
    assert core <= set(live), f"not served by the live endpoints: {core - set(live)}"
