"""A test bed for fault injection: real job and controller processes, real broker, load with
sequence numbers, and the exact accounting of `tests.accounting` at the end.

Each fault test (and the standalone-cluster tests) takes one `FaultBed` (the `bed` fixture:
uuid topics, its own checkpoint; `beside` adds another query's), breaks something,
lets the system recover, and checks that the committed output holds every produced record
exactly once. `recovery_s` measures the time from the fault to the first batch with rows
committed after it (the job publishes a batch's metrics after its commit), which the tests
print.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from schemas import Ack, ControlTuple, Role, TaskMetrics
from schemas.records import _Record
from streamctl.cards import CardLedger
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.tail import Tail
from tests.accounting import (
    assert_every_record_accounted_for,
    assert_transactions_scored_once,
    flush_last_windows,
)
from tests.support.bed import Watch, assert_running, bed_env
from tests.support.control import publish, send_and_await, signed
from tests.support.kafka import NewTopics, decoded_or_none, end_offsets, read_committed
from tests.support.waiting import until

R = TypeVar("R", bound=_Record)
WINDOW_MS = 5_000
LOAD_PER_S = 50.0
"""The bed's steady load (records/s): well within what either job processes at its starting
size here, even beside the suite's busiest units (the fraud job scored 100-130/s at 2 state
partitions there). Its batches then stay short, so a wait for the next commit is a wait of
seconds, and a fault, not the load, is what a recovery time measures; and the load that piles
up while Spark starts makes a first batch of seconds, not half a minute."""
FIRST_BATCHES_S = 330.0
"""The budget for a bed's first committed batch (see `FaultBed.wait_first_batches`)."""
CONTROL_KEY = "fault-suite-control-key"
"""Shared by the job and the controller of a bed: tuples are signed and checked."""
TOPIC_KINDS = ("input", "output", "dlq", "metrics", "control", "acks", "decisions", "lease")
HEARTBEAT = ("--heartbeat-interval-s", "1")
"""Job option: a standby (or idle active) heartbeats every second."""
FAST_DETECTION = ("--lost-after-intervals", "30", "--lost-after-min-s", "8",
                  "--lost-after-beats", "5", "--ack-timeout-s", "60")
"""Controller options: a standby is live while heard from within 8 s (the default 25 s is for
idle jobs). An active is lost once its liveness beats stop for 5 of their 1 s intervals,
whatever the others say (a kill -9 or a SIGSTOP, what these tests do): the default 2.5 took a
live active starved for 3.3 s (the suite at a load of 23 on two cores) for lost. Its batch is
hung only past 30 batch intervals: under this suite's steady load a batch takes 1-3 s, but
beside the capacity-measuring unit one took 10 s, and another 24 s, and the controller failed
the live active over before the test's kill -9."""
SENSOR_JOB = ("--job", "sensor-averages", "--set", f"window_s={WINDOW_MS // 1000}",
              "--set", "watermark_s=5")
"""The bed's job by default: windows checked exactly by `finish_and_check` at the end."""
FRAUD_JOB = ("--job", "fraud-detection", "--state-partitions", "2",
             "--max-state-partitions", "8", "--set", "watermark_s=600")
"""A job whose output can be checked at any cut while load goes on: every card transaction
scored once with its account's running count (`check_scored_so_far`)."""


