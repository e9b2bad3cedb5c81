"""Benchmark: kill -9 of the active instance → the promoted standby's first commit, warm and hot,
beside the same run's cold restart, and what each kind of standby costs.

Starts a local broker, the real sensor job as an active instance and a warm standby on one
checkpoint, the real controller (defaults: 1 s beats, lost after 2.5 s without one) and a
constant load of `--rate` records/s. Each run kills the active with SIGKILL mid-stream and
times the controller's `failover` decision (detection), the promoted instance's first
committed batch and the promotion's ack (its pause), each from its record's own stamp (the
processes share this machine's clock), not from when the benchmark read it. The killed
instance then comes back as the next standby (warmed up before the next kill), so the runs
alternate. Then the alternative without a standby, `--runs` times: the standby is stopped,
the active killed, and a new process started at once on the same checkpoint with the killed
one's instance id (what a supervisor restarting the process does), timed to its first commit
and split into phases from the restarted process's log: up to its SparkSession, the session,
the query's start, and the first batch to its commit. Last the same query goes hot: the active
is stopped and started again with `--standby hot` (it takes over the shared checkpoint's state
through a copy), a hot standby starts beside it, and the failovers are run again. Each kind of
standby's cost is sampled once it is ready, over `COST_WINDOW_S`: the CPU its process group used
(cores) and its resident memory, beside the active's.

    .venv/bin/python -m bench.failover --runs 5

prints a table and writes `bench/results/failover.json` (`bench.report` renders it into
`docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import record
from bench.bed import local_broker
from bench.reaction import Loop
from schemas import Role, TaskMetrics
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child
from streamctl.profiles import RateProfile
from streaming_jobs.config import instance_dir
from streaming_jobs.runtime.checkpoint.instances import committed_ends

TARGET_S = 8.0
"""Issue 12's target for kill -9 → first commit on the promoted standby."""
COST_WINDOW_S = 30.0
"""How long a standby's and its active's CPU use is sampled."""


@dataclass(frozen=True)
class FailoverRun:
    killed: str
    promoted: str
    kill_to_decision_s: float
    kill_to_first_commit_s: float
    ack_pause_s: float
    standby: str = "warm"
    """What the promoted standby kept ready: `warm` (a session) or `hot` (the state)."""


@dataclass(frozen=True)
class Usage:
    """One process group's use over a sample window."""

    cpu_cores: float
    rss_mib: float


@dataclass(frozen=True)
class Cost:
    """A standby's use beside its active's, sampled over the same window."""

    standby: str
    standby_usage: Usage
    active_usage: Usage


