"""Broker faults on a three-node local cluster (`stack up --brokers 3`: every topic 3 replicas,
2 in sync) under steady load: kill -9 of the broker leading the input, of the one leading the
control and ack topics with a tuple in flight, of the sink's transaction coordinator during a
reconfiguration, and a broker stopped while batches go on. Each test prints the time from the fault
to the first committed batch after it, checks that every transaction acknowledged so far is in
the committed output (read_committed) exactly once with its account's running count, and that
the loop still works: the job applies and acks tuples, the controller (dry run: it decides but
sends nothing, so the tests' own tuples are the only ones) still leads and models the job at
its size.

One job (fraud-detection, so the output can be checked at any cut while load goes on), one
controller and one load run through the module; each test first moves leadership back to the
layout the topics were made with (input led by node 1, control and acks by node 2) and waits
for every replica to be in sync, so it starts from a healthy cluster whatever came before.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from schemas import Ack, ControlTuple, Outcome, TaskMetrics
from streamctl.stack import leaders as c
from streamctl.stack.cluster import LocalCluster
from streamctl.stack.tcp import find_free_ports
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.runtime.sink.foreach_batch import transactional_id
from tests.support.fault_bed import FRAUD_JOB, TOPIC_KINDS, FaultBed, now_ms, report
from tests.support.prometheus import sample, scrape
from tests.support.waiting import until

# The first test pays for the three-node bed (over four minutes under a loaded CI run).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]

QUERY = "cluster-faults"
BATCHES_WHILE_DOWN = 3
"""Batches planned after a broker stopped that must commit before it comes back."""
PINNED = {"input": [[1, 2, 3], [1, 3, 2]], "control": [[2, 3, 1]], "acks": [[2, 1, 3]]}
"""Replica lists (the first is the preferred leader): one kill takes out the whole input, or
both the control and the ack topic."""


@dataclass
class ClusterBed:
    cluster: LocalCluster
    bed: FaultBed
    controller_port: int
    epoch: int = 0

    @property
    def bootstrap(self) -> str:
        return self.bed.bootstrap

    def next_epoch(self) -> int:
        self.epoch += 1
        return self.epoch


@pytest.fixture(scope="module")
def cluster_bed(kafka_cluster: LocalCluster,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterBed]:
    bootstrap = kafka_cluster.bootstrap_servers
    names = {k: f"cluster-{k}-{uuid.uuid4().hex[:8]}" for k in TOPIC_KINDS}
    c.create_pinned(bootstrap, {names[k]: replicas for k, replicas in PINNED.items()},
                    {"min.insync.replicas": "2"})
    ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k == "output" else 1)
                              for k, n in names.items() if k not in PINNED], timeout_s=30)
    bed = FaultBed(bootstrap, names, tmp_path_factory.mktemp("cluster-bed"), query_id=QUERY,
                   job_options=FRAUD_JOB)
    (controller_port,) = find_free_ports(1)
    try:
        bed.start_job("job-1")
        # It leads, models and logs its decisions, but sends nothing: the tests change the
        # job's size by hand, and a fault's backlog would otherwise make it resize the job
        # with tuples of its own in between (seen: a scale-up refused as a stale epoch).
        bed.start_controller("controller", "--instance-id", "controller",
                             "--metrics-port", str(controller_port), "--dry-run")
        bed.start_load()  # a fraction of its capacity: a slow recovery shows as one
        bed.wait_first_batches()
        yield ClusterBed(kafka_cluster, bed, controller_port)
    finally:
        bed.close()


def healthy(cb: ClusterBed) -> None:
    """Leaders as the topics were made, every replica in sync, output flowing."""
    topics = list(cb.bed.topics.values())
    c.await_in_sync(cb.bootstrap, topics)
    c.elect_preferred(cb.bootstrap, [*topics, c.TRANSACTION_STATE, c.OFFSETS])
    preferred = {cb.bed.topics[k]: {p: r[0] for p, r in enumerate(replicas)}
                 for k, replicas in PINNED.items()}
    until(lambda: all(c.leaders(cb.bootstrap, topic) == leaders
                      for topic, leaders in preferred.items()), 30,
          f"the pinned topics led as made: {preferred}")
    cb.bed.wait_commit_after(now_ms(), 60, "a batch committed on the healthy cluster")


def controller_metric(cb: ClusterBed, name: str, **labels: str) -> float | None:
    return sample(scrape(f"http://127.0.0.1:{cb.controller_port}/metrics"), name, **labels)


def restart(cb: ClusterBed, node_id: int) -> float:
    """Start a killed or stopped node again; seconds until it is back in every ISR."""
    back = time.monotonic()
    cb.cluster.node(node_id).start(timeout_s=120)
    c.await_in_sync(cb.bootstrap, cb.bed.topics.values())
    return time.monotonic() - back


@contextmanager
def restarting(cb: ClusterBed, node_id: int) -> Iterator[None]:
    """`restart` the node in the background while the test checks what does not need it (the
    cluster runs on two nodes, and rejoining one is a fault of its own to go through), back in
    every ISR before the block ends, even when it fails: the next test starts on three."""
    with ThreadPoolExecutor(1, thread_name_prefix=f"restart-{node_id}") as pool:
        back = pool.submit(restart, cb, node_id)
        try:
            yield
        finally:
            took_s = back.result()  # its own failure, chained to the block's if both failed
        print(f"[fault] node {node_id} back in every ISR {took_s:.1f} s after its restart")


def await_ack(cb: ClusterBed, control_id: str, timeout_s: float = 120.0) -> Ack:
    acks: list[Ack] = []

    def answered() -> bool:
        cb.bed.assert_alive()
        acks[:] = [a for a in cb.bed.read_all("acks", Ack) if a.control_id == control_id]
        return bool(acks)

    until(answered, timeout_s, f"the ack of {control_id}", 1.0)
    return acks[0]


def state_partitions_now(cb: ClusterBed) -> int:
    cb.bed.follow_commits()
    return cb.bed.commits[-1].state_partitions


def the_loop_still_works(cb: ClusterBed, metrics_before: float, size: int) -> None:
    """The controller leads, read the job's metrics through the fault and models it at
    `size`; the job and the controller are alive; every transaction so far scored once."""
    cb.bed.assert_alive()
    until(lambda: controller_metric(cb, "streamctl_current_parallelism", query=QUERY) == size,
          60, f"the controller to model the job at {size} state partitions", 0.2)
    assert controller_metric(cb, "streamctl_controller_leader", instance="controller") == 1
    assert (controller_metric(cb, "streamctl_metrics_records_total") or 0) > metrics_before
    print(f"[fault] {cb.bed.check_scored_so_far()} transactions so far, each scored once")


def applied_once_through(cb: ClusterBed, control: ControlTuple, fault_ms: int, node_id: int,
                         metrics_before: float, fault: str) -> None:
    """After `fault` (at `fault_ms`, node `node_id` killed): the `state_partitions` tuple sent
    before it is applied and acked exactly once, output flows again (reported), the node is
    restarted and back in sync, later batches run at the new size, and the loop still works."""
    bed = cb.bed
    ack = await_ack(cb, control.control_id)
    assert ack.outcome is Outcome.APPLIED, ack
    report(fault, bed.recovery_s(fault_ms))
    print(f"[fault] tuple acked {(ack.acked_at_ms - fault_ms) / 1000:.1f} s after the kill")
    with restarting(cb, node_id):
        assert [a.control_id for a in bed.read_all("acks", Ack)].count(control.control_id) == 1
        target = int(control.value)
        assert bed.wait_commit_after(ack.acked_at_ms, 60, "a batch after the change")\
            .state_partitions == target
        the_loop_still_works(cb, metrics_before, target)


def test_kill_9_of_the_input_leader_under_load_loses_and_duplicates_nothing(
        cluster_bed: ClusterBed) -> None:
    cb = cluster_bed
    healthy(cb)
    metrics_before = controller_metric(cb, "streamctl_metrics_records_total") or 0
    size = state_partitions_now(cb)
    c.kill_9(cb.cluster.node(1))
    fault = now_ms()
    recovery = cb.bed.recovery_s(fault)
    assert set(c.leaders(cb.bootstrap, cb.bed.topics["input"]).values()) <= {2, 3}
    report("kill -9 of the broker leading both input partitions", recovery)
    with restarting(cb, 1):
        the_loop_still_works(cb, metrics_before, size)


def test_kill_9_of_the_control_and_acks_leader_with_a_tuple_in_flight_applies_it_once(
        cluster_bed: ClusterBed) -> None:
    cb, bed = cluster_bed, cluster_bed.bed
    healthy(cb)
    assert c.leaders(cb.bootstrap, bed.topics["control"]) == {0: 2}
    assert c.leaders(cb.bootstrap, bed.topics["acks"]) == {0: 2}
    metrics_before = controller_metric(cb, "streamctl_metrics_records_total") or 0
    target = state_partitions_now(cb) + 1
    control = bed.send_control("state_partitions", str(target), cb.next_epoch())
    c.kill_9(cb.cluster.node(2))  # the tuple is committed; neither read nor answered yet
    applied_once_through(cb, control, now_ms(), 2, metrics_before,
                         "kill -9 of the broker leading the control and ack topics, a tuple "
                         "in flight")


def test_kill_9_of_the_sink_coordinator_during_a_reconfiguration_loses_and_duplicates_nothing(
        cluster_bed: ClusterBed) -> None:
    cb, bed = cluster_bed, cluster_bed.bed
    healthy(cb)
    coordinator = c.transaction_coordinator(cb.bootstrap, transactional_id(QUERY))
    metrics_before = controller_metric(cb, "streamctl_metrics_records_total") or 0
    target = state_partitions_now(cb) + 1
    job = next(child for child in bed.children if child.name == "job-1")
    control = bed.send_control("state_partitions", str(target), cb.next_epoch())
    until(lambda: f"control {control.control_id}" in job.log_path.read_text(), 60,
          "the job taking the tuple", interval_s=0.1)
    c.kill_9(cb.cluster.node(coordinator))
    applied_once_through(cb, control, now_ms(), coordinator, metrics_before,
                         f"kill -9 of node {coordinator}, the transaction coordinator of the "
                         "job's sink, during a reconfiguration (state_partitions)")


def test_a_stopped_broker_leaves_the_output_flowing_and_catches_up_with_nothing_delivered_twice(
        cluster_bed: ClusterBed) -> None:
    cb, bed = cluster_bed, cluster_bed.bed
    healthy(cb)
    metrics_before = controller_metric(cb, "streamctl_metrics_records_total") or 0
    size = state_partitions_now(cb)
    victim = c.leaders(cb.bootstrap, bed.topics["output"])[0]
    cb.cluster.node(victim).stop(timeout_s=30)
    stopped = now_ms()
    report(f"node {victim} (leading the output) stopped", bed.recovery_s(stopped))
    assert not c.in_sync(cb.bootstrap, [bed.topics["output"]], 3)  # it left the ISR

    def batches_while_down() -> list[TaskMetrics]:
        bed.follow_commits()
        bed.assert_alive()
        return [m for m in bed.commits if m.batch_start_ms > stopped]
    # Flowing, not just draining what was in flight: batches planned after the stop commit on
    # the two brokers left (a fixed stretch of downtime would only wait longer for the same).
    until(lambda: len(batches_while_down()) >= BATCHES_WHILE_DOWN, 75,
          f"{BATCHES_WHILE_DOWN} batches committed while node {victim} is down", 1.0)
    print(f"[fault] {len(batches_while_down())} batches committed in "
          f"{(now_ms() - stopped) / 1000:.1f} s with node {victim} down")
    with restarting(cb, victim):  # it catches up meanwhile
        the_loop_still_works(cb, metrics_before, size)
