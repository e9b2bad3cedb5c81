"""The job's Prometheus figures of the configuration in force follow every record it
publishes, not only batches: a change applied while the query is idle shows at once."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from streaming_jobs.runtime.observe.metrics import RunContext
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
from streaming_jobs.runtime.publish import Publisher

CTX = RunContext("q1", "a", 0, 2, 0, 16, 1000, ("sensors",), ("out",), beat_interval_ms=1000)


class Producer:
    def __init__(self) -> None:
        self.published: list[object] = []

    def publish(self, topic: str, key: str, record: object) -> None:
        self.published.append(record)


def test_an_idle_querys_heartbeat_after_a_change_sets_the_configuration_gauges() -> None:
    registry = CollectorRegistry()
    config = SimpleNamespace(topics=SimpleNamespace(metrics_topic="m"))
    producer = Producer()
    publisher = Publisher(config, producer, JobPrometheus(registry))  # type: ignore[arg-type]
    publisher.heartbeat(CTX, 1_000)
    changed = replace(CTX, config_epoch=1, input_parallelism=3, task_slots=8)
    publisher.heartbeat(changed, 2_000)

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(name, {"query": "q1"})
    assert len(producer.published) == 2
    assert (gauge("streamctl_job_input_parallelism"), gauge("streamctl_job_task_slots"),
            gauge("streamctl_job_config_epoch")) == (3, 8, 1)
