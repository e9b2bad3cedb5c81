"""Test-side control of a running job: signed control tuples, their acks, its metrics."""

from __future__ import annotations

import time
import uuid

from schemas import auth
from schemas.codec import codec_for
from schemas.records import Ack, ControlTuple, TaskMetrics
from tests.spark.kafka_io import TopicReader

KEY = b"spark-integration-control-key"


def control(query_id: str, parameter: str, value: str, epoch: int,
            key: bytes | None = KEY) -> ControlTuple:
    """Signed with the job's key (None: unsigned)."""
    tuple_ = ControlTuple(control_id=str(uuid.uuid4()), query_id=query_id, operator_id="source",
                          parameter=parameter, value=value, epoch=epoch, issuer="test",
                          reason="integration test", issued_at_ms=int(time.time() * 1000))
    return tuple_ if key is None else auth.sign(tuple_, key)


def ack_for(reader: TopicReader, control_id: str, timeout_s: float = 180) -> Ack:
    codec = codec_for(Ack)
    messages = reader.until(
        lambda ms: any(codec.decode(m.value()).control_id == control_id for m in ms), timeout_s)
    return next(a for a in map(codec.decode, (m.value() for m in messages))
                if a.control_id == control_id)


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
    value = registry.get_sample_value(name, {"query": job.config.query_id,  # type: ignore[attr-defined]
                                             **labels})
    return value or 0.0
