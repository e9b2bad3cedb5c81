"""The fetch guard's rule, with its question to the broker (`find_stall`) answered as each test
needs: only the partitions that delivered nothing since the last check are asked about, and the
consumer is replaced, at the positions read, only when the same stall is found at two checks
in a row; a replacement that cannot be assigned leaves the old consumer in place."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streamctl import fetch_guard
from streamctl.fetch_guard import FetchGuard, Stall

TOPIC = "metrics"
READ = {(TOPIC, 0): 7, (TOPIC, 1): 3}
"""Where the reader stands: after offset 6 of partition 0, after 2 of partition 1."""
STALL_ON_0 = Stall(frozenset({(TOPIC, 0, 7)}), "records wait")


def unreachable() -> Consumer:
    # Nothing listens on port 9: the consumer never fetches, and none of this asks it to.
    return Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "unit", "log_level": 0})


class Refusing(Consumer):
    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[Stall | None],
                                                             list[list[tuple[str, int, int]]]]]:
    """What each check answers, in turn, and what each was asked about."""
    answers: list[Stall | None] = []
    questions: list[list[tuple[str, int, int]]] = []

    def answer(consumer: Consumer, reached: Sequence[TopicPartition]) -> Stall | None:
        questions.append([(p.topic, p.partition, p.offset) for p in reached])
        return answers.pop(0)
    monkeypatch.setattr(fetch_guard, "find_stall", answer)
    yield answers, questions


def guarded(make: Callable[[], Consumer] = unreachable,
            check_s: float = 0) -> tuple[FetchGuard, list[int]]:
    replaced: list[int] = []
    guard = FetchGuard(make, "metrics", lambda: READ, stall_check_s=check_s,
                       on_fetch_restart=lambda: replaced.append(1))
    return guard, replaced


def test_a_stall_found_twice_in_a_row_replaces_the_consumer_at_the_positions_read(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, _ = asked
    guard, replaced = guarded()
    first = guard.consumer
    try:
        answers += [STALL_ON_0, STALL_ON_0]
        assert guard.mind(()) == []
        assert guard.consumer is first and guard.fetch_restarts == 0
        taken_over = guard.mind(())
        assert [(tp.topic, tp.partition, tp.offset) for tp in taken_over] == [(TOPIC, 0, 7),
                                                                              (TOPIC, 1, 3)]
        assert guard.consumer is not first
        assert (guard.fetch_restarts, replaced) == (1, [1])
    finally:
        guard.close()


def test_only_the_partitions_quiet_since_the_last_check_are_asked_about(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, questions = asked
    guard, _ = guarded()
    try:
        answers += [STALL_ON_0, STALL_ON_0]
        guard.mind([(TOPIC, 1)])
        assert guard.mind([(TOPIC, 1)]) != []  # partition 1 busy all along: 0 still replaced
        assert questions == [[(TOPIC, 0, 7)], [(TOPIC, 0, 7)]]
    finally:
        guard.close()


def test_a_record_from_the_stalled_partition_between_two_checks_keeps_the_consumer(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, questions = asked
    guard, replaced = guarded()
    first = guard.consumer
    try:
        answers += [STALL_ON_0, None, STALL_ON_0]
        assert guard.mind(()) == []
        assert guard.mind([(TOPIC, 0)]) == []  # partition 1 alone is asked about now
        assert guard.mind(()) == []  # the stall on 0 is news again
        assert guard.consumer is first and (guard.fetch_restarts, replaced) == (0, [])
        both = [(TOPIC, 0, 7), (TOPIC, 1, 3)]
        assert questions == [both, [(TOPIC, 1, 3)], both]  # quiet again: asked about again
    finally:
        guard.close()


def test_a_partition_stuck_at_two_checks_is_replaced_whatever_else_either_found(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, _ = asked
    guard, replaced = guarded()
    try:
        # The client answers once, then cannot: partition 0, at 7 both times, is stuck.
        answers += [STALL_ON_0, Stall(frozenset({(TOPIC, 0, 7), (TOPIC, 1, 3)}), "no answer")]
        guard.mind(())
        assert guard.mind(()) != [] and (guard.fetch_restarts, replaced) == (1, [1])
    finally:
        guard.close()


def test_no_check_runs_after_a_poll_that_left_fetched_records_behind(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    _, questions = asked
    guard, _ = guarded()
    try:
        assert guard.mind((), drained=False) == [] and questions == []
    finally:
        guard.close()


def test_a_check_finding_no_stall_forgets_the_one_before(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, _ = asked
    guard, replaced = guarded()
    first = guard.consumer
    try:
        answers += [STALL_ON_0, None, STALL_ON_0]
        for _ in range(3):
            assert guard.mind(()) == []
        assert guard.consumer is first and (guard.fetch_restarts, replaced) == (0, [])
    finally:
        guard.close()


def test_nothing_is_asked_before_a_check_is_due(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    _, questions = asked
    guard, _ = guarded(check_s=3600)
    try:
        assert guard.mind(()) == [] and questions == []
    finally:
        guard.close()


def test_a_new_consumer_that_cannot_be_assigned_leaves_the_old_one_in_place(
        asked: tuple[list[Stall | None], list[list[tuple[str, int, int]]]]) -> None:
    answers, _ = asked
    made: list[Consumer] = []

    def make() -> Consumer:
        made.append(unreachable() if not made else Refusing(
            {"bootstrap.servers": "127.0.0.1:9", "group.id": "unit", "log_level": 0}))
        return made[-1]
    guard, replaced = guarded(make)
    try:
        answers += [STALL_ON_0, STALL_ON_0]
        guard.mind(())
        assert guard.mind(()) == []
        assert guard.consumer is made[0] and (guard.fetch_restarts, replaced) == (0, [])
    finally:
        guard.close()
