"""Two jobs on one real standalone cluster, both wanting more cores than it has free.

The session's cluster (one 2-core worker) and one more worker of one core for this test: three
cores. Two jobs, each with one-core executors, one to start with and at most two, start on it
(each takes one executor: one core is left free), then each gets a load no one-core executor
can keep up with: the job waits `COST_MS` per record, so one core reads at most
`1000 / COST_MS` records/s, whatever the machine, and `RATE_PER_S` is three times that. Only
then does the controller start, with the master's status to read (`--spark-master-status-url`):
the free core goes to one query, asked for in one `executors` tuple that the job applies; the
other is never asked to grow (no request waits for cores the master does not have) and its
decision says why, naming the cluster. Which of the two it goes to depends on which query's
model is ready first: the priority orders those that want cores in the same cycle
(`tests/unit/controller/core/test_cluster.py`), and one that asked already keeps its cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.cluster_status import MasterStatus
from schemas.records import Ack, ControlTuple, Decision, Outcome
from streamctl.processes import stop_all
from tests.support.fault_bed import FaultBed
from tests.support.kafka import NewTopics
from tests.support.spark_cluster import LocalSparkCluster, await_free_cores
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(720)]

COST_MS = 20
"""Each record's wait in the job: a one-core executor reads at most 50 records/s."""
BATCH_CAP = 100
"""Records a batch reads at most: two seconds of one core's work, so batches keep coming."""
RATE_PER_S = 150
"""Each job's load: three times what one executor core can read."""
JOB_START_BUDGET_S = 300.0
"""Two drivers up, executors launched and registered, first batches: on 2 busy cores."""
NO_ROOM = "no room for another executor: the cluster"
"""How a decision begins to say the cluster's free cores are not this query's (the rest names
the query they went to, or says none are free)."""
DECIDED_BUDGET_S = 240.0
"""The controller's warm-up, both queries' models and the tuple's ack."""


@pytest.fixture
def two_jobs(bed: FaultBed, new_topics: NewTopics, spark_cluster: LocalSparkCluster,
             tmp_path: Path) -> Iterator[tuple[FaultBed, FaultBed]]:
    """Queries `urgent` (cluster priority 5) and `routine` (1) on the cluster and one more
    one-core worker, each on one executor under its load; the free core left between them."""
    bed.query_id = "urgent"
    other = bed.beside("routine", new_topics, tmp_path / "routine")
    try:
        with spark_cluster.extra_worker(tmp_path / "worker", cores=1):
            try:
                yield _started(bed, other, spark_cluster)
            finally:  # the applications end before the worker they run on
                stop_all([*bed.children, *other.children])
    finally:
        other.close()


def _started(bed: FaultBed, other: FaultBed, spark_cluster: LocalSparkCluster
             ) -> tuple[FaultBed, FaultBed]:
    for job, priority in ((bed, 5), (other, 1)):
        job.start_job("job", "--spark-master", spark_cluster.master_url,
                      "--executor-cores", "1", "--executor-memory-mb", "512",
                      "--executors", "1", "--max-executors", "2",
                      "--cluster-priority", str(priority),
                      "--max-offsets-per-trigger", str(BATCH_CAP),
                      "--set", f"enrichment_cost_ms={COST_MS}")
        job.start_load(RATE_PER_S)
    for job in (bed, other):
        job.wait_commit_after(0, JOB_START_BUDGET_S, f"{job.query_id}'s first batch")
    return bed, other


def test_two_jobs_wanting_more_cores_than_are_free_one_grows_the_other_is_told_why(
        two_jobs: tuple[FaultBed, FaultBed], spark_cluster: LocalSparkCluster) -> None:
    bed, other = two_jobs
    status_url = f"http://127.0.0.1:{spark_cluster.ui_ports['spark-master']}/json/"
    status = MasterStatus(status_url, 1.0)
    await_free_cores(status, 1)
    bed.start_controller("controller", "--spark-master-status-url", status_url)

    grown = bed.wait_control(lambda t: t.parameter == "executors", DECIDED_BUDGET_S)
    assert grown.value == "2"
    winner, loser = (bed, other) if grown.query_id == bed.query_id else (other, bed)
    ack = until(lambda: next((a for a in bed.read_all("acks", Ack)
                              if a.control_id == grown.control_id), None),
                DECIDED_BUDGET_S, f"{winner.query_id}'s ack of executors 2", 1.0,
                alive=bed.children + other.children)
    assert ack.outcome is Outcome.APPLIED, ack.detail
    await_free_cores(status, 0)

    told = until(lambda: [d for d in bed.read_all("decisions", Decision)
                          if d.query_id == loser.query_id and NO_ROOM in d.reason],
                 DECIDED_BUDGET_S, f"a decision telling {loser.query_id} why it may not grow",
                 1.0, alive=bed.children + other.children)
    print(f"\n[division] {winner.query_id}: {grown.value} executors; "
          f"{loser.query_id}: {told[0].reason}")
    assert [t.query_id for t in bed.read_all("control", ControlTuple)
            if t.parameter == "executors"] == [winner.query_id]
    grew = winner.wait_commit_after(ack.acked_at_ms, 120, f"{winner.query_id}'s next batch")
    kept = loser.wait_commit_after(told[-1].decided_at_ms, 120,
                                   f"{loser.query_id}'s batch after it was told")
    assert (grew.task_slots, kept.task_slots) == (2, 1)
