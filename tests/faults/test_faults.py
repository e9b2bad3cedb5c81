"""Fault injection on real processes: each test breaks one thing under load, lets the system
recover, prints the time from the fault to the first committed batch after it, and checks
the committed output (read_committed) holds every produced record exactly once."""

from __future__ import annotations

import time

import pytest

from schemas import Ack, Decision, SensorReading, codec_for
from streamctl.cli import main as status_main
from streamctl.stack.tcp import find_free_ports
from tests.support.fault_bed import HEARTBEAT, FaultBed, now_ms, report
from tests.support.kafka import (
    delete_records_before,
    end_offsets,
    produce,
    read_committed,
    set_topic_config,
)
from tests.support.prometheus import scraped
from tests.support.waiting import holds, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]


def test_kill_9_during_a_reconfiguration_shows_the_growing_backlog_then_restarts_exactly(
        bed: FaultBed, capsys: pytest.CaptureFixture[str]) -> None:
    """A restart-path tuple (input_parallelism 2 → 3) is being applied — quiesce, stop,
    restart — when the job is killed. While it is down, under load, the controller reports it
    lost with the backlog the broker holds for it, growing (Prometheus), and `streamctl
    status` reads the same truth (silent, no current rates, the lag from the broker). A new
    process of the same instance resumes from the checkpoint with the desired state last
    recorded (the change was never applied, so never recorded: the controller would see no
    ack and decide again). Its state store was checkpointed as changelogs (one file per batch
    and partition, not a snapshot each batch), which the new process replays: every window is
    still exact. Without a standby this is the recovery path too (kill -9 of the active with
    failover: `test_failover.py`)."""
    [controller_port] = find_free_ports(1)
    job = bed.start_job("job-1")
    bed.start_controller("controller", "--metrics-port", str(controller_port), "--dry-run")
    bed.warm()  # its last wait: a batch to reconfigure after
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
    backlog = owed_while_down(bed, controller_port)
    status = status_row(bed, capsys)
    assert status.split()[1:3] == ["-", "-"] and status.split()[7] == "silent", status
    assert int(status.split()[3]) >= backlog, status  # read later: more has arrived
    restarted = bed.start_job("job-1-restarted", "--instance-id", "job-1")
    report("kill -9 during a reconfiguration (input_parallelism 2→3), restarted from its "
           "checkpoint", bed.recovery_s(fault))
    bed.wait_commit_after(now_ms(), 60, "a steady batch after recovery")
    bed.finish_and_check()
    assert "resuming the desired state of epoch 0" in restarted.log_path.read_text()
    assert {m.input_parallelism for m in bed.commits if m.batch_start_ms > fault} == {2}


