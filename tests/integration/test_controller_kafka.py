"""The port contract (tests/controller_port_contract.py) against the Kafka adapters, on the
session's real broker with uuid topics and groups per test; plus the adapters' own errors."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer

from controller.kafka_io import (
    KafkaAckSource,
    KafkaControlSink,
    KafkaDecisionLog,
    KafkaMetricsSource,
    KafkaSetupError,
    KafkaWriter,
)
from controller.ports import AckSource, ControlSink, DecisionLog, MetricsSource, OnDecodeError
from controller.settings import KafkaSettings
from tests.controller_port_contract import CONTRACT, PortHarness

pytestmark = pytest.mark.integration


class KafkaHarness:
    timeout_s = 30.0

    def __init__(self, bootstrap: str, new_topic: Callable[..., str]) -> None:
        self.settings = KafkaSettings(
            bootstrap_servers=bootstrap, metrics_topic=new_topic(), control_topic=new_topic(),
            ack_topic=new_topic(), decisions_topic=new_topic(),
            group_id=f"test-{uuid.uuid4().hex}", metrics_offset_reset="earliest")
        self.metrics_topic = self.settings.metrics_topic
        self._topics = {"metrics": self.settings.metrics_topic, "acks": self.settings.ack_topic,
                        "control": self.settings.control_topic,
                        "decisions": self.settings.decisions_topic}
        self._producer = Producer({"bootstrap.servers": bootstrap})
        self._writer = KafkaWriter(self.settings)
        self._closers: list[Callable[[], None]] = [self._writer.close]

    def metrics_source(self, on_error: OnDecodeError) -> MetricsSource:
        source = KafkaMetricsSource(self.settings, on_error)
        self._closers.append(source.close)
        return source

    def ack_source(self, on_error: OnDecodeError) -> AckSource:
        source = KafkaAckSource(self.settings, on_error)
        self._closers.append(source.close)
        return source

    def control_sink(self) -> ControlSink:
        return KafkaControlSink(self._writer, self.settings.control_topic)

    def decision_log(self) -> DecisionLog:
        return KafkaDecisionLog(self._writer, self.settings.decisions_topic)

    def publish(self, kind: str, payload: bytes) -> None:
        self._producer.produce(self._topics[kind], value=payload)
        assert self._producer.flush(10.0) == 0

    def read(self, kind: str, count: int) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": self.settings.bootstrap_servers,
                             "group.id": f"test-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([self._topics[kind]])
        try:
            messages = consumer.consume(num_messages=count, timeout=self.timeout_s)
            return [v for m in messages if m.error() is None and (v := m.value()) is not None]
        finally:
            consumer.close()

    def close(self) -> None:
        for close in reversed(self._closers):
            close()


@pytest.fixture
def kafka_harness(bootstrap_servers: str,
                  new_topic: Callable[..., str]) -> Iterator[KafkaHarness]:
    harness = KafkaHarness(bootstrap_servers, new_topic)
    yield harness
    harness.close()


@pytest.mark.parametrize("clause", CONTRACT, ids=lambda c: c.__name__)
def test_kafka_ports_keep_the_contract(clause: Callable[[PortHarness], None],
                                       kafka_harness: KafkaHarness) -> None:
    clause(kafka_harness)


def test_a_missing_ack_topic_is_a_clear_setup_error(bootstrap_servers: str) -> None:
    settings = KafkaSettings(bootstrap_servers=bootstrap_servers,
                             ack_topic=f"missing-{uuid.uuid4().hex}")
    with pytest.raises(KafkaSetupError, match="does not exist"):
        KafkaAckSource(settings, lambda e: None, setup_timeout_s=5)
