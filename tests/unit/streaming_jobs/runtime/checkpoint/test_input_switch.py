"""Switching the input topic with exact offsets, the pure decisions: when the old topic is
drained, where the new one is read from, the cut after the quiesce, and which input a
restarted process resumes (no Spark, no Kafka)."""

from __future__ import annotations

import json

import pytest

from streaming_jobs.runtime.checkpoint.input_switch import (
    CheckpointInput,
    Drained,
    DrainSample,
    InputSource,
    NotDrained,
    SwitchRefused,
    cut,
    describe,
    drain_state,
    generation_of,
    resume,
    start_offsets,
)

A = InputSource("a", 2)
EMPTY_2 = {0: (0, 0), 1: (0, 0)}


def sample(at_s: float, committed: dict[int, int], ends: tuple[int, int]) -> DrainSample:
    return DrainSample(at_s, committed, {0: (0, ends[0]), 1: (0, ends[1])})


def test_drained_once_everything_is_committed_and_the_end_stood_still_for_the_quiet_period(
) -> None:
    samples = [sample(0.0, {0: 5, 1: 3}, (9, 3)), sample(1.0, {0: 9, 1: 3}, (9, 3)),
               sample(2.5, {0: 9, 1: 3}, (9, 3))]
    assert drain_state(samples[:2], quiet_s=2.0) == NotDrained(backlog=0, arrived=0)
    assert drain_state(samples, quiet_s=2.0) == Drained()


def test_not_drained_while_producers_still_write_the_old_topic() -> None:
    samples = [sample(0.0, {0: 9, 1: 3}, (9, 3)), sample(3.0, {0: 11, 1: 3}, (11, 3))]
    verdict = drain_state(samples, quiet_s=2.0)
    assert verdict == NotDrained(backlog=0, arrived=2)
    assert describe(verdict, "a", "b", 60.2) == (
        "a is still being written to (2 records in the quiet period, 0 unread after 60 s): "
        "move its producers to b, then send the tuple again")


def test_not_drained_while_records_wait_in_the_old_topic() -> None:
    samples = [sample(0.0, {0: 2}, (9, 3)), sample(5.0, {0: 4}, (9, 3))]
    verdict = drain_state(samples, quiet_s=2.0)
    assert verdict == NotDrained(backlog=8, arrived=0)  # partition 1 never read: from 0
    assert "8 records not yet in a committed batch" in describe(verdict, "a", "b", 120)


def test_a_new_topic_is_read_from_offset_0_of_every_partition() -> None:
    assert start_offsets(A, "b", {0: (0, 7), 1: (0, 0), 2: (0, 3)}, "out") == {0: 0, 1: 0, 2: 0}


def test_a_new_topic_whose_first_records_are_gone_is_refused() -> None:
    with pytest.raises(SwitchRefused, match=r"records of b the job has not read were deleted "
                                            r"\(partition 1 starts at 4, the job needs 0\)"):
        start_offsets(A, "b", {0: (0, 7), 1: (4, 9)}, "out")


def test_switching_back_resumes_where_the_job_left_the_topic() -> None:
    current = InputSource("b", 3, retired={"a": {0: 9, 1: 3}})
    # Partition 2 was added to `a` after the job left it: read it from the start.
    assert start_offsets(current, "a", {0: (0, 12), 1: (2, 3), 2: (0, 1)}, "out") == {
        0: 9, 1: 3, 2: 0}
    with pytest.raises(SwitchRefused, match="partition 0 starts at 10, the job needs 9"):
        start_offsets(current, "a", {0: (10, 12), 1: (0, 3)}, "out")


@pytest.mark.parametrize(("current", "target", "log", "why"), [
    (InputSource("a", None), "b", EMPTY_2, "unnamed"),
    (A, "out", EMPTY_2, "the job's own output topic"),
    (A, "b", {}, "b has no partitions"),
])
def test_switches_that_cannot_be_exact_are_refused(current: InputSource, target: str,
                                                   log: dict[int, tuple[int, int]],
                                                   why: str) -> None:
    with pytest.raises(SwitchRefused, match=why):
        start_offsets(current, target, log, "out")


def test_the_cut_holds_only_if_every_record_of_the_old_topic_committed() -> None:
    cut(A, {0: 9, 1: 3}, {0: (0, 9), 1: (0, 3), 2: (5, 5)})  # partition 2: nothing to read
    with pytest.raises(SwitchRefused, match="2 records arrived on a during the switch"):
        cut(A, {0: 9, 1: 3}, {0: (0, 11), 1: (0, 3)})


def test_a_switched_source_is_the_next_generation_with_explicit_offsets() -> None:
    b = A.switched("b", {0: 0, 1: 0}, left_at={0: 9, 1: 3})
    assert (b.topic, b.name, b.retired) == ("b", "input_3", {"a": {0: 9, 1: 3}})
    assert b.kafka_input().starting_offsets == json.dumps({"b": {"0": 0, "1": 0}})
    assert InputSource("a", 0).kafka_input().starting_offsets == "earliest"
    assert InputSource("a", None).kafka_input().name is None
    assert generation_of("input_12") == 12 and generation_of(None) is None
    with pytest.raises(ValueError, match="not input_<n>"):
        generation_of("kafka_1x")


def test_a_new_checkpoint_starts_named_with_the_wanted_topic() -> None:
    assert resume(None, None, "a") == (InputSource("a", 0), None)


def test_an_unnamed_checkpoint_keeps_its_topic_and_cannot_be_pointed_elsewhere() -> None:
    assert resume(CheckpointInput(None, "a"), None, "a") == (InputSource("a", None), None)
    with pytest.raises(SwitchRefused, match="the checkpoint reads a, not b"):
        resume(CheckpointInput(None, "a"), None, "b")


def test_the_record_completes_a_switch_the_checkpoint_has_not_planned_yet() -> None:
    record = A.switched("b", {0: 0}, left_at={0: 9})  # generation 3, written before restart
    source, note = resume(CheckpointInput(2, "a"), record, "a")  # crashed before the ack
    assert source == record
    assert note == "reading b, as the checkpoint and its input record say, not a"
    assert resume(CheckpointInput(3, "b"), record, "b") == (record, None)


@pytest.mark.parametrize(("checkpoint", "record", "wanted", "why"), [
    (CheckpointInput(2, "a"), None, "b", "the checkpoint reads a, not b, and no input record"),
    (CheckpointInput(5, "a"), InputSource("b", 2), "b", "belongs to another checkpoint"),
    (CheckpointInput(2, "a"), InputSource("b", 2), "b", "says b for the same source"),
])
def test_a_record_that_contradicts_the_checkpoint_stops_the_start(
        checkpoint: CheckpointInput, record: InputSource | None, wanted: str, why: str) -> None:
    with pytest.raises(SwitchRefused, match=why):
        resume(checkpoint, record, wanted)


def test_without_a_record_a_named_checkpoint_on_the_wanted_topic_resumes() -> None:
    assert resume(CheckpointInput(0, "a"), None, "a") == (InputSource("a", 0), None)
