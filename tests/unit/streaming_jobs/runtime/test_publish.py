"""The job's Prometheus figures of the configuration in force follow every record it
publishes, not only batches: a change applied while the query is idle shows at once."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from streaming_jobs.config import JobTopics
from streaming_jobs.runtime.observe.metrics import RunContext
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
from streaming_jobs.runtime.publish import Publisher

CTX = RunContext("q1", "a", 0, 2, 0, 16, 1000, ("sensors",), ("out",), beat_interval_ms=1000)


class Producer:
    def __init__(self) -> None:
        self.published: list[object] = []

    def publish(self, topic: str, key: str, record: object) -> None:
        self.published.append(record)


def publisher() -> tuple[Publisher, Producer, CollectorRegistry]:
    registry, producer = CollectorRegistry(), Producer()
    made = Publisher(JobTopics(metrics_topic="m"), "q1", producer,  # type: ignore[arg-type]
                     JobPrometheus(registry), desired_state_path="q1.desired-state.json")
    return made, producer, registry


def gauges(registry: CollectorRegistry) -> tuple[float | None, ...]:
    return tuple(registry.get_sample_value(name, {"query": "q1"}) for name in (
        "streamctl_job_input_parallelism", "streamctl_job_task_slots",
        "streamctl_job_config_epoch"))


CHANGED = replace(CTX, config_epoch=1, input_parallelism=3, task_slots=8)


def test_an_idle_querys_heartbeat_after_a_change_sets_the_configuration_gauges() -> None:
    pub, producer, registry = publisher()
    pub.heartbeat(CTX, 1_000)
    assert gauges(registry) == (2, 16, 0)
    pub.heartbeat(CHANGED, 2_000)
    assert len(producer.published) == 2 and gauges(registry) == (3, 8, 1)


def test_a_liveness_beat_after_a_change_sets_the_configuration_gauges() -> None:
    pub, producer, registry = publisher()
    pub.beat(CHANGED, 2_000, None)
    assert len(producer.published) == 1 and gauges(registry) == (3, 8, 1)
