"""A controller restarted between sending a tuple and hearing its ack resumes from Kafka:
it neither sends the tuple again nor ignores the cooldown, and garbage on its topics is only
counted. Real broker, uuid topics."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from controller.app import kafka_controller
from controller.core.results import Hold, Scale
from controller.explain.prom import ControllerMetrics, new_registry
from controller.loop.cycle import ControlLoop
from controller.settings import ControllerSettings, PolicySettings
from schemas import Ack, ControlTuple, Outcome, TaskMetrics, codec_for
from tests.integration.test_controller_kafka import KafkaHarness, kafka_harness  # noqa: F401
from tests.support.kafka import read_committed
from tests.support.waiting import until
from tests.unit.controller_traces import Job, end_ms, simulate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OVERLOAD = Job(rates=[(0, 800)], per_unit=210, parallelism=2, max_per_batch=500, epoch=3)


def publish_overload(harness: KafkaHarness, seconds: int) -> None:
    trace = simulate(OVERLOAD, seconds)
    shift_ms = int(time.time() * 1000) - end_ms(trace)  # windows are pruned by the real clock
    for s in trace:
        harness.publish("metrics", codec_for(TaskMetrics).encode(
            replace(s, batch_start_ms=s.batch_start_ms + shift_ms,
                    batch_end_ms=s.batch_end_ms + shift_ms)))


def test_a_restarted_controller_keeps_the_cooldown_of_an_ack_it_never_saw(
        kafka_harness: KafkaHarness) -> None:  # noqa: F811
    settings = ControllerSettings(kafka=kafka_harness.settings, metrics_port=0,
                                  policy=PolicySettings(cooldown_s=600))
    with kafka_controller(settings, ControllerMetrics(new_registry())) as first:
        publish_overload(kafka_harness, 30)
        until(lambda: (first.run(max_cycles=1), "q1" in first.states
                       and first.states["q1"].in_flight is not None)[1], 60,
              "the first controller's decision", 0)
    # The first controller is gone before the ack; the job answers while none runs.
    [control] = [codec_for(ControlTuple).decode(r) for r in kafka_harness.read("control", 1)]
    acked_at = int(time.time() * 1000)
    kafka_harness.publish("acks", codec_for(Ack).encode(Ack(
        control.control_id, "q1", "i1", control.epoch, Outcome.APPLIED, "ok", 900, acked_at)))
    kafka_harness.publish("control", b"\x00garbage on the control topic")

    metrics = ControllerMetrics(new_registry())
    with kafka_controller(settings, metrics) as second:
        until(lambda: (second.run(max_cycles=1), second.leading)[1], 30,
              "the second controller elected", 0)
        state = second.states["q1"]
        assert state.in_flight is None and state.last_epoch_issued == control.epoch
        assert state.cooldown_until_ms == acked_at + 600_000
        publish_overload(kafka_harness, 40)  # still overloaded: a naive restart would act
        held = until(lambda: _cooling_down(second), 60,
                     "the second controller judging the new overload", 0)
    # It did judge the overload (more arriving than the job can take) and held for the
    # cooldown alone.
    assert held.figures["utilisation"] > 1, held.figures
    sent = read_committed(kafka_harness.settings.bootstrap_servers,
                          kafka_harness.settings.control_topic)
    assert len(sent) == 2  # the first tuple and the garbage, no more
    assert metrics.registry.get_sample_value(
        "streamctl_decode_errors_total",
        {"topic": kafka_harness.settings.control_topic}) == 1


def _cooling_down(loop: ControlLoop) -> Hold | None:
    """The loop's verdict on q1 after one more cycle, once it is a hold for the cooldown
    over a model of the new metrics (enough of them to decide on)."""
    loop.run(max_cycles=1)
    verdict = loop.verdicts.get("q1")
    if isinstance(verdict, Hold) and "cooling down" in verdict.reason and verdict.figures:
        return verdict
    assert not isinstance(verdict, Scale), f"the restarted controller acted: {verdict}"
    return None
