"""Benchmark: kill -9 of a broker on a three-node cluster under load, by the role it plays.

Starts a local three-node KRaft cluster (`stack up --brokers 3`'s layout: every topic three
replicas, `min.insync.replicas` 2), the real fraud-detection job (2 state partitions, 1 s
trigger) under a constant load of card transactions, and no controller (the benchmark sends
the tuples itself, signed as the controller signs them). The input is led by node 1 and the
control and ack topics by node 2, by their replica lists. Each run first returns the cluster
to that layout with every replica in sync and a batch committed, then kills one broker with
SIGKILL:

- input:       the broker leading both input partitions;
- control:     the broker leading the control and ack topics, with a `state_partitions` tuple
               written to it the moment before;
- coordinator: the sink's transaction coordinator, once the job has taken such a tuple (the
               reconfiguration under way).

and times, from the kill, the end of the first batch with rows started after it (the job
publishes a batch's metrics after its commit), the tuple's ack, and, after the killed node is
started again, its return to every in-sync replica set.

    .venv/bin/python -m bench.cluster_faults --runs 3

prints a table (medians) and writes `bench/results/cluster_faults.json` (`bench.report` renders
it into `docs/benchmarks.md`). tests/faults/test_cluster_faults.py checks the same faults lose
and duplicate nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import record
from bench.bed import CONTROL_KEY, loop_env
from schemas import Ack, ControlTuple, Outcome, TaskMetrics, auth
from streamctl.cards import CardLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child, sigterm_as_interrupt, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.security.kafka import PLAINTEXT
from streamctl.stack import leaders
from streamctl.stack.cluster import LocalCluster
from streamctl.stack.defaults import default_state_dir
from streamctl.stack.tcp import find_free_ports, port_in_use
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail
from streaming_jobs.runtime.kafka import RecordPublisher
from streaming_jobs.runtime.sink.foreach_batch import transactional_id

FAULTS = ("input", "control", "coordinator")
RATE_PER_S = 100.0
"""Transactions/s: a fraction of what the job scores at 2 state partitions on 2 cores, so a
slow recovery shows as one, not as a backlog worked off."""
PINNED = {"input": [[1, 2, 3], [1, 3, 2]], "control": [[2, 3, 1]], "acks": [[2, 1, 3]]}
"""Replica lists (the first is the preferred leader): one kill takes out the whole input, or
both the control and the ack topic."""
KINDS = ("input", "output", "dlq", "metrics", "control", "acks", "decisions", "lease")
QUERY = "bench-cluster-faults"
FIRST_BATCH_S = 330.0
"""Budget for the job's first commit: its Spark start and first, state-initialising batch."""
RECOVERY_S = 150.0


@dataclass(frozen=True)
class FaultRun:
    fault: str
    node: int
    to_first_commit_s: float
    """Kill → the end of the first batch with rows started after it."""
    to_ack_s: float | None
    """Kill → the tuple's ack (None: no tuple in this fault)."""
    back_in_sync_s: float
    """The killed node's restart → every replica in sync again."""