def test_garbage_and_records_too_large_to_write_are_counted_and_no_process_restarts(
        bed: FaultBed) -> None:
    """50 undecodable records on each topic a process reads, an undecodable input record of
    1.5 MB and a valid reading whose window row is 1.1 MB (over the job's 1 MB record limit):
    each process counts every one of them and carries on, its query never restarted, and
    nothing is lost. The input's go to the dead-letter topic, each with its position (the
    input record there is the one it carries) and the reason (the large one cut to the limit,
    with its size); the oversized row goes there in its batch's transaction while every other
    window is committed once; the controller counts the metrics topic's garbage; the job
    counts the control topic's and acks none."""
    job_port, controller_port = find_free_ports(2)
    set_topic_config(bed.bootstrap, bed.topics["input"], **{"max.message.bytes": "3000000"})
    job = bed.start_job("job-1", "--metrics-port", str(job_port))
    bed.start_controller("controller", "--metrics-port", str(controller_port))
    bed.warm()
    # A tuple sent before the job's control consumer holds its partition is not seen.
    until(lambda: scraped(job_port, "streamctl_job_control_ready") == 1, 60,
          "the job's control consumer to hold its partition", 0.5)
    fault = now_ms()
    garbage = {kind: [b"\xde\xad %s garbage %d" % (kind.encode(), i) for i in range(50)]
               for kind in ("input", "metrics", "control")}
    for kind, values in garbage.items():
        produce(bed.bootstrap, bed.topics[kind], values)
    huge_garbage = b"\xde\xad" + b"x" * 1_500_000
    huge_key = "sensor-" + "k" * 1_100_000
    produce(bed.bootstrap, bed.topics["input"], [huge_garbage, codec_for(SensorReading).encode(
        SensorReading(huge_key, now_ms(), 1.0, 1))], max_bytes=3_000_000)
    report("50 garbage records on each of input, metrics and control", bed.recovery_s(fault))
    bed.finish_and_check()
    bed.assert_alive()
    log = job.log_path.read_text(errors="replace")
    assert log.count("started at epoch") == 1 and "restarting the query" not in log

    letters = read_committed(bed.bootstrap, bed.topics["dlq"])
    headers = [{k: v.decode() for k, v in letter.headers() or []} for letter in letters]
    undecodable = [(m, h) for m, h in zip(letters, headers, strict=True) if "stage" not in h]
    # A task retry may repeat a dead letter of the input (in any order); the output's is in a
    # transaction.
    cuts = [(m, h) for m, h in undecodable if h["size"] == "1500002"]
    assert cuts, "the 1.5 MB record was not dead-lettered"
    cut, cut_headers = cuts[0]
    assert {m.value() for m, _h in cuts} == {cut.value()} == {huge_garbage[:len(cut.value())]}
    assert {m.value() for m, _h in undecodable} == {*garbage["input"], cut.value()}
    # Each names where it came from: the input record at that position is the one it carries.
    inputs = {(m.partition(), m.offset()): m.value()
              for m in read_committed(bed.bootstrap, bed.topics["input"])}
    for m, h in undecodable:
        assert h["source_topic"] == bed.topics["input"] and h["query_id"] == "faults"
        assert h["error"].startswith("not Avro single-object encoded: it starts with de ad")
        assert inputs[(int(h["source_partition"]), int(h["source_offset"]))].startswith(
            m.value()), h
    assert cut_headers["truncated"] == f"kept the first {len(cut.value())} of 1500002 bytes"
    assert 900_000 < len(cut.value()) < 1_000_000
    [(row, row_headers)] = [(m, h) for m, h in zip(letters, headers, strict=True)
                            if h.get("stage") == "output"]
    assert row_headers["output_topic"] == bed.topics["output"]
    assert row_headers["error"].startswith(f"record too large for {bed.topics['output']}")
    assert int(row_headers["size"]) > 1_100_000 and "truncated" in row_headers
    # Its key (the sensor id) alone is over the limit: dropped, and said so; the value keeps
    # what fits.
    assert row.key() is None and row_headers["key_dropped"] == f"{len(huge_key)} bytes"
    assert scraped(job_port, "streamctl_job_dead_letter_records_total") == 51
    assert scraped(job_port, "streamctl_job_output_dead_letter_records_total") == 1
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


def owed_while_down(bed: FaultBed, controller_port: int) -> float:
    """The controller reports the query lost, with the broker's backlog for it growing over
    two readings; the second."""
    def lost() -> bool:
        bed.assert_alive("controller")
        return scraped(controller_port, "streamctl_lost_queries") == 1
    until(lost, 60, "the controller to report the killed job lost", 0.5)
    readings: list[float] = []

    def growing() -> bool:
        value = scraped(controller_port, "streamctl_backlog_records", query=bed.query_id)
        if not readings or value > readings[-1]:
            readings.append(value)
        return len(readings) >= 3 and readings[0] > 0
    until(growing, 30, "the backlog of the job that is down to grow", 0.5)
    return readings[-1]


