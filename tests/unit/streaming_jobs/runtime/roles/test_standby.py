"""An instance's role: which one it starts in, what a standby answers, the order of a
promotion (record → fence → start), a step-down, against an in-memory query (no Spark, no
Kafka)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schemas.records import ControlTuple, Role
from streaming_jobs.config import JobConfig
from streaming_jobs.loading import load
from streaming_jobs.runtime.control.reconfigure import RestartFailed
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.fakes import FakeQuery
from streaming_jobs.runtime.ports import Commit
from streaming_jobs.runtime.roles.standby import Instance, initial_role

KEY = {"STREAMCTL_CONTROL_KEY": "k" * 32}
SHARED = DesiredState(epoch=3, input_parallelism=4, state_partitions=4,
                      max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v2",
                      input_topic="in", output_topic="out", executors=0)
PROMOTION = replace(SHARED, epoch=4, active_instance="b")


def config(instance: str, role: str = "active") -> JobConfig:
    return JobConfig.from_sources(load("sensor-averages"),
                                  {"bootstrap_servers": "k:9092", "instance_id": instance,
                                   "role": role}, env=KEY)


@pytest.mark.parametrize(("named", "option", "role"), [
    ("", "active", Role.ACTIVE), ("", "standby", Role.STANDBY),   # no failover yet: the option
    ("a", "standby", Role.ACTIVE),                                # named: it runs the query
    ("b", "active", Role.STANDBY),                                # a former active restarted
])
def test_after_a_failover_the_named_instance_is_active_whatever_the_option(
        named: str, option: str, role: Role) -> None:
    named_in_force = replace(SHARED, active_instance=named)
    assert initial_role(config("a", option).identity, named_in_force) is role


def fake(*, active: bool = False, fail_start: str | None = None) -> FakeQuery:
    """Its first batch commits 5 s after the start (the clock reads 1 000 000)."""
    return FakeQuery(SHARED, active=active, fail_start=fail_start,
                     first_commit=Commit("", 7, start_ms=1_003_000, end_ms=1_005_000))


def instance(query: FakeQuery, me: str = "b", role: Role = Role.STANDBY) -> Instance:
    return Instance(config(me).identity, query, role, clock_ms=lambda: 1_000_000)


def promotion(value: str = "b", parameter: str = "active_instance") -> ControlTuple:
    return ControlTuple("c-4", "q", "query", parameter, value, 4, "controller", "", 0)


def test_a_standby_answers_its_own_promotion_only() -> None:
    standby = instance(fake())
    assert standby.answers(promotion("b"))
    assert not standby.answers(promotion("c")) and not standby.answers(
        promotion("8", "input_parallelism"))
    assert instance(fake(), role=Role.ACTIVE).answers(promotion("8", "input_parallelism"))


def test_a_standby_named_but_not_running_sees_nobody_active() -> None:
    """Its promotion failed after the record was written: naming it again must promote it."""
    named = replace(SHARED, active_instance="b")
    assert instance(fake()).view(named).active_instance == ""
    assert instance(fake(), role=Role.ACTIVE).view(named) == named
    assert instance(fake(), me="c").view(named) == named


def test_a_promotion_records_then_fences_then_starts_and_reports_its_time() -> None:
    query = fake()
    standby = instance(query)
    applied = standby.change_role(PROMOTION, lambda d: query.log.append(f"record {d.epoch}"))
    assert query.log == ["record 4", "fence", "start epoch 4"]
    assert standby.role is Role.ACTIVE
    assert applied.pause_ms == 5_000  # the tuple (clock 1 000 000) to the first commit's end
    assert applied.detail.startswith("promoted b to active at epoch 4: former active fenced")
    assert "first commit 5000 ms after (batch 7)" in applied.detail


def test_a_promotion_started_at_the_checkpoints_partitions_says_those_are_in_force() -> None:
    """The output's writer died with a batch planned at 2 state partitions: the promoted
    standby cannot repartition to the desired 4 before that batch commits, so it runs at 2,
    and its ack says so rather than the 4 it was asked for."""
    query = fake()
    query.kept_partitions = 2
    applied = instance(query).change_role(PROMOTION, lambda d: None)
    assert query.desired.state_partitions == 2
    assert "state_partitions 2" in applied.detail.split("in force: ")[1]


class HotRunLog:
    """A hot standby's run that writes what it is asked into the query's log."""

    note = "running on a copy"

    def __init__(self, query: FakeQuery) -> None:
        self._log = query.log

    def keep_current(self, active: DesiredState) -> None:
        self._log.append(f"keep current with epoch {active.epoch}")

    def stop(self) -> None:
        self._log.append("hot run stopped")


def test_a_hot_standby_keeps_its_run_current_on_each_look_and_stops_it_before_a_promotion(
        ) -> None:
    query = fake()
    standby = Instance(config("b").identity, query, Role.STANDBY, clock_ms=lambda: 1_000_000,
                       hot=HotRunLog(query))
    assert standby.watch(lambda: SHARED, lambda: None) is not None  # its heartbeat
    applied = standby.change_role(PROMOTION, lambda d: query.log.append(f"record {d.epoch}"))
    assert query.log == ["keep current with epoch 3", "hot run stopped", "record 4", "fence",
                         "start epoch 4"]
    assert "hot standby (running on a copy) stopped, query started on its checkpoint" in (
        applied.detail)


class BrokenHotRun(HotRunLog):
    def keep_current(self, active: DesiredState) -> None:
        raise RuntimeError("")


def test_a_hot_standby_whose_run_cannot_be_kept_current_still_heartbeats() -> None:
    query = fake()
    standby = Instance(config("b").identity, query, Role.STANDBY, clock_ms=lambda: 1_000_000,
                       hot=BrokenHotRun(query))
    beat = standby.watch(lambda: SHARED, lambda: None)
    assert beat is not None and beat.role is Role.STANDBY


def test_a_failed_promotion_leaves_a_standby() -> None:
    query = fake(fail_start="checkpoint unreadable")
    standby = instance(query)
    with pytest.raises(RestartFailed, match=r"promotion failed .*checkpoint unreadable.*b stays "
                                             r"a standby"):
        standby.change_role(PROMOTION, lambda d: None)
    assert standby.role is Role.STANDBY and query.log[-1] == "stop"


class FirstBatchWatched(FakeQuery):
    """A query whose first batch has not committed yet; it notes the instance's role each
    time the promotion looks for that commit."""

    def __init__(self) -> None:
        super().__init__(SHARED, auto_commit=False)
        self.idle = False  # a batch runs: the query is not idle
        self.instance: Instance | None = None
        self.roles_while_waiting: set[Role] = set()

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None:
        assert self.instance is not None
        self.roles_while_waiting.add(self.instance.role)
        return super().wait_commit(run_id, timeout_s)


def test_a_promotion_whose_first_batch_outlasts_the_wait_keeps_its_query_as_the_active(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The former active is fenced by then, so stopping the run would leave the query to
    nobody; the promoted instance beats as the active while its first batch runs."""
    monkeypatch.setattr("streaming_jobs.runtime.control.reconfigure.FIRST_COMMIT_TIMEOUT_S",
                        0.05)
    query = FirstBatchWatched()
    standby = query.instance = instance(query)
    applied = standby.change_role(PROMOTION, lambda d: query.log.append(f"record {d.epoch}"))
    assert query.roles_while_waiting == {Role.ACTIVE}
    assert standby.role is Role.ACTIVE and query.log == ["record 4", "fence", "start epoch 4"]
    assert "no batch committed within 0 s after it, its first batch still running" in (
        applied.detail)


