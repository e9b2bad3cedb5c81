"""Failover on real processes: an active job instance, a standby, the controller, the real
broker and steady load. The active (then the controller, then the promoted one) is killed; the
test prints the time from each fault to the first committed batch after it and checks the
committed output (read_committed) holds every produced record exactly once. A stateful job
with hot standbys (each instance its own checkpoint); a frozen active and a warm standby on
the shared checkpoint are `test_failover_frozen.py`."""

from __future__ import annotations

import pytest

from schemas import Ack, ControlTuple, Decision, Outcome, Role
from streaming_jobs.config import instance_dir
from streaming_jobs.runtime.checkpoint.instances import committed_ends
from tests.support.fault_bed import FAST_DETECTION, FRAUD_JOB, FaultBed, now_ms, report
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]


def test_kill_9_of_a_hot_active_then_of_the_controller_mid_promotion_then_of_the_promoted_one(
        bed: FaultBed) -> None:
    """Three faults in one run (the suite's time is bounded): the active dies mid-batch, the
    controller promotes the standby and is itself killed -9 between sending the promotion and
    receiving its ack. The standby completes the promotion on its own; the restarted
    controller resumes waiting for that ack instead of deciding again. The job keeps a running
    count per account and the standby is hot: it had run the query on its own checkpoint,
    behind the active's commits, and the promotion folds only its trail into that state (no
    copy); every account's count stays exact. Then a warm standby joins (a rolling change of
    `--standby`) and the promoted active is killed too: the warm one, promoted, takes a copy of
    the hot one's checkpoint (it wrote the output's last batch; the shared one never held this
    run), and every count is still exact."""
    # Sizing pinned (max = its 2 partitions): on a loaded machine the load can outrun the job,
    # and a state repartition there outlasts every wait below; failover is what is under test.
    bed.job_options = (*FRAUD_JOB, "--max-state-partitions", "2")
    bed.start_active_and_standby("--standby", "hot")
    trailing_behind_the_active(bed, "job-2")
    bed.wait_commit_after(now_ms(), 60, "a batch to start the next one after")
    assert not [t for t in bed.read_all("control", ControlTuple)
                if t.parameter == "active_instance"], "the live active was failed over"
    bed.children[0].kill()  # job-1, in a batch: batches take most of each trigger interval
    fault = now_ms()
    promotion = bed.wait_control(lambda t: t.parameter == "active_instance", 120)
    controller = next(c for c in bed.children if c.name == "controller")
    controller.kill()
    controller_fault = now_ms()
    assert not [a for a in bed.read_all("acks", Ack) if a.control_id == promotion.control_id], \
        "the promotion was acked before the controller was killed: nothing was in flight"
    bed.start_controller("controller-2", *FAST_DETECTION)
    first = bed.wait_commit_after(fault, 150, "the promoted standby's first commit", "job-2")
    report("kill -9 of the active mid-batch, failed over to the standby",
           (first.batch_end_ms - fault) / 1000)
    report("kill -9 of the controller between the promotion and its ack",
           (first.batch_end_ms - controller_fault) / 1000)
    # The query has no standby left: the restarted controller asks for one, and it starts
    # (warm: the default) while the checks below go on.
    until(lambda: "start_standby" in [d.action for d in bed.read_all("decisions", Decision)],
          60, "a start_standby recommendation", 1.0)
    bed.start_standby("job-3")
    bed.wait_commit_after(now_ms(), 60, "a steady batch after the failover", "job-2")
    bed.check_scored_so_far()
    # One promotion, at the next epoch, answered by the promoted instance; nothing after it:
    # the restarted controller did not decide again.
    tuples = bed.read_all("control", ControlTuple)
    assert [t.control_id for t in tuples if t.parameter == "active_instance"] == [
        promotion.control_id] and tuples[-1].control_id == promotion.control_id, tuples
    assert (promotion.value, promotion.operator_id) == ("job-2", "query")
    assert promotion.epoch == max(t.epoch for t in tuples)
    answers = [a for a in bed.read_all("acks", Ack) if a.control_id == promotion.control_id]
    assert [(a.instance_id, a.epoch, a.outcome) for a in answers] == [
        ("job-2", promotion.epoch, Outcome.APPLIED)], answers
    print(f"[fault] promotion acked: {answers[0].detail} (pause {answers[0].pause_ms} ms)")
    assert f"hot standby (running on a copy of {bed.workdir / 'checkpoint'}" in answers[0].detail
    assert "state kept:" in answers[0].detail, answers[0].detail  # folded in, not copied
    decisions = bed.read_all("decisions", Decision)
    [failover] = [d for d in decisions if d.action == "failover"]
    # Seen by the missing liveness beats, mid-batch, not by a batch timeout.
    assert "active instance job-1: no liveness beat for" in failover.reason, failover.reason
    resumed = (bed.workdir / "controller-2.log").read_text()
    assert (f"resuming faults: last tuple active_instance=job-2 at epoch {promotion.epoch}"
            in resumed), resumed

    bed.wait_heartbeat("job-3", Role.STANDBY, now_ms(), 120)
    next(c for c in bed.children if c.name == "job-2").kill()
    third = now_ms()
    warm = bed.wait_control(lambda t: t.parameter == "active_instance" and t.value == "job-3",
                            120)
    bed.wait_commit_after(third, 150, "the warm standby's first commit", "job-3")
    bed.check_scored_so_far()
    [warm_answer] = [a for a in bed.read_all("acks", Ack) if a.control_id == warm.control_id]
    copied_from = instance_dir(str(bed.workdir / "checkpoint"), "job-2")
    assert f"state copied from {copied_from}" in warm_answer.detail, warm_answer.detail


def trailing_behind_the_active(bed: FaultBed, name: str) -> None:
    """Wait until hot standby `name` has committed two batches of its own run after its copy
    of the active's checkpoint."""
    own = instance_dir(str(bed.workdir / "checkpoint"), name)
    copied: list[int] = []

    def trailing() -> bool:
        bed.assert_alive()
        found = committed_ends(own)
        if found is not None and not copied:
            copied.append(found[0])
        return found is not None and found[0] >= copied[0] + 2

    until(trailing, 240, f"{name}'s own run committing batches behind the active", 1.0)
