"""docker-compose.cluster.yml (applied over docker-compose.yml), cross-checked with the code: a
quorum of three brokers that name each other alike, the replication settings the local cluster
renders (`streamctl.stack.broker_files`), and every project client pointed at all three.

Unit tier: no broker, no Docker. The cluster fault tests (tests/faults/test_cluster_faults.py)
run the same settings on the local cluster.
"""

from __future__ import annotations

from pathlib import Path

from streamctl.stack.broker_files import Quorum, render_server_properties
from tests.deploy import deployment as d

MERGED = d.cluster_compose()
SERVICES = MERGED["services"]
BROKERS = {name: s for name, s in SERVICES.items() if str(s.get("image", "")).startswith(
    "apache/kafka:")}
PROJECT = {name: s for name, s in SERVICES.items()
           if d.is_project_service(s) and d.process_kind(s) is not None}


def listeners(service: dict, key: str) -> dict[str, str]:
    """KAFKA_<key> as listener name -> host:port."""
    value = d.environment(service)[f"KAFKA_{key}"]
    return dict(item.split("://") for item in value.split(","))


def test_three_brokers_each_a_voter_of_one_quorum() -> None:
    assert sorted(BROKERS) == ["kafka", "kafka-2", "kafka-3"]
    ids = {name: d.environment(s)["KAFKA_NODE_ID"] for name, s in BROKERS.items()}
    assert sorted(ids.values()) == ["1", "2", "3"]
    for name, service in BROKERS.items():
        env = d.environment(service)
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        voters = dict(v.split("@") for v in env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","))
        assert voters == {ids[n]: f"{n}:{listeners(s, 'LISTENERS')['CONTROLLER'].lstrip(':')}"
                          for n, s in BROKERS.items()}, name
        assert env["CLUSTER_ID"] == d.environment(SERVICES["kafka"])["CLUSTER_ID"]


def test_each_broker_advertises_its_own_name_and_a_host_port_of_its_own() -> None:
    host_ports = set()
    for name, service in BROKERS.items():
        advertised = listeners(service, "ADVERTISED_LISTENERS")
        assert advertised["INTERNAL"] == f"{name}:19092"
        assert (service.get("hostname") or name) == name
        host_port = advertised["HOST"].rsplit(":", 1)[1]
        assert listeners(service, "LISTENERS")["HOST"] == f":{host_port}"
        assert any(str(p).endswith(f"{host_port}:{host_port}") for p in service["ports"]), name
        host_ports.add(host_port)
        data = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert data[d.environment(service)["KAFKA_LOG_DIRS"]] in MERGED["volumes"], name
    assert len(host_ports) == 3
    assert len({tuple(s["volumes"]) for s in BROKERS.values()}) == 3  # no shared log dir


def test_replication_settings_are_the_local_clusters(tmp_path: Path) -> None:
    """What docs/guarantees.md promises for a cluster, set alike on compose and locally."""
    local = dict(line.split("=", 1) for line in render_server_properties(
        19092, 19093, tmp_path, Quorum(1, {1: 19093, 2: 19095, 3: 19097})).splitlines()
        if "=" in line and not line.startswith("#"))
    for name, service in BROKERS.items():
        env = d.environment(service)
        for key in ("default.replication.factor", "min.insync.replicas",
                    "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                    "share.coordinator.state.topic.replication.factor",
                    "share.coordinator.state.topic.min.isr"):
            assert env["KAFKA_" + key.replace(".", "_").upper()] == local[key], (name, key)
    assert (local["default.replication.factor"], local["min.insync.replicas"]) == ("3", "2")


def test_every_client_knows_all_three_brokers_and_topics_waits_for_them() -> None:
    every = ",".join(f"{name}:19092" for name in sorted(BROKERS))
    assert PROJECT
    for name, service in PROJECT.items():
        assert d.environment(service).get("STREAMCTL_BOOTSTRAP_SERVERS") == every, name
    topics = SERVICES["topics"]
    assert set(topics["depends_on"]) == set(BROKERS)
    assert all(c["condition"] == "service_healthy" for c in topics["depends_on"].values())
    command = topics["command"]
    assert command[command.index("--replication-factor") + 1] == "3"
