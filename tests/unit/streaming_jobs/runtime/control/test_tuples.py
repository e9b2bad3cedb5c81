"""Control tuples: the parameter registry, evaluate, authenticity, and the loop's acks, with
in-memory doubles (no Kafka, no Spark)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from schemas import auth
from schemas.codec import DecodeError
from schemas.records import Ack, ControlTuple, KnobSetting, Outcome
from streaming_jobs.runtime.control.reconfigure import Applied, Refused, RestartFailed
from streaming_jobs.runtime.control.tuples import (
    UNDECODABLE,
    Change,
    Reason,
    Reassert,
    Reject,
    TupleListener,
    evaluate,
)
from streaming_jobs.runtime.desired.state import Apply, Bounds, DesiredState, Limits, apply_path

KEY = b"k" * 32
IN_FORCE = DesiredState(epoch=5, input_parallelism=2, state_partitions=4,
                        max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v1",
                        input_topic="in", output_topic="out", executors=0)
LIMITS = Limits(task_slots=16, udf_versions=("v1", "v2"), master="spark://m:7077",
                bounds=Bounds(max_executors=8),
                existing_topics=frozenset({"out", "out-2", "in-2"}))
LOCAL = replace(LIMITS, master="local[16]")
NOT_YET = replace(LIMITS, unsupported=(("state_partitions", "needs the primitive"),))


def tuple_(parameter: str = "input_parallelism", value: str = "4", epoch: int = 6,
           query_id: str = "q") -> ControlTuple:
    return ControlTuple(control_id=f"c-{epoch}-{value}", query_id=query_id, operator_id="source",
                        parameter=parameter, value=value, epoch=epoch, issuer="test",
                        reason="", issued_at_ms=0)


def changed(**values: object) -> Change:
    return Change(replace(IN_FORCE, epoch=6, **values))  # type: ignore[arg-type]


GOOD = [  # (parameter, value text, the change it makes)
    ("input_parallelism", "4", changed(input_parallelism=4)),
    ("max_offsets_per_trigger", "500", changed(max_offsets_per_trigger=500)),
    ("shed_fraction", "0.25", changed(shed_fraction=0.25)),
    ("udf_version", "v2", changed(udf_version="v2")),
    ("output_topic", "out-2", changed(output_topic="out-2")),
    ("executors", "3", changed(executors=3)),
    ("state_partitions", "8", changed(state_partitions=8)),
    ("input_topic", "in-2", changed(input_topic="in-2")),
    ("active_instance", "job-2", changed(active_instance="job-2")),
]
SLOTS_ON_A_CLUSTER = "(max_executors x executor_cores on a cluster)"
OUT_OF_RANGE = [  # (parameter, value text, what the ack must say is allowed)
    ("input_parallelism", "17", f"expected an integer in [1, 16] {SLOTS_ON_A_CLUSTER}"),
    ("input_parallelism", "0", f"expected an integer in [1, 16] {SLOTS_ON_A_CLUSTER}"),
    ("max_offsets_per_trigger", "100001",
     "expected an integer in [1, 100000] (max_offsets_per_trigger_limit)"),
    ("shed_fraction", "0.6", "expected a number in [0, 0.5] (max_shed_fraction)"),
    ("shed_fraction", "-0.1", "expected a number in [0, 0.5] (max_shed_fraction)"),
    ("udf_version", "v9", "expected a registered version: v1, v2"),
    ("output_topic", "missing", "topic 'missing' does not exist; create it first"),
    ("executors", "9", "expected an integer in [1, 8] (max_executors)"),
    ("state_partitions", "65", "expected an integer in [1, 64] (max_state_partitions)"),
]
MALFORMED = [
    ("input_parallelism", "2.5"), ("input_parallelism", "abc"), ("max_offsets_per_trigger", ""),
    ("shed_fraction", "nan"), ("shed_fraction", "a lot"), ("udf_version", ""),
    ("output_topic", "bad topic!"), ("executors", "1e3"), ("state_partitions", "four"),
    ("input_topic", ".."), ("active_instance", ""), ("active_instance", "two words"),
]
IN_FORCE_TEXT = {"input_parallelism": "2", "max_offsets_per_trigger": "4000",
                 "shed_fraction": "0", "udf_version": "v1", "output_topic": "out",
                 "state_partitions": "4", "input_topic": "in"}
"""Every parameter but executors, whose 0 means "not managed" and cannot be requested, and
active_instance, whose "" means "nobody named yet" (`test_a_standby_...` covers it)."""


@pytest.mark.parametrize(("parameter", "value", "verdict"), GOOD)
def test_a_good_value_is_a_change(parameter: str, value: str, verdict: Change) -> None:
    assert evaluate(tuple_(parameter, value), IN_FORCE, LIMITS) == verdict


@pytest.mark.parametrize(("parameter", "value", "allowed"), OUT_OF_RANGE)
def test_an_out_of_range_value_is_rejected_with_the_bounds(parameter: str, value: str,
                                                           allowed: str) -> None:
    verdict = evaluate(tuple_(parameter, value), IN_FORCE, LIMITS)
    assert verdict == Reject(Reason.BAD_VALUE,
                             f"bad value {value!r} for {parameter}: {allowed}")


@pytest.mark.parametrize(("parameter", "value"), MALFORMED)
def test_a_malformed_value_is_rejected(parameter: str, value: str) -> None:
    verdict = evaluate(tuple_(parameter, value), IN_FORCE, LIMITS)
    assert isinstance(verdict, Reject) and verdict.reason is Reason.BAD_VALUE
    assert verdict.detail.startswith(f"bad value {value!r} for {parameter}: expected")


@pytest.mark.parametrize(("parameter", "value", "_"), GOOD)
def test_a_stale_epoch_is_rejected_for_every_parameter(parameter: str, value: str,
                                                       _: object) -> None:
    for epoch in (4, 5):  # below, or equal to the epoch in force with another value
        assert evaluate(tuple_(parameter, value, epoch=epoch), IN_FORCE, LIMITS) == Reject(
            Reason.STALE_EPOCH, f"stale epoch {epoch} ≤ 5 in force")


@pytest.mark.parametrize("parameter", list(IN_FORCE_TEXT))
def test_the_value_in_force_is_a_reassert(parameter: str) -> None:
    limits = replace(LIMITS, existing_topics=frozenset({"in", "out"}))
    value = IN_FORCE_TEXT[parameter]
    newer = evaluate(tuple_(parameter, value, epoch=7), IN_FORCE, limits)
    assert newer == Reassert(f"{parameter} {value} already in force; epoch advanced to 7")
    # The same tuple delivered again (same epoch as in force) is harmless too.
    again = evaluate(tuple_(parameter, value, epoch=5), IN_FORCE, limits)
    assert again == Reassert(f"{parameter} {value} already in force")


def test_unknown_and_unavailable_parameters_say_why() -> None:
    unknown = evaluate(tuple_("colour", "red"), IN_FORCE, LIMITS)
    assert isinstance(unknown, Reject) and unknown.reason is Reason.UNKNOWN_PARAMETER
    assert "supported: input_parallelism, max_offsets_per_trigger" in unknown.detail
    assert evaluate(tuple_("executors", "3"), IN_FORCE, LOCAL) == Reject(
        Reason.UNSUPPORTED, "cannot change executors: executors can only be changed on a "
                            "cluster manager; this job runs local[16]")
    assert evaluate(tuple_("state_partitions", "8"), IN_FORCE, NOT_YET) == Reject(
        Reason.UNSUPPORTED, "cannot change state_partitions: needs the primitive")


def test_knobs_set_together_are_one_change_at_the_tuple_s_epoch() -> None:
    both = replace(tuple_(value="16"), together=(KnobSetting("max_offsets_per_trigger", "12000"),))
    assert evaluate(both, IN_FORCE, LOCAL) == changed(input_parallelism=16,
                                                      max_offsets_per_trigger=12_000)
    in_force = replace(both, together=(KnobSetting("max_offsets_per_trigger", "4000"),))
    assert evaluate(in_force, IN_FORCE, LOCAL) == changed(input_parallelism=16)


def test_one_bad_setting_rejects_the_whole_tuple() -> None:
    too_big = replace(tuple_(value="16"),
                      together=(KnobSetting("max_offsets_per_trigger", "1000000000"),))
    verdict = evaluate(too_big, IN_FORCE, LOCAL)
    assert isinstance(verdict, Reject) and verdict.reason is Reason.BAD_VALUE
    assert "max_offsets_per_trigger" in verdict.detail
    twice = replace(tuple_(value="16"), together=(KnobSetting("input_parallelism", "8"),))
    verdict = evaluate(twice, IN_FORCE, LOCAL)
    assert isinstance(verdict, Reject) and "set twice" in verdict.detail
    failover = replace(tuple_(value="16"), together=(KnobSetting("active_instance", "job-2"),))
    verdict = evaluate(failover, IN_FORCE, LOCAL)
    assert isinstance(verdict, Reject) and "a failover is a tuple of its own" in verdict.detail
    stale = replace(tuple_(value="2", epoch=5),
                    together=(KnobSetting("max_offsets_per_trigger", "500"),))
    verdict = evaluate(stale, IN_FORCE, LOCAL)  # the knob in force, its companion not
    assert isinstance(verdict, Reject) and verdict.reason is Reason.STALE_EPOCH


def test_a_tuple_whose_every_setting_is_in_force_is_a_reassert() -> None:
    same = replace(tuple_(value="2"), together=(KnobSetting("max_offsets_per_trigger", "4000"),))
    verdict = evaluate(same, IN_FORCE, LOCAL)
    assert verdict == Reassert("input_parallelism 2, max_offsets_per_trigger 4000 already in "
                               "force; epoch advanced to 6")


def test_the_knobs_read_per_batch_swap_the_plan_s_own_restart() -> None:
    swaps = {p for p, _, verdict in GOOD if apply_path(IN_FORCE, verdict.desired) is Apply.SWAP}
    assert swaps == {"output_topic", "executors", "shed_fraction", "udf_version"}
    roles = {p for p, _, verdict in GOOD if apply_path(IN_FORCE, verdict.desired) is Apply.ROLE}
    assert roles == {"active_instance"}
    both = replace(IN_FORCE, input_parallelism=4, shed_fraction=0.1)
    assert apply_path(IN_FORCE, both) is Apply.RESTART


class FakeJob:
    def __init__(self, fail: bool = False, refuse: str | None = None,
                 standby: str = "") -> None:
        self.desired = IN_FORCE
        self.fail, self.refuse = fail, refuse
        self.applied: list[str] = []
        self.standby = standby
        """This instance's id when it is a standby (it answers only its own promotion)."""

    def limits(self) -> Limits:
        return LIMITS

    def answers(self, tuple_: ControlTuple) -> bool:
        return not self.standby or (tuple_.parameter == "active_instance"
                                    and tuple_.value == self.standby)

    def advance_epoch(self, epoch: int, control_id: str) -> None:
        self.desired = replace(self.desired, epoch=epoch)
        self.applied.append(control_id)

    def reconfigure(self, desired: DesiredState, control_id: str) -> Applied:
        if self.fail:
            raise RestartFailed("restart with input_parallelism 2→4 failed (boom); rolled back")
        if self.refuse:
            raise Refused(self.refuse)
        detail = self.desired.describe_change(desired)
        self.desired = desired
        self.applied.append(control_id)
        return Applied(pause_ms=1234, detail=detail)