def status_lines(bed: FaultBed, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`streamctl status --once` on the bed's topics, as printed."""
    t = bed.topics
    capsys.readouterr()
    assert status_main(["status", "--once", "--bootstrap-servers", bed.bootstrap,
                        "--metrics-topic", t["metrics"], "--decisions-topic", t["decisions"],
                        "--acks-topic", t["acks"], "--control-topic", t["control"]]) == 0
    return capsys.readouterr().out.splitlines()


def status_row(bed: FaultBed, capsys: pytest.CaptureFixture[str]) -> str:
    """The bed's query's row of `streamctl status --once`."""
    return next(line for line in status_lines(bed, capsys)
                if line.startswith(f"{bed.query_id} "))


def test_input_deleted_before_it_was_read_halts_the_job_once_and_skip_goes_on(
        bed: FaultBed, capsys: pytest.CaptureFixture[str]) -> None:
    """A job stopped on purpose (SIGTERM) is reported stopped, not lost. While it is down,
    records it had not read are deleted (as retention would): restarted, it finds and reports
    how many (its log, Prometheus, its metrics records, `streamctl status`, the controller's
    decision log), halts — up, reading nothing, no restart loop — and, restarted with
    `--on-data-loss skip`, goes on from the first record still there."""
    job_port, controller_port = find_free_ports(2)
    job = bed.start_job("job-1", *HEARTBEAT)
    bed.start_controller("controller", "--metrics-port", str(controller_port), "--dry-run")
    bed.warm()
    bed.stop_load()
    bed.wait_read_to_end(60, "the job to read every record the load produced")
    assert job.stop() == 0
    stopped = time.monotonic()
    until(lambda: scraped(controller_port, "streamctl_down_queries", state="stopped") == 1, 60,
          "the controller to report the job stopped", 0.5)
    # Lost would follow 2.5 beat intervals of silence (2.5 s): not in twice that.
    holds(lambda: scraped(controller_port, "streamctl_lost_queries") == 0,
          stopped + 5 - time.monotonic(), "the stopped job is not taken for lost")

    readings = [codec_for(SensorReading).encode(SensorReading(f"s{i % 4}", now_ms(), 1.0, i))
                for i in range(40)]
    produce(bed.bootstrap, bed.topics["input"], readings)
    delete_records_before(bed.bootstrap, bed.topics["input"],
                          end_offsets(bed.bootstrap, bed.topics["input"]))
    halted = bed.start_job("job-1-halted", "--instance-id", "job-1", "--metrics-port",
                           str(job_port), *HEARTBEAT)
    until(lambda: "halted, reading nothing" in halted.log_path.read_text(errors="replace"),
          180, "the restarted job to find its input deleted", 0.5)
    halted_at = time.monotonic()
    assert "40 records of its input were deleted" in halted.log_path.read_text()
    assert scraped(job_port, "streamctl_job_input_records_lost_total",
                   topic=bed.topics["input"]) == 40
    until(lambda: scraped(controller_port, "streamctl_down_queries", state="halted") == 1, 60,
          "the controller to report the job halted", 0.5)
    [decision] = [d for d in bed.read_all("decisions", Decision) if d.action == "halted"]
    assert "40 records of its input were deleted" in decision.reason
    status = "\n".join(status_lines(bed, capsys))
    assert "halted: query faults: 40 records of its input were deleted" in status
    assert "input lost to retention: 40 records" in status
    holds(bed.processes_alive, halted_at + 5 - time.monotonic(),
          "every process up a few heartbeats after the halt", 1)
    log = halted.log_path.read_text(errors="replace")
    assert log.count("records of its input were deleted") == 1, "found and reported once"
    assert "restarting the query" not in log
    assert halted.stop() == 0

    skipped_at = now_ms()
    bed.start_job("job-1-skipping", "--instance-id", "job-1", "--on-data-loss", "skip")
    produce(bed.bootstrap, bed.topics["input"], readings[:10])
    bed.wait_commit_after(skipped_at, 180, "a batch of the records after the deleted ones")
    skipping = bed.children[-1].log_path.read_text(errors="replace")
    assert "going on from the earliest records still there" in skipping
    assert sum(m.input_rows for m in bed.commits if m.batch_start_ms > skipped_at) == 10
