"""Fixtures of the end-to-end tier: the closed loop's topics, fresh per test."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def loop_topics(new_topic: Callable[..., str]) -> dict[str, str]:
    return {
        "input": new_topic(partitions=2), "output": new_topic(partitions=2),
        "dlq": new_topic(), "metrics": new_topic(), "control": new_topic(),
        "acks": new_topic(), "decisions": new_topic(),
    }
