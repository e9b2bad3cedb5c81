"""Positioning by time (`clients.offsets_at`), against a broker that takes a record between
the consumer's questions: the race a real broker leaves open, made certain."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from controller.kafka.clients import KafkaSetupError, offsets_at


class Broker:
    """Partition 0 holds nothing stamped at the time asked, and takes a record the moment the
    time lookup is answered; partition 1 has a record stamped then at offset 7."""

    def __init__(self, error_on: int | None = None) -> None:
        self.ends = {0: 5, 1: 9}
        self.error_on = error_on

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, self.ends[tp.partition]

    def offsets_for_times(self, asked: list[TopicPartition], timeout: float) -> list[Any]:
        found = [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                 offset=-1 if tp.partition == 0 else 7,
                                 error="broker trouble" if tp.partition == self.error_on
                                 else None) for tp in asked]
        self.ends[0] += 1  # written just after the lookup found nothing
        return found


def test_a_partition_with_nothing_stamped_yet_starts_where_it_ended_before_the_lookup() -> None:
    starts = offsets_at(Broker(), [TopicPartition("m", 0), TopicPartition("m", 1)],  # type: ignore[arg-type]
                        1_000, 1.0)
    assert [(s.topic, s.partition, s.offset) for s in starts] == [("m", 0, 5), ("m", 1, 7)]


def test_a_partition_the_time_lookup_failed_for_is_an_error_naming_it() -> None:
    with pytest.raises(KafkaSetupError, match=r"m\[1\].*broker trouble"):
        offsets_at(Broker(error_on=1), [TopicPartition("m", 0), TopicPartition("m", 1)],  # type: ignore[arg-type]
                   1_000, 1.0)
