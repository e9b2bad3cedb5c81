"""The port contract (tests/controller_port_contract.py) against the in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.loop.fakes import (
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryEndOffsets,
    MemoryMetricsSource,
)
from controller.loop.ports import (
    AckSource,
    ControlSink,
    DecisionLog,
    MetricsSource,
    OffsetProbe,
    OnDecodeError,
)
from tests.controller_port_contract import CONTRACT, PortHarness


class MemoryHarness:
    timeout_s = 1.0

    def __init__(self) -> None:
        self.bus = MemoryBus()
        self.metrics_topic = self.bus.metrics.name
        self._topics = {"metrics": self.bus.metrics, "acks": self.bus.acks,
                        "control": self.bus.control, "decisions": self.bus.decisions}

    def metrics_source(self, on_error: OnDecodeError) -> MetricsSource:
        return MemoryMetricsSource(self.bus.metrics, on_decode_error=on_error)

    def ack_source(self, on_error: OnDecodeError) -> AckSource:
        return MemoryAckSource(self.bus.acks, on_error)

    def control_sink(self) -> ControlSink:
        return MemoryControlSink(self.bus.control, decisions=self.bus.decisions)

    def decision_log(self) -> DecisionLog:
        return MemoryDecisionLog(self.bus.decisions)

    def offset_probe(self) -> OffsetProbe:
        return MemoryEndOffsets(self.bus.metrics)

    def publish(self, kind: str, payload: bytes) -> None:
        self._topics[kind].append(payload)

    def read(self, kind: str, count: int) -> list[bytes]:
        return [p for p in self._topics[kind].payloads[:count] if p is not None]


@pytest.mark.parametrize("clause", CONTRACT, ids=lambda c: c.__name__)
def test_memory_ports_keep_the_contract(clause: Callable[[PortHarness], None]) -> None:
    clause(MemoryHarness())
