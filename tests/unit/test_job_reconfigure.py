"""The reconfiguration protocol against an in-memory query: pause measurement and rollback."""

from __future__ import annotations

import pytest

from streaming_jobs.runtime.lifecycle import Commit, Knobs
from streaming_jobs.runtime.reconfigure import Reconfigurer, RestartFailed


class FakeQuery:
    """Commits at fixed wall-clock milliseconds; `start` can be told to fail."""

    def __init__(self, fail_with: int | None = None) -> None:
        self.knobs = Knobs(epoch=0, input_parallelism=2)
        self.last_commit: Commit | None = Commit("run-0", 9, start_ms=400, end_ms=1_000)
        self.fail_with = fail_with
        self.started: list[Knobs] = []
        self.active = True

    def quiesce_and_stop(self, timeout_s: float) -> bool:
        self.active = False
        return True

    def start(self, knobs: Knobs) -> str:
        self.started.append(knobs)
        if knobs.input_parallelism == self.fail_with:
            raise RuntimeError("source refused")
        self.knobs, self.active = knobs, True
        return f"run-{len(self.started)}"

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None:
        return Commit(run_id, 10, start_ms=2_400, end_ms=4_500)

    def failure(self) -> str | None:
        return None

    def is_active(self) -> bool:
        return self.active

    def is_idle(self) -> bool:
        return False


def test_pause_runs_from_last_commit_to_first_commit_after_restart() -> None:
    clock = iter([2_000, 2_300])  # quiesce began, query stopped
    applied = Reconfigurer(FakeQuery(), clock_ms=lambda: next(clock)).apply(Knobs(1, 4))
    assert applied.pause_ms == 3_500
    assert applied.detail == ("input_parallelism 2→4; quiesce 300 ms, "
                              "restart to first commit 2200 ms, no batch running for 1400 ms")


def test_failed_restart_rolls_back_to_the_previous_value() -> None:
    query = FakeQuery(fail_with=4)
    with pytest.raises(RestartFailed, match=r"source refused.*rolled back to 2"):
        Reconfigurer(query, clock_ms=lambda: 0).apply(Knobs(1, 4))
    assert query.started == [Knobs(1, 4), Knobs(0, 2)]
    assert query.knobs == Knobs(0, 2) and query.active


class IdleQuery(FakeQuery):
    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None:
        return None

    def is_idle(self) -> bool:
        return True


def test_without_new_data_the_pause_ends_when_the_restarted_query_is_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streaming_jobs.runtime.reconfigure.IDLE_GRACE_S", 0.0)
    clock = iter([2_000, 2_300, 2_900])  # quiesce began, stopped, seen idle
    applied = Reconfigurer(IdleQuery(), clock_ms=lambda: next(clock)).apply(Knobs(1, 4))
    assert applied.pause_ms == 1_900
    assert applied.detail.endswith("restart to idle 600 ms (no new data)")
