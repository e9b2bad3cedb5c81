"""The fetch guard's rule: a consumer is replaced, at the positions reached, only when the same
stall is seen at two checks in a row with no record between them; the check itself
(`why_stalled`, a question to the broker) is made to answer as a test needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.kafka import fetch_guard
from controller.kafka.fetch_guard import FetchGuard

TOPIC = "metrics"


@pytest.fixture
def verdicts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each check answers, in turn ("" : no stall)."""
    answers: list[str] = []
    monkeypatch.setattr(fetch_guard, "why_stalled", lambda consumer, reached: answers.pop(0))
    return answers


@pytest.fixture
def guard() -> Iterator[tuple[FetchGuard, list[str]]]:
    replaced: list[str] = []
    # Nothing listens on port 9: the consumer never fetches, and none of this asks it to.
    g = FetchGuard({"bootstrap.servers": "127.0.0.1:9", "group.id": "unit", "log_level": 0},
                   "metrics", TOPIC,
                   lambda: {0: 7, 1: 3}, stall_check_s=0, on_fetch_restart=replaced.append)
    try:
        yield g, replaced
    finally:
        g.close()


def test_a_stall_seen_twice_in_a_row_replaces_the_consumer_at_the_positions_read(
        guard: tuple[FetchGuard, list[str]], verdicts: list[str]) -> None:
    g, replaced = guard
    first = g.consumer
    verdicts += ["records wait", "records wait"]
    assert g.mind_the_quiet(delivered=False) == []
    assert g.consumer is first and g.fetch_restarts == 0
    taken_over = g.mind_the_quiet(delivered=False)
    assert [(tp.topic, tp.partition, tp.offset) for tp in taken_over] == [(TOPIC, 0, 7),
                                                                          (TOPIC, 1, 3)]
    assert g.consumer is not first
    assert (g.fetch_restarts, replaced) == (1, [TOPIC])


def test_a_record_between_two_stalled_checks_keeps_the_consumer(
        guard: tuple[FetchGuard, list[str]], verdicts: list[str]) -> None:
    g, replaced = guard
    first = g.consumer
    verdicts += ["records wait", "records wait"]
    assert g.mind_the_quiet(delivered=False) == []
    assert g.mind_the_quiet(delivered=True) == []
    assert g.mind_the_quiet(delivered=False) == []
    assert g.consumer is first and (g.fetch_restarts, replaced) == (0, [])


def test_a_check_finding_no_stall_forgets_the_one_before(
        guard: tuple[FetchGuard, list[str]], verdicts: list[str]) -> None:
    g, replaced = guard
    first = g.consumer
    verdicts += ["records wait", "", "records wait"]
    for _ in verdicts[:]:
        assert g.mind_the_quiet(delivered=False) == []
    assert g.consumer is first and (g.fetch_restarts, replaced) == (0, [])
