"""Benchmark: the pause each control action causes, beside a cold restart, in one run.

Starts a local broker and the real job process (`streamctl job run`, sensor job) under a
constant load, then sends signed control tuples, each action forth and back `--runs` times,
and reads the pause from each ack: for a restart, the gap in committed output from the last
batch before the change (or the change's start, if later) to the first batch committed after
it; for a swap (output_topic, shed_fraction, udf_version), the time new batches were held
(see `streaming_jobs.runtime.owner.Reconfigurer`). For input_topic the
load moves to the other topic first (the switch's contract); the drain that follows runs
while the query runs and is not part of the pause. Then it measures the alternative the field
uses today: stop the job process (SIGTERM) and start a new one from the same checkpoint,
timing the same gap from the job's own metrics (last committed batch of the old process →
first committed batch of the new one).

    .venv/bin/python -m bench.pauses --runs 3

prints a table and writes `bench/results/pauses.json` (`bench.report` renders it into
`docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer

from bench import record
from bench.bed import CONTROL_KEY, local_broker, process_env
from schemas import Ack, ControlTuple, Outcome, TaskMetrics, codec_for
from schemas.auth import sign
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child
from streamctl.profiles import RateProfile
from streamctl.security.kafka import IDEMPOTENT, client_config
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail

ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("input_parallelism", "4", "2"),
    ("max_offsets_per_trigger", "2000", "4000"),
    ("shed_fraction", "0.1", "0"),
    ("udf_version", "v2", "v1"),
    ("output_topic", "{out2}", "{out}"),
    ("state_partitions", "8", "4"),
    ("input_topic", "{in2}", "{in}"),
)
"""(parameter, changed value, original value); topic values are filled in per run."""




@dataclass(frozen=True)
class ActionResult:
    parameter: str
    outcomes: tuple[str, ...]
    pauses_s: tuple[float, ...]
    detail: str

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.pauses_s) if self.pauses_s else None


class Bench:
    """One job process under load, the control and ack topics, and its metrics."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap, self.workdir = bootstrap, workdir
        tag = uuid.uuid4().hex[:8]
        kinds = ("in", "in2", "out", "out2", "dlq", "metrics", "control", "acks")
        self.topics = {k: f"bench-pauses-{tag}-{k}" for k in kinds}
        ensure_topics(bootstrap, [TopicSpec(n, partitions=4 if k == "in2" else 2 if k in (
            "in", "out", "out2") else 1) for k, n in self.topics.items()])
        self.query_id = f"bench-pauses-{tag}"
        self.epoch = 0
        self._tail = Tail(bootstrap, {self.topics["acks"]: Ack,
                                      self.topics["metrics"]: TaskMetrics}, from_beginning=True)
        self._producer = Producer(client_config(bootstrap, **IDEMPOTENT))
        self.commits: list[TaskMetrics] = []
        self._acks: dict[str, Ack] = {}
        self._load: tuple[threading.Thread, threading.Event] | None = None
        self._rate_per_s = 0.0

    def start_job(self, name: str) -> Child:
        t = self.topics
        return start_child(name, [
            "job", "run", "--job", "sensor-averages",
            "--query-id", self.query_id, "--instance-id", name,
            "--input-topic", t["in"], "--output-topic", t["out"], "--dlq-topic", t["dlq"],
            "--metrics-topic", t["metrics"], "--control-topic", t["control"],
            "--ack-topic", t["acks"], "--checkpoint-dir", str(self.workdir / "checkpoint"),
            "--input-parallelism", "2", "--set", "enrichment_cost_ms=2",
            "--trigger-interval-s", "1", "--metrics-port", "0",
        ], self.workdir, process_env(self.bootstrap))

    def start_load(self, rate_per_s: float, topic: str = "in") -> None:
        self._rate_per_s = rate_per_s
        self.move_load(topic)

    def move_load(self, topic: str) -> None:
        """Producers move to `topic`: the old load flushes (all acknowledged), a new starts."""
        self._stop_current_load()
        spec = LoadSpec(self.bootstrap, self.topics[topic],
                        RateProfile("constant", self._rate_per_s, self._rate_per_s),
                        duration_s=24 * 3600)
        stop = threading.Event()
        thread = threading.Thread(target=run_load, args=(spec, Ledger(10_000), stop),
                                  daemon=True)
        thread.start()
        self._load = (thread, stop)

    def _stop_current_load(self) -> None:
        if self._load is not None:
            thread, stop = self._load
            stop.set()
            thread.join(60)

    def poll(self) -> None:
        for _topic, got in self._tail.poll(0.3):
            if isinstance(got, Ack):
                self._acks[got.control_id] = got
            elif isinstance(got, TaskMetrics) and got.batch_id >= 0 and got.input_rows:
                self.commits.append(got)
                self.epoch = max(self.epoch, got.config_epoch)

    def wait(self, done: Callable[[], bool], timeout_s: float, what: str, job: Child) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            if not job.alive():
                raise RuntimeError(f"the job died:\n{job.log_tail()}")
            self.poll()

    def send(self, parameter: str, value: str, job: Child) -> Ack:
        self.epoch += 1
        control = sign(ControlTuple(
            control_id=str(uuid.uuid4()), query_id=self.query_id, operator_id="bench",
            parameter=parameter, value=value.format(**self.topics), epoch=self.epoch,
            issuer="bench.pauses", reason="benchmark", issued_at_ms=int(time.time() * 1000)),
            CONTROL_KEY.encode())
        self._producer.produce(self.topics["control"], key=f"{self.query_id}/{parameter}",
                               value=codec_for(ControlTuple).encode(control))
        self._producer.flush(30)
        self.wait(lambda: control.control_id in self._acks, 300, f"the ack of {parameter}", job)
        return self._acks[control.control_id]

    def steady(self, job: Child, batches: int = 3) -> None:
        """Let a few batches commit, so each action starts from a running query."""
        target = len(self.commits) + batches
        self.wait(lambda: len(self.commits) >= target, 180, "steady batches", job)

    def close(self) -> None:
        self._stop_current_load()
        self._tail.close()


