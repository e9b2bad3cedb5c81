"""Fixtures of the fault suite: one `FaultBed` per test (uuid topics, its own checkpoint)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.harness import FaultBed


@pytest.fixture
def bed(bootstrap_servers: str, new_topic: Callable[..., str],
        tmp_path: Path) -> Iterator[FaultBed]:
    b = FaultBed.create(bootstrap_servers, new_topic, tmp_path)
    yield b
    b.close()
