"""The reconfiguration protocol against an in-memory query: pause measurement, the restart and
swap paths, and rollback."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import pytest

from streaming_jobs.runtime.control.reconfigure import Refused, RestartFailed
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.fakes import FakeQuery
from streaming_jobs.runtime.owner import Reconfigurer
from streaming_jobs.runtime.ports import Commit

START = DesiredState(epoch=0, input_parallelism=2, state_partitions=4,
                     max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v1",
                     input_topic="in", output_topic="out", executors=0)
WIDER = replace(START, epoch=1, input_parallelism=4)
T = TypeVar("T")


def fake(**options: object) -> FakeQuery:
    """Running with START; its last batch ended at 1 000 ms and a restarted run's first batch
    runs from 2 400 to 4 500 ms."""
    return FakeQuery(START, active=True, last_commit=Commit("run-0", 9, 400, 1_000),
                     **options)  # type: ignore[arg-type]


def test_pause_runs_from_the_change_to_the_first_commit_leaving_the_idle_time_out() -> None:
    clock = iter([2_000, 2_300])  # quiesce began (1 s after the last commit), query stopped
    applied = Reconfigurer(fake(), clock_ms=lambda: next(clock)).apply(WIDER)
    assert applied.pause_ms == 2_500
    assert applied.detail == ("input_parallelism 2→4; Python workers warmed for 4 tasks, "
                              "quiesce 300 ms, "
                              "restart to first commit 2200 ms, no batch running for 400 ms; "
                              "idle 1000 ms before the change, not in the pause")


def test_pause_runs_from_the_commit_of_the_batch_the_quiesce_waited_for() -> None:
    query = fake()
    query.last_commit = Commit("run-0", 10, 1_500, 2_100)  # committed during the quiesce
    clock = iter([2_000, 2_300])
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(WIDER)
    assert applied.pause_ms == 4_500 - 2_100
    assert applied.detail.endswith("no batch running for 300 ms")


def test_more_source_tasks_have_their_workers_warmed_before_the_quiesce_outside_the_pause(
) -> None:
    query = fake()
    query.warm_note = "8 Python workers warmed in 3.0 s before the quiesce"
    clock = iter([2_000, 2_300])  # after the warming: the quiesce began, the query stopped
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(WIDER)
    assert query.log[-3:] == ["warm", "stop", "start epoch 1"]
    assert applied.pause_ms == 2_500  # from the quiesce, as without the warming
    assert applied.detail.startswith("input_parallelism 2→4; 8 Python workers warmed in 3.0 s "
                                     "before the quiesce, quiesce 300 ms")


@pytest.mark.parametrize("change", [
    {"max_offsets_per_trigger": 500}, {"state_partitions": 8}, {"input_topic": "in-2"},
    {"input_parallelism": 4, "output_topic": "out-2"},
    {"input_parallelism": 4, "udf_version": "v2"},
])
def test_every_plan_parameter_restarts_the_query(change: dict[str, object]) -> None:
    query = fake()
    new = replace(START, epoch=1, **change)  # type: ignore[arg-type]
    clock = iter([2_000, 2_300])
    Reconfigurer(query, clock_ms=lambda: next(clock)).apply(new)
    assert query.started == [new] and query.swapped == []


def test_a_state_repartition_is_named_in_the_detail() -> None:
    query = fake()
    query.start_note = "state repartitioned 4→8 in 900 ms"
    clock = iter([2_000, 2_300])
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(
        replace(START, epoch=1, state_partitions=8))
    assert applied.detail.startswith("state_partitions 4→8; state repartitioned 4→8 in 900 ms, "
                                     "quiesce 300 ms")


def test_failed_restart_rolls_back_to_the_previous_state() -> None:
    query = fake(fail_with=WIDER)
    with pytest.raises(RestartFailed, match=r"input_parallelism 2→4 failed \(source refused\); "
                                            r"rolled back to epoch 0"):
        Reconfigurer(query, clock_ms=lambda: 0).apply(WIDER)
    assert query.started == [WIDER, START]
    assert query.desired == START and query.is_active()


@pytest.mark.parametrize("change", [{"shed_fraction": 0.2}, {"udf_version": "v2"},
                                    {"shed_fraction": 0.1, "udf_version": "v2"}])
def test_a_knob_read_per_batch_swaps_without_a_restart(change: dict[str, object]) -> None:
    query = fake()
    new = replace(START, epoch=1, **change)  # type: ignore[arg-type]
    clock = iter([2_000, 2_005])
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(new)
    assert query.started == [] and query.swapped == [new] and query.desired == new
    assert "swapped at a batch boundary without a restart" in applied.detail
    assert applied.pause_ms == 5


def test_a_swapped_function_that_fails_its_first_batch_is_rolled_back_by_a_restart() -> None:
    new = replace(START, epoch=1, udf_version="broken")
    query = fake(fail_batch_with=new)
    with pytest.raises(RestartFailed, match=r"udf_version v1→broken failed in the first batch "
                                            r"after the swap \(ValueError: lookup service "
                                            r"refused key-1\); restarted with the settings "
                                            r"of epoch 0"):
        Reconfigurer(query, clock_ms=lambda: 0).apply(new)
    assert query.swapped == [new] and query.started == [START]
    assert query.desired == START and query.is_active() and not query.held


def test_a_knob_swapped_while_no_data_arrives_is_applied_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streaming_jobs.runtime.control.reconfigure.IDLE_GRACE_S", 0.0)
    query = fake(auto_commit=False)
    query.idle = True
    applied = Reconfigurer(query, clock_ms=lambda: 0).apply(
        replace(START, epoch=1, shed_fraction=0.2))
    assert applied.detail.endswith("; no batch has run with it yet (no new data)")


def test_output_retarget_swaps_at_a_batch_boundary_without_a_restart() -> None:
    query = fake()
    new = replace(START, epoch=1, output_topic="out-2")
    clock = iter([2_000, 2_012])  # hold began, released
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(new)
    assert query.started == [] and query.swapped == [new] and not query.held
    assert applied.pause_ms == 12
    assert applied.detail == ("output_topic out→out-2; swapped at a batch boundary without a "
                              "restart, new batches held 12 ms")


def test_an_executor_request_is_acked_with_what_registered_after_the_gate_reopened() -> None:
    query = fake()
    query.settle_note = "3 executors running 6.2 s after the request (3 task slots)"
    clock = iter([2_000, 2_030])
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(
        replace(START, epoch=1, executors=3))
    assert applied.pause_ms == 30  # the wait for registration is not a pause
    assert applied.detail == ("executors 0→3; swapped at a batch boundary without a restart, "
                              "new batches held 30 ms; 3 executors running 6.2 s after the "
                              "request (3 task slots)")


def test_failed_swap_restores_the_previous_state_and_releases_the_gate() -> None:
    new = replace(START, epoch=1, executors=3)
    query = fake(fail_with=new)
    with pytest.raises(RestartFailed, match=r"executors 0→3 failed \(cluster manager refused\)"):
        Reconfigurer(query, clock_ms=lambda: 0).apply(new)
    assert query.swapped == [new, START] and query.desired == START and not query.held


def test_without_new_data_the_pause_ends_when_the_restarted_query_is_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streaming_jobs.runtime.control.reconfigure.IDLE_GRACE_S", 0.0)
    clock = iter([2_000, 2_300, 2_900])  # quiesce began, stopped, seen idle
    applied = Reconfigurer(fake(idle_after_start=True), clock_ms=lambda: next(clock)).apply(WIDER)
    assert applied.pause_ms == 900
    assert applied.detail.endswith("restart to idle 600 ms (no new data); idle 1000 ms before "
                                   "the change, not in the pause")


SPARK_FAILURE = """An exception was raised by the Python Proxy. Return Message:
Traceback (most recent call last):
  File "/x/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/streaming_jobs/sensor_averages.py", line 116, in decode_and_enrich
    region = None if dropped else lookup(r.sensor_id)
