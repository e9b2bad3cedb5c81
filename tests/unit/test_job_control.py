"""Control tuples: validation rules and the loop's acks, with in-memory doubles (no Kafka)."""

from __future__ import annotations

from collections import Counter

import pytest

from schemas.codec import DecodeError
from schemas.records import Ack, ControlTuple, Outcome
from streaming_jobs.runtime.control import (
    UNDECODABLE,
    Change,
    ControlLoop,
    Reassert,
    Reject,
    evaluate,
)
from streaming_jobs.runtime.lifecycle import Knobs
from streaming_jobs.runtime.reconfigure import Applied, RestartFailed

IN_FORCE = Knobs(epoch=5, input_parallelism=2)


def tuple_(parameter: str = "input_parallelism", value: str = "4", epoch: int = 6,
           query_id: str = "q") -> ControlTuple:
    return ControlTuple(control_id=f"c-{epoch}-{value}", query_id=query_id, operator_id="source",
                        parameter=parameter, value=value, epoch=epoch, issuer="test",
                        reason="", issued_at_ms=0)


@pytest.mark.parametrize(("t", "verdict"), [
    (tuple_(parameter="x"), Reject("unknown parameter 'x'; supported: input_parallelism")),
    (tuple_(value="abc"), Reject("bad value 'abc' for input_parallelism: expected an integer "
                                 "in [1, 16] (task_slots)")),
    (tuple_(value="0"), Reject("bad value '0' for input_parallelism: expected an integer "
                               "in [1, 16] (task_slots)")),
    (tuple_(value="17"), Reject("bad value '17' for input_parallelism: expected an integer "
                                "in [1, 16] (task_slots)")),
    (tuple_(value="2.5"), Reject("bad value '2.5' for input_parallelism: expected an integer "
                                 "in [1, 16] (task_slots)")),
    (tuple_(epoch=3), Reject("stale epoch 3 ≤ 5 in force")),
    (tuple_(epoch=5), Reject("stale epoch 5 ≤ 5 in force")),
    (tuple_(value="2"), Reassert()),
    (tuple_(value="4"), Change(Knobs(epoch=6, input_parallelism=4))),
])
def test_evaluate(t: ControlTuple, verdict: object) -> None:
    assert evaluate(t, IN_FORCE, task_slots=16) == verdict


class FakeJob:
    def __init__(self, fail: bool = False) -> None:
        self.knobs = IN_FORCE
        self.fail = fail

    def advance_epoch(self, epoch: int) -> None:
        self.knobs = Knobs(epoch, self.knobs.input_parallelism)

    def reconfigure(self, knobs: Knobs) -> Applied:
        if self.fail:
            raise RestartFailed("restart failed (boom); rolled back to 2")
        self.knobs = knobs
        return Applied(pause_ms=1234, detail="input_parallelism 2→4")


class ListSource:
    def __init__(self, items: list[ControlTuple | DecodeError | None]) -> None:
        self.items = items

    def poll(self, timeout_s: float) -> ControlTuple | DecodeError | None:
        return self.items.pop(0) if self.items else None


def run_loop(items: list[ControlTuple | DecodeError | None],
             job: FakeJob) -> tuple[list[Ack], Counter[str]]:
    acks: list[Ack] = []
    counts: Counter[str] = Counter()
    def count(outcome: str) -> None:
        counts[outcome] += 1

    loop = ControlLoop(ListSource(items), job, acks.append, count, query_id="q",
                       instance_id="i", task_slots=16)
    for _ in range(len(items)):
        loop.poll_once(0)
    return acks, counts


def test_loop_applies_reasserts_and_ignores_other_queries_and_garbage() -> None:
    job = FakeJob()
    garbage = DecodeError("bad marker", topic="c", partition=0, offset=9)
    acks, counts = run_loop([garbage, tuple_(query_id="other"), tuple_(), None,
                             tuple_(value="4", epoch=7)], job)
    assert [(a.outcome, a.pause_ms, a.epoch) for a in acks] == [
        (Outcome.APPLIED, 1234, 6), (Outcome.APPLIED, 0, 7)]
    assert "already in force" in acks[1].detail
    assert job.knobs == Knobs(7, 4)
    assert counts == Counter({"APPLIED": 2, UNDECODABLE: 1})


def test_failed_restart_acks_failed_with_the_reason() -> None:
    acks, counts = run_loop([tuple_()], FakeJob(fail=True))
    assert acks[0].outcome is Outcome.FAILED
    assert "rolled back to 2" in acks[0].detail
    assert counts == Counter({"FAILED": 1})