class ListSource:
    def __init__(self, items: list[ControlTuple | DecodeError | None]) -> None:
        self.items = items
        self.looked_up: list[str] = []

    def poll(self, timeout_s: float) -> ControlTuple | DecodeError | None:
        return self.items.pop(0) if self.items else None

    def topic_exists(self, topic: str) -> bool:
        self.looked_up.append(topic)
        return topic in ("out-2", "in-2")


def run_loop(items: list[ControlTuple | DecodeError | None], job: FakeJob,
             source: ListSource | None = None) -> tuple[list[Ack], Counter[tuple[str, str | None]]]:
    acks: list[Ack] = []
    counts: Counter[tuple[str, str | None]] = Counter()

    def count(outcome: str, reason: str | None) -> None:
        counts[(outcome, reason)] += 1

    source = source or ListSource([])
    source.items = list(items)
    loop = TupleListener(source, job, acks.append, count, query_id="q", instance_id="i", key=KEY)
    for _ in range(len(items)):
        loop.poll_once(0)
    return acks, counts


def signed(t: ControlTuple) -> ControlTuple:
    return auth.sign(t, KEY)


def test_loop_applies_reasserts_and_ignores_other_queries_and_garbage() -> None:
    job = FakeJob()
    garbage = DecodeError("bad marker", topic="c", partition=0, offset=9)
    acks, counts = run_loop([garbage, signed(tuple_(query_id="other")), signed(tuple_()), None,
                             signed(tuple_(value="4", epoch=7))], job)
    assert [(a.outcome, a.pause_ms, a.epoch) for a in acks] == [
        (Outcome.APPLIED, 1234, 6), (Outcome.APPLIED, 0, 7)]
    assert acks[0].detail == "input_parallelism 2→4"
    assert acks[1].detail == "input_parallelism 4 already in force; epoch advanced to 7"
    assert job.desired == replace(IN_FORCE, epoch=7, input_parallelism=4)
    assert counts == Counter({("APPLIED", None): 2, (UNDECODABLE, "undecodable"): 1})


