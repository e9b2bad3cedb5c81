"""The query's one owner (`runtime.owner.QueryOwner`) over the in-memory query: every change
goes through it and is recorded by an active instance only; a promotion and a step-down are
role changes, other changes reconfigurations; a query that stopped by itself is restarted or
stepped down; changes from several threads run one at a time."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from schemas.records import DesiredStateRecord, Role
from streaming_jobs.config import JobConfig, grouped
from streaming_jobs.runtime.control.shared_state import SharedDesiredState, save
from streaming_jobs.runtime.desired.state import Bounds, DesiredState, Limits
from streaming_jobs.runtime.fakes import FakeQuery
from streaming_jobs.runtime.owner import QueryOwner
from streaming_jobs.runtime.roles.standby import HotRun, Instance
from streaming_jobs.runtime.roles.supervise import Step

LIMITS = Limits(task_slots=16, udf_versions=(), master="local[16]",
                bounds=Bounds(max_offsets_per_trigger_limit=10_000, max_state_partitions=8,
                              max_executors=4))


def config(tmp_path: Path, instance: str = "a") -> JobConfig:
    return grouped(dict(bootstrap_servers="k:9092", job="j", query_id="q", instance_id=instance,
                     input_topic="in", output_topic="out", dlq_topic="dlq",
                     checkpoint_dir=str(tmp_path / "checkpoint")))


def owner_of(tmp_path: Path, role: Role = Role.ACTIVE, instance: str = "a",
             query: FakeQuery | None = None, hot: HotRun | None = None, limits: Limits = LIMITS,
             ) -> tuple[QueryOwner, FakeQuery, list[DesiredState], list[DesiredStateRecord]]:
    c = config(tmp_path, instance)
    query = query or FakeQuery(c.initial_state())
    published: list[DesiredStateRecord] = []
    recorded: list[DesiredState] = []
    shared = SharedDesiredState(c.identity, c.storage.desired_state_path, c.initial_state(),
                                lambda: limits, published.append)
    owner = QueryOwner(query, Instance(c.identity, query, role, hot=hot), shared,
                       lambda: limits, kafka_retry_s=0, on_recorded=recorded.append)
    return owner, query, recorded, published


def test_an_active_owner_starts_the_query_and_records_every_applied_change(
        tmp_path: Path) -> None:
    owner, query, recorded, published = owner_of(tmp_path)
    owner.start()
    assert query.is_active() and recorded[-1].epoch == 0
    wider = replace(query.desired, epoch=1, input_parallelism=4)
    applied = owner.reconfigure(wider, "c-1")
    assert "input_parallelism 2→4" in applied.detail and query.desired == wider
    assert [s.epoch for s in recorded] == [0, 1]
    assert published[-1].control_id == "c-1" and published[-1].input_parallelism == 4
    owner.advance_epoch(3, "c-2")
    assert query.desired == replace(wider, epoch=3) and recorded[-1].epoch == 3
    # More tasks: their workers warmed first; the epoch alone: no restart.
    assert query.log == ["start epoch 0", "warm", "stop", "start epoch 1"]


def test_a_standby_owner_starts_nothing_and_records_nothing_until_promoted(
        tmp_path: Path) -> None:
    owner, query, recorded, _ = owner_of(tmp_path, Role.STANDBY, instance="b")
    owner.start()
    assert not query.is_active() and recorded == []
    promotion = replace(query.desired, epoch=1, active_instance="b")
    applied = owner.reconfigure(promotion, "c-1")
    assert applied.detail.startswith("promoted b to active at epoch 1")
    assert owner.role is Role.ACTIVE and query.log[:2] == ["fence", "start epoch 1"]
    assert recorded[-1].active_instance == "b"


def test_a_query_that_stopped_because_another_instance_owns_it_steps_down(
        tmp_path: Path) -> None:
    owner, query, _, _ = owner_of(tmp_path)
    owner.start()
    save(str(tmp_path / "checkpoint.desired-state.json"), "q",
         replace(query.desired, epoch=5, active_instance="b"))
    query.stop_by_itself(None)
    step = owner.next_step()
    assert step is not None and step.step is Step.STEP_DOWN
    owner.take(step)
    assert owner.role is Role.STANDBY


def test_a_query_that_stopped_because_kafka_was_away_is_restarted(tmp_path: Path) -> None:
    owner, query, _, _ = owner_of(tmp_path)
    owner.start()
    query.stop_by_itself("SinkUnavailable: commit_transaction: Local: Timed out")
    step = owner.next_step()
    assert step is not None and step.step is Step.RESTART
    owner.take(step)
    assert query.is_active() and query.log[-1] == "start epoch 0"
    assert owner.next_step() is None


def test_a_query_whose_input_was_deleted_halts_once_and_is_never_restarted(
        tmp_path: Path) -> None:
    """At start, and after Spark's own data-loss failure mid-run: the restart finds the
    loss, halts, and no round of the supervisor restarts it again (no crash loop)."""
    owner, query, recorded, _ = owner_of(tmp_path)
    query.input_deleted = "query q: 12 records of its input were deleted ...; halted"
    owner.start()
    assert not query.is_active() and query.halted() == query.input_deleted
    assert recorded == [] and owner.next_step() is None
    query.input_deleted = None
    owner.start()
    query.stop_by_itself("[KAFKA_DATA_LOSS.START_OFFSET_RESET] Some data may have been lost")
    step = owner.next_step()
    assert step is not None and step.step is Step.RESTART
    query.input_deleted = "query q: 40 records of its input were deleted ...; halted"
    owner.take(step)
    assert query.halted() is not None and owner.next_step() is None
    assert [line for line in query.log if line.startswith("start")] == ["start epoch 0"] * 3


def test_changes_from_several_threads_run_one_at_a_time(tmp_path: Path) -> None:
    class Slow(FakeQuery):
        inside = 0
        most = 0

        def hold(self, timeout_s: float) -> bool:
            Slow.inside += 1
            Slow.most = max(Slow.most, Slow.inside)
            time.sleep(0.05)
            Slow.inside -= 1
            return super().hold(timeout_s)

    c = config(tmp_path)
    owner, query, _, _ = owner_of(tmp_path, query=Slow(c.initial_state()))
    owner.start()
    threads = [threading.Thread(target=owner.reconfigure, args=(
        replace(query.desired, epoch=e, output_topic=f"out-{e}"), f"c-{e}"))
        for e in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert Slow.most == 1 and len(query.swapped) == 4


class IdleHotRun:
    note = "running"

    def keep_current(self, active: DesiredState) -> None:
        pass

    def stop(self) -> None:
        pass


def test_a_warm_standby_keeps_one_executor_and_a_hot_one_as_many_as_the_active_asks_for(
        tmp_path: Path) -> None:
    cluster = replace(LIMITS, master="spark://m:7077")  # executors are a cluster's
    warm, warm_query, _, _ = owner_of(tmp_path, Role.STANDBY, instance="b", limits=cluster)
    hot, hot_query, _, _ = owner_of(tmp_path, Role.STANDBY, instance="c", hot=IdleHotRun(),
                                    limits=cluster)
    save(str(tmp_path / "checkpoint.desired-state.json"), "q",
         replace(warm_query.desired, epoch=2, executors=3, active_instance="a"))
    warm.release_surplus_executors()
    hot.release_surplus_executors()
    assert (warm_query.log, hot_query.log) == (["release executors beyond 1"],
                                               ["release executors beyond 3"])
