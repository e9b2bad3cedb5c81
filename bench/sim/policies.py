"""The policies the simulator compares, behind one small interface: metrics in, tuples out.

Owns the `Policy` protocol, "ours" (the production `controller.loop.cycle.ControlLoop` over the
in-memory fakes and a fake clock, so the simulator runs exactly the controller's code), and
the static baseline. The other baselines live in `baselines`. Neighbours: `run` calls `step`
once per simulated tick with what the jobs emitted since the last one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryMetricsSource,
)
from controller.settings import ControllerSettings
from schemas import Ack, ControlTuple, Decision, TaskMetrics, codec_for


class Policy(Protocol):
    name: str

    def step(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack],
             now_ms: int) -> list[ControlTuple]:
        """Take what the jobs published since the last step; return the tuples to send."""
        ...


class Ours:
    """The real control loop, one `run_once` per step, over a `MemoryBus`."""

    name = "ours"

    def __init__(self, settings: ControllerSettings | None = None) -> None:
        self.bus, self.clock = MemoryBus(), FakeClock()
        ports = Ports(metrics=MemoryMetricsSource(self.bus.metrics),
                      control=MemoryControlSink(self.bus.control, decisions=self.bus.decisions),
                      acks=MemoryAckSource(self.bus.acks),
                      decisions=MemoryDecisionLog(self.bus.decisions), clock=self.clock)
        ids = itertools.count()
        self.loop = ControlLoop(settings or ControllerSettings(), ports,
                                new_id=lambda: f"ours-{next(ids)}")
        self._seen = 0

    def step(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack],
             now_ms: int) -> list[ControlTuple]:
        self.bus.publish_metrics(*metrics)
        for ack in acks:
            self.bus.publish_ack(ack)
        self.clock.ms = now_ms
        self.loop.run_once()
        payloads = self.bus.control.payloads[self._seen:]
        self._seen += len(payloads)
        codec = codec_for(ControlTuple)
        return [codec.decode(p) for p in payloads if p is not None]

    def decisions(self) -> list[Decision]:
        return self.bus.written_decisions()


class Static:
    """Never changes anything: the parallelism each job was deployed with."""

    name = "static"

    def step(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack],
             now_ms: int) -> list[ControlTuple]:
        return []
