"""A topic's log ranges while a broker leading it is away: asked again until its new leader
answers (a restart reads them to start the query), and an error no new leader can mend
raised at once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streaming_jobs.runtime import kafka


class LeaderAway:
    """Two partitions; the offsets request of partition 1 fails with `code` `failures`
    times (the request to a killed broker dropped), then answers."""

    def __init__(self, code: int, failures: int) -> None:
        self.code, self.failures, self.asked = code, failures, 0

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        meta = SimpleNamespace(error=None, partitions={0: object(), 1: object()})
        return SimpleNamespace(topics={topic: meta})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if tp.partition == 1:
            self.asked += 1
            if self.asked <= self.failures:
                raise KafkaException(KafkaError(self.code))
        return 10 * tp.partition, 100 + tp.partition


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "ASSIGN_RETRY_S", 0.0)


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT,
                                  KafkaError.NOT_LEADER_FOR_PARTITION])
def test_a_partition_whose_leader_is_away_is_asked_again_until_it_answers(code: int) -> None:
    broker = LeaderAway(code, failures=3)
    assert kafka._log_range(broker, "in", 30.0) == {0: (0, 100), 1: (10, 101)}  # type: ignore[arg-type]
    assert broker.asked == 4


def test_an_error_no_new_leader_mends_is_raised_at_once() -> None:
    broker = LeaderAway(KafkaError.TOPIC_AUTHORIZATION_FAILED, failures=3)
    with pytest.raises(KafkaException):
        kafka._log_range(broker, "in", 30.0)  # type: ignore[arg-type]
    assert broker.asked == 1


def test_a_leader_away_past_the_deadline_is_raised() -> None:
    broker = LeaderAway(KafkaError._DESTROY_BROKER, failures=10**6)
    with pytest.raises(KafkaException):
        kafka._log_range(broker, "in", 0.05)  # type: ignore[arg-type]
    assert broker.asked > 1  # it was asked again before the deadline
