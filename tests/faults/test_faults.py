"""Fault injection on real processes: each test breaks one thing under load, lets the system
recover, prints the time from the fault to the first committed batch after it, and checks
the committed output (read_committed) holds every produced record exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas import TaskMetrics
from stack.broker import LocalBroker
from stack.topics import TopicSpec, ensure_topics
from streamctl.processes import wait_until
from streamctl.tail import Tail
from tests.accounting import until
from tests.faults.harness import TOPIC_KINDS, FaultBed, now_ms, report

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(360)]


def warm(bed: FaultBed) -> None:
    """Job up, load flowing, a few batches committed."""
    bed.start_load(150)
    bed.wait_commit_after(now_ms(), 180, "the job's first batches under load")
    bed.wait_commit_after(now_ms(), 60, "one more batch")


def test_kill_9_during_a_reconfiguration_then_restart(bed: FaultBed) -> None:
    """A restart-path tuple (input_parallelism 2 → 3) is being applied — quiesce, stop,
    restart — when the job is killed; a new process of the same instance resumes from the
    checkpoint with the desired state last recorded (the change was never applied, so never
    recorded: the controller would see no ack and decide again). Without a standby this is
    the recovery path too (kill -9 of the active with failover: `test_failover.py`)."""
    job = bed.start_job("job-1")
    warm(bed)
    bed.wait_commit_after(now_ms(), 60, "a batch to reconfigure after")
    control = bed.send_control("input_parallelism", "3", epoch=1)
    # Every 0.1 s, not flat out: re-reading the Spark job's whole log starves the job it times.
    wait_until(lambda: f"control {control.control_id}" in job.log_path.read_text(), 60,
               interval_s=0.1, what="the job taking the tuple")
    job.kill()
    fault = now_ms()
    assert f"reconfigured {bed.query_id}" not in job.log_path.read_text(), \
        "the reconfiguration finished before the kill"
    restarted = bed.start_job("job-1-restarted", "--instance-id", "job-1")
    report("kill -9 during a reconfiguration (input_parallelism 2→3), restarted from its "
           "checkpoint", bed.recovery_s(fault))
    bed.wait_commit_after(now_ms(), 60, "a steady batch after recovery")
    bed.finish_and_check()
    assert "resuming the desired state of epoch 0" in restarted.log_path.read_text()
    assert {m.input_parallelism for m in bed.commits if m.batch_start_ms > fault} == {2}


def test_garbage_on_the_input_metrics_and_control_topics(bed: FaultBed) -> None:
    bed.start_job("job-1")
    controller = bed.start_controller()
    warm(bed)
    fault = now_ms()
    producer = Producer({"bootstrap.servers": bed.bootstrap})
    for kind in ("input", "metrics", "control"):
        for i in range(50):
            producer.produce(bed.topics[kind], value=b"\xde\xad garbage %d" % i)
    assert producer.flush(30) == 0
    report("50 garbage records on each of input, metrics and control", bed.recovery_s(fault))
    bed.finish_and_check()
    bed.assert_alive()
    dead = Tail(bed.bootstrap, {bed.topics["dlq"]: TaskMetrics}, from_beginning=True)
    # The dead-letter topic holds raw payloads: none of them decode, all are counted.
    until(lambda: (dead.poll(0.5), len(dead.decode_errors) >= 50)[1], 60,
          "50 records on the dead-letter topic")
    dead.close()
    assert "undecodable" in controller.log_path.read_text()


def test_broker_stop_and_restart(restartable_broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    names = {k: f"faults-{k}" for k in TOPIC_KINDS}
    ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k in ("input", "output") else 1)
                              for k, n in names.items()], timeout_s=30)
    bed = FaultBed(bootstrap, names, tmp_path)
    try:
        bed.start_job("job-1")
        bed.start_controller()
        warm(bed)
        restartable_broker.stop(timeout_s=30)
        fault = now_ms()
        restartable_broker.start(timeout_s=120)
        report("broker stopped and restarted (same port, same data)", bed.recovery_s(fault, 240))
        bed.wait_commit_after(now_ms(), 60, "a steady batch after the broker came back")
        bed.finish_and_check()
        bed.assert_alive()
    finally:
        bed.close()
