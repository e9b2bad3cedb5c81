"""Follows streamctl's own topics (metrics, acks, decisions) for the demo and the e2e tests.

Partitions are assigned directly (no consumer group join), from the end or the beginning, so
a watcher sees records within milliseconds of starting. Garbage is counted and reported with
its position, never raised.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from schemas import DecodeError, codec_for
from schemas.records import _Record
from security.kafka import PLAINTEXT, KafkaSecurity


@dataclass
class Tail:
    bootstrap_servers: str
    record_types: Mapping[str, type[_Record]]  # topic -> record type on it
    from_beginning: bool = False
    start_at_ms: int | None = None
    """Start at the first record stamped at or after this time (wins over from_beginning)."""
    client_log_level: int = 3
    """librdkafka's own log (syslog levels); 0 for commands that report errors themselves."""
    security: KafkaSecurity = PLAINTEXT
    decode_errors: list[DecodeError] = field(default_factory=list)
    _partitions: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._consumer = Consumer({
            "bootstrap.servers": self.bootstrap_servers,
            **self.security.librdkafka(),
            "group.id": f"streamctl-tail-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": self.client_log_level,
        })
        start = OFFSET_BEGINNING if self.from_beginning else OFFSET_END
        assignment = [
            TopicPartition(topic, p, start if self.start_at_ms is None else self.start_at_ms)
            for topic in self.record_types
            for p in self.partitions(topic)
        ]
        if self.start_at_ms is not None:
            # A partition with nothing newer comes back at offset -1 (its end): start there.
            assignment = self._consumer.offsets_for_times(assignment, timeout=10)
        self._consumer.assign(assignment)

    def partitions(self, topic: str) -> list[int]:
        if topic not in self._partitions:
            meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
            if meta.error is not None:
                raise RuntimeError(f"topic {topic!r} is not available: {meta.error}")
            self._partitions[topic] = sorted(meta.partitions)
        return self._partitions[topic]

    def poll(self, timeout_s: float = 0.2, max_records: int = 500) -> list[tuple[str, _Record]]:
        out: list[tuple[str, _Record]] = []
        for msg in self._consumer.consume(max_records, timeout_s):
            if msg.error() is not None:
                continue  # partition EOF and transient errors: librdkafka retries itself
            topic = msg.topic() or ""
            try:
                record = codec_for(self.record_types[topic]).decode(
                    msg.value(), topic=topic, partition=msg.partition(), offset=msg.offset())
            except DecodeError as err:
                self.decode_errors.append(err)
                continue
            out.append((topic, record))
        return out

    def log_end_total(self, topic: str) -> int:
        """Σ of the partitions' end offsets (high watermarks) of `topic`, read now."""
        return sum(
            self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in self.partitions(topic)
        )

    def close(self) -> None:
        self._consumer.close()
