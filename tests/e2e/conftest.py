"""Fixtures of the end-to-end tier: the closed loop's topics, fresh per test."""

from __future__ import annotations

import pytest

from tests.support.kafka import NewTopics


@pytest.fixture
def loop_topics(new_topics: NewTopics) -> dict[str, str]:
    return new_topics(input=2, output=2, dlq=1, metrics=1, control=1, acks=1, decisions=1,
                      lease=1)
