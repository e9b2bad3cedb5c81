"""Benchmark: kill -9 of the leading controller → a follower leads.

Starts a local broker and two `controller run` processes with their defaults (the lease
session included) on fresh topics. Each run waits until the follower has joined the
controllers' group (its start logged, then two lease sessions), kills the leader with
SIGKILL, and times the follower's `takeover` record from its own stamp (the processes share
this machine's clock): the broker ends the dead member's session, the lease partition moves,
and the new leader fences the old one's writes and reads back what was in flight. The killed
instance comes back as the next follower, so the runs alternate.

    .venv/bin/python -m bench.takeover --runs 5

prints each run and the median, and writes `bench/results/takeover.json` (`bench.report`
renders it into `docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench import record
from bench.bed import local_broker
from bench.reaction import Loop
from controller.settings import ControllerSettings
from schemas.records import TAKEOVER
from streamctl.processes import Child, start_child


class Controllers(Loop):
    """The bed's topics and record tail, with controllers started by name and no job."""

    def start(self, name: str) -> Child:
        child = start_child(name, ["controller", "run", "--metrics-port", "0",
                                   "--instance-id", name], self.workdir, self.env)
        self.children.append(child)
        return child

    def leader_after(self, after_ms: int) -> tuple[str, int] | None:
        """The first takeover stamped after `after_ms`: (its instance, when)."""
        return next(((d.target_value, d.decided_at_ms) for _, d in self.decisions
                     if d.action == TAKEOVER and d.decided_at_ms > after_ms), None)

    def takeover_after(self, after_ms: int, timeout_s: float = 120) -> tuple[str, int]:
        self.wait(lambda: self.leader_after(after_ms) is not None, timeout_s, "a takeover")
        taken = self.leader_after(after_ms)
        assert taken is not None
        return taken

    def joined(self, child: Child, session_s: float) -> None:
        """Until `child` has started and had two lease sessions to join the group."""
        self.wait(lambda: f"controller instance {child.name} starting" in child.log_tail(80),
                  60, f"{child.name} to start")
        until = time.monotonic() + 2 * session_s
        self.wait(lambda: time.monotonic() >= until, 3 * session_s, f"{child.name} to join")


def now_ms() -> int:
    return int(time.time() * 1000)


def measure(bootstrap: str, workdir: Path, runs: int, session_s: float) -> list[float]:
    """Seconds from each kill -9 of the leader to the follower's takeover record."""
    bed = Controllers(bootstrap, workdir)
    try:
        leader = bed.start("c0")
        bed.takeover_after(0, 60)
        follower = bed.start("c1")
        takeovers = []
        for n in range(runs):
            bed.joined(follower, session_s)
            bed.children.remove(leader)
            leader.kill()
            killed_ms = now_ms()
            taken = bed.takeover_after(killed_ms)
            if taken[0] != follower.name:
                raise RuntimeError(f"{taken[0]} took over, not the follower {follower.name}")
            takeovers.append((taken[1] - killed_ms) / 1000)
            print(f"  run {n + 1}: kill -9 of {leader.name} → {follower.name} leads after "
                  f"{takeovers[-1]:.2f} s", flush=True)
            leader, follower = follower, bed.start(f"c{n + 2}")
        return takeovers
    finally:
        bed.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="takeovers to time (default 5)")
    args = parser.parse_args()
    session_s = ControllerSettings().lease_session_s
    load_before = record.load_average()
    with local_broker() as bed:
        takeovers = measure(bed.bootstrap_servers, bed.workdir, args.runs, session_s)
    median = statistics.median(takeovers)
    print(f"\nkill -9 of the leader → a follower leads: median {median:.2f} s, "
          f"{min(takeovers):.2f}–{max(takeovers):.2f} s over {len(takeovers)} runs "
          f"(lease session {session_s:g} s)")
    record.write("takeover", {"runs": args.runs, "lease_session_s": session_s,
                              "kill_to_takeover_s": [round(t, 3) for t in takeovers],
                              "median_s": round(median, 3)}, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
