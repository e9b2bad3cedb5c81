"""The `executors` control tuple on a real Spark standalone cluster, under load.

A local master and one worker of the compose file (`tests.deploy.spark_cluster`: 2 cores,
pyspark's own Spark) and the job as a separate process submitted to it with one-core, 512 MiB
executors, at most two. The master grants an application every free core when it registers,
so the job starts with two executors and releases the one beyond its `--executors 1`. Then
signed tuples ask for 2 (up) and 1 (down): each ack is APPLIED with the time new batches were
held and the registration it waited for, and every batch started after the ack reports the
task slots asked for. A request beyond `--max-executors` is rejected and changes nothing. The
committed output holds every produced record exactly once (`tests.accounting`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from schemas import auth
from schemas.records import Ack, ControlTuple, Outcome, TaskMetrics
from streamctl.tail import Tail
from tests.accounting import until
from tests.deploy.spark_cluster import LocalSparkCluster, start_cluster
from tests.faults.harness import CONTROL_KEY, FaultBed, now_ms
from tests.spark.kafka_io import produce_records

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(540)]

MAX_EXECUTORS = 2
JOB_START_BUDGET_S = 240.0
"""Driver up, executors launched and registered, first batch: 60-120 s on 2 busy cores."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalSparkCluster]:
    started = start_cluster(tmp_path / "spark")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def bed(bootstrap_servers: str, new_topic: Callable[..., str],
        tmp_path: Path) -> Iterator[FaultBed]:
    b = FaultBed.create(bootstrap_servers, new_topic, tmp_path)
    try:
        yield b
    finally:
        b.close()


def test_executors_up_and_down_on_a_standalone_cluster(
        bed: FaultBed, cluster: LocalSparkCluster) -> None:
    bed.start_job("job", "--spark-master", cluster.master_url, "--executor-cores", "1",
                  "--executor-memory-mb", "512", "--max-executors", str(MAX_EXECUTORS),
                  "--executors", "1")
    bed.start_load(100)
    _wait_batch(bed, lambda m: m.task_slots == 1, JOB_START_BUDGET_S,
                "a batch on the one executor the job asked for")
    assert cluster.master_metric("metrics_master_apps_Value") == 1  # the job, on the cluster

    acks = []
    for epoch, (before, after) in enumerate(((1, 2), (2, 1)), start=1):
        ack = _send(bed, "executors", str(after), epoch)
        assert ack.outcome is Outcome.APPLIED, ack.detail
        assert ack.detail.startswith(f"executors {before}→{after}; swapped at a batch boundary "
                                     f"without a restart, new batches held {ack.pause_ms} ms; "
                                     f"{after} executor"), ack.detail
        assert " running " in ack.detail and f"({after} task slot" in ack.detail
        print(f"\n[executors] {ack.detail}")
        assert 0 <= ack.pause_ms < 30_000
        _wait_batch(bed, lambda m, e=epoch, t=ack.acked_at_ms: m.config_epoch == e
                    and m.batch_start_ms > t, 120, f"a batch after the ack of epoch {epoch}")
        acks.append((epoch, ack.acked_at_ms, after))

    rejected = _send(bed, "executors", str(MAX_EXECUTORS + 1), epoch=3)
    assert rejected.outcome is Outcome.REJECTED
    assert rejected.detail == (f"bad_value: bad value '{MAX_EXECUTORS + 1}' for executors: "
                               f"expected an integer in [1, {MAX_EXECUTORS}] (max_executors)")
    after_rejection = _wait_batch(bed, lambda m, t=rejected.acked_at_ms: m.batch_start_ms > t,
                                  120, "a batch after the rejection")
    assert (after_rejection.config_epoch, after_rejection.task_slots) == (2, 1)
    bed.finish_and_check()
    _assert_slots_after_each_ack(bed.commits, acks)


def _assert_slots_after_each_ack(commits: list[TaskMetrics],
                                 acks: list[tuple[int, int, int]]) -> None:
    """Every batch of an epoch started after its ack ran on the slots asked for. (A batch
    planned before the ack may have waited at the gate while executors were killed, and a
    batch of the epoch before the ack may have run while new ones were registering.)"""
    for epoch, acked_ms, slots in acks:
        after = [m for m in commits if m.config_epoch == epoch and m.batch_start_ms > acked_ms]
        assert after and {m.task_slots for m in after} == {slots}, \
            [(m.batch_id, m.task_slots) for m in after]


def _wait_batch(bed: FaultBed, matches: Callable[[TaskMetrics], bool], timeout_s: float,
                what: str) -> TaskMetrics:
    """The first committed batch with rows that `matches`, following the metrics topic."""
    def seen() -> bool:
        bed.follow_commits()
        bed.assert_alive()
        return any(matches(m) for m in bed.commits)

    until(seen, timeout_s, what)
    return next(m for m in bed.commits if matches(m))


def _send(bed: FaultBed, parameter: str, value: str, epoch: int) -> Ack:
    """A tuple signed with the bed's control key; its ack, waited for."""
    tuple_ = auth.sign(ControlTuple(
        control_id=str(uuid.uuid4()), query_id=bed.query_id, operator_id="source",
        parameter=parameter, value=value, epoch=epoch, issuer="test",
        reason="executors on a standalone cluster", issued_at_ms=int(time.time() * 1000)),
        CONTROL_KEY.encode())
    acks = Tail(bed.bootstrap, {bed.topics["acks"]: Ack}, start_at_ms=now_ms())
    produce_records(bed.bootstrap, bed.topics["control"], [(bed.query_id, tuple_)])
    found: list[Ack] = []

    def answered() -> bool:
        found.extend(a for _, a in acks.poll(0.5) if isinstance(a, Ack)
                     and a.control_id == tuple_.control_id)
        bed.assert_alive()
        return bool(found)

    try:
        until(answered, 150, f"the ack of {parameter}={value}")
    finally:
        acks.close()
    return found[0]
