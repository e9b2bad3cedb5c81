"""The `executors` control tuple on a real Spark standalone cluster, under load.

A local master and one worker of the compose file (the session's `spark_cluster`: 2 cores,
pyspark's own Spark) and the job as a separate process submitted to it with one-core, 512 MiB
executors, at most two. The master grants an application every free core when it registers,
so the job starts with two executors and releases the one beyond its `--executors 1`. Then
signed tuples ask for 2 (up) and 1 (down): each ack is APPLIED with the time new batches were
held and the registration it waited for, and every batch started after the ack reports the
task slots asked for. A request beyond `--max-executors` is rejected and changes nothing. The
committed output holds every produced record exactly once (`tests.accounting`). The job's
`--cluster-priority` reaches its metrics, and the controller's reader of the master's status
(`controller.cluster_status`) sees the cores each ack leaves free.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.cluster_status import MasterStatus
from schemas.records import Outcome, TaskMetrics
from tests.support.fault_bed import FaultBed
from tests.support.spark_cluster import LocalSparkCluster, await_free_cores
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(540)]

MAX_EXECUTORS = 2
WORKER_CORES = 2
"""The session cluster's one worker (`spark_cluster`)."""
JOB_START_BUDGET_S = 240.0
"""Driver up, executors launched and registered, first batch: 60-120 s on 2 busy cores."""


def test_executors_up_and_down_on_a_standalone_cluster(
        bed: FaultBed, spark_cluster: LocalSparkCluster) -> None:
    cluster = spark_cluster
    bed.start_job("job", "--spark-master", cluster.master_url, "--executor-cores", "1",
                  "--executor-memory-mb", "512", "--max-executors", str(MAX_EXECUTORS),
                  "--executors", "1", "--cluster-priority", "3")
    bed.start_load()
    first = _wait_batch(bed, lambda m: m.task_slots == 1, JOB_START_BUDGET_S,
                        "a batch on the one executor the job asked for")
    assert first.cluster_priority == 3
    status = MasterStatus(f"http://127.0.0.1:{cluster.ui_ports['spark-master']}/json/", 1.0)
    until(lambda: cluster.master_metric("metrics_master_apps_Value") == 1, 30.0,
          "the job as the cluster's only application", 1.0)

    acks = []
    for epoch, (before, after) in enumerate(((1, 2), (2, 1)), start=1):
        ack = bed.send_and_await("executors", str(after), epoch)
        assert ack.outcome is Outcome.APPLIED, ack.detail
        assert ack.detail.startswith(f"executors {before}→{after}; swapped at a batch boundary "
                                     f"without a restart, new batches held {ack.pause_ms} ms; "
                                     f"{after} executor"), ack.detail
        assert " running " in ack.detail and f"({after} task slot" in ack.detail
        print(f"\n[executors] {ack.detail}")
        _wait_batch(bed, lambda m, e=epoch, t=ack.acked_at_ms: m.config_epoch == e
                    and m.batch_start_ms > t, 120, f"a batch after the ack of epoch {epoch}")
        acks.append((epoch, ack.acked_at_ms, after))
        await_free_cores(status, WORKER_CORES - after)

    rejected = bed.send_and_await("executors", str(MAX_EXECUTORS + 1), epoch=3)
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
