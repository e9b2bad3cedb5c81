"""The local stack against a real Kafka broker: readiness, round trip, restarts, errors, topics."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from streamctl.stack.broker import LocalBroker
from streamctl.stack.errors import BrokerConflictError, PortInUseError
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.tcp import find_free_ports
from streamctl.stack.topics import TopicSpec, delete_topics, ensure_topics
from tests.support.kafka import produce, read_committed, topic_config

pytestmark = pytest.mark.integration


def test_started_broker_is_ready_and_round_trips(
    kafka_broker: LocalBroker, new_topic: Callable[..., str]
) -> None:
    status = kafka_broker.status()
    assert status.running and status.ready and status.port == kafka_broker.port
    topic = new_topic()
    produce(kafka_broker.bootstrap_servers, topic, [b"hello"])
    assert [m.value() for m in read_committed(kafka_broker.bootstrap_servers, topic)] == [
        b"hello"]


def test_start_is_idempotent_for_the_same_state_dir(kafka_broker: LocalBroker) -> None:
    again = LocalBroker(kafka_broker.state_dir, kafka_broker.port, kafka_broker.controller_port)
    assert again.start(timeout_s=10.0) is False
    assert kafka_broker.status().pid == again.status().pid


def test_start_with_other_ports_on_a_running_state_dir_is_refused(
    kafka_broker: LocalBroker,
) -> None:
    other = LocalBroker(kafka_broker.state_dir, *find_free_ports(2))
    with pytest.raises(BrokerConflictError, match="stack down"):
        other.start(timeout_s=10.0)


@pytest.mark.parametrize("which", ["port", "controller_port"])
def test_taken_port_is_named_with_the_option_to_change_it(tmp_path: Path, which: str) -> None:
    free, taken = find_free_ports(2)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        port, controller_port = (taken, free) if which == "port" else (free, taken)
        broker = LocalBroker(tmp_path, port, controller_port, classpath=[])
        option = "--port" if which == "port" else "--controller-port"
        with pytest.raises(PortInUseError, match=rf"port {taken} .*{option} N"):
            broker.start(timeout_s=10.0)
    assert not (tmp_path / "kafka" / "broker.pid").exists()


def test_restart_keeps_data_and_formats_only_once(restartable_broker: LocalBroker) -> None:
    broker = restartable_broker
    meta = broker.layout.data_dir / "meta.properties"
    first_meta = meta.read_text()
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap_servers, [TopicSpec(topic)])
    produce(broker.bootstrap_servers, topic, [b"survives"])

    assert broker.stop(timeout_s=30.0) is True
    assert not broker.status().running
    assert broker.start(timeout_s=90.0) is True

    assert meta.read_text() == first_meta  # same cluster id: storage was not reformatted
    assert [m.value() for m in read_committed(broker.bootstrap_servers, topic)] == [
        b"survives"]


def test_ensure_topics_is_idempotent_and_applies_configs_and_one_replica(
        bootstrap_servers: str) -> None:
    name = f"compacted-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, partitions=3, config={"cleanup.policy": "compact"})

    assert ensure_topics(bootstrap_servers, [spec]).created == (name,)
    assert ensure_topics(bootstrap_servers, [spec]).existing == (name,)

    admin = admin_client(bootstrap_servers)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    configs = topic_config(bootstrap_servers, name)
    assert configs["cleanup.policy"] == "compact"
    # One broker: one replica, which must be in sync itself (a cluster: test_local_cluster.py).
    assert {len(p.replicas) for p in admin.list_topics(name, timeout=10).topics[name]
            .partitions.values()} == {1}
    assert configs["min.insync.replicas"] == "1"

    assert delete_topics(bootstrap_servers, [name]) == (name,)
    assert delete_topics(bootstrap_servers, [name]) == ()
