"""The local three-node cluster (`streamctl stack up --brokers 3`) against real brokers: the
commands on it, and the replication its topics get."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamctl.stack.cluster import LocalCluster
from streamctl.stack.defaults import DEFAULT_TOPICS
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.topics import TopicSpec, ensure_topics
from tests.support.kafka import topic_config
from tests.support.waiting import until

pytestmark = pytest.mark.integration


def streamctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamctl", "stack", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def min_insync(bootstrap: str, topic: str) -> str:
    return topic_config(bootstrap, topic)["min.insync.replicas"]


def test_stack_up_with_three_brokers_finds_them_running_and_creates_topics_with_3_replicas(
        kafka_cluster: LocalCluster) -> None:
    state = str(kafka_cluster.state_dir)
    up = streamctl("up", "--brokers", "3", "--port", str(kafka_cluster.nodes[0].port),
                   "--state-dir", state)
    assert up.returncode == 0, up.stderr
    assert "(was already running)" in up.stdout
    assert f"STREAMCTL_BOOTSTRAP_SERVERS={kafka_cluster.bootstrap_servers}" in up.stdout
    topics = admin_client(kafka_cluster.bootstrap_servers).list_topics(timeout=10).topics
    for spec in DEFAULT_TOPICS:
        replicas = {len(p.replicas) for p in topics[spec.name].partitions.values()}
        assert replicas == {3}, spec.name
        assert min_insync(kafka_cluster.bootstrap_servers, spec.name) == "2", spec.name

    status = streamctl("status", "--state-dir", state)
    assert status.returncode == 0, status.stdout + status.stderr
    assert [line.split(":")[0] for line in status.stdout.splitlines()[:3]] == [
        "node 1", "node 2", "node 3"]
    assert status.stdout.count("running, ready") == 3


def test_a_single_broker_is_refused_on_a_cluster_state_dir(kafka_cluster: LocalCluster) -> None:
    single = streamctl("up", "--state-dir", str(kafka_cluster.state_dir))
    assert single.returncode == 1
    assert "holds a local cluster" in single.stderr and "--brokers 3" in single.stderr


def test_an_explicit_replication_factor_wins_over_the_clusters_size(
        kafka_cluster: LocalCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    ensure_topics(bootstrap, [TopicSpec("explicit-rf-2", replication_factor=2)])
    # ensure_topics saw the topic on the broker it asked; each broker's metadata cache follows
    # the controller's log on its own, and a new client may ask one still behind (one the
    # cluster-faults module restarted moments ago: KeyError here, 17:40 UTC).
    admin = admin_client(bootstrap)
    partitions = until(lambda: admin.list_topics(timeout=10).topics.get("explicit-rf-2"), 30,
                       "the new topic in a new client's metadata")
    assert {len(p.replicas) for p in partitions.partitions.values()} == {2}
    assert min_insync(bootstrap, "explicit-rf-2") == "1"