class ClusterBed:
    """The job on the cluster under load, and what it publishes, as it arrives."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster, self.bootstrap = cluster, cluster.bootstrap_servers
        tag = uuid.uuid4().hex[:8]
        self.topics = {k: f"bench-cluster-{tag}-{k}" for k in KINDS}
        leaders.create_pinned(self.bootstrap, {self.topics[k]: r for k, r in PINNED.items()},
                              {"min.insync.replicas": "2"})
        ensure_topics(self.bootstrap, [TopicSpec(n, partitions=2 if k == "output" else 1)
                                       for k, n in self.topics.items() if k not in PINNED])
        self.commits: list[TaskMetrics] = []
        self.acks: list[Ack] = []
        self.epoch = 0
        self._tail = Tail(self.bootstrap, {self.topics["metrics"]: TaskMetrics,
                                           self.topics["acks"]: Ack}, from_beginning=True)
        self._stop_load = threading.Event()
        try:
            self.job = self._start_job(workdir)
        except BaseException:
            self._tail.close()
            raise
        self.children: list[Child] = [self.job]
        spec = LoadSpec(self.bootstrap, self.topics["input"],
                        RateProfile("constant", RATE_PER_S, RATE_PER_S), duration_s=4 * 3600,
                        event_type="card", accounts=100)
        threading.Thread(target=run_load, args=(spec, CardLedger(), self._stop_load),
                         daemon=True).start()

    def _start_job(self, workdir: Path) -> Child:
        t = self.topics
        env = loop_env(self.bootstrap, t)
        return start_child("job", [
            "job", "run", "--job", "fraud-detection", "--query-id", QUERY,
            "--state-partitions", "2", "--max-state-partitions", "8",
            "--set", "watermark_s=600", "--input-topic", t["input"],
            "--output-topic", t["output"], "--dlq-topic", t["dlq"],
            "--checkpoint-dir", str(workdir / "checkpoint"), "--trigger-interval-s", "1",
            "--metrics-port", "0", "--max-shed-fraction", "0"], workdir, env)

    def poll(self) -> None:
        for _topic, got in self._tail.poll(0.3):
            if isinstance(got, TaskMetrics) and got.batch_id >= 0 and got.input_rows > 0:
                self.commits.append(got)
            elif isinstance(got, Ack):
                self.acks.append(got)

    def wait(self, found: Callable[[], object | None], timeout_s: float, what: str) -> object:
        deadline = time.monotonic() + timeout_s
        while (value := found()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            if not self.job.alive():
                raise RuntimeError(f"the job died:\n{self.job.log_tail()}")
            self.poll()
        return value

    def commit_after(self, at_ms: int, timeout_s: float = RECOVERY_S) -> TaskMetrics:
        found = self.wait(lambda: next((m for m in self.commits if m.batch_start_ms > at_ms),
                                       None), timeout_s, "a batch committed after the fault")
        assert isinstance(found, TaskMetrics)
        return found

    def ack_of(self, control_id: str) -> Ack:
        found = self.wait(lambda: next((a for a in self.acks if a.control_id == control_id),
                                       None), RECOVERY_S, f"the ack of {control_id}")
        assert isinstance(found, Ack)
        return found

    def healthy(self) -> None:
        """Leaders as the topics were made, every replica in sync, a batch committed."""
        topics = list(self.topics.values())
        leaders.await_in_sync(self.bootstrap, topics)
        leaders.elect_preferred(self.bootstrap,
                                [*topics, leaders.TRANSACTION_STATE, leaders.OFFSETS])
        preferred = {self.topics[k]: {p: r[0] for p, r in enumerate(replicas)}
                     for k, replicas in PINNED.items()}
        self.wait(lambda: all(leaders.leaders(self.bootstrap, topic) == led
                              for topic, led in preferred.items()) or None, 60,
                  f"the pinned topics led as made: {preferred}")
        self.commit_after(now_ms(), 60)

    def send_state_partitions(self) -> ControlTuple:
        """A signed tuple toggling the state partitions between 2 and 3, written and flushed
        (not awaited: the fault comes first)."""
        size = self.commits[-1].state_partitions
        self.epoch += 1
        tuple_ = auth.sign(ControlTuple(
            control_id=str(uuid.uuid4()), query_id=QUERY, operator_id="bench",
            parameter="state_partitions", value=str(3 if size == 2 else 2), epoch=self.epoch,
            issuer="bench.cluster_faults", reason="benchmark",
            issued_at_ms=now_ms()), CONTROL_KEY.encode())
        publisher = RecordPublisher(self.bootstrap, "bench-cluster-faults", PLAINTEXT)
        try:
            publisher.publish(self.topics["control"], f"{QUERY}/state_partitions", tuple_)
            publisher.flush()
        finally:
            publisher.close()
        return tuple_

    def restart(self, node: int) -> float:
        """Start a killed node again; seconds until it is back in every in-sync replica set."""
        began = time.monotonic()
        self.cluster.node(node).start(timeout_s=120)
        leaders.await_in_sync(self.bootstrap, self.topics.values())
        return time.monotonic() - began

    def close(self) -> None:
        self._stop_load.set()
        stop_all(self.children)
        self._tail.close()


def run_fault(bed: ClusterBed, fault: str) -> FaultRun:
    bed.healthy()
    control: ControlTuple | None = None
    if fault == "input":
        node = leaders.leaders(bed.bootstrap, bed.topics["input"])[0]
    elif fault == "control":
        node = leaders.leaders(bed.bootstrap, bed.topics["control"])[0]
        control = bed.send_state_partitions()  # written: the kill follows at once
    else:
        node = leaders.transaction_coordinator(bed.bootstrap, transactional_id(QUERY))
        control = bed.send_state_partitions()
        taken = f"control {control.control_id}"
        bed.wait(lambda: True if taken in bed.job.log_path.read_text() else None, 60,
                 "the job taking the tuple")
    leaders.kill_9(bed.cluster.node(node))
    fault_ms = now_ms()
    first = bed.commit_after(fault_ms)
    ack = bed.ack_of(control.control_id) if control is not None else None
    if ack is not None and ack.outcome is not Outcome.APPLIED:
        raise RuntimeError(f"the tuple was not applied: {ack}")
    run = FaultRun(fault, node, (first.batch_end_ms - fault_ms) / 1000,
                   None if ack is None else (ack.acked_at_ms - fault_ms) / 1000,
                   bed.restart(node))
    print(f"  {fault}: node {node} killed; first commit {run.to_first_commit_s:.1f} s after"
          + ("" if run.to_ack_s is None else f", ack {run.to_ack_s:.1f} s")
          + f"; back in sync {run.back_in_sync_s:.1f} s after its restart", flush=True)
    return run


def measure(runs: int) -> list[FaultRun]:
    with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        cluster = LocalCluster(Path(tmp) / "state", 3, free_base_port(),
                               maven_dir=default_state_dir() / "maven")
        cluster.start(timeout_s=180)  # StackError when a node does not come up
        try:
            bed = ClusterBed(cluster, Path(tmp))
            try:
                bed.commit_after(now_ms(), FIRST_BATCH_S)
                return [run_fault(bed, fault) for _ in range(runs) for fault in FAULTS]
            finally:
                bed.close()
        finally:
            cluster.stop(timeout_s=30)


def free_base_port() -> int:
    """A port with the five after it free: three listeners and their controllers."""
    for _ in range(50):
        (base,) = find_free_ports(1)
        if not any(port_in_use(base + i) for i in range(6)):
            return base
    raise RuntimeError("no six consecutive free ports")


def summary(runs: Sequence[FaultRun]) -> list[dict[str, object]]:
    """Per fault, the medians over its runs."""
    rows: list[dict[str, object]] = []
    for fault in FAULTS:
        mine = [r for r in runs if r.fault == fault]
        acks = [r.to_ack_s for r in mine if r.to_ack_s is not None]
        rows.append({"fault": fault, "runs": len(mine),
                     "to_first_commit_s": statistics.median(r.to_first_commit_s for r in mine),
                     "to_ack_s": statistics.median(acks) if acks else None,
                     "back_in_sync_s": statistics.median(r.back_in_sync_s for r in mine)})
    return rows


def now_ms() -> int:
    return int(time.time() * 1000)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_faults", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="kills of each kind (default 3)")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    runs = measure(args.runs)
    rows = summary(runs)
    for row in rows:
        print(row)
    record.write("cluster_faults", {
        "rate_per_s": RATE_PER_S, "runs": [asdict(r) for r in runs], "summary": rows,
    }, load_before, argv=sys.argv[1:] if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
