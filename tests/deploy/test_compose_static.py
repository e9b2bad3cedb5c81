"""The compose file, Prometheus config and Grafana dashboard cross-checked with the code.

Unit tier (no broker, no Docker): parses the files and compares them with what the code reads,
serves and creates. The live counterparts are in `test_compose_local.py`.
"""

from __future__ import annotations

import base64
import re
import subprocess
import tomllib
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.auth import ensure_key_file
from tests.deploy import deployment as d
from tests.support.prometheus import tool

SERVICES = d.services()
PROJECT = {name: s for name, s in SERVICES.items() if d.is_project_service(s)}
_PINNED = re.compile(r"^[\w.\-/]+:(?!latest$)[\w.\-]*\d[\w.\-]*$")


def test_the_compose_file_has_the_services_the_deployment_promises() -> None:
    kinds = {name: d.process_kind(s) for name, s in PROJECT.items()}
    assert {"kafka", "topics", "spark-master", "spark-worker", "job", "job-standby",
            "controller", "prometheus", "grafana"} <= set(SERVICES)
    assert kinds["topics"] == "topics" and kinds["controller"] == "controller"
    assert kinds["job"] == kinds["job-standby"] == "job"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_image_is_pinned(name: str) -> None:
    image = SERVICES[name]["image"]
    assert _PINNED.match(image), f"service {name}: image {image!r} has no version tag"