class Instances(Loop):
    """The reaction benchmark's loop with named instances of one query, and the batches with
    rows they committed."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        super().__init__(bootstrap, workdir)
        self.commits: list[TaskMetrics] = []
        self.last_heard: dict[str, tuple[float, TaskMetrics]] = {}
        """Per instance, its newest metrics record (beats included) and when it arrived."""

    def start_instance(self, name: str, role: Role, standby: str = "warm") -> Child:
        t = self.topics
        child = start_child(name, [
            "job", "run", "--job", "sensor-averages", "--query-id", self.query_id,
            "--instance-id", name, "--role", role.value.lower(),
            "--input-topic", t["in"], "--output-topic", t["out"], "--dlq-topic", t["dlq"],
            "--checkpoint-dir", str(self.workdir / "checkpoint"), "--input-parallelism", "2",
            "--set", "enrichment_cost_ms=2", "--trigger-interval-s", "1",
            "--metrics-port", "0", "--max-shed-fraction", "0", "--standby", standby],
            self.workdir, self.env)
        self.children.append(child)
        return child

    def heard(self, at: float, metrics: TaskMetrics) -> None:
        self.last_heard[metrics.instance_id] = (at, metrics)
        if metrics.batch_id >= 0 and metrics.input_rows > 0:
            self.commits.append(metrics)

    def commit_after(self, instance: str, after_ms: int) -> int | None:
        """When (epoch ms, the job's clock) the first batch with rows of `instance` that
        ended after `after_ms` did (a killed process's last records may still arrive after
        the kill, under the instance id its successor takes)."""
        return min((m.batch_end_ms for m in self.commits
                    if m.instance_id == instance and m.batch_end_ms > after_ms), default=None)

    def until(self, found: Callable[[], int | None], timeout_s: float, what: str) -> int:
        try:
            self.wait(lambda: found() is not None, timeout_s, what)
        except RuntimeError as timed_out:
            raise RuntimeError(f"{timed_out}\n{self.heard_lately()}") from None
        value = found()
        assert value is not None
        return value

    def heard_lately(self) -> str:
        """What each instance last said and when, and whether the benchmark's reader has
        everything the broker holds: why a wait for its records timed out."""
        now = time.monotonic()
        said = "; ".join(f"{name}: batch {m.batch_id}{' (beat)' if m.beat else ''} "
                         f"{now - at:.0f} s ago" for name, (at, m) in self.last_heard.items())
        ends = self._tail.ends_now()
        return (f"last heard: {said or 'nothing'}; the reader "
                f"{'has' if self._tail.reached(ends) else 'lags behind'} every record "
                f"the broker holds now ({ends})")

    def warm_standby(self, child: Child, timeout_s: float = 240) -> None:
        """Until the standby's warm-up batch ran (its log says so)."""
        self.wait(lambda: "standby warm-up:" in child.log_path.read_text(errors="replace"),
                  timeout_s, f"{child.name}'s warm-up")

    def hot_standby(self, child: Child, timeout_s: float = 240) -> None:
        """Until the hot standby's own run committed two batches after its copy."""
        own = instance_dir(str(self.workdir / "checkpoint"), child.name)
        copied: list[int] = []

        def trailing() -> bool:
            found = committed_ends(own)
            if found is not None and not copied:
                copied.append(found[0])
            return found is not None and found[0] >= copied[0] + 2

        self.wait(trailing, timeout_s, f"{child.name}'s run trailing the active")

    def drop(self, child: Child) -> None:
        self.children.remove(child)


def now_ms() -> int:
    return int(time.time() * 1000)


def kill(loop: Instances, active: Child) -> int:
    """Once a batch of `active` committed from now on (the kill falls mid-stream), kill it
    with SIGKILL; returns when (epoch ms)."""
    since = now_ms()
    loop.until(lambda: loop.commit_after(active.name, since), 120, f"a batch of {active.name}")
    loop.drop(active)
    active.kill()
    return now_ms()


def group_usage(group: int) -> tuple[float, float]:
    """CPU seconds used so far and resident MiB of process group `group` (a child and the
    JVM and Python workers it started), from /proc."""
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu_s = rss = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == group:  # after the name: state, ppid, pgrp, …
            cpu_s += (int(fields[11]) + int(fields[12])) / ticks
            rss += int(fields[21]) * page
    return cpu_s, rss / 2**20


def cost(kind: str, standby: Child, active: Child) -> Cost:
    """Both process groups' CPU (cores) and memory over `COST_WINDOW_S`."""
    before = {c.name: group_usage(c.process.pid) for c in (standby, active)}
    time.sleep(COST_WINDOW_S)
    usage = {}
    for c in (standby, active):
        cpu_s, rss_mib = group_usage(c.process.pid)
        usage[c.name] = Usage(round((cpu_s - before[c.name][0]) / COST_WINDOW_S, 2),
                              round(rss_mib))
    return Cost(kind, usage[standby.name], usage[active.name])


def fail_over(loop: Instances, active: Child, standby: Child,
              kind: str = "warm") -> FailoverRun:
    """Times from each record's own stamp (the processes share this machine's clock), not
    from when the benchmark read it."""
    killed_ms = kill(loop, active)
    decided_ms = loop.until(lambda: next((d.decided_at_ms for _, d in loop.decisions
                                          if d.action == "failover"
                                          and d.decided_at_ms > killed_ms), None), 120,
                            "the failover decision")
    first_ms = loop.until(lambda: loop.commit_after(standby.name, killed_ms), 180,
                          f"{standby.name}'s first commit")
    pause_ms = loop.until(lambda: next((a.pause_ms for _, a in loop.acks
                                        if a.acked_at_ms > killed_ms
                                        and a.instance_id == standby.name), None), 120,
                          "the promotion's ack")
    return FailoverRun(active.name, standby.name, (decided_ms - killed_ms) / 1000,
                       (first_ms - killed_ms) / 1000, pause_ms / 1000, kind)


@dataclass(frozen=True)
class Restart:
    """kill -9 → the restarted process's first commit, and where the time went (each phase
    from the end of the one before): the process up to its SparkSession, the session, the
    query's start (the checkpoint, the plan), and its first batch to its commit."""

    kill_to_first_commit_s: float
    to_session_s: float
    session_s: float
    query_start_s: float
    first_batch_s: float


PHASES = (("SparkSession", "SparkSession "), ("query started", " started at epoch "))
"""Log lines (a substring of each) that end the phases before the first batch."""


def restart_phases(log: str, killed_ms: int, first_ms: int) -> Restart:
    """The phases of one cold restart, from its process's log (its lines' times, this
    machine's clock) and its first commit's stamp."""
    stamps = []
    for _name, marker in PHASES:
        line = next(line for line in log.splitlines() if marker in line)
        stamps.append(_log_ms(line))
    session_s = float(log.split("SparkSession ")[1].split(" up in ")[1].split(" s")[0])
    session_done, query_done = stamps
    return Restart((first_ms - killed_ms) / 1000,
                   round((session_done - killed_ms) / 1000 - session_s, 3), session_s,
                   (query_done - session_done) / 1000, (first_ms - query_done) / 1000)


def _log_ms(line: str) -> int:
    """A log line's time (`logging`'s asctime: local time, milliseconds after a comma)."""
    stamp, millis = line[:23].split(",")
    return int(time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) * 1000) + int(millis)