@dataclass
class FaultBed:
    bootstrap: str
    topics: dict[str, str]
    workdir: Path
    query_id: str = "faults"
    job_options: tuple[str, ...] = SENSOR_JOB
    children: list[Child] = field(default_factory=list)
    ledger: Ledger = field(default_factory=lambda: Ledger(WINDOW_MS))
    cards: CardLedger = field(default_factory=CardLedger)
    """The load's acknowledged transactions when the job is `FRAUD_JOB`."""
    _stop_load: threading.Event = field(default_factory=threading.Event)
    _load: threading.Thread | None = None
    _watch: Watch | None = None

    @property
    def scores_cards(self) -> bool:
        """Whether the job is `FRAUD_JOB` (with any options added to it)."""
        return self.job_options[:len(FRAUD_JOB)] == FRAUD_JOB

    @classmethod
    def create(cls, bootstrap: str, new_topics: NewTopics, workdir: Path) -> FaultBed:
        topics = new_topics(**{k: 2 if k in ("input", "output") else 1 for k in TOPIC_KINDS})
        return cls(bootstrap, topics, workdir)

    def beside(self, query_id: str, new_topics: NewTopics, workdir: Path) -> FaultBed:
        """Another query's bed on this one's control plane (its metrics, control, acks,
        decisions and lease topics: one controller sees both queries), with an input, output,
        dead letters and checkpoint of its own."""
        own = new_topics(**{k: 2 if k in ("input", "output") else 1
                            for k in ("input", "output", "dlq")})
        return FaultBed(self.bootstrap, {**self.topics, **own}, workdir, query_id,
                        self.job_options)

    @property
    def env(self) -> dict[str, str]:
        return bed_env(self.bootstrap, self.topics, CONTROL_KEY)

    def start_job(self, name: str = "job", *extra: str) -> Child:
        t = self.topics
        child = start_child(name, [
            "job", "run", *self.job_options,
            "--query-id", self.query_id, "--instance-id", name,
            "--input-topic", t["input"], "--output-topic", t["output"], "--dlq-topic", t["dlq"],
            "--checkpoint-dir", str(self.workdir / "checkpoint"), "--input-parallelism", "2",
            "--set", "enrichment_cost_ms=2", "--trigger-interval-s", "1",
            "--metrics-port", "0", "--max-shed-fraction", "0",  # every record accounted for
            *extra,
        ], self.workdir, self.env)
        self.children.append(child)
        return child

    def start_standby(self, name: str, *extra: str) -> Child:
        """A standby instance of the bed's query, on the same checkpoint directory."""
        return self.start_job(name, "--role", "standby", *HEARTBEAT, *extra)

    def start_controller(self, name: str = "controller", *extra: str) -> Child:
        child = start_child(name, ["controller", "run", "--metrics-port", "0", *extra],
                            self.workdir, self.env)
        self.children.append(child)
        return child

    def start_load(self, rate_per_s: float = LOAD_PER_S) -> None:
        """Constant load of the job's kind (readings, or transactions for `FRAUD_JOB`)."""
        cards = self.scores_cards
        spec = LoadSpec(self.bootstrap, self.topics["input"],
                        RateProfile("constant", rate_per_s, rate_per_s), duration_s=3600,
                        sensors=20, window_ms=WINDOW_MS, event_type="card" if cards else "sensor",
                        accounts=100)
        ledger = self.cards if cards else self.ledger
        self._load = threading.Thread(target=run_load, args=(spec, ledger, self._stop_load),
                                      daemon=True)
        self._load.start()

    def stop_load(self) -> None:
        self._stop_load.set()
        if self._load is not None:
            self._load.join(60)
        failed = self.ledger.failed + self.cards.failed
        assert failed == 0, f"{failed} records were not acknowledged"

    @property
    def watch(self) -> Watch:
        """The bed's watch over its query's metrics, decisions and acks (opened on first use)."""
        if self._watch is None:
            self._watch = Watch(self.bootstrap, self.topics, self.query_id, self.children)
        return self._watch

    def follow_commits(self) -> None:
        """Read what arrived; fail if a process the test did not stop has died."""
        self.watch.consume(0.3)

    @property
    def commits(self) -> list[TaskMetrics]:
        """The committed batches with rows seen so far, of any instance."""
        return self.watch.commits()

    def committed_after(self, at_ms: int, instance: str | None = None) -> TaskMetrics | None:
        return next((m for m in self.commits if m.batch_start_ms > at_ms
                     and instance in (None, m.instance_id)), None)

    def slowest_batch_s(self) -> float:
        """The longest time between two commits seen so far (0 before two): how slow this
        machine runs the bed's batches right now, under whatever else it is running."""
        ends = sorted(m.batch_end_ms for m in self.commits)
        return max((b - a for a, b in itertools.pairwise(ends)), default=0) / 1000

    def wait_commit_after(self, at_ms: int, timeout_s: float, what: str,
                          instance: str | None = None) -> TaskMetrics:
        """Wait for a batch with rows committed after `at_ms` (of `instance`, if given), at
        most `timeout_s`, or three of the slowest batch intervals seen so far if longer: on a
        loaded machine a batch (a repartition above all) can take far longer than here idle."""
        def seen() -> bool:
            self.follow_commits()
            return self.committed_after(at_ms, instance) is not None
        self.follow_commits()
        try:
            until(seen, max(timeout_s, 3 * self.slowest_batch_s()), what)
        except AssertionError as exc:  # why no batch committed is in the processes' own lines
            raise AssertionError(f"{exc}{self.process_logs()}") from None
        found = self.committed_after(at_ms, instance)
        assert found is not None
        return found

    def wait_read_to_end(self, timeout_s: float, what: str) -> None:
        """Wait until the job's committed batches have read every record now in its input (the
        broker's end offsets): after the load stops, the last records may ride in a batch that
        began before it stopped, so waiting for a batch started later can wait forever."""
        topic = self.topics["input"]
        ends = end_offsets(self.bootstrap, topic)

        def read_to_end() -> bool:
            self.follow_commits()
            read: dict[int, int] = {}
            for m in self.commits:
                for p in m.partitions:
                    if p.topic == topic:
                        read[p.partition] = max(read.get(p.partition, 0), p.end_offset)
            return all(read.get(partition, 0) >= end for partition, end in ends.items())
        try:
            until(read_to_end, max(timeout_s, 3 * self.slowest_batch_s()), what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{self.process_logs()}") from None

    def start_active_and_standby(self, *extra: str) -> None:
        """job-1 active, job-2 standby (`extra`: both jobs' options), the controller; load
        flowing, the active's first batches committed, the standby heard from."""
        self.start_job("job-1", *extra)
        self.start_standby("job-2", *extra)
        self.start_controller("controller", *FAST_DETECTION)
        self.start_load()
        self.wait_first_batches("the active's first batches under load")
        self.wait_heartbeat("job-2", Role.STANDBY, now_ms(), 60)

    def warm(self) -> None:
        """Load flowing, the first batches and one more committed (the job started)."""
        self.start_load()
        self.wait_first_batches()
        self.wait_commit_after(now_ms(), 60, "one more batch")

    def wait_first_batches(self, what: str = "the job's first batches under load") -> None:
        """Wait for the bed's first batches: the job's Spark session, its first (planning,
        state-initialising) batch and the load's first records, which together took over four
        minutes on a loaded 16-core CI machine against about one minute here idle."""
        self.wait_commit_after(now_ms(), FIRST_BATCHES_S, what)

    def recovery_s(self, fault_ms: int, timeout_s: float = 150.0) -> float:
        """Seconds from the fault to the end of the first batch with rows started after it."""
        first = self.wait_commit_after(fault_ms, timeout_s, "the first commit after the fault")
        return (first.batch_end_ms - fault_ms) / 1000

    def wait_heartbeat(self, instance: str, role: Role, after_ms: int, timeout_s: float) -> None:
        """Until `instance` publishes a record with `role` stamped after `after_ms`."""
        beats = Tail(self.bootstrap, {self.topics["metrics"]: TaskMetrics}, start_at_ms=after_ms)
        try:
            until(lambda: any(isinstance(m, TaskMetrics) and m.instance_id == instance
                              and m.role is role and m.batch_end_ms > after_ms
                              for _topic, m in beats.poll(0.5)),
                  timeout_s, f"a {role.value} record of {instance}")
        finally:
            beats.close()

    def wait_control(self, matches: Callable[[ControlTuple], bool],
                     timeout_s: float) -> ControlTuple:
        """The first control tuple that `matches`, as soon as it is on the control topic."""
        tail = Tail(self.bootstrap, {self.topics["control"]: ControlTuple}, from_beginning=True)
        found: list[ControlTuple] = []

        def seen() -> bool:
            found.extend(t for _topic, t in tail.poll(0.2)
                         if isinstance(t, ControlTuple) and matches(t))
            return bool(found)
        try:
            until(seen, timeout_s, "the control tuple")
        finally:
            tail.close()
        return found[0]

    def send_control(self, parameter: str, value: str, epoch: int) -> ControlTuple:
        """A control tuple signed with the bed's key, as the controller would send it (the
        test awaits its ack itself: a fault may come in between)."""
        control = signed(self.query_id, parameter, value, epoch, CONTROL_KEY.encode())
        publish(self.bootstrap, self.topics["control"], control)
        return control

    def send_and_await(self, parameter: str, value: str, epoch: int,
                       timeout_s: float = 150.0) -> Ack:
        """A signed tuple sent as `job send` sends it, and the job's ack; if none comes, the
        failure says which of the bed's processes died."""
        try:
            return send_and_await(self.bootstrap, self.query_id, parameter, value, epoch,
                                  CONTROL_KEY.encode(), control_topic=self.topics["control"],
                                  ack_topic=self.topics["acks"], timeout_s=timeout_s)
        except Exception:
            self.assert_alive()
            raise

    def read_all(self, kind: str, record_type: type[R]) -> list[R]:
        """Every record on one of the bed's control-plane topics so far (undecodable ones
        left out)."""
        return [r for r in decoded_or_none(read_committed(self.bootstrap, self.topics[kind]),
                                           record_type) if r is not None]

    def process_logs(self, lines: int = 40) -> str:
        """The newest lines of each job's and controller's log, without the Kafka clients'
        reconnection noise (during a broker fault it fills the tail) or a Java stack trace's
        frames (its exception line stays), and the machine's load average: a wait that timed
        out on a loaded machine says so."""
        noise = ("NetworkClient", "|FAIL|", "|REQTMOUT|", "ProcessingTimeExecutor")
        def kept(line: str) -> bool:
            return not line.startswith("\tat ") and not any(n in line for n in noise)
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        return f"\nload average (1, 5, 15 min): {load}" + "".join(
            f"\n--- {child.name} ({child.log_path})\n" + "\n".join(
                [line for line in child.log_path.read_text(errors="replace").splitlines()
                 if kept(line)][-lines:])
            for child in self.children if child.name.startswith(("job", "controller")))

    def assert_alive(self, *names: str) -> None:
        assert_running([c for c in self.children if not names or c.name in names])

    def processes_alive(self) -> bool:
        """True, or a failure naming the process that died, with its log (for `holds`)."""
        self.assert_alive()
        return True

    def finish_and_check(self) -> None:
        """Stop the load, let the job close every window, check the output exactly."""
        self.stop_load()
        flush_last_windows(self.bootstrap, self.topics["input"])
        assert_every_record_accounted_for(self.bootstrap, self.topics["output"], self.ledger,
                                          input_topic=self.topics["input"])

    def check_scored_so_far(self, timeout_s: float = 120.0) -> int:
        """`FRAUD_JOB` under load: every transaction acknowledged until now is in the committed
        output exactly once, with a running count per account. Returns how many."""
        assert self.cards.failed == 0, f"{self.cards.failed} transactions not acknowledged"
        cut = self.cards.snapshot()
        assert_transactions_scored_once(self.bootstrap, self.topics["output"], cut, timeout_s)
        return sum(cut.values())

    def close(self) -> None:
        self._stop_load.set()
        stop_all(self.children)
        if self._watch is not None:
            self._watch.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def report(fault: str, seconds: float) -> None:
    """The line each fault test prints (`pytest -s`): the time the fault cost."""
    print(f"\n[fault] {fault}: first committed batch {seconds:.1f} s after the fault")