def test_spark_image_matches_the_pyspark_pin() -> None:
    project = tomllib.loads((d.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pin = next(dep.split("==")[1] for dep in project["project"]["dependencies"]
               if dep.startswith("pyspark=="))
    tag = SERVICES["spark-master"]["image"].split(":", 1)[1]
    assert tag.split("-")[0] == pin, f"apache/spark:{tag} is not Spark {pin} (pyproject.toml)"


@pytest.mark.parametrize("name", sorted(PROJECT))
def test_every_streamctl_variable_a_service_sets_is_read_by_its_process(name: str) -> None:
    kind = d.process_kind(PROJECT[name])
    if kind is None:  # the Spark workers run spark-class from the project image
        assert not [k for k in d.environment(PROJECT[name]) if k.startswith("STREAMCTL_")]
        return
    unread = {k for k in d.environment(PROJECT[name]) if k.startswith("STREAMCTL_")} \
        - d.env_read_by(kind)
    assert not unread, f"service {name} ({kind}) sets variables its process never reads: {unread}"


@pytest.mark.parametrize("name", sorted(n for n, s in PROJECT.items()
                                        if d.process_kind(s) in ("job", "controller")))
def test_compose_environment_builds_a_valid_configuration(name: str, tmp_path: Path) -> None:
    """The values parse and validate exactly as the process will at start-up (the secret
    files mapped to a local key file)."""
    ensure_key_file(tmp_path / "control-key")
    mapping = d.LocalMapping({}, {}, {"/run/secrets/": f"{tmp_path}/"})
    env = mapping.environment(PROJECT[name])
    if d.process_kind(PROJECT[name]) == "job":
        from streaming_jobs.config import JobConfig
        from streaming_jobs.loading import load

        config: Any = JobConfig.from_sources(load(env["STREAMCTL_JOB"]), env=env)
        assert config.bootstrap_servers == env["STREAMCTL_BOOTSTRAP_SERVERS"]
    else:
        from controller.cli import settings_from

        config = settings_from(Namespace(), env)
        assert config.kafka.bootstrap_servers == env["STREAMCTL_BOOTSTRAP_SERVERS"]


@pytest.mark.parametrize("name", sorted(PROJECT))
def test_file_variables_name_a_secret_the_service_mounts(name: str) -> None:
    mounts = d.secret_mounts(PROJECT[name])
    declared = set(d.compose().get("secrets", {}))
    for key, value in d.environment(PROJECT[name]).items():
        if key.endswith("_FILE"):
            assert value in mounts, f"{name}: {key}={value} is not a secret it mounts ({mounts})"
    assert set(mounts.values()) <= declared, f"{name} mounts undeclared secrets"


def _metrics_port(name: str) -> int:
    env = d.environment(SERVICES[name])
    if d.process_kind(SERVICES[name]) == "job":
        return int(env.get("STREAMCTL_METRICS_PORT", d.job_env_vars()["STREAMCTL_METRICS_PORT"]))
    key = "STREAMCTL_CONTROLLER_METRICS_PORT"
    return int(env.get(key, d.controller_env_vars()[key]))


def _listening_port(name: str) -> int:
    """The port a scraped service serves metrics on, read from its environment or command."""
    if d.process_kind(SERVICES[name]) in ("job", "controller"):
        return _metrics_port(name)
    command = SERVICES[name]["command"]
    return int(command[command.index("--webui-port") + 1])


@pytest.mark.parametrize("target", d.scrape_targets(), ids=lambda t: f"{t.job}:{t.host}")
def test_every_scrape_target_is_a_service_port_that_serves_metrics(target: d.ScrapeTarget) -> None:
    assert target.host in SERVICES, f"scrape target {target.host} is no compose service"
    assert target.port == _listening_port(target.host), \
        f"{target.job} scrapes {target.host}:{target.port}, the service serves on " \
        f"{_listening_port(target.host)}"


def test_every_metrics_endpoint_is_scraped_and_published() -> None:
    scraped = {(t.host, t.port) for t in d.scrape_targets()}
    for name, service in PROJECT.items():
        if d.process_kind(service) not in ("job", "controller"):
            continue
        port = _metrics_port(name)
        assert (name, port) in scraped, f"Prometheus does not scrape {name}:{port}"
        published = {int(str(p).rsplit(":", 1)[1]) for p in service.get("ports", [])}
        assert port in published, f"{name} serves metrics on {port} but does not publish it"


def test_every_published_port_listens_on_loopback_only() -> None:
    """Published ports reach this machine only; docs/deploy.md says how to open one."""
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every address"


def test_kafka_listeners_agree_with_the_clients() -> None:
    kafka = d.environment(SERVICES["kafka"])
    advertised = dict(item.split("://") for item in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))
    for name, service in PROJECT.items():
        env = d.environment(service)
        if "STREAMCTL_BOOTSTRAP_SERVERS" in env:
            assert env["STREAMCTL_BOOTSTRAP_SERVERS"] == advertised["INTERNAL"], name
    host_port = advertised["HOST"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{host_port}:{host_port}" in SERVICES["kafka"]["ports"]
    assert advertised["INTERNAL"] in " ".join(SERVICES["kafka"]["healthcheck"]["test"])
    cluster_id = kafka["CLUSTER_ID"]  # Kafka wants a base64url UUID: 22 chars, 16 bytes
    assert len(cluster_id) == 22 and len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_topics_used_by_services_and_code_are_created_by_the_init_service() -> None:
    """The init service creates `streamctl/stack/defaults.py` DEFAULT_TOPICS; everything else must
    be in there: the topics services are told to use and the code's default topics."""
    from streamctl.stack.defaults import DEFAULT_TOPICS

    assert SERVICES["topics"]["command"][:3] == ["streamctl", "stack", "topics"]
    created = {spec.name for spec in DEFAULT_TOPICS}
    in_compose = {f"{name}: {k}": v for name, s in PROJECT.items()
                  for k, v in d.environment(s).items() if k.endswith("_TOPIC")}
    missing = {where: topic for where, topic in {**in_compose, **d.topic_fields_in_code()}.items()
               if topic not in created}
    assert not missing, (f"topics used but not in streamctl/stack/defaults.py DEFAULT_TOPICS: "
                         f"{missing}")


def test_job_instances_share_the_query_and_checkpoint_but_not_identity() -> None:
    """The standby resumes from the active's checkpoint (and the desired-state file beside
    it) when promoted, so both mount the same volume at the same place; each has its own
    instance id, which control tuples and the shared file name."""
    primary, standby = (SERVICES[n] for n in ("job", "job-standby"))
    env_p, env_s = d.environment(primary), d.environment(standby)
    assert env_p["STREAMCTL_QUERY_ID"] == env_s["STREAMCTL_QUERY_ID"]
    assert env_p["STREAMCTL_INSTANCE_ID"] != env_s["STREAMCTL_INSTANCE_ID"]
    assert env_p["STREAMCTL_CHECKPOINT_DIR"] == env_s["STREAMCTL_CHECKPOINT_DIR"]
    assert primary["volumes"] == standby["volumes"]
    mount = primary["volumes"][0].split(":")[1]
    assert env_p["STREAMCTL_CHECKPOINT_DIR"].startswith(mount + "/")
    assert (env_p.get("STREAMCTL_ROLE", "active"), env_s["STREAMCTL_ROLE"]) == ("active",
                                                                             "standby")


def test_dashboard_queries_name_metrics_the_project_exports() -> None:
    exported = d.exported_metric_names() | {"up"}
    boards = d.dashboards()
    assert boards, "no Grafana dashboard in deploy/grafana/dashboards"
    for board in boards.values():
        for where, expr in d.panel_queries(board):
            names = d.metric_names(expr)
            assert names, f"{where}: no metric in {expr!r}"
            assert names <= exported, f"{where}: {names - exported} not exported by the code"


def test_grafana_datasource_is_the_compose_prometheus() -> None:
    datasources = d.load_yaml(d.GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    source = datasources["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in SERVICES["prometheus"]["ports"]
    for board in d.dashboards().values():
        uids = {p["datasource"]["uid"] for p in board["panels"]}
        assert uids == {source["uid"]}, f"{board['title']}: panels use {uids}"


def test_metric_name_extraction() -> None:
    expr = ('histogram_quantile(0.9, sum by (le, query) '
            '(rate(streamctl_job_batch_duration_seconds_bucket{query=~"a|b"}[1m]))) > bool 0')
    assert d.metric_names(expr) == {"streamctl_job_batch_duration_seconds_bucket"}
    assert d.metric_names("changes(x_total[1m]) > 0 or up") == {"x_total", "up"}


def test_the_image_copies_every_package_the_project_installs() -> None:
    """`pip install .` in the image sees only what the Dockerfile copied: a package left out
    installs nothing and every command fails on its import (seen: `streamctl.options`)."""
    pyproject = tomllib.loads((d.ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    copied = set(re.findall(r"^COPY (\S+) \1$", (d.ROOT / "Dockerfile").read_text(), re.M))
    assert packages <= copied, f"the Dockerfile does not copy {sorted(packages - copied)}"


def test_prometheus_loads_the_alert_rules_and_they_name_exported_metrics() -> None:
    rules = d.ROOT / "deploy" / "alerts.yml"
    for config in (d.PROMETHEUS_FILE, d.SECURE_PROMETHEUS_FILE):
        assert (config.parent / "alerts.yml") in [config.parent / f for f in
                                                  d.load_yaml(config)["rule_files"]]
    assert "./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro" in SERVICES["prometheus"]["volumes"]
    check = subprocess.run([tool("promtool"), "check", "rules", str(rules)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    exported = d.exported_metric_names()
    for group in d.load_yaml(rules)["groups"]:
        for rule in group["rules"]:
            names = d.metric_names(rule["expr"])
            assert names and names <= exported, f"{rule['alert']}: {names - exported} not exported"


def test_the_alerts_fire_on_a_controller_too_far_behind_a_lost_query_and_an_unled_shard(
        tmp_path: Path) -> None:
    """promtool's rule tests on synthetic series: which alert fires when, by the rules' `for`,
    and what its annotations then read."""
    rules = {r["alert"]: r for g in d.load_yaml(d.ROOT / "deploy" / "alerts.yml")["groups"]
             for r in g["rules"]}

    def annotations(alert: str, instance: str, value: str = "") -> dict[str, str]:
        return {k: v.replace("{{ $labels.instance }}", instance).replace("{{ $value }}", value)
                for k, v in rules[alert]["annotations"].items()}

    cases = {
        "rule_files": [str(d.ROOT / "deploy" / "alerts.yml")],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": 'streamctl_controller_judging{instance="c1"}', "values": "1 1 0x8"},
                {"series": 'streamctl_lost_queries{instance="c1"}', "values": "0x3 2x8"},
                {"series": 'streamctl_controller_leader{instance="c1"}', "values": "1x11"},
                {"series": 'streamctl_controller_shards_led{instance="c1"}', "values": "4x3 3x8"},
                {"series": 'streamctl_controller_shards{instance="c1"}', "values": "4x11"},
            ],
            "alert_rule_test": [
                {"eval_time": "30s", "alertname": "StreamctlControllerNotJudging",
                 "exp_alerts": []},  # not judging for 0 s: pending, not firing
                {"eval_time": "75s", "alertname": "StreamctlControllerNotJudging",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", "instance": "c1"},
                                 "exp_annotations": annotations("StreamctlControllerNotJudging",
                                                                "c1")}]},
                {"eval_time": "75s", "alertname": "StreamctlQueryLost", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "StreamctlQueryLost",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", "instance": "c1"},
                                 "exp_annotations": annotations("StreamctlQueryLost", "c1",
                                                                "2")}]},
                {"eval_time": "2m", "alertname": "StreamctlNoControllerLeads",
                 "exp_alerts": []},
                {"eval_time": "75s", "alertname": "StreamctlShardUnled", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "StreamctlShardUnled",
                 "exp_alerts": [{"exp_labels": {"severity": "critical"},
                                 "exp_annotations": annotations("StreamctlShardUnled", "",
                                                                "1")}]},
            ],
        }],
    }
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(cases))
    check = subprocess.run([tool("promtool"), "test", "rules", str(test_file)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
