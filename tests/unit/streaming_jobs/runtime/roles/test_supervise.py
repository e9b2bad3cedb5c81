"""What an active instance does when its query stops by itself (`supervise`): the rule per
failure, the restart budget, and a restart that finds another instance promoted meanwhile or
its sink fenced, against an in-memory query (no Spark, no Kafka)."""

from __future__ import annotations

import pytest

from schemas.records import Role
from streaming_jobs.config import JobConfig
from streaming_jobs.loading import load
from streaming_jobs.runtime.control.shared_state import DesiredStateFileError
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.fakes import FakeQuery
from streaming_jobs.runtime.roles.standby import Instance
from streaming_jobs.runtime.roles.supervise import (
    Next,
    RestartBudget,
    Step,
    Supervisor,
    classify,
)
from streaming_jobs.runtime.sink.gate import Superseded

STATE = DesiredState(epoch=3, input_parallelism=4, state_partitions=4,
                     max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v2",
                     input_topic="in", output_topic="out", executors=0, active_instance="a")
PROMOTED_B = "instance b was made active at epoch 4 (this instance runs epoch 3)"
KAFKA_AWAY = "SinkUnavailable: commit_transaction (...): Local: Timed out"


@pytest.mark.parametrize(("failure", "superseded", "step"), [
    (None, "instance b was made active at epoch 4", Step.STEP_DOWN),
    ("SinkFenced: another instance ...", "instance b was made active", Step.STEP_DOWN),
    ("[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs "
     "detected for 12.", None, Step.RESTART),
    ("Multiple streaming queries are concurrently using file:/c/offsets", None, Step.RESTART),
    ("SinkUnavailable: commit_transaction (...): Local: Timed out", None, Step.RESTART),
    ("DeadLettersUndelivered: 3 dead letters undelivered to in.dlq", None, Step.RESTART),
    # Fenced while the file still names this instance: a former active restarting after a
    # Kafka pause started a producer just after this one's promotion; take the sink back.
    ("SinkFenced: another instance with a higher epoch owns this sink", None, Step.RECLAIM),
    # A setup Kafka refuses is not Kafka away: no restart helps until an operator acts.
    ("SinkRefused: Kafka refuses the sink's setup; commit_transaction: TOPIC_AUTHORIZATION_"
     "FAILED", None, Step.EXIT),
    ("java.lang.OutOfMemoryError", None, Step.EXIT),
    (None, None, Step.EXIT),  # stopped after a failed reconfiguration
])
def test_a_query_that_stopped_by_itself(failure: str | None, superseded: str | None,
                                        step: Step) -> None:
    found = classify(failure, superseded, kafka_retry_s=10)
    assert found.step is step
    kafka_away = failure is not None and failure.startswith(("SinkUnavailable",
                                                             "DeadLettersUndelivered"))
    assert found.delay_s == (10 if kafka_away else 0)


def test_a_kafka_timeout_in_a_spark_stack_trace_is_named_by_its_own_line() -> None:
    trace = ("An exception was raised by the Python Proxy. Return Message: Traceback\n"
             "  File sink.py, line 95\n"
             "Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms "
             "expired before the position for partition in-1 could be determined\n")
    found = classify(trace, None, kafka_retry_s=10)
    assert found.step is Step.RESTART and found.reason.startswith(
        "Kafka unavailable (Caused by: org.apache.kafka.common.errors.TimeoutException")


def test_restarts_are_bounded_per_window() -> None:
    budget = RestartBudget(restarts=2, window_s=60)
    assert budget.take(0) and budget.take(10) and not budget.take(20)
    assert budget.take(61)  # the first restart left the window


class SharedFile:
    """What the shared desired-state file says about this instance's ownership, settable."""

    def __init__(self) -> None:
        self.superseded: str | None = None
        self.unreadable = False

    def __call__(self) -> str | None:
        if self.unreadable:
            raise DesiredStateFileError("/c/desired-state.json: unreadable")
        return self.superseded