def cold_restart(loop: Instances, active: Child) -> tuple[Restart, Child]:
    """kill -9 of the active and a new process at once under its instance id: → first commit."""
    killed_ms = kill(loop, active)
    restarted = loop.start_instance(active.name, Role.ACTIVE)
    first_ms = loop.until(lambda: loop.commit_after(active.name, killed_ms), 300,
                          "the restarted process's first commit")
    log = restarted.log_path.read_text(errors="replace")
    return restart_phases(log, killed_ms, first_ms), restarted


@dataclass(frozen=True)
class Measured:
    failovers: list[FailoverRun]
    cold: list[Restart]
    costs: list[Cost]


def failovers(loop: Instances, active: Child, standby: Child, runs: int,
              kind: str) -> tuple[list[FailoverRun], Child, Child]:
    """`runs` failovers, the killed instance back each time as the next standby of `kind`;
    the last active and standby."""
    ready = loop.hot_standby if kind == "hot" else loop.warm_standby
    done = []
    for n in range(runs):
        done.append(fail_over(loop, active, standby, kind))
        print(f"  {kind} failover {n + 1}: {done[-1]}", flush=True)
        active, standby = standby, loop.start_instance(f"{active.name}{n}", Role.STANDBY, kind)
        ready(standby)
    return done, active, standby


