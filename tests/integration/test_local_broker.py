"""The local stack against a real Kafka broker: readiness, round trip, restarts, errors, topics."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import ConfigResource, ResourceType

from stack.broker import LocalBroker
from stack.defaults import default_state_dir
from stack.errors import BrokerConflictError, PortInUseError
from stack.kafka_admin import admin_client, client_config
from stack.ports import find_free_port, find_free_ports
from stack.topics import TopicSpec, delete_topics, ensure_topics
from stack.waiting import Deadline

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(client_config(bootstrap))
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(timeout=10.0) == 0, "messages still in flight after 10 s"


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 20.0) -> list[bytes]:
    consumer = Consumer(
        client_config(
            bootstrap, **{"group.id": f"test-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    deadline, values = Deadline.after(timeout_s), list[bytes]()
    try:
        while len(values) < count and not deadline.expired():
            message = consumer.poll(min(1.0, deadline.remaining_s()))
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own, for tests that stop and restart it."""
    port, controller_port = find_free_ports(2)
    broker = LocalBroker(tmp_path / "state", port, controller_port,
                         maven_dir=default_state_dir() / "maven")  # fmt: skip
    try:
        yield broker
    finally:
        broker.stop(timeout_s=30.0)


def test_started_broker_is_ready_and_round_trips(
    kafka_broker: LocalBroker, new_topic: Callable[..., str]
) -> None:
    status = kafka_broker.status()
    assert status.running and status.ready and status.port == kafka_broker.port
    topic = new_topic()
    produce(kafka_broker.bootstrap_servers, topic, [b"hello"])
    assert consume(kafka_broker.bootstrap_servers, topic, 1) == [b"hello"]


def test_start_is_idempotent_for_the_same_state_dir(kafka_broker: LocalBroker) -> None:
    again = LocalBroker(kafka_broker.state_dir, kafka_broker.port, kafka_broker.controller_port)
    assert again.start(timeout_s=10.0) is False
    assert kafka_broker.status().pid == again.status().pid


def test_start_with_other_ports_on_a_running_state_dir_is_refused(
    kafka_broker: LocalBroker,
) -> None:
    other = LocalBroker(kafka_broker.state_dir, find_free_port(), find_free_port())
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


def test_restart_keeps_data_and_formats_only_once(own_broker: LocalBroker) -> None:
    assert own_broker.start(timeout_s=90.0) is True
    meta = own_broker.layout.data_dir / "meta.properties"
    first_meta = meta.read_text()
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    ensure_topics(own_broker.bootstrap_servers, [TopicSpec(topic)])
    produce(own_broker.bootstrap_servers, topic, [b"survives"])

    assert own_broker.stop(timeout_s=30.0) is True
    assert not own_broker.status().running
    assert own_broker.start(timeout_s=90.0) is True

    assert meta.read_text() == first_meta  # same cluster id: storage was not reformatted
    assert consume(own_broker.bootstrap_servers, topic, 1) == [b"survives"]


def test_ensure_topics_is_idempotent_and_applies_configs(bootstrap_servers: str) -> None:
    name = f"compacted-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, partitions=3, config={"cleanup.policy": "compact"})

    assert ensure_topics(bootstrap_servers, [spec]).created == (name,)
    assert ensure_topics(bootstrap_servers, [spec]).existing == (name,)

    admin = admin_client(bootstrap_servers)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"

    assert delete_topics(bootstrap_servers, [name]) == (name,)
    assert delete_topics(bootstrap_servers, [name]) == ()
