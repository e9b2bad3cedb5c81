"""The demo's recovery figure: a job's lag, in seconds of input, is back to its level before
the load step once it had fallen behind; a job that never fell behind says so."""

from __future__ import annotations

import pytest

from schemas import Ack, Decision, Outcome
from streamctl.loadgen import LoadSpec
from streamctl.narrate import FLOOR_S, Narrator, Recovery, Watched
from streamctl.profiles import RateProfile


def test_recovery_is_the_first_time_after_the_step_the_lag_is_back_to_its_level() -> None:
    r = Recovery()
    for elapsed, lag_s in ((21, 1.0), (25, 2.0), (29, 1.5),         # before the step at 30
                           (33, 2.0), (40, 12.0), (60, 30.0), (75, 8.0),
                           (81, 4.0), (84, 9.0)):
        r.track(elapsed, 30.0, lag_s)
    assert r.before_s == 2.0 and r.behind_since_step
    assert r.recovered_s == 51.0  # 4 s ≤ 1.5 × max(2 s, the 3 s floor)


def test_a_job_that_stays_within_its_floor_never_fell_behind() -> None:
    r = Recovery()
    for elapsed in range(20, 120, 3):
        r.track(elapsed, 30.0, FLOOR_S * 1.9)
    assert not r.behind_since_step and r.recovered_s is None


class RecordsTail:
    """A tail that hands out the given records once (the narrator only polls it here)."""

    def __init__(self, records: list[object]) -> None:
        self.records = records

    def poll(self, timeout_s: float = 0.2) -> list[tuple[str, object]]:
        handed, self.records = self.records, []
        return [("t", r) for r in handed]


def test_the_figures_time_the_first_tuple_after_the_step_and_its_own_ack_from_the_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuple before the step (and its ack) is listed but timed from neither; the step's
    tuple is timed to its own ack, whichever ack comes first."""
    step_at = 30.0

    def decided(control_id: str, target: str) -> Decision:
        return Decision(f"d-{control_id}", "q", 0, "scale_up", "input_parallelism", "2",
                        target, "backlog", {}, control_id, False)

    def acked(control_id: str, pause_ms: int) -> Ack:
        return Ack(control_id, "q", "i-1", 1, Outcome.APPLIED, "applied", pause_ms, 0)
    advice = Decision("d-a", "q", 0, "throttle", "", "", "", "advice", {}, None, False)
    narrator = Narrator(RateProfile("step", 150, 900, step_at), LoadSpec("b", "in", None, 150),  # type: ignore[arg-type]
                        [Watched("q", "in")], RecordsTail([]), [])  # type: ignore[arg-type]
    now = [0.0]
    monkeypatch.setattr("streamctl.narrate.time.monotonic", lambda: now[0])
    narrator.load_started = 100.0
    for at_s, records in ((step_at - 5, [decided("early", "3")]),
                          (step_at + 4, [decided("step", "8"), advice]),
                          (step_at + 9, [acked("early", 1_000)]),
                          (step_at + 20, [acked("step", 4_500)])):
        now[0], narrator.tail.records = 100.0 + at_s, records  # type: ignore[attr-defined]
        narrator._consume()
    figures = narrator.figures()
    assert (figures.step_to_tuple_s, figures.step_to_applied_s, figures.pause_ms) == \
        (4.0, 20.0, 4_500)
    assert [(t.at_s, t.change, t.applied_s) for t in figures.tuples] == [
        (-5.0, "input_parallelism 2 -> 3", 9.0), (4.0, "input_parallelism 2 -> 8", 20.0)]
    assert figures.fell_behind == {"q": False} and figures.parallelism == {"q": 0}
