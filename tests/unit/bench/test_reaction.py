"""`bench.reaction`'s figures from what its loop recorded (no broker, no job)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from bench import reaction


def _loop(lags: list[tuple[float, int]], change: float, before: float, after: float) -> Any:
    """A loop that recorded `lags` (monotonic s, records) under a load of `before` records/s
    that stepped to `after` at `change`."""
    return SimpleNamespace(lags=lags, load_rate=lambda t: before if t < change else after)


def test_the_lag_is_back_when_no_more_seconds_behind_the_input_than_before_the_change() -> None:
    # 100/s before the step: at most 150 records, 1.5 s behind. 300/s after it: 600 records
    # are 2 s behind, 450 are 1.5 s: back, though three times the records of before.
    loop = _loop([(22.0, 100), (25.0, 150), (28.0, 50), (41.0, 600), (43.0, 900), (45.0, 450),
                  (47.0, 300)], change=30.0, before=100.0, after=300.0)
    assert reaction._lag_back(cast(reaction.Loop, loop), 30.0, applied_at=40.0) == 45.0


def test_the_lag_is_not_back_before_the_ack_nor_while_records_wait_with_no_input() -> None:
    loop = _loop([(25.0, 100), (35.0, 0), (41.0, 900)], change=30.0, before=100.0, after=0.0)
    assert reaction._lag_back(cast(reaction.Loop, loop), 30.0, applied_at=40.0) is None
    assert reaction._lag_back(cast(reaction.Loop, loop), 30.0, applied_at=None) is None