def measure_actions(bench: Bench, job: Child, runs: int) -> list[ActionResult]:
    results = []
    for parameter, changed, original in ACTIONS:
        outcomes, pauses, detail = [], [], ""
        for _ in range(runs):
            for value in (changed, original):
                bench.steady(job)
                if parameter == "input_topic":
                    bench.move_load(value.strip("{}"))
                ack = bench.send(parameter, value, job)
                outcomes.append(ack.outcome.value.lower())
                detail = ack.detail
                if ack.outcome is Outcome.APPLIED:
                    pauses.append(ack.pause_ms / 1000)
            if ack.outcome is not Outcome.APPLIED:
                break  # rejected (e.g. not supported here): once is enough to say why
        results.append(ActionResult(parameter, tuple(outcomes), tuple(pauses), detail))
        print(f"  {parameter}: {outcomes[-1]}, pauses {pauses}", flush=True)
    return results


def measure_cold_restarts(bench: Bench, job: Child, runs: int) -> tuple[list[float], Child]:
    """Stop the process, start a new one: last commit of the old → first commit of the new."""
    pauses = []
    for n in range(runs):
        bench.steady(job)
        job.stop(60)
        stopped_ms = int(time.time() * 1000)
        job = bench.start_job(f"cold-{n}")
        bench.wait(functools.partial(_committed_after, bench, stopped_ms), 300,
                   "the first batch of the restarted process", job)
        # Read only now: by the new process's first commit, every metric the old one sent while
        # stopping has arrived, so its last commit is not taken too early.
        last = max(c.batch_end_ms for c in bench.commits if c.batch_start_ms <= stopped_ms)
        first = min(c.batch_end_ms for c in bench.commits if c.batch_start_ms > stopped_ms)
        pauses.append((first - last) / 1000)
        print(f"  cold restart {n + 1}: {pauses[-1]:.1f} s", flush=True)
    return pauses, job


def _committed_after(bench: Bench, at_ms: int) -> bool:
    return any(c.batch_start_ms > at_ms for c in bench.commits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="changes per direction and action")
    parser.add_argument("--rate", type=float, default=200.0, help="input records/s")
    args = parser.parse_args()
    args.load_before = record.load_average()
    with local_broker() as bed:
        bench = Bench(bed.bootstrap_servers, bed.workdir)
        job = bench.start_job("warm")
        try:
            bench.start_load(args.rate)
            actions = measure_actions(bench, job, args.runs)
            cold, job = measure_cold_restarts(bench, job, args.runs)
        finally:
            job.stop(60)
            bench.close()
    _report(actions, cold, args)
    return 0


def _report(actions: list[ActionResult], cold: list[float], args: argparse.Namespace) -> None:
    cold_median = statistics.median(cold)
    print(f"\n{'action':<26} {'applied':>7} {'median s':>8} {'min-max s':>11} {'vs cold':>7}")
    for a in actions:
        applied = sum(o == "applied" for o in a.outcomes)
        shown = (f"{a.median_s:8.1f} {min(a.pauses_s):5.1f}-{max(a.pauses_s):<5.1f} "
                 f"{a.median_s / cold_median:6.2f}x" if a.median_s is not None
                 else f"{a.outcomes[-1]}: {a.detail}")
        print(f"{a.parameter:<26} {applied:>3}/{len(a.outcomes):<3} {shown}")
    print(f"{'cold restart (new process)':<26} {len(cold):>7} {cold_median:8.1f} "
          f"{min(cold):5.1f}-{max(cold):<5.1f}   1.00x")
    record.write("pauses", {
        "runs": args.runs, "rate_per_s": args.rate,
        "actions": [asdict(a) | {"median_s": a.median_s} for a in actions],
        "cold_restart_s": cold, "cold_restart_median_s": cold_median}, args.load_before)


if __name__ == "__main__":
    raise SystemExit(main())
