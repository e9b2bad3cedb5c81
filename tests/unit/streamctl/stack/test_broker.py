"""The broker's launcher without a real broker: config rendering and start-up failures.

Failures are provoked with a fake `java` script on an injected PATH, so these tests need
neither Java nor Maven nor a network.
"""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import pytest

from streamctl.stack.broker import ClusterNode, LocalBroker
from streamctl.stack.broker_files import (
    Quorum,
    Replication,
    new_cluster_id,
    render_server_properties,
)
from streamctl.stack.cluster import LocalCluster, cluster_ports
from streamctl.stack.errors import (
    BrokerExitedError,
    BrokerFormatError,
    JavaMissingError,
    StackError,
)
from streamctl.stack.tcp import find_free_ports, port_in_use
from streamctl.stack.waiting import poll_until

FAKE_JAVA = """#!/bin/sh
case "$*" in
  *-version*) echo 'openjdk version "17.0.9" 2023-10-17' >&2 ;;
  *StorageTool*) echo "{format_output}"; exit {format_exit} ;;
  *kafka.Kafka*) echo "fatal: simulated broker crash"; exit 3 ;;
esac
"""


def broker_with_fake_java(
    tmp_path: Path, format_output: str = "", format_exit: int = 0
) -> LocalBroker:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(FAKE_JAVA.format(format_output=format_output, format_exit=format_exit))
    java.chmod(0o755)
    port, controller_port = find_free_ports(2)
    return LocalBroker(tmp_path / "state", port, controller_port, classpath=[],
                       env={"PATH": str(bin_dir)})  # fmt: skip


def test_server_properties_describe_a_single_node_kraft_cluster(tmp_path: Path) -> None:
    text = render_server_properties(19092, 19093, tmp_path / "data")
    lines = set(text.splitlines())
    assert "process.roles=broker,controller" in lines
    assert "controller.quorum.voters=1@127.0.0.1:19093" in lines
    assert "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093" in lines
    assert f"log.dirs={tmp_path / 'data'}" in lines
    assert "offsets.topic.replication.factor=1" in lines
    assert "$" not in text


def test_cluster_id_is_urlsafe_base64_of_16_bytes() -> None:
    cluster_id = new_cluster_id()
    assert len(cluster_id) == 22 and "=" not in cluster_id
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    assert new_cluster_id() != cluster_id


def test_missing_java_is_reported_before_anything_else(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "state", *find_free_ports(2), env={"PATH": str(tmp_path)})
    with pytest.raises(JavaMissingError, match="install"):
        broker.start(timeout_s=5.0)
    assert not (tmp_path / "state" / "kafka").exists()


@pytest.mark.timeout(120)  # the budget: start's own deadline is an hour
def test_a_broker_that_exits_early_is_reported_with_its_log_without_waiting_for_the_deadline(
        tmp_path: Path) -> None:
    broker = broker_with_fake_java(tmp_path)
    broker.layout.data_dir.mkdir(parents=True)
    (broker.layout.data_dir / "meta.properties").write_text("cluster.id=x\n")  # formatted
    with pytest.raises(BrokerExitedError, match=r"exit code 3(.|\n)*simulated broker crash"):
        broker.start(timeout_s=3600.0)
    assert not broker.layout.pid_file.exists()


def test_a_failed_format_shows_the_tool_output(tmp_path: Path) -> None:
    broker = broker_with_fake_java(tmp_path, "Invalid cluster.id", format_exit=1)
    with pytest.raises(BrokerFormatError, match=r"exit 1(.|\n)*Invalid cluster.id"):
        broker.start(timeout_s=20.0)


def test_stop_and_status_without_a_broker_are_harmless(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "state")
    assert broker.stop(timeout_s=1.0) is False
    status = broker.status()
    assert not status.running and not status.ready
    assert "not running" in status.describe()


def test_port_check_sees_a_listener_and_free_ports_differ() -> None:
    first, second = find_free_ports(2)
    assert first != second
    assert not port_in_use(first)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first))
        holder.listen()
        assert port_in_use(first)


def test_poll_until_gives_up_with_none_after_asking_again_and_returns_the_first_value() -> None:
    asked: list[int] = []
    assert poll_until(lambda: asked.append(1), timeout_s=0.3, interval_s=0.05) is None
    assert len(asked) >= 2  # it polled, and gave up (the test's budget says it did)
    calls = iter([None, None, "ready"])
    assert poll_until(lambda: next(calls), timeout_s=5.0, interval_s=0.01) == "ready"


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """The storage tool would read '-…' as an option; a leading 0xf8-0xfb byte encodes so."""
    draws = iter([b"\xfb" + b"\x00" * 15, b"\x01" * 16])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_a_cluster_node_names_every_voter_and_keeps_three_replicas_two_in_sync(
        tmp_path: Path) -> None:
    quorum = Quorum(2, {1: 19093, 2: 19095, 3: 19097})
    lines = set(render_server_properties(19094, 19095, tmp_path, quorum).splitlines())
    assert {"node.id=2", "process.roles=broker,controller",
            "controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097",
            "default.replication.factor=3", "min.insync.replicas=2",
            "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2"} <= lines


@pytest.mark.parametrize(("brokers", "replicas", "min_insync"),
                         [(1, 1, 1), (2, 2, 1), (3, 3, 2), (5, 3, 2)])
def test_replication_follows_the_cluster_size_up_to_three(
        brokers: int, replicas: int, min_insync: int) -> None:
    assert Replication.for_brokers(brokers) == Replication(replicas, min_insync)


def test_cluster_nodes_listen_two_ports_apart_with_their_controller_above() -> None:
    assert cluster_ports(9092, 3) == {1: (9092, 9093), 2: (9094, 9095), 3: (9096, 9097)}


def test_a_cluster_of_one_or_with_gaps_in_its_node_ids_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="--brokers"):
        LocalCluster(tmp_path, 1)
    with pytest.raises(StackError, match=r"nodes 1\.\.2"):
        LocalCluster(tmp_path, 2, ports={1: (1, 2), 3: (5, 6)})


def test_a_secured_broker_cannot_be_a_cluster_node(tmp_path: Path) -> None:
    node = ClusterNode(tmp_path / "n", Quorum(1, {1: 19093, 2: 19095}), new_cluster_id)
    with pytest.raises(StackError, match="secured"):
        LocalBroker(tmp_path, 19092, 19093, secure=True, node=node)