def test_forged_unsigned_and_tampered_tuples_are_rejected_and_never_applied() -> None:
    job = FakeJob()
    forged = auth.sign(tuple_(epoch=7), b"not-the-controllers-key!")
    tampered = replace(signed(tuple_(value="3", epoch=8)), value="16")
    acks, counts = run_loop([tuple_(epoch=6), forged, tampered], job)
    assert [a.outcome for a in acks] == [Outcome.REJECTED] * 3
    assert acks[0].detail.startswith("unsigned: unsigned control tuple")
    assert acks[1].detail.startswith("bad_signature: bad authentication tag")
    assert acks[2].detail.startswith("bad_signature:")
    assert job.desired == IN_FORCE and job.applied == []
    assert counts == Counter({("REJECTED", "unsigned"): 1, ("REJECTED", "bad_signature"): 2})


def test_topics_are_looked_up_only_for_authentic_topic_tuples() -> None:
    source = ListSource([])
    job = FakeJob()
    acks, _ = run_loop([tuple_("output_topic", "out-3"), signed(tuple_("output_topic", "gone")),
                        signed(tuple_("output_topic", "out-2", epoch=7))], job, source)
    assert source.looked_up == ["gone", "out-2"]
    assert "topic 'gone' does not exist" in acks[1].detail
    assert acks[2].outcome is Outcome.APPLIED and job.desired.output_topic == "out-2"