ValueError: lookup service refused sensor-0

=== Streaming Query ===
Identifier: q [id = 2082, runId = a8fb]
Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink
"""


def test_a_failure_in_the_ack_is_its_innermost_exception_not_the_traceback() -> None:
    from streaming_jobs.runtime.control.reconfigure import short_failure

    assert short_failure(SPARK_FAILURE) == "ValueError: lookup service refused sensor-0"
    assert short_failure("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with "
                         "exception: Some data may have been lost\nmore") == (
        "Some data may have been lost")
    assert len(short_failure("x" * 1000)) == 300


class FailsRightAfterTheFirstLook(FakeQuery):
    """A run that fails right after it is first looked at, whichever look comes first (its
    failure or whether it is active): that look finds it running, the next one failed, as
    Spark records the exception before it marks the query inactive."""

    looked = False

    def failure(self) -> str | None:
        return self._look(super().failure())

    def is_active(self) -> bool:
        return self._look(super().is_active())

    def _look(self, running: T) -> T:
        if not self.looked:
            self.looked = True
            self.stop_by_itself("ValueError: lookup service refused sensor-0")
        return running


def test_a_run_that_fails_while_its_commit_is_awaited_is_reported_by_its_failure() -> None:
    from streaming_jobs.runtime.control.reconfigure import next_commit

    query = FailsRightAfterTheFirstLook(START, active=True)
    with pytest.raises(RuntimeError, match=r"^ValueError: lookup service refused sensor-0$"):
        next_commit(query, None)


def test_an_input_switch_drains_before_the_quiesce_and_says_so() -> None:
    query = fake()
    query.start_note = "in left at {0: 9}, in-2 read from {0: 0}"
    clock = iter([2_000, 2_300])
    applied = Reconfigurer(query, clock_ms=lambda: next(clock)).apply(
        replace(START, epoch=1, input_topic="in-2"))
    assert applied.detail.startswith("input_topic in→in-2; in drained in 800 ms; in left at "
                                     "{0: 9}, in-2 read from {0: 0}, quiesce 300 ms")


def test_an_input_switch_whose_old_topic_does_not_drain_changes_nothing() -> None:
    query = fake()
    query.refuse_drain = "in is still being written to"
    with pytest.raises(Refused, match="cannot switch the input to in-2: in is still being"):
        Reconfigurer(query).apply(replace(START, epoch=1, input_topic="in-2"))
    assert query.started == [] and query.is_active() and query.desired == START

def test_a_change_of_the_active_instance_is_not_a_reconfiguration_of_the_query() -> None:
    query = fake()
    with pytest.raises(ValueError, match="promotion or a step-down"):
        Reconfigurer(query).apply(replace(START, epoch=1, active_instance="b"))  # type: ignore[arg-type]
    assert query.started == [] and query.is_active()

