"""A running job's side of the Spark tests: the control key its tuples are signed with, and
what its metrics and Prometheus registry say (tuples and acks: `tests.support.control`)."""

from __future__ import annotations

from schemas.codec import codec_for
from schemas.records import TaskMetrics

KEY = b"spark-integration-control-key"


def metrics_of(message: object) -> TaskMetrics:
    return codec_for(TaskMetrics).decode(message.value())  # type: ignore[attr-defined]


def consumed(messages: list) -> int:
    """Records of every source partition the committed batches read, by their end offsets."""
    ends: dict[tuple[str, int], int] = {}
    for m in map(metrics_of, messages):
        for p in m.partitions:
            ends[(p.topic, p.partition)] = max(ends.get((p.topic, p.partition), 0), p.end_offset)
    return sum(ends.values())


def counter(job: object, name: str, **labels: str) -> float:
    registry = job.prometheus.registry  # type: ignore[attr-defined]
    value = registry.get_sample_value(name, {"query": job.config.identity.query_id,  # type: ignore[attr-defined]
                                             **labels})
    return value or 0.0