def measure(bootstrap: str, workdir: Path, runs: int, rate: float) -> Measured:
    loop = Instances(bootstrap, workdir)
    stop = threading.Event()
    try:
        active = loop.start_instance("a", Role.ACTIVE)
        standby = loop.start_instance("b", Role.STANDBY)
        loop.start_controller()
        load = LoadSpec(bootstrap, loop.topics["in"], RateProfile("constant", rate, rate),
                        duration_s=24 * 3600)
        threading.Thread(target=run_load, args=(load, Ledger(10_000), stop), daemon=True).start()
        loop.warm_standby(standby)
        costs = [cost("warm", standby, active)]
        warm, active, standby = failovers(loop, active, standby, runs, "warm")
        loop.drop(standby)
        standby.stop(60)
        cold = []
        for n in range(runs):
            restart, active = cold_restart(loop, active)
            cold.append(restart)
            print(f"  cold restart {n + 1}: {restart}", flush=True)
        loop.drop(active)
        active.stop(60)
        stopped_ms = now_ms()
        active = loop.start_instance(active.name, Role.ACTIVE, "hot")
        # The standby only once the restarted active commits: a stopped query is failed over
        # to the first standby heard, and one started beside the active may be heard first.
        loop.until(lambda: loop.commit_after(active.name, stopped_ms), 300,
                   f"{active.name}'s first commit after its restart")
        standby = loop.start_instance("h", Role.STANDBY, "hot")
        loop.hot_standby(standby)
        costs.append(cost("hot", standby, active))
        hot, _active, _standby = failovers(loop, active, standby, runs, "hot")
        return Measured(warm + hot, cold, costs)
    finally:
        stop.set()
        loop.close()


def summary(runs: list[FailoverRun], cold: list[Restart]) -> dict[str, float]:
    def median(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    warm = [f for f in runs if f.standby == "warm"]
    hot = [f for f in runs if f.standby == "hot"]
    return {"kill_to_decision_s": median([f.kill_to_decision_s for f in warm]),
            "kill_to_first_commit_s": median([f.kill_to_first_commit_s for f in warm]),
            "ack_pause_s": median([f.ack_pause_s for f in warm]),
            "hot_kill_to_first_commit_s": median([f.kill_to_first_commit_s for f in hot]),
            "hot_ack_pause_s": median([f.ack_pause_s for f in hot]),
            "cold_restart_s": median([r.kill_to_first_commit_s for r in cold]),
            "restart_to_session_s": median([r.to_session_s for r in cold]),
            "restart_session_s": median([r.session_s for r in cold]),
            "restart_query_start_s": median([r.query_start_s for r in cold]),
            "restart_first_batch_s": median([r.first_batch_s for r in cold])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="failovers, then cold restarts")
    parser.add_argument("--rate", type=float, default=150.0, help="input records/s")
    args = parser.parse_args()
    load_before = record.load_average()
    with local_broker() as bed:
        measured = measure(bed.bootstrap_servers, bed.workdir, args.runs, args.rate)
    runs, cold = measured.failovers, measured.cold
    medians = summary(runs, cold)
    warm = [f for f in runs if f.standby == "warm"]
    hot = [f for f in runs if f.standby == "hot"]
    print(f"\n{'figure':<44} {'median s':>8} {'min-max s':>11}")
    rows = (("kill -9 → failover decision", [f.kill_to_decision_s for f in runs]),
            ("kill -9 → promoted warm standby's commit", [f.kill_to_first_commit_s for f in warm]),
            ("warm promotion's pause (its ack)", [f.ack_pause_s for f in warm]),
            ("kill -9 → promoted hot standby's commit", [f.kill_to_first_commit_s for f in hot]),
            ("hot promotion's pause (its ack)", [f.ack_pause_s for f in hot]),
            ("kill -9 → restarted process's first commit",
             [r.kill_to_first_commit_s for r in cold]),
            ("  process start to its SparkSession", [r.to_session_s for r in cold]),
            ("  the SparkSession", [r.session_s for r in cold]),
            ("  the query's start", [r.query_start_s for r in cold]),
            ("  its first batch, to the commit", [r.first_batch_s for r in cold]))
    for name, values in rows:
        print(f"{name:<44} {statistics.median(values):8.1f} "
              f"{min(values):5.1f}-{max(values):<5.1f}")
    for c in measured.costs:
        print(f"{c.standby} standby: {c.standby_usage}, its active: {c.active_usage}")
    record.write("failover", {"runs": args.runs, "rate_per_s": args.rate, "target_s": TARGET_S,
                              "cost_window_s": COST_WINDOW_S, "summary": medians,
                              "failovers": [asdict(f) for f in runs],
                              "cold_restarts": [asdict(r) for r in cold],
                              "costs": [asdict(c) for c in measured.costs]}, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
