"""Failover of a frozen active on real processes: an active job instance, a warm standby on
the shared checkpoint, the controller, the real broker and steady load. SIGSTOP freezes the
active; the test prints the time to the promoted standby's first committed batch, wakes the
zombie and checks it steps down and the committed output (read_committed) holds every produced
record exactly once."""

from __future__ import annotations

import pytest

from schemas import Decision, Role
from tests.support.fault_bed import FaultBed, now_ms, report

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]


def test_a_frozen_active_is_failed_over_and_steps_down_when_it_wakes(bed: FaultBed) -> None:
    """SIGSTOP freezes job-1 (Spark's JVM included) as a long GC pause or a network cut would;
    the controller fails over to job-2; SIGCONT wakes job-1 as a zombie in the middle of
    whatever it was doing. It must step down, and nothing it still runs may reach the
    committed output or break the shared checkpoint."""
    bed.start_active_and_standby()
    zombie = bed.children[0]
    bed.wait_commit_after(now_ms(), 60, "a batch to freeze the active after")
    zombie.pause()
    fault = now_ms()
    first = bed.wait_commit_after(fault, 150, "the promoted standby's first commit", "job-2")
    report("active frozen (SIGSTOP), failed over to the standby",
           (first.batch_end_ms - fault) / 1000)
    zombie.resume()
    woke = now_ms()
    bed.wait_heartbeat("job-1", Role.STANDBY, woke, 60)  # stepped down: a standby now
    bed.wait_commit_after(now_ms(), 60, "a batch of job-2 after the zombie woke", "job-2")
    bed.finish_and_check()
    bed.assert_alive()
    assert bed.committed_after(fault, "job-1") is None, "the zombie committed a batch"
    assert "steps down" in zombie.log_path.read_text()
    [failover] = [d for d in bed.read_all("decisions", Decision) if d.action == "failover"]
    assert "active instance job-1: no liveness beat for" in failover.reason, failover.reason
    print(f"[fault] zombie stepped down: {stepped_down(zombie.log_path.read_text())}")


def stepped_down(log_text: str) -> str:
    return next(line.split(": ", 1)[-1] for line in log_text.splitlines()
                if "steps down" in line)
