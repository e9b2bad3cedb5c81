"""The controller process's own tuning (`controller.app`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from controller import app, cli


@pytest.fixture
def collector() -> Iterator[int]:
    """The objects frozen before the test; the collector's settings as the test found them
    afterwards (what the test froze thawed with the rest)."""
    before = gc.get_threshold()
    try:
        yield gc.get_freeze_count()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_controller_run_collects_garbage_at_its_own_threshold_with_start_up_frozen(
        collector: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[tuple[int, ...], int]] = []

    def run(settings: Any, **bounds: Any) -> int:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return 0

    monkeypatch.setattr(app, "run", run)
    assert cli.main(["run", "--metrics-port", "0", "--max-cycles", "1"]) == 0
    [(threshold, frozen)] = seen
    assert threshold[0] == app.YOUNG_COLLECTION_AT and frozen > collector