def test_a_promotion_whose_run_fails_before_its_first_commit_leaves_a_standby() -> None:
    query = FirstBatchWatched()
    standby = query.instance = instance(query)
    query.failed_with = "ExecutorLostFailure: executor 3 exited"
    with pytest.raises(RestartFailed, match=r"promotion failed .*ExecutorLostFailure.*b stays "
                                             r"a standby"):
        standby.change_role(PROMOTION, lambda d: None)
    assert standby.role is Role.STANDBY and query.log[-1] == "stop"


def test_an_active_named_again_keeps_running_and_one_not_named_steps_down() -> None:
    query = fake(active=True)
    active = instance(query, role=Role.ACTIVE)
    kept = active.change_role(PROMOTION, lambda d: None)
    assert query.log == [] and query.desired == PROMOTION and "already active" in kept.detail
    other = instance(query, me="a", role=Role.ACTIVE)
    gone = other.change_role(PROMOTION, lambda d: None)
    assert query.log == ["stop"] and other.role is Role.STANDBY
    assert gone.detail.startswith("a stepped down in 0 ms: b is made active at epoch 4")


def test_an_active_superseded_while_it_was_frozen_steps_down_on_its_next_look() -> None:
    query = fake(active=True)
    active = instance(query, me="a", role=Role.ACTIVE)
    assert active.watch(lambda: SHARED, lambda: None) is None and active.role is Role.ACTIVE
    active.watch(lambda: SHARED, lambda: "instance b was made active at epoch 4")
    assert active.role is Role.STANDBY and query.log == ["stop"]
    beat = active.watch(lambda: PROMOTION, lambda: None)
    assert beat is not None and (beat.role, beat.instance_id, beat.config_epoch) == (
        Role.STANDBY, "a", 4)


def test_a_tuple_naming_another_instance_leaves_a_standby_as_it_is() -> None:
    """The former active stepped down on its own (gate, or its look at the shared file) before
    its control thread got to the promotion tuple: nothing more to do, and no restart."""
    query = fake()
    already = instance(query, me="a", role=Role.STANDBY)
    applied = already.change_role(PROMOTION, lambda d: None)
    assert query.log == [] and already.role is Role.STANDBY
    assert applied.detail == "a is a standby; b is active at epoch 4"