def test_rejections_are_counted_by_reason() -> None:
    acks, counts = run_loop([signed(tuple_(epoch=3)), signed(tuple_("colour", "red")),
                             signed(tuple_(value="99"))], FakeJob())
    assert [a.detail.split(":")[0] for a in acks] == ["stale_epoch", "unknown_parameter",
                                                     "bad_value"]
    assert counts == Counter({("REJECTED", "stale_epoch"): 1,
                              ("REJECTED", "unknown_parameter"): 1,
                              ("REJECTED", "bad_value"): 1})


def test_failed_restart_acks_failed_with_the_reason() -> None:
    acks, counts = run_loop([signed(tuple_())], FakeJob(fail=True))
    assert acks[0].outcome is Outcome.FAILED
    assert "rolled back" in acks[0].detail
    assert counts == Counter({("FAILED", None): 1})


def test_a_change_whose_precondition_fails_is_rejected_and_counted_as_such() -> None:
    job = FakeJob(refuse="cannot switch the input to in-2: in is still being written to")
    acks, counts = run_loop([signed(tuple_("input_topic", "in-2"))], job)
    assert acks[0].outcome is Outcome.REJECTED
    assert acks[0].detail == ("precondition: cannot switch the input to in-2: in is still "
                              "being written to")
    assert job.desired == IN_FORCE
    assert counts == Counter({("REJECTED", "precondition"): 1})

def test_a_standby_answers_only_the_tuple_that_promotes_it() -> None:
    """Each tuple gets one ack, from the instance it concerns: the active acks parameters (a
    standby takes them from the shared state when promoted), the promoted standby its
    promotion."""
    job = FakeJob(standby="job-2")
    acks, counts = run_loop([signed(tuple_()), signed(tuple_("active_instance", "job-3")),
                             signed(tuple_("active_instance", "job-2", epoch=7))], job)
    assert [(a.epoch, a.outcome) for a in acks] == [(7, Outcome.APPLIED)]
    assert job.desired == replace(IN_FORCE, epoch=7, active_instance="job-2")
    assert counts == Counter({("APPLIED", None): 1})
