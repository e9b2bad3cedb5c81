"""Fault injection on real processes: each test breaks one thing under load, lets the system
recover, prints the time from the fault to the first committed batch after it, and checks
the committed output (read_committed) holds every produced record exactly once."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from schemas import Ack
from stack.broker import LocalBroker
from stack.ports import find_free_ports
from stack.topics import TopicSpec, ensure_topics
from tests.support.fault_bed import TOPIC_KINDS, FaultBed, now_ms, report
from tests.support.kafka import produce, read_committed
from tests.support.prometheus import sample, scrape
from tests.support.waiting import until

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
    recorded: the controller would see no ack and decide again). Its state store was
    checkpointed as changelogs (one file per batch and partition, not a snapshot each batch),
    which the new process replays: every account's count is still exact. Without a standby
    this is the recovery path too (kill -9 of the active with failover: `test_failover.py`)."""
    job = bed.start_job("job-1")
    warm(bed)
    bed.wait_commit_after(now_ms(), 60, "a batch to reconfigure after")
    control = bed.send_control("input_parallelism", "3", epoch=1)
    # Every 0.1 s, not flat out: re-reading the Spark job's whole log starves the job it times.
    until(lambda: f"control {control.control_id}" in job.log_path.read_text(), 60,
          "the job taking the tuple", interval_s=0.1)
    job.kill()
    fault = now_ms()
    assert f"reconfigured {bed.query_id}" not in job.log_path.read_text(), \
        "the reconfiguration finished before the kill"
    state = bed.workdir / "checkpoint" / "state"
    assert any(state.rglob("*.changelog")), f"no state store changelog under {state}"
    restarted = bed.start_job("job-1-restarted", "--instance-id", "job-1")
    report("kill -9 during a reconfiguration (input_parallelism 2→3), restarted from its "
           "checkpoint", bed.recovery_s(fault))
    bed.wait_commit_after(now_ms(), 60, "a steady batch after recovery")
    bed.finish_and_check()
    assert "resuming the desired state of epoch 0" in restarted.log_path.read_text()
    assert {m.input_parallelism for m in bed.commits if m.batch_start_ms > fault} == {2}


def test_garbage_on_the_input_metrics_and_control_topics(bed: FaultBed) -> None:
    """50 undecodable records on each topic a process reads: each process counts every one of
    them and carries on, nothing is lost. The input's go to the dead-letter topic, each with
    its position and the reason; the controller counts the metrics topic's; the job counts
    the control topic's and acks none of them."""
    job_port, controller_port = find_free_ports(2)
    bed.start_job("job-1", "--metrics-port", str(job_port))
    bed.start_controller("controller", "--metrics-port", str(controller_port))
    warm(bed)
    # A tuple sent before the job's control consumer holds its partition is not seen; its
    # group may wait out the session of a member an earlier test killed (45 s).
    until(lambda: scraped(job_port, "streamctl_job_control_ready") == 1, 90,
          "the job's control consumer to hold its partition", 0.5)
    fault = now_ms()
    garbage = {kind: [b"\xde\xad %s garbage %d" % (kind.encode(), i) for i in range(50)]
               for kind in ("input", "metrics", "control")}
    for kind, values in garbage.items():
        produce(bed.bootstrap, bed.topics[kind], values)
    report("50 garbage records on each of input, metrics and control", bed.recovery_s(fault))
    bed.finish_and_check()
    bed.assert_alive()

    letters = read_committed(bed.bootstrap, bed.topics["dlq"])
    assert {m.value() for m in letters} == set(garbage["input"])  # a task retry may repeat one
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers() or []}
        assert headers["source_topic"] == bed.topics["input"] and headers["query_id"] == "faults"
        assert headers["error"].startswith("not Avro single-object encoded: it starts with de ad")
    assert scraped(job_port, "streamctl_job_dead_letter_records_total") == 50
    # The control and metrics topics are read by threads of their own, which the output's
    # check does not wait for: each count is awaited, then must be exactly the garbage's.
    for what, port, name, labels in [
            ("the job's undecodable control records", job_port,
             "streamctl_job_control_tuples_total", {"outcome": "undecodable"}),
            ("the controller's decode errors on the metrics topic", controller_port,
             "streamctl_decode_errors_total", {"topic": bed.topics["metrics"]})]:
        until(lambda p=port, n=name, lab=labels: scraped(p, n, **lab) >= 50, 30,
              f"{what} to reach 50", 0.5)
        assert scraped(port, name, **labels) == 50, what
    assert len(bed.read_all("acks", Ack)) == 0  # garbage cannot be acked, and nothing else was sent


def scraped(port: int, name: str, **labels: str) -> float:
    """A sample of a process's Prometheus endpoint, now (0 when absent)."""
    return sample(scrape(f"http://127.0.0.1:{port}/metrics"), name, **labels) or 0.0


def test_broker_stop_and_restart_under_two_controllers(restartable_broker: LocalBroker,
                                                       tmp_path: Path) -> None:
    """The job and two controller instances ride out the broker's restart: the output stays
    exactly once, and once the broker is back exactly one instance leads (whichever the
    group elects) and nothing was sent to the steady job."""
    bootstrap = restartable_broker.bootstrap_servers
    names = {k: f"faults-{k}-{uuid.uuid4().hex[:8]}" for k in TOPIC_KINDS}
    ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k in ("input", "output") else 1)
                              for k, n in names.items()], timeout_s=30)
    bed = FaultBed(bootstrap, names, tmp_path)
    ports = dict(zip(("controller-1", "controller-2"), find_free_ports(2), strict=True))
    try:
        bed.start_job("job-1")
        for name, port in ports.items():
            bed.start_controller(name, "--instance-id", name, "--metrics-port", str(port))
        warm(bed)
        restartable_broker.stop(timeout_s=30)
        fault = now_ms()
        restartable_broker.start(timeout_s=120)
        report("broker stopped and restarted (same port, same data) under two controllers",
               bed.recovery_s(fault, 240))
        bed.wait_commit_after(now_ms(), 60, "a steady batch after the broker came back")

        def leaders() -> float:
            return sum(scraped(port, "streamctl_controller_leader", instance=name)
                       for name, port in ports.items())

        until(lambda: leaders() == 1, 60, "exactly one controller leading again", 0.5)
        for _ in range(5):  # and it stays that way
            assert leaders() == 1
            bed.assert_alive()
            time.sleep(1)
        bed.finish_and_check()
        bed.assert_alive()
        assert read_committed(bootstrap, names["control"]) == []
    finally:
        bed.close()
