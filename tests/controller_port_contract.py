"""The contract every implementation of the controller's ports keeps, written once.

`tests/unit/controller/loop/test_ports.py` runs it against `controller.loop.fakes`,
`tests/integration/test_controller_kafka.py` against `controller.kafka.clients`. A `PortHarness`
gives the ports under test plus the job's side of the topics (raw publish and read).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from controller.errors import TemporaryError
from controller.loop.ports import (
    AckSource,
    ControlSink,
    DecisionLog,
    MetricsSource,
    OffsetProbe,
    OnDecodeError,
)
from schemas import (
    Ack,
    ControlTuple,
    Decision,
    DecodeError,
    Outcome,
    Role,
    SourcePartition,
    TaskMetrics,
    codec_for,
)
from tests.support.waiting import until

T = 1_700_000_000_000
R = TypeVar("R")


class PortHarness(Protocol):
    metrics_topic: str
    timeout_s: float

    def metrics_source(self, on_error: OnDecodeError) -> MetricsSource: ...
    def ack_source(self, on_error: OnDecodeError) -> AckSource: ...
    def control_sink(self) -> ControlSink: ...
    def decision_log(self) -> DecisionLog: ...
    def offset_probe(self) -> OffsetProbe: ...
    def publish(self, kind: str, payload: bytes) -> None:
        """Write a raw payload to the 'metrics' or 'acks' topic, as a job would."""
        ...
    def read(self, kind: str, count: int) -> list[bytes]:
        """The first `count` payloads of the 'control' or 'decisions' topic."""
        ...


def sample(batch_id: int) -> TaskMetrics:
    return TaskMetrics(
        "q1", "i1", Role.ACTIVE, 0, batch_id, T + batch_id * 1000, T + batch_id * 1000 + 400,
        1000, 100, 100, 400, (SourcePartition("in", 0, batch_id * 100, batch_id * 100 + 100,
                                              batch_id * 100 + 150),), 2, 0, 4)


def ack(control_id: str) -> Ack:
    return Ack(control_id, "q1", "i1", 4, Outcome.APPLIED, "applied", 1200, T)


def polled(poll: Callable[[float], Sequence[R]], count: int, timeout_s: float) -> list[R]:
    """What `poll` returned until there were at least `count` records."""
    got: list[R] = []

    def enough() -> bool:
        got.extend(poll(0.5))
        return len(got) >= count

    until(enough, timeout_s, f"{count} records from the port", 0)
    return got


def metrics_are_decoded_in_order_and_garbage_is_reported(h: PortHarness) -> None:
    errors: list[DecodeError] = []
    source = h.metrics_source(errors.append)
    h.publish("metrics", codec_for(TaskMetrics).encode(sample(1)))
    h.publish("metrics", b"\x00garbage")
    h.publish("metrics", codec_for(TaskMetrics).encode(sample(2)))
    got = polled(source.poll, 2, h.timeout_s)
    assert got == [sample(1), sample(2)]
    [error] = errors
    assert (error.topic, error.partition, error.offset) == (h.metrics_topic, 0, 1)


def metrics_are_returned_as_soon_as_one_arrives_not_at_the_timeout(h: PortHarness) -> None:
    """The loop's every cycle, and so every decision and liveness verdict, waits on this
    poll: it must not wait for a full batch of records or its whole timeout."""
    source = h.metrics_source(lambda e: None)
    h.publish("metrics", codec_for(TaskMetrics).encode(sample(1)))
    asked = time.monotonic()
    got = source.poll(60.0)
    assert got == [sample(1)]
    assert time.monotonic() - asked < 30.0, "the poll waited for its timeout"


def a_source_that_read_everything_is_not_behind(h: PortHarness) -> None:
    """However old the records it read, a source with nothing unread is 0 ms behind: the
    controller holds its judgement only while newer records wait."""
    source = h.metrics_source(lambda e: None)
    h.publish("metrics", codec_for(TaskMetrics).encode(sample(1)))
    assert polled(source.poll, 1, h.timeout_s) == [sample(1)]
    assert source.behind_ms(T + 3_600_000) == 0


def acks_written_after_the_source_exists_are_seen(h: PortHarness) -> None:
    h.publish("acks", codec_for(Ack).encode(ack("before")))
    source = h.ack_source(lambda e: None)
    h.publish("acks", codec_for(Ack).encode(ack("after")))
    got = polled(source.poll, 1, h.timeout_s)
    assert got == [ack("after")]


def control_tuples_and_decisions_reach_their_topics(h: PortHarness) -> None:
    control = ControlTuple("c-1", "q1", "source", "input_parallelism", "6", 4, "test",
                           "because", T)
    decision = Decision("d-1", "q1", T, "scale_up", "input_parallelism", "2", "6", "because",
                        {"arrival_rate": 800.0}, "c-1")
    outcome = Decision("d-2", "q1", T + 1, "applied", "input_parallelism", "", "6", "acked",
                       {}, "c-1")
    h.control_sink().send(control, decision)  # the tuple and the decision that issued it
    h.decision_log().write(outcome)
    [raw_control] = h.read("control", 1)
    raw_decisions = h.read("decisions", 2)
    # The Kafka sink signs what it sends (see test_controller_kafka); the rest is unchanged.
    assert replace(codec_for(ControlTuple).decode(raw_control), auth_tag=None) == control
    assert [codec_for(Decision).decode(r) for r in raw_decisions] == [decision, outcome]


def end_offsets_count_what_was_written_and_leave_out_what_does_not_exist(
        h: PortHarness) -> None:
    probe = h.offset_probe()
    here, nowhere = (h.metrics_topic, 0), (h.metrics_topic, 7)
    # A topic just created may have no leader for a moment: the port then says so with a
    # TemporaryError, which the loop takes as "ask again next cycle"; so does the clause.
    before = until(lambda: _answer(probe, [here, nowhere]), 10,
                   "the broker's first answer for a topic just created")
    assert before == {here: 0}
    for batch_id in (1, 2, 3):
        h.publish("metrics", codec_for(TaskMetrics).encode(sample(batch_id)))
    assert probe.end_offsets([here]) == {here: 3}
    assert probe.end_offsets([]) == {}


def _answer(probe: OffsetProbe,
            keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    try:
        return probe.end_offsets(keys)
    except TemporaryError:
        return None


CONTRACT = [
    end_offsets_count_what_was_written_and_leave_out_what_does_not_exist,
    metrics_are_decoded_in_order_and_garbage_is_reported,
    metrics_are_returned_as_soon_as_one_arrives_not_at_the_timeout,
    a_source_that_read_everything_is_not_behind,
    acks_written_after_the_source_exists_are_seen,
    control_tuples_and_decisions_reach_their_topics,
]