def active_a(failure: str) -> tuple[FakeQuery, Instance, SharedFile, Supervisor]:
    """Instance a, active, whose query stopped by itself with `failure`."""
    query = FakeQuery(STATE, active=True)
    query.stop_by_itself(failure)
    identity = JobConfig.from_sources(
        load("sensor-averages"), {"bootstrap_servers": "k:9092", "instance_id": "a"},
        env={"STREAMCTL_CONTROL_KEY": "k" * 32}).identity
    instance = Instance(identity, query, Role.ACTIVE, clock_ms=lambda: 0)
    shared = SharedFile()
    return query, instance, shared, Supervisor(query, instance, shared, kafka_retry_s=10)


def restart_of_a(failure: str) -> tuple[FakeQuery, Instance, SharedFile, Supervisor, Next]:
    """`active_a`, and the step its supervisor found."""
    query, instance, shared, supervisor = active_a(failure)
    step = supervisor.next_step()
    assert step is not None
    return query, instance, shared, supervisor, step


def test_a_restart_after_a_kafka_pause_steps_down_when_another_instance_was_promoted_meanwhile(
        ) -> None:
    """The pause is outside the job's lock: a standby promoted in it owns the query (and its
    sink), and restarting would start a producer that fences the new owner's."""
    query, instance, shared, supervisor, step = restart_of_a(KAFKA_AWAY)
    assert step.step is Step.RESTART and step.delay_s == 10
    shared.superseded = PROMOTED_B  # during the pause
    supervisor.take(step)
    assert instance.role is Role.STANDBY and query.log == ["stop"]


def test_a_restart_that_the_sink_refuses_because_another_instance_was_promoted_steps_down(
        ) -> None:
    query, instance, shared, supervisor, step = restart_of_a(KAFKA_AWAY)

    def promoted_while_starting(_state: DesiredState) -> str:
        shared.superseded = PROMOTED_B
        raise Superseded(None, PROMOTED_B)  # the sink, asked before its fence

    query.start_keeping_partitions = promoted_while_starting  # type: ignore[method-assign]
    supervisor.take(step)
    assert instance.role is Role.STANDBY and query.log == ["stop"]


def test_a_restart_that_fails_while_this_instance_still_owns_the_query_leaves_it_active(
        ) -> None:
    query, instance, _shared, supervisor, step = restart_of_a(KAFKA_AWAY)
    query.fail_start = "Kafka still away"
    supervisor.take(step)
    assert instance.role is Role.ACTIVE and query.log == ["start epoch 3"]
    assert not query.is_active()  # the next round classifies what is left


def test_a_restart_waits_for_a_round_when_the_shared_file_cannot_be_read() -> None:
    query, instance, shared, supervisor, step = restart_of_a(KAFKA_AWAY)
    shared.unreadable = True
    supervisor.take(step)
    assert instance.role is Role.ACTIVE and query.log == []


def test_a_sink_fenced_while_the_file_names_this_instance_is_taken_back_then_restarted() -> None:
    query, instance, _shared, supervisor = active_a(
        "SinkFenced: another instance with a higher epoch owns this sink")
    step = supervisor.next_step()
    assert step is not None and (step.step, step.delay_s) == (Step.RECLAIM, 0)
    assert "taking it back" in step.reason
    supervisor.take(step)
    assert query.log == ["fence", "start epoch 3"] and instance.role is Role.ACTIVE
    assert query.is_active()


def test_taking_a_fenced_sink_back_is_bounded_by_the_restart_budget() -> None:
    query, _instance, _shared, supervisor = active_a("SinkFenced: fenced")
    steps = []
    for _ in range(11):
        steps.append(supervisor.next_step())
        query.stop_by_itself("SinkFenced: fenced")
    assert [s.step for s in steps if s is not None] == [Step.RECLAIM] * 10 + [Step.EXIT]
